package store

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The durable event journal of instance sessions. Every durable event is
// written twice in the transaction that makes it: once in its session's
// log, by the session's event sequence (the history a client pages through
// and the aggregate seq of the event), and once in the instance's log, by
// event id (what a reconnecting event stream replays after its
// Last-Event-ID). The session log lives as long as the session; the
// instance log is pruned to a retention window.
//
//	isc/<inst>\0<sid>              the session's event sequence counter
//	ise/<inst>\0<sid>\0<seq hex>   the session's durable events
//	isg/<inst>\0<evt id>           the instance's durable events by id
const (
	pInstEventSeq = "isc/"
	pInstEvent    = "ise/"
	pInstEventLog = "isg/"
)

// AppendSessionEvent takes the session's next event sequence number, asks
// frame for the event's bytes at that number and writes them to the
// session's log and, under id, to the instance's log.
func (t *btx) AppendSessionEvent(inst, sid, id string, frame func(seq uint64) ([]byte, error)) (uint64, error) {
	if err := errors.Join(validInstPart(inst), validInstPart(sid), validInstPart(id)); err != nil {
		return 0, err
	}
	seqKey := instKey(pInstEventSeq, inst, sid)
	var seq uint64
	err := t.kv.Get(seqKey, func(b []byte) error {
		if len(b) != 8 {
			return errors.New("store: bad event sequence")
		}
		seq = binary.BigEndian.Uint64(b)
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return 0, err
	}
	seq++
	raw, err := frame(seq)
	if err != nil {
		return 0, err
	}
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, seq)
	if err := t.kv.Set(seqKey, b); err != nil {
		return 0, err
	}
	if err := t.kv.Set(instKey(pInstEvent, inst, sid, fmt.Sprintf("%016x", seq)), raw); err != nil {
		return 0, err
	}
	return seq, t.kv.Set(instKey(pInstEventLog, inst, id), raw)
}

// SessionEvents calls fn for the session's durable events with a sequence
// number above after, in order.
func (t *btx) SessionEvents(inst, sid string, after uint64, fn func(seq uint64, raw []byte) (bool, error)) error {
	prefix := instKey(pInstEvent, inst, sid, "")
	r := kvRange{Prefix: prefix}
	if after > 0 {
		r.Start = prefix + fmt.Sprintf("%016x", after+1)
	}
	return t.kv.Iterate(r, func(k, v []byte) (bool, error) {
		var seq uint64
		if _, err := fmt.Sscanf(string(k[len(prefix):]), "%x", &seq); err != nil {
			return false, errors.New("store: bad event key")
		}
		return fn(seq, append(make([]byte, 0, len(v)), v...))
	})
}

// InstanceEventsAfter calls fn for the instance's retained durable events
// whose id sorts after afterID, in id order.
func (t *btx) InstanceEventsAfter(inst, afterID string, fn func(id string, raw []byte) (bool, error)) error {
	prefix := instKey(pInstEventLog, inst, "")
	r := kvRange{Prefix: prefix}
	if afterID != "" {
		r.Start = prefix + afterID
	}
	return t.kv.Iterate(r, func(k, v []byte) (bool, error) {
		id := string(k[len(prefix):])
		if id <= afterID {
			return true, nil
		}
		return fn(id, append(make([]byte, 0, len(v)), v...))
	})
}

// PruneInstanceEvents deletes up to limit of the instance log's events whose
// id sorts before beforeID and reports how many it deleted.
func (t *btx) PruneInstanceEvents(inst, beforeID string, limit int) (int, error) {
	prefix := instKey(pInstEventLog, inst, "")
	var keys []string
	err := t.kv.Iterate(kvRange{Prefix: prefix, KeysOnly: true}, func(k, _ []byte) (bool, error) {
		if string(k[len(prefix):]) >= beforeID || len(keys) >= limit {
			return false, nil
		}
		keys = append(keys, string(k))
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := t.del(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// deleteSessionEvents removes a session's log and counter.
func (t *btx) deleteSessionEvents(inst, sid string) error {
	prefix := instKey(pInstEvent, inst, sid, "")
	keys, err := t.suffixes(prefix)
	if err != nil {
		return err
	}
	for _, s := range keys {
		if err := t.del(prefix + s); err != nil {
			return err
		}
	}
	return t.del(instKey(pInstEventSeq, inst, sid))
}

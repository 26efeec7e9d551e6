package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/ids"
	"github.com/agentgate/agentgate/internal/store"
)

// DefaultEventRetention is how long the instance's event log keeps durable
// events for streams that reconnect (a session's own history keeps them
// as long as the session).
const DefaultEventRetention = 24 * time.Hour

// pruneEvery is how many journaled events pass between prunes of the
// instance's event log.
const pruneEvery = 256

// Ev is one event of a batch that PublishEvents sends.
type Ev struct {
	Type string
	Data map[string]any
}

// IsDurable reports whether events of the type are journaled: the
// session's record events and the session.next.* family except the
// streaming deltas.
func IsDurable(typ string) bool {
	switch typ {
	case "session.created", "session.updated":
		return true
	}
	return strings.HasPrefix(typ, "session.next.") && !strings.HasSuffix(typ, ".delta")
}

// EventVersion is the payload version of a durable event type.
func EventVersion(typ string) int {
	if typ == "session.next.step.ended" {
		return 2
	}
	return 1
}

var journaled atomic.Int64

func (s *Service) retention() time.Duration {
	if s.EventRetention > 0 {
		return s.EventRetention
	}
	return DefaultEventRetention
}

// Publish sends one event of a session (see PublishEvents).
func (s *Service) Publish(typ string, info *Info, data map[string]any) {
	s.PublishEvents(info, Ev{typ, data})
}

// PublishEvents sends events of a session, in order; the durable ones are
// journaled before they are sent, without the caller waiting. Each
// event's data gets the session id, and session.next.* events a
// timestamp.
func (s *Service) PublishEvents(info *Info, list ...Ev) {
	s.Bus.PublishBatch(s.sessionEvents(info, list), false)
}

// PublishDurable is PublishEvents that waits until the events are
// journaled and sent, and returns each one's durable sequence number (0
// for an ephemeral one, or when the journal could not be written).
func (s *Service) PublishDurable(info *Info, list ...Ev) []uint64 {
	evs := s.sessionEvents(info, list)
	if err := s.Bus.PublishBatch(evs, true); err != nil && s.Logger != nil {
		s.Logger.Warn("session events: cannot write the journal; the events were sent without replay", zap.Error(err))
	}
	seqs := make([]uint64, len(evs))
	for i, ev := range evs {
		if ev.Durable != nil {
			seqs[i] = ev.Durable.Seq
		}
	}
	return seqs
}

func (s *Service) sessionEvents(info *Info, list []Ev) []*events.Event {
	loc := info.Location
	now := s.NowMS()
	evs := make([]*events.Event, len(list))
	for i, e := range list {
		data := e.Data
		if data == nil {
			data = map[string]any{}
		}
		data["sessionID"] = info.ID
		ev := &events.Event{Type: e.Type, Location: &loc, Data: data}
		if strings.HasPrefix(e.Type, "session.next.") {
			data["timestamp"] = now
		}
		if IsDurable(e.Type) {
			ev.Durable = &events.Durable{AggregateID: info.ID}
		}
		evs[i] = ev
	}
	return evs
}

// Journal writes durable events to their sessions' journals in one
// transaction (the bus's journal); a session that is gone keeps none.
func (s *Service) Journal(evs []*events.Event) error {
	if s.Store == nil {
		return errors.New("no store")
	}
	inst := s.InstanceName()
	var n int64
	err := s.WriteTx(context.Background(), func(tx store.Tx) error {
		n = 0
		live := map[string]bool{}
		for _, ev := range evs {
			sid := ev.Durable.AggregateID
			ev.Durable.Seq = 0
			ok, seen := live[sid]
			if !seen {
				_, err := tx.InstanceSession(inst, sid)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				ok = err == nil
				live[sid] = ok
			}
			if !ok {
				continue
			}
			_, err := tx.AppendSessionEvent(inst, sid, ev.ID, func(seq uint64) ([]byte, error) {
				ev.Durable.Seq, ev.Durable.Version = seq, EventVersion(ev.Type)
				return json.Marshal(ev)
			})
			if err != nil {
				return err
			}
			n++
		}
		total := journaled.Add(n)
		if total/pruneEvery != (total-n)/pruneEvery {
			_, err := tx.PruneInstanceEvents(inst, ids.Floor("evt", s.Clock.Now().Add(-s.retention())), 4*pruneEvery)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Durable.Seq == 0 {
			ev.Durable = nil // its session is gone
		}
	}
	return nil
}

// Replay reads the durable events journaled after the event afterID, for
// a stream that reconnects. ok is false when afterID is not an event id,
// is older than the retention, or more than limit events followed it: the
// client must then resync from the session records.
func (s *Service) Replay(ctx context.Context, afterID string, limit int) (out []events.Stored, ok bool) {
	t, valid := ids.Time("evt", afterID)
	if !valid || t.Before(s.Clock.Now().Add(-s.retention())) {
		return nil, false
	}
	err := s.ReadTx(ctx, func(tx store.Tx) error {
		out = out[:0]
		return tx.InstanceEventsAfter(s.InstanceName(), afterID, func(id string, raw []byte) (bool, error) {
			out = append(out, events.Stored{ID: id, Raw: raw})
			return len(out) <= limit, nil
		})
	})
	if err != nil || len(out) > limit {
		return nil, false
	}
	return out, true
}

// SessionReplay reads a session's durable events after the sequence
// number, for the session's own stream; SessionNotFoundError when the
// session does not exist.
func (s *Service) SessionReplay(ctx context.Context, sid string, after uint64, limit int) (out []events.Stored, ok bool, err error) {
	err = s.ReadTx(ctx, func(tx store.Tx) error {
		out = out[:0]
		if _, err := s.Info(tx, sid); err != nil {
			return err
		}
		return tx.SessionEvents(s.InstanceName(), sid, after, func(_ uint64, raw []byte) (bool, error) {
			var head struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(raw, &head); err != nil {
				return false, err
			}
			out = append(out, events.Stored{ID: head.ID, Raw: raw})
			return len(out) <= limit, nil
		})
	})
	if err != nil {
		return nil, false, err
	}
	if len(out) > limit {
		return nil, false, nil
	}
	return out, true, nil
}

// History is one page of a session's public durable events (the
// session.next.* family) after the sequence number.
func (s *Service) History(ctx context.Context, sid string, after uint64, limit int) (page []json.RawMessage, more bool, err error) {
	err = s.ReadTx(ctx, func(tx store.Tx) error {
		page, more = page[:0], false
		if _, err := s.Info(tx, sid); err != nil {
			return err
		}
		return tx.SessionEvents(s.InstanceName(), sid, after, func(_ uint64, raw []byte) (bool, error) {
			var head struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(raw, &head); err != nil {
				return false, err
			}
			if !strings.HasPrefix(head.Type, "session.next.") {
				return true, nil
			}
			if len(page) == limit {
				more = true
				return false, nil
			}
			page = append(page, raw)
			return true, nil
		})
	})
	if page == nil {
		page = []json.RawMessage{}
	}
	return page, more, err
}

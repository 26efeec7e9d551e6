package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// InstanceSession is one coding-agent session of an instance server. The
// store keeps the fields it indexes by; Info is the public record, opaque
// to the store.
type InstanceSession struct {
	Instance  string          `json:"instance"`
	ID        string          `json:"id"`
	ParentID  string          `json:"parent_id,omitempty"`
	Directory string          `json:"directory"`
	ProjectID string          `json:"project_id"`
	Subpath   string          `json:"subpath,omitempty"`
	Updated   int64           `json:"updated"` // epoch ms; the list order
	Info      json.RawMessage `json:"info"`
}

// Kinds of session items.
const (
	ItemMessage byte = 'm'
	ItemInbox   byte = 'x'
)

// Parent filters of a session scan.
const (
	ParentAny  = iota // every session
	ParentRoot        // sessions without a parent
	ParentIs          // children of SessionScan.Parent
)

// SessionScan selects and orders sessions. At most one of Directory and
// Project is set; Subpath applies with Project when HasSubpath.
type SessionScan struct {
	Directory  string
	Project    string
	Subpath    string
	HasSubpath bool
	ParentMode int
	Parent     string
	Desc       bool
	// After, when set, starts the scan strictly after this (updated, id)
	// position in the scan direction.
	After *SessionAnchor
}

// SessionAnchor is a position in the (updated, id) order.
type SessionAnchor struct {
	Updated int64
	ID      string
}

// Key layout of instance sessions (NUL separates the parts; ids,
// directories and instance names never contain NUL):
//
//	is/<inst>\0<id>                                  the record
//	isx/<inst>\0<scope>\0<parent>\0<updated hex><id>  list indexes (empty values)
//	isv/<inst>\0<id>                                  touched when a child is written
//	isq/<inst>\0<id>                                  item sequence counter
//	isi/<inst>\0<id>\0<kind><seq hex>                 items (messages, inbox)
//	isd/<inst>\0<id>\0<item id>                       item id → kind+seq
//
// scope is "a" (all), "d"+directory, "p"+project or "s"+project+"\x01"+subpath;
// parent is "*" (any), "-" (root) or "="+parent id. Every session has one
// index key per scope × {any, its own parent}, so a list walks exactly the
// keys of its page.
const (
	pInstSession = "is/"
	pInstIndex   = "isx/"
	pInstChildV  = "isv/"
	pInstSeq     = "isq/"
	pInstItem    = "isi/"
	pInstItemID  = "isd/"
)

func instKey(prefix, inst string, parts ...string) string {
	return prefix + inst + "\x00" + strings.Join(parts, "\x00")
}

func orderKey(updated int64, id string) string {
	if updated < 0 {
		updated = 0
	}
	return fmt.Sprintf("%016x", uint64(updated)) + id
}

func scopes(s *InstanceSession) []string {
	return []string{"a", "d" + s.Directory, "p" + s.ProjectID, "s" + s.ProjectID + "\x01" + s.Subpath}
}

func parentParts(parent string) []string {
	if parent == "" {
		return []string{"*", "-"}
	}
	return []string{"*", "=" + parent}
}

func indexKeys(s *InstanceSession) []string {
	var out []string
	ok := orderKey(s.Updated, s.ID)
	for _, sc := range scopes(s) {
		for _, pp := range parentParts(s.ParentID) {
			out = append(out, instKey(pInstIndex, s.Instance, sc, pp, ok))
		}
	}
	return out
}

func validInstPart(v string) error {
	if v == "" || strings.ContainsRune(v, 0) {
		return fmt.Errorf("store: invalid instance key part %q", v)
	}
	return nil
}

func (t *btx) InstanceSession(inst, id string) (*InstanceSession, error) {
	return getAs[InstanceSession](t, instKey(pInstSession, inst, id))
}

func (t *btx) PutInstanceSession(s *InstanceSession, create bool) error {
	if err := errors.Join(validInstPart(s.Instance), validInstPart(s.ID)); err != nil {
		return err
	}
	old, err := t.InstanceSession(s.Instance, s.ID)
	switch {
	case err == nil && create:
		return fmt.Errorf("session %s %w", s.ID, ErrExists)
	case err == nil:
		for _, k := range indexKeys(old) {
			if err := t.del(k); err != nil {
				return err
			}
		}
	case !errors.Is(err, ErrNotFound):
		return err
	}
	for _, k := range indexKeys(s) {
		if err := t.setIndex(k); err != nil {
			return err
		}
	}
	if s.ParentID != "" {
		// A tree delete reads this key: a child written concurrently makes
		// the delete conflict and retry, so no orphan survives.
		if err := t.kv.Set(instKey(pInstChildV, s.Instance, s.ParentID), []byte(s.ID)); err != nil {
			return err
		}
	}
	return t.put(instKey(pInstSession, s.Instance, s.ID), s)
}

func (t *btx) DeleteInstanceSessionTree(inst, id string) ([]string, error) {
	if _, err := t.InstanceSession(inst, id); err != nil {
		return nil, err
	}
	ids := []string{id}
	for i := 0; i < len(ids); i++ {
		cur := ids[i]
		if err := t.kv.Get(instKey(pInstChildV, inst, cur), nil); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		children, err := t.suffixes(instKey(pInstIndex, inst, "a", "="+cur, ""))
		if err != nil {
			return nil, err
		}
		for _, suffix := range children {
			if len(suffix) > 16 {
				ids = append(ids, suffix[16:])
			}
		}
	}
	for _, sid := range ids {
		s, err := t.InstanceSession(inst, sid)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, k := range indexKeys(s) {
			if err := t.del(k); err != nil {
				return nil, err
			}
		}
		for _, p := range []string{instKey(pInstItem, inst, sid, ""), instKey(pInstItemID, inst, sid, "")} {
			items, err := t.suffixes(p)
			if err != nil {
				return nil, err
			}
			for _, suffix := range items {
				if err := t.del(p + suffix); err != nil {
					return nil, err
				}
			}
		}
		if err := t.deleteSessionEvents(inst, sid); err != nil {
			return nil, err
		}
		for _, k := range []string{instKey(pInstSeq, inst, sid), instKey(pInstChildV, inst, sid), instKey(pInstSession, inst, sid)} {
			if err := t.del(k); err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
}

func (t *btx) ListInstanceSessions(inst string, q SessionScan, fn func(*InstanceSession) (bool, error)) error {
	scope := "a"
	switch {
	case q.Directory != "":
		scope = "d" + q.Directory
	case q.Project != "" && q.HasSubpath:
		scope = "s" + q.Project + "\x01" + q.Subpath
	case q.Project != "":
		scope = "p" + q.Project
	}
	pp := "*"
	switch q.ParentMode {
	case ParentRoot:
		pp = "-"
	case ParentIs:
		pp = "=" + q.Parent
	}
	prefix := instKey(pInstIndex, inst, scope, pp, "")
	r := kvRange{Prefix: prefix, Reverse: q.Desc, KeysOnly: true}
	if q.After != nil {
		r.Start = prefix + orderKey(q.After.Updated, q.After.ID)
	}
	return t.kv.Iterate(r, func(k, _ []byte) (bool, error) {
		key := string(k)
		if r.Start != "" && key == r.Start {
			return true, nil
		}
		suffix := key[len(prefix):]
		if len(suffix) <= 16 {
			return true, nil
		}
		s, err := t.InstanceSession(inst, suffix[16:])
		if errors.Is(err, ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return fn(s)
	})
}

func (t *btx) AppendSessionItem(inst, sid string, kind byte, id string, raw []byte) error {
	if err := validInstPart(id); err != nil {
		return err
	}
	idKey := instKey(pInstItemID, inst, sid, id)
	if ok, err := t.exists(idKey); err != nil || ok {
		return errors.Join(err, fmt.Errorf("item %s %w", id, ErrExists))
	}
	seqKey := instKey(pInstSeq, inst, sid)
	var seq uint64
	err := t.kv.Get(seqKey, func(b []byte) error {
		if len(b) != 8 {
			return errors.New("store: bad item sequence")
		}
		seq = binary.BigEndian.Uint64(b)
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	seq++
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, seq)
	if err := t.kv.Set(seqKey, b); err != nil {
		return err
	}
	pos := string(kind) + fmt.Sprintf("%016x", seq)
	if err := t.kv.Set(idKey, []byte(pos)); err != nil {
		return err
	}
	return t.kv.Set(instKey(pInstItem, inst, sid, pos), raw)
}

func (t *btx) SessionItems(inst, sid string, kind byte, fn func(raw []byte) (bool, error)) error {
	prefix := instKey(pInstItem, inst, sid, string(kind))
	return t.kv.Iterate(kvRange{Prefix: prefix}, func(_, v []byte) (bool, error) {
		return fn(append(make([]byte, 0, len(v)), v...))
	})
}

func (t *btx) SessionItemsFrom(inst, sid string, kind byte, from string, reverse bool, fn func(raw []byte) (bool, error)) error {
	prefix := instKey(pInstItem, inst, sid, string(kind))
	r := kvRange{Prefix: prefix, Reverse: reverse}
	skip := ""
	if from != "" {
		pos, err := t.value(instKey(pInstItemID, inst, sid, from))
		if err != nil {
			return err
		}
		if len(pos) == 0 || pos[0] != kind {
			return ErrNotFound
		}
		skip = instKey(pInstItem, inst, sid, string(pos))
		r.Start = skip
	}
	return t.kv.Iterate(r, func(k, v []byte) (bool, error) {
		if skip != "" && string(k) == skip {
			return true, nil
		}
		return fn(append(make([]byte, 0, len(v)), v...))
	})
}

func (t *btx) SessionItemKind(inst, sid, id string) (byte, error) {
	v, err := t.value(instKey(pInstItemID, inst, sid, id))
	if errors.Is(err, ErrNotFound) {
		return 0, ErrNotFound
	}
	if err != nil || len(v) == 0 {
		return 0, errors.Join(err, errors.New("store: bad item index"))
	}
	return v[0], nil
}

func (t *btx) MoveSessionItem(inst, sid, id string, kind byte, raw []byte) error {
	idKey := instKey(pInstItemID, inst, sid, id)
	pos, err := t.value(idKey)
	if err != nil {
		return err
	}
	if err := t.del(instKey(pInstItem, inst, sid, string(pos))); err != nil {
		return err
	}
	if err := t.del(idKey); err != nil {
		return err
	}
	return t.AppendSessionItem(inst, sid, kind, id, raw)
}

func (t *btx) DeleteSessionItem(inst, sid, id string) error {
	idKey := instKey(pInstItemID, inst, sid, id)
	pos, err := t.value(idKey)
	if err != nil {
		return err
	}
	if err := t.del(instKey(pInstItem, inst, sid, string(pos))); err != nil {
		return err
	}
	return t.del(idKey)
}

package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/store"
)

// Limits of a message page.
const (
	DefaultMessageLimit = 50
	MaxMessageLimit     = 200
)

// MessagePage is a page of a session's messages and the cursors to the
// pages before and after it (absent when the page is empty).
type MessagePage struct {
	Data   []json.RawMessage `json:"data"`
	Cursor struct {
		Previous string `json:"previous,omitempty"`
		Next     string `json:"next,omitempty"`
	} `json:"cursor"`
}

// messageCursor is a position in a message list: the id of the message
// at a page's edge, the list's order, and the way the cursor goes.
type messageCursor struct {
	ID        string `json:"id"`
	Order     string `json:"order"`
	Direction string `json:"direction"` // "next" or "previous"
}

func (c messageCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeMessageCursor(v string) (messageCursor, error) {
	var c messageCursor
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || json.Unmarshal(b, &c) != nil || c.ID == "" ||
		(c.Order != "asc" && c.Order != "desc") || (c.Direction != "next" && c.Direction != "previous") {
		return c, errs.InvalidCursor()
	}
	return c, nil
}

// ListMessages is a page of the session's messages in order ("asc",
// oldest first, or "desc"; default "desc") or from a cursor of an earlier
// page, which keeps that page's order.
func (s *Service) ListMessages(ctx context.Context, sid, order, cursor string, limit int) (*MessagePage, error) {
	var cur *messageCursor
	if cursor != "" {
		c, err := decodeMessageCursor(cursor)
		if err != nil {
			return nil, err
		}
		cur, order = &c, c.Order
	}
	if order == "" {
		order = "desc"
	}
	// A page reads only its own messages: from the cursor's message (or
	// the list's first end) in the page's direction; a previous page is
	// read backwards and turned round.
	from, reverse, back := "", order == "desc", false
	if cur != nil {
		from = cur.ID
		if cur.Direction == "previous" {
			reverse, back = !reverse, true
		}
	}
	var msgs []Message
	err := s.ReadTx(ctx, func(tx store.Tx) error {
		msgs = msgs[:0]
		info, err := s.Info(tx, sid)
		if err != nil {
			return err
		}
		hidden, err := s.hiddenIDs(tx, info)
		if err != nil {
			return err
		}
		err = tx.SessionItemsFrom(s.InstanceName(), sid, store.ItemMessage, from, reverse, func(raw []byte) (bool, error) {
			h, err := parseHeader(raw)
			if err != nil {
				return false, fmt.Errorf("%w: session %s: %v", errUndecodable, sid, err)
			}
			if hidden[h.ID] {
				return true, nil // a staged revert hides it
			}
			msgs = append(msgs, Message{h, raw})
			return len(msgs) < limit, nil
		})
		if errors.Is(err, store.ErrNotFound) {
			return errs.InvalidCursor() // the cursor's message is gone
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if back {
		for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
			msgs[i], msgs[j] = msgs[j], msgs[i]
		}
	}
	page := &MessagePage{Data: make([]json.RawMessage, 0, len(msgs))}
	for _, m := range msgs {
		page.Data = append(page.Data, m.Raw)
	}
	// As the released server does, a page that holds messages gives both
	// cursors; past either end they lead to an empty page.
	if len(msgs) > 0 {
		page.Cursor.Previous = messageCursor{msgs[0].Header.ID, order, "previous"}.encode()
		page.Cursor.Next = messageCursor{msgs[len(msgs)-1].Header.ID, order, "next"}.encode()
	}
	return page, nil
}

// Read reads a session and its messages in one transaction:
// SessionNotFoundError when it does not exist.
func (s *Service) Read(ctx context.Context, sid string) (info *Info, msgs []Message, err error) {
	err = s.ReadTx(ctx, func(tx store.Tx) error {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		msgs, err = s.Messages(tx, sid)
		return err
	})
	return info, msgs, err
}

// Message is one message of the session: SessionNotFoundError or
// MessageNotFoundError when missing.
func (s *Service) Message(ctx context.Context, sid, mid string) (json.RawMessage, error) {
	_, msgs, err := s.Read(ctx, sid)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if m.Header.ID == mid {
			return m.Raw, nil
		}
	}
	return nil, errs.MessageNotFound(sid, mid)
}

// Context is the messages the agent's next step starts from: those from
// the last completed compaction on (all of them when there is none).
func (s *Service) Context(ctx context.Context, sid string) ([]json.RawMessage, error) {
	info, msgs, err := s.Read(ctx, sid)
	if err != nil {
		return nil, err
	}
	msgs = Visible(info, msgs)
	from := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Header.Type == "compaction" && msgs[i].Header.Status == "completed" {
			from = i
			break
		}
	}
	out := make([]json.RawMessage, 0, len(msgs)-from)
	for _, m := range msgs[from:] {
		out = append(out, m.Raw)
	}
	return out, nil
}

// Wait returns when the session's agent loop in this process is idle.
func (s *Service) Wait(ctx context.Context, sid string) error {
	if _, err := s.Get(ctx, sid); err != nil {
		return err
	}
	if s.Drains != nil {
		if err := s.Drains.Wait(ctx, sid); err != nil {
			return err
		}
	}
	// The run's last events are journaled and sent before the answer.
	s.Bus.Flush()
	return nil
}

// Compact asks the agent loop to summarise the session's conversation:
// a compaction inbox item, run after the inputs admitted before it.
func (s *Service) Compact(ctx context.Context, sid string) error {
	if s.Drains == nil {
		return errs.Unavailable("agent", "no agent loop runs on this server")
	}
	now := s.NowMS()
	id := s.NewID("msg")
	raw, err := json.Marshal(map[string]any{"id": id, "sessionID": sid, "type": "compaction", "delivery": "queue",
		"time": map[string]any{"created": now}})
	if err != nil {
		return err
	}
	if s.Reverting(sid) {
		return errs.SessionBusy(sid)
	}
	var info *Info
	var removed []string
	var point string
	err = s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		// A staged revert is committed first, as at a prompt.
		if removed, point, err = s.commitRevertTx(tx, info); err != nil {
			return err
		}
		return tx.AppendSessionItem(s.InstanceName(), sid, store.ItemInbox, id, raw)
	})
	if err != nil {
		return err
	}
	s.publishCommit(info, point, removed)
	s.Drains.Schedule(sid)
	return nil
}

// hiddenIDs are the ids of the messages a staged revert hides: its
// message and those after it.
func (s *Service) hiddenIDs(tx store.Tx, info *Info) (map[string]bool, error) {
	r := RevertOf(info)
	if r == nil {
		return nil, nil
	}
	out := map[string]bool{}
	err := tx.SessionItemsFrom(s.InstanceName(), info.ID, store.ItemMessage, r.MessageID, false, func(raw []byte) (bool, error) {
		var h struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &h) == nil {
			out[h.ID] = true
		}
		return true, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // the point's message is gone: nothing is hidden
	}
	out[r.MessageID] = true
	return out, err
}

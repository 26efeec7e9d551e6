package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/store"
)

// Import stores a session exported elsewhere: its record as given (placed
// in directory, "" for the default location) and its settled messages,
// which must be in time order with unique ids.
func (s *Service) Import(ctx context.Context, info *Info, messages []json.RawMessage, directory string) (*Info, error) {
	if info == nil || messages == nil {
		return nil, errs.InvalidRequest("payload", "info and messages are required")
	}
	if err := CheckID("info.id", info.ID); err != nil {
		return nil, err
	}
	if info.ParentID != "" {
		if err := CheckID("info.parentID", info.ParentID); err != nil {
			return nil, err
		}
	}
	if err := errors.Join(validateModel(info.Model, "info.model"), validateRules(info.Permissions)); err != nil {
		return nil, err
	}
	type imported struct {
		id  string
		raw []byte
	}
	var msgs []imported
	seen := map[string]bool{}
	last := float64(-1 << 62)
	for i, raw := range messages {
		h, err := parseHeader(raw)
		if err != nil {
			return nil, errs.Field("messages", fmt.Sprintf("messages[%d]: %v", i, err))
		}
		if seen[h.ID] {
			return nil, errs.Field("messages", fmt.Sprintf("messages[%d]: duplicate message id %s", i, h.ID))
		}
		seen[h.ID] = true
		if *h.Time.Created < last {
			return nil, errs.Field("messages", fmt.Sprintf("messages[%d]: messages must be in time.created order", i))
		}
		last = *h.Time.Created
		if !h.Settled() {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, errs.Field("messages", fmt.Sprintf("messages[%d]: %v", i, err))
		}
		msgs = append(msgs, imported{h.ID, buf.Bytes()})
	}
	clean, pid, sub, err := s.Locations.Placement(directory)
	if err != nil {
		return nil, err
	}
	info.Location, info.ProjectID, info.Subpath = events.LocationRef{Directory: clean}, pid, sub
	info.Time.Updated = s.NowMS()
	info.Share = nil // a share link names the instance the session came from
	err = s.WriteTx(ctx, func(tx store.Tx) error {
		if info.ParentID != "" {
			if _, err := s.Info(tx, info.ParentID); err != nil {
				return err
			}
		}
		if err := s.PutInfo(tx, info, true); err != nil {
			if errors.Is(err, store.ErrExists) {
				return errs.Conflict("Session already exists: "+info.ID, info.ID)
			}
			return err
		}
		for _, m := range msgs {
			if err := tx.AppendSessionItem(s.InstanceName(), info.ID, store.ItemMessage, m.id, m.raw); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.Publish("session.created", info, map[string]any{"info": info})
	return info, nil
}

// Export is a session as Import takes it.
type Export struct {
	Info     any   `json:"info"`
	Messages []any `json:"messages"`
}

// Export returns a session and its settled messages; sanitized, their
// texts are redacted.
func (s *Service) Export(ctx context.Context, sid string, sanitize bool) (*Export, error) {
	var info *Info
	var msgs []Message
	err := s.ReadTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		msgs, err = s.Messages(tx, sid)
		return err
	})
	if errors.Is(err, errUndecodable) {
		return nil, errs.Unknown(s.Logger, "export: "+sid, err)
	}
	if err != nil {
		return nil, err
	}
	out := &Export{Info: info, Messages: make([]any, 0, len(msgs))}
	for _, m := range msgs {
		if !m.Header.Settled() {
			continue
		}
		if !sanitize {
			out.Messages = append(out.Messages, m.Raw)
			continue
		}
		var v any
		if err := json.Unmarshal(m.Raw, &v); err != nil {
			return nil, errs.Unknown(s.Logger, "export: "+sid, err)
		}
		out.Messages = append(out.Messages, redact(v, "", m.Header.ID))
	}
	if sanitize {
		out.Info = sanitizeInfo(info)
	}
	return out, nil
}

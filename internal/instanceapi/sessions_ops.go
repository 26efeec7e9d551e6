package instanceapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/store"
)

// msgHeader is what the server reads of a stored Session.Message.Info.
type msgHeader struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status"`
	Time   struct {
		Created   *float64 `json:"created"`
		Completed *float64 `json:"completed"`
	} `json:"time"`
}

var messageTypes = map[string]bool{"agent-switched": true, "model-switched": true, "location-switched": true,
	"user": true, "synthetic": true, "system": true, "skill": true, "shell": true, "assistant": true,
	"compaction": true, "idle": true}

func parseHeader(raw []byte) (msgHeader, error) {
	var h msgHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, err
	}
	if !messageTypes[h.Type] {
		return h, fmt.Errorf("unknown message type %q", h.Type)
	}
	if checkMessageID("id", h.ID) != nil {
		return h, fmt.Errorf("bad message id %q", h.ID)
	}
	if h.Time.Created == nil {
		return h, errors.New("message has no time.created")
	}
	return h, nil
}

func (h msgHeader) settled() bool {
	switch h.Type {
	case "assistant":
		return h.Time.Completed != nil
	case "shell", "compaction":
		return h.Status != "running"
	}
	return true
}

// storedMessage is a decoded message and its raw form.
type storedMessage struct {
	h   msgHeader
	raw json.RawMessage
}

// errUndecodable marks a stored message that cannot be read.
var errUndecodable = errors.New("stored message cannot be decoded")

func (s *Server) messages(tx store.Tx, sid string) ([]storedMessage, error) {
	var out []storedMessage
	err := tx.SessionItems(s.instanceName(), sid, store.ItemMessage, func(raw []byte) (bool, error) {
		h, err := parseHeader(raw)
		if err != nil {
			return false, fmt.Errorf("%w: session %s: %v", errUndecodable, sid, err)
		}
		out = append(out, storedMessage{h, raw})
		return true, nil
	})
	return out, err
}

func (s *Server) appendMessage(tx store.Tx, sid string, msg map[string]any) error {
	raw, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return tx.AppendSessionItem(s.instanceName(), sid, store.ItemMessage, msg["id"].(string), raw)
}

func (s *Server) newMessage(typ string, now int64) map[string]any {
	return map[string]any{"id": ids.next("msg", false, s.opts.Clock.Now()), "type": typ, "time": map[string]any{"created": now}}
}

// ---- fork ----

func (s *Server) forkSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Before    *string `json:"before"`
		MessageID *string `json:"messageID"` // older dialect
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Before == nil {
		in.Before = in.MessageID
	}
	if in.Before != nil {
		if err := checkMessageID("before", *in.Before); err != nil {
			return err
		}
	}
	now := s.nowMS()
	var child *SessionInfo
	err = s.update(r.Context(), func(tx store.Tx) error {
		src, err := s.getInfo(tx, sid)
		if err != nil {
			return err
		}
		msgs, err := s.messages(tx, sid)
		if err != nil {
			return err
		}
		fork := &SessionFork{SessionID: sid}
		if in.Before != nil {
			i := 0
			for i < len(msgs) && msgs[i].h.ID != *in.Before {
				i++
			}
			if i == len(msgs) {
				return messageNotFound(sid, *in.Before)
			}
			msgs = msgs[:i]
			fork.Boundary.Type, fork.Boundary.MessageID = "before", *in.Before
		} else if len(msgs) > 0 {
			fork.Boundary.Type, fork.Boundary.MessageID = "through", msgs[len(msgs)-1].h.ID
		}
		if len(msgs) == 0 {
			return invalidRequest("empty_session", "Session has no messages to fork: "+sid)
		}
		c := *src
		c.ID = ids.next("ses", true, s.opts.Clock.Now())
		c.ParentID, c.Fork = sid, fork
		c.Time = SessionTime{Created: now, Updated: now}
		c.Title = src.Title + " (fork)"
		c.Cost, c.Tokens, c.Steps, c.Outcome, c.Revert = 0, TokenUsage{}, nil, "", nil
		child = &c
		if err := s.putInfo(tx, child, true); err != nil {
			return err
		}
		for _, m := range msgs {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(m.raw, &obj); err != nil {
				return fmt.Errorf("%w: %v", errUndecodable, err)
			}
			nid := ids.next("msg", false, s.opts.Clock.Now())
			obj["id"], _ = json.Marshal(nid)
			raw, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			if err := tx.AppendSessionItem(s.instanceName(), child.ID, store.ItemMessage, nid, raw); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errUndecodable) {
		return s.unknownErr("fork: "+sid, err)
	}
	if err != nil {
		return err
	}
	return s.created(w, child)
}

// ---- switch agent / model ----

func (s *Server) switchAgent(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Agent *string `json:"agent"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Agent == nil || *in.Agent == "" {
		return fieldErr("agent", "agent is required")
	}
	return s.switchRecorded(w, r, sid, func(info *SessionInfo, msg map[string]any) {
		msg["agent"] = *in.Agent
		if info.Agent != "" {
			msg["previous"] = info.Agent
		}
		info.Agent = *in.Agent
	}, "agent-switched")
}

func (s *Server) switchModel(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Model *ModelRef `json:"model"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Model == nil {
		return fieldErr("model", "model is required")
	}
	if err := in.Model.validate("model"); err != nil {
		return err
	}
	return s.switchRecorded(w, r, sid, func(info *SessionInfo, msg map[string]any) {
		msg["model"] = in.Model
		if info.Model != nil {
			msg["previous"] = info.Model
		}
		info.Model = in.Model
	}, "model-switched")
}

// switchRecorded applies a change to the session and records it as a
// message, in one transaction.
func (s *Server) switchRecorded(w http.ResponseWriter, r *http.Request, sid string, apply func(*SessionInfo, map[string]any), typ string) error {
	var info *SessionInfo
	err := s.update(r.Context(), func(tx store.Tx) (err error) {
		if info, err = s.getInfo(tx, sid); err != nil {
			return err
		}
		now := s.nowMS()
		msg := s.newMessage(typ, now)
		apply(info, msg)
		if err := s.appendMessage(tx, sid, msg); err != nil {
			return err
		}
		info.Time.Updated = max(now, info.Time.Updated)
		return s.putInfo(tx, info, false)
	})
	if err != nil {
		return err
	}
	return s.updated(w, info)
}

// ---- move ----

func (s *Server) moveSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Directory *string `json:"directory"`
		Delivery  *string `json:"delivery"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Directory == nil || *in.Directory == "" {
		return fieldErr("directory", "directory is required")
	}
	delivery := "steer"
	if in.Delivery != nil {
		if *in.Delivery != "steer" && *in.Delivery != "queue" {
			return fieldErr("delivery", `delivery must be "steer" or "queue"`)
		}
		delivery = *in.Delivery
	}
	dir := *in.Directory
	if fi, err := os.Stat(dir); err != nil {
		if os.IsNotExist(err) {
			return fieldErr("directory", "Directory does not exist: "+dir)
		}
		return fieldErr("directory", "Directory is unavailable: "+dir)
	} else if !fi.IsDir() {
		return fieldErr("directory", "Not a directory: "+dir)
	}
	clean, pid, sub, err := s.placement(dir)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Status == 400 {
			return fieldErr("directory", errorMessage(e))
		}
		return fieldErr("directory", "Directory is unavailable: "+dir)
	}
	var info *SessionInfo
	err = s.update(r.Context(), func(tx store.Tx) (err error) {
		if info, err = s.getInfo(tx, sid); err != nil {
			return err
		}
		now := s.nowMS()
		target := map[string]any{"location": LocationRef{Directory: clean}, "projectID": pid}
		if sub != "" {
			target["subpath"] = sub
		}
		if s.IsActive(sid) {
			// A drain runs: the move waits for its delivery boundary.
			item := map[string]any{"id": ids.next("msg", false, s.opts.Clock.Now()), "sessionID": sid,
				"time": map[string]any{"created": now}, "type": "move", "delivery": delivery}
			for k, v := range target {
				item[k] = v
			}
			raw, err := json.Marshal(item)
			if err != nil {
				return err
			}
			return tx.AppendSessionItem(s.instanceName(), sid, store.ItemInbox, item["id"].(string), raw)
		}
		msg := s.newMessage("location-switched", now)
		for k, v := range target {
			msg[k] = v
		}
		prev := map[string]any{"location": info.Location, "projectID": info.ProjectID}
		if info.Subpath != "" {
			prev["subpath"] = info.Subpath
		}
		msg["previous"] = prev
		if err := s.appendMessage(tx, sid, msg); err != nil {
			return err
		}
		info.Location, info.ProjectID, info.Subpath = LocationRef{Directory: clean}, pid, sub
		info.Time.Updated = max(now, info.Time.Updated)
		return s.putInfo(tx, info, false)
	})
	if err != nil {
		return err
	}
	return s.updated(w, info)
}

// ---- import / export ----

func (s *Server) importSession(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	var in struct {
		Info     *SessionInfo      `json:"info"`
		Messages []json.RawMessage `json:"messages"`
		Location *locationBody     `json:"location"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Info == nil || in.Messages == nil {
		return invalidRequest("payload", "info and messages are required")
	}
	info := in.Info
	if err := checkSessionID("info.id", info.ID); err != nil {
		return err
	}
	if info.ParentID != "" {
		if err := checkSessionID("info.parentID", info.ParentID); err != nil {
			return err
		}
	}
	if err := errors.Join(info.Model.validate("info.model"), validateRules(info.Permissions)); err != nil {
		return err
	}
	type imported struct {
		id  string
		raw []byte
	}
	var msgs []imported
	seen := map[string]bool{}
	last := float64(-1 << 62)
	for i, raw := range in.Messages {
		h, err := parseHeader(raw)
		if err != nil {
			return fieldErr("messages", fmt.Sprintf("messages[%d]: %v", i, err))
		}
		if seen[h.ID] {
			return fieldErr("messages", fmt.Sprintf("messages[%d]: duplicate message id %s", i, h.ID))
		}
		seen[h.ID] = true
		if *h.Time.Created < last {
			return fieldErr("messages", fmt.Sprintf("messages[%d]: messages must be in time.created order", i))
		}
		last = *h.Time.Created
		if !h.settled() {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return fieldErr("messages", fmt.Sprintf("messages[%d]: %v", i, err))
		}
		msgs = append(msgs, imported{h.ID, buf.Bytes()})
	}
	dir := ""
	if in.Location != nil && in.Location.Directory != nil {
		dir = *in.Location.Directory
	}
	clean, pid, sub, err := s.placement(dir)
	if err != nil {
		return err
	}
	info.Location, info.ProjectID, info.Subpath = LocationRef{Directory: clean}, pid, sub
	info.Time.Updated = s.nowMS()
	err = s.update(r.Context(), func(tx store.Tx) error {
		if info.ParentID != "" {
			if _, err := s.getInfo(tx, info.ParentID); err != nil {
				return err
			}
		}
		if err := s.putInfo(tx, info, true); err != nil {
			if errors.Is(err, store.ErrExists) {
				return conflict("Session already exists: "+info.ID, info.ID)
			}
			return err
		}
		for _, m := range msgs {
			if err := tx.AppendSessionItem(s.instanceName(), info.ID, store.ItemMessage, m.id, m.raw); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.created(w, info)
}

func (s *Server) exportSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	sanitize := false
	if v, ok := r.URL.Query()["sanitize"]; ok {
		switch {
		case len(v) == 1 && v[0] == "true":
			sanitize = true
		case len(v) == 1 && v[0] == "false":
		default:
			return invalidRequest("query", `sanitize must be "true" or "false"`)
		}
	}
	var info *SessionInfo
	var msgs []storedMessage
	err = s.view(r.Context(), func(tx store.Tx) (err error) {
		if info, err = s.getInfo(tx, sid); err != nil {
			return err
		}
		msgs, err = s.messages(tx, sid)
		return err
	})
	if errors.Is(err, errUndecodable) {
		return s.unknownErr("export: "+sid, err)
	}
	if err != nil {
		return err
	}
	out := make([]any, 0, len(msgs))
	for _, m := range msgs {
		if !m.h.settled() {
			continue
		}
		if !sanitize {
			out = append(out, m.raw)
			continue
		}
		var v any
		if err := json.Unmarshal(m.raw, &v); err != nil {
			return s.unknownErr("export: "+sid, err)
		}
		out = append(out, redact(v, "", m.h.ID))
	}
	var infoOut any = info
	if sanitize {
		infoOut = sanitizeInfo(info)
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"info": infoOut, "messages": out}})
	return nil
}

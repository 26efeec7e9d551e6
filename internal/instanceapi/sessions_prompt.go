package instanceapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/store"
)

// Mention is a span of the prompt text.
type Mention struct {
	Start int    `json:"start"`
	End   int    `json:"end"`
	Text  string `json:"text"`
}

func (m *Mention) validate(field string) error {
	if m != nil && (m.Start < 0 || m.End < m.Start) {
		return fieldErr(field, field+" mention must have 0 <= start <= end")
	}
	return nil
}

type promptFileIn struct {
	URI         string   `json:"uri"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	Mention     *Mention `json:"mention,omitempty"`
	Source      *Mention `json:"source,omitempty"` // older dialect
	Mime        string   `json:"mime,omitempty"`   // older dialect
}

type agentAttachment struct {
	Name    string   `json:"name"`
	Mention *Mention `json:"mention,omitempty"`
	Source  *Mention `json:"source,omitempty"` // older dialect, in only
}

type skillIn struct {
	ID      string   `json:"id"`
	Mention *Mention `json:"mention,omitempty"`
}

// FileAttachment is Prompt.FileAttachment.
type FileAttachment struct {
	Data        string         `json:"data"`
	Mime        string         `json:"mime"`
	Source      map[string]any `json:"source"`
	Name        string         `json:"name,omitempty"`
	Description string         `json:"description,omitempty"`
	Mention     *Mention       `json:"mention,omitempty"`
}

// UserPayload is Session.Inbox.UserPayload.
type UserPayload struct {
	Text     string                     `json:"text"`
	Files    []FileAttachment           `json:"files,omitempty"`
	Agents   []agentAttachment          `json:"agents,omitempty"`
	Skills   []json.RawMessage          `json:"skills,omitempty"`
	Metadata map[string]json.RawMessage `json:"metadata,omitempty"`
}

// InboxUser is Session.Inbox.User.
type InboxUser struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionID"`
	Time      struct {
		Created int64 `json:"created"`
	} `json:"time"`
	Type     string      `json:"type"`
	Payload  UserPayload `json:"payload"`
	Delivery string      `json:"delivery"`
}

type promptFields struct {
	Text   *string           `json:"text"`
	Files  []promptFileIn    `json:"files"`
	Agents []agentAttachment `json:"agents"`
	Skills []skillIn         `json:"skills"`
}

const maxAttachment = 10 << 20

// resolveFile turns a request attachment into a stored one: data: URIs
// inline, file: URIs (inside the allowed roots) read now.
func (s *Server) resolveFile(f promptFileIn) (FileAttachment, error) {
	out := FileAttachment{Name: f.Name, Description: f.Description, Mention: f.Mention}
	if out.Mention == nil {
		out.Mention = f.Source
	}
	if err := out.Mention.validate("files"); err != nil {
		return out, err
	}
	switch {
	case strings.HasPrefix(f.URI, "data:"):
		meta, payload, ok := strings.Cut(f.URI[5:], ",")
		if !ok {
			return out, fieldErr("files", "malformed data URI")
		}
		mt := strings.TrimSuffix(meta, ";base64")
		if mt == "" {
			mt = "text/plain"
		}
		var data []byte
		var err error
		if strings.HasSuffix(meta, ";base64") {
			data, err = base64.StdEncoding.DecodeString(payload)
		} else {
			var u string
			u, err = urlUnescape(payload)
			data = []byte(u)
		}
		if err != nil || len(data) > maxAttachment {
			return out, fieldErr("files", "data URI cannot be read")
		}
		out.Data, out.Mime, out.Source = base64.StdEncoding.EncodeToString(data), mt, map[string]any{"type": "inline"}
	case strings.HasPrefix(f.URI, "file://"):
		path := strings.TrimPrefix(f.URI, "file://")
		if p, err := urlUnescape(path); err == nil {
			path = p
		}
		if _, _, err := s.checkDirectory(filepath.Dir(path)); err != nil || !filepath.IsAbs(path) {
			return out, fieldErr("files", "File is not readable: "+f.URI)
		}
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxAttachment {
			return out, fieldErr("files", "File is not readable: "+f.URI)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return out, fieldErr("files", "File is not readable: "+f.URI)
		}
		mt := f.Mime
		if mt == "" {
			mt = mime.TypeByExtension(filepath.Ext(path))
		}
		if mt == "" {
			mt = http.DetectContentType(data)
		}
		if out.Name == "" {
			out.Name = filepath.Base(path)
		}
		out.Data, out.Mime, out.Source = base64.StdEncoding.EncodeToString(data), mt, map[string]any{"type": "uri", "uri": f.URI}
	default:
		return out, fieldErr("files", "Unsupported attachment URI: "+f.URI)
	}
	return out, nil
}

func (s *Server) promptSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		ID *string `json:"id"`
		promptFields
		Metadata map[string]json.RawMessage `json:"metadata"`
		Delivery *string                    `json:"delivery"`
		Resume   *bool                      `json:"resume"`
		Prompt   *promptFields              `json:"prompt"` // older dialect
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	pf := in.promptFields
	if in.Prompt != nil {
		if pf.Text != nil || pf.Files != nil || pf.Agents != nil || pf.Skills != nil {
			return invalidRequest("payload", "give the prompt either flat or under \"prompt\", not both")
		}
		pf = *in.Prompt
	}
	if pf.Text == nil {
		return fieldErr("text", "text is required")
	}
	item := InboxUser{SessionID: sid, Type: "user", Delivery: "steer"}
	if in.ID != nil {
		if err := checkMessageID("id", *in.ID); err != nil {
			return err
		}
		item.ID = *in.ID
	} else {
		item.ID = ids.next("msg", false, s.opts.Clock.Now())
	}
	if in.Delivery != nil {
		switch *in.Delivery {
		case "steer", "queue":
			item.Delivery = *in.Delivery
		default:
			return fieldErr("delivery", `delivery must be "steer" or "queue"`)
		}
	}
	item.Payload = UserPayload{Text: *pf.Text, Metadata: in.Metadata}
	for _, a := range pf.Agents {
		if a.Name == "" {
			return fieldErr("agents", "agents[].name is required")
		}
		if a.Mention == nil {
			a.Mention = a.Source
		}
		a.Source = nil
		if err := a.Mention.validate("agents"); err != nil {
			return err
		}
		item.Payload.Agents = append(item.Payload.Agents, a)
	}
	for _, sk := range pf.Skills {
		// No skills are installed on this server yet.
		return fieldErr("skills", "Skill not found: "+sk.ID)
	}
	// Check the session before reading files.
	var info *SessionInfo
	if err := s.view(r.Context(), func(tx store.Tx) (err error) {
		info, err = s.getInfo(tx, sid)
		return err
	}); err != nil {
		return err
	}
	for _, f := range pf.Files {
		fa, err := s.resolveFile(f)
		if err != nil {
			return err
		}
		item.Payload.Files = append(item.Payload.Files, fa)
	}
	now := s.nowMS()
	item.Time.Created = now
	raw, err := json.Marshal(item)
	if err != nil {
		return err
	}
	err = s.update(r.Context(), func(tx store.Tx) (err error) {
		if info, err = s.getInfo(tx, sid); err != nil {
			return err
		}
		if err := tx.AppendSessionItem(s.instanceName(), sid, store.ItemInbox, item.ID, raw); err != nil {
			if errors.Is(err, store.ErrExists) {
				return conflict("Prompt message ID conflicts with an existing durable record: "+item.ID, item.ID)
			}
			return err
		}
		info.Time.Updated = max(now, info.Time.Updated)
		return s.putInfo(tx, info, false)
	})
	if err != nil {
		return err
	}
	if s.afterAdmit != nil {
		s.afterAdmit()
	}
	s.publishSession("session.input.admitted", info, map[string]any{"input": item})
	s.publishSession("session.updated", info, map[string]any{"info": info})
	if in.Resume == nil || *in.Resume {
		if s.opts.Schedule != nil {
			s.opts.Schedule(sid)
		}
		if s.opts.Runner != nil {
			s.opts.Runner.Schedule(sid)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": item})
	return nil
}

func urlUnescape(v string) (string, error) { return url.PathUnescape(v) }

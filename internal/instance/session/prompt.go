package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/errs"
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
		return errs.Field(field, field+" mention must have 0 <= start <= end")
	}
	return nil
}

// FileIn is a prompt's file attachment as the client sends it: a data:
// URI inline or a file: URI inside the allowed roots.
type FileIn struct {
	URI         string   `json:"uri"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	Mention     *Mention `json:"mention,omitempty"`
	Source      *Mention `json:"source,omitempty"` // older dialect
	Mime        string   `json:"mime,omitempty"`   // older dialect
}

// AgentAttachment names an agent the prompt mentions.
type AgentAttachment struct {
	Name    string   `json:"name"`
	Mention *Mention `json:"mention,omitempty"`
	Source  *Mention `json:"source,omitempty"` // older dialect, in only
}

// SkillIn names a skill the prompt mentions.
type SkillIn struct {
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
	Agents   []AgentAttachment          `json:"agents,omitempty"`
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

// DurablePrompt is a prompt as the prompt answer and the prompt events
// carry it.
type DurablePrompt struct {
	Text   string        `json:"text"`
	Files  []PromptFile  `json:"files,omitempty"`
	Agents []PromptAgent `json:"agents,omitempty"`
}

// PromptFile is a file of a DurablePrompt: a file: URI as given, or a
// data: URI of the inlined bytes.
type PromptFile struct {
	URI         string   `json:"uri"`
	Mime        string   `json:"mime"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	Source      *Mention `json:"source,omitempty"`
}

// PromptAgent is an agent a DurablePrompt mentions.
type PromptAgent struct {
	Name   string   `json:"name"`
	Source *Mention `json:"source,omitempty"`
}

// PromptOf is the durable form of an admitted prompt.
func PromptOf(item *InboxUser) DurablePrompt {
	p := DurablePrompt{Text: item.Payload.Text}
	for _, f := range item.Payload.Files {
		uri, _ := f.Source["uri"].(string)
		if uri == "" {
			uri = "data:" + f.Mime + ";base64," + f.Data
		}
		p.Files = append(p.Files, PromptFile{URI: uri, Mime: f.Mime, Name: f.Name, Description: f.Description, Source: f.Mention})
	}
	for _, a := range item.Payload.Agents {
		p.Agents = append(p.Agents, PromptAgent{Name: a.Name, Source: a.Mention})
	}
	return p
}

// Admitted is the answer to a prompt: the inbox item, the durable
// sequence number of its admission event, the prompt and its time.
type Admitted struct {
	*InboxUser
	AdmittedSeq uint64        `json:"admittedSeq"`
	Prompt      DurablePrompt `json:"prompt"`
	TimeCreated int64         `json:"timeCreated"`
}

// PromptFields is the prompt itself.
type PromptFields struct {
	Text   *string           `json:"text"`
	Files  []FileIn          `json:"files"`
	Agents []AgentAttachment `json:"agents"`
	Skills []SkillIn         `json:"skills"`
}

const maxAttachment = 10 << 20

// resolveFile turns a request attachment into a stored one: data: URIs
// inline, file: URIs (inside the allowed roots, or the session's location
// dir when the instance has none) read now.
func (s *Service) resolveFile(f FileIn, dir string) (FileAttachment, error) {
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
			return out, errs.Field("files", "malformed data URI")
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
			return out, errs.Field("files", "data URI cannot be read")
		}
		out.Data, out.Mime, out.Source = base64.StdEncoding.EncodeToString(data), mt, map[string]any{"type": "inline"}
	case strings.HasPrefix(f.URI, "file://"):
		path := strings.TrimPrefix(f.URI, "file://")
		if p, err := urlUnescape(path); err == nil {
			path = p
		}
		if _, _, err := s.Locations.Check(filepath.Dir(path)); err != nil || !filepath.IsAbs(path) {
			return out, errs.Field("files", "File is not readable: "+f.URI)
		}
		data, err := s.readAttachment(path, dir)
		if err != nil {
			return out, errs.Field("files", "File is not readable: "+f.URI)
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
		return out, errs.Field("files", "Unsupported attachment URI: "+f.URI)
	}
	return out, nil
}

// PromptInput is a prompt as the client sends it: the prompt flat or
// under "prompt" (the older dialect), how it is delivered to a running
// step, and whether to wake the agent loop.
type PromptInput struct {
	ID *string `json:"id"`
	PromptFields
	Metadata map[string]json.RawMessage `json:"metadata"`
	Delivery *string                    `json:"delivery"`
	Resume   *bool                      `json:"resume"`
	Prompt   *PromptFields              `json:"prompt"`
}

// Prompt admits a prompt into the session's inbox, announces it
// (session.next.prompt.admitted) and wakes the agent loop unless resume is
// false. Files are read now, inside the allowed roots.
func (s *Service) Prompt(ctx context.Context, sid string, in PromptInput) (*Admitted, error) {
	pf := in.PromptFields
	if in.Prompt != nil {
		if pf.Text != nil || pf.Files != nil || pf.Agents != nil || pf.Skills != nil {
			return nil, errs.InvalidRequest("payload", "give the prompt either flat or under \"prompt\", not both")
		}
		pf = *in.Prompt
	}
	if pf.Text == nil {
		return nil, errs.Field("text", "text is required")
	}
	item := &InboxUser{SessionID: sid, Type: "user", Delivery: "steer"}
	if in.ID != nil {
		if err := CheckMessageID("id", *in.ID); err != nil {
			return nil, err
		}
		item.ID = *in.ID
	} else {
		item.ID = s.NewID("msg")
	}
	if in.Delivery != nil {
		switch *in.Delivery {
		case "steer", "queue":
			item.Delivery = *in.Delivery
		default:
			return nil, errs.Field("delivery", `delivery must be "steer" or "queue"`)
		}
	}
	item.Payload = UserPayload{Text: *pf.Text, Metadata: in.Metadata}
	for _, a := range pf.Agents {
		if a.Name == "" {
			return nil, errs.Field("agents", "agents[].name is required")
		}
		if a.Mention == nil {
			a.Mention = a.Source
		}
		a.Source = nil
		if err := a.Mention.validate("agents"); err != nil {
			return nil, err
		}
		item.Payload.Agents = append(item.Payload.Agents, a)
	}
	for _, sk := range pf.Skills {
		// No skills are installed on this server yet.
		return nil, errs.Field("skills", "Skill not found: "+sk.ID)
	}
	// Check the session before reading files.
	info, err := s.Get(ctx, sid)
	if err != nil {
		return nil, err
	}
	for _, f := range pf.Files {
		fa, err := s.resolveFile(f, info.Location.Directory)
		if err != nil {
			return nil, err
		}
		item.Payload.Files = append(item.Payload.Files, fa)
	}
	now := s.NowMS()
	item.Time.Created = now
	raw, err := json.Marshal(item)
	if err != nil {
		return nil, err
	}
	if s.Reverting(sid) {
		return nil, errs.SessionBusy(sid)
	}
	var removed []string
	var point string
	err = s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		// A staged revert is committed: the messages it hides are dropped.
		if removed, point, err = s.commitRevertTx(tx, info); err != nil {
			return err
		}
		if err := tx.AppendSessionItem(s.InstanceName(), sid, store.ItemInbox, item.ID, raw); err != nil {
			if errors.Is(err, store.ErrExists) {
				return errs.Conflict("Prompt message ID conflicts with an existing durable record: "+item.ID, item.ID)
			}
			return err
		}
		info.Time.Updated = max(now, info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return nil, err
	}
	s.publishCommit(info, point, removed)
	out := &Admitted{InboxUser: item, Prompt: PromptOf(item), TimeCreated: now}
	seqs := s.PublishDurable(info,
		Ev{"session.next.prompt.admitted", map[string]any{"messageID": item.ID, "prompt": out.Prompt, "delivery": item.Delivery}},
		Ev{"session.updated", map[string]any{"info": info}})
	out.AdmittedSeq = seqs[0]
	if (in.Resume == nil || *in.Resume) && s.Drains != nil {
		s.Drains.Schedule(sid)
	}
	return out, nil
}

func urlUnescape(v string) (string, error) { return url.PathUnescape(v) }

// readAttachment reads a file: attachment (an absolute path) through an
// os.Root of the allowed root that holds it once its links are resolved
// (when the instance has no allowed roots: of the session's location dir,
// the directory its agent's tools are confined to). A link that leads out
// of the roots is refused, and a link swapped in after the check cannot
// lead the read out: the root opens the file.
func (s *Service) readAttachment(path, dir string) ([]byte, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	roots := s.Locations.AllowedRoots()
	if len(roots) == 0 {
		roots = []string{dir}
	}
	base := ""
	for _, r := range roots {
		if c, err := filepath.EvalSymlinks(r); err == nil {
			r = c
		}
		if holds(r, real) && len(r) > len(base) {
			base = r
		}
	}
	if base == "" {
		return nil, errors.New("outside the allowed roots")
	}
	name, err := filepath.Rel(base, real)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fi, err := root.Stat(name)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxAttachment {
		return nil, errors.New("not a regular file of at most the attachment size")
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxAttachment+1))
	if err != nil || len(data) > maxAttachment {
		return nil, errors.New("not readable within the attachment size")
	}
	return data, nil
}

// holds reports whether path is dir or inside it (both absolute, links
// resolved).
func holds(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/location"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/session"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
	"github.com/agentgate/agentgate/internal/router"
)

// v1Routes serve the released OpenCode server's first routes that its
// CLI's `run --attach` needs, over the same sessions, messages and
// events: POST /session, GET /session/{id}, GET /session/{id}/message,
// POST /session/{id}/message (answers when the step that replies is
// done), POST /session/{id}/abort, GET /config and GET /event.
func (s *Server) v1Routes(rt *router.Router) {
	rt.Handle("POST", "/session", s.v1CreateSession)
	rt.Handle("GET", "/session", s.v1ListSessions)
	rt.Handle("GET", "/session/status", s.v1SessionStatus)
	rt.Handle("GET", "/session/{sessionID}", s.v1GetSession)
	rt.Handle("GET", "/session/{sessionID}/message", s.v1Messages)
	rt.Handle("POST", "/session/{sessionID}/message", s.v1Prompt)
	rt.Handle("POST", "/session/{sessionID}/abort", s.v1Abort)
	rt.Handle("GET", "/config", s.v1Config)
	rt.Handle("GET", "/event", s.v1Events)
	rt.Handle("POST", "/log", s.v1Log)
	s.v1SessionRoutes(rt)
}

// v1Directory is the directory a v1 request names: ?directory= or the
// x-opencode-directory header.
func v1Directory(r *http.Request) (string, error) {
	if d := r.URL.Query().Get("directory"); d != "" {
		return d, nil
	}
	return locationQuery(r)
}

// v1Location is the location a v1 request names.
func (s *Server) v1Location(r *http.Request) (*location.Location, error) {
	dir, err := v1Directory(r)
	if err != nil {
		return nil, err
	}
	return s.locations.Get(dir)
}

// v1Root is the project root of a session's directory.
func (s *Server) v1Root(dir string) string {
	if loc, err := s.locations.Get(dir); err == nil {
		return loc.Project.Directory
	}
	return dir
}

func (s *Server) v1CreateSession(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	var in struct {
		ParentID   *string   `json:"parentID"`
		Title      *string   `json:"title"`
		Permission []v1.Rule `json:"permission"`
		Agent      *string   `json:"agent"`
		Model      *struct {
			ProviderID string `json:"providerID"`
			ID         string `json:"id"`
		} `json:"model"`
	}
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &in); err != nil {
			return err
		}
	}
	ci := session.CreateInput{ParentID: in.ParentID, Title: in.Title, Agent: in.Agent}
	if len(in.Permission) > 0 {
		ci.Permissions = v1.RulesIn(in.Permission)
	}
	if in.Model != nil && in.Model.ProviderID == loop.ProviderID {
		ci.Model = &agents.ModelRef{ID: in.Model.ID, ProviderID: in.Model.ProviderID}
	}
	if in.ParentID == nil {
		d, err := v1Directory(r)
		if err != nil {
			return err
		}
		ci.Directory = d
	}
	info, err := s.sessions.Create(r.Context(), ci)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v1.Session(info))
	return nil
}

func (s *Server) v1GetSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	info, err := s.sessions.Get(r.Context(), sid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v1.Session(info))
	return nil
}

// v1ListSessions lists the root sessions of the request's directory,
// newest first (at most limit, default 100), those whose title holds
// search when it is given.
func (s *Server) v1ListSessions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > session.MaxListLimit {
			return errs.InvalidRequest("query", "limit must be an integer from 1 to "+strconv.Itoa(session.MaxListLimit))
		}
		limit = n
	}
	loc, err := s.v1Location(r)
	if err != nil {
		return err
	}
	q := &session.ListQuery{Directory: &loc.Directory, ParentID: "null", Search: r.URL.Query().Get("search")}
	page, err := s.sessions.List(r.Context(), q, nil, limit)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(page.Data))
	for _, raw := range page.Data {
		var info session.Info
		if json.Unmarshal(raw, &info) == nil {
			out = append(out, v1.Session(&info))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// v1MessageList is a session's v1 messages, the last limit of them.
func (s *Server) v1MessageList(r *http.Request, sid string, limit int) ([]v1.WithParts, error) {
	info, msgs, err := s.sessions.Read(r.Context(), sid)
	if err != nil {
		return nil, err
	}
	out := v1.Messages(info, msgs, s.v1Root(info.Location.Directory), s.defaultModel())
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

func (s *Server) v1Messages(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	limit := 0
	if l := r.URL.Query().Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 0 {
			return errs.InvalidRequest("query", "limit must be a non-negative integer")
		}
	}
	out, err := s.v1MessageList(r, sid, limit)
	return jsonOf(w, out, err)
}

// v1PartIn is a part of a v1 prompt or command body.
type v1PartIn struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Text     string `json:"text"`
	Ignored  bool   `json:"ignored"`
	URL      string `json:"url"`
	Mime     string `json:"mime"`
	Filename string `json:"filename"`
}

// v1Prompt admits the message's text as a prompt, waits until the
// session's agent loop is idle and answers the last assistant step that
// replied to it, with its parts.
func (s *Server) v1Prompt(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		MessageID *string `json:"messageID"`
		Agent     *string `json:"agent"`
		Model     *struct {
			ProviderID string `json:"providerID"`
			ModelID    string `json:"modelID"`
		} `json:"model"`
		NoReply *bool           `json:"noReply"`
		System  *string         `json:"system"`
		Tools   map[string]bool `json:"tools"`
		Variant *string         `json:"variant"`
		Parts   []v1PartIn      `json:"parts"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	info, err := s.sessions.Get(r.Context(), sid)
	if err != nil {
		return err
	}
	var text []string
	ignored := len(in.Parts) > 0
	run := v1Run{messageID: in.MessageID, noReply: in.NoReply != nil && *in.NoReply}
	for _, part := range in.Parts {
		ignored = ignored && part.Type == "text" && part.Ignored
		switch part.Type {
		case "text":
			text = append(text, part.Text)
		case "file":
			run.files = append(run.files, session.FileIn{URI: part.URL, Name: part.Filename, Mime: part.Mime})
		default:
			return errs.Field("parts", "part type "+part.Type+" is not supported here")
		}
	}
	if len(text) == 0 {
		return errs.Field("parts", "a text part is required")
	}
	run.text, run.ignored = strings.Join(text, "\n"), ignored
	if in.Agent != nil {
		run.agent = *in.Agent
	}
	if in.Model != nil && in.Model.ProviderID == loop.ProviderID && in.Model.ModelID != "" {
		run.model = &agents.ModelRef{ID: in.Model.ModelID, ProviderID: loop.ProviderID}
	}
	answer, err := s.v1Run(r, info, run)
	return jsonOf(w, answer, err)
}

// v1Run is a prompt of the v1 routes (a message, a command, init).
type v1Run struct {
	messageID *string
	agent     string           // the agent to switch to ("": the session's)
	model     *agents.ModelRef // the model to switch to (nil: the session's)
	text      string
	files     []session.FileIn
	noReply   bool // admit the prompt without running a turn
	ignored   bool // every part is marked ignored: a notice, never sent to the model
}

// v1Run switches the session's agent and model as the run asks, admits
// its prompt and, unless noReply, waits until the agent loop is idle and
// answers the last assistant step that replied to it, with its parts.
func (s *Server) v1Run(r *http.Request, info *session.Info, run v1Run) (any, error) {
	sid := info.ID
	if run.agent != "" && run.agent != info.Agent {
		if _, err := s.sessions.SwitchAgent(r.Context(), sid, run.agent); err != nil {
			return nil, err
		}
	}
	if err := s.useModel(r, info, run.model); err != nil {
		return nil, err
	}
	resume := !run.noReply
	var meta map[string]json.RawMessage
	if run.ignored && !resume {
		// A notice (a plugin's, sent with noReply and every part
		// ignored): stored and shown, never sent to the model.
		meta = map[string]json.RawMessage{"ignored": json.RawMessage("true")}
	}
	admitted, err := s.sessions.Prompt(r.Context(), sid, session.PromptInput{ID: run.messageID,
		PromptFields: session.PromptFields{Text: &run.text, Files: run.files}, Resume: &resume, Metadata: meta})
	if err != nil {
		return nil, err
	}
	if !resume {
		return map[string]any{"info": map[string]any{"id": admitted.ID, "sessionID": sid, "role": "user"}, "parts": []any{}}, nil
	}
	if err := s.sessions.Wait(r.Context(), sid); err != nil {
		return nil, err
	}
	list, err := s.v1MessageList(r, sid, 0)
	if err != nil {
		return nil, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Info["role"] == "assistant" && list[i].Info["parentID"] == admitted.ID {
			return list[i], nil
		}
	}
	return nil, errs.Unavailable("agent", "the prompt was admitted but no answer was recorded")
}

func (s *Server) v1Abort(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if err := s.sessions.Interrupt(r.Context(), sid); err != nil {
		return err
	}
	// As the released server's, the answer comes once the turn stopped
	// (the TUI's /undo aborts a running turn, then reverts), or after a
	// few seconds at most.
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	s.sessions.Wait(ctx, sid)
	writeJSON(w, http.StatusOK, true)
	return nil
}

// v1Config is the v1 config a client reads: the instance's provider as
// provider "agentgate" (its models and limits; no endpoint or key) and
// its default model.
func (s *Server) v1Config(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	if _, err := v1Directory(r); err != nil {
		return err
	}
	providers, models := s.catalog()
	cfg := map[string]any{"$schema": "https://opencode.ai/config.json", "command": map[string]any{}, "plugin": []any{},
		"username": "opencode", "mode": map[string]any{}, "agent": map[string]any{}, "provider": map[string]any{}}
	if len(providers) > 0 {
		ms := map[string]any{}
		for _, m := range models {
			ms[m.ID] = map[string]any{"name": m.Name, "limit": map[string]any{"context": m.Limit.Context, "output": m.Limit.Output}}
		}
		cfg["provider"] = map[string]any{loop.ProviderID: map[string]any{"name": providers[0].Name, "npm": "@ai-sdk/openai-compatible",
			"models": ms}}
		if d := s.defaultModel(); d != "" {
			cfg["model"] = loop.ProviderID + "/" + d
		}
	}
	writeJSON(w, http.StatusOK, cfg)
	return nil
}

// defaultModel is the model of sessions that name none: the provider
// block's, or the workspace's default ("" without a loop).
func (s *Server) defaultModel() string {
	if r, ok := s.opts.Runner.(interface{ DefaultModel() string }); ok {
		return r.DefaultModel()
	}
	return ""
}

// v1Events is the v1 event stream: `{id, type, properties}` records of
// the request's directory (and events of no directory).
func (s *Server) v1Events(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	dir, err := v1Directory(r)
	if err != nil {
		return err
	}
	if dir != "" {
		if loc, err := s.locations.Get(dir); err == nil {
			dir = loc.Directory
		}
	}
	tr := &v1.Translator{Root: s.v1Root, DefaultModel: s.defaultModel}
	s.opts.Bus.Serve(w, r, events.Stream{Heartbeat: s.opts.Heartbeat, Transform: func(rec []byte) [][]byte {
		evs, evDir := tr.Translate(rec)
		if dir != "" && evDir != "" && evDir != dir {
			return nil
		}
		out := make([][]byte, 0, len(evs))
		for _, ev := range evs {
			if b, err := json.Marshal(ev); err == nil {
				out = append(out, b)
			}
		}
		return out
	}})
	return nil
}

// v1SessionStatus maps the sessions whose agent loop runs here to
// {type: "busy"}.
func (s *Server) v1SessionStatus(w http.ResponseWriter, _ *http.Request, _ router.Params) error {
	out := map[string]any{}
	if s.opts.Runner != nil {
		for _, id := range s.opts.Runner.Active() {
			out[id] = map[string]any{"type": "busy"}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// v1Log is the v1 client's app.log: a plugin (or another client) writes a
// line to the server's log, under the logger "client" with its service
// name; the message is cut at 2 KB and extra is not logged.
func (s *Server) v1Log(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	var in struct {
		Service *string        `json:"service"`
		Level   *string        `json:"level"`
		Message *string        `json:"message"`
		Extra   map[string]any `json:"extra"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Service == nil || in.Level == nil || in.Message == nil {
		return errs.InvalidRequest("payload", "service, level and message are required")
	}
	var lvl zapcore.Level
	switch *in.Level {
	case "debug":
		lvl = zapcore.DebugLevel
	case "info":
		lvl = zapcore.InfoLevel
	case "warn":
		lvl = zapcore.WarnLevel
	case "error":
		lvl = zapcore.ErrorLevel
	default:
		return errs.Field("level", `level must be "debug", "info", "warn" or "error"`)
	}
	msg := *in.Message
	if len(msg) > 2048 {
		msg = msg[:2048] + "…"
	}
	if ce := s.opts.Logger.Named("client").Check(lvl, msg); ce != nil {
		ce.Write(zap.String("service", *in.Service))
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

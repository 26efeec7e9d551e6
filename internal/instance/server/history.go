package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/router"
)

// MaxReplay is the most durable events a reconnecting stream replays;
// one that missed more is told to resync.
const MaxReplay = 10000

// MaxHistoryLimit is the largest history page, and the default one.
const MaxHistoryLimit = 100

// Catalog is what the model and provider lists need of the agent loop.
type Catalog interface {
	Catalog() ([]loop.ProviderInfo, []loop.ModelInfo)
}

var _ Catalog = (*loop.Runner)(nil)

func (s *Server) historyRoutes(rt *router.Router) {
	rt.Handle("GET", "/api/health", s.health)
	rt.Handle("GET", "/api/event", s.events)
	rt.Handle("GET", "/api/session/{sessionID}/event", s.sessionEvents)
	rt.Handle("GET", "/api/session/{sessionID}/history", s.sessionHistory)
	rt.Handle("GET", "/api/session/{sessionID}/message", s.sessionMessages)
	rt.Handle("GET", "/api/session/{sessionID}/message/{messageID}", s.sessionMessage)
	rt.Handle("GET", "/api/session/{sessionID}/context", s.sessionContext)
	rt.Handle("POST", "/api/session/{sessionID}/wait", s.waitSession)
	rt.Handle("POST", "/api/session/{sessionID}/compact", s.compactSession)
	rt.Handle("GET", "/api/model", s.listModels)
	rt.Handle("GET", "/api/provider", s.listProviders)
	rt.Handle("GET", "/api/provider/{providerID}", s.getProvider)
	rt.Handle("GET", "/api/command", s.listCommands)
	rt.Handle("GET", "/api/skill", s.listSkills)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request, _ router.Params) error {
	writeJSON(w, http.StatusOK, map[string]bool{"healthy": true})
	return nil
}

// events is the instance's stream. A client that reconnects with
// Last-Event-ID gets the durable events it missed first.
func (s *Server) events(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	st := events.Stream{Heartbeat: s.opts.Heartbeat}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		st.Replay = func() ([]events.Stored, bool) { return s.sessions.Replay(r.Context(), last, MaxReplay) }
	}
	s.opts.Bus.Serve(w, r, st)
	return nil
}

// sessionEvents is one session's stream of durable events: those after
// the sequence number `after` (or after Last-Event-ID's event), then new
// ones.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	q, err := oneQuery(r, "after")
	if err != nil {
		return err
	}
	after, err := uintParam(q["after"], "after", 0)
	if err != nil {
		return err
	}
	replay, ok, err := s.sessions.SessionReplay(r.Context(), sid, after, MaxReplay)
	if err != nil {
		return err
	}
	st := events.Stream{Heartbeat: s.opts.Heartbeat, Session: sid,
		Replay: func() ([]events.Stored, bool) { return replay, ok }}
	s.opts.Bus.Serve(w, r, st)
	return nil
}

// oneQuery reads the named query parameters, refusing repeated and
// unknown ones. The directory a client sends with every request (the
// SDK's `directory`, `workspace` and `location[…]`) is not a parameter of
// a session's routes and is ignored.
func oneQuery(r *http.Request, names ...string) (map[string]string, error) {
	out := map[string]string{}
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	for k, v := range r.URL.Query() {
		if k == "directory" || k == "workspace" || strings.HasPrefix(k, "location[") {
			continue
		}
		if !known[k] {
			return nil, errs.InvalidRequest("query", "unknown query parameter "+k)
		}
		if len(v) != 1 {
			return nil, errs.InvalidRequest("query", k+" is repeated")
		}
		out[k] = v[0]
	}
	return out, nil
}

func uintParam(v, name string, def uint64) (uint64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return 0, errs.InvalidRequest("query", name+" must be a non-negative integer")
	}
	return n, nil
}

func limitParam(v string, def, maxN int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxN {
		return 0, errs.InvalidRequest("query", "limit must be an integer from 1 to "+strconv.Itoa(maxN))
	}
	return n, nil
}

func (s *Server) sessionHistory(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	q, err := oneQuery(r, "limit", "after")
	if err != nil {
		return err
	}
	limit, err := limitParam(q["limit"], MaxHistoryLimit, MaxHistoryLimit)
	if err != nil {
		return err
	}
	after, err := uintParam(q["after"], "after", 0)
	if err != nil {
		return err
	}
	page, more, err := s.sessions.History(r.Context(), sid, after, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": page, "hasMore": more})
	return nil
}

func (s *Server) sessionMessages(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	q, err := oneQuery(r, "limit", "order", "cursor")
	if err != nil {
		return err
	}
	limit, err := limitParam(q["limit"], session.DefaultMessageLimit, session.MaxMessageLimit)
	if err != nil {
		return err
	}
	order, cursor := q["order"], q["cursor"]
	switch {
	case order != "" && order != "asc" && order != "desc":
		return errs.InvalidRequest("query", `order must be "asc" or "desc"`)
	case order != "" && cursor != "":
		return errs.New(400, "InvalidCursorError", "Cursor cannot be combined with order")
	}
	page, err := s.sessions.ListMessages(r.Context(), sid, order, cursor, limit)
	return jsonOf(w, page, err)
}

func (s *Server) sessionMessage(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	mid := p["messageID"]
	if err := session.CheckMessageID("messageID", mid); err != nil {
		return err
	}
	msg, err := s.sessions.Message(r.Context(), sid, mid)
	return dataOf(w, msg, err)
}

func (s *Server) sessionContext(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	msgs, err := s.sessions.Context(r.Context(), sid)
	return dataOf(w, msgs, err)
}

func (s *Server) waitSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	return done(w, s.sessions.Wait(r.Context(), sid))
}

func (s *Server) compactSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	return done(w, s.sessions.Compact(r.Context(), sid))
}

// catalog is the configured provider and models (none without an agent
// loop).
func (s *Server) catalog() ([]loop.ProviderInfo, []loop.ModelInfo) {
	if c, ok := s.opts.Runner.(Catalog); ok {
		return c.Catalog()
	}
	return []loop.ProviderInfo{}, []loop.ModelInfo{}
}

// inLocation answers {location, data} for the request's location.
func (s *Server) inLocation(w http.ResponseWriter, r *http.Request, list func(projectDir, dir string) (any, error)) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	v, err := list(loc.Project.Directory, loc.Canonical)
	var tagged *errs.Error
	if errors.As(err, &tagged) {
		return err
	}
	if err != nil {
		return errs.Unavailable("location", err.Error())
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": loc.PublicInfo(), "data": v})
	return nil
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	return s.inLocation(w, r, func(string, string) (any, error) { _, m := s.catalog(); return m, nil })
}

func (s *Server) listProviders(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	return s.inLocation(w, r, func(string, string) (any, error) { p, _ := s.catalog(); return p, nil })
}

func (s *Server) getProvider(w http.ResponseWriter, r *http.Request, p router.Params) error {
	id := p["providerID"]
	if _, err := s.location(r); err != nil {
		return err
	}
	list, _ := s.catalog()
	for _, pi := range list {
		if pi.ID == id {
			return data(w, pi)
		}
	}
	return errs.New(404, "ProviderNotFoundError", "Provider not found: "+id, "providerID", id)
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	return s.inLocation(w, r, func(pd, d string) (any, error) { return agents.Commands(pd, d) })
}

func (s *Server) listSkills(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	return s.inLocation(w, r, func(pd, d string) (any, error) { return agents.Skills(pd, d) })
}

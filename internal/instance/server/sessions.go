package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/router"
)

func (s *Server) sessionRoutes(rt *router.Router) {
	rt.Handle("GET", "/api/session", s.listSessions)
	rt.Handle("POST", "/api/session", s.createSession)
	rt.Handle("GET", "/api/session/active", s.activeSessions)
	rt.Handle("GET", "/api/session/{sessionID}", s.getSession)
	rt.Handle("PATCH", "/api/session/{sessionID}", s.updateSession)
	rt.Handle("DELETE", "/api/session/{sessionID}", s.removeSession)
	rt.Handle("POST", "/api/session/{sessionID}/prompt", s.promptSession)
	rt.Handle("POST", "/api/session/{sessionID}/fork", s.forkSession)
	rt.Handle("POST", "/api/session/{sessionID}/agent", s.switchAgent)
	rt.Handle("POST", "/api/session/{sessionID}/model", s.switchModel)
	rt.Handle("POST", "/api/session/{sessionID}/move", s.moveSession)
	rt.Handle("POST", "/api/session/{sessionID}/interrupt", s.interruptSession)
	rt.Handle("POST", "/api/experimental/session/import", s.importSession)
	rt.Handle("GET", "/api/experimental/session/stats", s.sessionStats)
	rt.Handle("GET", "/api/experimental/session/{sessionID}/export", s.exportSession)
}

// pathSession validates the {sessionID} path parameter.
func pathSession(p router.Params) (string, error) {
	id := p["sessionID"]
	if err := session.CheckID("sessionID", id); err != nil {
		e := err.(*errs.Error)
		e.Fields["kind"] = "params"
		return "", e
	}
	return id, nil
}

// existingSession is the {sessionID} path parameter of a session that
// exists (SessionNotFoundError otherwise).
func (s *Server) existingSession(r *http.Request, p router.Params) (string, error) {
	sid, err := pathSession(p)
	if err != nil {
		return "", err
	}
	if _, err := s.sessions.Get(r.Context(), sid); err != nil {
		return "", err
	}
	return sid, nil
}

// data answers a record as {"data": v}.
func data(w http.ResponseWriter, v any) error {
	writeJSON(w, http.StatusOK, map[string]any{"data": v})
	return nil
}

// done answers 204 when err is nil.
func done(w http.ResponseWriter, err error) error {
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// jsonOf answers v as it is when err is nil.
func jsonOf[T any](w http.ResponseWriter, v T, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// dataOf answers v as {"data": v} when err is nil.
func dataOf[T any](w http.ResponseWriter, v T, err error) error {
	if err != nil {
		return err
	}
	return data(w, v)
}

type locationBody struct {
	Directory *string `json:"directory"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	var in struct {
		ID          *string                    `json:"id"`
		ParentID    *string                    `json:"parentID"`
		Title       *string                    `json:"title"`
		Agent       *string                    `json:"agent"`
		Model       *agents.ModelRef           `json:"model"`
		Location    *locationBody              `json:"location"`
		Metadata    map[string]json.RawMessage `json:"metadata"`
		Permissions []agents.PermissionRule    `json:"permissions"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	ci := session.CreateInput{ID: in.ID, ParentID: in.ParentID, Title: in.Title, Agent: in.Agent, Model: in.Model,
		Metadata: in.Metadata, Permissions: in.Permissions}
	if in.Location != nil && in.Location.Directory != nil {
		ci.Directory = *in.Location.Directory
	} else if in.ParentID == nil {
		d, err := locationQuery(r)
		if err != nil {
			return err
		}
		ci.Directory = d
	}
	info, err := s.sessions.Create(r.Context(), ci)
	return dataOf(w, info, err)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	id, err := pathSession(p)
	if err != nil {
		return err
	}
	info, err := s.sessions.Get(r.Context(), id)
	return dataOf(w, info, err)
}

func (s *Server) updateSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	id, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Title       *string                    `json:"title"`
		Metadata    map[string]json.RawMessage `json:"metadata"`
		Permissions []agents.PermissionRule    `json:"permissions"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	_, err = s.sessions.Update(r.Context(), id, session.UpdateInput{Title: in.Title, Metadata: in.Metadata, Permissions: in.Permissions})
	return done(w, err)
}

func (s *Server) removeSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	id, err := pathSession(p)
	if err != nil {
		return err
	}
	return done(w, s.sessions.Remove(r.Context(), id))
}

func (s *Server) activeSessions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	active := s.sessions.Active()
	out := make(map[string]any, len(active))
	for _, id := range active {
		out[id] = map[string]string{"type": "running"}
	}
	return data(w, out)
}

// interruptSession stops the session's running turn; 204 whether or not
// one was running.
func (s *Server) interruptSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	return done(w, s.sessions.Interrupt(r.Context(), sid))
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	qv := r.URL.Query()
	one := func(name string) (*string, error) {
		v, ok := qv[name]
		if !ok {
			return nil, nil
		}
		if len(v) != 1 {
			return nil, errs.InvalidRequest("query", name+" is repeated")
		}
		return &v[0], nil
	}
	limit := session.DefaultListLimit
	if l, err := one("limit"); err != nil {
		return err
	} else if l != nil {
		n, err := strconv.Atoi(*l)
		if err != nil || n < 1 || n > session.MaxListLimit {
			return errs.InvalidRequest("query", "limit must be an integer from 1 to "+strconv.Itoa(session.MaxListLimit))
		}
		limit = n
	}
	cursor, err := one("cursor")
	if err != nil {
		return err
	}
	q := &session.ListQuery{}
	if cursor == nil {
		for name, dst := range map[string]**string{"directory": &q.Directory, "project": &q.Project, "subpath": &q.Subpath} {
			if *dst, err = one(name); err != nil {
				return err
			}
		}
		for name, dst := range map[string]*string{"order": &q.Order, "search": &q.Search, "parentID": &q.ParentID} {
			v, err := one(name)
			if err != nil {
				return err
			}
			if v != nil {
				*dst = *v
			}
		}
	}
	page, err := s.sessions.List(r.Context(), q, cursor, limit)
	return jsonOf(w, page, err)
}

func (s *Server) promptSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in session.PromptInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	item, err := s.sessions.Prompt(r.Context(), sid, in)
	return dataOf(w, item, err)
}

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
	child, err := s.sessions.Fork(r.Context(), sid, in.Before)
	return dataOf(w, child, err)
}

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
	if in.Agent == nil {
		return errs.Field("agent", "agent is required")
	}
	_, err = s.sessions.SwitchAgent(r.Context(), sid, *in.Agent)
	return done(w, err)
}

func (s *Server) switchModel(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Model *agents.ModelRef `json:"model"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	_, err = s.sessions.SwitchModel(r.Context(), sid, in.Model)
	return done(w, err)
}

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
	dir, delivery := "", "steer"
	if in.Directory != nil {
		dir = *in.Directory
	}
	if in.Delivery != nil {
		delivery = *in.Delivery
	}
	_, err = s.sessions.Move(r.Context(), sid, dir, delivery)
	return done(w, err)
}

func (s *Server) importSession(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	var in struct {
		Info     *session.Info     `json:"info"`
		Messages []json.RawMessage `json:"messages"`
		Location *locationBody     `json:"location"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	dir := ""
	if in.Location != nil && in.Location.Directory != nil {
		dir = *in.Location.Directory
	}
	info, err := s.sessions.Import(r.Context(), in.Info, in.Messages, dir)
	return dataOf(w, info, err)
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
			return errs.InvalidRequest("query", `sanitize must be "true" or "false"`)
		}
	}
	out, err := s.sessions.Export(r.Context(), sid, sanitize)
	return dataOf(w, out, err)
}

func (s *Server) sessionStats(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	q := r.URL.Query()
	sq := session.StatsQuery{To: s.sessions.NowMS(), TZ: q.Get("timezone"), Tools: q.Get("tools"), Project: q.Get("project")}
	for name, dst := range map[string]*int64{"from": &sq.From, "to": &sq.To} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return errs.InvalidRequest("query", name+" must be epoch milliseconds")
			}
			*dst = n
		}
	}
	stats, err := s.sessions.Stats(r.Context(), sq)
	return dataOf(w, stats, err)
}

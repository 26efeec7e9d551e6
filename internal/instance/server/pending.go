package server

import (
	"errors"
	"net/http"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/router"
)

// Pending is what the permission and question routes need of the agent
// loop: its broker of pending requests and forms.
type Pending interface {
	Broker() *permission.Broker
	CancelPending(sessionID, directory, why string)
}

// pendingRoutes are the routes of pending permission requests and forms,
// outside /api/ (the released server's paths), and a session's todos.
func (s *Server) pendingRoutes(rt *router.Router) {
	rt.Handle("GET", "/permission", s.listPermissions)
	rt.Handle("POST", "/permission/{requestID}/reply", s.replyPermission)
	rt.Handle("POST", "/session/{sessionID}/permissions/{requestID}", s.replySessionPermission)
	rt.Handle("GET", "/api/session/{sessionID}/permission", s.listSessionPermissions)
	rt.Handle("GET", "/api/session/{sessionID}/permission/{requestID}", s.getSessionPermission)
	rt.Handle("POST", "/api/session/{sessionID}/permission/{requestID}/reply", s.replySessionPermissionV2)
	rt.Handle("GET", "/question", s.listQuestions)
	rt.Handle("POST", "/question/{requestID}/reply", s.replyQuestion)
	rt.Handle("POST", "/question/{requestID}/reject", s.rejectQuestion)
	rt.Handle("GET", "/api/session/{sessionID}/question", s.listSessionQuestions)
	rt.Handle("POST", "/api/session/{sessionID}/question/{requestID}/reply", s.replySessionQuestion)
	rt.Handle("POST", "/api/session/{sessionID}/question/{requestID}/reject", s.rejectSessionQuestion)
	rt.Handle("GET", "/session/{sessionID}/todo", s.todos)
}

// broker is the loop's broker, or an error when this server runs no loop.
func (s *Server) broker() (*permission.Broker, error) {
	if p, ok := s.opts.Runner.(Pending); ok {
		return p.Broker(), nil
	}
	return nil, errs.Unavailable("agent", "this instance runs no agent loop")
}

func (s *Server) listPermissions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	b, err := s.broker()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.Permissions(r.URL.Query().Get("sessionID")))
	return nil
}

// sessionPermissions are the pending permission requests of the path's
// session (404 for a session that does not exist).
func (s *Server) sessionPermissions(r *http.Request, p router.Params) ([]permission.Request, error) {
	sid, err := s.existingSession(r, p)
	if err != nil {
		return nil, err
	}
	b, err := s.broker()
	if err != nil {
		return nil, err
	}
	return b.Permissions(sid), nil
}

func (s *Server) listSessionPermissions(w http.ResponseWriter, r *http.Request, p router.Params) error {
	reqs, err := s.sessionPermissions(r, p)
	if err != nil {
		return err
	}
	out := []map[string]any{}
	for _, req := range reqs {
		out = append(out, permissionV2(req))
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out})
	return nil
}

// getSessionPermission is one pending request of the session.
func (s *Server) getSessionPermission(w http.ResponseWriter, r *http.Request, p router.Params) error {
	reqs, err := s.sessionPermissions(r, p)
	if err != nil {
		return err
	}
	id := p["requestID"]
	for _, req := range reqs {
		if req.ID == id {
			return data(w, permissionV2(req))
		}
	}
	return errs.New(http.StatusNotFound, "PermissionNotFoundError", "Permission request not found: "+id, "requestID", id)
}

// permissionV2 is a pending request in the released SDK's v2 form
// (PermissionV2Request): the action, the resources it covers, the
// patterns an "always" answer saves, and the tool call it comes from.
func permissionV2(req permission.Request) map[string]any {
	rec := map[string]any{"id": req.ID, "sessionID": req.SessionID, "action": req.Permission, "resources": req.Patterns,
		"save": req.Always, "metadata": req.Metadata}
	if req.Tool != nil {
		rec["source"] = map[string]any{"type": "tool", "messageID": req.Tool.MessageID, "callID": req.Tool.CallID}
	}
	return rec
}

// permissionReply is the body of a reply: once, always or reject, and
// for a reject an optional message the model reads.
type permissionReply struct {
	Reply   string  `json:"reply"`
	Message *string `json:"message"`
}

func (s *Server) replyPermission(w http.ResponseWriter, r *http.Request, p router.Params) error {
	var in permissionReply
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := s.settlePermission(p["requestID"], "", in); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

func (s *Server) replySessionPermissionV2(w http.ResponseWriter, r *http.Request, p router.Params) error {
	var in permissionReply
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	sid := p["sessionID"]
	if _, err := s.sessions.Get(r.Context(), sid); err != nil {
		return err
	}
	if err := s.settlePermission(p["requestID"], sid, in); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// replySessionPermission is the older route: {response: once|always|reject}.
func (s *Server) replySessionPermission(w http.ResponseWriter, r *http.Request, p router.Params) error {
	var in struct {
		Response string `json:"response"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	sid := p["sessionID"]
	if _, err := s.sessions.Get(r.Context(), sid); err != nil {
		return err
	}
	if err := s.settlePermission(p["requestID"], sid, permissionReply{Reply: in.Response}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

func (s *Server) settlePermission(id, sid string, in permissionReply) error {
	b, err := s.broker()
	if err != nil {
		return err
	}
	switch in.Reply {
	case permission.Once, permission.Always, permission.Reject:
	default:
		return errs.Field("reply", `reply must be "once", "always" or "reject"`)
	}
	msg := ""
	if in.Message != nil {
		if in.Reply != permission.Reject {
			return errs.Field("message", "a message goes with a reject only")
		}
		msg = *in.Message
	}
	err = b.Reply(id, sid, in.Reply, msg)
	switch {
	case errors.Is(err, permission.ErrNotFound):
		return errs.New(http.StatusNotFound, "PermissionNotFoundError", "Permission request not found: "+id, "requestID", id)
	case errors.Is(err, permission.ErrSettled):
		return errs.New(http.StatusConflict, "ConflictError", "Permission request already settled: "+id, "resource", "permission")
	}
	return err
}

func (s *Server) listQuestions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	b, err := s.broker()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.Forms(r.URL.Query().Get("sessionID")))
	return nil
}

func (s *Server) replyQuestion(w http.ResponseWriter, r *http.Request, p router.Params) error {
	if err := s.answerForm(w, r, p["requestID"], r.URL.Query().Get("sessionID")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

func (s *Server) rejectQuestion(w http.ResponseWriter, r *http.Request, p router.Params) error {
	if err := s.rejectForm(r, p["requestID"], r.URL.Query().Get("sessionID")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

// answerForm settles a form with the body's answers (of the session sid,
// when set).
func (s *Server) answerForm(w http.ResponseWriter, r *http.Request, id, sid string) error {
	var in struct {
		Answers *[][]string `json:"answers"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Answers == nil {
		return errs.New(http.StatusBadRequest, "FormInvalidAnswerError", "answers is required: one list of answers per question", "id", id)
	}
	b, err := s.broker()
	if err != nil {
		return err
	}
	return formError(id, b.Answer(id, sid, *in.Answers))
}

// rejectForm dismisses a form (of the session sid, when set).
func (s *Server) rejectForm(r *http.Request, id, sid string) error {
	if err := noBody(r); err != nil {
		return err
	}
	b, err := s.broker()
	if err != nil {
		return err
	}
	return formError(id, b.RejectForm(id, sid))
}

// The session's forms, as the released server's session routes serve
// them.
func (s *Server) listSessionQuestions(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := s.existingSession(r, p)
	if err != nil {
		return err
	}
	b, err := s.broker()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": b.Forms(sid)})
	return nil
}

func (s *Server) replySessionQuestion(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := s.existingSession(r, p)
	if err != nil {
		return err
	}
	return done(w, s.answerForm(w, r, p["requestID"], sid))
}

func (s *Server) rejectSessionQuestion(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := s.existingSession(r, p)
	if err != nil {
		return err
	}
	return done(w, s.rejectForm(r, p["requestID"], sid))
}

// formError is the tagged error of a failed answer or rejection.
func formError(id string, err error) error {
	var inv *permission.InvalidAnswerError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, permission.ErrNotFound):
		return errs.New(http.StatusNotFound, "FormNotFoundError", "Form not found: "+id, "id", id)
	case errors.Is(err, permission.ErrSettled):
		return errs.New(http.StatusConflict, "FormAlreadySettledError", "Form already settled: "+id, "id", id)
	case errors.As(err, &inv):
		return errs.New(http.StatusBadRequest, "FormInvalidAnswerError", inv.Reason, "id", id)
	}
	return err
}

// Todoer reads a session's todo list.
type Todoer interface {
	SessionTodos(r *http.Request, sessionID string) (any, error)
}

func (s *Server) todos(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid := p["sessionID"]
	if _, err := s.sessions.Get(r.Context(), sid); err != nil {
		return err
	}
	t, ok := s.opts.Runner.(Todoer)
	if !ok {
		writeJSON(w, http.StatusOK, []any{})
		return nil
	}
	list, err := t.SessionTodos(r, sid)
	return jsonOf(w, list, err)
}

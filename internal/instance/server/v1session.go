package server

import (
	"net/http"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/session"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
	"github.com/agentgate/agentgate/internal/router"
)

// v1SessionRoutes are the v1 routes behind the released TUI's session
// commands: /rename (PATCH), deleting from /sessions (DELETE), /fork,
// /compact (summarize), /init and the project's commands (command, init),
// /share and /unshare.
func (s *Server) v1SessionRoutes(rt *router.Router) {
	rt.Handle("PATCH", "/session/{sessionID}", s.v1UpdateSession)
	rt.Handle("DELETE", "/session/{sessionID}", s.v1DeleteSession)
	rt.Handle("POST", "/session/{sessionID}/fork", s.v1Fork)
	rt.Handle("POST", "/session/{sessionID}/summarize", s.v1Summarize)
	rt.Handle("POST", "/session/{sessionID}/init", s.v1Init)
	rt.Handle("POST", "/session/{sessionID}/command", s.v1Command)
	rt.Handle("POST", "/session/{sessionID}/share", s.v1Share)
	rt.Handle("DELETE", "/session/{sessionID}/share", s.v1Unshare)
}

// v1UpdateSession renames a session ({title}); an empty title makes one
// from the first prompt, as the instance API's update does.
func (s *Server) v1UpdateSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Title *string `json:"title"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Title == nil {
		return errs.Field("title", "title is required (the only field this server changes here)")
	}
	info, err := s.sessions.Update(r.Context(), sid, session.UpdateInput{Title: in.Title})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v1.Session(info))
	return nil
}

func (s *Server) v1DeleteSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if err := s.sessions.Remove(r.Context(), sid); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

// v1Fork copies a session into a new root session: the messages before
// messageID, or all of them. The released TUI forks at a user message
// and puts that message's text in the new session's prompt.
func (s *Server) v1Fork(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		MessageID *string `json:"messageID"`
	}
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &in); err != nil {
			return err
		}
	}
	if in.MessageID != nil {
		if err := session.CheckMessageID("messageID", *in.MessageID); err != nil {
			return err
		}
	}
	info, err := s.sessions.ForkWith(r.Context(), sid, session.ForkOptions{Before: in.MessageID, Root: true})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v1.Session(info))
	return nil
}

// v1ModelIn is a v1 body's {providerID, modelID}: one of the instance's
// models (its provider is "agentgate").
func (s *Server) v1ModelIn(providerID, modelID *string) (*agents.ModelRef, error) {
	if providerID == nil || modelID == nil || *providerID == "" || *modelID == "" {
		return nil, errs.Field("modelID", "providerID and modelID are required")
	}
	if *providerID != loop.ProviderID {
		return nil, errs.Field("providerID", "provider "+*providerID+" is not this instance's (its provider is "+loop.ProviderID+")")
	}
	_, models := s.catalog()
	for _, m := range models {
		if m.ID == *modelID {
			return &agents.ModelRef{ID: m.ID, ProviderID: loop.ProviderID}, nil
		}
	}
	return nil, errs.Field("modelID", "model "+loop.ProviderID+"/"+*modelID+" is not one of this instance's models")
}

// v1SessionModel reads the session a body names a model for, and that
// model (v1ModelIn).
func (s *Server) v1SessionModel(r *http.Request, sid string, providerID, modelID *string) (*session.Info, *agents.ModelRef, error) {
	info, err := s.sessions.Get(r.Context(), sid)
	if err != nil {
		return nil, nil, err
	}
	model, err := s.v1ModelIn(providerID, modelID)
	return info, model, err
}

// useModel switches the session to model unless it uses it already.
func (s *Server) useModel(r *http.Request, info *session.Info, model *agents.ModelRef) error {
	if model == nil || (info.Model != nil && info.Model.ID == model.ID && info.Model.ProviderID == model.ProviderID) {
		return nil
	}
	_, err := s.sessions.SwitchModel(r.Context(), info.ID, model)
	return err
}

// v1Summarize compacts the session with the given model (which becomes
// the session's, as the released TUI sends the model it prompts with):
// the agent loop summarises the conversation after the inputs queued
// before it and records a compaction; the answer, true, comes once the
// loop is idle.
func (s *Server) v1Summarize(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		ProviderID *string `json:"providerID"`
		ModelID    *string `json:"modelID"`
		Auto       *bool   `json:"auto"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	info, model, err := s.v1SessionModel(r, sid, in.ProviderID, in.ModelID)
	if err != nil {
		return err
	}
	if err := s.useModel(r, info, model); err != nil {
		return err
	}
	if err := s.sessions.Compact(r.Context(), sid); err != nil {
		return err
	}
	if err := s.sessions.Wait(r.Context(), sid); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

// v1Init runs the built-in init command (AGENTS.md for the project) with
// the given model; true once the loop is idle.
func (s *Server) v1Init(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		MessageID  *string `json:"messageID"`
		ProviderID *string `json:"providerID"`
		ModelID    *string `json:"modelID"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	info, model, err := s.v1SessionModel(r, sid, in.ProviderID, in.ModelID)
	if err != nil {
		return err
	}
	cmd, err := s.v1FindCommand(info, agents.InitCommand)
	if err != nil {
		return err
	}
	if _, err := s.v1Run(r, info, v1Run{messageID: in.MessageID, model: model, text: agents.ExpandCommand(cmd.Template, ""),
		agent: cmd.Agent}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, true)
	return nil
}

// v1Command runs one of the location's commands (GET /command: the
// built-in init and the project's): its template with the arguments
// becomes a prompt, with the command's agent and model, else the
// request's; the answer is the assistant step that replied, once the
// loop is idle.
func (s *Server) v1Command(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		MessageID *string    `json:"messageID"`
		Agent     *string    `json:"agent"`
		Model     *string    `json:"model"`
		Arguments *string    `json:"arguments"`
		Command   *string    `json:"command"`
		Variant   *string    `json:"variant"`
		Parts     []v1PartIn `json:"parts"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Command == nil || *in.Command == "" {
		return errs.Field("command", "command is required")
	}
	info, err := s.sessions.Get(r.Context(), sid)
	if err != nil {
		return err
	}
	cmd, err := s.v1FindCommand(info, *in.Command)
	if err != nil {
		return err
	}
	run := v1Run{messageID: in.MessageID, agent: cmd.Agent}
	if run.agent == "" && in.Agent != nil {
		run.agent = *in.Agent
	}
	switch {
	case cmd.Model != nil:
		run.model = cmd.Model
	case in.Model != nil && *in.Model != "":
		provider, model, ok := strings.Cut(*in.Model, "/")
		if !ok {
			return errs.Field("model", `model must be "provider/model"`)
		}
		if run.model, err = s.v1ModelIn(&provider, &model); err != nil {
			return err
		}
	}
	args := ""
	if in.Arguments != nil {
		args = *in.Arguments
	}
	run.text = agents.ExpandCommand(cmd.Template, args)
	for _, part := range in.Parts {
		if part.Type != "file" {
			return errs.Field("parts", "a command takes file parts only, not "+part.Type)
		}
		run.files = append(run.files, session.FileIn{URI: part.URL, Name: part.Filename, Mime: part.Mime})
	}
	answer, err := s.v1Run(r, info, run)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// v1FindCommand is the command of that name in the session's location.
func (s *Server) v1FindCommand(info *session.Info, name string) (*agents.Command, error) {
	loc, err := s.locations.Get(info.Location.Directory)
	if err != nil {
		return nil, err
	}
	cmds, err := s.v1CommandList(loc.Project.Directory, loc.Canonical)
	if err != nil {
		return nil, err
	}
	for i := range cmds {
		if cmds[i].Name == name {
			return &cmds[i], nil
		}
	}
	return nil, errs.New(http.StatusNotFound, "CommandNotFoundError", "Command not found: "+name, "command", name)
}

// v1CommandList is the built-in commands, then the project's (which
// replace a built-in of the same name).
func (s *Server) v1CommandList(projectDir, dir string) ([]agents.Command, error) {
	own, err := agents.Commands(projectDir, dir)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, c := range own {
		names[c.Name] = true
	}
	var out []agents.Command
	for _, c := range agents.BuiltinCommands(projectDir) {
		if !names[c.Name] {
			out = append(out, c)
		}
	}
	return append(out, own...), nil
}

// v1Share marks the session shared. The released OpenCode shares a
// session through its vendor's share service, which this server does not
// use; the link here is the session's page in this instance's web app,
// which opens for whoever can sign in to the instance (paired browsers,
// the password), never for the public.
func (s *Server) v1Share(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if r.ContentLength != 0 {
		var in struct{}
		if err := decodeBody(w, r, &in); err != nil {
			return err
		}
	}
	info, err := s.sessions.SetShare(r.Context(), sid, &session.Share{URL: s.ownOrigin(r) + "/ui/session/" + sid})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v1.Session(info))
	return nil
}

// v1Unshare removes the session's share link.
func (s *Server) v1Unshare(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	info, err := s.sessions.SetShare(r.Context(), sid, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v1.Session(info))
	return nil
}

package server

import (
	"encoding/json"
	"net/http"

	"github.com/agentgate/agentgate/internal/instance/session"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
	"github.com/agentgate/agentgate/internal/router"
)

// revertRoutes serve reverting a session's steps, in the released
// server's v1 routes (the TUI's /undo and /redo: revert, unrevert, diff)
// and the instance API's (revert/stage, clear, commit).
func (s *Server) revertRoutes(rt *router.Router) {
	rt.Handle("POST", "/session/{sessionID}/revert", s.v1Revert)
	rt.Handle("POST", "/session/{sessionID}/unrevert", s.v1Unrevert)
	rt.Handle("POST", "/api/session/{sessionID}/revert/stage", s.revertStage)
	rt.Handle("POST", "/api/session/{sessionID}/revert/clear", s.revertClear)
	rt.Handle("POST", "/api/session/{sessionID}/revert/commit", s.revertCommit)
}

// v1Revert is the v1 revert: {messageID, partID?} → the v1 Session, its
// revert field set.
func (s *Server) v1Revert(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		MessageID *string `json:"messageID"`
		PartID    *string `json:"partID"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	ri := session.RevertInput{}
	if in.MessageID != nil {
		ri.MessageID = *in.MessageID
	}
	if in.PartID != nil {
		ri.PartID = *in.PartID
	}
	info, err := s.sessions.Revert(r.Context(), sid, ri)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v1.Session(info))
	return nil
}

// v1Unrevert is the v1 unrevert (redo): → the v1 Session, with "redo"
// saying which files were put back and which were left.
func (s *Server) v1Unrevert(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if r.ContentLength > 0 {
		if err := decodeBody(w, r, &struct{}{}); err != nil {
			return err
		}
	}
	info, report, err := s.sessions.Unrevert(r.Context(), sid)
	if err != nil {
		return err
	}
	out := v1.Session(info)
	out["redo"] = report
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revertStage stages a revert: {messageID, files?} → {data: revert}.
func (s *Server) revertStage(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		MessageID *string `json:"messageID"`
		Files     *bool   `json:"files"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	ri := session.RevertInput{Files: in.Files}
	if in.MessageID != nil {
		ri.MessageID = *in.MessageID
	}
	info, err := s.sessions.Revert(r.Context(), sid, ri)
	if err != nil {
		return err
	}
	return data(w, json.RawMessage(info.Revert))
}

// revertClear ends a staged revert (redo): 204.
func (s *Server) revertClear(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if _, _, err := s.sessions.Unrevert(r.Context(), sid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// revertCommit drops the messages a staged revert hides: 204.
func (s *Server) revertCommit(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if _, err := s.sessions.CommitRevert(r.Context(), sid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

package webapp

import (
	"net/http"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/session"
)

// revertView is a staged revert as the session page shows it: how many
// prompts it hides, the files it put back and those it left, and why.
type revertView struct {
	*session.RevertState
	Prompts int
}

// revertOf reads the session's staged revert for the page (nil: none).
func revertOf(r *http.Request, sess *session.Service, info *session.Info) *revertView {
	rs := session.RevertOf(info)
	if rs == nil {
		return nil
	}
	v := &revertView{RevertState: rs}
	if _, msgs, err := sess.Read(ctx(r), info.ID); err == nil {
		for _, m := range msgs[len(session.Visible(info, msgs)):] {
			if m.Header.Type == "user" {
				v.Prompts++
			}
		}
	}
	return v
}

// undo reverts the session's last visible prompt and what its steps did
// to the files (the TUI's /undo): files changed since by anyone else are
// left as they are and listed.
func (a *App) undo(w http.ResponseWriter, r *http.Request, info *session.Info) {
	sess := a.opts.Backend.Sessions()
	_, msgs, err := sess.Read(ctx(r), info.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	target := ""
	for _, m := range session.Visible(info, msgs) {
		if m.Header.Type == "user" {
			target = m.Header.ID
		}
	}
	if target == "" {
		a.fail(w, r, errs.InvalidRequest("nothing_to_undo", "There is no prompt to undo."))
		return
	}
	if _, err := sess.Revert(ctx(r), info.ID, session.RevertInput{MessageID: target}); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "undone")
}

// redo brings back the first prompt the staged revert hides (the TUI's
// /redo): the revert moves to the next prompt, or ends when none is left.
func (a *App) redo(w http.ResponseWriter, r *http.Request, info *session.Info) {
	sess := a.opts.Backend.Sessions()
	rs := session.RevertOf(info)
	if rs == nil {
		a.fail(w, r, errs.InvalidRequest("nothing_to_redo", "There is nothing to redo."))
		return
	}
	_, msgs, err := sess.Read(ctx(r), info.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	next := ""
	for _, m := range msgs[len(session.Visible(info, msgs)):] {
		if m.Header.Type == "user" && m.Header.ID != rs.MessageID {
			next = m.Header.ID
			break
		}
	}
	if next != "" {
		_, err = sess.Revert(ctx(r), info.ID, session.RevertInput{MessageID: next})
	} else {
		_, _, err = sess.Unrevert(ctx(r), info.ID)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "redone")
}

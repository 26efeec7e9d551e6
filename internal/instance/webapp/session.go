package webapp

import (
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/webpage"
)

// transcriptPage is how many messages a session page shows; older ones
// are a link away (the API's message cursors), so a huge transcript never
// makes a huge page.
const transcriptPage = 50

type sessionData struct {
	Session     sessionView
	Messages    []message
	Earlier     string // cursor of the page before the shown one
	Later       string // cursor of the page after it (when paging back)
	Live        bool   // the newest messages: the page follows the event stream
	Permissions []permission.Request
	Forms       []permission.Form
	Agents      []agents.Agent
	Models      []Model
	NoLoop      bool
	Revert      *revertView // a staged revert (undo)
}

// sessionPage is a session: its transcript, the pending asks and forms,
// the prompt box and the session's controls.
func (a *App) sessionPage(w http.ResponseWriter, r *http.Request, info *session.Info) {
	d, err := a.sessionData(r, info)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	d.Agents, _ = a.opts.Backend.Agents()
	d.Agents = primaryAgents(d.Agents)
	d.Models = a.opts.Backend.Models()
	pd := a.data(r, d.Session.Name(), "sessions")
	pd.Data = d
	a.render(w, http.StatusOK, "session", pd)
}

// livePart is the live part of a session page alone (the transcript's
// newest messages, the pending asks and forms, the status), which the
// page's script fetches again when the session's events arrive.
func (a *App) livePart(w http.ResponseWriter, r *http.Request, info *session.Info) {
	r.URL.RawQuery = "" // always the newest page
	d, err := a.sessionData(r, info)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	pd := a.data(r, "", "")
	pd.Data = d
	if err := webpage.Render(w, a.pages["session"], "live", http.StatusOK, pd); err != nil {
		a.fail(w, r, err)
	}
}

func (a *App) sessionData(r *http.Request, info *session.Info) (*sessionData, error) {
	sess := a.opts.Backend.Sessions()
	d := &sessionData{Session: sessionView{Info: info, Running: slices.Contains(sess.Active(), info.ID)}}
	if !d.Session.Running {
		d.Session.LastRun = lastRun(ctx(r), sess, info)
	}
	cursor := r.URL.Query().Get("cursor")
	page, err := sess.ListMessages(ctx(r), info.ID, "desc", cursor, transcriptPage)
	if err != nil {
		return nil, err
	}
	raws := page.Data
	if cursor == "" || isDescCursor(cursor) {
		slices.Reverse(raws) // oldest first on the page
	}
	d.Messages = decodeMessages(raws)
	d.Live = cursor == ""
	d.Revert = revertOf(r, sess, info)
	if len(raws) > 0 {
		// Cursors are of the newest-first list: "next" goes to older
		// messages, "previous" to newer ones.
		if len(raws) == transcriptPage || !d.Live {
			d.Earlier = page.Cursor.Next
		}
		if !d.Live {
			d.Later = page.Cursor.Previous
		}
	}
	if b, err := a.opts.Backend.Broker(); err == nil {
		d.Permissions = b.Permissions(info.ID)
		d.Forms = b.Forms(info.ID)
	} else {
		d.NoLoop = true
	}
	return d, nil
}

// isDescCursor reports whether a message cursor keeps the newest-first
// order (the pages of this app's links always do).
func isDescCursor(c string) bool {
	b, err := decodeB64(c)
	return err == nil && strings.Contains(string(b), `"order":"desc"`)
}

func decodeB64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// promptSession admits the prompt box's text: steered into the running
// turn or queued after it.
func (a *App) promptSession(w http.ResponseWriter, r *http.Request, info *session.Info) {
	text := strings.TrimSpace(r.PostForm.Get("text"))
	if text == "" {
		a.fail(w, r, errs.Field("text", "write a prompt first"))
		return
	}
	delivery := r.PostForm.Get("delivery")
	if delivery == "" {
		delivery = "steer"
	}
	if delivery != "steer" && delivery != "queue" {
		a.fail(w, r, errs.Field("delivery", `delivery must be "steer" or "queue"`))
		return
	}
	in := session.PromptInput{Delivery: &delivery}
	in.Text = &text
	if _, err := a.opts.Backend.Sessions().Prompt(ctx(r), info.ID, in); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "")
}

func (a *App) switchAgent(w http.ResponseWriter, r *http.Request, info *session.Info) {
	ag := r.PostForm.Get("agent")
	if ag == "" {
		a.fail(w, r, errs.Field("agent", "pick an agent"))
		return
	}
	if _, err := a.opts.Backend.Sessions().SwitchAgent(ctx(r), info.ID, ag); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "agent")
}

func (a *App) switchModel(w http.ResponseWriter, r *http.Request, info *session.Info) {
	ref, err := a.model(r.PostForm.Get("model"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if _, err := a.opts.Backend.Sessions().SwitchModel(ctx(r), info.ID, ref); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "model")
}

func (a *App) interrupt(w http.ResponseWriter, r *http.Request, info *session.Info) {
	if err := a.opts.Backend.Sessions().Interrupt(ctx(r), info.ID); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "interrupted")
}

// replyPermission answers a permission ask of the session: once, always
// or reject (with an optional message for the model).
func (a *App) replyPermission(w http.ResponseWriter, r *http.Request, info *session.Info) {
	b, err := a.opts.Backend.Broker()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	reply := r.PostForm.Get("reply")
	msg := ""
	if reply == permission.Reject {
		msg = strings.TrimSpace(r.PostForm.Get("message"))
	}
	err = b.Reply(r.PathValue("req"), info.ID, reply, msg)
	if err := settled(err, "permission ask"); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "answered")
}

// answerQuestion answers a form of the session, question by question
// (q<i> holds the picked options, q<i>-custom a typed answer), or
// dismisses it.
func (a *App) answerQuestion(w http.ResponseWriter, r *http.Request, info *session.Info) {
	b, err := a.opts.Backend.Broker()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	id := r.PathValue("req")
	if r.PostForm.Get("dismiss") != "" {
		err = b.RejectForm(id, info.ID)
	} else {
		var n int
		for _, f := range b.Forms(info.ID) {
			if f.ID == id {
				n = len(f.Questions)
			}
		}
		answers := make([][]string, n)
		for i := range answers {
			key := "q" + strconv.Itoa(i)
			answers[i] = []string{}
			for _, v := range r.PostForm[key] {
				if v != "" {
					answers[i] = append(answers[i], v)
				}
			}
			if c := strings.TrimSpace(r.PostForm.Get(key + "-custom")); c != "" {
				answers[i] = append(answers[i], c)
			}
		}
		err = b.Answer(id, info.ID, answers)
	}
	if err := settled(err, "form"); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "answered")
}

// settled turns a broker error into what the page says.
func settled(err error, what string) error {
	var inv *permission.InvalidAnswerError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, permission.ErrNotFound):
		return errs.New(http.StatusNotFound, "NotFoundError", "This "+what+" is no longer pending: it was answered or cancelled elsewhere.")
	case errors.Is(err, permission.ErrSettled):
		return errs.New(http.StatusConflict, "ConflictError", "This "+what+" was already answered.")
	case errors.As(err, &inv):
		return errs.New(http.StatusBadRequest, "InvalidRequestError", inv.Reason)
	}
	return err
}

package web

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/service"
)

// deviceData is the verification page: the code entry form (View nil) or
// the confirmation of one pending sign-in.
type deviceData struct {
	Entered    string // what the person typed, for the entry form
	View       *service.DeviceView
	Workspaces []service.WorkspaceRole
	Chosen     string
	Minutes    int // until the code expires
	// Ago says how long ago the sign-in started ("2 minutes ago").
	Ago string
	// BrowserIP is the address this page's request came from, to set
	// against the address the sign-in started from.
	BrowserIP string
}

// deviceResult is the page after a decision.
type deviceResult struct {
	Approved   bool
	ClientID   string
	ClientName string
	UserCode   string
	Workspace  string
}

// ago says how long before now t was, in whole minutes.
func ago(now, t time.Time) string {
	switch m := int(now.Sub(t) / time.Minute); {
	case m < 1:
		return "less than a minute ago"
	case m == 1:
		return "1 minute ago"
	default:
		return strconv.Itoa(m) + " minutes ago"
	}
}

// codeBlocked answers 429 when the person or their IP has used up their
// wrong codes; no code is looked at then, right or wrong.
func (h *Web) codeBlocked(w http.ResponseWriter, r *http.Request, q *req) bool {
	if !h.codePerson.Blocked("person:"+q.sess.Person.ID) && !h.codeIP.Blocked("ip:"+h.opts.ClientIP(r)) {
		return false
	}
	w.Header().Set("Retry-After", "900")
	h.fail(w, q, apierr.New(http.StatusTooManyRequests, "TooManyRequests",
		"too many wrong codes: wait 15 minutes before entering another code"))
	return true
}

// codeFailed counts a wrong, malformed, expired or finished code.
func (h *Web) codeFailed(r *http.Request, q *req) {
	h.codePerson.Fail("person:" + q.sess.Person.ID)
	h.codeIP.Fail("ip:" + h.opts.ClientIP(r))
}

// devicePage is GET /device: the entry form without a code; with one (typed
// or from verification_uri_complete, the same path), the code and client
// and the Approve / Deny form.
func (h *Web) devicePage(w http.ResponseWriter, r *http.Request, q *req) {
	code := strings.TrimSpace(r.URL.Query().Get("user_code"))
	if code == "" {
		d := q.data("Connect a device")
		d.Data = deviceData{}
		h.render(w, http.StatusOK, "device", d)
		return
	}
	if h.codeBlocked(w, r, q) {
		return
	}
	h.renderDevice(w, r, q, code, "", "", http.StatusOK)
}

// renderDevice looks a code up and shows its confirmation, or the entry
// form again with an error when the code is not valid (counted).
func (h *Web) renderDevice(w http.ResponseWriter, r *http.Request, q *req, code, chosen, msg string, status int) {
	view, err := q.svc.LookupUserCode(r.Context(), code)
	if err != nil {
		e := apierr.As(err)
		if e.Status != http.StatusNotFound {
			h.fail(w, q, err)
			return
		}
		h.codeFailed(r, q)
		d := q.data("Connect a device")
		d.Error = e.Message
		d.Data = deviceData{Entered: limitLen(code, 32)}
		h.render(w, http.StatusNotFound, "device", d)
		return
	}
	now := q.svc.Clock.Now()
	dd := deviceData{View: view, Chosen: chosen, Ago: ago(now, view.Requested), BrowserIP: h.opts.ClientIP(r)}
	dd.Minutes = int(view.Expires.Sub(now).Round(time.Minute) / time.Minute)
	if view.OrgScope {
		if dd.Workspaces, err = q.svc.WorkspacesOf(r.Context(), q.sess.Person.ID); err != nil {
			h.fail(w, q, err)
			return
		}
		if len(dd.Workspaces) == 1 && dd.Chosen == "" {
			dd.Chosen = dd.Workspaces[0].ID
		}
	}
	d := q.data("Approve sign-in " + view.UserCode)
	d.Error = msg
	d.Data = dd
	h.render(w, status, "device", d)
}

// deviceDecide is POST /device: csrf, user_code, action=approve|deny and,
// with org scope, workspace.
func (h *Web) deviceDecide(w http.ResponseWriter, r *http.Request, q *req) {
	if h.codeBlocked(w, r, q) {
		return
	}
	code := strings.TrimSpace(r.PostForm.Get("user_code"))
	action := r.PostForm.Get("action")
	if action != "approve" && action != "deny" {
		h.fail(w, q, apierr.BadRequest("choose Approve or Deny"))
		return
	}
	if code == "" {
		h.fail(w, q, apierr.BadRequest("the code is missing"))
		return
	}
	view, err := q.svc.LookupUserCode(r.Context(), code)
	if err == nil {
		err = q.svc.DecideDevice(r.Context(), q.sess.Person.ID, code, action == "approve", r.PostForm.Get("workspace"))
	}
	if err != nil {
		e := apierr.As(err)
		switch {
		case e.Tag == "DeviceCodeNotFound" || (view == nil && e.Status == http.StatusNotFound):
			h.codeFailed(r, q)
			d := q.data("Connect a device")
			d.Error = e.Message
			d.Data = deviceData{Entered: limitLen(code, 32)}
			h.render(w, http.StatusNotFound, "device", d)
		case e.Status == http.StatusBadRequest || e.Status == http.StatusForbidden || e.Status == http.StatusNotFound:
			// No workspace chosen, or one the person is not a member of.
			h.renderDevice(w, r, q, code, r.PostForm.Get("workspace"), e.Message, e.Status)
		default:
			h.fail(w, q, err)
		}
		return
	}
	res := deviceResult{Approved: action == "approve", ClientID: view.ClientID, ClientName: view.ClientName, UserCode: view.UserCode}
	if res.Approved && view.OrgScope {
		wss, _ := q.svc.WorkspacesOf(r.Context(), q.sess.Person.ID)
		for _, ws := range wss {
			if ws.ID == r.PostForm.Get("workspace") {
				res.Workspace = ws.Name
			}
		}
	}
	title := "Sign-in denied"
	if res.Approved {
		title = "Device signed in"
	}
	d := q.data(title)
	d.Data = res
	h.render(w, http.StatusOK, "device-done", d)
}

func limitLen(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Package webapp is the instance's web app: server-rendered pages for a
// browser paired with the instance (or signed in with HTTP Basic). It lists
// the sessions, shows a session's transcript with a prompt box, streams the
// answer in from the event stream, and answers permission asks and forms in
// the page; a stats page charts the activity.
//
// Templates and static files are embedded in the binary. Pages work
// without JavaScript; a small script (no inline script anywhere, so a
// strict Content-Security-Policy holds) follows /api/event and refreshes
// the live part of a session page. Every state change is a POST from a
// same-origin page carrying a CSRF token. The instance server mounts it at
// / and under /ui/ and authenticates requests before they reach it.
package webapp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/webpage"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// ContentSecurityPolicy is sent with every page: scripts and styles only
// from the app's own files, connections (the event stream, the live
// fragment) to the instance itself, no framing, forms posting only here.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// maxForm bounds a form body (a prompt's text is the largest field).
const maxForm = 1 << 20

// Model is a model the instance can run, as the pages offer it.
type Model struct {
	ProviderID, ID string
}

// Ref is the model's "provider/model" form value.
func (m Model) Ref() string { return m.ProviderID + "/" + m.ID }

// Backend is what the pages need of the instance server.
type Backend interface {
	// Sessions is the session service.
	Sessions() *session.Service
	// Broker holds the pending permission asks and forms; an error when
	// the instance runs no agent loop.
	Broker() (*permission.Broker, error)
	// Agents are the agents of the default location.
	Agents() ([]agents.Agent, error)
	// Models are the models the agent loop can run.
	Models() []Model
	// DefaultDirectory is where new sessions are created.
	DefaultDirectory() string
	// Unconfined, when not empty, says why the agent's commands and
	// plugins run without a sandbox, or are refused for want of one:
	// every page shows it.
	Unconfined() string
}

// Options configure the web app.
type Options struct {
	Backend Backend
	// CSRFKey signs the CSRF token of the forms; the server derives it
	// from the instance password, so changing the password invalidates
	// open forms. Empty: a random key of this process.
	CSRFKey []byte
	Clock   clock.Clock
	Logger  *zap.Logger
}

// App serves the pages.
type App struct {
	opts   Options
	mux    *http.ServeMux
	pages  map[string]*template.Template
	static http.Handler
	csrf   string
}

// Handles reports whether a path belongs to the web app: / and /ui/….
func Handles(path string) bool {
	return path == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/")
}

// New builds the web app.
func New(opts Options) *App {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	key := opts.CSRFKey
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("agentgate-instance-web-csrf-v1"))
	a := &App{opts: opts, mux: http.NewServeMux(), pages: parsePages(), csrf: base64.RawURLEncoding.EncodeToString(m.Sum(nil))}
	sub, _ := fs.Sub(staticFS, "static")
	a.static = webpage.Static(sub, "/ui/static/", a.notFound)

	mx := a.mux
	mx.Handle("GET /ui/static/", a.static)
	mx.HandleFunc("GET /{$}", a.sessionsPage)
	mx.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/", http.StatusSeeOther) })
	mx.HandleFunc("POST /ui/sessions", a.form(a.createSession))
	mx.HandleFunc("GET /ui/session/{id}", a.session(a.sessionPage))
	mx.HandleFunc("GET /ui/session/{id}/live", a.session(a.livePart))
	mx.HandleFunc("GET /ui/session/{id}/export", a.session(a.exportSession))
	mx.HandleFunc("GET /ui/session/{id}/delete", a.session(a.deletePage))
	mx.HandleFunc("POST /ui/session/{id}/delete", a.sessionForm(a.deleteSession))
	mx.HandleFunc("POST /ui/session/{id}/rename", a.sessionForm(a.renameSession))
	mx.HandleFunc("POST /ui/session/{id}/fork", a.sessionForm(a.forkSession))
	mx.HandleFunc("POST /ui/session/{id}/prompt", a.sessionForm(a.promptSession))
	mx.HandleFunc("POST /ui/session/{id}/agent", a.sessionForm(a.switchAgent))
	mx.HandleFunc("POST /ui/session/{id}/model", a.sessionForm(a.switchModel))
	mx.HandleFunc("POST /ui/session/{id}/interrupt", a.sessionForm(a.interrupt))
	mx.HandleFunc("POST /ui/session/{id}/undo", a.sessionForm(a.undo))
	mx.HandleFunc("POST /ui/session/{id}/redo", a.sessionForm(a.redo))
	mx.HandleFunc("POST /ui/session/{id}/permission/{req}", a.sessionForm(a.replyPermission))
	mx.HandleFunc("POST /ui/session/{id}/question/{req}", a.sessionForm(a.answerQuestion))
	mx.HandleFunc("GET /ui/stats", a.statsPage)
	mx.HandleFunc("/", a.notFound)
	return a
}

// ServeHTTP serves an authenticated page request.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w)
	a.mux.ServeHTTP(w, r)
}

// Unauthenticated answers a page request without (valid) credentials: a
// page that explains how to pair, with no data and no WWW-Authenticate
// challenge (the browser shows no password dialog). origin is the
// instance's own origin as the request addressed it (scheme and Host),
// username the Basic username: the page's commands run as shown.
func (a *App) Unauthenticated(w http.ResponseWriter, r *http.Request, origin, username string) {
	secure(w)
	if strings.HasPrefix(r.URL.Path, "/ui/static/") {
		a.static.ServeHTTP(w, r) // the pairing page's own style
		return
	}
	a.render(w, http.StatusUnauthorized, "pair", &pageData{Title: "Pair this browser", Minimal: true,
		Data: pairPage{Command: PairCommand(origin, username), Link: origin + "/auth/connect/<code>"}})
}

// pairPage is what the pairing page shows.
type pairPage struct {
	Command string // asks the instance for a pairing code
	Link    string // where the code goes
}

// PairCommand is the shell command that asks the instance at origin for a
// pairing code: curl with the Basic username, which prompts for the
// password (so the password stays out of the shell's history).
func PairCommand(origin, username string) string {
	return "curl -u " + shellWord(username) + " -X POST " + shellWord(origin+"/api/pair")
}

// shellWord quotes s for a POSIX shell unless it is plainly one word.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/@[]%+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
}

// pageData is what every template gets.
type pageData struct {
	Title   string
	Nav     string
	CSRF    string
	Minimal bool
	Flash   string
	Error   string
	Status  int
	Data    any
	// Unconfined is the sandbox's warning (see Backend.Unconfined).
	Unconfined string
}

func (a *App) data(r *http.Request, title, nav string) *pageData {
	d := &pageData{Title: title, Nav: nav, CSRF: a.csrf, Flash: flashes[r.URL.Query().Get("done")]}
	if a.opts.Backend != nil {
		d.Unconfined = a.opts.Backend.Unconfined()
	}
	return d
}

// flashes are the messages a redirect after a form shows (?done=…).
var flashes = map[string]string{
	"renamed":     "Session renamed.",
	"forked":      "Session forked: this is the copy.",
	"deleted":     "Session deleted.",
	"agent":       "Agent switched.",
	"model":       "Model switched.",
	"interrupted": "Interrupted.",
	"answered":    "Answered.",
}

func (a *App) render(w http.ResponseWriter, status int, name string, d *pageData) {
	t, ok := a.pages[name]
	if !ok {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	if err := webpage.Render(w, t, "layout", status, d); err != nil {
		a.opts.Logger.Error("rendering a page", zap.String("page", name), zap.Error(err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
	}
}

// fail shows an error page with the operation's status and message.
func (a *App) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusInternalServerError, "Something went wrong."
	var tagged *errs.Error
	if errors.As(err, &tagged) {
		status = tagged.Status
		if m, ok := tagged.Fields["message"].(string); ok {
			msg = m
		}
	} else {
		a.opts.Logger.Error("web app", zap.String("path", r.URL.Path), zap.Error(err))
	}
	d := a.data(r, "Error", "")
	d.Status, d.Error = status, msg
	a.render(w, status, "error", d)
}

// Refuse answers a request the instance refuses before it reaches the
// app (a tagged error such as 403 ForbiddenError) with a bare error page:
// no navigation and no CSRF token, since nobody was authenticated.
func (a *App) Refuse(w http.ResponseWriter, r *http.Request, err error) {
	secure(w)
	status, msg := http.StatusInternalServerError, "Something went wrong."
	var tagged *errs.Error
	if errors.As(err, &tagged) {
		status = tagged.Status
		if m, ok := tagged.Fields["message"].(string); ok {
			msg = m
		}
	}
	a.render(w, status, "error", &pageData{Title: "Error", Minimal: true, Status: status, Error: msg})
}

func (a *App) notFound(w http.ResponseWriter, r *http.Request) {
	a.fail(w, r, errs.New(http.StatusNotFound, "NotFoundError", "There is no page here."))
}

// form wraps a POST handler: a same-origin request, a parsed form and a
// valid CSRF token (403 otherwise).
func (a *App) form(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if crossOrigin(r) {
			a.fail(w, r, errs.New(http.StatusForbidden, "ForbiddenError", "This form did not come from this instance's pages."))
			return
		}
		if status := webpage.ReadForm(w, r, maxForm); status != 0 {
			a.fail(w, r, errs.New(status, "InvalidRequestError", "The form could not be read."))
			return
		}
		if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(a.csrf)) {
			a.fail(w, r, errs.New(http.StatusForbidden, "ForbiddenError",
				"This form is out of date or did not come from this instance (CSRF check failed): reload the page and try again."))
			return
		}
		fn(w, r)
	}
}

// crossOrigin reports a request that the browser says came from another
// origin: Sec-Fetch-Site, or an Origin header naming another host.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err != nil || u.Host != r.Host
	}
	return false
}

// session wraps a handler of a session's page: the path's id must be a
// session id of this instance (404 page otherwise).
func (a *App) session(fn func(http.ResponseWriter, *http.Request, *session.Info)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if session.CheckID("sessionID", id) != nil {
			a.fail(w, r, errs.New(http.StatusNotFound, "SessionNotFoundError", "There is no session "+id+"."))
			return
		}
		info, err := a.opts.Backend.Sessions().Get(r.Context(), id)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		fn(w, r, info)
	}
}

// sessionForm is session for a POST form.
func (a *App) sessionForm(fn func(http.ResponseWriter, *http.Request, *session.Info)) http.HandlerFunc {
	return a.form(a.session(fn))
}

// redirect sends the browser on after a form (303: the next request is a
// GET), with a flash message key.
func redirect(w http.ResponseWriter, r *http.Request, to, done string) {
	if done != "" {
		sep := "?"
		if strings.Contains(to, "?") {
			sep = "&"
		}
		to += sep + "done=" + url.QueryEscape(done)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func sessionPath(id string, parts ...string) string {
	p := "/ui/session/" + url.PathEscape(id)
	for _, s := range parts {
		p += "/" + s
	}
	return p
}

// ctx is the request's context (for brevity in handlers).
func ctx(r *http.Request) context.Context { return r.Context() }

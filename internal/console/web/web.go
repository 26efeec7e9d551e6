// Package web is the Console's server-rendered web interface: sign-in, the
// RFC 8628 device verification page, and the workspace pages (service
// accounts and keys, connections and models, members and roles, budgets and
// usage). Templates and static files are embedded in the binary; pages work
// without JavaScript, and every state-changing form is a POST with a CSRF
// token. It has no Caddy import; the workspace_console handler mounts it.
//
// Every operation goes through internal/service with the signed-in person's
// principal (svc.WebPrincipal), so the permission matrix is enforced there;
// when the service refuses, the page shows its message with its status.
package web

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/ratelimit"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/webpage"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Rate limits of device code entry. Failures are counted in a sliding
// window; a success never resets a count, so a guesser cannot buy more
// attempts. (Sign-in uses growing delays instead: signin_delay.go.)
const (
	// CodeFailuresPerPerson wrong device codes per signed-in person per window
	// (RFC 8628 §5.1: with 8 base-20 characters, 5 attempts keep the odds
	// of a random guess near 2^-32).
	CodeFailuresPerPerson = 5
	// CodeFailuresPerIP wrong device codes per client IP per window.
	CodeFailuresPerIP = 20
	// LimitWindow is the window of every limiter.
	LimitWindow = 15 * time.Minute
)

// ContentSecurityPolicy is sent with every answer: no inline script, no
// framing, forms post only to the Console itself.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// maxForm bounds a form body.
const maxForm = 64 << 10

// Options configure the web interface.
type Options struct {
	// Service returns the Console service once the store is open (503 page
	// otherwise).
	Service func(ctx context.Context) (*service.Service, error)
	// Clock drives the rate limiters. Default: the real clock.
	Clock clock.Clock
	// ClientIP returns the client address a request comes from, for the
	// per-IP limiters. Default: the host of RemoteAddr.
	ClientIP func(r *http.Request) string
	// InferenceURL is the gateway's public base URL, shown on the
	// connections page. Default: the scheme and host of the request.
	InferenceURL string
	// Logger logs internal errors. Default: none.
	Logger *zap.Logger
}

// Web serves the Console's web pages.
type Web struct {
	opts   Options
	mux    *http.ServeMux
	pages  map[string]*template.Template
	static http.Handler

	signInDelay        *signInDelays
	codePerson, codeIP *ratelimit.Limiter
}

// New builds the web interface.
func New(opts Options) *Web {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.ClientIP == nil {
		opts.ClientIP = remoteHost
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	h := &Web{
		opts:        opts,
		mux:         http.NewServeMux(),
		pages:       parsePages(),
		signInDelay: newSignInDelays(opts.Clock),
		codePerson:  ratelimit.New(CodeFailuresPerPerson, LimitWindow, opts.Clock),
		codeIP:      ratelimit.New(CodeFailuresPerIP, LimitWindow, opts.Clock),
	}
	sub, _ := fs.Sub(staticFS, "static")
	h.static = webpage.Static(sub, "/static/", h.notFound)

	m := h.mux
	m.Handle("GET /static/", h.static)
	m.HandleFunc("GET /{$}", h.home)
	m.HandleFunc("GET /signin", h.signInPage)
	m.HandleFunc("POST /signin", h.signIn)
	m.HandleFunc("POST /signout", h.form(h.signOut))
	m.HandleFunc("POST /sign-ins/{signin}/revoke", h.form(h.revokeSignIn))
	m.HandleFunc("GET /device", h.page(h.devicePage))
	m.HandleFunc("POST /device", h.form(h.deviceDecide))

	m.HandleFunc("GET /w/{wrk}", h.workspace(h.workspaceHome))
	m.HandleFunc("GET /w/{wrk}/{$}", h.workspace(h.workspaceHome))
	m.HandleFunc("GET /w/{wrk}/service-accounts", h.workspace(h.serviceAccountsPage))
	m.HandleFunc("POST /w/{wrk}/service-accounts", h.workspaceForm(h.createServiceAccount))
	m.HandleFunc("POST /w/{wrk}/service-accounts/{sa}/delete", h.workspaceForm(h.deleteServiceAccount))
	m.HandleFunc("POST /w/{wrk}/service-accounts/{sa}/keys", h.workspaceForm(h.createKey))
	m.HandleFunc("POST /w/{wrk}/service-accounts/{sa}/keys/{key}/revoke", h.workspaceForm(h.revokeKey))
	m.HandleFunc("GET /w/{wrk}/connections", h.workspace(h.connectionsPage))
	m.HandleFunc("POST /w/{wrk}/connections", h.workspaceForm(h.createConnection))
	m.HandleFunc("POST /w/{wrk}/connections/{conn}", h.workspaceForm(h.editConnection))
	m.HandleFunc("POST /w/{wrk}/connections/{conn}/models", h.workspaceForm(h.setModel))
	m.HandleFunc("POST /w/{wrk}/connections/{conn}/models/save", h.workspaceForm(h.saveModel))
	m.HandleFunc("GET /w/{wrk}/policies", h.workspace(h.policiesPage))
	m.HandleFunc("POST /w/{wrk}/policies", h.workspaceForm(h.createPolicy))
	m.HandleFunc("POST /w/{wrk}/policies/{policy}/delete", h.workspaceForm(h.deletePolicy))
	m.HandleFunc("GET /w/{wrk}/claude-code", h.workspace(h.claudeCodePage))
	m.HandleFunc("POST /w/{wrk}/claude-code", h.workspaceForm(h.saveClaudeCode))
	m.HandleFunc("GET /w/{wrk}/members", h.workspace(h.membersPage))
	m.HandleFunc("POST /w/{wrk}/members", h.workspaceForm(h.addMember))
	m.HandleFunc("POST /w/{wrk}/members/{member}/role", h.workspaceForm(h.setRole))
	m.HandleFunc("POST /w/{wrk}/members/{member}/remove", h.workspaceForm(h.removeMember))
	m.HandleFunc("GET /w/{wrk}/budgets", h.workspace(h.budgetsPage))
	m.HandleFunc("POST /w/{wrk}/budgets/{member}", h.workspaceForm(h.setBudget))
	m.HandleFunc("/", h.notFound)
	return h
}

// ServeHTTP serves the pages with the security headers of every answer.
func (h *Web) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		// Pages carry CSRF tokens, and one carries a new key's value.
		hd.Set("Cache-Control", "no-store")
	}
	h.mux.ServeHTTP(w, r)
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// req is what a handler knows about a request.
type req struct {
	svc  *service.Service
	sess *service.Session // nil when signed out
	csrf string           // the session's CSRF token

	// In workspace pages:
	p  *service.Principal
	ws *store.Workspace
}

// pageData is what every template gets.
type pageData struct {
	Title   string
	Person  *store.Person
	CSRF    string
	WS      *store.Workspace
	Role    string
	Nav     string // the active item of the workspace navigation
	Flash   string
	Error   string
	Can     can
	Data    any
	Minimal bool // sign-in: no header navigation
}

// can says which forms a workspace page offers. The service enforces the
// permission matrix either way; this only hides forms that would be refused.
type can struct {
	ServiceAccounts, Connections, Models, Members, SetBudgets, Audit, ClaudeCode bool
}

func canOf(p *service.Principal) can {
	if p == nil {
		return can{}
	}
	ok := func(op service.Op) bool { return service.Check(p, op) != service.Deny }
	return can{ServiceAccounts: ok(service.OpManageServiceAccounts), Connections: ok(service.OpManageConnections),
		Models: ok(service.OpManageModels), Members: ok(service.OpManageMembers), SetBudgets: ok(service.OpManageConnections),
		Audit: ok(service.OpReadAudit), ClaudeCode: ok(service.OpManageClaudeCode)}
}

// data starts the page data of a request.
func (q *req) data(title string) *pageData {
	d := &pageData{Title: title, CSRF: q.csrf, WS: q.ws}
	if q.sess != nil {
		d.Person = q.sess.Person
	}
	if q.p != nil {
		d.Role = q.p.Role
		d.Can = canOf(q.p)
	}
	return d
}

// render writes a page; templates run into a buffer first so that a
// template error is a clean 500.
func (h *Web) render(w http.ResponseWriter, status int, name string, d *pageData) {
	t := h.pages[name]
	if t == nil {
		panic("web: no template " + name)
	}
	if err := webpage.Render(w, t, "layout", status, d); err != nil {
		h.opts.Logger.Error("rendering a Console page", zap.String("page", name), zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

// fail shows an error page with the status and message of err (a generic
// message for internal errors).
func (h *Web) fail(w http.ResponseWriter, q *req, err error) {
	e := apierr.As(err)
	if e.Status >= 500 && e.Status != http.StatusServiceUnavailable {
		h.opts.Logger.Error("Console page", zap.Error(err))
	}
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	d := &pageData{Title: http.StatusText(e.Status)}
	if q != nil {
		d = q.data(http.StatusText(e.Status))
	}
	d.Error = e.Message
	h.render(w, e.Status, "error", d)
}

func (h *Web) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, h.optionalSession(r), apierr.NotFound("NotFound", "there is no page at %s", r.URL.Path))
}

// service returns the Console service or writes a 503 page.
func (h *Web) service(w http.ResponseWriter, r *http.Request) *service.Service {
	svc, err := h.opts.Service(r.Context())
	if err != nil {
		h.fail(w, nil, apierr.As(err))
		return nil
	}
	return svc
}

// optionalSession resolves the session cookie, if any; nil when the
// service is not available.
func (h *Web) optionalSession(r *http.Request) *req {
	svc, err := h.opts.Service(r.Context())
	if err != nil {
		return nil
	}
	q := &req{svc: svc}
	if c, err := r.Cookie(sessionCookie(r)); err == nil && c.Value != "" {
		if sess, err := svc.LookupSession(r.Context(), c.Value); err == nil {
			q.sess, q.csrf = sess, svc.CSRFToken(sess)
		}
	}
	return q
}

// signedIn resolves the session, or redirects to the sign-in page (for a
// GET, coming back to the same page afterwards). It reports false when it
// has answered.
func (h *Web) signedIn(w http.ResponseWriter, r *http.Request) (*req, bool) {
	svc := h.service(w, r)
	if svc == nil {
		return nil, false
	}
	q := &req{svc: svc}
	if c, err := r.Cookie(sessionCookie(r)); err == nil && c.Value != "" {
		sess, err := svc.LookupSession(r.Context(), c.Value)
		if err == nil {
			q.sess, q.csrf = sess, svc.CSRFToken(sess)
			return q, true
		}
		if apierr.As(err).Status != http.StatusUnauthorized {
			h.fail(w, nil, err)
			return nil, false
		}
		clearCookie(w, r, sessionCookie(r)) // a stale cookie
	}
	next := "/"
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		next = r.URL.RequestURI()
	}
	target := "/signin"
	if next != "/" {
		target += "?next=" + urlQueryEscape(next)
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
	return nil, false
}

// page wraps a GET handler that needs a signed-in person.
func (h *Web) page(fn func(http.ResponseWriter, *http.Request, *req)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if q, ok := h.signedIn(w, r); ok {
			fn(w, r, q)
		}
	}
}

// form wraps a POST handler: a signed-in person, a parsed form, and a
// valid CSRF token (403 otherwise).
func (h *Web) form(fn func(http.ResponseWriter, *http.Request, *req)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, ok := h.signedIn(w, r)
		if !ok {
			return
		}
		if !h.parseForm(w, r, q) {
			return
		}
		if !q.svc.CheckCSRF(q.sess, r.PostForm.Get("csrf")) || crossSite(r) {
			h.fail(w, q, apierr.Forbidden("this form is out of date or did not come from this Console (CSRF check failed): reload the page and try again"))
			return
		}
		fn(w, r, q)
	}
}

// crossSite reports a request that the browser says came from another site.
func crossSite(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") == "cross-site"
}

func (h *Web) parseForm(w http.ResponseWriter, r *http.Request, q *req) bool {
	if status := webpage.ReadForm(w, r, maxForm); status != 0 {
		h.fail(w, q, apierr.New(status, "InvalidRequest", "the form could not be read"))
		return false
	}
	return true
}

// inWorkspace resolves the person's principal in the {wrk} workspace.
func (h *Web) inWorkspace(w http.ResponseWriter, r *http.Request, q *req) bool {
	p, err := q.svc.WebPrincipal(r.Context(), q.sess, r.PathValue("wrk"))
	if err != nil {
		h.fail(w, q, err)
		return false
	}
	ws, err := q.svc.Workspace(r.Context(), p)
	if err != nil {
		h.fail(w, q, err)
		return false
	}
	q.p, q.ws = p, ws
	return true
}

// workspace wraps a GET handler of a workspace page.
func (h *Web) workspace(fn func(http.ResponseWriter, *http.Request, *req)) http.HandlerFunc {
	return h.page(func(w http.ResponseWriter, r *http.Request, q *req) {
		if h.inWorkspace(w, r, q) {
			fn(w, r, q)
		}
	})
}

// workspaceForm wraps a POST handler of a workspace page.
func (h *Web) workspaceForm(fn func(http.ResponseWriter, *http.Request, *req)) http.HandlerFunc {
	return h.form(func(w http.ResponseWriter, r *http.Request, q *req) {
		if h.inWorkspace(w, r, q) {
			fn(w, r, q)
		}
	})
}

// wsPath is the path of a workspace page.
func wsPath(wrk string, parts ...string) string {
	return path.Join(append([]string{"/w", urlPathEscape(wrk)}, parts...)...)
}

// redirectDone sends the browser back to a page after a successful form,
// with a fixed message chosen by key (never text from the request).
func redirectDone(w http.ResponseWriter, r *http.Request, to, key string) {
	http.Redirect(w, r, to+"?done="+key, http.StatusSeeOther)
}

// flashes are the messages a page shows after a redirect.
var flashes = map[string]string{
	"sa-created":         "Service account created.",
	"sa-deleted":         "Service account deleted; its keys are revoked.",
	"key-revoked":        "Key revoked. It stops working at once.",
	"model-enabled":      "Model enabled.",
	"model-disabled":     "Model disabled.",
	"model-saved":        "Model saved.",
	"connection-created": "Connection added.",
	"connection-saved":   "Connection saved.",
	"policy-created":     "Policy added. It applies from the next request.",
	"policy-deleted":     "Policy deleted.",
	"claude-code-saved":  "Claude Code settings saved. Members' CLIs get them at their next poll (about hourly), OpenCode at its next start.",
	"signin-revoked":     "Sign-in revoked. Its tokens stopped working.",
	"member-added":       "Member added.",
	"role-changed":       "Role changed.",
	"member-removed":     "Member removed.",
	"budget-set":         "Budget saved.",
	"budget-removed":     "Budget removed.",
}

func flash(r *http.Request) string { return flashes[r.URL.Query().Get("done")] }

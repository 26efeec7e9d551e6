// Package server is the instance's HTTP API: authentication and pairing,
// the route table, and handlers that decode a request, call a location,
// agent, plugin or session operation, and encode its answer.
package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/location"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	"github.com/agentgate/agentgate/internal/instance/plugins"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/snapshot"
	"github.com/agentgate/agentgate/internal/instance/webapp"
	"github.com/agentgate/agentgate/internal/jsonio"
	"github.com/agentgate/agentgate/internal/ratelimit"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/sandbox"
	"github.com/agentgate/agentgate/internal/store"
)

// Options configure a Server.
type Options struct {
	Auth    *Auth
	Pairing *Pairing    // shared across config reloads by the caller
	Bus     *events.Bus // shared across config reloads by the caller
	// Limiter counts failed authentications per client address (see
	// ServeHTTP); shared across config reloads by the caller. Default: a
	// new one with AuthFailuresPerAddress in AuthFailureWindow.
	Limiter *ratelimit.Limiter
	// ClientIP returns the address a request comes from (the caller honours
	// trusted proxies). Default: the host of RemoteAddr.
	ClientIP func(r *http.Request) string
	// TrustedProxy reports whether the request's peer is a proxy whose
	// forwarded client address and scheme are believed. Default: none is.
	TrustedProxy func(r *http.Request) bool
	// CORSOrigins are origins (scheme://host[:port]) whose pages may call
	// the instance from a browser; every other origin's are refused.
	// Entries that are not origins are ignored (the caller validates).
	CORSOrigins []string
	// DefaultDirectory is the location used when a request names none.
	DefaultDirectory string
	// AllowedRoots, when not empty, are the only directories (and their
	// descendants) that may be used as locations, after symlinks resolve.
	AllowedRoots []string
	// Agents are agent definitions from the server config, by id (the same
	// shape as an opencode.json "agent" map entry).
	Agents map[string]json.RawMessage
	// Plugins manages package, local and built-in plugins.
	Plugins *plugins.Manager
	// Version is reported by /api/info.
	Version string
	// Heartbeat is the event-stream heartbeat interval (default 15 s).
	Heartbeat time.Duration
	Clock     clock.Clock
	Logger    *zap.Logger
	// Store returns the store that keeps sessions (the app's store).
	Store func(ctx context.Context) (store.Store, error)
	// Instance names this instance; sessions are scoped by it. Default "default".
	Instance string
	// Runner, when set, runs the session drains (provider turns); it may
	// outlive this Server (configuration reloads) and uses the newest one.
	Runner Runner
	// Sandbox confines commands and plugins: GET /api/info reports it,
	// and a location it refuses (/, a home directory, one holding the
	// server's files) is refused. Default: sandbox.Default().
	Sandbox *sandbox.Sandbox
	// Snapshots records the projects' files around the agent's steps, for
	// revert (nil: none are taken; GET /api/info says so).
	Snapshots *snapshot.Manager
}

// Runner runs the sessions' agent loops: admitted prompts wake it, and
// it reads the sessions through the service it is attached to. The
// agent loop (loop.Runner) is the one the instance module gives.
type Runner interface {
	session.Drains
	Attach(*session.Service)
}

var _ Runner = (*loop.Runner)(nil)

// Server is the instance API.
type Server struct {
	opts      Options
	router    *router.Router
	locations *location.Locations
	sessions  *session.Service
	web       *webapp.App
	cors      map[string]bool // normalised CORSOrigins
}

// New builds a server.
func New(opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.Bus == nil {
		opts.Bus = events.NewBus(0, opts.Clock)
	}
	if opts.Pairing == nil {
		opts.Pairing = NewPairing(opts.Clock)
	}
	if opts.Limiter == nil {
		opts.Limiter = NewAuthLimiter(opts.Clock)
	}
	if opts.ClientIP == nil {
		opts.ClientIP = remoteHost
	}
	if opts.Sandbox == nil {
		opts.Sandbox = sandbox.Default()
	}
	if opts.TrustedProxy == nil {
		opts.TrustedProxy = func(*http.Request) bool { return false }
	}
	s := &Server{opts: opts, router: &router.Router{OnError: func(w http.ResponseWriter, _ *http.Request, err error) { errs.Write(w, err) }}}
	for _, o := range opts.CORSOrigins {
		if n, err := NormalizeOrigin(o); err == nil {
			if s.cors == nil {
				s.cors = map[string]bool{}
			}
			s.cors[n] = true
		}
	}
	hidden := opts.Sandbox.Config().Hidden
	s.locations = location.New(location.Options{DefaultDirectory: opts.DefaultDirectory, AllowedRoots: opts.AllowedRoots,
		Agents: opts.Agents, Bus: opts.Bus, Refuse: func(dir string) error { return sandbox.CheckRoot(dir, hidden) }})
	s.sessions = &session.Service{Store: opts.Store, Instance: opts.Instance, Clock: opts.Clock, Bus: opts.Bus,
		Locations: s.locations, Logger: opts.Logger, Snapshots: opts.Snapshots}
	if opts.Runner != nil {
		s.sessions.Drains = opts.Runner
	}
	if opts.Store != nil {
		opts.Bus.SetJournal(s.sessions.Journal)
	}
	rt := s.router
	rt.Handle("GET", "/api/info", s.info)
	rt.Handle("POST", "/api/pair", s.pair)
	rt.Handle("GET", "/auth/connect/{code}", s.connect)
	rt.Handle("GET", "/api/location", s.getLocation)
	rt.Handle("POST", "/api/location/reload", s.reloadLocations)
	rt.Handle("GET", "/api/agent", s.listAgents)
	rt.Handle("GET", "/api/agent/{agentID}", s.getAgent)
	rt.Handle("GET", "/api/plugin", s.listPlugins)
	rt.Handle("POST", "/api/plugin/check", s.checkPlugins)
	rt.Handle("POST", "/api/plugin/update", s.updatePlugins)
	s.historyRoutes(rt)
	s.sessionRoutes(rt)
	s.v1Routes(rt)
	s.v1TUIRoutes(rt)
	s.fsRoutes(rt)
	s.unsupportedRoutes(rt)
	s.revertRoutes(rt)
	s.pendingRoutes(rt)
	if opts.Runner != nil {
		opts.Runner.Attach(s.sessions)
	}
	s.web = webapp.New(webapp.Options{Backend: webBackend{s}, CSRFKey: opts.Auth.csrfKey(), Clock: opts.Clock, Logger: opts.Logger})
	return s
}

// Bus is the server's event bus.
func (s *Server) Bus() *events.Bus { return s.opts.Bus }

// Sessions is the server's session service.
func (s *Server) Sessions() *session.Service { return s.sessions }

// ReloadAll rebuilds every loaded location (see location.Locations).
func (s *Server) ReloadAll() error { return s.locations.ReloadAll() }

// IsActive reports whether a drain of the session runs in this process.
func (s *Server) IsActive(sessionID string) bool {
	return s.opts.Runner != nil && s.opts.Runner.IsActive(sessionID)
}

// Handles reports whether the path belongs to the instance: its API or its
// web app.
func Handles(path string) bool {
	return webapp.Handles(path) || path == "/api" || strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/auth/connect/") ||
		path == "/permission" || strings.HasPrefix(path, "/permission/") || path == "/question" || strings.HasPrefix(path, "/question/") ||
		path == "/session" || strings.HasPrefix(path, "/session/") || path == "/event" || v1Paths[path] ||
		strings.HasPrefix(path, "/config") || strings.HasPrefix(path, "/experimental/") || strings.HasPrefix(path, "/project/") ||
		strings.HasPrefix(path, "/provider")
}

// v1Paths are the first routes outside /session, /config, /experimental,
// /project and /provider that the instance serves.
var v1Paths = map[string]bool{"/path": true, "/vcs": true, "/agent": true, "/command": true, "/formatter": true, "/lsp": true,
	"/mcp": true, "/global/event": true, "/log": true, "/tui/show-toast": true}

// Failed authentications allowed per client address within
// AuthFailureWindow; then the address gets 429 TooManyRequestsError until
// enough of its failures leave the window.
const (
	AuthFailuresPerAddress = 10
	AuthFailureWindow      = 15 * time.Minute
)

// NewAuthLimiter returns the limiter of failed authentications.
func NewAuthLimiter(clk clock.Clock) *ratelimit.Limiter {
	return ratelimit.New(AuthFailuresPerAddress, AuthFailureWindow, clk)
}

// ServeHTTP serves a request in this order: guard (403 for another site's
// pages, and without a password for a peer or Host that is not loopback;
// a listed origin's preflight answered), the limit of failed
// authentications (429), authentication (401, except the pairing link), a
// body without a Content-Type (400), then the route.
//
// With authentication on, failures are counted per client address: a wrong
// password or token in Basic or ?auth_token=, and a pairing code that is not
// live. A request without credentials, or with a stale cookie (a paired
// browser after a password change), is not a guess and is not counted. Once
// an address has used up its failures, every request from it that needs
// credentials, or redeems a pairing code, is refused with 429 and
// Retry-After until the window has passed, even one with the right password:
// a guesser learns nothing from answers while limited. Other addresses are
// not affected. The check and the count are not one atomic step, so
// requests racing in parallel can pass the limit by the few that are
// checked in the microseconds between; the password check itself is a
// constant-time compare, never a slow hash.
//
// A request from a location's plugin host (over its stdio, see package
// pluginhost) is served by servePlugin: only the location-scoped token
// counts there, and only for that location.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if dir, ok := pluginhost.RequestLocation(r.Context()); ok {
		s.servePlugin(w, r, dir)
		return
	}
	if !s.guard(w, r) {
		return
	}
	if s.opts.Auth.Enabled() {
		if wait := s.opts.Limiter.RetryAfter(s.addressKey(r)); wait > 0 {
			errs.Write(w, errs.TooManyRequests(wait))
			return
		}
	}
	if webapp.Handles(r.URL.Path) {
		// A page: without valid credentials the browser gets the page that
		// explains pairing, never a Basic challenge.
		switch s.opts.Auth.check(r) {
		case authOK:
			if err := bodyType(r); err != nil {
				s.web.Refuse(w, r, err)
				return
			}
			s.web.ServeHTTP(w, r)
		case authWrong:
			s.opts.Limiter.Fail(s.addressKey(r))
			fallthrough
		default:
			s.web.Unauthenticated(w, r, s.ownOrigin(r), s.opts.Auth.username())
		}
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/auth/connect/") {
		switch s.opts.Auth.check(r) {
		case authOK:
		case authWrong:
			s.opts.Limiter.Fail(s.addressKey(r))
			fallthrough
		default:
			errs.Write(w, errs.Unauthorized("Authentication required"))
			return
		}
	}
	if err := bodyType(r); err != nil {
		errs.Write(w, err)
		return
	}
	s.route(w, r)
}

// route dispatches an admitted request: the file reads (a path of any
// depth), then the route table.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, fsReadPrefix) {
		s.fsRead(w, r)
		return
	}
	s.router.ServeHTTP(w, r)
}

// addressKey is the limiter key of a request's client address. IPv6
// addresses count per /64, the block one host usually holds, so that
// cycling through its addresses buys no attempts.
func (s *Server) addressKey(r *http.Request) string {
	ip := s.opts.ClientIP(r)
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// ServerInfo is GET /api/info.
type ServerInfo struct {
	Version string   `json:"version"`
	PID     int      `json:"pid"`
	URLs    []string `json:"urls"`
	Paths   struct {
		Tmp  string `json:"tmp"`
		Home string `json:"home,omitempty"`
	} `json:"paths"`
	// Sandbox is what confines the agent's commands and plugins: its mode
	// (enforced, off, unavailable), layers, network and limits.
	Sandbox sandbox.Status `json:"sandbox"`
	// Snapshots says whether the files are snapshotted around the agent's
	// steps (mode on, off or unavailable, and why), so that reverts can
	// put them back.
	Snapshots snapshot.Status `json:"snapshots"`
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	var si ServerInfo
	si.Version = s.opts.Version
	if si.Version == "" {
		si.Version = "unknown"
	}
	si.PID = os.Getpid()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	si.URLs = []string{scheme + "://" + r.Host}
	si.Paths.Tmp = os.TempDir()
	si.Paths.Home, _ = os.UserHomeDir()
	si.Sandbox = s.opts.Sandbox.Status()
	si.Snapshots = s.opts.Snapshots.Status()
	writeJSON(w, http.StatusOK, si)
	return nil
}

// nothingToPair is the answer to pairing on an instance without a password:
// pairing turns a code into a token signed with the password, so there is
// no code to make and none to redeem. Such an instance answers only
// loopback peers, with no credentials at all.
const nothingToPair = "this instance has no password: there is nothing to pair; clients connect without credentials from this machine"

// pair makes a single-use pairing code (see connect).
func (s *Server) pair(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	if !s.opts.Auth.Enabled() {
		return errs.InvalidRequest("no_password", nothingToPair)
	}
	if err := noBody(r); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"code": s.opts.Pairing.New(), "expires_in": int(PairingTTL / time.Second)})
	return nil
}

// connect redeems a pairing code: a browser gets the session cookie and a
// redirect to /, an API client the token. The code is spent either way.
// Without a password there is nothing to redeem: the answer says so, and a
// browser is pointed at the pages, which open without pairing.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, p router.Params) error {
	browser := strings.Contains(r.Header.Get("Accept"), "text/html")
	if !s.opts.Auth.Enabled() {
		if browser {
			textReply(w, http.StatusBadRequest, "This instance has no password: there is nothing to pair. "+
				"Its pages open without pairing in a browser on this machine: "+s.ownOrigin(r)+"/\n")
			return nil
		}
		return errs.InvalidRequest("no_password", nothingToPair)
	}
	if !s.opts.Pairing.Redeem(p["code"]) {
		s.opts.Limiter.Fail(s.addressKey(r))
		if browser {
			textReply(w, http.StatusUnauthorized, "This pairing link expired or was already used. Ask the instance for a new code with its password:\n\n  "+
				webapp.PairCommand(s.ownOrigin(r), s.opts.Auth.username())+"\n\nthen open "+s.ownOrigin(r)+"/auth/connect/<code> in this browser within five minutes.\n")
			return nil
		}
		return errs.Unauthorized("Pairing link expired or already used")
	}
	tok := s.opts.Auth.NewToken()
	if browser {
		http.SetCookie(w, &http.Cookie{Name: CookieName(r.Host), Value: tok, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteLaxMode, MaxAge: int(TokenTTL / time.Second)})
		http.Redirect(w, r, "/", http.StatusFound)
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"token": tok})
	return nil
}

// textReply answers a browser with plain text.
func textReply(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write([]byte(text))
}

// noBody refuses a request body where the operation takes none.
func noBody(r *http.Request) error {
	if r.ContentLength > 0 {
		return errs.InvalidRequest("payload", "this operation takes no request body")
	}
	return nil
}

// decodeBody reads a required strict JSON body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := jsonio.Decode(w, r, 1<<20, v); err != nil {
		return errs.InvalidRequest("payload", errs.Message(err))
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// locationQuery reads location[directory] (deepObject), refusing any other
// location[...] key, then the x-opencode-directory header.
func locationQuery(r *http.Request) (string, error) {
	q := r.URL.Query()
	dir := ""
	for k, v := range q {
		if !strings.HasPrefix(k, "location") {
			continue
		}
		if k != "location[directory]" {
			return "", errs.InvalidRequest("query", "unknown location property "+strings.TrimPrefix(k, "location"))
		}
		if len(v) != 1 {
			return "", errs.InvalidRequest("query", "location[directory] is repeated")
		}
		dir = v[0]
	}
	if dir == "" {
		if h := r.Header.Get("X-Opencode-Directory"); h != "" {
			dir = h
			if d, err := url.PathUnescape(h); err == nil {
				dir = d
			}
		}
	}
	return dir, nil
}

// ctxNoCancel keeps background work alive past the request.
func ctxNoCancel(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }

// location resolves and, on first use, loads the request's location.
func (s *Server) location(r *http.Request) (*location.Location, error) {
	dir, err := locationQuery(r)
	if err != nil {
		return nil, err
	}
	return s.locations.Get(dir)
}

func (s *Server) getLocation(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, loc.PublicInfo())
	return nil
}

func (s *Server) reloadLocations(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	if err := noBody(r); err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return errs.InvalidRequest("query", "location.reload takes no query parameters")
	}
	if err := s.locations.ReloadAll(); err != nil {
		return errs.Unavailable("location", err.Error())
	}
	s.opts.Plugins.Reload() // plugins load afresh, local files re-read
	// A reload cancels the pending permission requests and forms: the
	// rules they were asked under may have changed.
	if p, ok := s.opts.Runner.(Pending); ok {
		p.CancelPending("", "", "reloaded")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	list := loc.Agents
	if list == nil {
		list = []agents.Agent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": loc.PublicInfo(), "data": list})
	return nil
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request, p router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	for _, a := range loc.Agents {
		if a.ID == p["agentID"] {
			writeJSON(w, http.StatusOK, map[string]any{"location": loc.Ref(), "data": a})
			return nil
		}
	}
	return errs.AgentNotFound(p["agentID"])
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": loc.Ref(), "data": s.opts.Plugins.Running(r.Context(), pluginLocation(loc))})
	return nil
}

// pluginLocation is where a location's plugins load.
func pluginLocation(loc *location.Location) plugins.Location {
	return plugins.Location{Dir: loc.Directory, ProjectDir: loc.Project.Directory, ProjectID: loc.Project.ID}
}

func (s *Server) checkPlugins(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	var in struct {
		Target *string `json:"target"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	target := ""
	if in.Target != nil {
		target = *in.Target
	}
	if _, err := s.opts.Plugins.Check(r.Context(), loc.Project.Directory, target); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": loc.PublicInfo(), "data": s.opts.Plugins.Running(r.Context(), pluginLocation(loc))})
	return nil
}

func (s *Server) updatePlugins(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	if _, err := s.location(r); err != nil {
		return err
	}
	var in struct {
		Targets *[]string `json:"targets"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Targets == nil {
		return errs.InvalidRequest("payload", "targets is required")
	}
	updated, err := s.opts.Plugins.Update(ctxNoCancel(r), *in.Targets)
	if len(updated) > 0 {
		for _, t := range updated {
			s.opts.Bus.Publish("plugin.updated", nil, map[string]any{"target": t})
		}
		s.opts.Plugins.Reload()
		if rerr := s.locations.ReloadAll(); rerr != nil && err == nil {
			err = errs.Unavailable("location", rerr.Error())
		}
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

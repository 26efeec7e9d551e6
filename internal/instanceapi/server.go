package instanceapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/jsonio"
	"github.com/agentgate/agentgate/internal/ratelimit"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/store"
)

// Options configure a Server.
type Options struct {
	Auth    *Auth
	Pairing *Pairing // shared across config reloads by the caller
	Bus     *Bus     // shared across config reloads by the caller
	// Limiter counts failed authentications per client address (see
	// ServeHTTP); shared across config reloads by the caller. Default: a
	// new one with AuthFailuresPerAddress in AuthFailureWindow.
	Limiter *ratelimit.Limiter
	// ClientIP returns the address a request comes from (the caller honours
	// trusted proxies). Default: the host of RemoteAddr.
	ClientIP func(r *http.Request) string
	// DefaultDirectory is the location used when a request names none.
	DefaultDirectory string
	// AllowedRoots, when not empty, are the only directories (and their
	// descendants) that may be used as locations, after symlinks resolve.
	AllowedRoots []string
	// Agents are agent definitions from the server config, by id (the same
	// shape as an opencode.json "agent" map entry).
	Agents map[string]json.RawMessage
	// Plugins manages package, local and built-in plugins.
	Plugins *PluginManager
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
	// Schedule, when set, is called after a prompt is admitted with resume
	// not false, to wake the session's drain (the agent loop).
	Schedule func(sessionID string)
	// Runner, when set, runs the session drains (provider turns); it may
	// outlive this Server (configuration reloads) and uses the newest one.
	Runner *Runner
}

// Server is the instance API.
type Server struct {
	opts   Options
	router *router.Router

	mu        sync.Mutex
	locations map[string]*Location // canonical directory → loaded location

	activeMu sync.Mutex
	active   map[string]struct{} // sessions whose drain runs in this process

	afterAdmit func() // test hook: runs after a prompt is committed, before the answer
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
		opts.Bus = NewBus(0, opts.Clock)
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
	s := &Server{opts: opts, router: &router.Router{OnError: func(w http.ResponseWriter, _ *http.Request, err error) { writeError(w, err) }},
		locations: map[string]*Location{}, active: map[string]struct{}{}}
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
	rt.Handle("GET", "/api/event", s.events)
	s.sessionRoutes(rt)
	if opts.Runner != nil {
		opts.Runner.attach(s)
	}
	return s
}

// Bus is the server's event bus.
func (s *Server) Bus() *Bus { return s.opts.Bus }

// Handles reports whether the path belongs to the instance API.
func Handles(path string) bool {
	return path == "/api" || strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/auth/connect/")
}

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

// ServeHTTP authenticates (except the pairing link) and dispatches.
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
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Auth.Enabled() {
		if wait := s.opts.Limiter.RetryAfter(s.addressKey(r)); wait > 0 {
			writeError(w, tooManyRequests(wait))
			return
		}
	}
	if !strings.HasPrefix(r.URL.Path, "/auth/connect/") {
		switch s.opts.Auth.check(r) {
		case authOK:
		case authWrong:
			s.opts.Limiter.Fail(s.addressKey(r))
			fallthrough
		default:
			writeError(w, unauthorized("Authentication required"))
			return
		}
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
	writeJSON(w, http.StatusOK, si)
	return nil
}

func (s *Server) pair(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	if err := noBody(r); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"code": s.opts.Pairing.New(), "expires_in": int(PairingTTL / time.Second)})
	return nil
}

// connect redeems a pairing code: a browser gets the session cookie and a
// redirect to /, an API client the token. The code is spent either way.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, p router.Params) error {
	ok := s.opts.Pairing.Redeem(p["code"]) && s.opts.Auth.Enabled()
	browser := strings.Contains(r.Header.Get("Accept"), "text/html")
	if !ok {
		if s.opts.Auth.Enabled() {
			s.opts.Limiter.Fail(s.addressKey(r))
		}
		if browser {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte("This pairing link expired or was already used. Run `opencode pair` to get a new one.\n"))
			return nil
		}
		return unauthorized("Pairing link expired or already used")
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

func (s *Server) events(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	s.opts.Bus.Serve(w, r, s.opts.Heartbeat)
	return nil
}

// noBody refuses a request body where the operation takes none.
func noBody(r *http.Request) error {
	if r.ContentLength > 0 {
		return invalidRequest("payload", "this operation takes no request body")
	}
	return nil
}

// decodeBody reads a required strict JSON body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := jsonio.Decode(w, r, 1<<20, v); err != nil {
		return invalidRequest("payload", errorMessage(err))
	}
	return nil
}

func errorMessage(err error) string {
	var e interface{ Error() string }
	if errors.As(err, &e) {
		msg := e.Error()
		if i := strings.Index(msg, ": "); i > 0 && !strings.Contains(msg[:i], " ") {
			return msg[i+2:]
		}
		return msg
	}
	return "invalid request"
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
			return "", invalidRequest("query", "unknown location property "+strings.TrimPrefix(k, "location"))
		}
		if len(v) != 1 {
			return "", invalidRequest("query", "location[directory] is repeated")
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

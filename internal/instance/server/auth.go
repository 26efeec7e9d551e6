package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

// Auth checks instance credentials: HTTP Basic with
// the configured username and either the password or a pairing token; the
// same payload in ?auth_token= for EventSource clients; or the session
// cookie of a paired browser, honoured only for same-origin requests.
type Auth struct {
	Username string // default "opencode"
	Password string // empty: authentication is off
	Clock    clock.Clock
}

// TokenTTL is the lifetime of a pairing session token.
const TokenTTL = 30 * 24 * time.Hour

// Enabled reports whether a password is configured. A nil Auth is off.
func (a *Auth) Enabled() bool { return a != nil && a.Password != "" }

func (a *Auth) now() time.Time {
	if a.Clock == nil {
		return time.Now()
	}
	return a.Clock.Now()
}

// username is the Basic username: Username, default "opencode" (also for
// a nil Auth).
func (a *Auth) username() string {
	if a == nil || a.Username == "" {
		return "opencode"
	}
	return a.Username
}

func (a *Auth) key() []byte {
	m := hmac.New(sha256.New, []byte(a.Password))
	m.Write([]byte("opencode-session-v1"))
	return m.Sum(nil)
}

// NewToken issues a session token "<expiresAtEpochSeconds>.<sig>", signed
// with a key derived from the password: changing the password invalidates
// every token.
func (a *Auth) NewToken() string {
	exp := strconv.FormatInt(a.now().Add(TokenTTL).Unix(), 10)
	return exp + "." + a.sign(exp)
}

func (a *Auth) sign(exp string) string {
	m := hmac.New(sha256.New, a.key())
	m.Write([]byte(exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// ValidToken checks a session token's expiry and signature.
func (a *Auth) ValidToken(tok string) bool {
	exp, sig, ok := strings.Cut(tok, ".")
	if !ok || !a.Enabled() {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || a.now().Unix() >= n {
		return false
	}
	return hmac.Equal([]byte(sig), []byte(a.sign(exp)))
}

func (a *Auth) validSecret(user, secret string) bool {
	if subtle.ConstantTimeCompare([]byte(user), []byte(a.username())) != 1 {
		return false
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(a.Password)) == 1 {
		return true
	}
	return a.ValidToken(secret)
}

// CookieName is the session cookie's name for a Host header.
func CookieName(host string) string {
	if _, port, err := net.SplitHostPort(host); err == nil && port != "" {
		return "opencode_session_" + port
	}
	return "opencode_session"
}

// Check authenticates a request.
func (a *Auth) Check(r *http.Request) bool { return a.check(r) == authOK }

// authResult is what check found.
type authResult int

const (
	authOK      authResult = iota
	authMissing            // no credential at all
	authWrong              // a wrong password or token (Basic or ?auth_token=): a guess
	authStale              // a cookie that is not (or no longer) a valid token
)

func (a *Auth) check(r *http.Request) authResult {
	if !a.Enabled() {
		return authOK
	}
	verdict := func(ok bool) authResult {
		if ok {
			return authOK
		}
		return authWrong
	}
	if t := r.URL.Query().Get("auth_token"); t != "" {
		raw, err := base64.StdEncoding.DecodeString(t)
		if err != nil {
			raw, err = base64.RawURLEncoding.DecodeString(t)
		}
		if err == nil {
			user, secret, ok := strings.Cut(string(raw), ":")
			return verdict(ok && a.validSecret(user, secret))
		}
		return authWrong
	}
	if user, secret, ok := r.BasicAuth(); ok {
		return verdict(a.validSecret(user, secret))
	}
	if c, err := r.Cookie(CookieName(r.Host)); err == nil {
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host != r.Host {
				return authStale
			}
		}
		if a.ValidToken(c.Value) {
			return authOK
		}
		return authStale
	}
	return authMissing
}

// Pairing holds single-use pairing codes: 16 random bytes base64url, five
// minutes, at most 1000 live at once (the oldest go first).
type Pairing struct {
	Clock clock.Clock

	mu    sync.Mutex
	codes map[string]time.Time // code → expiry
	order []string
}

// PairingTTL is the lifetime of a pairing code.
const PairingTTL = 5 * time.Minute

const pairingCapacity = 1000

// NewPairing returns an empty code cache.
func NewPairing(clk clock.Clock) *Pairing {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Pairing{Clock: clk, codes: map[string]time.Time{}}
}

// New makes a pairing code.
func (p *Pairing) New() string {
	b := make([]byte, 16)
	rand.Read(b)
	code := base64.RawURLEncoding.EncodeToString(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.order) >= pairingCapacity {
		delete(p.codes, p.order[0])
		p.order = p.order[1:]
	}
	p.codes[code] = p.Clock.Now().Add(PairingTTL)
	p.order = append(p.order, code)
	return code
}

// Redeem consumes a code; it reports whether the code was live.
func (p *Pairing) Redeem(code string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	exp, ok := p.codes[code]
	if !ok {
		return false
	}
	delete(p.codes, code)
	for i, c := range p.order {
		if c == code {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
	return p.Clock.Now().Before(exp)
}

// scopeSecret signs location-scoped tokens: random per server process,
// never derived from the password (an instance without one still scopes
// its plugins), never stored or logged.
var scopeSecret = func() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}()

// scopedPrefix starts a location-scoped token.
const scopedPrefix = "loc1."

// ScopedToken issues a credential for one location's plugins:
// "loc1.<expiresAtEpochSeconds>.<directory, base64url>.<sig>", signed with
// this process's scope secret. It is honoured only on requests that come
// from that location's plugin host over its stdio (see servePlugin), and
// only for that location: it is never an instance credential, on the
// network or anywhere.
func ScopedToken(dir string, ttl time.Duration) string {
	exp := strconv.FormatInt(time.Now().Add(ttl).Unix(), 10)
	d := base64.RawURLEncoding.EncodeToString([]byte(dir))
	return scopedPrefix + exp + "." + d + "." + scopeSign(exp, dir)
}

func scopeSign(exp, dir string) string {
	m := hmac.New(sha256.New, scopeSecret)
	m.Write([]byte("loc:" + dir + "\x00" + exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// scopedDir checks a location-scoped token and returns its location.
func scopedDir(tok string, now time.Time) (string, bool) {
	rest, ok := strings.CutPrefix(tok, scopedPrefix)
	if !ok || len(tok) > 8192 {
		return "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", false
	}
	n, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || now.Unix() >= n {
		return "", false
	}
	d, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	if !hmac.Equal([]byte(parts[2]), []byte(scopeSign(parts[0], string(d)))) {
		return "", false
	}
	return string(d), true
}

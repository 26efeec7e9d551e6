package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/location"
	"github.com/agentgate/agentgate/internal/instance/plugins"
	"github.com/agentgate/agentgate/internal/ratelimit"
)

const testPassword = "s3cret-pw"

// srvHarness is an instance server over httptest with a fake clock.
type srvHarness struct {
	t    testing.TB
	clk  *clock.Fake
	opts Options
	srv  *Server
	ts   *httptest.Server
	dir  string // the default location (canonical)
}

func canonicalTempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newSrvHarness starts a server with password testPassword (mod may
// change the options).
func newSrvHarness(t testing.TB, mod func(o *Options)) *srvHarness {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	plugins, err := plugins.New(plugins.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := &srvHarness{t: t, clk: clk, dir: canonicalTempDir(t)}
	h.opts = Options{
		Auth:             &Auth{Username: "opencode", Password: testPassword, Clock: clk},
		Pairing:          NewPairing(clk),
		Bus:              events.NewBus(0, clk),
		DefaultDirectory: h.dir,
		Plugins:          plugins,
		Version:          "1.2.3-test",
		Clock:            clk,
	}
	if mod != nil {
		mod(&h.opts)
	}
	h.srv = New(h.opts)
	h.ts = httptest.NewServer(h.srv)
	t.Cleanup(h.ts.Close)
	return h
}

func basicHeader(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// do sends a request; headers are name, value pairs. The password is sent
// unless an Authorization header is given or auth is "none".
func (h *srvHarness) do(method, path string, body io.Reader, headers ...string) reply {
	h.t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	auth := true
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "auth" {
			auth = headers[i+1] != "none"
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	if auth && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", basicHeader("opencode", testPassword))
	}
	client := *h.ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func (h *srvHarness) get(path string, headers ...string) reply {
	h.t.Helper()
	return h.do("GET", path, nil, headers...)
}

// wantError checks a tagged error reply.
func wantError(t *testing.T, r reply, status int, tag string, fields map[string]any) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("content type %q", ct)
	}
	m := r.json(t)
	if m["_tag"] != tag {
		t.Fatalf("_tag %v, want %s; body %s", m["_tag"], tag, r.body)
	}
	if msg, _ := m["message"].(string); msg == "" {
		t.Fatalf("no message: %s", r.body)
	}
	for k, v := range fields {
		got, _ := json.Marshal(m[k])
		want, _ := json.Marshal(v)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s = %s, want %s; body %s", k, got, want, r.body)
		}
	}
	return m
}

func locQuery(dir string) string { return "?" + url.Values{"location[directory]": {dir}}.Encode() }

// ---- authentication -------------------------------------------------------

func TestAuth(t *testing.T) {
	h := newSrvHarness(t, nil)
	host := strings.TrimPrefix(h.ts.URL, "http://")
	cookie := CookieName(host)
	if !strings.HasPrefix(cookie, "opencode_session_") || strings.TrimPrefix(cookie, "opencode_session_") == "" {
		t.Fatalf("cookie name %q for host %q", cookie, host)
	}
	tok := h.opts.Auth.NewToken()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	for _, tc := range []struct {
		name    string
		path    string
		headers []string
		ok      bool
	}{
		{"no credentials", "/api/info", []string{"auth", "none"}, false},
		{"wrong password", "/api/info", []string{"Authorization", basicHeader("opencode", "nope")}, false},
		{"wrong username", "/api/info", []string{"Authorization", basicHeader("admin", testPassword)}, false},
		{"password", "/api/info", nil, true},
		{"pairing token as password", "/api/info", []string{"Authorization", basicHeader("opencode", tok)}, true},
		{"token with wrong username", "/api/info", []string{"Authorization", basicHeader("x", tok)}, false},
		{"tampered token", "/api/info", []string{"Authorization", basicHeader("opencode", tok+"x")}, false},
		{"bearer is not basic", "/api/info", []string{"Authorization", "Bearer " + testPassword}, false},
		{"auth_token", "/api/info?auth_token=" + url.QueryEscape(b64("opencode:"+testPassword)), []string{"auth", "none"}, true},
		{"auth_token with a token", "/api/info?auth_token=" + url.QueryEscape(b64("opencode:"+tok)), []string{"auth", "none"}, true},
		{"auth_token wrong", "/api/info?auth_token=" + url.QueryEscape(b64("opencode:bad")), []string{"auth", "none"}, false},
		{"auth_token not base64", "/api/info?auth_token=%25%25%25", []string{"auth", "none"}, false},
		{"auth_token without colon", "/api/info?auth_token=" + url.QueryEscape(b64(testPassword)), []string{"auth", "none"}, false},
		{"bad auth_token is not rescued by a good header", "/api/info?auth_token=" + url.QueryEscape(b64("opencode:bad")), nil, false},
		{"cookie", "/api/info", []string{"auth", "none", "Cookie", cookie + "=" + tok}, true},
		{"cookie same origin", "/api/info", []string{"auth", "none", "Cookie", cookie + "=" + tok, "Origin", "http://" + host}, true},
		{"cookie of another port", "/api/info", []string{"auth", "none", "Cookie", "opencode_session_1=" + tok}, false},
		{"cookie holding the password", "/api/info", []string{"auth", "none", "Cookie", cookie + "=" + testPassword}, false},
		{"pair needs credentials", "/api/pair", []string{"auth", "none"}, false},
		{"unknown route needs credentials", "/api/nope", []string{"auth", "none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "GET"
			if tc.path == "/api/pair" {
				method = "POST"
			}
			r := h.do(method, tc.path, nil, tc.headers...)
			if tc.ok {
				if r.status != 200 {
					t.Fatalf("status %d, want 200: %s", r.status, r.body)
				}
				return
			}
			m := wantError(t, r, 401, "UnauthorizedError", map[string]any{"message": "Authentication required"})
			_ = m
			if got := r.header.Get("WWW-Authenticate"); got != `Basic realm="Secure Area"` {
				t.Fatalf("WWW-Authenticate %q", got)
			}
		})
	}
	// A cookie sent from another origin's page does not get as far as
	// authentication: the request is refused as cross-origin.
	for _, origin := range []string{"http://evil.example", "http://127.0.0.1:1"} {
		r := h.get("/api/info", "auth", "none", "Cookie", cookie+"="+tok, "Origin", origin)
		wantError(t, r, 403, "ForbiddenError", nil)
	}
}

func TestAuthOffWithoutPassword(t *testing.T) {
	h := newSrvHarness(t, func(o *Options) { o.Auth = &Auth{Clock: o.Clock} })
	if r := h.get("/api/info", "auth", "none"); r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// Anything goes, even a wrong password.
	if r := h.get("/api/location", "Authorization", basicHeader("x", "y")); r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// A nil Auth is off too.
	h = newSrvHarness(t, func(o *Options) { o.Auth = nil })
	if r := h.get("/api/info", "auth", "none"); r.status != 200 {
		t.Fatalf("nil Auth: status %d: %s", r.status, r.body)
	}
}

func TestAuthDefaultUsername(t *testing.T) {
	h := newSrvHarness(t, func(o *Options) { o.Auth.Username = "" })
	if r := h.get("/api/info"); r.status != 200 {
		t.Fatalf("opencode with an unset Username: status %d", r.status)
	}
	if r := h.get("/api/info", "Authorization", basicHeader("", testPassword)); r.status != 401 {
		t.Fatalf("empty username: status %d", r.status)
	}
}

func TestTokenExpiryAndPasswordChange(t *testing.T) {
	h := newSrvHarness(t, nil)
	tok := h.opts.Auth.NewToken()
	withTok := []string{"Authorization", basicHeader("opencode", tok)}
	if r := h.get("/api/info", withTok...); r.status != 200 {
		t.Fatalf("fresh token: %d", r.status)
	}
	// Another server (a reload) with the same password accepts it…
	same := New(Options{Auth: &Auth{Username: "opencode", Password: testPassword, Clock: h.clk}})
	req := httptest.NewRequest("GET", "/api/info", nil)
	req.SetBasicAuth("opencode", tok)
	rec := httptest.NewRecorder()
	same.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("same password, other server: %d", rec.Code)
	}
	// …one with a new password does not.
	changed := New(Options{Auth: &Auth{Username: "opencode", Password: "rotated", Clock: h.clk}})
	rec = httptest.NewRecorder()
	changed.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Fatalf("rotated password still accepts the old token: %d", rec.Code)
	}
	h.clk.Advance(TokenTTL - time.Second)
	if r := h.get("/api/info", withTok...); r.status != 200 {
		t.Fatalf("token a second before expiry: %d", r.status)
	}
	h.clk.Advance(time.Second)
	if r := h.get("/api/info", withTok...); r.status != 401 {
		t.Fatalf("token at 30 days: %d", r.status)
	}
	if TokenTTL != 30*24*time.Hour {
		t.Fatalf("TokenTTL %v", TokenTTL)
	}
}

// ---- pairing ----------------------------------------------------------------

func (h *srvHarness) pairCode() string {
	h.t.Helper()
	r := h.do("POST", "/api/pair", nil)
	if r.status != 200 {
		h.t.Fatalf("pair: %d %s", r.status, r.body)
	}
	var pc struct {
		Code      string `json:"code"`
		ExpiresIn int    `json:"expires_in"`
	}
	if err := json.Unmarshal(r.body, &pc); err != nil {
		h.t.Fatal(err)
	}
	if pc.ExpiresIn != 300 {
		h.t.Fatalf("expires_in %d", pc.ExpiresIn)
	}
	return pc.Code
}

func TestPairing(t *testing.T) {
	h := newSrvHarness(t, nil)
	jsonAccept := []string{"auth", "none", "Accept", "application/json"}

	code := h.pairCode()
	raw, err := base64.RawURLEncoding.DecodeString(code)
	if len(code) != 22 || err != nil || len(raw) != 16 {
		t.Fatalf("code %q: want 22 base64url characters of 16 bytes (%v)", code, err)
	}
	if other := h.pairCode(); other == code {
		t.Fatal("two pairings gave the same code")
	}
	if r := h.do("POST", "/api/pair", strings.NewReader("{}"), "Content-Type", "application/json"); r.status != 400 {
		t.Fatalf("pair with a body: %d", r.status)
	}

	r := h.get("/auth/connect/"+code, jsonAccept...)
	if r.status != 200 {
		t.Fatalf("connect: %d %s", r.status, r.body)
	}
	var ps struct{ Token string }
	json.Unmarshal(r.body, &ps)
	if !regexp.MustCompile(`^\d+\.[A-Za-z0-9_-]{43}$`).MatchString(ps.Token) {
		t.Fatalf("token %q", ps.Token)
	}
	if r := h.get("/api/info", "Authorization", basicHeader("opencode", ps.Token)); r.status != 200 {
		t.Fatalf("token as password: %d", r.status)
	}

	// Spent.
	wantError(t, h.get("/auth/connect/"+code, jsonAccept...), 401, "UnauthorizedError",
		map[string]any{"message": "Pairing link expired or already used"})
	// A browser is told how to get a new code, with commands that exist.
	r = h.get("/auth/connect/"+code, "auth", "none", "Accept", "text/html")
	if body := string(r.body); r.status != 401 || !strings.Contains(body, "expired or was already used") ||
		!strings.Contains(body, "curl -u opencode -X POST "+h.ts.URL+"/api/pair") ||
		!strings.Contains(body, h.ts.URL+"/auth/connect/<code>") || strings.Contains(body, "opencode pair") {
		t.Fatalf("spent link in a browser: %d %s", r.status, body)
	}
	// Guessed.
	wantError(t, h.get("/auth/connect/AAAAAAAAAAAAAAAAAAAAAA", jsonAccept...), 401, "UnauthorizedError", nil)
	wantError(t, h.get("/auth/connect/x", jsonAccept...), 401, "UnauthorizedError", nil)

	// Expiry: usable just before five minutes, not at five.
	early, late := h.pairCode(), h.pairCode()
	h.clk.Advance(PairingTTL - time.Second)
	if r := h.get("/auth/connect/"+early, jsonAccept...); r.status != 200 {
		t.Fatalf("code before expiry: %d", r.status)
	}
	h.clk.Advance(time.Second)
	wantError(t, h.get("/auth/connect/"+late, jsonAccept...), 401, "UnauthorizedError", nil)

	// Browser: cookie and redirect.
	code = h.pairCode()
	browser := []string{"auth", "none", "Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}
	r = h.get("/auth/connect/"+code, browser...)
	if r.status != http.StatusFound || r.header.Get("Location") != "/" {
		t.Fatalf("browser connect: %d Location %q", r.status, r.header.Get("Location"))
	}
	host := strings.TrimPrefix(h.ts.URL, "http://")
	setCookie := r.header.Get("Set-Cookie")
	name := CookieName(host)
	for _, want := range []string{name + "=", "Path=/", "HttpOnly", "SameSite=Lax", "Max-Age=2592000"} {
		if !strings.Contains(setCookie, want) {
			t.Fatalf("Set-Cookie %q lacks %q", setCookie, want)
		}
	}
	if strings.Contains(setCookie, "Secure") {
		t.Fatalf("Set-Cookie %q is Secure", setCookie)
	}
	value := strings.TrimPrefix(strings.SplitN(setCookie, ";", 2)[0], name+"=")
	if r := h.get("/api/info", "auth", "none", "Cookie", name+"="+value); r.status != 200 {
		t.Fatalf("paired cookie: %d", r.status)
	}
	r = h.get("/auth/connect/"+code, browser...)
	if r.status != 401 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(string(r.body), "This pairing link expired or was already used.") {
		t.Fatalf("spent code in a browser: %d %q %q", r.status, r.header.Get("Content-Type"), r.body)
	}
	if r.header.Get("Set-Cookie") != "" {
		t.Fatal("a failed browser connect set a cookie")
	}
}

func TestPairingWithoutPassword(t *testing.T) {
	h := newSrvHarness(t, func(o *Options) { o.Auth = &Auth{Username: "opencode", Clock: o.Clock} })
	truth := map[string]any{"kind": "no_password",
		"message": "this instance has no password: there is nothing to pair; clients connect without credentials from this machine"}
	// No code is made: nothing could redeem it.
	wantError(t, h.do("POST", "/api/pair", nil, "auth", "none"), 400, "InvalidRequestError", truth)
	// A pairing link gets the same answer, never "expired".
	for _, code := range []string{"x", "AAAAAAAAAAAAAAAAAAAAAA"} {
		wantError(t, h.get("/auth/connect/"+code, "auth", "none", "Accept", "application/json"), 400, "InvalidRequestError", truth)
	}
	r := h.get("/auth/connect/x", "auth", "none", "Accept", "text/html")
	body := string(r.body)
	if r.status != 400 || r.header.Get("Set-Cookie") != "" || !strings.Contains(body, "no password: there is nothing to pair") ||
		!strings.Contains(body, h.ts.URL+"/") || strings.Contains(body, "expired") || strings.Contains(body, "opencode pair") {
		t.Fatalf("browser without password: %d cookie %q: %s", r.status, r.header.Get("Set-Cookie"), body)
	}
}

func TestPairingCapacity(t *testing.T) {
	p := NewPairing(clock.NewFake(time.Unix(0, 0)))
	first := p.New()
	for i := 0; i < 1000; i++ {
		p.New()
	}
	if p.Redeem(first) {
		t.Fatal("the oldest code survived 1000 newer ones")
	}
	last := p.New()
	if !p.Redeem(last) || p.Redeem(last) {
		t.Fatal("a fresh code must be redeemable exactly once")
	}
}

// ---- server info and routing ------------------------------------------------

func TestServerInfo(t *testing.T) {
	h := newSrvHarness(t, nil)
	r := h.get("/api/info")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var si struct {
		Version string   `json:"version"`
		PID     int      `json:"pid"`
		URLs    []string `json:"urls"`
		Paths   struct {
			Tmp  string `json:"tmp"`
			Home string `json:"home"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &si); err != nil {
		t.Fatal(err)
	}
	if si.Version != "1.2.3-test" || si.PID != os.Getpid() || len(si.URLs) != 1 || si.URLs[0] != h.ts.URL || si.Paths.Tmp != os.TempDir() {
		t.Fatalf("info %+v (server %s)", si, h.ts.URL)
	}
	h = newSrvHarness(t, func(o *Options) { o.Version = "" })
	if v := h.get("/api/info").json(t)["version"]; v != "unknown" {
		t.Fatalf("version %v", v)
	}
}

func TestRoutingErrors(t *testing.T) {
	h := newSrvHarness(t, nil)
	wantError(t, h.get("/api/nope"), 404, "NotFoundError", nil)
	r := h.do("DELETE", "/api/info", nil)
	wantError(t, r, 405, "MethodNotAllowedError", nil)
	if r.header.Get("Allow") != "GET" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
	if !Handles("/api") || !Handles("/api/info") || !Handles("/auth/connect/x") || Handles("/apix") || Handles("/auth/other") || !Handles("/") || !Handles("/ui/stats") || Handles("/uix") || Handles("/index.html") {
		t.Fatal("Handles")
	}
}

// ---- locations ----------------------------------------------------------------

type locInfo struct {
	Directory string           `json:"directory"`
	Project   location.Project `json:"project"`
}

func (h *srvHarness) location(path string, headers ...string) locInfo {
	h.t.Helper()
	r := h.get(path, headers...)
	if r.status != 200 {
		h.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	var li locInfo
	if err := json.Unmarshal(r.body, &li); err != nil {
		h.t.Fatal(err)
	}
	keys := r.json(h.t)
	if len(keys) != 2 {
		h.t.Fatalf("location has members %v", keys)
	}
	return li
}

func TestLocations(t *testing.T) {
	h := newSrvHarness(t, nil)
	other := filepath.Join(canonicalTempDir(t), "my project é")
	os.MkdirAll(other, 0o755)

	if li := h.location("/api/location"); li.Directory != h.dir || li.Project.Directory != h.dir || li.Project.Canonical != h.dir || li.Project.ID == "" {
		t.Fatalf("default location %+v, want %s", li, h.dir)
	}
	if li := h.location("/api/location" + locQuery(other)); li.Directory != other {
		t.Fatalf("query location %+v", li)
	}
	if li := h.location("/api/location", "X-Opencode-Directory", url.PathEscape(other)); li.Directory != other {
		t.Fatalf("header location %+v", li)
	}
	if li := h.location("/api/location", "X-Opencode-Directory", other); li.Directory != other {
		t.Fatalf("raw header location %+v", li)
	}
	if li := h.location("/api/location"+locQuery(h.dir), "X-Opencode-Directory", url.PathEscape(other)); li.Directory != h.dir {
		t.Fatalf("the query must win over the header: %+v", li)
	}
	if li := h.location("/api/location" + locQuery(other+"/")); li.Directory != other {
		t.Fatalf("trailing slash not cleaned: %+v", li)
	}

	file := filepath.Join(other, "file.txt")
	os.WriteFile(file, []byte("x"), 0o644)
	missing := filepath.Join(other, "missing")
	for _, tc := range []struct {
		name, query string
		status      int
		tag         string
		fields      map[string]any
	}{
		{"relative", locQuery("some/dir"), 400, "InvalidRequestError", map[string]any{"kind": "query"}},
		{"dot-dot", locQuery(other + "/../x"), 400, "InvalidRequestError", nil},
		{"a file", locQuery(file), 404, "LocationNotFoundError", map[string]any{"location": map[string]any{"directory": file}}},
		{"missing", locQuery(missing), 404, "LocationNotFoundError", map[string]any{"location": map[string]any{"directory": missing}}},
		{"unknown property", "?location[foo]=x", 400, "InvalidRequestError", nil},
		{"workspace property", "?location[workspace]=w", 400, "InvalidRequestError", nil},
		{"repeated", locQuery(other) + "&location%5Bdirectory%5D=" + url.QueryEscape(h.dir), 400, "InvalidRequestError", nil},
		{"NUL", locQuery("/tmp/a\x00b"), 400, "InvalidRequestError", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, h.get("/api/location"+tc.query), tc.status, tc.tag, tc.fields)
			// The agent and plugin lists resolve the location the same way.
			wantError(t, h.get("/api/agent"+tc.query), tc.status, tc.tag, tc.fields)
			wantError(t, h.get("/api/plugin"+tc.query), tc.status, tc.tag, tc.fields)
		})
	}
	wantError(t, h.get("/api/location", "X-Opencode-Directory", "relative%2Fdir"), 400, "InvalidRequestError", nil)
}

func TestLocationAllowedRoots(t *testing.T) {
	base := canonicalTempDir(t)
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(root, "inner"), 0o755)
	os.MkdirAll(outside, 0o755)
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "inner"), filepath.Join(base, "in-link")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(base+"/rootx", 0o755)
	h := newSrvHarness(t, func(o *Options) { o.AllowedRoots = []string{root}; o.DefaultDirectory = root })

	h.location("/api/location")
	h.location("/api/location" + locQuery(filepath.Join(root, "inner")))
	// A symlink from outside into the root is fine: the target counts.
	if li := h.location("/api/location" + locQuery(filepath.Join(base, "in-link"))); li.Directory != filepath.Join(base, "in-link") {
		t.Fatalf("%+v", li)
	}
	escape := filepath.Join(root, "escape")
	wantError(t, h.get("/api/location"+locQuery(escape)), 403, "LocationPermissionDeniedError",
		map[string]any{"location": map[string]any{"directory": escape}})
	wantError(t, h.get("/api/location"+locQuery(outside)), 403, "LocationPermissionDeniedError", nil)
	wantError(t, h.get("/api/location"+locQuery(base+"/rootx")), 403, "LocationPermissionDeniedError", nil)
	wantError(t, h.get("/api/location"+locQuery("/")), 403, "LocationPermissionDeniedError", nil)
}

func TestProjectDetection(t *testing.T) {
	h := newSrvHarness(t, nil)
	repo := filepath.Join(canonicalTempDir(t), "repo")
	deep := filepath.Join(repo, "a", "b")
	os.MkdirAll(filepath.Join(repo, ".git"), 0o755)
	os.MkdirAll(deep, 0o755)
	// A project-level agent is seen from a subdirectory.
	putFile(t, filepath.Join(repo, "opencode.json"), `{"agent": {"repo-agent": {}}}`)

	atRoot := h.location("/api/location" + locQuery(repo))
	atDeep := h.location("/api/location" + locQuery(deep))
	if atDeep.Directory != deep || atDeep.Project.Directory != repo || atDeep.Project.Canonical != repo {
		t.Fatalf("deep location %+v, want project %s", atDeep, repo)
	}
	if atRoot.Project != atDeep.Project {
		t.Fatalf("the same project has two records: %+v %+v", atRoot.Project, atDeep.Project)
	}
	if other := h.location("/api/location"); other.Project.ID == atRoot.Project.ID {
		t.Fatal("two projects share an id")
	}
	if r := h.do("POST", "/api/location/reload", nil); r.status != 204 {
		t.Fatalf("reload %d %s", r.status, r.body)
	}
	if again := h.location("/api/location" + locQuery(deep)); again.Project != atDeep.Project {
		t.Fatalf("project changed across a reload: %+v → %+v", atDeep.Project, again.Project)
	}
	// And across servers (a config reload makes a new one).
	h2 := newSrvHarness(t, nil)
	if again := h2.location("/api/location" + locQuery(deep)); again.Project.ID != atDeep.Project.ID {
		t.Fatal("project id differs between servers")
	}
	list := h.get("/api/agent" + locQuery(deep)).json(t)["data"].([]any)
	found := false
	for _, a := range list {
		found = found || a.(map[string]any)["id"] == "repo-agent"
	}
	if !found {
		t.Fatal("the project's opencode.json is not read from a subdirectory")
	}
}

// ---- agents -----------------------------------------------------------------

func TestAgentsAPI(t *testing.T) {
	h := newSrvHarness(t, func(o *Options) {
		o.Agents = map[string]json.RawMessage{"server-agent": json.RawMessage(`{"description":"from the server","mode":"primary"}`)}
	})
	putFile(t, filepath.Join(h.dir, "opencode.json"), `{"agent": {"proj": {"model": "openai/gpt-5", "steps": 4}}}`)
	putFile(t, filepath.Join(h.dir, ".opencode", "agent", "md-agent.md"), "---\nmode: subagent\n---\nprompt")

	r := h.get("/api/agent")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var list struct {
		Location map[string]any `json:"location"`
		Data     []agents.Agent `json:"data"`
	}
	json.Unmarshal(r.body, &list)
	if proj, _ := list.Location["project"].(map[string]any); list.Location["directory"] != h.dir || proj["directory"] != h.dir || proj["id"] == "" {
		t.Fatalf("location %v", list.Location)
	}
	var ids []string
	for _, a := range list.Data {
		ids = append(ids, a.ID)
	}
	if got, want := strings.Join(ids, ","), "build,plan,general,explore,compaction,title,summary,md-agent,proj,server-agent"; got != want {
		t.Fatalf("agents %s, want %s", got, want)
	}
	if len(r.json(t)) != 2 {
		t.Fatalf("envelope %s", r.body)
	}

	other := canonicalTempDir(t)
	r = h.get("/api/agent/proj")
	var one struct {
		Location map[string]any `json:"location"`
		Data     agents.Agent   `json:"data"`
	}
	json.Unmarshal(r.body, &one)
	if r.status != 200 || one.Location["directory"] != h.dir || one.Data.ID != "proj" || one.Data.Steps != 4 ||
		one.Data.Model == nil || one.Data.Model.ProviderID != "openai" {
		t.Fatalf("agent get: %d %s", r.status, r.body)
	}
	r = h.get("/api/agent/build" + locQuery(other))
	json.Unmarshal(r.body, &one)
	if r.status != 200 || one.Location["directory"] != other || one.Data.ID != "build" {
		t.Fatalf("agent get elsewhere: %d %s", r.status, r.body)
	}
	wantError(t, h.get("/api/agent/proj"+locQuery(other)), 404, "AgentNotFoundError",
		map[string]any{"agentID": "proj", "message": "Agent not found: proj"})
	wantError(t, h.get("/api/agent/a%2Fb"), 404, "AgentNotFoundError", map[string]any{"agentID": "a/b"})
}

func TestMalformedAgentConfig(t *testing.T) {
	h := newSrvHarness(t, nil)
	cfg := filepath.Join(h.dir, "opencode.json")
	putFile(t, cfg, `{"agent": {"x": {"mode": "boss"}}}`)
	for _, path := range []string{"/api/location", "/api/agent", "/api/agent/build", "/api/plugin"} {
		m := wantError(t, h.get(path), 503, "ServiceUnavailableError", map[string]any{"service": "location"})
		if msg := m["message"].(string); !strings.Contains(msg, cfg) || !strings.Contains(msg, "mode must be") {
			t.Fatalf("%s: message %q", path, msg)
		}
	}
	putFile(t, cfg, `{"agent": {"x": {"mode": "all"}}}`)
	h.location("/api/location")
}

// ---- reload -------------------------------------------------------------------

func TestReload(t *testing.T) {
	h := newSrvHarness(t, nil)
	a, b := h.dir, canonicalTempDir(t)
	h.location("/api/location" + locQuery(a))
	h.location("/api/location" + locQuery(b))
	if n := len(h.get("/api/agent" + locQuery(a)).json(t)["data"].([]any)); n != 7 {
		t.Fatalf("%d agents", n)
	}

	ev := h.subscribe(t)
	if f := ev.next(t); !strings.Contains(f, `"type":"server.connected"`) {
		t.Fatalf("first frame %q", f)
	}
	// The cache serves the old agents until the reload.
	putFile(t, filepath.Join(a, "opencode.json"), `{"agent": {"new-agent": {}}}`)
	if n := len(h.get("/api/agent" + locQuery(a)).json(t)["data"].([]any)); n != 7 {
		t.Fatalf("%d agents before the reload", n)
	}

	r := h.do("POST", "/api/location/reload", nil)
	if r.status != 204 || len(r.body) != 0 {
		t.Fatalf("reload: %d %q", r.status, r.body)
	}
	h.srv.Bus().Publish("test.sentinel", nil, nil)
	shutdowns, agentUpdates := map[string]int{}, map[string]int{}
	for {
		f := ev.next(t)
		var e events.Event
		if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(f, "data: "), "\n\n")), &e); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		if e.Type == "test.sentinel" {
			break
		}
		if e.Type == "agent.updated" && e.Location != nil {
			agentUpdates[e.Location.Directory]++
			continue
		}
		if e.Type != "location.shutdown" || e.Location == nil || !strings.HasPrefix(e.ID, "evt_") || e.Created != h.clk.Now().UnixMilli() {
			t.Fatalf("unexpected frame %q", f)
		}
		if !strings.Contains(f, `"data":{}`) {
			t.Fatalf("shutdown data: %q", f)
		}
		shutdowns[e.Location.Directory]++
	}
	if len(shutdowns) != 2 || shutdowns[a] != 1 || shutdowns[b] != 1 {
		t.Fatalf("location.shutdown per location: %v, want one each for %s and %s", shutdowns, a, b)
	}
	// Only the location whose agents changed announces it.
	if len(agentUpdates) != 1 || agentUpdates[a] != 1 {
		t.Fatalf("agent.updated: %v, want one for %s", agentUpdates, a)
	}
	if n := len(h.get("/api/agent" + locQuery(a)).json(t)["data"].([]any)); n != 8 {
		t.Fatalf("%d agents after the reload, want 8", n)
	}

	wantError(t, h.do("POST", "/api/location/reload", strings.NewReader("{}"), "Content-Type", "application/json"), 400, "InvalidRequestError", nil)
	wantError(t, h.do("POST", "/api/location/reload"+locQuery(a), nil), 400, "InvalidRequestError", nil)
	wantError(t, h.get("/api/location/reload"), 405, "MethodNotAllowedError", nil)

	// One location's config breaks: the reload reports it, the other
	// location is rebuilt, and the broken one answers 503 until fixed.
	cfg := filepath.Join(b, "opencode.jsonc")
	putFile(t, cfg, "{\"agent\": {\"y\": {\"steps\": 0}}}")
	m := wantError(t, h.do("POST", "/api/location/reload", nil), 503, "ServiceUnavailableError", map[string]any{"service": "location"})
	if msg := m["message"].(string); !strings.Contains(msg, cfg) || !strings.Contains(msg, "steps") || strings.Contains(msg, "ServiceUnavailableError") {
		t.Fatalf("message %q", msg)
	}
	h.location("/api/location" + locQuery(a))
	wantError(t, h.get("/api/agent"+locQuery(b)), 503, "ServiceUnavailableError", nil)
	os.Remove(cfg)
	h.location("/api/location" + locQuery(b))
	if r := h.do("POST", "/api/location/reload", nil); r.status != 204 {
		t.Fatalf("reload after the fix: %d %s", r.status, r.body)
	}
}

// ---- events -------------------------------------------------------------------

// eventStream reads SSE frames of one /api/event subscription.
type eventStream struct {
	resp   *http.Response
	br     *bufio.Reader
	frames chan string
	errc   chan error
	cancel context.CancelFunc
	// heartbeats keeps `: heartbeat` frames (skipped otherwise); lastID is
	// the `id:` line of the frame next returned last (next strips it).
	heartbeats bool
	lastID     string
}

func (h *srvHarness) openStream(t testing.TB) *eventStream { return h.openStreamAt(t, "/api/event") }

// openStreamAt opens an event stream at path with request headers (name,
// value pairs).
func (h *srvHarness) openStreamAt(t testing.TB, path string, headers ...string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", h.ts.URL+path, nil)
	req.SetBasicAuth("opencode", testPassword)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("event stream %s: %d", path, resp.StatusCode)
	}
	return &eventStream{resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
}

// background reads the stream's frames into s.frames.
func (s *eventStream) background() *eventStream {
	s.frames, s.errc = make(chan string, 256), make(chan error, 1)
	go func() {
		for {
			f, err := s.readFrame()
			if err != nil {
				s.errc <- err
				return
			}
			s.frames <- f
		}
	}()
	return s
}

// readFrame reads up to and including the blank line that ends a frame;
// it skips heartbeats unless the stream keeps them.
func (s *eventStream) readFrame() (string, error) {
	for {
		f, err := s.readRaw()
		if err != nil || (f == ": heartbeat\n\n" && !s.heartbeats) {
			if err != nil {
				return f, err
			}
			continue
		}
		return f, nil
	}
}

func (s *eventStream) readRaw() (string, error) {
	var b strings.Builder
	for {
		line, err := s.br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if line == "\n" {
			return b.String(), nil
		}
	}
}

// subscribe opens a stream whose frames are read in the background.
func (h *srvHarness) subscribe(t testing.TB) *eventStream { return h.openStream(t).background() }

func (s *eventStream) next(t testing.TB) string {
	t.Helper()
	select {
	case f := <-s.frames:
		s.lastID = ""
		if rest, ok := strings.CutPrefix(f, "id: "); ok {
			id, data, _ := strings.Cut(rest, "\n")
			s.lastID, f = id, data
		}
		return f
	case err := <-s.errc:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no frame within 10s")
	}
	return ""
}

var connectedFrame = regexp.MustCompile(`^data: \{"id":"evt_[0-9a-f]{14}[0-9A-Za-z]{12}","type":"server.connected","data":\{\}\}\n\n$`)

func TestEventStreamFraming(t *testing.T) {
	h := newSrvHarness(t, nil)
	s := h.openStream(t)
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-transform",
		"X-Accel-Buffering": "no", "X-Content-Type-Options": "nosniff"} {
		if got := s.resp.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	first, err := s.readFrame()
	if err != nil || !connectedFrame.MatchString(first) {
		t.Fatalf("first frame %q (%v)", first, err)
	}
	h.srv.Bus().Publish("session.updated", &events.LocationRef{Directory: "/repo"}, map[string]any{"n": 1})
	f, err := s.readFrame()
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^data: \{"id":"evt_[0-9a-f]{14}[0-9A-Za-z]{12}","created":` +
		regexp.QuoteMeta(jsonNumber(h.clk.Now().UnixMilli())) + `,"type":"session.updated","location":\{"directory":"/repo"\},"data":\{"n":1\}\}\n\n$`)
	if !want.MatchString(f) {
		t.Fatalf("frame %q", f)
	}
	// Event ids ascend.
	h.srv.Bus().Publish("a", nil, nil)
	h.srv.Bus().Publish("b", nil, nil)
	fa, _ := s.readFrame()
	fb, _ := s.readFrame()
	var ea, eb events.Event
	json.Unmarshal([]byte(fa[len("data: "):]), &ea)
	json.Unmarshal([]byte(fb[len("data: "):]), &eb)
	if ea.Type != "a" || eb.Type != "b" || !(ea.ID < eb.ID) {
		t.Fatalf("ids %s %s", ea.ID, eb.ID)
	}
	// Credentials are required, also through ?auth_token.
	if r := h.get("/api/event", "auth", "none"); r.status != 401 {
		t.Fatalf("unauthenticated stream: %d", r.status)
	}
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestEventHeartbeat(t *testing.T) {
	h := newSrvHarness(t, func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	s := h.openStream(t)
	s.heartbeats = true
	if f, err := s.readFrame(); err != nil || !connectedFrame.MatchString(f) {
		t.Fatalf("first frame %q %v", f, err)
	}
	// One at once (a client knows the stream is live before any event),
	// then one per interval.
	for i := 0; i < 3; i++ {
		if f, err := s.readFrame(); err != nil || f != ": heartbeat\n\n" {
			t.Fatalf("frame %q %v, want a heartbeat", f, err)
		}
	}
}

func TestEventNoReplay(t *testing.T) {
	h := newSrvHarness(t, nil)
	h.srv.Bus().Publish("before", nil, nil)
	s := h.subscribe(t)
	if f := s.next(t); !connectedFrame.MatchString(f) {
		t.Fatalf("first frame %q", f)
	}
	h.srv.Bus().Publish("after", nil, nil)
	if f := s.next(t); !strings.Contains(f, `"type":"after"`) {
		t.Fatalf("late subscriber got %q", f)
	}
}

func TestEventThousandSubscribers(t *testing.T) {
	h := newSrvHarness(t, nil)
	const n = 1000
	streams := make([]*eventStream, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range streams {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", h.ts.URL+"/api/event", nil)
			req.SetBasicAuth("opencode", testPassword)
			resp, err := h.ts.Client().Do(req)
			if err != nil {
				cancel()
				errs <- err
				return
			}
			s := &eventStream{resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
			if f, err := s.readFrame(); err != nil || !connectedFrame.MatchString(f) {
				errs <- errors.New("bad first frame: " + f)
			}
			streams[i] = s
		}(i)
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range streams {
			if s != nil {
				s.cancel()
				s.resp.Body.Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := h.srv.Bus().Subscribers(); got != n {
		t.Fatalf("%d subscribers, want %d", got, n)
	}
	h.srv.Bus().Publish("broadcast", nil, map[string]any{"hello": "all"})
	got := make(chan error, n)
	for _, s := range streams {
		go func(s *eventStream) {
			f, err := s.readFrame()
			if err == nil && !strings.Contains(f, `"type":"broadcast","data":{"hello":"all"}`) {
				err = errors.New("frame " + f)
			}
			got <- err
		}(s)
	}
	deadline := time.After(60 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatalf("only %d of %d subscribers got the event", i, n)
		}
	}
}

func TestEventSlowSubscriberDropped(t *testing.T) {
	h := newSrvHarness(t, func(o *Options) { o.Bus = events.NewBus(4, o.Clock) })
	bus := h.srv.Bus()
	fast := h.subscribe(t)
	fast.next(t)
	slow := h.openStream(t)
	if f, err := slow.readFrame(); err != nil || !connectedFrame.MatchString(f) {
		t.Fatalf("slow first frame %q %v", f, err)
	}
	if bus.Subscribers() != 2 {
		t.Fatalf("%d subscribers", bus.Subscribers())
	}
	// The slow client reads no more. Big events fill the socket buffers,
	// then its queue of 4; the fast one reads each before the next is sent.
	blob := strings.Repeat("x", 256<<10)
	i := 0
	for ; bus.Subscribers() == 2; i++ {
		if i == 2000 {
			t.Fatal("the slow subscriber was never dropped")
		}
		bus.Publish("big", nil, map[string]any{"blob": blob})
		if f := fast.next(t); !strings.Contains(f, `"type":"big"`) {
			t.Fatalf("fast got %.80q", f)
		}
	}
	t.Logf("dropped after %d events", i)
	// The others keep receiving.
	bus.Publish("after-drop", nil, nil)
	if f := fast.next(t); !strings.Contains(f, `"type":"after-drop"`) {
		t.Fatalf("fast got %.80q", f)
	}
	// The slow stream ends with an error (not a clean end), so that its
	// client knows to reconnect and resync; it never sees after-drop.
	done := make(chan error, 1)
	go func() {
		var sawAfter bool
		for {
			f, err := slow.readFrame()
			sawAfter = sawAfter || strings.Contains(f, "after-drop")
			if err != nil {
				if sawAfter {
					err = errors.New("the dropped subscriber got a later event")
				}
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err == nil || err == io.EOF || strings.Contains(err.Error(), "later event") {
			t.Fatalf("slow stream ended with %v, want an abrupt end", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the slow stream did not end")
	}
}

// ---- plugins --------------------------------------------------------------------

func TestPluginBodies(t *testing.T) {
	h := newSrvHarness(t, nil)
	jsonCT := []string{"Content-Type", "application/json"}
	for _, path := range []string{"/api/plugin/check", "/api/plugin/update"} {
		for _, body := range []string{"", "{", `{"target": "a"} x`, `[]`, `{"unknown": 1}`, `{"target": 5}`, `{"targets": "a"}`} {
			if path == "/api/plugin/check" && body == `{"targets": "a"}` {
				continue
			}
			if path == "/api/plugin/update" && body == `{"target": 5}` {
				continue
			}
			wantError(t, h.do("POST", path, strings.NewReader(body), jsonCT...), 400, "InvalidRequestError", map[string]any{"kind": "payload"})
		}
	}
	wantError(t, h.do("POST", "/api/plugin/check", strings.NewReader(`{"targets": ["a"]}`), jsonCT...), 400, "InvalidRequestError", nil)
	wantError(t, h.do("POST", "/api/plugin/update", strings.NewReader(`{"target": "a"}`), jsonCT...), 400, "InvalidRequestError", nil)
	wantError(t, h.do("POST", "/api/plugin/update", strings.NewReader(`{}`), jsonCT...), 400, "InvalidRequestError", nil)
	wantError(t, h.do("POST", "/api/plugin/update", strings.NewReader(`{"targets": null}`), jsonCT...), 400, "InvalidRequestError", nil)
	wantError(t, h.do("POST", "/api/plugin/check", strings.NewReader(`{}`), "Content-Type", "text/plain"), 400, "InvalidRequestError", nil)

	for _, r := range []reply{
		h.get("/api/plugin"),
		h.do("POST", "/api/plugin/check", strings.NewReader(`{}`), jsonCT...),
		h.do("POST", "/api/plugin/check", strings.NewReader(`{"target": null}`), jsonCT...),
	} {
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		m := r.json(t)
		if loc, _ := m["location"].(map[string]any); len(m) != 2 || loc["directory"] != h.dir || m["data"] == nil {
			t.Fatalf("envelope %s", r.body)
		}
	}
	if r := h.do("POST", "/api/plugin/update", strings.NewReader(`{"targets": []}`), jsonCT...); r.status != 204 {
		t.Fatalf("update of nothing: %d %s", r.status, r.body)
	}
}

// ---- failed authentications per client address ------------------------------

// limitedHarness is a server whose client address is the X-Test-Client
// header (the Caddy glue passes the address Caddy determined).
func limitedHarness(t *testing.T, mod func(o *Options)) *srvHarness {
	return newSrvHarness(t, func(o *Options) {
		o.ClientIP = func(r *http.Request) string { return r.Header.Get("X-Test-Client") }
		if mod != nil {
			mod(o)
		}
	})
}

func wantLimited(t *testing.T, r reply) {
	t.Helper()
	wantError(t, r, 429, "TooManyRequestsError", nil)
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 || n > int(AuthFailureWindow/time.Second) {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
}

func TestAuthFailuresLimitedPerAddress(t *testing.T) {
	h := limitedHarness(t, nil)
	a := []string{"X-Test-Client", "203.0.113.7"}
	wrong := append([]string{"Authorization", basicHeader("opencode", "guess")}, a...)
	for i := 0; i < 30; i++ {
		r := h.get("/api/info", wrong...)
		if i < AuthFailuresPerAddress {
			wantError(t, r, 401, "UnauthorizedError", nil)
			continue
		}
		wantLimited(t, r)
	}
	// The clock has not moved: the whole window is left.
	if got := h.get("/api/info", wrong...).header.Get("Retry-After"); got != "900" {
		t.Fatalf("Retry-After %q, want 900", got)
	}
	// While limited, the right password from that address is refused too.
	wantLimited(t, h.get("/api/info", a...))
	wantLimited(t, h.get("/auth/connect/"+h.pairCode(), append([]string{"auth", "none", "Accept", "application/json"}, a...)...))
	// Another address is not affected.
	if r := h.get("/api/info", "X-Test-Client", "198.51.100.1"); r.status != 200 {
		t.Fatalf("right password from another address: %d %s", r.status, r.body)
	}
	// Once the window has passed the address may try again.
	h.clk.Advance(AuthFailureWindow - time.Second)
	wantLimited(t, h.get("/api/info", a...))
	h.clk.Advance(time.Second)
	if r := h.get("/api/info", a...); r.status != 200 {
		t.Fatalf("right password after the window: %d %s", r.status, r.body)
	}
	wantError(t, h.get("/api/info", wrong...), 401, "UnauthorizedError", nil)
}

func TestAuthFailuresEveryCredentialPath(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	jsonAccept := []string{"auth", "none", "Accept", "application/json"}
	for _, tc := range []struct {
		name    string
		path    string
		headers []string
	}{
		{"basic password", "/api/info", []string{"Authorization", basicHeader("opencode", "guess")}},
		{"basic username", "/api/info", []string{"Authorization", basicHeader("root", testPassword)}},
		{"basic token", "/api/info", []string{"Authorization", basicHeader("opencode", "4102444800.forged")}},
		{"auth_token", "/api/info?auth_token=" + url.QueryEscape(b64("opencode:guess")), []string{"auth", "none"}},
		{"auth_token not base64", "/api/info?auth_token=%25%25", []string{"auth", "none"}},
		{"pairing code", "/auth/connect/AAAAAAAAAAAAAAAAAAAAAA", jsonAccept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := limitedHarness(t, nil)
			hdr := append([]string{"X-Test-Client", "203.0.113.7"}, tc.headers...)
			for i := 0; i < AuthFailuresPerAddress; i++ {
				wantError(t, h.get(tc.path, hdr...), 401, "UnauthorizedError", nil)
			}
			wantLimited(t, h.get(tc.path, hdr...))
			wantLimited(t, h.get("/api/info", "X-Test-Client", "203.0.113.7"))
		})
	}
}

// Requests without credentials and stale cookies are not guesses: a
// browser left with an old cookie does not lock its address out.
func TestAuthFailuresNotCounted(t *testing.T) {
	h := limitedHarness(t, nil)
	host := strings.TrimPrefix(h.ts.URL, "http://")
	for i := 0; i < 3*AuthFailuresPerAddress; i++ {
		wantError(t, h.get("/api/info", "auth", "none", "X-Test-Client", "203.0.113.7"), 401, "UnauthorizedError", nil)
		wantError(t, h.get("/api/info", "auth", "none", "X-Test-Client", "203.0.113.7",
			"Cookie", CookieName(host)+"=1.stale"), 401, "UnauthorizedError", nil)
	}
	if r := h.get("/api/info", "X-Test-Client", "203.0.113.7"); r.status != 200 {
		t.Fatalf("right password: %d %s", r.status, r.body)
	}
	// Without a password nothing is counted (there is nothing to guess).
	h = limitedHarness(t, func(o *Options) { o.Auth = &Auth{Clock: o.Clock} })
	for i := 0; i < 3*AuthFailuresPerAddress; i++ {
		h.get("/auth/connect/x", "auth", "none", "X-Test-Client", "203.0.113.7")
	}
	if r := h.get("/api/info", "X-Test-Client", "203.0.113.7"); r.status != 200 {
		t.Fatalf("auth off: %d %s", r.status, r.body)
	}
}

// IPv6 clients count per /64; mapped IPv4 counts as IPv4.
func TestAuthFailuresIPv6Prefix(t *testing.T) {
	h := limitedHarness(t, nil)
	for i := 0; i < AuthFailuresPerAddress; i++ {
		h.get("/api/info", "X-Test-Client", fmt.Sprintf("2001:db8::%x", i+1), "Authorization", basicHeader("opencode", "guess"))
	}
	wantLimited(t, h.get("/api/info", "X-Test-Client", "2001:db8::ffff:1234"))
	if r := h.get("/api/info", "X-Test-Client", "2001:db8:0:1::1"); r.status != 200 {
		t.Fatalf("another /64: %d", r.status)
	}
	for i := 0; i < AuthFailuresPerAddress; i++ {
		h.get("/api/info", "X-Test-Client", "::ffff:192.0.2.1", "Authorization", basicHeader("opencode", "guess"))
	}
	wantLimited(t, h.get("/api/info", "X-Test-Client", "192.0.2.1"))
}

// Many addresses never grow the limiter past its cap.
func TestAuthFailuresMemoryBound(t *testing.T) {
	var lim *ratelimit.Limiter
	h := limitedHarness(t, func(o *Options) {
		lim = NewAuthLimiter(o.Clock)
		lim.Cap = 50
		o.Limiter = lim
	})
	for i := 0; i < 500; i++ {
		h.get("/api/info", "X-Test-Client", fmt.Sprintf("10.0.%d.%d", i/256, i%256), "Authorization", basicHeader("opencode", "guess"))
		if n := lim.Len(); n > 50 {
			t.Fatalf("%d addresses tracked, cap 50", n)
		}
	}
	if NewAuthLimiter(nil).Cap <= 0 || NewAuthLimiter(nil).Cap > ratelimit.DefaultCap {
		t.Fatal("the default limiter is not bounded")
	}
}

func putFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

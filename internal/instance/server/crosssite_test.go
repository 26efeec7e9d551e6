package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// attackBody is what a page of another site posts to create a session
// that may run bash without asking.
const attackBody = `{"title":"pwned","permissions":[{"action":"bash","resource":"*","effect":"allow"}]}`

// noCORSHeaders are the headers a browser adds to
// fetch(url, {mode: "no-cors", method: "POST", body: new Blob([json])})
// from a page of https://evil.example: no Content-Type (a Blob without a
// type), an Origin, and the Sec-Fetch metadata.
var noCORSHeaders = []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors",
	"Sec-Fetch-Dest", "empty", "Accept", "*/*"}

// noPassword is a server option of an instance without a password.
func noPassword(o *Options) { o.Auth = &Auth{Clock: o.Clock} }

// raw sends a request as it is given: Host (when not "") and headers
// exactly, no credentials added.
func (h *srvHarness) raw(method, path, host string, body io.Reader, headers ...string) reply {
	h.t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func (h *srvHarness) sessionCount() int {
	h.t.Helper()
	return len(h.list("").Data)
}

// A page of another site that posts a session with its own permission
// rules gets 403, whatever the instance's password: nothing is created.
func TestCrossSiteSessionCreateRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		auth []string
	}{
		{"no password", noPassword, nil},
		// Credentials do not help a cross-site request: it is refused
		// before authentication (a browser may well hold a Basic login).
		{"password and Basic", nil, []string{"Authorization", basicHeader("opencode", testPassword)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSessHarness(t, tc.mod)
			r := h.raw("POST", "/api/session", "", strings.NewReader(attackBody), append(append([]string{}, noCORSHeaders...), tc.auth...)...)
			wantError(t, r, 403, "ForbiddenError", nil)
			if n := h.sessionCount(); n != 0 {
				t.Fatalf("%d sessions exist after the refused request", n)
			}
			if len(h.loop.Scheduled()) != 0 {
				t.Fatal("a drain was woken")
			}
		})
	}
}

// The same body without a Content-Type from a client that sends no Origin
// is 400: the API takes JSON, and says so.
func TestBodyWithoutContentTypeRefused(t *testing.T) {
	h := newSessHarness(t, noPassword)
	r := h.raw("POST", "/api/session", "", strings.NewReader(attackBody))
	wantError(t, r, 400, "InvalidRequestError", map[string]any{"kind": "payload"})
	// Chunked (no length) is a body too.
	r = h.raw("POST", "/api/session", "", io.MultiReader(strings.NewReader(attackBody)))
	wantError(t, r, 400, "InvalidRequestError", map[string]any{"kind": "payload"})
	if n := h.sessionCount(); n != 0 {
		t.Fatalf("%d sessions exist after the refused requests", n)
	}
	// With the JSON type (or a +json one) it is created.
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/vnd.opencode+json"} {
		if r := h.raw("POST", "/api/session", "", strings.NewReader(`{"title":"ok"}`), "Content-Type", ct); r.status != 200 {
			t.Fatalf("%s: %d %s", ct, r.status, r.body)
		}
	}
	// Other types keep the answer they had: the decoder's 400.
	r = h.raw("POST", "/api/session", "", strings.NewReader(`{"title":"x"}`), "Content-Type", "text/plain")
	wantError(t, r, 400, "InvalidRequestError", nil)
	// A request without a body needs no type.
	if r := h.raw("GET", "/api/session", "", nil); r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if n := h.sessionCount(); n != 3 {
		t.Fatalf("%d sessions, want 3", n)
	}
}

// Cross-site reads are refused too: a location read from another site's
// page neither loads the location nor its plugins.
func TestCrossSiteReadsRefused(t *testing.T) {
	h := newDrainHarness(t)
	marker := filepath.Join(h.dir, "plugin-loaded")
	withPlugins(t, h, map[string]string{"marker.ts": `
import { writeFileSync } from "node:fs";
export const Marker = async ({ directory }) => {
  writeFileSync(directory + "/plugin-loaded", "loaded\n");
  return {};
};`}, nil)
	q := locQuery(h.dir)
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"}, // <img src>: no Origin
		{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "cors", "Origin", "http://localhost:3000"},
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
	} {
		auth := append([]string{"Authorization", basicHeader("opencode", testPassword)}, hdr...)
		for _, p := range []string{"/api/location" + q, "/api/plugin" + q, "/api/agent" + q} {
			r := h.raw("GET", p, "", nil, auth...)
			wantError(t, r, 403, "ForbiddenError", nil)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused request loaded the project's plugins")
	}
	// The same read from the instance's own pages, or a client that sends
	// no Origin, loads them.
	r := h.raw("GET", "/api/plugin"+q, "", nil, "Authorization", basicHeader("opencode", testPassword),
		"Origin", h.ts.URL, "Sec-Fetch-Site", "same-origin")
	if r.status != 200 {
		t.Fatalf("same-origin plugin list: %d %s", r.status, r.body)
	}
	waitFile(t, marker, "loaded")
}

// Without a plugin host the proof is the location list itself: a refused
// location read leaves the location unloaded.
func TestCrossSiteLocationNotLoaded(t *testing.T) {
	h := newSrvHarness(t, noPassword)
	sub := filepath.Join(h.dir, "sub")
	os.MkdirAll(sub, 0o755)
	r := h.raw("GET", "/api/location"+locQuery(sub), "", nil, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	wantError(t, r, 403, "ForbiddenError", nil)
	_, canonical, err := h.srv.locations.Check(sub)
	if err != nil {
		t.Fatal(err)
	}
	if h.srv.locations.Loaded(canonical) {
		t.Fatal("the refused request loaded the location")
	}
	if r := h.raw("GET", "/api/location"+locQuery(sub), "", nil); r.status != 200 {
		t.Fatalf("same request without Origin: %d %s", r.status, r.body)
	}
	if !h.srv.locations.Loaded(canonical) {
		t.Fatal("the allowed request did not load the location")
	}
}

// Origin without Sec-Fetch headers (an older browser): only the
// instance's own origin passes; "null" (a sandboxed page, a file) is
// foreign.
func TestOriginChecked(t *testing.T) {
	h := newSessHarness(t, noPassword)
	host := strings.TrimPrefix(h.ts.URL, "http://")
	for _, o := range []string{"https://evil.example", "null", "", "http://" + host + ".evil.example", "https://" + host,
		"http://evil.example:" + strings.Split(host, ":")[1], "file://", "http://" + host + "/path", "%%%"} {
		r := h.raw("POST", "/api/session", "", strings.NewReader(`{}`), "Content-Type", "application/json", "Origin", o)
		wantError(t, r, 403, "ForbiddenError", nil)
	}
	if n := h.sessionCount(); n != 0 {
		t.Fatalf("%d sessions after refused requests", n)
	}
	for _, o := range []string{"http://" + host, "HTTP://" + strings.ToUpper(host)} {
		r := h.raw("POST", "/api/session", "", strings.NewReader(`{}`), "Content-Type", "application/json", "Origin", o,
			"Sec-Fetch-Site", "same-origin")
		if r.status != 200 {
			t.Fatalf("same origin %s: %d %s", o, r.status, r.body)
		}
	}
	// A request the user typed or a bookmark: Sec-Fetch-Site none.
	if r := h.raw("GET", "/api/info", "", nil, "Sec-Fetch-Site", "none"); r.status != 200 {
		t.Fatalf("Sec-Fetch-Site none: %d %s", r.status, r.body)
	}
}

// Without a password the instance answers only a loopback Host: DNS
// rebinding (evil.example resolving to 127.0.0.1) is refused.
func TestNoPasswordLoopbackHost(t *testing.T) {
	h := newSessHarness(t, noPassword)
	port := strings.Split(strings.TrimPrefix(h.ts.URL, "http://"), ":")[1]
	for _, host := range []string{"evil.example:4096", "evil.example", "localhost.evil.example", "127.0.0.1.nip.io:" + port,
		"10.0.0.1", "[::2]:4096", "localhost.:4096", "[fe80::1%25lo]:4096", ".localhost"} {
		r := h.raw("POST", "/api/session", host, strings.NewReader(`{}`), "Content-Type", "application/json")
		wantError(t, r, 403, "ForbiddenError", nil)
		// The web app's pages as well.
		if r := h.raw("GET", "/", host, nil); r.status != 403 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Fatalf("page with Host %s: %d %s", host, r.status, r.body)
		}
	}
	if n := h.sessionCount(); n != 0 {
		t.Fatalf("%d sessions after refused requests", n)
	}
	for _, host := range []string{"localhost:4096", "LOCALHOST:" + port, "127.0.0.1:4096", "127.1.2.3", "[::1]:4096", "[::1]", "app.localhost:4096", "localhost"} {
		r := h.raw("GET", "/api/info", host, nil, "Origin", "http://"+host)
		if r.status != 200 {
			t.Fatalf("Host %s: %d %s", host, r.status, r.body)
		}
	}
	// With a password, remote clients use whatever name the operator
	// gave: any Host, with credentials.
	hp := newSrvHarness(t, nil)
	r := hp.raw("GET", "/api/info", "agents.example.com:4096", nil)
	wantError(t, r, 401, "UnauthorizedError", nil)
	r = hp.raw("GET", "/api/info", "agents.example.com:4096", nil, "Authorization", basicHeader("opencode", testPassword),
		"Origin", "http://agents.example.com:4096")
	if r.status != 200 {
		t.Fatalf("password, remote Host: %d %s", r.status, r.body)
	}
}

// serveFrom serves one request from a peer address, with Caddy's
// verdict on the peer (trusted proxy, client address) in the context.
func (h *srvHarness) serveFrom(remote, clientIP string, trusted bool, method, target, host string, headers ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr, req.Host = remote, host
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, peer{clientIP, trusted}))
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}

type peerKey struct{}

type peer struct {
	ip      string
	trusted bool
}

func peerOptions(o *Options) {
	o.ClientIP = func(r *http.Request) string {
		if p, ok := r.Context().Value(peerKey{}).(peer); ok && p.ip != "" {
			return p.ip
		}
		return remoteHost(r)
	}
	o.TrustedProxy = func(r *http.Request) bool {
		p, _ := r.Context().Value(peerKey{}).(peer)
		return p.trusted
	}
}

// Without a password only loopback peers are answered; behind a trusted
// proxy the client it names must be loopback too. With a password any
// peer is (with credentials).
func TestNoPasswordLoopbackPeer(t *testing.T) {
	h := newSrvHarness(t, func(o *Options) { noPassword(o); peerOptions(o) })
	for _, tc := range []struct {
		remote, client string
		trusted        bool
		want           int
	}{
		{"192.0.2.1:1234", "", false, 403}, // httptest's default peer
		{"10.1.2.3:5000", "", false, 403},
		{"[2001:db8::1]:5000", "", false, 403},
		{"127.0.0.1:5000", "", false, 200},
		{"[::1]:5000", "", false, 200},
		{"[::ffff:127.0.0.1]:5000", "", false, 200},
		{"127.0.0.1:5000", "203.0.113.9", true, 403}, // a local proxy forwarding a remote client
		{"127.0.0.1:5000", "127.0.0.1", true, 200},
		{"127.0.0.1:5000", "203.0.113.9", false, 200}, // an untrusted peer's forwarded address is not believed
		{"10.1.2.3:5000", "127.0.0.1", true, 403},     // a remote proxy's "loopback" is not this machine's
		{"garbage", "", false, 403},
	} {
		rec := h.serveFrom(tc.remote, tc.client, tc.trusted, "GET", "/api/info", "localhost:4096")
		if rec.Code != tc.want {
			t.Errorf("peer %s client %s trusted %v: %d %s, want %d", tc.remote, tc.client, tc.trusted, rec.Code, rec.Body, tc.want)
		}
		if tc.want == 403 && !strings.Contains(rec.Body.String(), `"ForbiddenError"`) {
			t.Errorf("peer %s: %s", tc.remote, rec.Body)
		}
	}
	hp := newSrvHarness(t, peerOptions)
	if rec := hp.serveFrom("192.0.2.1:1234", "", false, "GET", "/api/info", "agents.example.com",
		"Authorization", basicHeader("opencode", testPassword)); rec.Code != 200 {
		t.Fatalf("password, remote peer: %d %s", rec.Code, rec.Body)
	}
}

// Behind a trusted proxy that terminates TLS, the instance's own origin
// is https; an untrusted peer's X-Forwarded-Proto is ignored.
func TestOwnOriginBehindTrustedProxy(t *testing.T) {
	h := newSrvHarness(t, peerOptions)
	auth := basicHeader("opencode", testPassword)
	rec := h.serveFrom("10.0.0.5:1234", "198.51.100.7", true, "GET", "/api/info", "agents.example.com",
		"Authorization", auth, "X-Forwarded-Proto", "https", "Origin", "https://agents.example.com")
	if rec.Code != 200 {
		t.Fatalf("trusted proxy, https origin: %d %s", rec.Code, rec.Body)
	}
	rec = h.serveFrom("10.0.0.5:1234", "198.51.100.7", true, "GET", "/api/info", "agents.example.com",
		"Authorization", auth, "X-Forwarded-Proto", "https", "Origin", "http://agents.example.com")
	if rec.Code != 403 {
		t.Fatalf("trusted proxy, http origin for an https request: %d %s", rec.Code, rec.Body)
	}
	rec = h.serveFrom("10.0.0.5:1234", "", false, "GET", "/api/info", "agents.example.com",
		"Authorization", auth, "X-Forwarded-Proto", "https", "Origin", "https://agents.example.com")
	if rec.Code != 403 {
		t.Fatalf("untrusted peer's X-Forwarded-Proto believed: %d %s", rec.Code, rec.Body)
	}
}

// cors_origins: a listed origin's requests and preflights are answered
// with CORS headers; any other origin is still refused.
func TestCORSOrigins(t *testing.T) {
	h := newSessHarness(t, func(o *Options) {
		noPassword(o)
		o.CORSOrigins = []string{"https://APP.example:443", "http://localhost:3000"}
	})
	pre := h.raw("OPTIONS", "/api/session", "", nil, "Origin", "https://app.example", "Sec-Fetch-Site", "cross-site",
		"Sec-Fetch-Mode", "cors", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization,content-type,x-opencode-directory")
	if pre.status != 204 || pre.header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		pre.header.Get("Access-Control-Allow-Credentials") != "true" || !strings.Contains(pre.header.Get("Vary"), "Origin") {
		t.Fatalf("preflight: %d %v %s", pre.status, pre.header, pre.body)
	}
	for _, want := range []string{"Authorization", "Content-Type", "X-Opencode-Directory"} {
		if !strings.Contains(pre.header.Get("Access-Control-Allow-Headers"), want) {
			t.Fatalf("preflight allows headers %q, not %s", pre.header.Get("Access-Control-Allow-Headers"), want)
		}
	}
	for _, m := range []string{"GET", "POST", "PATCH", "DELETE"} {
		if !strings.Contains(pre.header.Get("Access-Control-Allow-Methods"), m) {
			t.Fatalf("preflight allows methods %q, not %s", pre.header.Get("Access-Control-Allow-Methods"), m)
		}
	}
	r := h.raw("POST", "/api/session", "", strings.NewReader(`{"title":"from the app"}`), "Content-Type", "application/json",
		"Origin", "https://app.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		r.header.Get("Access-Control-Allow-Credentials") != "true" || !strings.Contains(r.header.Get("Vary"), "Origin") {
		t.Fatalf("listed origin: %d %v %s", r.status, r.header, r.body)
	}
	if r := h.raw("GET", "/api/session", "", nil, "Origin", "http://localhost:3000", "Sec-Fetch-Site", "same-site"); r.status != 200 ||
		r.header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Fatalf("listed same-site origin: %d %v %s", r.status, r.header, r.body)
	}
	// Another origin: its preflight and its request are refused, and
	// get no CORS headers.
	pre = h.raw("OPTIONS", "/api/session", "", nil, "Origin", "https://other.example", "Access-Control-Request-Method", "POST")
	wantError(t, pre, 403, "ForbiddenError", nil)
	r = h.raw("POST", "/api/session", "", strings.NewReader(`{"title":"x"}`), "Content-Type", "application/json",
		"Origin", "https://other.example", "Sec-Fetch-Site", "cross-site")
	wantError(t, r, 403, "ForbiddenError", nil)
	for _, rr := range []reply{pre, r} {
		if rr.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("CORS headers for another origin: %v", rr.header)
		}
	}
	// A listed origin's request without a body type is still 400.
	r = h.raw("POST", "/api/session", "", strings.NewReader(attackBody), "Origin", "https://app.example", "Sec-Fetch-Site", "cross-site")
	wantError(t, r, 400, "InvalidRequestError", nil)
	if n := h.sessionCount(); n != 1 {
		t.Fatalf("%d sessions, want the listed origin's one", n)
	}
}

// A cross-site request is refused before authentication: a wrong password
// in it is not counted against the address.
func TestCrossSiteBeforeAuthAndLimit(t *testing.T) {
	h := newSrvHarness(t, nil)
	for i := 0; i < AuthFailuresPerAddress+2; i++ {
		r := h.raw("GET", "/api/info", "", nil, "Authorization", basicHeader("opencode", "guess"), "Origin", "https://evil.example")
		wantError(t, r, 403, "ForbiddenError", nil)
	}
	if r := h.get("/api/info"); r.status != 200 {
		t.Fatalf("the refused requests were counted as failures: %d %s", r.status, r.body)
	}
}

// The web app's own forms (same origin, form-encoded) still work, and the
// pairing route is guarded like the rest.
func TestWebAppAndPairingGuarded(t *testing.T) {
	h := newSessHarness(t, nil)
	code := h.pairCode()
	r := h.raw("GET", "/auth/connect/"+code, "", nil, "Accept", "text/html", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate")
	if r.status != 403 {
		t.Fatalf("cross-site pairing link: %d %s", r.status, r.body)
	}
	r = h.raw("GET", "/auth/connect/"+code, "", nil, "Sec-Fetch-Site", "none")
	if r.status != 200 || gjson.GetBytes(r.body, "token").String() == "" {
		t.Fatalf("pairing link after the refused one: %d %s", r.status, r.body)
	}
	tok := h.csrf()
	r = h.post("/ui/sessions", map[string][]string{"title": {"made in the page"}, "csrf": {tok}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("same-origin form: %d %s", r.status, r.body)
	}
	// A form body without a type is refused before the app.
	r = h.raw("POST", "/ui/sessions", "", strings.NewReader("title=x&csrf="+tok), "Authorization", basicHeader("opencode", testPassword))
	wantPage(t, r, 400)
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://App.Example":       "https://app.example",
		"https://app.example:443":   "https://app.example",
		"http://app.example:80":     "http://app.example",
		"http://app.example:443":    "http://app.example:443",
		"https://app.example:8443/": "https://app.example:8443",
		"http://[::1]:80":           "http://[::1]",
		"http://[::1]:3000":         "http://[::1]:3000",
	} {
		if got, err := NormalizeOrigin(in); err != nil || got != want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "null", "app.example", "ftp://app.example", "https://", "https://u:p@app.example",
		"https://app.example/path", "https://app.example?q", "https://app.example#f", "%%%", "https://app.example:99999x"} {
		if got, err := NormalizeOrigin(in); err == nil {
			t.Errorf("NormalizeOrigin(%q) = %q, want an error", in, got)
		}
	}
}

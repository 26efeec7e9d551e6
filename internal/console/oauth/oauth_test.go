package oauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/console/oauth"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

const (
	cli        = "agentgate-cli"
	formType   = "application/x-www-form-urlencoded"
	deviceType = oauth.GrantDeviceCode
)

// env is the OAuth handler over a real Service and Badger store, with a
// fake clock, served by httptest.
type env struct {
	t   *testing.T
	svc *service.Service
	st  store.Store
	clk *clock.Fake
	srv *httptest.Server
	h   *oauth.Handler
}

func newEnv(t *testing.T, opts ...func(*oauth.Handler)) *env {
	t.Helper()
	te := testenv.New(t, t0)
	clk := te.Clock
	e := &env{t: t, st: te.Store, clk: clk, svc: te.Service}
	e.h = &oauth.Handler{
		Service: func(context.Context) (*service.Service, error) { return e.svc, nil },
		Clients: map[string]bool{cli: true, "second-cli": true},
		Clock:   clk,
		ClientIP: func(r *http.Request) string {
			if ip := r.Header.Get("X-Test-IP"); ip != "" {
				return ip
			}
			return "192.0.2.1"
		},
	}
	for _, f := range opts {
		f(e.h)
	}
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.srv.Close)
	return e
}

// member makes a workspace with one member and returns both ids.
func (e *env) member() (ws, person string) {
	e.t.Helper()
	w, err := e.svc.CreateWorkspace(ctx, "acme")
	if err != nil {
		e.t.Fatal(err)
	}
	id := secrets.NewID("usr_")
	err = e.st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutPerson(&store.Person{ID: id, Email: strings.ToLower(id) + "@example.com", Name: "P", PasswordHash: "x", Created: t0}); err != nil {
			return err
		}
		return tx.PutMember(&store.Member{Workspace: w.ID, PersonID: id, Role: store.RoleMember, Created: t0})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return w.ID, id
}

type resp struct {
	status int
	header http.Header
	raw    []byte
	json   map[string]json.RawMessage
}

// str returns a string field of the answer ("" when absent or not a string).
func (r resp) str(field string) string {
	var s string
	json.Unmarshal(r.json[field], &s)
	return s
}

type req struct {
	method      string // default POST
	path        string
	body        string
	contentType string // default form
	basicUser   string // HTTP Basic client id, when not ""
	basicPass   string
	ip          string // the client address the handler sees, when not ""
}

// do sends a request and checks what every answer of the endpoints must
// carry: a JSON body, Content-Type application/json, Cache-Control:
// no-store and Pragma: no-cache.
func (e *env) do(r req) resp {
	e.t.Helper()
	if r.method == "" {
		r.method = "POST"
	}
	hr, err := http.NewRequest(r.method, e.srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		e.t.Fatal(err)
	}
	switch {
	case r.contentType == "-":
	case r.contentType != "":
		hr.Header.Set("Content-Type", r.contentType)
	case r.body != "":
		hr.Header.Set("Content-Type", formType)
	}
	if r.ip != "" {
		hr.Header.Set("X-Test-IP", r.ip)
	}
	if r.basicUser != "" {
		hr.SetBasicAuth(url.QueryEscape(r.basicUser), url.QueryEscape(r.basicPass))
	}
	hres, err := http.DefaultClient.Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer hres.Body.Close()
	raw, err := io.ReadAll(hres.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	out := resp{status: hres.StatusCode, header: hres.Header, raw: raw}
	what := r.method + " " + r.path + " " + r.body
	if mt, _, err := mime.ParseMediaType(hres.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		e.t.Fatalf("%s: Content-Type %q, want application/json", what, hres.Header.Get("Content-Type"))
	}
	if cc := hres.Header.Get("Cache-Control"); cc != "no-store" {
		e.t.Fatalf("%s: Cache-Control %q, want no-store", what, cc)
	}
	if p := hres.Header.Get("Pragma"); p != "no-cache" {
		e.t.Fatalf("%s: Pragma %q, want no-cache", what, p)
	}
	if r.method != "HEAD" {
		if err := json.Unmarshal(raw, &out.json); err != nil {
			e.t.Fatalf("%s: the body is not a JSON object: %v: %s", what, err, raw)
		}
	}
	return out
}

// wantError asserts an RFC 6749 §5.2 error answer.
func wantError(t *testing.T, what string, r resp, status int, code string) {
	t.Helper()
	if r.status != status || r.str("error") != code {
		t.Fatalf("%s: HTTP %d %s, want %d %s", what, r.status, r.raw, status, code)
	}
	var desc string
	if err := json.Unmarshal(r.json["error_description"], &desc); err != nil || desc == "" {
		t.Fatalf("%s: error_description is not a non-empty string: %s", what, r.raw)
	}
	if code != "invalid_client" && r.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("%s: WWW-Authenticate %q on a %s answer", what, r.header.Get("WWW-Authenticate"), code)
	}
}

func form(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v.Encode()
}

// start runs a device authorization over HTTP and returns its answer.
func (e *env) start(orgScope bool) (deviceCode, userCode string) {
	e.t.Helper()
	f := form("client_id", cli)
	if orgScope {
		f = form("client_id", cli, "supports_org_scope", "true")
	}
	r := e.do(req{path: oauth.CodePath, body: f})
	if r.status != 200 {
		e.t.Fatalf("device code: HTTP %d %s", r.status, r.raw)
	}
	return r.str("device_code"), r.str("user_code")
}

func (e *env) poll(deviceCode string) resp {
	e.t.Helper()
	return e.do(req{path: oauth.TokenPath, body: form("grant_type", deviceType, "device_code", deviceCode, "client_id", cli)})
}

// pollFrom polls a device code from a client address.
func (e *env) pollFrom(ip, deviceCode string) resp {
	e.t.Helper()
	return e.do(req{path: oauth.TokenPath, ip: ip, body: form("grant_type", deviceType, "device_code", deviceCode, "client_id", cli)})
}

// TestUnknownDeviceCodesLimitedPerAddress: an address that polls with
// device codes that name no grant is refused (429 slow_down with
// Retry-After) after the limit — its real, pending code included — until
// the window passes; another address is not; a real code polled too fast
// keeps getting the grant's own slow_down.
func TestUnknownDeviceCodesLimitedPerAddress(t *testing.T) {
	e := newEnv(t)
	const guesser, other = "198.51.100.7", "203.0.113.9"
	dc, _ := e.start(false)
	otherDC, _ := e.start(false)
	wantError(t, "pending", e.pollFrom(guesser, dc), 400, "authorization_pending")
	for i := 0; i < oauth.UnknownCodesPerIP-1; i++ {
		e.clk.Advance(time.Second)
		wantError(t, "unknown code", e.pollFrom(guesser, "ag_dc_guess"+strconv.Itoa(i)), 400, "invalid_grant")
	}
	// Another client's real code is a guess too: the last one allowed.
	r := e.do(req{path: oauth.TokenPath, ip: guesser, body: form("grant_type", deviceType, "device_code", otherDC, "client_id", "second-cli")})
	wantError(t, "another client's code", r, 400, "invalid_grant")
	e.clk.Advance(10 * time.Second)
	r = e.pollFrom(guesser, "ag_dc_one-more")
	wantError(t, "over the limit", r, http.StatusTooManyRequests, "slow_down")
	// The guessing address is refused even for its real, pending code.
	r = e.pollFrom(guesser, dc)
	wantError(t, "real code from the guessing address", r, http.StatusTooManyRequests, "slow_down")
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra <= 0 || time.Duration(ra)*time.Second > oauth.UnknownCodeWindow {
		t.Fatalf("Retry-After %q, want whole seconds within the window", r.header.Get("Retry-After"))
	}
	var interval int
	if err := json.Unmarshal(r.json["interval"], &interval); err != nil || interval < ra {
		t.Fatalf("interval %s, want at least Retry-After %d", r.json["interval"], ra)
	}
	// Another address is not affected: its real code is pending, then paced.
	wantError(t, "another address", e.pollFrom(other, otherDC), 400, "authorization_pending")
	wantError(t, "another address too fast", e.pollFrom(other, otherDC), 400, "slow_down")
	// The window passes (the first code expired meanwhile): the address
	// polls again.
	e.clk.Advance(time.Duration(ra) * time.Second)
	wantError(t, "after the window", e.pollFrom(guesser, dc), 400, "expired_token")
	dc, _ = e.start(false)
	wantError(t, "a new code after the window", e.pollFrom(guesser, dc), 400, "authorization_pending")
	// A real code polled every second keeps getting the grant's slow_down.
	for i := 0; i < 3; i++ {
		e.clk.Advance(time.Second)
		r = e.pollFrom(guesser, dc)
		wantError(t, "real code at 1 s", r, 400, "slow_down")
		if r.header.Get("Retry-After") != "" {
			t.Fatalf("the grant's slow_down carries Retry-After %q", r.header.Get("Retry-After"))
		}
	}
}

func TestDeviceCodeResponse(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{
		form("client_id", cli, "supports_org_scope", "true"),
		form("client_id", cli),
		form("client_id", cli, "supports_org_scope", "false"),
	} {
		r := e.do(req{path: oauth.CodePath, body: body})
		if r.status != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s, want 200", body, r.status, r.raw)
		}
		var keys []string
		for k := range r.json {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		want := []string{"device_code", "expires_in", "interval", "user_code", "verification_uri", "verification_uri_complete"}
		if !slices.Equal(keys, want) {
			t.Fatalf("%s: fields %v, want exactly %v", body, keys, want)
		}
		// JSON integers, not strings or floats (x/oauth2 decodes int64,
		// oauth4webapi asserts numbers).
		if string(r.json["expires_in"]) != "600" || string(r.json["interval"]) != "5" {
			t.Fatalf("%s: expires_in %s, interval %s; want the integers 600 and 5", body, r.json["expires_in"], r.json["interval"])
		}
		uc := r.str("user_code")
		if !regexp.MustCompile(`^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$`).MatchString(uc) {
			t.Fatalf("user_code %q", uc)
		}
		if len(r.str("device_code")) < 22 || !regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString(r.str("device_code")) {
			t.Fatalf("device_code %q is short or not URL-safe", r.str("device_code"))
		}
		if got := r.str("verification_uri_complete"); got != "/device?user_code="+uc {
			t.Fatalf("verification_uri_complete %q, want the relative path /device?user_code=%s", got, uc)
		}
		if got := r.str("verification_uri"); got != e.srv.URL+"/device" {
			t.Fatalf("verification_uri %q, want %s/device", got, e.srv.URL)
		}
	}
	r := e.do(req{path: oauth.CodePath, body: form("client_id", cli, "supports_org_scope", "yes")})
	wantError(t, "supports_org_scope=yes", r, 400, "invalid_request")

	// The org scope reaches the grant: approval then needs a workspace.
	ws, who := e.member()
	_, uc := e.start(true)
	if err := e.svc.DecideDevice(ctx, who, uc, true, ""); apierr.As(err).Status != 400 {
		t.Fatalf("approving an org-scope code without a workspace: %v", err)
	}
	dc, uc := e.start(false)
	if err := e.svc.DecideDevice(ctx, who, uc, true, ws); err != nil {
		t.Fatal(err)
	}
	if r := e.poll(dc); r.status != 200 || string(r.json["org_id"]) != "null" {
		t.Fatalf("a code started without supports_org_scope gave %d %s, want tokens with org_id null", r.status, r.raw)
	}

	// A configured public URL is used for the absolute URIs; the complete
	// one stays relative.
	e2 := newEnv(t, func(h *oauth.Handler) { h.BaseURL = "https://console.example.com/" })
	r = e2.do(req{path: oauth.CodePath, body: form("client_id", cli)})
	if r.str("verification_uri") != "https://console.example.com/device" || !strings.HasPrefix(r.str("verification_uri_complete"), "/device?user_code=") {
		t.Fatalf("with BaseURL: %s", r.raw)
	}
}

func TestClientIdentification(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{oauth.CodePath, oauth.TokenPath} {
		// Unknown client in the form: 401 invalid_client, no challenge.
		r := e.do(req{path: path, body: form("client_id", "evil-cli", "grant_type", deviceType, "device_code", "x")})
		wantError(t, path+" unknown client_id", r, 401, "invalid_client")
		if h := r.header.Get("WWW-Authenticate"); h != "" {
			t.Fatalf("%s: WWW-Authenticate %q without Basic having been tried", path, h)
		}
		// Unknown client through Basic: 401 with a challenge (RFC 6749 §5.2).
		r = e.do(req{path: path, body: form("grant_type", deviceType, "device_code", "x"), basicUser: "evil-cli"})
		wantError(t, path+" unknown Basic client", r, 401, "invalid_client")
		if h := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Basic") {
			t.Fatalf("%s: WWW-Authenticate %q after Basic was tried, want a Basic challenge", path, h)
		}
		// Missing client.
		r = e.do(req{path: path, body: form("grant_type", deviceType, "device_code", "x")})
		wantError(t, path+" missing client_id", r, 400, "invalid_request")
		r = e.do(req{path: path, body: form("client_id", "", "grant_type", deviceType, "device_code", "x")})
		wantError(t, path+" empty client_id", r, 400, "invalid_request")
		// Basic and form disagree.
		r = e.do(req{path: path, body: form("client_id", cli, "grant_type", deviceType, "device_code", "x"), basicUser: "second-cli"})
		wantError(t, path+" Basic and form differ", r, 400, "invalid_request")
		// Client ids are exact.
		r = e.do(req{path: path, body: form("client_id", "AGENTGATE-CLI", "grant_type", deviceType, "device_code", "x")})
		wantError(t, path+" client_id in another case", r, 401, "invalid_client")
	}

	// A known client through Basic (as x/oauth2's auto-detect first tries)
	// is accepted on both endpoints, with or without the same form field.
	r := e.do(req{path: oauth.CodePath, body: form("supports_org_scope", "true"), basicUser: cli})
	if r.status != 200 {
		t.Fatalf("device code with Basic client: HTTP %d %s", r.status, r.raw)
	}
	dc := r.str("device_code")
	r = e.do(req{path: oauth.TokenPath, body: form("grant_type", deviceType, "device_code", dc), basicUser: cli})
	wantError(t, "poll with Basic client", r, 400, "authorization_pending")
	e.clk.Advance(5 * time.Second)
	r = e.do(req{path: oauth.TokenPath, body: form("grant_type", deviceType, "device_code", dc, "client_id", cli), basicUser: cli})
	wantError(t, "poll with Basic and form client", r, 400, "authorization_pending")
	// The code belongs to the client that started it.
	e.clk.Advance(5 * time.Second)
	r = e.do(req{path: oauth.TokenPath, body: form("grant_type", deviceType, "device_code", dc, "client_id", "second-cli")})
	wantError(t, "poll by another configured client", r, 400, "invalid_grant")
}

func TestRequestFormat(t *testing.T) {
	e := newEnv(t)
	dc, _ := e.start(true)

	for _, path := range []string{oauth.CodePath, oauth.TokenPath} {
		// Neither a form nor JSON: 415.
		r := e.do(req{path: path, body: form("client_id", cli), contentType: "-"})
		wantError(t, path+" no Content-Type", r, 415, "invalid_request")
		r = e.do(req{path: path, body: form("client_id", cli), contentType: "text/plain"})
		wantError(t, path+" text/plain", r, 415, "invalid_request")
		// JSON that is not an object of strings.
		for _, bad := range []string{`["client_id"]`, `{"client_id": {"x": 1}}`, `{"client_id": "` + cli + `"`, `{"client_id": "` + cli + `"} {}`,
			`{"client_id": "` + cli + `", "client_id": "` + cli + `"}`, `{"client_id": ["a"]}`} {
			r = e.do(req{path: path, body: bad, contentType: "application/json"})
			wantError(t, path+" JSON "+bad, r, 400, "invalid_request")
		}
		// A JSON body from a client that is not configured.
		r = e.do(req{path: path, body: `{"client_id": "someone-else"}`, contentType: "application/json"})
		wantError(t, path+" JSON unknown client", r, 401, "invalid_client")
		r = e.do(req{path: path, body: `{"client_id": "` + cli + `", "pad": "` + strings.Repeat("a", 70<<10) + `"}`, contentType: "application/json"})
		wantError(t, path+" 70 KiB JSON body", r, 413, "invalid_request")
		// Repeated parameters are refused (RFC 6749 §3.1).
		r = e.do(req{path: path, body: "client_id=" + cli + "&client_id=" + cli + "&grant_type=" + url.QueryEscape(deviceType) + "&device_code=" + dc})
		wantError(t, path+" repeated client_id", r, 400, "invalid_request")
		// Wrong methods: 405 with Allow, still JSON.
		r = e.do(req{method: "GET", path: path})
		wantError(t, "GET "+path, r, 405, "invalid_request")
		if r.header.Get("Allow") != "POST" {
			t.Fatalf("GET %s: Allow %q", path, r.header.Get("Allow"))
		}
		// A huge body is refused, not fatal.
		r = e.do(req{path: path, body: form("client_id", cli, "pad", strings.Repeat("a", 70<<10))})
		wantError(t, path+" 70 KiB body", r, 413, "invalid_request")
	}
	r := e.do(req{path: oauth.TokenPath, body: "client_id=" + cli + "&grant_type=" + url.QueryEscape(deviceType) + "&device_code=" + dc + "&device_code=" + dc})
	wantError(t, "repeated device_code", r, 400, "invalid_request")

	// The released OpenCode CLI sends JSON to both endpoints: the whole
	// flow works with JSON bodies.
	r = e.do(req{path: oauth.CodePath, body: `{"client_id":"` + cli + `"}`, contentType: "application/json"})
	if r.status != 200 || r.str("device_code") == "" || r.str("user_code") == "" {
		t.Fatalf("JSON device code: %d %s", r.status, r.raw)
	}
	r = e.do(req{path: oauth.TokenPath, body: `{"client_id":"` + cli + `","grant_type":"` + deviceType + `","device_code":"` + r.str("device_code") + `"}`, contentType: "application/json"})
	wantError(t, "JSON poll", r, 400, "authorization_pending")

	// Unknown parameters are ignored (RFC 6749 §3.2; x/oauth2 sends scope).
	r = e.do(req{path: oauth.CodePath, body: form("client_id", cli, "scope", "openid profile", "colour", "red")})
	if r.status != 200 {
		t.Fatalf("device code with extra fields: HTTP %d %s", r.status, r.raw)
	}
	r = e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", deviceType, "device_code", dc, "scope", "x", "colour", "red")})
	wantError(t, "poll with extra fields", r, 400, "authorization_pending")
	// A charset parameter on the media type is fine.
	e.clk.Advance(5 * time.Second)
	r = e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", deviceType, "device_code", dc), contentType: formType + "; charset=UTF-8"})
	wantError(t, "form with charset", r, 400, "authorization_pending")
	// Query parameters are not the form.
	r = e.do(req{path: oauth.CodePath + "?client_id=" + cli, body: form("supports_org_scope", "true")})
	wantError(t, "client_id in the query only", r, 400, "invalid_request")
}

func TestTokenEndpointGrants(t *testing.T) {
	e := newEnv(t)
	ws, who := e.member()

	r := e.do(req{path: oauth.TokenPath, body: form("client_id", cli)})
	wantError(t, "no grant_type", r, 400, "invalid_request")
	for _, g := range []string{"authorization_code", "password", "client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer", "device_code"} {
		r := e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", g, "device_code", "x", "refresh_token", "y")})
		wantError(t, "grant_type "+g, r, 400, "unsupported_grant_type")
	}
	r = e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", deviceType)})
	wantError(t, "missing device_code", r, 400, "invalid_request")
	r = e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", deviceType, "device_code", "")})
	wantError(t, "empty device_code", r, 400, "invalid_request")
	wantError(t, "unknown device_code", e.poll("ag_dc_unknown"), 400, "invalid_grant")
	r = e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", "refresh_token")})
	wantError(t, "missing refresh_token", r, 400, "invalid_request")
	r = e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", "refresh_token", "refresh_token", "ag_rt_nope")})
	wantError(t, "unknown refresh_token", r, 400, "invalid_grant")

	// Pending, then too fast: neither carries a WWW-Authenticate challenge
	// (openid-client would stop polling), and slow_down says the new interval.
	dc, uc := e.start(true)
	wantError(t, "pending", e.poll(dc), 400, "authorization_pending")
	r = e.poll(dc)
	wantError(t, "too fast", r, 400, "slow_down")
	if string(r.json["interval"]) != "10" {
		t.Fatalf("slow_down interval %s, want the integer 10", r.json["interval"])
	}
	e.clk.Advance(10 * time.Second)
	wantError(t, "pending after the interval", e.poll(dc), 400, "authorization_pending")

	// Approved: the token answer.
	if err := e.svc.DecideDevice(ctx, who, uc, true, ws); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(10 * time.Second)
	r = e.poll(dc)
	if r.status != 200 {
		t.Fatalf("poll after approval: HTTP %d %s", r.status, r.raw)
	}
	if !strings.HasPrefix(r.str("access_token"), "ag_at_") || !strings.HasPrefix(r.str("refresh_token"), "ag_rt_") ||
		r.str("token_type") != "Bearer" || string(r.json["expires_in"]) != "3600" || r.str("org_id") != ws {
		t.Fatalf("token answer %s", r.raw)
	}
	if r.header.Get("WWW-Authenticate") != "" {
		t.Fatal("WWW-Authenticate on a token answer")
	}
	first := r
	wantError(t, "replaying the code", e.poll(dc), 400, "invalid_grant")

	// Refresh: a new pair, same binding; reuse of the old one revokes all.
	refresh := func(rt string) resp {
		return e.do(req{path: oauth.TokenPath, body: form("client_id", cli, "grant_type", "refresh_token", "refresh_token", rt)})
	}
	r = refresh(first.str("refresh_token"))
	if r.status != 200 || r.str("org_id") != ws || r.str("refresh_token") == first.str("refresh_token") || r.str("access_token") == first.str("access_token") {
		t.Fatalf("refresh: HTTP %d %s", r.status, r.raw)
	}
	second := r
	r = e.do(req{path: oauth.TokenPath, body: form("client_id", "second-cli", "grant_type", "refresh_token", "refresh_token", second.str("refresh_token"))})
	wantError(t, "refresh with another client", r, 400, "invalid_grant")
	wantError(t, "reusing the first refresh token", refresh(first.str("refresh_token")), 400, "invalid_grant")
	if _, err := e.svc.Authenticate(ctx, second.str("access_token"), ""); apierr.As(err).Status != 401 {
		t.Fatalf("the newest access token after reuse: %v, want 401", err)
	}
	wantError(t, "the newest refresh token after reuse", refresh(second.str("refresh_token")), 400, "invalid_grant")

	// Denied and expired.
	dc, uc = e.start(false)
	if err := e.svc.DecideDevice(ctx, who, uc, false, ""); err != nil {
		t.Fatal(err)
	}
	wantError(t, "denied", e.poll(dc), 400, "access_denied")
	dc, _ = e.start(false)
	e.clk.Advance(600 * time.Second)
	wantError(t, "expired", e.poll(dc), 400, "expired_token")
}

func TestMetadata(t *testing.T) {
	e := newEnv(t)
	r := e.do(req{method: "GET", path: oauth.MetadataPath})
	if r.status != 200 {
		t.Fatalf("metadata: HTTP %d %s", r.status, r.raw)
	}
	var md struct {
		Issuer      string   `json:"issuer"`
		DeviceAuth  string   `json:"device_authorization_endpoint"`
		Token       string   `json:"token_endpoint"`
		Grants      []string `json:"grant_types_supported"`
		AuthMethods []string `json:"token_endpoint_auth_methods_supported"`
	}
	if err := json.Unmarshal(r.raw, &md); err != nil {
		t.Fatal(err)
	}
	if md.Issuer != e.srv.URL || md.DeviceAuth != e.srv.URL+"/auth/device/code" || md.Token != e.srv.URL+"/auth/device/token" ||
		!slices.Contains(md.Grants, "urn:ietf:params:oauth:grant-type:device_code") || !slices.Contains(md.Grants, "refresh_token") ||
		!slices.Contains(md.AuthMethods, "none") {
		t.Fatalf("metadata %s", r.raw)
	}
	r = e.do(req{method: "POST", path: oauth.MetadataPath, body: form("a", "b")})
	wantError(t, "POST metadata", r, 405, "invalid_request")
	e.do(req{method: "HEAD", path: oauth.MetadataPath})

	e2 := newEnv(t, func(h *oauth.Handler) { h.BaseURL = "https://console.example.com" })
	r = e2.do(req{method: "GET", path: oauth.MetadataPath})
	if err := json.Unmarshal(r.raw, &md); err != nil || md.Issuer != "https://console.example.com" || md.DeviceAuth != "https://console.example.com/auth/device/code" {
		t.Fatalf("metadata with BaseURL: %s", r.raw)
	}

	for path, want := range map[string]bool{oauth.CodePath: true, oauth.TokenPath: true, oauth.MetadataPath: true, "/device": false, "/auth/device": false, "/auth/device/code/": false} {
		if oauth.Handles(path) != want {
			t.Errorf("Handles(%q) = %v", path, !want)
		}
	}
}

func TestServiceUnavailable(t *testing.T) {
	e := newEnv(t, func(h *oauth.Handler) {
		h.Service = func(context.Context) (*service.Service, error) {
			return nil, apierr.Unavailable("the store is opening")
		}
	})
	for _, path := range []string{oauth.CodePath, oauth.TokenPath} {
		r := e.do(req{path: path, body: form("client_id", cli, "grant_type", deviceType, "device_code", "x")})
		wantError(t, path+" while the store opens", r, 503, "temporarily_unavailable")
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("%s: 503 without Retry-After", path)
		}
	}
	// The client check comes first.
	wantError(t, "unknown client while unavailable", e.do(req{path: oauth.CodePath, body: form("client_id", "evil")}), 401, "invalid_client")
}

// TestTokenAnswerDecodes checks the answer decodes into the field types
// real clients use.
func TestTokenAnswerDecodes(t *testing.T) {
	e := newEnv(t)
	_, who := e.member()
	dc, uc := e.start(false)
	if err := e.svc.DecideDevice(ctx, who, uc, true, ""); err != nil {
		t.Fatal(err)
	}
	r := e.poll(dc)
	var tok struct {
		AccessToken  string  `json:"access_token"`
		TokenType    string  `json:"token_type"`
		RefreshToken string  `json:"refresh_token"`
		ExpiresIn    int64   `json:"expires_in"`
		OrgID        *string `json:"org_id"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tok); err != nil || tok.AccessToken == "" || tok.ExpiresIn != 3600 || tok.OrgID != nil {
		t.Fatalf("token answer %s: %v", r.raw, err)
	}
	if _, ok := r.json["org_id"]; !ok {
		t.Fatal("org_id is absent; want null for an unbound sign-in")
	}
}

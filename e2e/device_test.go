package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

const (
	deviceClient = "agentgate-cli"
	deviceGrant  = "urn:ietf:params:oauth:grant-type:device_code"
)

var userCodeShape = regexp.MustCompile(`^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$`)

// deviceSite is a running binary with a workspace, its owner, a second
// workspace the owner also belongs to, and a connection to a fake provider.
type deviceSite struct {
	s        *server
	base     string
	tn       tenant
	otherWS  string
	conn     string
	provider *fakeprovider.Provider
}

// TestDeviceSignIn drives the device sign-in of the real binary with real
// clients: golang.org/x/oauth2 and npm openid-client v6. The approval step
// goes through the Console web pages, as a person would; while those pages
// are not served, the clients are checked up to the approval and the rest
// is skipped.
func TestDeviceSignIn(t *testing.T) {
	bin := caddyBinary(t) // skips under -short
	ctx := testContext(t, 5*time.Minute)
	s := startServer(t, ctx, bin, config{AccessLog: true, DeviceClients: []string{deviceClient, "second-cli"}})
	d := &deviceSite{s: s, base: "http://" + s.httpAddr, tn: s.bootstrap(t, ctx, "Device")}

	var ws idName
	must(t, "create second workspace", 201, &ws)(s.admin(ctx, "POST", "/agentgate/workspaces", map[string]any{"name": "Elsewhere"}))
	d.otherWS = ws.ID
	must(t, "add the owner to the second workspace", 201, nil)(s.admin(ctx, "POST", "/agentgate/workspaces/"+ws.ID+"/members",
		map[string]any{"person_id": d.tn.Person, "role": "member"}))

	const secret = "sk-provider-device-e2e"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	d.provider = p
	var conn idName
	must(t, "create connection", 201, &conn)(s.admin(ctx, "POST", "/agentgate/workspaces/"+d.tn.Workspace+"/connections", map[string]any{
		"name": "openai", "kind": "openai", "base_url": p.URL + "/v1", "credential": secret,
		"models": map[string]any{"gpt-4o": map[string]any{"pricing": map[string]any{"input": 1, "output": 2}}},
	}))
	d.conn = conn.ID
	// The operator-issued token works on both routes: the checks below
	// that expect 200 are meaningful.
	d.wantConsole(t, ctx, "owner token on the Console", d.tn.Token, "", 200)
	d.wantGateway(t, ctx, "owner token on the gateway", d.tn.Token, 200)

	t.Run("endpoints", func(t *testing.T) { d.endpoints(t, ctx) })
	t.Run("x-oauth2", func(t *testing.T) { d.goClient(t, ctx) })
	t.Run("openid-client", func(t *testing.T) { d.nodeClient(t, ctx) })
}

// tokenPost posts a form to the token endpoint and decodes the answer,
// checking the headers every answer must carry.
func (d *deviceSite) tokenPost(t *testing.T, ctx context.Context, path string, f url.Values, hdr http.Header) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", d.base+path, strings.NewReader(f.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" ||
		resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Pragma") != "no-cache" {
		t.Fatalf("POST %s: Content-Type %q, Cache-Control %q, Pragma %q", path, resp.Header.Get("Content-Type"),
			resp.Header.Get("Cache-Control"), resp.Header.Get("Pragma"))
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("POST %s: %v: %s", path, err, body)
	}
	return resp.StatusCode, out, resp.Header
}

func (d *deviceSite) wantOAuthError(t *testing.T, ctx context.Context, what string, path string, f url.Values, hdr http.Header, status int, code string) map[string]any {
	t.Helper()
	st, body, h := d.tokenPost(t, ctx, path, f, hdr)
	if st != status || body["error"] != code {
		t.Fatalf("%s: HTTP %d %v, want %d %s", what, st, body, status, code)
	}
	if code != "invalid_client" && h.Get("WWW-Authenticate") != "" {
		t.Fatalf("%s: WWW-Authenticate %q", what, h.Get("WWW-Authenticate"))
	}
	return body
}

func pollForm(client, deviceCode string) url.Values {
	return url.Values{"grant_type": {deviceGrant}, "client_id": {client}, "device_code": {deviceCode}}
}

// wantConsole asserts the status of GET /api/v2/config with a bearer
// credential (and an x-org-id header when org is not "").
func (d *deviceSite) wantConsole(t *testing.T, ctx context.Context, what, bearer, org string, want int) {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + bearer}}
	if org != "" {
		h.Set("x-org-id", org)
	}
	st, body, err := call(ctx, httpClient, "GET", d.base+"/api/v2/config", h, nil)
	if err != nil || st != want {
		t.Fatalf("%s: GET /api/v2/config answered %d (%v), want %d: %s", what, st, err, want, body)
	}
}

// wantGateway asserts the status of a Chat Completions call through the
// gateway with a bearer credential.
func (d *deviceSite) wantGateway(t *testing.T, ctx context.Context, what, bearer string, want int) {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + bearer}, "Content-Type": {"application/json"}}
	st, body, err := call(ctx, httpClient, "POST", d.base+"/custom/"+url.PathEscape(d.conn)+"/chat/completions", h,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello"}]}`)
	if err != nil || st != want {
		t.Fatalf("%s: gateway answered %d (%v), want %d: %s", what, st, err, want, body)
	}
	if want == 200 && !strings.Contains(string(body), fakeprovider.Text) {
		t.Fatalf("%s: gateway answer lacks the provider's text: %s", what, body)
	}
}

// endpoints checks the device endpoints of the real binary without an
// approval: metadata, the code answer, pending and slow_down, clients.
func (d *deviceSite) endpoints(t *testing.T, ctx context.Context) {
	st, body, err := call(ctx, httpClient, "GET", d.base+"/.well-known/oauth-authorization-server", nil, nil)
	var md map[string]any
	if err != nil || st != 200 || json.Unmarshal(body, &md) != nil {
		t.Fatalf("metadata: %d %v %s", st, err, body)
	}
	if md["device_authorization_endpoint"] != d.base+"/auth/device/code" || md["token_endpoint"] != d.base+"/auth/device/token" ||
		!strings.Contains(fmt.Sprint(md["grant_types_supported"]), deviceGrant) {
		t.Fatalf("metadata %s", body)
	}

	// The second configured client may start a sign-in; its code is its own.
	st, start, _ := d.tokenPost(t, ctx, "/auth/device/code", url.Values{"client_id": {"second-cli"}}, nil)
	if st != 200 || !userCodeShape.MatchString(fmt.Sprint(start["user_code"])) ||
		start["verification_uri_complete"] != "/device?user_code="+fmt.Sprint(start["user_code"]) ||
		start["verification_uri"] != d.base+"/device" || start["expires_in"] != float64(600) || start["interval"] != float64(5) {
		t.Fatalf("device code for second-cli: %d %v", st, start)
	}
	dc := fmt.Sprint(start["device_code"])
	d.wantOAuthError(t, ctx, "another client's code", "/auth/device/token", pollForm(deviceClient, dc), nil, 400, "invalid_grant")
	d.wantOAuthError(t, ctx, "pending", "/auth/device/token", pollForm("second-cli", dc), nil, 400, "authorization_pending")
	body2 := d.wantOAuthError(t, ctx, "too fast", "/auth/device/token", pollForm("second-cli", dc), nil, 400, "slow_down")
	if body2["interval"] != float64(10) {
		t.Fatalf("slow_down interval %v, want 10", body2["interval"])
	}
	d.wantOAuthError(t, ctx, "unknown client", "/auth/device/code", url.Values{"client_id": {"evil-cli"}}, nil, 401, "invalid_client")
	d.wantOAuthError(t, ctx, "unknown code", "/auth/device/token", pollForm(deviceClient, "ag_dc_nope"), nil, 400, "invalid_grant")
	d.wantOAuthError(t, ctx, "unknown grant", "/auth/device/token", url.Values{"grant_type": {"password"}, "client_id": {deviceClient}}, nil, 400, "unsupported_grant_type")
	// HTTP Basic client authentication (x/oauth2's auto-detect tries it first).
	basic := http.Header{"Authorization": {"Basic " + basicCredential(deviceClient, "")}}
	st, start, _ = d.tokenPost(t, ctx, "/auth/device/code", url.Values{"supports_org_scope": {"true"}}, basic)
	if st != 200 {
		t.Fatalf("device code with Basic: %d %v", st, start)
	}
	d.wantOAuthError(t, ctx, "pending, Basic", "/auth/device/token",
		url.Values{"grant_type": {deviceGrant}, "device_code": {fmt.Sprint(start["device_code"])}}, basic, 400, "authorization_pending")
}

func basicCredential(user, pass string) string {
	r, _ := http.NewRequest("GET", "http://x", nil)
	r.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// goClient signs in with golang.org/x/oauth2.
func (d *deviceSite) goClient(t *testing.T, ctx context.Context) {
	cfg := &oauth2.Config{ClientID: deviceClient, Endpoint: oauth2.Endpoint{
		DeviceAuthURL: d.base + "/auth/device/code",
		TokenURL:      d.base + "/auth/device/token",
		AuthStyle:     oauth2.AuthStyleInParams,
	}}
	octx := context.WithValue(ctx, oauth2.HTTPClient, httpClient)
	da, err := cfg.DeviceAuth(octx, oauth2.SetAuthURLParam("supports_org_scope", "true"))
	if err != nil {
		t.Fatalf("DeviceAuth: %v", err)
	}
	if !userCodeShape.MatchString(da.UserCode) || da.VerificationURIComplete != "/device?user_code="+da.UserCode ||
		da.VerificationURI != d.base+"/device" || da.Interval != 5 || da.DeviceCode == "" {
		t.Fatalf("DeviceAuth answer %+v", da)
	}
	if left := time.Until(da.Expiry); left < 590*time.Second || left > 600*time.Second {
		t.Fatalf("DeviceAuth expiry in %s, want about 600 s", left)
	}
	d.wantOAuthError(t, ctx, "pending", "/auth/device/token", pollForm(deviceClient, da.DeviceCode), nil, 400, "authorization_pending")

	web := d.webApprover(t, ctx)
	// DeviceAccessToken polls every 5 s from now; approve after its first
	// poll (authorization_pending), so that the library goes through it.
	before := d.polls()
	type result struct {
		tok *oauth2.Token
		err error
	}
	done := make(chan result, 1)
	go func() {
		tok, err := cfg.DeviceAccessToken(octx, da)
		done <- result{tok, err}
	}()
	d.waitPoll(t, ctx, "x/oauth2's first poll", before)
	web.approve(t, ctx, da.VerificationURIComplete, da.UserCode, d.tn.Workspace)
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("DeviceAccessToken did not return")
	}
	if res.err != nil {
		t.Fatalf("DeviceAccessToken: %v", res.err)
	}
	tok := res.tok
	if !strings.HasPrefix(tok.AccessToken, "ag_at_") || !strings.HasPrefix(tok.RefreshToken, "ag_rt_") ||
		!strings.EqualFold(tok.TokenType, "Bearer") || tok.Extra("org_id") != d.tn.Workspace {
		t.Fatalf("token %+v, org_id %v", tok, tok.Extra("org_id"))
	}
	if left := time.Until(tok.Expiry); left < 3500*time.Second || left > 3600*time.Second {
		t.Fatalf("access token expiry in %s, want about 1 h", left)
	}
	d.wantOAuthError(t, ctx, "second redemption", "/auth/device/token", pollForm(deviceClient, da.DeviceCode), nil, 400, "invalid_grant")

	// The token acts in the workspace chosen at approval, with no x-org-id.
	d.wantConsole(t, ctx, "device token", tok.AccessToken, "", 200)
	d.wantConsole(t, ctx, "device token, same x-org-id", tok.AccessToken, d.tn.Workspace, 200)
	d.wantConsole(t, ctx, "device token, another x-org-id", tok.AccessToken, d.otherWS, 403)
	d.wantGateway(t, ctx, "device token", tok.AccessToken, 200)

	// Refresh through the library, by making it think the token expired.
	old := *tok
	expired := *tok
	expired.Expiry = time.Now().Add(-time.Minute)
	fresh, err := cfg.TokenSource(octx, &expired).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if fresh.AccessToken == old.AccessToken || fresh.RefreshToken == old.RefreshToken || fresh.RefreshToken == "" ||
		fresh.Extra("org_id") != d.tn.Workspace {
		t.Fatalf("refreshed token %+v, org_id %v", fresh, fresh.Extra("org_id"))
	}
	d.wantConsole(t, ctx, "refreshed token", fresh.AccessToken, "", 200)
	d.wantGateway(t, ctx, "refreshed token", fresh.AccessToken, 200)

	// The old refresh token again: invalid_grant, and the whole sign-in ends.
	stale := old
	stale.Expiry = time.Now().Add(-time.Minute)
	_, err = cfg.TokenSource(octx, &stale).Token()
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
		t.Fatalf("reusing the old refresh token: %v, want invalid_grant", err)
	}
	d.wantConsole(t, ctx, "refreshed token after reuse", fresh.AccessToken, "", 401)
	d.wantGateway(t, ctx, "refreshed token after reuse", fresh.AccessToken, 401)
	d.wantConsole(t, ctx, "first token after reuse", old.AccessToken, "", 401)
	d.wantOAuthError(t, ctx, "the newest refresh token after reuse", "/auth/device/token",
		url.Values{"grant_type": {"refresh_token"}, "client_id": {deviceClient}, "refresh_token": {fresh.RefreshToken}}, nil, 400, "invalid_grant")
}

// polls counts the token endpoint requests in the server's access log.
func (d *deviceSite) polls() int {
	return strings.Count(d.s.stderr.String(), `"uri":"/auth/device/token"`)
}

// waitPoll waits (at most 20 s) until the access log shows more token
// endpoint requests than before.
func (d *deviceSite) waitPoll(t *testing.T, ctx context.Context, what string, before int) {
	t.Helper()
	wctx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	waitFor(t, wctx, what+" in the access log", func() bool { return d.polls() > before })
}

// nodeLine is one JSON line printed by examples/clients/device.mjs.
type nodeLine struct {
	Step                    string  `json:"step"`
	UserCode                string  `json:"user_code"`
	VerificationURI         string  `json:"verification_uri"`
	VerificationURIComplete string  `json:"verification_uri_complete"`
	ExpiresIn               float64 `json:"expires_in"`
	Interval                float64 `json:"interval"`
	AccessToken             string  `json:"access_token"`
	RefreshToken            string  `json:"refresh_token"`
	TokenType               string  `json:"token_type"`
	OrgID                   *string `json:"org_id"`
	Error                   *string `json:"error"`
	Status                  float64 `json:"status"`
	Name                    string  `json:"name"`
	Message                 string  `json:"message"`
}

// nodeClient signs in with npm openid-client v6 (examples/clients/device.mjs).
func (d *deviceSite) nodeClient(t *testing.T, ctx context.Context) {
	dir := nodeReady(t, ctx)
	nctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(nctx, "node", "device.mjs")
	cmd.Dir = dir
	cmd.Env = testenv.ToolEnv(t, "AGENTGATE_CONSOLE_URL="+d.base)
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan nodeLine, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l nodeLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l = nodeLine{Step: "unparsable", Message: sc.Text()}
			}
			lines <- l
		}
		close(lines)
	}()
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	next := func(want string, within time.Duration) nodeLine {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("node device.mjs ended before %q; stderr:\n%s", want, stderr.String())
			}
			if l.Step != want {
				t.Fatalf("node device.mjs printed %+v, want step %q; stderr:\n%s", l, want, stderr.String())
			}
			return l
		case <-time.After(within):
			t.Fatalf("node device.mjs printed no %q within %s; stderr:\n%s", want, within, stderr.String())
		}
		return nodeLine{}
	}

	before := d.polls()
	dev := next("device", 30*time.Second)
	if !userCodeShape.MatchString(dev.UserCode) || dev.VerificationURIComplete != "/device?user_code="+dev.UserCode ||
		dev.VerificationURI != d.base+"/device" || dev.ExpiresIn != 600 || dev.Interval != 5 {
		t.Fatalf("openid-client's device authorization: %+v", dev)
	}

	// Approve only after the first poll: openid-client must keep polling
	// through authorization_pending (it stops on a WWW-Authenticate
	// challenge or a non-JSON error body).
	d.waitPoll(t, ctx, "openid-client's first poll", before)
	time.Sleep(300 * time.Millisecond)
	select {
	case l := <-lines:
		t.Fatalf("openid-client stopped polling after authorization_pending: %+v; stderr:\n%s", l, stderr.String())
	default:
	}
	approver := d.webApprover(t, ctx)
	approver.approve(t, ctx, dev.VerificationURIComplete, dev.UserCode, d.tn.Workspace)

	tok := next("tokens", 60*time.Second)
	if !strings.HasPrefix(tok.AccessToken, "ag_at_") || !strings.HasPrefix(tok.RefreshToken, "ag_rt_") ||
		!strings.EqualFold(tok.TokenType, "bearer") || tok.OrgID == nil || *tok.OrgID != d.tn.Workspace {
		t.Fatalf("openid-client's tokens: %+v", tok)
	}
	d.wantConsole(t, ctx, "openid-client token", tok.AccessToken, "", 200)
	d.wantGateway(t, ctx, "openid-client token", tok.AccessToken, 200)

	fmt.Fprintln(stdin)
	ref := next("refreshed", 30*time.Second)
	if ref.AccessToken == tok.AccessToken || ref.RefreshToken == tok.RefreshToken || !strings.HasPrefix(ref.RefreshToken, "ag_rt_") ||
		ref.OrgID == nil || *ref.OrgID != d.tn.Workspace {
		t.Fatalf("openid-client's refresh: %+v", ref)
	}
	d.wantConsole(t, ctx, "openid-client refreshed token", ref.AccessToken, "", 200)
	d.wantGateway(t, ctx, "openid-client refreshed token", ref.AccessToken, 200)

	fmt.Fprintln(stdin)
	reuse := next("reuse", 30*time.Second)
	if reuse.Error == nil || *reuse.Error != "invalid_grant" || reuse.Status != 400 {
		t.Fatalf("openid-client reusing the old refresh token: %+v", reuse)
	}
	d.wantConsole(t, ctx, "openid-client refreshed token after reuse", ref.AccessToken, "", 401)
	d.wantGateway(t, ctx, "openid-client refreshed token after reuse", ref.AccessToken, 401)
	stdin.Close()
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("node device.mjs: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("node device.mjs did not exit")
	}
}

// ---- Approval through the Console web pages ----
//
// What webApprover expects of the pages (a browser without JavaScript):
//
//  1. GET /device answers 200 with Content-Type text/html. Otherwise the
//     pages are not served yet and the test skips the approval.
//  2. GET {verification_uri_complete} (/device?user_code=XXXX-XXXX) without
//     a session answers, after redirects, an HTML page with a
//     <form method="post"> holding an <input type="password"> and an email
//     input (type="email", or a name containing "email"). Every other input
//     of that form (hidden CSRF token, "next" …) is posted back unchanged.
//  3. Posting it as application/x-www-form-urlencoded signs in: it sets the
//     session cookie (ag_session on plain HTTP, not Secure) and answers 2xx
//     or a redirect (303) to a 2xx page.
//  4. GET {verification_uri_complete} with the session answers 200 HTML
//     that shows the user code (XXXX-XXXX) and the client id, with a
//     <form method="post"> (action optional: the page's own URL) holding
//     its hidden inputs (CSRF token, user_code …), a workspace field — a
//     <select>, radio inputs or an input whose name contains "workspace" —
//     whose values are workspace ids, and a submit <button> (or
//     <input type="submit">) whose name, value or text contains "approve"
//     (case-insensitive); a Deny button must not contain "approve".
//  5. Posting that form with the approve button's name=value answers 2xx,
//     or a redirect to a 2xx page. The device code is then approved.

// webClient is a cookie-keeping browser without JavaScript.
type webClient struct {
	d      *deviceSite
	client *http.Client
	// clientID is the device client the approval page must name
	// (default deviceClient).
	clientID string
}

// probeWeb reports whether the Console web pages are served, and why not.
func (d *deviceSite) probeWeb(ctx context.Context) (string, bool) {
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/device", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Sprintf("GET /device: %v", err), false
	}
	defer resp.Body.Close()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 200 || mt != "text/html" {
		return fmt.Sprintf("the Console web pages are not served yet (GET /device answered %d %s): "+
			"browserless approval of the device code needs them, so the rest of this flow is skipped", resp.StatusCode, mt), false
	}
	return "", true
}

// webApprover skips the test when the web pages are not served.
func (d *deviceSite) webApprover(t *testing.T, ctx context.Context) *webClient {
	t.Helper()
	if why, ok := d.probeWeb(ctx); !ok {
		t.Skip(why)
	}
	jar, _ := cookiejar.New(nil)
	return &webClient{d: d, client: &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: httpClient.Transport}}
}

type webPage struct {
	url  *url.URL
	body string
}

func (w *webClient) do(t *testing.T, ctx context.Context, method, rawURL string, f url.Values) webPage {
	t.Helper()
	var body io.Reader
	if f != nil {
		body = strings.NewReader(f.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	if f != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		t.Fatalf("%s %s: HTTP %d: %s", method, rawURL, resp.StatusCode, tail(string(b), 2000))
	}
	return webPage{url: resp.Request.URL, body: string(b)}
}

// approve signs the tenant's owner in and approves userCode for workspace.
func (w *webClient) approve(t *testing.T, ctx context.Context, complete, userCode, workspace string) {
	t.Helper()
	target := w.d.base + complete
	pg := w.do(t, ctx, "GET", target, nil)
	if f := findHTMLForm(pg, func(f htmlForm) bool { return f.passwordField() != "" }); f != nil {
		vals := f.values()
		email := f.emailField()
		if email == "" {
			t.Fatalf("the sign-in form at %s has no email input: %s", pg.url, tail(pg.body, 2000))
		}
		vals.Set(email, w.d.tn.Email)
		vals.Set(f.passwordField(), w.d.tn.Password)
		if b := f.submit(func(string) bool { return true }); b != nil && b["name"] != "" {
			vals.Set(b["name"], b["value"])
		}
		w.do(t, ctx, f.methodOr("POST"), f.target(pg.url), vals)
		pg = w.do(t, ctx, "GET", target, nil)
	}
	if findHTMLForm(pg, func(f htmlForm) bool { return f.passwordField() != "" }) != nil {
		t.Fatalf("still asked to sign in after signing in at %s: %s", pg.url, tail(pg.body, 2000))
	}
	client := w.clientID
	if client == "" {
		client = deviceClient
	}
	if !strings.Contains(pg.body, userCode) || !strings.Contains(strings.ToLower(pg.body), client) {
		t.Fatalf("the device page %s does not show the code %s and the client %s: %s", pg.url, userCode, client, tail(pg.body, 2000))
	}
	isApprove := func(s string) bool { return strings.Contains(strings.ToLower(s), "approve") }
	f := findHTMLForm(pg, func(f htmlForm) bool { return f.submit(isApprove) != nil })
	if f == nil {
		t.Fatalf("no form with an Approve button at %s: %s", pg.url, tail(pg.body, 2000))
	}
	vals := f.values()
	// workspace "" approves a sign-in bound to no workspace (a client that
	// did not ask for org scope): the form has no workspace to pick.
	if field := f.workspaceField(); workspace != "" {
		if field == "" {
			t.Fatalf("the approval form at %s has no workspace field: %s", pg.url, tail(pg.body, 2000))
		}
		vals.Set(field, workspace)
	}
	if b := f.submit(isApprove); b["name"] != "" {
		vals.Set(b["name"], b["value"])
	}
	w.do(t, ctx, f.methodOr("POST"), f.target(pg.url), vals)
}

// htmlForm is one <form> of a page, parsed just enough for the approval.
type htmlForm struct {
	attrs   map[string]string
	inputs  []map[string]string
	selects []htmlSelect
	buttons []map[string]string // attributes plus "_text"
}

type htmlSelect struct {
	name     string
	values   []string
	selected string
}

var (
	htmlFormRe   = regexp.MustCompile(`(?is)<form\b([^>]*)>(.*?)</form\s*>`)
	htmlInputRe  = regexp.MustCompile(`(?is)<input\b([^>]*)>`)
	htmlButtonRe = regexp.MustCompile(`(?is)<button\b([^>]*)>(.*?)</button\s*>`)
	htmlSelectRe = regexp.MustCompile(`(?is)<select\b([^>]*)>(.*?)</select\s*>`)
	htmlOptionRe = regexp.MustCompile(`(?is)<option\b([^>]*)>([^<]*)`)
	htmlAttrRe   = regexp.MustCompile(`(?s)([a-zA-Z_:][-a-zA-Z0-9_:.]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>` + "`" + `]+)))?`)
	htmlTagRe    = regexp.MustCompile(`(?s)<[^>]*>`)
)

func htmlAttrs(s string) map[string]string {
	out := map[string]string{}
	for _, m := range htmlAttrRe.FindAllStringSubmatch(s, -1) {
		name := strings.ToLower(m[1])
		if _, dup := out[name]; !dup {
			out[name] = html.UnescapeString(m[2] + m[3] + m[4])
		}
	}
	return out
}

func htmlForms(body string) []htmlForm {
	var out []htmlForm
	for _, m := range htmlFormRe.FindAllStringSubmatch(body, -1) {
		f := htmlForm{attrs: htmlAttrs(m[1])}
		inner := m[2]
		for _, in := range htmlInputRe.FindAllStringSubmatch(inner, -1) {
			f.inputs = append(f.inputs, htmlAttrs(in[1]))
		}
		for _, b := range htmlButtonRe.FindAllStringSubmatch(inner, -1) {
			a := htmlAttrs(b[1])
			a["_text"] = html.UnescapeString(htmlTagRe.ReplaceAllString(b[2], ""))
			f.buttons = append(f.buttons, a)
		}
		for _, s := range htmlSelectRe.FindAllStringSubmatch(inner, -1) {
			sel := htmlSelect{name: htmlAttrs(s[1])["name"]}
			for _, o := range htmlOptionRe.FindAllStringSubmatch(s[2], -1) {
				a := htmlAttrs(o[1])
				v, ok := a["value"]
				if !ok {
					v = strings.TrimSpace(html.UnescapeString(o[2]))
				}
				sel.values = append(sel.values, v)
				if _, sel2 := a["selected"]; sel2 || sel.selected == "" && len(sel.values) == 1 {
					sel.selected = v
				}
			}
			f.selects = append(f.selects, sel)
		}
		out = append(out, f)
	}
	return out
}

func findHTMLForm(p webPage, match func(htmlForm) bool) *htmlForm {
	for _, f := range htmlForms(p.body) {
		if match(f) {
			return &f
		}
	}
	return nil
}

func (f htmlForm) methodOr(def string) string {
	if m := strings.ToUpper(f.attrs["method"]); m != "" {
		return m
	}
	return def
}

func (f htmlForm) target(pageURL *url.URL) string {
	a, ok := f.attrs["action"]
	if !ok || a == "" {
		return pageURL.String()
	}
	u, err := pageURL.Parse(a)
	if err != nil {
		return pageURL.String()
	}
	return u.String()
}

// values are what a browser submits before the person types anything.
func (f htmlForm) values() url.Values {
	v := url.Values{}
	for _, in := range f.inputs {
		name, typ := in["name"], strings.ToLower(in["type"])
		if name == "" {
			continue
		}
		switch typ {
		case "submit", "button", "image", "reset", "file":
			continue
		case "checkbox", "radio":
			if _, checked := in["checked"]; !checked {
				continue
			}
		}
		v.Set(name, in["value"])
	}
	for _, s := range f.selects {
		if s.name != "" {
			v.Set(s.name, s.selected)
		}
	}
	return v
}

func (f htmlForm) passwordField() string {
	for _, in := range f.inputs {
		if strings.EqualFold(in["type"], "password") && in["name"] != "" {
			return in["name"]
		}
	}
	return ""
}

func (f htmlForm) emailField() string {
	for _, in := range f.inputs {
		if strings.EqualFold(in["type"], "email") && in["name"] != "" {
			return in["name"]
		}
	}
	for _, in := range f.inputs {
		if strings.Contains(strings.ToLower(in["name"]), "email") {
			return in["name"]
		}
	}
	return ""
}

func (f htmlForm) workspaceField() string {
	for _, s := range f.selects {
		if strings.Contains(strings.ToLower(s.name), "workspace") {
			return s.name
		}
	}
	for _, in := range f.inputs {
		if strings.Contains(strings.ToLower(in["name"]), "workspace") {
			return in["name"]
		}
	}
	return ""
}

// submit returns the first submit control whose name, value or text
// matches, as attributes.
func (f htmlForm) submit(match func(string) bool) map[string]string {
	for _, b := range f.buttons {
		if t := strings.ToLower(b["type"]); t != "" && t != "submit" {
			continue
		}
		if match(b["name"]) || match(b["value"]) || match(b["_text"]) {
			return b
		}
	}
	for _, in := range f.inputs {
		if strings.EqualFold(in["type"], "submit") && (match(in["name"]) || match(in["value"])) {
			return in
		}
	}
	return nil
}

// TestDeviceCodeDefaultClients: with no device_client configured, the
// released OpenCode CLI's client id starts a sign-in with the JSON body it
// sends, next to agentgate-cli; another client id is refused, and a body
// that is neither a form nor JSON is 415.
func TestDeviceCodeDefaultClients(t *testing.T) {
	ctx := testContext(t, time.Minute)
	s := startServer(t, ctx, caddyBinary(t), config{})
	base := "http://" + s.httpAddr
	for _, c := range []struct {
		ctype, body string
		status      int
	}{
		{"application/json", `{"client_id":"opencode-cli"}`, 200},
		{"application/x-www-form-urlencoded", "client_id=agentgate-cli", 200},
		{"application/json", `{"client_id":"someone-else"}`, 401},
		{"text/plain", "client_id=opencode-cli", 415},
	} {
		st, b, err := call(ctx, httpClient, "POST", base+"/auth/device/code", http.Header{"Content-Type": {c.ctype}}, c.body)
		if err != nil || st != c.status {
			t.Fatalf("%s %s: %d %v %s", c.ctype, c.body, st, err, b)
		}
		var start struct {
			UserCode string `json:"user_code"`
		}
		if st == 200 && (json.Unmarshal(b, &start) != nil || !userCodeShape.MatchString(start.UserCode)) {
			t.Fatalf("%s: %s", c.body, b)
		}
	}
}

// TestDeviceUnknownCodesLimited: the real binary counts polls with unknown
// device codes per client address (as Caddy determines it): after ten, the
// address's polls — its real, pending code included — get 429 with the
// error slow_down in the token endpoint's JSON and Retry-After.
func TestDeviceUnknownCodesLimited(t *testing.T) {
	ctx := testContext(t, time.Minute)
	s := startServer(t, ctx, caddyBinary(t), config{})
	base := "http://" + s.httpAddr
	post := func(body string) (int, http.Header, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "POST", base+"/auth/device/token", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json") // what the OpenCode CLI sends
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("token endpoint: %d %q %v", res.StatusCode, res.Header.Get("Content-Type"), err)
		}
		return res.StatusCode, res.Header, out
	}
	st, b, err := call(ctx, httpClient, "POST", base+"/auth/device/code", http.Header{"Content-Type": {"application/json"}}, `{"client_id":"opencode-cli"}`)
	var start struct {
		DeviceCode string `json:"device_code"`
	}
	if err != nil || st != 200 || json.Unmarshal(b, &start) != nil {
		t.Fatalf("device code: %d %v %s", st, err, b)
	}
	poll := func(code string) string {
		return `{"grant_type":"` + deviceGrant + `","client_id":"opencode-cli","device_code":"` + code + `"}`
	}
	if st, _, out := post(poll(start.DeviceCode)); st != 400 || out["error"] != "authorization_pending" {
		t.Fatalf("pending: %d %v", st, out)
	}
	for i := 0; i < 10; i++ {
		if st, _, out := post(poll(fmt.Sprintf("ag_dc_guess%d", i))); st != 400 || out["error"] != "invalid_grant" {
			t.Fatalf("unknown code %d: %d %v", i, st, out)
		}
	}
	st, h, out := post(poll(start.DeviceCode))
	if st != http.StatusTooManyRequests || out["error"] != "slow_down" || h.Get("Retry-After") == "" || h.Get("WWW-Authenticate") != "" {
		t.Fatalf("the real code from the guessing address: %d %v Retry-After %q", st, out, h.Get("Retry-After"))
	}
}

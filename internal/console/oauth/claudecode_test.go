package oauth_test

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/console/oauth"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// withClaudeCode configures the built-in Claude Code client next to the
// test's own.
func withClaudeCode(h *oauth.Handler) { h.Clients[service.ClaudeCodeClient] = true }

// ccStart starts a device authorization exactly as the released Claude
// Code does: a form with surface=claude_code and nothing else.
func (e *env) ccStart(path, ip string) resp {
	e.t.Helper()
	r := e.do(req{path: path, ip: ip, body: "surface=claude_code"})
	if r.status != 200 {
		e.t.Fatalf("Claude Code device authorization: HTTP %d %s", r.status, r.raw)
	}
	return r
}

// ccPoll polls as Claude Code does: no client id.
func (e *env) ccPoll(deviceCode string) resp {
	e.t.Helper()
	return e.do(req{path: oauth.TokenPath, body: form("grant_type", deviceType, "device_code", deviceCode)})
}

func (e *env) ccRefresh(refreshToken string) resp {
	e.t.Helper()
	return e.do(req{path: oauth.TokenPath, body: form("grant_type", "refresh_token", "refresh_token", refreshToken)})
}

// The metadata names same-origin endpoints for the device authorization,
// the token and the revocation, keeps what the other clients read, and
// announces the gateway protocol's version.
func TestMetadataForClaudeCode(t *testing.T) {
	e := newEnv(t, withClaudeCode)
	r := e.do(req{method: "GET", path: oauth.MetadataPath})
	if r.status != 200 {
		t.Fatalf("metadata: %d %s", r.status, r.raw)
	}
	var md struct {
		Issuer      string   `json:"issuer"`
		Device      string   `json:"device_authorization_endpoint"`
		Token       string   `json:"token_endpoint"`
		Revocation  string   `json:"revocation_endpoint"`
		Grants      []string `json:"grant_types_supported"`
		AuthMethods []string `json:"token_endpoint_auth_methods_supported"`
		Version     *int     `json:"gateway_protocol_version"`
	}
	if err := json.Unmarshal(r.raw, &md); err != nil {
		t.Fatal(err)
	}
	base := e.srv.URL
	if md.Issuer != base || md.Device != base+"/auth/device/code" || md.Token != base+"/auth/device/token" ||
		md.Revocation != base+"/auth/device/revoke" || strings.Join(md.AuthMethods, ",") != "none" ||
		strings.Join(md.Grants, ",") != deviceType+",refresh_token" || md.Version == nil || *md.Version != 1 {
		t.Fatalf("metadata %s", r.raw)
	}
}

// Claude Code's whole sign-in with no client id: the device authorization
// from surface=claude_code (whole verification addresses, a notice), the
// address and time the person sees, the polls' errors in the body, a
// sign-in bound to the workspace the person picks, the email in the token
// answer, refresh with rotation, and revocation.
func TestClaudeCodeSignIn(t *testing.T) {
	e := newEnv(t, withClaudeCode)
	ws, who := e.member()
	start := e.ccStart(oauth.CodePath, "198.51.100.20")
	dc, uc := start.str("device_code"), start.str("user_code")
	var n struct {
		ExpiresIn int `json:"expires_in"`
		Interval  int `json:"interval"`
	}
	json.Unmarshal(start.raw, &n)
	if dc == "" || uc == "" || start.str("verification_uri") != e.srv.URL+"/device" ||
		start.str("verification_uri_complete") != e.srv.URL+"/device?user_code="+url.QueryEscape(uc) ||
		n.ExpiresIn != 600 || n.Interval != 5 {
		t.Fatalf("device authorization answer %s", start.raw)
	}
	if notice := start.str("login_notice"); notice == "" || len(notice) > 500 {
		t.Fatalf("login_notice %q, want 1–500 characters", notice)
	}

	// The person sees which client asks, from where and since when.
	e.clk.Advance(90 * time.Second)
	view, err := e.svc.LookupUserCode(ctx, uc)
	if err != nil {
		t.Fatal(err)
	}
	if view.ClientID != service.ClaudeCodeClient || view.ClientName != "Claude Code" || view.RequestedFrom != "198.51.100.20" ||
		!view.Requested.Equal(t0) || !view.OrgScope {
		t.Fatalf("the verification page's view %+v", view)
	}

	wantError(t, "pending", e.ccPoll(dc), 400, "authorization_pending")
	wantError(t, "too fast", e.ccPoll(dc), 400, "slow_down")
	// The sign-in is always bound to a workspace: approving needs one.
	if err := e.svc.DecideDevice(ctx, who, uc, true, ""); err == nil {
		t.Fatal("approved without a workspace")
	}
	if err := e.svc.DecideDevice(ctx, who, uc, true, ws); err != nil {
		t.Fatal(err)
	}
	// The address is kept only while the sign-in waits for a decision.
	err = e.st.View(ctx, func(tx store.Tx) error {
		g, err := tx.DeviceGrant(hex.EncodeToString(e.svc.Secrets.MAC(dc)))
		if err == nil && (g.State != store.DeviceApproved || g.RequestIP != "") {
			t.Errorf("the approved grant: state %s, address %q", g.State, g.RequestIP)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(10 * time.Second)
	tok := e.ccPoll(dc)
	var ttl int
	json.Unmarshal(tok.json["expires_in"], &ttl)
	if tok.status != 200 || !strings.HasPrefix(tok.str("access_token"), "ag_at_") || !strings.HasPrefix(tok.str("refresh_token"), "ag_rt_") ||
		ttl != 3600 || tok.str("org_id") != ws || tok.str("email") != strings.ToLower(who)+"@example.com" {
		t.Fatalf("token answer %d %s", tok.status, tok.raw)
	}
	p, err := e.svc.Authenticate(ctx, tok.str("access_token"), "")
	if err != nil || p.PersonID != who || p.Workspace != ws {
		t.Fatalf("the access token acts as %+v (%v)", p, err)
	}
	wantError(t, "the code once more", e.ccPoll(dc), 400, "invalid_grant")

	// Refresh rotates, with no client id, and keeps the binding and email.
	ref := e.ccRefresh(tok.str("refresh_token"))
	if ref.status != 200 || ref.str("refresh_token") == tok.str("refresh_token") || ref.str("org_id") != ws || ref.str("email") == "" {
		t.Fatalf("refresh %d %s", ref.status, ref.raw)
	}

	// Logout as Claude Code does it: the access token, then the refresh
	// token with its hint. Both end the whole sign-in.
	r := e.do(req{path: oauth.RevokePath, body: form("token", ref.str("access_token"))})
	if r.status != 200 {
		t.Fatalf("revoke the access token: %d %s", r.status, r.raw)
	}
	if _, err := e.svc.Authenticate(ctx, ref.str("access_token"), ""); err == nil {
		t.Fatal("a revoked access token still works")
	}
	wantError(t, "refresh after revocation", e.ccRefresh(ref.str("refresh_token")), 400, "invalid_grant")
	r = e.do(req{path: oauth.RevokePath, body: form("token", ref.str("refresh_token"), "token_type_hint", "refresh_token")})
	if r.status != 200 {
		t.Fatalf("revoke the refresh token of a revoked sign-in: %d %s", r.status, r.raw)
	}
}

// The fallback names of the endpoints answer as the advertised ones.
func TestClaudeCodeFallbackPaths(t *testing.T) {
	e := newEnv(t, withClaudeCode)
	ws, who := e.member()
	start := e.ccStart(oauth.AltCodePath, "")
	if err := e.svc.DecideDevice(ctx, who, start.str("user_code"), true, ws); err != nil {
		t.Fatal(err)
	}
	r := e.do(req{path: oauth.AltTokenPath, body: form("grant_type", deviceType, "device_code", start.str("device_code"))})
	if r.status != 200 || r.str("access_token") == "" {
		t.Fatalf("token at %s: %d %s", oauth.AltTokenPath, r.status, r.raw)
	}
}

// Bad input on Claude Code's sign-in: unknown surfaces, codes that are
// unknown, expired or another client's, a denied approval, a refresh token
// used twice, revocation without a token or of another client's token.
func TestClaudeCodeBadInput(t *testing.T) {
	e := newEnv(t, withClaudeCode)
	ws, who := e.member()

	for _, f := range []string{"surface=cursor", "surface=", "surface=claude_code&client_id=" + cli, "surface=CLAUDE_CODE"} {
		wantError(t, "device authorization "+f, e.do(req{path: oauth.CodePath, body: f}), 400, "invalid_request")
	}
	r := e.do(req{path: oauth.CodePath, body: "supports_org_scope=true"})
	wantError(t, "neither client_id nor surface", r, 400, "invalid_request")
	if !strings.Contains(r.str("error_description"), "surface=claude_code") {
		t.Fatalf("the error does not say what to send: %s", r.raw)
	}
	// The surface and its own client id together are one client.
	if r := e.do(req{path: oauth.CodePath, body: form("surface", "claude_code", "client_id", service.ClaudeCodeClient)}); r.status != 200 {
		t.Fatalf("surface with its own client id: %d %s", r.status, r.raw)
	}

	wantError(t, "unknown device code", e.ccPoll("ag_dc_unknown"), 400, "invalid_grant")
	wantError(t, "no device code", e.ccPoll(""), 400, "invalid_request")
	// Another client's code, polled with no client id, is unknown: the
	// other clients' codes keep requiring their client_id.
	otherDC, otherUC := e.start(true)
	if err := e.svc.DecideDevice(ctx, who, otherUC, true, ws); err != nil {
		t.Fatal(err)
	}
	wantError(t, "another client's code without client_id", e.ccPoll(otherDC), 400, "invalid_grant")
	if r := e.poll(otherDC); r.status != 200 {
		t.Fatalf("the other client's own poll: %d %s", r.status, r.raw)
	}

	expiring := e.ccStart(oauth.CodePath, "")
	e.clk.Advance(601 * time.Second)
	wantError(t, "expired code", e.ccPoll(expiring.str("device_code")), 400, "expired_token")

	denied := e.ccStart(oauth.CodePath, "")
	if err := e.svc.DecideDevice(ctx, who, denied.str("user_code"), false, ""); err != nil {
		t.Fatal(err)
	}
	wantError(t, "denied", e.ccPoll(denied.str("device_code")), 400, "access_denied")

	// A refresh token used twice revokes the whole sign-in.
	s := e.ccStart(oauth.CodePath, "")
	if err := e.svc.DecideDevice(ctx, who, s.str("user_code"), true, ws); err != nil {
		t.Fatal(err)
	}
	tok := e.ccPoll(s.str("device_code"))
	next := e.ccRefresh(tok.str("refresh_token"))
	if next.status != 200 {
		t.Fatalf("first refresh: %d %s", next.status, next.raw)
	}
	wantError(t, "refresh token used twice", e.ccRefresh(tok.str("refresh_token")), 400, "invalid_grant")
	if _, err := e.svc.Authenticate(ctx, next.str("access_token"), ""); err == nil {
		t.Fatal("the sign-in's newest access token works after a refresh token was used twice")
	}
	wantError(t, "the newest refresh token", e.ccRefresh(next.str("refresh_token")), 400, "invalid_grant")

	// Revocation.
	wantError(t, "revoke without a token", e.do(req{path: oauth.RevokePath, body: "token_type_hint=access_token"}), 400, "invalid_request")
	for _, unknown := range []string{"garbage", "ag_at_AAAAAAAAAAAA_" + strings.Repeat("A", 43)} {
		if r := e.do(req{path: oauth.RevokePath, body: form("token", unknown)}); r.status != 200 {
			t.Fatalf("revoke an unknown token %q: %d %s", unknown, r.status, r.raw)
		}
	}
	// Another client's token is not Claude Code's to revoke.
	dc2, uc2 := e.start(true)
	if err := e.svc.DecideDevice(ctx, who, uc2, true, ws); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(10 * time.Second)
	other := e.poll(dc2)
	wantError(t, "another client's token", e.do(req{path: oauth.RevokePath, body: form("token", other.str("access_token"))}), 400, "unauthorized_client")
	if _, err := e.svc.Authenticate(ctx, other.str("access_token"), ""); err != nil {
		t.Fatalf("another client's sign-in was revoked: %v", err)
	}
	// Its own client may.
	if r := e.do(req{path: oauth.RevokePath, body: form("token", other.str("refresh_token"), "token_type_hint", "refresh_token", "client_id", cli)}); r.status != 200 {
		t.Fatalf("revoke with its client id: %d %s", r.status, r.raw)
	}
	if _, err := e.svc.Authenticate(ctx, other.str("access_token"), ""); err == nil {
		t.Fatal("revoking the refresh token left the access token working")
	}
	wantError(t, "revoke as an unknown client", e.do(req{path: oauth.RevokePath, body: form("token", "x", "client_id", "evil")}), 401, "invalid_client")
}

// Without the Claude Code client configured, surface=claude_code is an
// unknown client and a request with no client id still needs one.
func TestClaudeCodeNotConfigured(t *testing.T) {
	e := newEnv(t)
	r := e.do(req{path: oauth.CodePath, body: "surface=claude_code"})
	wantError(t, "surface of a client not configured", r, http.StatusUnauthorized, "invalid_client")
	wantError(t, "poll with no client id", e.ccPoll("ag_dc_x"), 400, "invalid_request")
	wantError(t, "revoke with no client id", e.do(req{path: oauth.RevokePath, body: form("token", "x")}), 400, "invalid_request")
}

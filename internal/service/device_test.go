package service_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

const (
	cli      = "agentgate-cli"
	verifyAt = "https://console.example.com/device"
)

// wantOAuth asserts an RFC 6749/8628 error with status 400 and this code.
func wantOAuth(t *testing.T, what string, err error, code string) *service.OAuthError {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	var oe *service.OAuthError
	if !errors.As(err, &oe) {
		t.Fatalf("%s: error %v (%T) is not an *service.OAuthError, want %s", what, err, err, code)
	}
	if oe.Code != code || oe.Status != 400 {
		t.Fatalf("%s: got %d %s (%s), want 400 %s", what, oe.Status, oe.Code, oe.Description, code)
	}
	return oe
}

// start begins a device authorization for the CLI client.
func (e *env) start(orgScope bool) *service.DeviceStart {
	e.t.Helper()
	d, err := e.svc.StartDevice(ctx, cli, orgScope, verifyAt)
	noErr(e.t, "StartDevice", err)
	return d
}

// approve approves a code as a person, binding ws (for org-scope codes).
func (e *env) approve(d *service.DeviceStart, personID, ws string) {
	e.t.Helper()
	noErr(e.t, "DecideDevice approve", e.svc.DecideDevice(ctx, personID, d.UserCode, true, ws))
}

// signIn runs a whole device sign-in: start, approve, redeem.
func (e *env) signIn(personID, ws string) *service.TokenPair {
	e.t.Helper()
	d := e.start(ws != "")
	e.approve(d, personID, ws)
	pair, err := e.svc.PollDevice(ctx, cli, d.DeviceCode)
	noErr(e.t, "PollDevice after approval", err)
	return pair
}

// grant reads a device grant from the store by its device code.
func (e *env) grant(deviceCode string) *store.DeviceGrant {
	e.t.Helper()
	var g *store.DeviceGrant
	e.view(func(tx store.Tx) (err error) {
		g, err = tx.DeviceGrant(hex.EncodeToString(e.svc.Secrets.MAC(deviceCode)))
		return err
	})
	return g
}

// unauthorized asserts that a credential gets 401 now.
func (e *env) unauthorized(what, cred, org string) {
	e.t.Helper()
	_, err := e.svc.Authenticate(ctx, cred, org)
	wantErr(e.t, what, err, 401, "Unauthorized")
}

func TestUserCodeAndDeviceCode(t *testing.T) {
	e := newEnv(t)
	shape := regexp.MustCompile(`^[` + service.UserCodeAlphabet + `]{4}-[` + service.UserCodeAlphabet + `]{4}$`)
	if service.UserCodeAlphabet != "BCDFGHJKLMNPQRSTVWXZ" {
		t.Fatalf("UserCodeAlphabet = %q, want RFC 8628's base-20 set", service.UserCodeAlphabet)
	}
	const n = 300
	userCodes, deviceCodes := map[string]bool{}, map[string]bool{}
	seen := map[rune]int{}
	for i := 0; i < n; i++ {
		d := e.start(i%2 == 0)
		if !shape.MatchString(d.UserCode) {
			t.Fatalf("user_code %q is not XXXX-XXXX of %s", d.UserCode, service.UserCodeAlphabet)
		}
		for _, r := range strings.ReplaceAll(d.UserCode, "-", "") {
			seen[r]++
		}
		raw, ok := strings.CutPrefix(d.DeviceCode, "ag_dc_")
		if !ok {
			t.Fatalf("device_code %q lacks its prefix", d.DeviceCode)
		}
		b, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || len(b)*8 < 128 {
			t.Fatalf("device_code %q: %d random bits (%v), want ≥ 128 in base64url", d.DeviceCode, len(b)*8, err)
		}
		if userCodes[d.UserCode] || deviceCodes[d.DeviceCode] {
			t.Fatalf("code issued twice: %q / %q", d.UserCode, d.DeviceCode)
		}
		userCodes[d.UserCode], deviceCodes[d.DeviceCode] = true, true
		if d.ExpiresIn != 600 || d.Interval != 5 {
			t.Fatalf("expires_in %d, interval %d; want 600 and 5", d.ExpiresIn, d.Interval)
		}
		if d.VerificationURI != verifyAt || d.VerificationURIComplete != verifyAt+"?user_code="+d.UserCode {
			t.Fatalf("verification URIs %q, %q", d.VerificationURI, d.VerificationURIComplete)
		}
	}
	// 2400 draws from 20 letters (120 expected each): every letter shows up,
	// none is wildly favoured (a modulo-biased draw from bytes favours 16 of
	// them by 13/12 only, so this is a sanity check, not a bias test).
	for _, r := range service.UserCodeAlphabet {
		if seen[r] < 60 || seen[r] > 200 {
			t.Errorf("letter %c drawn %d times of %d", r, seen[r], 8*n)
		}
	}
}

func TestNormalizeUserCode(t *testing.T) {
	for in, want := range map[string]string{
		"WDJB-MJHT":        "WDJBMJHT",
		"wdjb-mjht":        "WDJBMJHT",
		"WDJBMJHT":         "WDJBMJHT",
		"wdjbmjht":         "WDJBMJHT",
		" WDJB MJHT ":      "WDJBMJHT",
		"Wd Jb-mJ hT":      "WDJBMJHT",
		"wdjb - mjht":      "WDJBMJHT",
		"BCDF-GHJK":        "BCDFGHJK",
		"\tXZXZ-XZXZ\t":    "XZXZXZXZ",
		"LMNP QRST":        "LMNPQRST",
		"lmnp-qrst-":       "LMNPQRST",
		"-l-m-n-p-q-r-s-t": "LMNPQRST",
	} {
		got, ok := service.NormalizeUserCode(in)
		if !ok || got != want {
			t.Errorf("NormalizeUserCode(%q) = %q, %v; want %q, true", in, got, ok, want)
		}
	}
	for _, in := range []string{
		"", "-", "WDJB-MJH", "WDJB-MJHTT", "WDJB-MJHTWDJB", // wrong length
		"WDJB-MJH0", "0DJB-MJHT", "WDJ1-MJHT", "WDJB-MJH8", // digits (0 is not O)
		"WDJB-MJHA", "EDJB-MJHT", "WIJB-MJHT", "WDJO-MJHT", "WDJB-UJHT", "WDJB-MJYT", // vowels and Y
		"WDJB_MJHT", "WDJB.MJHT", "WDJB/MJHT", "WDJB+MJHT", "WDJB-MJHÉ", "ＷDJB-MJHT", // other characters
	} {
		if got, ok := service.NormalizeUserCode(in); ok {
			t.Errorf("NormalizeUserCode(%q) = %q, true; want a refusal", in, got)
		}
	}
	if got := service.FormatUserCode("WDJBMJHT"); got != "WDJB-MJHT" {
		t.Errorf("FormatUserCode = %q", got)
	}

	// Typing the code by hand finds the same grant as the link does.
	e := newEnv(t)
	d := e.start(true)
	typed := strings.ToLower(strings.ReplaceAll(d.UserCode, "-", " "))
	v, err := e.svc.LookupUserCode(ctx, typed)
	noErr(t, "LookupUserCode "+typed, err)
	if v.UserCode != d.UserCode || v.ClientID != cli || !v.OrgScope || !v.Expires.Equal(t0.Add(600*time.Second)) {
		t.Fatalf("LookupUserCode = %+v", v)
	}
	_, err = e.svc.LookupUserCode(ctx, "BCDF-GHJK")
	wantErr(t, "LookupUserCode of an unknown code", err, 404, "DeviceCodeNotFound")
	_, err = e.svc.LookupUserCode(ctx, "BCDF-GHJ0")
	wantErr(t, "LookupUserCode of a malformed code", err, 404, "DeviceCodeNotFound")
	ws := e.workspace("acme")
	who := e.person(ws, store.RoleMember)
	noErr(t, "approve by a hand-typed code", e.svc.DecideDevice(ctx, who, typed, true, ws))
	if _, err := e.svc.PollDevice(ctx, cli, d.DeviceCode); err != nil {
		t.Fatalf("PollDevice after approval by the typed code: %v", err)
	}
}

func TestPollDeviceStates(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	alice := e.person(ws, store.RoleMember)

	// Unknown codes, and other clients' codes, are told apart (the token
	// endpoint counts them per client address); nothing else is.
	_, err := e.svc.PollDevice(ctx, cli, "ag_dc_"+strings.Repeat("A", 43))
	wantOAuth(t, "unknown device_code", err, "invalid_grant")
	if !service.IsUnknownDeviceCode(err) {
		t.Fatal("an unknown device_code is not marked as one")
	}
	_, err = e.svc.PollDevice(ctx, cli, "")
	wantOAuth(t, "missing device_code", err, "invalid_request")
	if service.IsUnknownDeviceCode(err) {
		t.Fatal("a missing device_code is marked unknown")
	}

	d := e.start(true)
	_, err = e.svc.PollDevice(ctx, "other-cli", d.DeviceCode)
	wantOAuth(t, "another client's device_code", err, "invalid_grant")
	if !service.IsUnknownDeviceCode(err) {
		t.Fatal("another client's device_code is not marked unknown")
	}
	// The other client's poll did not count: the right client is not told
	// to slow down.
	_, err = e.svc.PollDevice(ctx, cli, d.DeviceCode)
	wantOAuth(t, "first poll", err, "authorization_pending")

	// Too fast: slow_down, and the interval grows by 5 s each time and stays.
	e.clk.Advance(time.Second)
	oe := wantOAuth(t, "poll after 1 s", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "slow_down")
	if oe.Interval != 10 {
		t.Fatalf("slow_down interval %d, want 10", oe.Interval)
	}
	e.clk.Advance(time.Second)
	oe = wantOAuth(t, "poll after 1 more s", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "slow_down")
	if oe.Interval != 15 {
		t.Fatalf("second slow_down interval %d, want 15", oe.Interval)
	}
	if g := e.grant(d.DeviceCode); g.Interval != 15 || g.State != store.DevicePending {
		t.Fatalf("stored grant: interval %d, state %s; want 15, pending", g.Interval, g.State)
	}
	// Waiting the (new) interval: pending again.
	e.clk.Advance(15 * time.Second)
	wantOAuth(t, "poll after 15 s", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "authorization_pending")
	// The interval stays 15: ten seconds is too fast now.
	e.clk.Advance(10 * time.Second)
	oe = wantOAuth(t, "poll 10 s later", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "slow_down")
	if oe.Interval != 20 {
		t.Fatalf("third slow_down interval %d, want 20", oe.Interval)
	}

	// A client that keeps its 5 s cadence is never slowed down, even with
	// a little network jitter.
	d2 := e.start(false)
	wantOAuth(t, "cadence poll 0", err2(e.svc.PollDevice(ctx, cli, d2.DeviceCode)), "authorization_pending")
	for i, step := range []time.Duration{5 * time.Second, 4500 * time.Millisecond, 5500 * time.Millisecond, 5 * time.Second} {
		e.clk.Advance(step)
		_, err := e.svc.PollDevice(ctx, cli, d2.DeviceCode)
		wantOAuth(t, "cadence poll "+string(rune('1'+i)), err, "authorization_pending")
	}

	// Approved: the tokens, bound to the workspace.
	e.approve(d, alice, ws)
	e.clk.Advance(20 * time.Second)
	pair, err := e.svc.PollDevice(ctx, cli, d.DeviceCode)
	noErr(t, "poll after approval", err)
	if !strings.HasPrefix(pair.AccessToken, "ag_at_") || !strings.HasPrefix(pair.RefreshToken, "ag_rt_") ||
		pair.ExpiresIn != 3600 || pair.TokenType != "Bearer" || pair.OrgID == nil || *pair.OrgID != ws {
		t.Fatalf("token pair %+v (org %v)", pair, pair.OrgID)
	}
	p := e.principal(pair.AccessToken, "")
	if p.Kind != service.KindPerson || p.PersonID != alice || p.Workspace != ws || p.Role != store.RoleMember {
		t.Fatalf("principal of the device token: %+v", p)
	}
	if g := e.grant(d.DeviceCode); g.State != store.DeviceConsumed || g.FamilyID != p.FamilyID {
		t.Fatalf("stored grant after redemption: %+v", g)
	}
	// The code is single use.
	e.clk.Advance(time.Minute)
	_, err = e.svc.PollDevice(ctx, cli, d.DeviceCode)
	wantOAuth(t, "replaying the consumed code", err, "invalid_grant")
	if service.IsUnknownDeviceCode(err) {
		t.Fatal("a consumed code is marked unknown")
	}
	_, err = e.svc.LookupUserCode(ctx, d.UserCode)
	wantErr(t, "LookupUserCode of a consumed code", err, 404, "DeviceCodeNotFound")
	wantErr(t, "approving a consumed code", e.svc.DecideDevice(ctx, alice, d.UserCode, true, ws), 404, "DeviceCodeNotFound")

	// Without org scope: an unbound token (org_id null) that needs x-org-id.
	d3 := e.start(false)
	e.approve(d3, alice, "")
	pair, err = e.svc.PollDevice(ctx, cli, d3.DeviceCode)
	noErr(t, "poll unbound", err)
	if pair.OrgID != nil {
		t.Fatalf("unbound sign-in answered org_id %q", *pair.OrgID)
	}
	_, err = e.svc.Authenticate(ctx, pair.AccessToken, "")
	wantErr(t, "unbound token without x-org-id", err, 400, "OrgRequired")
	if p := e.principal(pair.AccessToken, ws); p.Workspace != ws {
		t.Fatalf("unbound token with x-org-id: %+v", p)
	}
}

// err2 keeps the error of a two-valued call.
func err2[T any](_ T, err error) error { return err }

func TestPollDeviceDeniedAndExpired(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	alice := e.person(ws, store.RoleOwner)

	// Denied.
	d := e.start(true)
	wantOAuth(t, "pending", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "authorization_pending")
	noErr(t, "deny", e.svc.DecideDevice(ctx, alice, d.UserCode, false, ""))
	e.clk.Advance(5 * time.Second)
	wantOAuth(t, "poll after deny", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "access_denied")
	e.clk.Advance(5 * time.Second)
	wantOAuth(t, "poll again after deny", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "access_denied")
	wantErr(t, "approving a denied code", e.svc.DecideDevice(ctx, alice, d.UserCode, true, ws), 404, "DeviceCodeNotFound")
	_, err := e.svc.LookupUserCode(ctx, d.UserCode)
	wantErr(t, "LookupUserCode of a denied code", err, 404, "DeviceCodeNotFound")

	// Expired while pending (600 s, exactly).
	pending := e.start(true)
	// Approved, then expired before redemption.
	approved := e.start(true)
	e.approve(approved, alice, ws)
	// Denied, then expired.
	denied := e.start(false)
	noErr(t, "deny", e.svc.DecideDevice(ctx, alice, denied.UserCode, false, ""))
	// Not yet approved when it expires.
	late := e.start(true)
	e.clk.Advance(599 * time.Second)
	v, err := e.svc.LookupUserCode(ctx, late.UserCode)
	noErr(t, "LookupUserCode at 599 s", err)
	if v.UserCode != late.UserCode {
		t.Fatalf("LookupUserCode = %+v", v)
	}
	e.clk.Advance(time.Second)
	for name, dc := range map[string]string{"pending": pending.DeviceCode, "approved": approved.DeviceCode, "denied": denied.DeviceCode} {
		wantOAuth(t, name+" code after 600 s", err2(e.svc.PollDevice(ctx, cli, dc)), "expired_token")
	}
	wantErr(t, "approving an expired code", e.svc.DecideDevice(ctx, alice, late.UserCode, true, ws), 404, "DeviceCodeNotFound")
	_, err = e.svc.LookupUserCode(ctx, late.UserCode)
	wantErr(t, "LookupUserCode of an expired code", err, 404, "DeviceCodeNotFound")
	wantOAuth(t, "the late code", err2(e.svc.PollDevice(ctx, cli, late.DeviceCode)), "expired_token")
	if g := e.grant(approved.DeviceCode); g.State != store.DeviceApproved || g.FamilyID != "" {
		t.Fatalf("an expired approved grant issued something: %+v", g)
	}
}

func TestDecideDeviceOrgScope(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	other := e.workspace("other")
	alice := e.person(ws, store.RoleMember)

	d := e.start(true)
	wantErr(t, "approve without a workspace", e.svc.DecideDevice(ctx, alice, d.UserCode, true, ""), 400, "")
	wantErr(t, "approve for a workspace she is not a member of", e.svc.DecideDevice(ctx, alice, d.UserCode, true, other), 403, "Forbidden")
	wantErr(t, "approve for an unknown workspace", e.svc.DecideDevice(ctx, alice, d.UserCode, true, "wrk_nope"), 404, "WorkspaceNotFound")
	noErr(t, "DeleteWorkspace", e.svc.DeleteWorkspace(ctx, other))
	e.update(func(tx store.Tx) error {
		return tx.PutMember(&store.Member{Workspace: other, PersonID: alice, Role: store.RoleOwner, Created: t0})
	})
	wantErr(t, "approve for a deleted workspace", e.svc.DecideDevice(ctx, alice, d.UserCode, true, other), 404, "WorkspaceNotFound")
	// None of the refusals changed the grant.
	wantOAuth(t, "poll after refused approvals", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "authorization_pending")
	if g := e.grant(d.DeviceCode); g.State != store.DevicePending || g.Workspace != "" {
		t.Fatalf("grant after refused approvals: %+v", g)
	}
	e.approve(d, alice, ws)
	e.clk.Advance(5 * time.Second)
	pair, err := e.svc.PollDevice(ctx, cli, d.DeviceCode)
	noErr(t, "redeem", err)
	if pair.OrgID == nil || *pair.OrgID != ws {
		t.Fatalf("org_id %v, want %s", pair.OrgID, ws)
	}
	// A bound token: x-org-id may repeat the workspace, and naming another
	// one is 403.
	e.principal(pair.AccessToken, ws)
	second := e.workspace("second")
	e.update(func(tx store.Tx) error {
		return tx.PutMember(&store.Member{Workspace: second, PersonID: alice, Role: store.RoleOwner, Created: t0})
	})
	_, err = e.svc.Authenticate(ctx, pair.AccessToken, second)
	wantErr(t, "bound token with another x-org-id", err, 403, "Forbidden")
}

func TestRedemptionRechecksTheApprover(t *testing.T) {
	for name, change := range map[string]func(e *env, ws, person string){
		"removed from the workspace": func(e *env, ws, person string) {
			noErr(e.t, "RemoveMember", e.svc.RemoveMember(ctx, service.Operator(ws), person))
		},
		"disabled": func(e *env, ws, person string) {
			e.update(func(tx store.Tx) error {
				p, err := tx.Person(person)
				if err != nil {
					return err
				}
				p.Disabled = true
				return tx.PutPerson(p)
			})
		},
		"workspace deleted": func(e *env, ws, person string) {
			noErr(e.t, "DeleteWorkspace", e.svc.DeleteWorkspace(ctx, ws))
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ws := e.workspace("acme")
			e.person(ws, store.RoleOwner) // so that the member is not the last owner
			bob := e.person(ws, store.RoleMember)
			d := e.start(true)
			e.approve(d, bob, ws)
			change(e, ws, bob)
			e.clk.Advance(5 * time.Second)
			wantOAuth(t, "redeem", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "invalid_grant")
			e.clk.Advance(5 * time.Second)
			wantOAuth(t, "redeem again", err2(e.svc.PollDevice(ctx, cli, d.DeviceCode)), "invalid_grant")
			var fams []*store.TokenFamily
			e.view(func(tx store.Tx) (err error) {
				fams, err = tx.TokenFamilies(bob)
				return err
			})
			if len(fams) != 0 {
				t.Fatalf("a refused redemption created %d token families", len(fams))
			}
		})
	}
}

func TestRefreshRotation(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	alice := e.person(ws, store.RoleAdmin)
	p1 := e.signIn(alice, ws)
	fam := e.principal(p1.AccessToken, "").FamilyID

	e.clk.Advance(30 * time.Minute)
	p2, err := e.svc.Refresh(ctx, cli, p1.RefreshToken)
	noErr(t, "refresh", err)
	if p2.AccessToken == p1.AccessToken || p2.RefreshToken == p1.RefreshToken ||
		!strings.HasPrefix(p2.AccessToken, "ag_at_") || !strings.HasPrefix(p2.RefreshToken, "ag_rt_") {
		t.Fatalf("refresh did not rotate: %+v", p2)
	}
	if p2.OrgID == nil || *p2.OrgID != ws || p2.ExpiresIn != 3600 || p2.TokenType != "Bearer" {
		t.Fatalf("refreshed pair: %+v (org %v)", p2, p2.OrgID)
	}
	if p := e.principal(p2.AccessToken, ""); p.FamilyID != fam || p.Workspace != ws || p.PersonID != alice || p.Role != store.RoleAdmin {
		t.Fatalf("refreshed token's principal %+v, want family %s in %s", p, fam, ws)
	}

	// Refresh tokens are for the token endpoint only; access tokens are not
	// refresh tokens; unknown and malformed ones are invalid_grant.
	e.unauthorized("a refresh token as a bearer credential", p2.RefreshToken, "")
	wantOAuth(t, "an access token as a refresh token", err2(e.svc.Refresh(ctx, cli, p2.AccessToken)), "invalid_grant")
	wantOAuth(t, "a malformed refresh token", err2(e.svc.Refresh(ctx, cli, "ag_rt_nope")), "invalid_grant")
	wantOAuth(t, "an empty refresh token", err2(e.svc.Refresh(ctx, cli, "")), "invalid_grant")
	wantOAuth(t, "a forged refresh token", err2(e.svc.Refresh(ctx, cli, forge("ag_rt_", keyID(p2.RefreshToken), strings.Repeat("x", len(keySecret(p2.RefreshToken)))))), "invalid_grant")

	// Another client cannot use it — and that is not a reuse.
	wantOAuth(t, "refresh with another client_id", err2(e.svc.Refresh(ctx, "other-cli", p2.RefreshToken)), "invalid_grant")
	p3, err := e.svc.Refresh(ctx, cli, p2.RefreshToken)
	noErr(t, "refresh after another client's attempt", err)
	e.principal(p3.AccessToken, "")

	// Reusing the first refresh token revokes the whole sign-in: every
	// access token (the newest too) and every refresh token.
	wantOAuth(t, "reusing a spent refresh token", err2(e.svc.Refresh(ctx, cli, p1.RefreshToken)), "invalid_grant")
	for i, p := range []*service.TokenPair{p1, p2, p3} {
		e.unauthorized("access token "+string(rune('1'+i))+" after reuse", p.AccessToken, "")
		e.unauthorized("access token "+string(rune('1'+i))+" with x-org-id after reuse", p.AccessToken, ws)
	}
	wantOAuth(t, "the newest refresh token after reuse", err2(e.svc.Refresh(ctx, cli, p3.RefreshToken)), "invalid_grant")
	var f *store.TokenFamily
	e.view(func(tx store.Tx) (err error) {
		f, err = tx.TokenFamily(fam)
		return err
	})
	if f.RevokedAt == nil {
		t.Fatal("the family is not marked revoked")
	}
	// Another sign-in of the same person is untouched.
	other := e.signIn(alice, ws)
	e.principal(other.AccessToken, "")
	_, err = e.svc.Refresh(ctx, cli, other.RefreshToken)
	noErr(t, "refresh of another sign-in", err)
}

func TestRefreshUnboundKeepsNoBinding(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	alice := e.person(ws, store.RoleMember)
	p1 := e.signIn(alice, "")
	p2, err := e.svc.Refresh(ctx, cli, p1.RefreshToken)
	noErr(t, "refresh", err)
	if p2.OrgID != nil {
		t.Fatalf("refresh of an unbound sign-in answered org_id %q", *p2.OrgID)
	}
	_, err = e.svc.Authenticate(ctx, p2.AccessToken, "")
	wantErr(t, "unbound refreshed token without x-org-id", err, 400, "OrgRequired")
	e.principal(p2.AccessToken, ws)
}

func TestRefreshExpiry(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	alice := e.person(ws, store.RoleMember)
	p1 := e.signIn(alice, ws)
	e.clk.Advance(time.Hour)
	e.unauthorized("access token after 1 h", p1.AccessToken, "")
	p2, err := e.svc.Refresh(ctx, cli, p1.RefreshToken)
	noErr(t, "refresh after the access token expired", err)
	e.clk.Advance(service.RefreshTokenTTL)
	wantOAuth(t, "expired refresh token", err2(e.svc.Refresh(ctx, cli, p2.RefreshToken)), "invalid_grant")
}

func TestRefreshRechecksMembership(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	e.person(ws, store.RoleOwner)
	bob := e.person(ws, store.RoleMember)
	p1 := e.signIn(bob, ws)

	// The membership goes away behind the service's back (no revocation):
	// the refresh re-checks it.
	e.update(func(tx store.Tx) error { return tx.DeleteMember(ws, bob) })
	wantOAuth(t, "refresh after the membership went", err2(e.svc.Refresh(ctx, cli, p1.RefreshToken)), "invalid_grant")
	if _, err := e.svc.Authenticate(ctx, p1.AccessToken, ""); err == nil {
		t.Fatal("the access token still works for a person who is no longer a member")
	}

	// A disabled person cannot refresh either.
	carol := e.person(ws, store.RoleMember)
	p2 := e.signIn(carol, ws)
	e.update(func(tx store.Tx) error {
		p, err := tx.Person(carol)
		if err != nil {
			return err
		}
		p.Disabled = true
		return tx.PutPerson(p)
	})
	wantOAuth(t, "refresh by a disabled person", err2(e.svc.Refresh(ctx, cli, p2.RefreshToken)), "invalid_grant")
	e.unauthorized("access token of a disabled person", p2.AccessToken, "")
}

func TestRemoveMemberRevokesDeviceSignIns(t *testing.T) {
	e := newEnv(t)
	a := e.workspace("a")
	b := e.workspace("b")
	e.person(a, store.RoleOwner)
	bob := e.person(a, store.RoleMember, b, store.RoleMember)
	inA := e.signIn(bob, a)
	inA2 := e.signIn(bob, a)
	inB := e.signIn(bob, b)
	unbound := e.signIn(bob, "")
	e.principal(inA.AccessToken, "")

	noErr(t, "RemoveMember", e.svc.RemoveMember(ctx, service.Operator(a), bob))

	e.unauthorized("token bound to the workspace he left", inA.AccessToken, "")
	e.unauthorized("second token bound to the workspace he left", inA2.AccessToken, "")
	wantOAuth(t, "refresh of a sign-in bound to the workspace he left", err2(e.svc.Refresh(ctx, cli, inA.RefreshToken)), "invalid_grant")
	if p := e.principal(inB.AccessToken, ""); p.Workspace != b {
		t.Fatalf("token bound to the other workspace: %+v", p)
	}
	_, err := e.svc.Authenticate(ctx, unbound.AccessToken, a)
	wantErr(t, "unbound token naming the workspace he left", err, 403, "Forbidden")
	e.principal(unbound.AccessToken, b)
	_, err = e.svc.Refresh(ctx, cli, inB.RefreshToken)
	noErr(t, "refresh of the other workspace's sign-in", err)

	// Added back, the old sign-in stays revoked: he signs in again.
	e.update(func(tx store.Tx) error {
		return tx.PutMember(&store.Member{Workspace: a, PersonID: bob, Role: store.RoleMember, Created: t0})
	})
	e.unauthorized("revoked token after re-adding", inA.AccessToken, "")
}

// TestConcurrentRefresh races two refreshes with the same refresh token,
// round after round.
//
// Outcome (by design, RFC 9700 §4.14.2): exactly one of the two gets a new
// pair; the other presents a token that is already spent, which the server
// cannot tell from a thief replaying it, so it answers invalid_grant AND
// revokes the whole family — the winner's brand-new tokens die with it and
// the person signs in again. There is no grace window. The spend is one
// store transaction (Badger conflict detection plus retry), so both can
// never win (no forked family) and neither gets a server error.
func TestConcurrentRefresh(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	alice := e.person(ws, store.RoleMember)
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	for round := 0; round < rounds; round++ {
		p := e.signIn(alice, ws)
		var (
			wg      sync.WaitGroup
			barrier = make(chan struct{})
			pairs   [2]*service.TokenPair
			errs    [2]error
		)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-barrier
				pairs[i], errs[i] = e.svc.Refresh(ctx, cli, p.RefreshToken)
			}()
		}
		close(barrier)
		wg.Wait()
		won := -1
		for i := range 2 {
			if errs[i] == nil {
				if won >= 0 {
					t.Fatalf("round %d: both refreshes got a pair (forked family)", round)
				}
				won = i
				continue
			}
			var oe *service.OAuthError
			if !errors.As(errs[i], &oe) || oe.Code != "invalid_grant" || oe.Status != 400 {
				t.Fatalf("round %d: the losing refresh failed with %v, want invalid_grant", round, errs[i])
			}
		}
		if won < 0 {
			t.Fatalf("round %d: neither refresh got a pair: %v / %v", round, errs[0], errs[1])
		}
		// The loser was a reuse: the family is revoked, winner's pair included.
		e.unauthorized("the winner's new access token", pairs[won].AccessToken, "")
		e.unauthorized("the first access token", p.AccessToken, "")
		wantOAuth(t, "the winner's new refresh token", err2(e.svc.Refresh(ctx, cli, pairs[won].RefreshToken)), "invalid_grant")
	}
}

// TestConcurrentRedemption polls one approved code from several goroutines
// at once: the code is consumed atomically, so exactly one poll gets tokens
// and exactly one sign-in exists; the others get invalid_grant.
func TestConcurrentRedemption(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	alice := e.person(ws, store.RoleMember)
	for round := 0; round < 10; round++ {
		d := e.start(true)
		e.approve(d, alice, ws)
		const n = 4
		var (
			wg      sync.WaitGroup
			barrier = make(chan struct{})
			errs    [n]error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-barrier
				_, errs[i] = e.svc.PollDevice(ctx, cli, d.DeviceCode)
			}()
		}
		close(barrier)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			wantOAuth(t, "a losing redemption", err, "invalid_grant")
		}
		if won != 1 {
			t.Fatalf("round %d: %d redemptions got tokens, want exactly 1", round, won)
		}
	}
	var fams []*store.TokenFamily
	e.view(func(tx store.Tx) (err error) {
		fams, err = tx.TokenFamilies(alice)
		return err
	})
	if len(fams) != 10 {
		t.Fatalf("%d token families after 10 sign-ins, want 10", len(fams))
	}
}

func TestWebSessions(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	other := e.workspace("other")
	const password = "correct horse battery staple"
	alice, err := e.svc.CreatePerson(ctx, service.NewPerson{Email: "Alice@Example.com", Name: "Alice", Password: password, Workspace: ws, Role: store.RoleAdmin})
	noErr(t, "CreatePerson", err)

	_, err = e.svc.SignIn(ctx, "alice@example.com", "wrong password")
	wantErr(t, "sign-in with a wrong password", err, 401, "Unauthorized")
	_, err = e.svc.SignIn(ctx, "nobody@example.com", password)
	wantErr(t, "sign-in of an unknown email", err, 401, "Unauthorized")
	_, err = e.svc.SignIn(ctx, "alice@example.com", "")
	wantErr(t, "sign-in with no password", err, 401, "Unauthorized")

	s1, err := e.svc.SignIn(ctx, "ALICE@example.com", password)
	noErr(t, "sign-in", err)
	if s1.Person.ID != alice.ID || !strings.HasPrefix(s1.Token, "ag_ws_") || s1.FamilyID == "" {
		t.Fatalf("session %+v", s1)
	}
	s2, err := e.svc.SignIn(ctx, "alice@example.com", password)
	noErr(t, "second sign-in", err)

	got, err := e.svc.LookupSession(ctx, s1.Token)
	noErr(t, "LookupSession", err)
	if got.Person.ID != alice.ID || got.FamilyID != s1.FamilyID {
		t.Fatalf("LookupSession = %+v", got)
	}
	for name, tok := range map[string]string{
		"empty": "", "garbage": "ag_ws_nope", "an access token": e.token(alice.ID, ws),
		"forged": forge("ag_ws_", keyID(s1.Token), strings.Repeat("y", len(keySecret(s1.Token)))),
	} {
		_, err := e.svc.LookupSession(ctx, tok)
		wantErr(t, "LookupSession of "+name, err, 401, "Unauthorized")
	}
	// The cookie is not an API credential.
	e.unauthorized("a session cookie as a bearer credential", s1.Token, ws)

	// Acting in a workspace.
	wp, err := e.svc.WebPrincipal(ctx, got, ws)
	noErr(t, "WebPrincipal", err)
	if wp.Kind != service.KindPerson || wp.PersonID != alice.ID || wp.Role != store.RoleAdmin || wp.Workspace != ws {
		t.Fatalf("WebPrincipal = %+v", wp)
	}
	_, err = e.svc.WebPrincipal(ctx, got, other)
	wantErr(t, "WebPrincipal of a workspace she is not in", err, 403, "Forbidden")
	_, err = e.svc.WebPrincipal(ctx, got, "wrk_nope")
	wantErr(t, "WebPrincipal of an unknown workspace", err, 404, "WorkspaceNotFound")
	wsList, err := e.svc.WorkspacesOf(ctx, alice.ID)
	noErr(t, "WorkspacesOf", err)
	if len(wsList) != 1 || wsList[0].ID != ws || wsList[0].Role != store.RoleAdmin {
		t.Fatalf("WorkspacesOf = %+v", wsList)
	}

	// CSRF tokens: one per session, checked exactly.
	c1, c2 := e.svc.CSRFToken(s1), e.svc.CSRFToken(s2)
	if len(c1) < 32 || c1 == c2 || e.svc.CSRFToken(got) != c1 {
		t.Fatalf("CSRF tokens %q, %q", c1, c2)
	}
	if !e.svc.CheckCSRF(s1, c1) {
		t.Fatal("CheckCSRF refused the session's own token")
	}
	for name, tok := range map[string]string{"empty": "", "another session's": c2, "truncated": c1[:len(c1)-1], "extended": c1 + "0", "upper-cased": strings.ToUpper(c1)} {
		if tok == c1 {
			continue
		}
		if e.svc.CheckCSRF(s1, tok) {
			t.Errorf("CheckCSRF accepted %s token %q", name, tok)
		}
	}

	// Sign-out revokes at once; the other session lives on.
	noErr(t, "SignOut", e.svc.SignOut(ctx, s1))
	_, err = e.svc.LookupSession(ctx, s1.Token)
	wantErr(t, "LookupSession after sign-out", err, 401, "Unauthorized")
	if _, err := e.svc.LookupSession(ctx, s2.Token); err != nil {
		t.Fatalf("the other session died with the first: %v", err)
	}

	// Sessions expire, and die with a disabled person.
	e.clk.Advance(service.SessionTTL - time.Second)
	_, err = e.svc.LookupSession(ctx, s2.Token)
	noErr(t, "LookupSession just before expiry", err)
	s3, err := e.svc.SignIn(ctx, "alice@example.com", password)
	noErr(t, "third sign-in", err)
	e.clk.Advance(time.Second)
	_, err = e.svc.LookupSession(ctx, s2.Token)
	wantErr(t, "LookupSession after SessionTTL", err, 401, "Unauthorized")
	e.update(func(tx store.Tx) error {
		p, err := tx.Person(alice.ID)
		if err != nil {
			return err
		}
		p.Disabled = true
		return tx.PutPerson(p)
	})
	_, err = e.svc.LookupSession(ctx, s3.Token)
	wantErr(t, "LookupSession of a disabled person", err, 401, "Unauthorized")
	_, err = e.svc.SignIn(ctx, "alice@example.com", password)
	wantErr(t, "sign-in of a disabled person", err, 401, "Unauthorized")
}

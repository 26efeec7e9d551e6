package web_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/console/web"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// startDevice begins a device authorization as the CLI would.
func (e *env) startDevice(orgScope bool) *service.DeviceStart {
	e.t.Helper()
	d, err := e.svc.StartDevice(ctx, "agentgate-cli", orgScope, "https://console.example.com/device")
	if err != nil {
		e.t.Fatalf("StartDevice: %v", err)
	}
	return d
}

func oauthCode(err error) string {
	var oe *service.OAuthError
	if errors.As(err, &oe) {
		return oe.Code
	}
	return ""
}

// messy writes a user code the way a person might type it: lower case,
// with spaces and without the dash.
func messy(code string) string {
	c := strings.ToLower(strings.ReplaceAll(code, "-", ""))
	return c[:2] + " " + c[2:5] + " " + c[5:]
}

func TestDeviceNeedsSignInAndKeepsTheCode(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	d := e.startDevice(true)
	b := e.browser()
	path := "/device?user_code=" + url.QueryEscape(d.UserCode)
	p := b.get(path)
	wantStatus(t, "signed out", p, http.StatusSeeOther)
	next := p.location()
	if next != "/signin?next="+url.QueryEscape(path) {
		t.Fatalf("redirected to %q", next)
	}
	form := b.get(next)
	wantContains(t, "sign-in for a device", form, "Sign in to connect a device", `name="next" value="/device?user_code=`+d.UserCode+`"`)
	p = b.signIn(email, password, path)
	if p.location() != path {
		t.Fatalf("after sign-in: redirected to %q, want %q", p.location(), path)
	}
	wantContains(t, "device page", b.get(path), d.UserCode, "agentgate-cli")
}

func TestDevicePageShowsCodeAndClientBeforeApprove(t *testing.T) {
	e := newEnv(t)
	ws1 := e.workspace("Alpha")
	ws2 := e.workspace("Beta")
	personID, email := e.person(ws1, store.RoleMember, ws2, store.RoleAdmin)
	b, tok := e.signedIn(email)

	// No code: a form to type one, which GETs the same page.
	p := b.get("/device")
	wantStatus(t, "entry form", p, 200)
	wantContains(t, "entry form", p, `<form method="get" action="/device"`, `<label for="user_code">Code</label>`, `name="user_code"`)
	wantNotContains(t, "entry form", p, "Approve")

	d := e.startDevice(true)
	for _, typed := range []string{d.UserCode, messy(d.UserCode), strings.ReplaceAll(d.UserCode, "-", ""), strings.ToLower(d.UserCode)} {
		p = b.get("/device?user_code=" + url.QueryEscape(typed))
		wantStatus(t, "device page for "+typed, p, 200)
		code := strings.Index(p.body, `id="user-code">`+d.UserCode+`<`)
		client := strings.Index(p.body, `id="client-id">agentgate-cli<`)
		approve := strings.Index(p.body, `value="approve"`)
		if code < 0 || client < 0 || approve < 0 || code > approve || client > approve {
			t.Fatalf("%q: code at %d, client at %d, Approve at %d: the code and client must come first:\n%s", typed, code, client, approve, p.body)
		}
		wantContains(t, "device page", p, "Check that this code matches", "signs in agentgate CLI (<code>agentgate-cli</code>) as you",
			`type="radio" name="workspace" value="`+ws1+`"`, `name="workspace" value="`+ws2+`"`, "Alpha", "Beta",
			`value="deny"`, `name="user_code" value="`+d.UserCode+`"`)
	}

	// Approve without a workspace: the page again, with the service's message.
	p = b.post("/device", form(tok, "user_code", messy(d.UserCode), "action", "approve"))
	wantStatus(t, "no workspace", p, http.StatusBadRequest)
	wantContains(t, "no workspace", p, "choose a workspace", d.UserCode)
	// A workspace the person is not in.
	other := e.workspace("Gamma")
	p = b.post("/device", form(tok, "user_code", d.UserCode, "action", "approve", "workspace", other))
	wantStatus(t, "not a member", p, http.StatusForbidden)
	wantContains(t, "not a member", p, "not a member of this workspace")
	wantStatus(t, "bad action", b.post("/device", form(tok, "user_code", d.UserCode, "action", "maybe")), http.StatusBadRequest)

	if _, err := e.svc.PollDevice(ctx, "agentgate-cli", d.DeviceCode); oauthCode(err) != "authorization_pending" {
		t.Fatalf("poll before approval: %v", err)
	}
	e.clk.Advance(6e9)

	// Approve, binding Beta, with the code typed loosely.
	p = b.post("/device", form(tok, "user_code", messy(d.UserCode), "action", "approve", "workspace", ws2))
	wantStatus(t, "approve", p, 200)
	wantContains(t, "approved", p, "Device signed in", "You can return to your terminal", "Beta")
	pair, err := e.svc.PollDevice(ctx, "agentgate-cli", d.DeviceCode)
	if err != nil {
		t.Fatalf("poll after approval: %v", err)
	}
	if pair.OrgID == nil || *pair.OrgID != ws2 {
		t.Fatalf("org_id %v, want %s", pair.OrgID, ws2)
	}
	pr, err := e.svc.Authenticate(ctx, pair.AccessToken, "")
	if err != nil || pr.PersonID != personID || pr.Workspace != ws2 {
		t.Fatalf("the access token: %v %+v", err, pr)
	}
	// The code is spent.
	p = b.get("/device?user_code=" + d.UserCode)
	wantStatus(t, "spent code", p, http.StatusNotFound)
	wantContains(t, "spent code", p, "this code is not valid")
}

func TestDeviceWithoutOrgScope(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleMember)
	b, tok := e.signedIn(email)
	d := e.startDevice(false)
	p := b.get("/device?user_code=" + d.UserCode)
	wantNotContains(t, "no org scope", p, `name="workspace"`)
	wantStatus(t, "approve", b.post("/device", form(tok, "user_code", d.UserCode, "action", "approve")), 200)
	pair, err := e.svc.PollDevice(ctx, "agentgate-cli", d.DeviceCode)
	if err != nil || pair.OrgID != nil {
		t.Fatalf("poll: %v %+v", err, pair)
	}
}

func TestDeviceDeny(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	b, tok := e.signedIn(email)
	d := e.startDevice(true)
	// Deny needs no workspace.
	p := b.post("/device", form(tok, "user_code", d.UserCode, "action", "deny"))
	wantStatus(t, "deny", p, 200)
	wantContains(t, "denied", p, "Sign-in denied", "You can return to your terminal")
	if _, err := e.svc.PollDevice(ctx, "agentgate-cli", d.DeviceCode); oauthCode(err) != "access_denied" {
		t.Fatalf("poll after deny: %v, want access_denied", err)
	}
}

func TestDeviceWrongCodesAreLimited(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	b, tok := e.signedIn(email)
	d := e.startDevice(true)
	// Unknown, malformed and well-formed codes all count, on GET and POST.
	attempts := []struct {
		post bool
		code string
	}{{false, "BCDF-BCDF"}, {true, "QQQQ-QQQQ"}, {false, "nonsense"}, {true, "0000-0000"}, {false, "zzzz zzzz"}}
	if len(attempts) != web.CodeFailuresPerPerson {
		t.Fatalf("the test expects a limit of %d", len(attempts))
	}
	for _, a := range attempts {
		var p page
		if a.post {
			p = b.post("/device", form(tok, "user_code", a.code, "action", "approve", "workspace", ws))
		} else {
			p = b.get("/device?user_code=" + url.QueryEscape(a.code))
		}
		wantStatus(t, "wrong code "+a.code, p, http.StatusNotFound)
		wantContains(t, "wrong code", p, "this code is not valid", `name="user_code"`)
	}
	// Blocked: even the right code is not looked at.
	p := b.get("/device?user_code=" + d.UserCode)
	wantStatus(t, "blocked GET", p, http.StatusTooManyRequests)
	wantContains(t, "blocked", p, "too many wrong codes")
	wantNotContains(t, "blocked", p, d.UserCode)
	wantStatus(t, "blocked POST", b.post("/device", form(tok, "user_code", d.UserCode, "action", "approve", "workspace", ws)), http.StatusTooManyRequests)
	if _, err := e.svc.PollDevice(ctx, "agentgate-cli", d.DeviceCode); oauthCode(err) != "authorization_pending" {
		t.Fatalf("poll: %v", err)
	}
	// Someone else on another IP is not affected; the window passes.
	_, email2 := e.person(ws, store.RoleMember)
	b2, _ := e.signedIn(email2)
	b2.ip = "203.0.113.9"
	wantStatus(t, "another person", b2.get("/device?user_code="+d.UserCode), 200)
	e.clk.Advance(web.LimitWindow + 1e9)
	d2 := e.startDevice(true)
	wantStatus(t, "after the window", b.get("/device?user_code="+d2.UserCode), 200)
}

func TestDeviceWrongCodesLimitedPerIP(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	d := e.startDevice(true)
	var browsers []*browser
	for i := 0; i*web.CodeFailuresPerPerson < web.CodeFailuresPerIP; i++ {
		_, email := e.person(ws, store.RoleMember)
		b, _ := e.signedIn(email)
		b.ip = "198.51.100.20"
		for j := 0; j < web.CodeFailuresPerPerson-1; j++ { // each person stays under their own limit
			wantStatus(t, "wrong code", b.get("/device?user_code=BBBB-BBBB"), http.StatusNotFound)
		}
		browsers = append(browsers, b)
	}
	// Some people still have attempts left, but the IP has used its own.
	for i := 0; i < web.CodeFailuresPerIP-len(browsers)*(web.CodeFailuresPerPerson-1); i++ {
		wantStatus(t, "wrong code", browsers[i%len(browsers)].get("/device?user_code=CCCC-CCCC"), http.StatusNotFound)
	}
	wantStatus(t, "blocked IP", browsers[0].get("/device?user_code="+d.UserCode), http.StatusTooManyRequests)
	_, email := e.person(ws, store.RoleMember)
	fresh, _ := e.signedIn(email)
	fresh.ip = "198.51.100.20"
	wantStatus(t, "a fresh person on the blocked IP", fresh.get("/device?user_code="+d.UserCode), http.StatusTooManyRequests)
	fresh.ip = "198.51.100.21"
	wantStatus(t, "the same person elsewhere", fresh.get("/device?user_code="+d.UserCode), 200)
}

// Claude Code's sign-in on the verification page: the page names Claude
// Code, the address the sign-in started from and when, says so when that
// address is not this browser's, and binds a workspace the person picks.
func TestDevicePageForClaudeCode(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("Alpha")
	_, email := e.person(ws, store.RoleMember)
	d, err := e.svc.StartDeviceFor(ctx, service.DeviceRequest{ClientID: service.ClaudeCodeClient,
		VerificationURI: "https://console.example.com/device", RequestIP: "203.0.113.50"})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2*time.Minute + 10*time.Second)
	b, tok := e.signedIn(email)
	path := "/device?user_code=" + url.QueryEscape(d.UserCode)
	p := b.get(path)
	wantStatus(t, "device page", p, 200)
	wantContains(t, "device page", p, "Claude Code is asking to sign in", `id="client-name">Claude Code<`, `id="client-id">claude-code<`,
		`id="requested-at">`+t0.Format("2006-01-02 15:04")+` UTC<`, "(2 minutes ago)", `id="requested-from">203.0.113.50<`,
		"signs in Claude Code (<code>claude-code</code>) as you", `id="address-differs"`, "this browser connects from <span class=\"mono\">192.0.2.1<",
		`name="workspace" value="`+ws+`"`)
	// From the same address as the sign-in, no such note.
	b.ip = "203.0.113.50"
	p = b.get(path)
	wantContains(t, "same address", p, `id="requested-from">203.0.113.50<`)
	wantNotContains(t, "same address", p, `id="address-differs"`)

	p = b.post("/device", form(tok, "user_code", d.UserCode, "action", "approve"))
	wantStatus(t, "approve without a workspace", p, http.StatusBadRequest)
	p = b.post("/device", form(tok, "user_code", d.UserCode, "action", "approve", "workspace", ws))
	wantStatus(t, "approve", p, 200)
	wantContains(t, "approved", p, "the sign-in of Claude Code (<code>claude-code</code>)", "Alpha")
	e.clk.Advance(6 * time.Second)
	pair, err := e.svc.PollDevice(ctx, service.ClaudeCodeClient, d.DeviceCode)
	if err != nil || pair.OrgID == nil || *pair.OrgID != ws || pair.Email != email {
		t.Fatalf("poll after approval: %+v %v", pair, err)
	}
}

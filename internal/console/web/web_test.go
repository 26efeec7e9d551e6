package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/console/web"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func sessionCookieOf(t *testing.T, p page, name string) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s cookie set; Set-Cookie: %q", name, p.header.Values("Set-Cookie"))
	return nil
}

func TestSignIn(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("Acme <Research>")
	_, email := e.person(ws, store.RoleOwner)
	b := e.browser()

	signin := b.get("/signin")
	wantStatus(t, "GET /signin", signin, 200)
	wantContains(t, "sign-in page", signin, `<label for="email">Email</label>`, `<label for="password">Password</label>`, `autocomplete="current-password"`)

	// A wrong password and an unknown email get the same generic answer.
	bad := b.post("/signin", form(csrf(t, signin), "email", email, "password", "wrong password!"))
	wantStatus(t, "wrong password", bad, http.StatusUnauthorized)
	wantContains(t, "wrong password", bad, "The email or password is not correct.")
	unknown := b.post("/signin", form(csrf(t, bad), "email", "nobody@example.com", "password", password))
	wantStatus(t, "unknown email", unknown, http.StatusUnauthorized)
	wantContains(t, "unknown email", unknown, "The email or password is not correct.")
	if len(bad.header.Values("Set-Cookie")) != 0 && strings.Contains(strings.Join(bad.header.Values("Set-Cookie"), ";"), "ag_session=ag_") {
		t.Fatal("a failed sign-in set a session cookie")
	}

	// The right password (email in another case) signs in and sets the cookie.
	ok := b.post("/signin", form(csrf(t, unknown), "email", strings.ToUpper(email), "password", password))
	wantStatus(t, "good sign-in", ok, http.StatusSeeOther)
	if ok.location() != "/" {
		t.Fatalf("redirected to %q, want /", ok.location())
	}
	c := sessionCookieOf(t, ok, web.SessionCookiePlain)
	if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Secure || !strings.HasPrefix(c.Value, "ag_ws_") {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Lax, Path=/, not Secure on plain HTTP", c)
	}
	home := b.get("/")
	wantStatus(t, "home", home, 200)
	wantContains(t, "home", home, "Acme &lt;Research&gt;", "/w/"+ws, email)

	// Signed in, /signin goes on to next.
	if p := b.get("/signin?next=/device"); p.status != http.StatusSeeOther || p.location() != "/device" {
		t.Fatalf("GET /signin while signed in: %d → %q", p.status, p.location())
	}

	// Sign out revokes the session at once.
	cookie := c.Value
	out := b.post("/signout", form(csrf(t, home)))
	wantStatus(t, "sign out", out, http.StatusSeeOther)
	if _, err := e.svc.LookupSession(ctx, cookie); err == nil {
		t.Fatal("the session still works after sign-out")
	}
	if p := b.get("/"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/signin") {
		t.Fatalf("GET / after sign-out: %d → %q", p.status, p.location())
	}
}

func TestSignInNext(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	for next, want := range map[string]string{
		"/device?user_code=BCDF-GHJK": "/device?user_code=BCDF-GHJK",
		"/w/" + ws + "/members":       "/w/" + ws + "/members",
		"//evil.example/x":            "/",
		"/\\evil.example":             "/",
		"https://evil.example/":       "/",
		"javascript:alert(1)":         "/",
		"evil":                        "/",
	} {
		b := e.browser()
		p := b.signIn(email, password, next)
		wantStatus(t, "sign-in with next "+next, p, http.StatusSeeOther)
		if p.location() != want {
			t.Errorf("next=%q: redirected to %q, want %q", next, p.location(), want)
		}
	}
}

func TestSessionCookieOnHTTPS(t *testing.T) {
	e := newEnvTLS(t, true)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	b := e.browser()
	p := b.signIn(email, password, "")
	wantStatus(t, "sign-in over HTTPS", p, http.StatusSeeOther)
	c := sessionCookieOf(t, p, web.SessionCookieTLS)
	if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Domain != "" {
		t.Fatalf("cookie %+v: want __Host- rules (Secure, Path=/, no Domain), HttpOnly, SameSite=Lax", c)
	}
	wantStatus(t, "home over HTTPS", b.get("/"), 200)
}

// retryAfter reads a 429's Retry-After in whole seconds.
func retryAfter(t *testing.T, what string, p page) time.Duration {
	t.Helper()
	wantStatus(t, what, p, http.StatusTooManyRequests)
	wantContains(t, what, p, "Too many failed sign-ins")
	n, err := strconv.Atoi(p.header.Get("Retry-After"))
	if err != nil || n <= 0 {
		t.Fatalf("%s: Retry-After %q, want whole seconds", what, p.header.Get("Retry-After"))
	}
	return time.Duration(n) * time.Second
}

// guess posts a wrong password for email from b, waiting out any delay
// first; it returns the delays it met.
func guess(t *testing.T, b *browser, tok, email string) []time.Duration {
	t.Helper()
	var waits []time.Duration
	for {
		p := b.post("/signin", form(tok, "email", email, "password", "nope-nope-nope"))
		if p.status == http.StatusUnauthorized {
			return waits
		}
		d := retryAfter(t, "delayed guess", p)
		waits = append(waits, d)
		b.e.clk.Advance(d)
	}
}

// TestSignInLockOutAttempt: an attacker guessing one person's password from
// one address is delayed, more and more, and the person signs in from
// another address at once with the right password.
func TestSignInLockOutAttempt(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	attacker := e.browser()
	attacker.ip = "198.51.100.7"
	tok := csrf(t, attacker.get("/signin"))
	for i := 0; i < web.SignInFreePerAccountAddress; i++ {
		if w := guess(t, attacker, tok, email); len(w) != 0 {
			t.Fatalf("free failure %d delayed %v", i+1, w)
		}
	}
	// From now on every guess waits, and the waits grow: 1 s, 2 s, 4 s, …
	var last time.Duration
	for i := 0; i < 8; i++ {
		p := attacker.post("/signin", form(tok, "email", email, "password", password))
		d := retryAfter(t, "the attacker's address (right password too)", p)
		if want := time.Second << i; d != want {
			t.Fatalf("delay %d: %v, want %v", i+1, d, want)
		}
		if d <= last {
			t.Fatalf("the delay did not grow: %v after %v", d, last)
		}
		last = d
		e.clk.Advance(d)
		wantStatus(t, "guess after the delay", attacker.post("/signin", form(tok, "email", email, "password", "nope-nope-nope")), http.StatusUnauthorized)
	}
	// The person, elsewhere, signs in at once with the right password.
	owner := e.browser()
	owner.ip = "203.0.113.5"
	wantStatus(t, "the person from another address", owner.signIn(email, password, ""), http.StatusSeeOther)
	// The attacker's address is still delayed (the person's success does
	// not reset it), and its delay keeps its level.
	d := retryAfter(t, "the attacker after the person's sign-in", attacker.post("/signin", form(tok, "email", email, "password", "x")))
	if d != 256*time.Second {
		t.Fatalf("the attacker's delay %v, want 256s", d)
	}
	// Capped at 15 minutes.
	for i := 0; i < 4; i++ {
		guess(t, attacker, tok, email)
	}
	if d := retryAfter(t, "capped", attacker.post("/signin", form(tok, "email", email, "password", "x"))); d != web.SignInMaxDelay {
		t.Fatalf("capped delay %v, want %v", d, web.SignInMaxDelay)
	}
}

// TestSignInDistributedGuessing: wrong passwords for one account from many
// addresses make the account's delay grow (capped at 30 s); the person
// signs in from a new address within that bound, and at once from an
// address where they signed in before.
func TestSignInDistributedGuessing(t *testing.T) {
	if testing.Short() {
		t.Skip("many password checks")
	}
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	home := e.browser()
	home.ip = "203.0.113.5"
	wantStatus(t, "the person at home", home.signIn(email, password, ""), http.StatusSeeOther)

	var waits []time.Duration
	for i := 0; i < 25; i++ {
		b := e.browser()
		b.ip = "198.51.100." + strconv.Itoa(10+i)
		waits = append(waits, guess(t, b, csrf(t, b.get("/signin")), email)...)
	}
	if len(waits) == 0 {
		t.Fatal("25 addresses guessed without any delay")
	}
	for i, d := range waits {
		if d > web.SignInMaxAccountDelay {
			t.Fatalf("account delay %v over the cap %v", d, web.SignInMaxAccountDelay)
		}
		if i > 0 && d < waits[i-1] {
			t.Fatalf("the account delay shrank: %v", waits)
		}
	}
	// 10 free failures, then 1 s doubling every 5: the 11th to 15th
	// guesses wait 1 s, …, the 21st to 25th 4 s.
	if len(waits) != 15 || waits[0] != time.Second || waits[14] != 4*time.Second {
		t.Fatalf("the account delay did not grow from 1 s to 4 s: %v", waits)
	}
	// Right after the last guess, from a new address: at most the cap.
	traveller := e.browser()
	traveller.ip = "192.0.2.77"
	tok := csrf(t, traveller.get("/signin"))
	p := traveller.post("/signin", form(tok, "email", email, "password", password))
	if p.status == http.StatusTooManyRequests {
		d := retryAfter(t, "the person from a new address", p)
		if d > web.SignInMaxAccountDelay {
			t.Fatalf("the person waits %v, more than %v", d, web.SignInMaxAccountDelay)
		}
		e.clk.Advance(d)
		p = traveller.post("/signin", form(tok, "email", email, "password", password))
	}
	wantStatus(t, "the person from a new address", p, http.StatusSeeOther)
	// From home, where they signed in before: at once.
	b := e.browser()
	b.ip = "198.51.100.200"
	guess(t, b, csrf(t, b.get("/signin")), email)
	home = e.browser()
	home.ip = "203.0.113.5"
	wantStatus(t, "the person at home, at once", home.signIn(email, password, ""), http.StatusSeeOther)
}

// TestSignInDelayedPerAddress: one address guessing many emails is delayed
// after its free failures; another address is not.
func TestSignInDelayedPerAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("20 password checks")
	}
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	b := e.browser()
	b.ip = "198.51.100.7"
	tok := csrf(t, b.get("/signin"))
	for i := 0; i < web.SignInFreePerAddress; i++ {
		p := b.post("/signin", form(tok, "email", "guess"+strconv.Itoa(i)+"@example.com", "password", "nope-nope-nope"))
		wantStatus(t, "failure", p, http.StatusUnauthorized)
	}
	if d := retryAfter(t, "the spraying address", b.post("/signin", form(tok, "email", email, "password", password))); d != time.Second {
		t.Fatalf("first delay %v, want 1s", d)
	}
	b2 := e.browser()
	b2.ip = "198.51.100.8"
	wantStatus(t, "another address", b2.signIn(email, password, ""), http.StatusSeeOther)
	e.clk.Advance(time.Second)
	wantStatus(t, "after the delay", b.post("/signin", form(tok, "email", email, "password", password)), http.StatusSeeOther)
}

// TestSignInSuccessResets: a person's own typos cost nothing once they sign
// in: the count of that account at that address starts again.
func TestSignInSuccessResets(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	for round := 0; round < 2; round++ {
		b := e.browser()
		tok := csrf(t, b.get("/signin"))
		for i := 0; i < web.SignInFreePerAccountAddress-1; i++ {
			wantStatus(t, "typo", b.post("/signin", form(tok, "email", email, "password", "typo")), http.StatusUnauthorized)
		}
		wantStatus(t, "sign-in", b.signIn(email, password, ""), http.StatusSeeOther)
	}
}

func TestPagesRequireSignIn(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	b := e.browser()
	for _, path := range []string{"/", "/device", "/device?user_code=bcdf-ghjk", "/w/" + ws + "/service-accounts",
		"/w/" + ws + "/connections", "/w/" + ws + "/members", "/w/" + ws + "/budgets", "/w/" + ws} {
		p := b.get(path)
		if p.status != http.StatusSeeOther {
			t.Fatalf("GET %s signed out: %d, want 303", path, p.status)
		}
		want := "/signin"
		if path != "/" {
			want += "?next=" + url.QueryEscape(path)
		}
		if p.location() != want {
			t.Errorf("GET %s signed out: redirected to %q, want %q", path, p.location(), want)
		}
	}
	for _, path := range postRoutes(ws, "sa_x", "key_x", "conn_x", "usr_x") {
		p := b.post(path, form("anything", "name", "x"))
		if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/signin") {
			t.Errorf("POST %s signed out: %d → %q, want 303 to /signin", path, p.status, p.location())
		}
	}
	// A forged cookie is no session.
	b.client.Jar.SetCookies(mustURL(e.srv.URL), []*http.Cookie{{Name: web.SessionCookiePlain, Value: "ag_ws_forged"}})
	if p := b.get("/"); p.status != http.StatusSeeOther {
		t.Fatalf("GET / with a forged cookie: %d", p.status)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// postRoutes are every state-changing route.
func postRoutes(ws, sa, key, conn, member string) []string {
	w := "/w/" + ws
	return []string{"/signout", "/device", "/sign-ins/tfm_x/revoke", w + "/service-accounts", w + "/service-accounts/" + sa + "/delete",
		w + "/service-accounts/" + sa + "/keys", w + "/service-accounts/" + sa + "/keys/" + key + "/revoke",
		w + "/connections/" + conn + "/models", w + "/connections", w + "/connections/" + conn, w + "/connections/" + conn + "/models/save", w + "/policies",
		w + "/policies/pol_x/delete", w + "/claude-code", w + "/members", w + "/members/" + member + "/role",
		w + "/members/" + member + "/remove", w + "/budgets/" + member}
}

func TestCSRFRequiredOnEveryPost(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	owner, email := e.person(ws, store.RoleOwner)
	member, _ := e.person(ws, store.RoleMember)
	sa, err := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.svc.CreateKey(ctx, service.Operator(ws), sa.ID, service.NewKey{Name: "k", Permission: store.PermissionInference})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := e.svc.CreateConnection(ctx, service.Operator(ws), service.ConnectionInput{Name: "up", Kind: store.KindOpenAI,
		BaseURL: "https://api.example.com/v1", Credential: "sk-x", Models: map[string]service.ModelInput{"gpt-4o": {}}})
	if err != nil {
		t.Fatal(err)
	}
	b, good := e.signedIn(email)
	_ = owner
	fields := []string{"name", "x", "permission", "inference", "model", "gpt-4o", "enabled", "false", "email", "a@example.com",
		"role", "admin", "limit_usd", "5", "period", "daily", "user_code", "BCDF-GHJK", "action", "approve", "workspace", ws}
	for _, path := range postRoutes(ws, sa.ID, k.ID, conn.ID, member) {
		for name, tok := range map[string]string{"missing": "", "wrong": strings.Repeat("0", len(good)), "truncated": good[:len(good)-1]} {
			p := b.post(path, form(tok, fields...))
			if p.status != http.StatusForbidden {
				t.Fatalf("POST %s with a %s CSRF token: %d, want 403; body:\n%s", path, name, p.status, p.body)
			}
			wantContains(t, "POST "+path, p, "CSRF")
		}
		// A cross-site request is refused even with the token.
		p := b.do("POST", path, form(good, fields...), http.Header{"Sec-Fetch-Site": {"cross-site"}})
		wantStatus(t, "cross-site POST "+path, p, http.StatusForbidden)
	}
	// Nothing changed.
	if sas, _ := e.svc.ServiceAccounts(ctx, service.Operator(ws)); len(sas) != 1 {
		t.Fatalf("service accounts: %d, want 1", len(sas))
	}
	if keys, _ := e.svc.Keys(ctx, service.Operator(ws), sa.ID); len(keys) != 1 || keys[0].RevokedAt != nil {
		t.Fatal("the key changed")
	}
	if cv, _ := e.svc.Connection(ctx, service.Operator(ws), conn.ID); !cv.Models["gpt-4o"].Enabled {
		t.Fatal("the model was disabled")
	}
	if ms, _ := e.svc.Members(ctx, service.Operator(ws)); len(ms) != 2 {
		t.Fatalf("members: %d, want 2", len(ms))
	}
	// Still signed in (sign-out was refused too).
	wantStatus(t, "home", b.get("/"), 200)

	// The sign-in form has its own token, bound to a cookie.
	anon := e.browser()
	wantStatus(t, "sign-in without a token", anon.post("/signin", form("", "email", email, "password", password)), http.StatusForbidden)
	tok := csrf(t, anon.get("/signin"))
	other := e.browser() // no sign-in cookie
	wantStatus(t, "sign-in with another browser's token", other.post("/signin", form(tok, "email", email, "password", password)), http.StatusForbidden)
	wantStatus(t, "sign-in with its token", anon.post("/signin", form(tok, "email", email, "password", password)), http.StatusSeeOther)
}

var scriptTag = regexp.MustCompile(`<script[^>]*>`)

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	b, _ := e.signedIn(email)
	for _, path := range []string{"/signin", "/", "/device", "/w/" + ws + "/service-accounts", "/w/" + ws + "/connections",
		"/w/" + ws + "/members", "/w/" + ws + "/budgets", "/nope"} {
		p := b.get(path)
		if path == "/signin" {
			p = e.browser().get(path)
		}
		csp := p.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP allows inline code: %q", path, csp)
		}
		if p.header.Get("X-Content-Type-Options") != "nosniff" || p.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: headers %v", path, p.header)
		}
		for _, tag := range scriptTag.FindAllString(p.body, -1) {
			if !strings.Contains(tag, `src="/static/`) {
				t.Errorf("%s: inline or external script %s", path, tag)
			}
		}
		if strings.Contains(p.body, `src="http`) || strings.Contains(p.body, `href="http`) || strings.Contains(p.body, `href="//`) {
			t.Errorf("%s: an external resource", path)
		}
		if !strings.Contains(p.body, `name="viewport"`) {
			t.Errorf("%s: no viewport meta", path)
		}
	}
	if p := b.get("/nope"); p.status != 404 || !strings.Contains(p.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /nope: %d %s", p.status, p.header.Get("Content-Type"))
	}
	for path, ct := range map[string]string{"/static/app.css": "text/css", "/static/app.js": "javascript", "/static/favicon.svg": "image/svg+xml"} {
		p := e.browser().get(path)
		if p.status != 200 || !strings.Contains(p.header.Get("Content-Type"), ct) || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d %q", path, p.status, p.header.Get("Content-Type"))
		}
	}
	if p := e.browser().get("/static/"); p.status != 404 {
		t.Errorf("GET /static/: %d, want 404 (no listing)", p.status)
	}
}

func TestServiceAccountsAndKeys(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleAdmin)
	b, tok := e.signedIn(email)
	base := "/w/" + ws + "/service-accounts"

	p := b.post(base, form(tok, "name", "ci-bot"))
	wantStatus(t, "create service account", p, http.StatusSeeOther)
	list := b.get(p.location())
	wantStatus(t, "list", list, 200)
	wantContains(t, "list", list, "Service account created.", "ci-bot", "No keys yet.")
	sas, _ := e.svc.ServiceAccounts(ctx, service.Operator(ws))
	if len(sas) != 1 {
		t.Fatalf("%d service accounts", len(sas))
	}
	sa := sas[0]

	// Bad input shows the service's message on the page.
	p = b.post(base, form(tok, "name", "  "))
	wantStatus(t, "empty name", p, http.StatusBadRequest)
	wantContains(t, "empty name", p, "name is required")

	// Create a key: its value is on the result page, once.
	p = b.post(base+"/"+sa.ID+"/keys", form(tok, "name", "laptop", "permission", "inference", "expires", "2025-07-01"))
	wantStatus(t, "create key", p, http.StatusCreated)
	m := regexp.MustCompile(`id="key-value"[^>]*value="(ag_sk_[A-Za-z0-9_]+)"`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no key value in a read-only input:\n%s", p.body)
	}
	key := m[1]
	wantContains(t, "key page", p, "readonly", "only time it is shown", `data-copy="key-value"`, "Inference only")
	pr, err := e.svc.Authenticate(ctx, key, "")
	if err != nil || pr.Workspace != ws || pr.Permission != store.PermissionInference {
		t.Fatalf("the shown key does not authenticate: %v %+v", err, pr)
	}
	keys, _ := e.svc.Keys(ctx, service.Operator(ws), sa.ID)
	if len(keys) != 1 || keys[0].ExpiresAt == nil || !keys[0].ExpiresAt.Equal(time.Date(2025, 7, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("key expiry: %+v", keys[0].ExpiresAt)
	}
	// The listing shows the key id, never its value.
	list = b.get(base)
	wantContains(t, "list with a key", list, keys[0].ID, "laptop", "active")
	secret := key[len("ag_sk_")+13:]
	wantNotContains(t, "list with a key", list, key, secret[:20])

	// Bad expiry and bad permission.
	wantStatus(t, "bad expiry", b.post(base+"/"+sa.ID+"/keys", form(tok, "name", "x", "permission", "inference", "expires", "tomorrow")), http.StatusBadRequest)
	wantStatus(t, "past expiry", b.post(base+"/"+sa.ID+"/keys", form(tok, "name", "x", "permission", "inference", "expires", "2020-01-01")), http.StatusBadRequest)
	wantStatus(t, "bad permission", b.post(base+"/"+sa.ID+"/keys", form(tok, "name", "x", "permission", "root")), http.StatusBadRequest)

	// Revoke: the key stops working at once.
	p = b.post(base+"/"+sa.ID+"/keys/"+keys[0].ID+"/revoke", form(tok))
	wantStatus(t, "revoke", p, http.StatusSeeOther)
	if _, err := e.svc.Authenticate(ctx, key, ""); err == nil {
		t.Fatal("a revoked key still authenticates")
	}
	wantContains(t, "after revoke", b.get(p.location()), "Key revoked.", "revoked")

	// Delete the service account.
	p = b.post(base+"/"+sa.ID+"/delete", form(tok))
	wantStatus(t, "delete", p, http.StatusSeeOther)
	wantContains(t, "after delete", b.get(p.location()), "No service accounts yet.")
	wantStatus(t, "delete again", b.post(base+"/"+sa.ID+"/delete", form(tok)), http.StatusNotFound)
}

func TestUserInputIsEscaped(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	b, tok := e.signedIn(email)
	evil := `<script>alert("x")</script>`
	wantStatus(t, "create", b.post("/w/"+ws+"/service-accounts", form(tok, "name", evil)), http.StatusSeeOther)
	for _, path := range []string{"/w/" + ws + "/service-accounts", "/w/" + ws + "/budgets"} {
		p := b.get(path)
		wantContains(t, path, p, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;")
		wantNotContains(t, path, p, evil, "<script>alert")
	}
	// Echoed form input is escaped too.
	p := b.post("/w/"+ws+"/members", form(tok, "email", `"><img src=x onerror=alert(1)>@example.com`, "role", "member"))
	wantNotContains(t, "members echo", p, `"><img`)
	p = b.get("/device?user_code=" + url.QueryEscape(`"><b>x</b>`))
	wantNotContains(t, "device echo", p, `<b>x</b>`)
}

func TestMemberRoleRefused(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	memberID, email := e.person(ws, store.RoleMember)
	_, adminEmail := e.person(ws, store.RoleAdmin)
	ownerID, _ := e.person(ws, store.RoleOwner)
	sa, _ := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	b, tok := e.signedIn(email)
	w := "/w/" + ws

	for _, c := range []struct {
		path, msg string
		f         []string
	}{
		{w + "/service-accounts", "your role (member) cannot manage service accounts and keys", []string{"name", "x"}},
		{w + "/service-accounts/" + sa.ID + "/keys", "your role (member) cannot manage service accounts and keys", []string{"name", "x", "permission", "inference"}},
		{w + "/service-accounts/" + sa.ID + "/delete", "your role (member) cannot manage service accounts and keys", nil},
		{w + "/members", "your role (member) cannot manage members and roles", []string{"email", "a@example.com", "role", "member"}},
		{w + "/members/" + ownerID + "/role", "your role (member) cannot manage members and roles", []string{"role", "member"}},
		{w + "/members/" + ownerID + "/remove", "your role (member) cannot manage members and roles", nil},
		{w + "/budgets/" + memberID, "your role (member) cannot set budgets", []string{"limit_usd", "100", "period", "monthly"}},
		{w + "/connections/conn_x/models", "your role (member) cannot manage models", []string{"model", "m", "enabled", "false"}},
	} {
		p := b.post(c.path, form(tok, c.f...))
		wantStatus(t, "POST "+c.path, p, http.StatusForbidden)
		wantContains(t, "POST "+c.path, p, c.msg)
	}
	for path, msg := range map[string]string{
		w + "/service-accounts": "your role (member) cannot manage service accounts and keys",
		w + "/connections":      "your role (member) cannot set budgets, manage connections and pricing",
		w + "/members":          "your role (member) cannot manage members and roles",
	} {
		p := b.get(path)
		wantStatus(t, "GET "+path, p, http.StatusForbidden)
		wantContains(t, "GET "+path, p, msg)
	}
	// Budgets: a member reads their own, without the form.
	p := b.get(w + "/budgets")
	wantStatus(t, "member budgets", p, 200)
	wantContains(t, "member budgets", p, "Your budget", "cannot set budgets")
	wantNotContains(t, "member budgets", p, `name="limit_usd"`, "robot")

	// An admin may not touch an owner.
	ab, atok := e.signedIn(adminEmail)
	p = ab.post(w+"/members/"+ownerID+"/role", form(atok, "role", "member"))
	wantStatus(t, "admin demotes owner", p, http.StatusForbidden)
	wantContains(t, "admin demotes owner", p, "only an owner can add, change or remove an owner")

	// Not a member of another workspace.
	other := e.workspace("Other")
	p = b.get("/w/" + other + "/budgets")
	wantStatus(t, "other workspace", p, http.StatusForbidden)
	wantContains(t, "other workspace", p, "you are not a member of this workspace")
	wantStatus(t, "unknown workspace", b.get("/w/wrk_nope/budgets"), http.StatusNotFound)
}

func TestMembersPage(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	newID, newEmail := e.person()
	b, tok := e.signedIn(email)
	w := "/w/" + ws + "/members"

	p := b.post(w, form(tok, "email", strings.ToUpper(newEmail), "role", "member"))
	wantStatus(t, "add", p, http.StatusSeeOther)
	wantContains(t, "after add", b.get(p.location()), "Member added.", newEmail)
	wantStatus(t, "add again", b.post(w, form(tok, "email", newEmail, "role", "member")), http.StatusConflict)
	p = b.post(w, form(tok, "email", "ghost@example.com", "role", "member"))
	wantStatus(t, "add unknown", p, http.StatusNotFound)
	wantContains(t, "add unknown", p, "no person with this email")

	wantStatus(t, "set role", b.post(w+"/"+newID+"/role", form(tok, "role", "admin")), http.StatusSeeOther)
	if ms, _ := e.svc.Members(ctx, service.Operator(ws)); !hasRole(ms, newID, "admin") {
		t.Fatalf("role not changed: %+v", ms)
	}
	wantStatus(t, "bad role", b.post(w+"/"+newID+"/role", form(tok, "role", "god")), http.StatusBadRequest)
	wantStatus(t, "remove", b.post(w+"/"+newID+"/remove", form(tok)), http.StatusSeeOther)
	if ms, _ := e.svc.Members(ctx, service.Operator(ws)); len(ms) != 1 {
		t.Fatalf("members after remove: %+v", ms)
	}
}

func hasRole(ms []service.MemberView, id, role string) bool {
	for _, m := range ms {
		if m.MemberID == id {
			return m.Role == role
		}
	}
	return false
}

func TestConnectionsPage(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleAdmin)
	conn, err := e.svc.CreateConnection(ctx, service.Operator(ws), service.ConnectionInput{Name: "OpenAI prod", Kind: store.KindOpenAI,
		BaseURL: "https://api.example.com/v1", Credential: "sk-SECRET-credential",
		Models: map[string]service.ModelInput{"gpt-4o": {UpstreamID: "gpt-4o-2024-08-06", Pricing: &store.Pricing{Input: 2_500_000, Output: 10_000_000}}}})
	if err != nil {
		t.Fatal(err)
	}
	b, tok := e.signedIn(email)
	w := "/w/" + ws + "/connections"
	p := b.get(w)
	wantStatus(t, "connections", p, 200)
	wantContains(t, "connections", p, "OpenAI prod", conn.ID, "gpt-4o-2024-08-06", "$2.5", "$10", "enabled",
		"https://gw.example.com/custom/"+conn.ID)
	wantNotContains(t, "connections", p, "sk-SECRET")

	p = b.post(w+"/"+conn.ID+"/models", form(tok, "model", "gpt-4o", "enabled", "false"))
	wantStatus(t, "disable", p, http.StatusSeeOther)
	if cv, _ := e.svc.Connection(ctx, service.Operator(ws), conn.ID); cv.Models["gpt-4o"].Enabled {
		t.Fatal("still enabled")
	}
	wantContains(t, "after disable", b.get(p.location()), "Model disabled.", "disabled", `name="enabled" value="true"`)
	wantStatus(t, "enable", b.post(w+"/"+conn.ID+"/models", form(tok, "model", "gpt-4o", "enabled", "true")), http.StatusSeeOther)
	if cv, _ := e.svc.Connection(ctx, service.Operator(ws), conn.ID); !cv.Models["gpt-4o"].Enabled || cv.Models["gpt-4o"].UpstreamID != "gpt-4o-2024-08-06" {
		t.Fatalf("after enable: %+v", cv.Models["gpt-4o"])
	}
	wantStatus(t, "unknown model", b.post(w+"/"+conn.ID+"/models", form(tok, "model", "gpt-5", "enabled", "true")), http.StatusNotFound)
	if cv, _ := e.svc.Connection(ctx, service.Operator(ws), conn.ID); len(cv.Models) != 1 {
		t.Fatal("a model was added")
	}
	wantStatus(t, "bad enabled", b.post(w+"/"+conn.ID+"/models", form(tok, "model", "gpt-4o", "enabled", "maybe")), http.StatusBadRequest)
	wantStatus(t, "unknown connection", b.post(w+"/conn_nope/models", form(tok, "model", "gpt-4o", "enabled", "true")), http.StatusNotFound)
}

func TestBudgetsPage(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	ownerID, email := e.person(ws, store.RoleOwner)
	sa, _ := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	// Spend on three days of the last 30, and one before.
	for _, u := range []struct {
		ago  time.Duration
		cost money.Pico
	}{{0, 1_500_000_000_000}, {2 * time.Hour, 500_000_000_000}, {24 * time.Hour, 250_000_000_000}, {10 * 24 * time.Hour, 3_000_000_000_000}, {40 * 24 * time.Hour, 9_000_000_000_000}} {
		at := t0.Add(-u.ago)
		if err := e.svc.Ledger.Record(ctx, &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: ws, MemberID: sa.ID,
			MemberKind: store.MemberServiceAccount, Cost: u.cost, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	b, tok := e.signedIn(email)
	w := "/w/" + ws + "/budgets"
	p := b.get(w)
	wantStatus(t, "budgets", p, 200)
	wantContains(t, "budgets", p, "<svg", `class="chart"`, "Daily spend, last 30 days", "total <strong>$5.25</strong>", "robot", `name="limit_usd"`)
	if n := strings.Count(p.body, `<rect class="bar"`); n != 30 {
		t.Fatalf("%d bars, want 30", n)
	}
	wantContains(t, "bar titles", p, "Sun Jun 1: $2.00", "Sat May 31: $0.25", "Thu May 22: $3.00")

	p = b.post(w+"/"+sa.ID, form(tok, "limit_usd", "$12.50", "period", "monthly"))
	wantStatus(t, "set budget", p, http.StatusSeeOther)
	after := b.get(p.location())
	wantContains(t, "after set", after, "Budget saved.", "$12.50")
	bs, _ := e.svc.Budgets(ctx, service.Operator(ws))
	found := false
	for _, bv := range bs {
		if bv.MemberID == sa.ID {
			found = bv.LimitUSD != nil && *bv.LimitUSD == 12_500_000_000_000 && *bv.Period == "monthly"
		}
	}
	if !found {
		t.Fatalf("budget not set: %+v", bs)
	}
	wantStatus(t, "bad amount", b.post(w+"/"+sa.ID, form(tok, "limit_usd", "lots", "period", "monthly")), http.StatusBadRequest)
	wantStatus(t, "bad period", b.post(w+"/"+ownerID, form(tok, "limit_usd", "5", "period", "hourly")), http.StatusBadRequest)
	p = b.post(w+"/"+sa.ID, form(tok, "limit_usd", "", "period", "monthly"))
	wantStatus(t, "remove budget", p, http.StatusSeeOther)
	wantContains(t, "after remove", b.get(p.location()), "Budget removed.")
}

// TestBudgetsPageSessions: the budgets page shows the spend per agent
// session over the chart's 30 days, dearest first; each row links to the
// page filtered by that session; a member sees their own sessions only.
func TestBudgetsPageSessions(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, ownerEmail := e.person(ws, store.RoleOwner)
	memberID, memberEmail := e.person(ws, store.RoleMember)
	sa, _ := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	const odd = `ses B/<x>&y "z"` // printable ASCII that needs escaping in HTML and URLs
	for _, u := range []struct {
		ago     time.Duration
		member  string
		session string
		tokens  int64
		cost    money.Pico
	}{
		{1 * time.Hour, sa.ID, "ses_A", 100, 1_000_000_000_000},
		{2 * time.Hour, sa.ID, "ses_A", 50, 500_000_000_000},
		{3 * time.Hour, memberID, "ses_M", 10, 2_000_000_000_000},
		{24 * time.Hour, sa.ID, odd, 1_234_567, 250_000_000_000},
		{10 * 24 * time.Hour, sa.ID, "", 5, 3_000_000_000_000},
		{40 * 24 * time.Hour, sa.ID, "ses_old", 5, 9_000_000_000_000},
	} {
		at := t0.Add(-u.ago)
		kind := store.MemberServiceAccount
		if u.member == memberID {
			kind = store.MemberPerson
		}
		if err := e.svc.Ledger.Record(ctx, &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: ws, MemberID: u.member,
			MemberKind: kind, Cost: u.cost, Status: 200, Session: u.session, Tokens: store.Tokens{Input: u.tokens}}); err != nil {
			t.Fatal(err)
		}
	}
	w := "/w/" + ws + "/budgets"
	links := regexp.MustCompile(`href="(/w/[^"]*\?session=[^"]*)"`)
	rows := func(p page) []string { // the sessions of the table, in order
		t.Helper()
		var out []string
		for _, m := range links.FindAllStringSubmatch(p.body, -1) {
			u, err := url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
			if err != nil {
				t.Fatalf("bad link %q: %v", m[1], err)
			}
			if u.Path != w {
				t.Fatalf("link %q goes to %s, want %s", m[1], u.Path, w)
			}
			out = append(out, u.Query().Get("session"))
		}
		return out
	}

	b, _ := e.signedIn(ownerEmail)
	p := b.get(w)
	wantStatus(t, "budgets", p, 200)
	wantContains(t, "budgets", p, "Spend per agent session", "total <strong>$6.75</strong>",
		`<td class="num" data-label="Requests">2</td>`, `<td class="num" data-label="Tokens">150</td>`, "$1.50", "1,234,567", "2025-06-01 09:00 UTC",
		"ses B/&lt;x&gt;&amp;y &#34;z&#34;")
	wantNotContains(t, "budgets", p, "ses_old", `<x>`)
	if got := rows(p); strings.Join(got, "|") != strings.Join([]string{"ses_M", "ses_A", odd}, "|") {
		t.Fatalf("session rows %q, want ses_M, ses_A, the odd one (dearest first)", got)
	}

	// Each row's link shows that session only: chart, total and table.
	for _, c := range []struct{ session, total string }{{"ses_A", "$1.50"}, {odd, "$0.25"}, {"ses_M", "$2.00"}} {
		p := b.get(w + "?session=" + url.QueryEscape(c.session))
		wantStatus(t, "filtered by "+c.session, p, 200)
		wantContains(t, "filtered by "+c.session, p, "Showing the agent session", "total <strong>"+c.total+"</strong>", `href="`+w+`">Show every session`)
		if got := rows(p); len(got) != 1 || got[0] != c.session {
			t.Errorf("filtered by %q: rows %q", c.session, got)
		}
	}
	p = b.get(w + "?session=ses_none")
	wantContains(t, "unknown session", p, "total <strong>$0.00</strong>", "No agent sessions in the last 30 days.")

	// A member sees their own session, not the service account's.
	mb, _ := e.signedIn(memberEmail)
	p = mb.get(w)
	wantStatus(t, "member budgets", p, 200)
	wantContains(t, "member budgets", p, "Spend per agent session", "your requests", "total <strong>$2.00</strong>")
	if got := rows(p); len(got) != 1 || got[0] != "ses_M" {
		t.Fatalf("member sees sessions %q, want only ses_M", got)
	}
	wantNotContains(t, "member budgets", p, "ses_A", "ses B")
	p = mb.get(w + "?session=ses_A")
	wantStatus(t, "member filters by another's session", p, 200)
	wantContains(t, "member filters by another's session", p, "total <strong>$0.00</strong>", "No agent sessions in the last 30 days.")
	if got := rows(p); len(got) != 0 {
		t.Fatalf("member sees rows %q of another member's session", got)
	}
}

// TestBudgetsPageSessionsTopN: the table lists the dearest sessions only
// and says how many there were.
func TestBudgetsPageSessionsTopN(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	sa, _ := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	for i := range 27 {
		at := t0.Add(-time.Duration(i+1) * time.Minute)
		if err := e.svc.Ledger.Record(ctx, &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: ws, MemberID: sa.ID,
			MemberKind: store.MemberServiceAccount, Cost: money.Pico(i+1) * 1_000_000_000_000, Status: 200, Session: fmt.Sprintf("ses_%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := e.signedIn(email)
	p := b.get("/w/" + ws + "/budgets")
	wantContains(t, "budgets", p, "The 25 dearest of 27 sessions are shown.", "?session=ses_26", "?session=ses_02")
	wantNotContains(t, "budgets", p, "?session=ses_01", "?session=ses_00")
	if i, j := strings.Index(p.body, "?session=ses_26"), strings.Index(p.body, "?session=ses_25"); i < 0 || j < i {
		t.Fatal("sessions are not dearest first")
	}
}

// The Connections page adds a connection and adds and edits its models:
// prices, limits, capabilities; bad values are refused with the reason.
func TestConnectionsPageCreatesAndEdits(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleAdmin)
	b, tok := e.signedIn(email)
	w := "/w/" + ws + "/connections"
	p := b.post(w, form(tok, "name", "Claude", "kind", "anthropic", "base_url", "https://api.anthropic.com/v1", "credential", "sk-ant-SECRET-web"))
	wantStatus(t, "create connection", p, http.StatusSeeOther)
	cs, _ := e.svc.Connections(ctx, service.Operator(ws))
	if len(cs) != 1 || cs[0].Kind != "anthropic" || cs[0].Name != "Claude" {
		t.Fatalf("connections %+v", cs)
	}
	conn := cs[0].ID
	p = b.get(p.location())
	wantContains(t, "after create", p, "Connection added.", conn, "Add a model to Claude")
	wantNotContains(t, "after create", p, "sk-ant-SECRET")

	save := w + "/" + conn + "/models/save"
	p = b.post(save, form(tok, "model", "claude-sonnet", "name", "Sonnet", "upstream_id", "claude-sonnet-4-5", "price_input", "3", "price_output", "15",
		"price_cache_read", "0.3", "limit_context", "200,000", "limit_output", "64000", "capabilities", "1", "tool_call", "true", "reasoning", "true",
		"temperature", "true", "input", "text", "input", "image"))
	wantStatus(t, "add model", p, http.StatusSeeOther)
	cv, _ := e.svc.Connection(ctx, service.Operator(ws), conn)
	m := cv.Models["claude-sonnet"]
	if c, o := m.Limits(); c != 200000 || o != 64000 || m.Pricing.Input != 3*money.Scale || m.Pricing.CacheRead == nil || *m.Pricing.CacheRead != 300_000 ||
		!m.Caps().Reasoning || m.Caps().Attachment || len(m.Caps().Input) != 2 || m.UpstreamID != "claude-sonnet-4-5" || !m.Enabled {
		t.Fatalf("model %+v caps %+v", m, m.Caps())
	}
	p = b.get(w)
	wantContains(t, "listed", p, "claude-sonnet", "200000", "64000", "tools · reasoning · temperature · in: text, image", "Edit <code>claude-sonnet</code>")
	// Editing one field keeps the others.
	wantStatus(t, "edit", b.post(save, form(tok, "model", "claude-sonnet", "price_output", "16")), http.StatusSeeOther)
	cv, _ = e.svc.Connection(ctx, service.Operator(ws), conn)
	if m := cv.Models["claude-sonnet"]; m.Pricing.Output != 16*money.Scale || m.Pricing.Input != 3*money.Scale || !m.Caps().Reasoning || m.MaxOutputTokens != 64000 {
		t.Fatalf("after editing the output price: %+v", m)
	}
	for _, bad := range [][]string{
		{"limit_output", "-5"}, {"limit_context", "lots"}, {"limit_context", "1000", "limit_output", "2000"},
		{"price_input", "-1"}, {"price_input", "free"}, {"capabilities", "1", "input", "smell"},
	} {
		p := b.post(save, form(tok, append([]string{"model", "claude-sonnet"}, bad...)...))
		wantStatus(t, "bad "+bad[0], p, http.StatusBadRequest)
	}
	wantStatus(t, "bad kind", b.post(w, form(tok, "name", "x", "kind", "nope", "base_url", "https://x", "credential", "k")), http.StatusBadRequest)
	// A member can do neither.
	_, memberEmail := e.person(ws, store.RoleMember)
	mb, mtok := e.signedIn(memberEmail)
	wantStatus(t, "member adds a model", mb.post(save, form(mtok, "model", "x")), http.StatusForbidden)
	wantStatus(t, "member adds a connection", mb.post(w, form(mtok, "name", "x", "kind", "openai", "base_url", "https://x", "credential", "k")), http.StatusForbidden)
}

func TestPoliciesPage(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	sa, _ := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	b, tok := e.signedIn(email)
	w := "/w/" + ws + "/policies"
	wantContains(t, "empty", b.get(w), "No policies", "Add a policy")
	p := b.post(w, form(tok, "name", "CI limits", "effect", "limit", "models", "gpt-* claude-*", "service_accounts", sa.ID, "per", "key",
		"requests_per_minute", "60", "tokens_per_minute", "100,000"))
	wantStatus(t, "create limit", p, http.StatusSeeOther)
	p = b.post(w, form(tok, "name", "No opus", "effect", "deny", "models", "claude-opus-*", "roles", "member"))
	wantStatus(t, "create deny", p, http.StatusSeeOther)
	list, _ := e.svc.Policies(ctx, service.Operator(ws))
	if len(list) != 2 {
		t.Fatalf("policies %+v", list)
	}
	var lim *store.Policy
	for _, p := range list {
		if p.Effect == "limit" {
			lim = p
		}
	}
	if lim == nil || lim.TokensPerMinute != 100000 || lim.RequestsPerMinute != 60 || len(lim.Models) != 2 || lim.ServiceAccounts[0] != sa.ID {
		t.Fatalf("limit policy %+v", lim)
	}
	page := b.get(p.location())
	wantContains(t, "listed", page, "Policy added.", "CI limits", "60 requests, 100000 tokens a minute per key", "No opus", "members", "<code>claude-opus-*</code>")
	for _, bad := range [][]string{
		{"name", "x", "effect", "limit", "models", "*", "requests_per_minute", "5"},
		{"name", "x", "effect", "limit", "models", "*", "per", "key", "requests_per_minute", "many"},
		{"name", "x", "effect", "deny", "models", ""},
		{"name", "x", "effect", "deny", "models", "*", "service_accounts", "sa_nope"},
		{"name", "<script>alert(1)</script>", "effect", "sometimes", "models", "*"},
	} {
		p := b.post(w, form(tok, bad...))
		wantStatus(t, "bad policy "+strings.Join(bad, " "), p, http.StatusBadRequest)
		wantNotContains(t, "bad policy echo", p, "<script>alert(1)</script>")
	}
	wantStatus(t, "delete", b.post(w+"/"+lim.ID+"/delete", form(tok)), http.StatusSeeOther)
	if list, _ := e.svc.Policies(ctx, service.Operator(ws)); len(list) != 1 {
		t.Fatalf("after delete: %d policies", len(list))
	}
	wantStatus(t, "delete unknown", b.post(w+"/pol_nope/delete", form(tok)), http.StatusNotFound)
	_, memberEmail := e.person(ws, store.RoleMember)
	mb, mtok := e.signedIn(memberEmail)
	wantStatus(t, "member adds a policy", mb.post(w, form(mtok, "name", "x", "effect", "deny", "models", "*")), http.StatusForbidden)
	wantNotContains(t, "member's nav", mb.get("/w/"+ws+"/budgets"), `/policies"`)
}

// The home page lists the person's sign-ins and revokes one at once.
func TestSignInsOnHome(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	person, email := e.person(ws, store.RoleMember)
	cli, err := e.svc.IssuePersonToken(ctx, person, ws, "opencode-cli")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.IssuePersonToken(ctx, person, ws, service.ClaudeCodeClient); err != nil {
		t.Fatal(err)
	}
	b, tok := e.signedIn(email)
	p := b.get("/")
	wantContains(t, "home", p, "Your sign-ins", "OpenCode <code>opencode-cli</code>", "Claude Code <code>claude-code</code>", "this browser",
		"/sign-ins/"+cli.FamilyID+"/revoke")
	p = b.post("/sign-ins/"+cli.FamilyID+"/revoke", form(tok))
	wantStatus(t, "revoke", p, http.StatusSeeOther)
	if _, err := e.svc.Authenticate(ctx, cli.AccessToken, ""); err == nil {
		t.Fatal("the revoked CLI sign-in still authenticates")
	}
	wantContains(t, "after revoke", b.get(p.location()), "Sign-in revoked.")
	wantNotContains(t, "after revoke", b.get("/"), "opencode-cli")
	// Another person's sign-in cannot be revoked from here.
	other, _ := e.person(ws, store.RoleOwner)
	theirs, _ := e.svc.IssuePersonToken(ctx, other, ws, "agentgate-cli")
	wantStatus(t, "another's", b.post("/sign-ins/"+theirs.FamilyID+"/revoke", form(tok)), http.StatusNotFound)
	if _, err := e.svc.Authenticate(ctx, theirs.AccessToken, ""); err != nil {
		t.Fatalf("another's sign-in was revoked: %v", err)
	}
}

// The service account of an instance server is marked as the instance's
// on the service-accounts page, with what deleting it does.
func TestInstanceServiceAccountBadge(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, email := e.person(ws, store.RoleOwner)
	b, _ := e.signedIn(email)
	if _, err := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "ci-bot"); err != nil {
		t.Fatal(err)
	}
	im, err := e.svc.EnsureInstanceMember(ctx, ws, "default")
	if err != nil {
		t.Fatal(err)
	}
	p := b.get("/w/" + ws + "/service-accounts")
	wantStatus(t, "list", p, 200)
	wantContains(t, "list", p, im.Account.ID, `instance default <span class="badge">instance</span>`, "<code>default</code>",
		"until the server&rsquo;s config is reloaded")
	if strings.Count(p.body, `<span class="badge">instance</span>`) != 1 {
		t.Fatalf("the badge is not on the instance's account only:\n%s", p.body)
	}
}

// TestClaudeCodePage: the owner edits the workspace's Claude Code settings
// in a form (CSRF checked); a refused document shows why, keeps the text
// and changes nothing; others read it; the history says who and when.
func TestClaudeCodePage(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	owner, email := e.person(ws, store.RoleOwner)
	b, tok := e.signedIn(email)
	w := "/w/" + ws + "/claude-code"
	p := b.get(w)
	wantStatus(t, "the page", p, http.StatusOK)
	wantContains(t, "the page", p, "<h1>Claude Code</h1>", `name="settings"`, "none yet", `aria-current="page">Claude Code`)

	// Without the CSRF token: refused.
	wantStatus(t, "no csrf", b.post(w, form("", "settings", `{}`)), http.StatusForbidden)
	// A refused document: 400, the reason, the text kept (escaped).
	bad := `{"hooks": {"PreToolUse": []}, "env": {"NODE_OPTIONS": "--require /tmp/<evil>.js"}}`
	p = b.post(w, form(tok, "settings", bad))
	wantStatus(t, "a refused document", p, http.StatusBadRequest)
	wantContains(t, "a refused document", p, "hooks (runs commands)", "env.NODE_OPTIONS (runs code)", "/tmp/&lt;evil&gt;.js")
	wantNotContains(t, "a refused document", p, "<evil>")
	p = b.post(w, form(tok, "settings", `["not", "an", "object"]`))
	wantStatus(t, "not an object", p, http.StatusBadRequest)
	wantContains(t, "not an object", p, "must be a JSON object")

	p = b.post(w, form(tok, "settings", `{"permissions": {"allow": ["Bash(npm run *)"], "deny": ["WebFetch", "mcp__github__push"]}}`))
	wantStatus(t, "save", p, http.StatusSeeOther)
	p = b.get(p.location())
	wantContains(t, "saved", p, "Claude Code settings saved.", "Bash(npm run *)", `&#34;npm run *&#34;: &#34;allow&#34;`,
		"mcp__github__push", "MCP tools have no OpenCode permission rule", "History", "by "+email)
	v, _ := e.svc.ClaudeCodeSettings(ctx, service.Operator(ws))
	if v.Version != 1 || v.UpdatedBy != owner {
		t.Fatalf("after the form: %+v", v)
	}

	// A member reads it, without the form or the history.
	_, memberEmail := e.person(ws, store.RoleMember)
	mb, mtok := e.signedIn(memberEmail)
	p = mb.get(w)
	wantStatus(t, "member's page", p, http.StatusOK)
	wantContains(t, "member's page", p, "Only an owner changes it.", "Bash(npm run *)")
	wantNotContains(t, "member's page", p, `name="settings"`, "History")
	wantStatus(t, "member's edit", mb.post(w, form(mtok, "settings", `{}`)), http.StatusForbidden)
	// An admin may not either.
	_, adminEmail := e.person(ws, store.RoleAdmin)
	ab, atok := e.signedIn(adminEmail)
	wantStatus(t, "admin's edit", ab.post(w, form(atok, "settings", `{}`)), http.StatusForbidden)
	if v, _ := e.svc.ClaudeCodeSettings(ctx, service.Operator(ws)); v.Version != 1 {
		t.Fatalf("refused edits changed the document: %+v", v)
	}

	// Declared in the Caddyfile: shown, not editable.
	if _, err := e.svc.ReconcileClaudeCodeSettings(ctx, []service.DeclaredClaudeCode{{Workspace: ws, Settings: []byte(`{"model": "claude-x"}`)}}); err != nil {
		t.Fatal(err)
	}
	p = b.get(w)
	wantContains(t, "declared", p, "Declared in the Caddyfile", "Caddyfile</span>", "claude-x")
	wantNotContains(t, "declared", p, `name="settings"`)
	wantStatus(t, "declared edit", b.post(w, form(tok, "settings", `{}`)), http.StatusConflict)
}

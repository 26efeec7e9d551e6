package web_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/console/web"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

// password is every test person's password; its argon2id hash is made once.
const password = "correct horse battery staple"

var passwordHash = sync.OnceValue(func() string {
	h, err := secrets.HashPassword(password)
	if err != nil {
		panic(err)
	}
	return h
})

// env is the web interface over a real Service and Badger store, served by
// httptest, with a fake clock shared by the service and the rate limiters.
type env struct {
	t   *testing.T
	svc *service.Service
	st  store.Store
	clk *clock.Fake
	srv *httptest.Server
	ip  string // the client IP the limiters see (header X-Test-IP overrides)
}

func newEnv(t *testing.T) *env {
	return newEnvTLS(t, false)
}

func newEnvTLS(t *testing.T, tls bool) *env {
	t.Helper()
	te := testenv.New(t, t0)
	clk := te.Clock
	e := &env{t: t, st: te.Store, clk: clk, svc: te.Service}
	h := web.New(web.Options{
		Service:      func(context.Context) (*service.Service, error) { return e.svc, nil },
		Clock:        clk,
		InferenceURL: "https://gw.example.com",
		ClientIP: func(r *http.Request) string {
			if ip := r.Header.Get("X-Test-IP"); ip != "" {
				return ip
			}
			return "192.0.2.1"
		},
	})
	if tls {
		e.srv = httptest.NewTLSServer(h)
	} else {
		e.srv = httptest.NewServer(h)
	}
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) workspace(name string) string {
	e.t.Helper()
	w, err := e.svc.CreateWorkspace(ctx, name)
	if err != nil {
		e.t.Fatalf("CreateWorkspace: %v", err)
	}
	return w.ID
}

// person writes a person with the test password straight into the store
// and makes it a member of each workspace given as ws, role pairs. It
// returns the id and the email.
func (e *env) person(wsRoles ...string) (string, string) {
	e.t.Helper()
	id := secrets.NewID("usr_")
	email := strings.ToLower(id) + "@example.com"
	p := &store.Person{ID: id, Email: email, Name: "Person " + id[4:10], PasswordHash: passwordHash(), Created: t0}
	err := e.st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutPerson(p); err != nil {
			return err
		}
		for i := 0; i+1 < len(wsRoles); i += 2 {
			if err := tx.PutMember(&store.Member{Workspace: wsRoles[i], PersonID: id, Role: wsRoles[i+1], Created: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("person: %v", err)
	}
	return id, email
}

// browser is a cookie-keeping client that does not follow redirects.
type browser struct {
	e      *env
	client *http.Client
	ip     string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{e: e, client: &c}
}

// page is an answer.
type page struct {
	status int
	header http.Header
	body   string
}

func (p page) location() string { return p.header.Get("Location") }

func (b *browser) do(method, path string, form url.Values, hdr http.Header) page {
	b.e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.e.srv.URL+path, body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.ip != "" {
		req.Header.Set("X-Test-IP", b.ip)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := b.client.Do(req)
	if err != nil {
		b.e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	return page{status: res.StatusCode, header: res.Header, body: string(raw)}
}

func (b *browser) get(path string) page { b.e.t.Helper(); return b.do("GET", path, nil, nil) }

func (b *browser) post(path string, form url.Values) page {
	b.e.t.Helper()
	return b.do("POST", path, form, nil)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]*)"`)

// csrf is the CSRF token of a page's forms.
func csrf(t *testing.T, p page) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no csrf field in the page (%d):\n%s", p.status, p.body)
	}
	return html.UnescapeString(m[1])
}

// signIn signs the browser in through the sign-in form and returns where
// it was sent.
func (b *browser) signIn(email, pw, next string) page {
	b.e.t.Helper()
	path := "/signin"
	if next != "" {
		path += "?next=" + url.QueryEscape(next)
	}
	form := b.get(path)
	if form.status != 200 {
		b.e.t.Fatalf("GET %s: %d", path, form.status)
	}
	v := url.Values{"csrf": {csrf(b.e.t, form)}, "email": {email}, "password": {pw}}
	if next != "" {
		v.Set("next", next)
	}
	return b.post("/signin", v)
}

// signedIn returns a browser signed in as email, and its CSRF token.
func (e *env) signedIn(email string) (*browser, string) {
	e.t.Helper()
	b := e.browser()
	if p := b.signIn(email, password, ""); p.status != http.StatusSeeOther {
		e.t.Fatalf("sign-in of %s: %d %s", email, p.status, p.body)
	}
	home := b.get("/")
	if home.status != 200 {
		e.t.Fatalf("GET / after sign-in: %d", home.status)
	}
	return b, csrf(e.t, home)
}

func wantStatus(t *testing.T, what string, p page, status int) {
	t.Helper()
	if p.status != status {
		t.Fatalf("%s: status %d, want %d; body:\n%s", what, p.status, status, p.body)
	}
}

func wantContains(t *testing.T, what string, p page, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(p.body, s) {
			t.Fatalf("%s: the page does not contain %q; body:\n%s", what, s, p.body)
		}
	}
}

func wantNotContains(t *testing.T, what string, p page, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(p.body, s) {
			t.Fatalf("%s: the page contains %q; body:\n%s", what, s, p.body)
		}
	}
}

func form(csrf string, kv ...string) url.Values {
	v := url.Values{}
	if csrf != "" {
		v.Set("csrf", csrf)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

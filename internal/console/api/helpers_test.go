package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/console/api"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

// env is the Console API over a real Service and Badger store, served by
// httptest.
type env struct {
	t   *testing.T
	svc *service.Service
	st  store.Store
	clk *clock.Fake
	srv *httptest.Server
}

func newEnv(t *testing.T, opts ...func(*api.Options)) *env {
	t.Helper()
	te := testenv.New(t, t0)
	clk := te.Clock
	e := &env{t: t, st: te.Store, clk: clk, svc: te.Service}
	o := api.Options{Service: func(context.Context) (*service.Service, error) { return e.svc, nil }, InferenceURL: "https://gw.example.com"}
	for _, f := range opts {
		f(&o)
	}
	e.srv = httptest.NewServer(api.New(o))
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

// person writes a person straight into the store (argon2id is slow under
// -race) and makes it a member of each workspace given as ws, role pairs.
func (e *env) person(wsRoles ...string) string {
	e.t.Helper()
	id := secrets.NewID("usr_")
	p := &store.Person{ID: id, Email: strings.ToLower(id) + "@example.com", Name: "Person " + id, PasswordHash: "x", Created: t0}
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
	return id
}

func (e *env) token(personID, ws string) string {
	e.t.Helper()
	tok, err := e.svc.IssuePersonToken(ctx, personID, ws, "test")
	if err != nil {
		e.t.Fatalf("IssuePersonToken: %v", err)
	}
	return tok.AccessToken
}

func (e *env) serviceAccount(ws string) string {
	e.t.Helper()
	sa, err := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	if err != nil {
		e.t.Fatalf("CreateServiceAccount: %v", err)
	}
	return sa.ID
}

func (e *env) key(ws, sa, perm string) string {
	e.t.Helper()
	k, err := e.svc.CreateKey(ctx, service.Operator(ws), sa, service.NewKey{Name: "k", Permission: perm})
	if err != nil {
		e.t.Fatalf("CreateKey: %v", err)
	}
	return k.Key
}

func (e *env) connection(ws string, kind string, models map[string]service.ModelInput) string {
	e.t.Helper()
	cv, err := e.svc.CreateConnection(ctx, service.Operator(ws), service.ConnectionInput{
		Name: "Upstream", Kind: kind, BaseURL: "https://api.example.com", Credential: "sk-upstream-SECRET", Models: models})
	if err != nil {
		e.t.Fatalf("CreateConnection: %v", err)
	}
	return cv.ID
}

// fixture is a workspace with one credential of every kind of the matrix.
type fixture struct {
	ws, sa                              string
	inference, all                      string
	member, admin, owner                string // person ids
	memberTok, adminTok, ownTok, unbTok string // unbTok: the owner, unbound
}

func (e *env) fixture(name string) *fixture {
	e.t.Helper()
	f := &fixture{ws: e.workspace(name)}
	f.sa = e.serviceAccount(f.ws)
	f.inference = e.key(f.ws, f.sa, store.PermissionInference)
	f.all = e.key(f.ws, f.sa, store.PermissionAll)
	f.member = e.person(f.ws, store.RoleMember)
	f.admin = e.person(f.ws, store.RoleAdmin)
	f.owner = e.person(f.ws, store.RoleOwner)
	f.memberTok = e.token(f.member, f.ws)
	f.adminTok = e.token(f.admin, f.ws)
	f.ownTok = e.token(f.owner, f.ws)
	f.unbTok = e.token(f.owner, "")
	return f
}

type credKind struct{ name, cred string }

func (f *fixture) kinds() []credKind {
	return []credKind{
		{"inference key", f.inference},
		{"all key", f.all},
		{"person member", f.memberTok},
		{"person admin", f.adminTok},
		{"person owner", f.ownTok},
	}
}

// req is one HTTP request to the API.
type req struct {
	method, path string
	cred, org    string
	body         string
	contentType  string // default application/json when a body is given
	reader       io.Reader
	header       http.Header
}

// resp is an answer with its decoded JSON body.
type resp struct {
	status int
	header http.Header
	raw    string
	json   map[string]any
}

func (e *env) do(r req) resp {
	e.t.Helper()
	var body io.Reader
	switch {
	case r.reader != nil:
		body = r.reader
	case r.body != "":
		body = strings.NewReader(r.body)
	}
	hr, err := http.NewRequest(r.method, e.srv.URL+r.path, body)
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	if r.cred != "" {
		hr.Header.Set("Authorization", "Bearer "+r.cred)
	}
	if r.org != "" {
		hr.Header.Set("x-org-id", r.org)
	}
	if r.contentType != "" {
		hr.Header.Set("Content-Type", r.contentType)
	} else if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("reading the answer: %v", err)
	}
	out := resp{status: res.StatusCode, header: res.Header, raw: string(b)}
	// Every answer is JSON: an object (decoded into json), or a bare array
	// (/api/orgs, as the released OpenCode CLI reads it).
	if trimmed := strings.TrimSpace(out.raw); strings.HasPrefix(trimmed, "[") && !json.Valid(b) {
		e.t.Fatalf("%s %s: %d answer is not JSON: %q", r.method, r.path, res.StatusCode, b)
	} else if trimmed != "" && !strings.HasPrefix(trimmed, "[") {
		if err := json.Unmarshal(b, &out.json); err != nil {
			e.t.Fatalf("%s %s: %d answer is not a JSON object: %q", r.method, r.path, res.StatusCode, b)
		}
	}
	return out
}

// wantStatus checks the status; for errors it also checks the error
// contract: JSON with _tag and message, Content-Type application/json.
func wantStatus(t *testing.T, what string, r resp, status int, tag string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.status, status, r.raw)
	}
	if status < 400 {
		return
	}
	checkErrorBody(t, what, r)
	if tag != "" && r.json["_tag"] != tag {
		t.Fatalf("%s: _tag %v, want %s; body %s", what, r.json["_tag"], tag, r.raw)
	}
}

func checkErrorBody(t *testing.T, what string, r resp) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: error Content-Type %q, want application/json", what, ct)
	}
	if s, ok := r.json["_tag"].(string); !ok || s == "" {
		t.Fatalf("%s: error body without _tag: %s", what, r.raw)
	}
	if s, ok := r.json["message"].(string); !ok || s == "" {
		t.Fatalf("%s: error body without message: %s", what, r.raw)
	}
}

// data returns the "data" member of an answer as an object.
func (r resp) data() map[string]any {
	m, _ := r.json["data"].(map[string]any)
	return m
}

// list returns the "data" member of an answer as a list of objects.
func (r resp) list() []map[string]any {
	var out []map[string]any
	items, _ := r.json["data"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		out = append(out, m)
	}
	return out
}

// newEnvWithService serves another API, without InferenceURL, over the
// service of e.
func newEnvWithService(t *testing.T, e *env) *env {
	t.Helper()
	e2 := *e
	e2.srv = httptest.NewServer(api.New(api.Options{Service: func(context.Context) (*service.Service, error) { return e.svc, nil }}))
	t.Cleanup(e2.srv.Close)
	return &e2
}

package managed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/claudecode"
	"github.com/agentgate/agentgate/internal/console/managed"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

type env struct {
	t   *testing.T
	te  *testenv.Env
	srv *httptest.Server
}

func newEnv(t *testing.T, telemetry bool) *env {
	te := testenv.New(t, t0)
	h := &managed.Handler{Service: func(context.Context) (*service.Service, error) { return te.Service, nil }}
	if telemetry {
		h.TelemetryEnv = func(r *http.Request) map[string]string {
			return map[string]string{"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + r.Host}
		}
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, te: te, srv: srv}
}

// member makes a workspace member and signs them in (a token bound to the
// workspace, as Claude Code's sign-in is).
func (e *env) member(ws, role string) (personID string, tok *service.IssuedToken) {
	e.t.Helper()
	id := "usr_" + strings.ReplaceAll(role+ws, "_", "")
	err := e.te.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutPerson(&store.Person{ID: id, Email: id + "@example.com", Name: id, PasswordHash: "x", Created: t0}); err != nil {
			return err
		}
		return tx.PutMember(&store.Member{Workspace: ws, PersonID: id, Role: role, Created: t0})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	tok, err = e.te.Service.IssuePersonToken(ctx, id, ws, "claude-code")
	if err != nil {
		e.t.Fatal(err)
	}
	return id, tok
}

// anthropicModel gives the workspace an anthropic connection and a
// workspace model routed to it.
func (e *env) anthropicModel(ws, id string) {
	e.t.Helper()
	on := true
	in, _ := money.Parse("3")
	out, _ := money.Parse("15")
	c, err := e.te.Service.CreateConnection(ctx, service.Operator(ws), service.ConnectionInput{Name: "Anthropic", Kind: store.KindAnthropic,
		BaseURL: "https://api.anthropic.example/v1", Credential: "sk-ant-SECRET",
		Models: map[string]service.ModelInput{"up": {Enabled: &on, Pricing: &store.Pricing{Input: in, Output: out}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.te.Service.CreateWorkspaceModel(ctx, service.Operator(ws), service.WorkspaceModelInput{ID: id,
		Targets: []store.ModelTarget{{Connection: c.ID, Model: "up"}}}); err != nil {
		e.t.Fatal(err)
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (e *env) get(token string, header ...string) answer {
	e.t.Helper()
	r, _ := http.NewRequest("GET", e.srv.URL+managed.Path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	r.Header.Set("Cache-Control", "no-cache")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	res, err := e.srv.Client().Do(r)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, header: res.Header, body: b}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &a.json); err != nil {
			e.t.Fatalf("answer %d is not JSON: %q", res.StatusCode, b)
		}
	}
	return a
}

// settingsBytes is the settings member of a 200 answer, as sent.
func settingsBytes(t *testing.T, body []byte) []byte {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	return raw["settings"]
}

func TestManagedSettingsHTTP(t *testing.T) {
	e := newEnv(t, true)
	acme, _ := e.te.Service.CreateWorkspace(ctx, "acme")
	e.anthropicModel(acme.ID, "claude-sonnet-4-5")
	_, ownerTok := e.member(acme.ID, store.RoleOwner)
	_, memberTok := e.member(acme.ID, store.RoleMember)
	ownerP, err := e.te.Service.Authenticate(ctx, ownerTok.AccessToken, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.te.Service.SetClaudeCodeSettings(ctx, ownerP, []byte(`{"permissions": {"deny": ["WebFetch"], "ask": ["Bash(git push *)"]},
		"companyAnnouncements": ["Ünïcödé 😀 <b>bold</b> & \"quoted\" \u2028 ok"], "env": {"DISABLE_AUTOUPDATER": "1"}}`)); err != nil {
		t.Fatal(err)
	}

	a := e.get(memberTok.AccessToken)
	if a.status != 200 {
		t.Fatalf("GET: %d %s", a.status, a.body)
	}
	settings := settingsBytes(t, a.body)
	sum, _ := a.json["checksum"].(string)
	if a.json["uuid"] == "" || sum != claudecode.ChecksumOf(settings) || a.header.Get("ETag") != `"`+sum+`"` {
		t.Fatalf("uuid %v, checksum %v, ETag %q, settings %s", a.json["uuid"], sum, a.header.Get("ETag"), settings)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/json" || a.header.Get("Cache-Control") != "private, no-cache" {
		t.Fatalf("headers %v", a.header)
	}
	s := a.json["settings"].(map[string]any)
	if !equal(s["availableModels"], []any{"claude-sonnet-4-5"}) || !equal(s["permissions"], map[string]any{"ask": []any{"Bash(git push *)"}, "deny": []any{"WebFetch"}}) {
		t.Fatalf("settings %s", settings)
	}
	env, _ := s["env"].(map[string]any)
	if env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://"+strings.TrimPrefix(e.srv.URL, "http://") || env["DISABLE_AUTOUPDATER"] != "1" {
		t.Fatalf("env %v", env)
	}
	if !bytes.Contains(settings, []byte(`<b>bold</b> & \"quoted\"`)) {
		t.Fatalf("settings are HTML-escaped or re-encoded: %s", settings)
	}
	jsChecksum(t, settings, sum)

	// If-None-Match: a match is 304 with no body; anything else is 200.
	for _, inm := range []string{`"` + sum + `"`, `W/"` + sum + `"`, `"sha256:00", "` + sum + `"`} {
		if a := e.get(memberTok.AccessToken, "If-None-Match", inm); a.status != 304 || len(a.body) != 0 || a.header.Get("ETag") != `"`+sum+`"` {
			t.Fatalf("If-None-Match %s: %d %q", inm, a.status, a.body)
		}
	}
	for _, inm := range []string{`"sha256:0000"`, `*`, `"` + sum + `x"`, `garbage`} {
		if a := e.get(memberTok.AccessToken, "If-None-Match", inm); a.status != 200 || a.json["checksum"] != sum {
			t.Fatalf("If-None-Match %s: %d %s", inm, a.status, a.body)
		}
	}

	// The owner changes the document: the next poll with the old checksum
	// gets the new settings and a new checksum.
	if _, err := e.te.Service.SetClaudeCodeSettings(ctx, ownerP, []byte(`{"permissions": {"deny": ["WebFetch", "Bash(curl *)"]}}`)); err != nil {
		t.Fatal(err)
	}
	a = e.get(memberTok.AccessToken, "If-None-Match", `"`+sum+`"`)
	if a.status != 200 || a.json["checksum"] == sum || !bytes.Contains(settingsBytes(t, a.body), []byte("Bash(curl *)")) {
		t.Fatalf("after the owner's change: %d %s", a.status, a.body)
	}

	// Two workspaces: globex's member gets globex's settings only.
	globex, _ := e.te.Service.CreateWorkspace(ctx, "globex")
	e.anthropicModel(globex.ID, "claude-haiku-4-5")
	_, globexTok := e.member(globex.ID, store.RoleMember)
	g := e.get(globexTok.AccessToken)
	if g.status != 200 || bytes.Contains(g.body, []byte("WebFetch")) || bytes.Contains(g.body, []byte("sonnet")) ||
		!equal(g.json["settings"].(map[string]any)["availableModels"], []any{"claude-haiku-4-5"}) || g.json["uuid"] == a.json["uuid"] {
		t.Fatalf("globex's member: %s", g.body)
	}
	// and cannot ask for acme's with x-org-id.
	if a := e.get(globexTok.AccessToken, "x-org-id", acme.ID); a.status != 403 {
		t.Fatalf("x-org-id of another workspace: %d %s", a.status, a.body)
	}

	// A revoked sign-in: 401, x-should-retry: false, Anthropic's envelope.
	memberP, _ := e.te.Service.Authenticate(ctx, memberTok.AccessToken, "")
	if err := e.te.Service.RevokeSignIn(ctx, memberP, memberTok.FamilyID); err != nil {
		t.Fatal(err)
	}
	a = e.get(memberTok.AccessToken)
	if a.status != 401 || a.header.Get("x-should-retry") != "false" || a.json["type"] != "error" ||
		a.json["error"].(map[string]any)["type"] != "authentication_error" {
		t.Fatalf("revoked token: %d %v %s", a.status, a.header, a.body)
	}
	// An expired one too.
	e.te.Clock.Advance(2 * time.Hour)
	if a := e.get(ownerTok.AccessToken); a.status != 401 || a.header.Get("x-should-retry") != "false" {
		t.Fatalf("expired token: %d %s", a.status, a.body)
	}
	if a := e.get(""); a.status != 401 {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
	if a := e.get("ag_at_not-a-real-token"); a.status != 401 {
		t.Fatalf("a made-up token: %d %s", a.status, a.body)
	}
}

func TestManagedSettingsRefusals(t *testing.T) {
	e := newEnv(t, false)
	ws, _ := e.te.Service.CreateWorkspace(ctx, "acme")
	_, tok := e.member(ws.ID, store.RoleMember)

	// Nothing applies (no models, no document, no relay): 204.
	if a := e.get(tok.AccessToken); a.status != 204 || len(a.body) != 0 || a.header.Get("ETag") != "" {
		t.Fatalf("nothing applies: %d %q", a.status, a.body)
	}
	// A key is refused: the settings are for people.
	sa, _ := e.te.Service.CreateServiceAccount(ctx, service.Operator(ws.ID), "ci")
	key, _ := e.te.Service.CreateKey(ctx, service.Operator(ws.ID), sa.ID, service.NewKey{Name: "k", Permission: store.PermissionAll})
	if a := e.get(key.Key); a.status != 403 || a.json["error"].(map[string]any)["type"] != "permission_error" {
		t.Fatalf("a key: %d %s", a.status, a.body)
	}
	// A token not bound to a workspace needs x-org-id.
	id, _ := e.member(ws.ID, store.RoleOwner)
	unbound, _ := e.te.Service.IssuePersonToken(ctx, id, "", "cli")
	if a := e.get(unbound.AccessToken); a.status != 400 || a.json["_tag"] != "OrgRequired" {
		t.Fatalf("unbound token: %d %s", a.status, a.body)
	}
	// Only GET and HEAD.
	r, _ := http.NewRequest("POST", e.srv.URL+managed.Path, strings.NewReader("{}"))
	r.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	res, err := e.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 405 || res.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d %v", res.StatusCode, res.Header)
	}
}

func TestNoneMatch(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   bool
	}{
		{`"sha256:ab"`, true}, {`sha256:ab`, true}, {`W/"sha256:ab"`, true}, {` "x" , "sha256:ab" `, true},
		{`*`, false}, {``, false}, {`"sha256:abc"`, false}, {`""`, false}, {`"sha256:ab`, false},
	} {
		if got := managed.NoneMatch(tc.header, "sha256:ab"); got != tc.want {
			t.Errorf("NoneMatch(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

func equal(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// jsChecksum checks the served checksum as the CLI computes it: its
// settings parsed, every object's keys sorted, JSON.stringify, SHA-256.
func jsChecksum(t *testing.T, settings []byte, want string) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed")
		}
		t.Log("node is not installed: the checksum is not compared with JavaScript's")
		return
	}
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := testenv.Command(t, c, "node", "-e", `
const sortKeys = (e) => Array.isArray(e) ? e.map(sortKeys) : e !== null && typeof e === "object"
  ? Object.fromEntries(Object.keys(e).sort().map((k) => [k, sortKeys(e[k])])) : e;
const text = JSON.stringify(sortKeys(JSON.parse(require("fs").readFileSync(0, "utf8"))));
process.stdout.write("sha256:" + require("crypto").createHash("sha256").update(text).digest("hex"));`)
	cmd.Stdin = bytes.NewReader(settings)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if string(out) != want {
		t.Fatalf("JavaScript's checksum of the served settings %s, served %s", out, want)
	}
}

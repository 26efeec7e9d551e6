package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// TestInstanceWorkspaceMember runs the real binary on a Caddyfile shaped
// like the default one (the gateway and the Console on one site, the
// instance server with `workspace default` on another) and follows a new
// user: the workspace "default" and the instance's service account exist
// from the first start; an owner adds a connection (the fake provider)
// and a workspace model through the Console API; the instance lists the
// model on every surface the clients read; `opencode run --attach` (the
// released CLI) gets an answer through the gateway, in-process, with no
// key anywhere; the usage record names the session, and the budgets page
// and the MCP my_usage tool (with a key of the instance's account) show
// its spend.
func TestInstanceWorkspaceMember(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	ctx := testContext(t, 4*time.Minute)
	oc := opencodeBinary(t, ctx)
	dir := nodeReady(t, ctx)
	const secret = "sk-provider-member-SECRET"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	s := newServer(t, caddyBinary(t), config{})
	project := t.TempDir()
	instAddr := freeAddr(t)
	cfg := s.caddyfile(config{}) + fmt.Sprintf("\nhttp://%s {\n\tbind 127.0.0.1\n\tagent_instance {\n\t\tworkspace default\n\t\tdirectory %q\n\t}\n}\n",
		instAddr, project)
	if err := os.WriteFile(s.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start()
	s.waitReady(ctx)
	base := "http://" + instAddr
	waitFor(t, ctx, "the instance answers", func() bool {
		st, _, err := call(ctx, freshClient, "GET", base+"/api/info", nil, nil)
		return err == nil && st == 200
	})

	// The workspace "default" and the instance's account were made at start.
	var wss []idName
	must(t, "list workspaces", 200, &wss)(s.admin(ctx, "GET", "/agentgate/workspaces", nil))
	ws := ""
	for _, w := range wss {
		if w.Name == "default" {
			ws = w.ID
		}
	}
	if ws == "" {
		t.Fatalf("no workspace named default: %v", wss)
	}
	tn := tenant{Workspace: ws, Email: "owner@example.com", Password: "pw-" + randomHex(12)}
	var person idName
	must(t, "create owner", 201, &person)(s.admin(ctx, "POST", "/agentgate/people",
		map[string]any{"email": tn.Email, "name": "Owner", "password": tn.Password, "workspace": ws, "role": "owner"}))
	tn.Person = person.ID
	tn.Token = s.token(t, ctx, person.ID, ws)
	console := func(method, path string, body any, want int, out any) []byte {
		t.Helper()
		st, b, err := s.console(ctx, method, path, tn.Token, body)
		if err != nil || st != want {
			t.Fatalf("%s %s: %d %v %s", method, path, st, err, b)
		}
		if out != nil {
			decodeData(t, path, b, out)
		}
		return b
	}
	b := console("GET", "/api/v1/service-accounts", nil, 200, nil)
	sa := gjson.GetBytes(b, `data.#(instance=="default")`)
	if sa.Get("id").String() == "" || sa.Get("name").String() != "instance default" {
		t.Fatalf("the instance's service account: %s", b)
	}
	saID := sa.Get("id").String()

	// Nothing to answer with yet: the model lists are empty.
	if _, b, _ := call(ctx, httpClient, "GET", base+"/api/model", nil, nil); gjson.GetBytes(b, "data.#").Int() != 0 {
		t.Fatalf("models before any: %s", b)
	}

	// An owner adds a connection and a workspace model in the Console.
	var conn idName
	console("POST", "/api/v1/connections", map[string]any{"name": "Fake OpenAI", "kind": "openai", "base_url": p.URL + "/v1", "credential": secret,
		"models": map[string]any{"gpt-4o": map[string]any{"pricing": map[string]any{"input": 2.5, "output": 10},
			"limit": map[string]any{"context": 128000, "output": 16000}}}}, 201, &conn)
	console("POST", "/api/v1/models", map[string]any{"id": "smart", "name": "Smart", "targets": []any{map[string]any{"connection": conn.ID, "model": "gpt-4o"}}}, 201, nil)

	// Every list the clients read has it, with its limits and prices.
	_, b, _ = call(ctx, httpClient, "GET", base+"/api/model", nil, nil)
	if gjson.GetBytes(b, "data.0.id").String() != "smart" || gjson.GetBytes(b, "data.0.limit.output").Int() != 16000 || gjson.GetBytes(b, "data.0.cost.0.input").Float() != 2.5 {
		t.Fatalf("/api/model: %s", b)
	}
	_, b, _ = call(ctx, httpClient, "GET", base+"/config/providers", nil, nil)
	if gjson.GetBytes(b, "default.agentgate").String() != "smart" || gjson.GetBytes(b, "providers.0.models.smart.cost.output").Float() != 10 {
		t.Fatalf("/config/providers: %s", b)
	}
	_, b, _ = call(ctx, httpClient, "GET", base+"/provider", nil, nil)
	if gjson.GetBytes(b, "all.0.models.smart.limit.context").Int() != 128000 || gjson.GetBytes(b, "connected.0").String() != "agentgate" {
		t.Fatalf("/provider: %s", b)
	}
	_, b, _ = call(ctx, httpClient, "GET", base+"/config", nil, nil)
	if gjson.GetBytes(b, "model").String() != "agentgate/smart" {
		t.Fatalf("/config: %s", b)
	}

	// The released CLI gets an answer.
	cmd := exec.CommandContext(ctx, oc, "run", "--attach", base, "say hello")
	cmd.Dir = project
	cmd.Env = opencodeEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("opencode run --attach: %v\n%s\nserver log:\n%s", err, out, tail(s.stderr.String(), 4000))
	}
	if !strings.Contains(string(out), fakeprovider.Text) {
		t.Fatalf("the answer is not printed:\n%s", out)
	}
	for _, r := range p.Received() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+secret {
			t.Fatalf("the provider got Authorization %q", got)
		}
	}
	_, b, _ = call(ctx, httpClient, "GET", base+"/api/session?order=desc&limit=1", nil, nil)
	sid := gjson.GetBytes(b, "data.0.id").String()
	_, b, _ = call(ctx, httpClient, "GET", base+"/api/session/"+sid+"/message?order=asc", nil, nil)
	msgCost := gjson.GetBytes(b, `data.#(type=="assistant").cost`).Float()
	if sid == "" || msgCost <= 0 {
		t.Fatalf("session %s: %s", sid, b)
	}

	// The usage record names the session and the instance's account, at
	// the cost the session shows.
	var recs []byte
	waitFor(t, ctx, "the usage record", func() bool {
		recs = console("GET", "/api/v1/usage?session="+url.QueryEscape(sid), nil, 200, nil)
		return gjson.GetBytes(recs, "data.#").Int() >= 1
	})
	rec := gjson.GetBytes(recs, "data.0")
	if rec.Get("member_id").String() != saID || rec.Get("session").String() != sid || rec.Get("model").String() != "smart" || rec.Get("status").Int() != 200 {
		t.Fatalf("usage: %s", recs)
	}
	if c := rec.Get("cost_usd").Float(); c < msgCost-1e-9 || c > msgCost+1e-9 {
		t.Fatalf("record cost %v, session message %v", c, msgCost)
	}
	// The in-process requests are in the gateway's metrics (no other
	// request went through it).
	_, metrics, err := call(ctx, httpClient, "GET", "http://"+s.adminAddr+"/metrics", nil, nil)
	if err != nil || !strings.Contains(string(metrics), `caddy_llm_gateway_requests_total{code="2xx",format="chat"}`) {
		t.Fatalf("the instance's requests are not in the gateway's metrics: %v", err)
	}
	t.Logf("opencode run --attach printed:\n%s\nusage record: %s", out, rec.Raw)

	// The budgets page lists the session's spend.
	d := &deviceSite{s: s, base: "http://" + s.httpAddr, tn: tn}
	page := signedInPage(t, ctx, d, "/w/"+ws+"/budgets")
	if !strings.Contains(page, "<code>"+sid+"</code>") || strings.Contains(page, "No agent sessions in the last 30 days.") {
		t.Fatalf("the budgets page does not list session %s:\n%s", sid, tail(page, 4000))
	}

	// my_usage, called with a key of the instance's account, shows it by
	// session.
	var key struct {
		Key string `json:"key"`
	}
	console("POST", "/api/v1/service-accounts/"+saID+"/keys", map[string]any{"name": "mcp", "permission": "all"}, 201, &key)
	mcp := exec.CommandContext(ctx, "node", "mcp.mjs")
	mcp.Dir = dir
	mcp.Env = testenv.ToolEnv(t, "MCP_URL=http://"+s.httpAddr+"/mcp", "AGENTGATE_API_KEY="+key.Key)
	mout, err := mcp.Output()
	if err != nil {
		t.Fatalf("node mcp.mjs: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(mout, &v); err != nil {
		t.Fatalf("node mcp.mjs printed %q", mout)
	}
	if field(v, "usage.isError") != false || field(v, "usage.structured.member_id") != saID {
		t.Fatalf("my_usage: %v", field(v, "usage"))
	}
	bySession, _ := field(v, "usage.structured.by_session").(map[string]any)
	if _, ok := bySession[sid]; !ok {
		t.Fatalf("my_usage by_session lacks %s: %v", sid, bySession)
	}
	// No workspace key was ever needed by the instance: none is in its
	// config, and the only key of its account is the one made for MCP.
	if strings.Contains(cfg, "ag_sk_") {
		t.Fatal("a key is in the Caddyfile")
	}
}

// signedInPage signs the tenant's owner in on the Console web pages and
// returns the page at path.
func signedInPage(t *testing.T, ctx context.Context, d *deviceSite, path string) string {
	t.Helper()
	w := d.webApprover(t, ctx)
	pg := w.do(t, ctx, "GET", d.base+path, nil)
	if f := findHTMLForm(pg, func(f htmlForm) bool { return f.passwordField() != "" }); f != nil {
		vals := f.values()
		vals.Set(f.emailField(), d.tn.Email)
		vals.Set(f.passwordField(), d.tn.Password)
		w.do(t, ctx, f.methodOr("POST"), f.target(pg.url), vals)
		pg = w.do(t, ctx, "GET", d.base+path, nil)
	}
	if pg.url.Path != path {
		t.Fatalf("signed in, GET %s landed on %s", path, pg.url)
	}
	return pg.body
}

package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/console/mcp"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var ctx = context.Background()

type rpc struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func call(t *testing.T, srv *httptest.Server, method, cred, session, body string) rpc {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := rpc{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	json.Unmarshal(b, &r.body)
	return r
}

func field(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func TestMCP(t *testing.T) {
	te := testenv.New(t, time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC))
	svc := te.Service
	srv := httptest.NewServer(mcp.New(mcp.Options{Service: func(context.Context) (*service.Service, error) { return svc, nil },
		BaseURL: "https://console.example.com", InferenceURL: "https://gw.example.com"}))
	t.Cleanup(srv.Close)
	w, _ := svc.CreateWorkspace(ctx, "Acme")
	op := service.Operator(w.ID)
	sa, _ := svc.CreateServiceAccount(ctx, op, "ci")
	all, _ := svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "all", Permission: store.PermissionAll})
	inf, _ := svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "inf", Permission: store.PermissionInference})
	limit := money.Micros(20 * money.Scale)
	if _, err := svc.SetBudget(ctx, op, sa.ID, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "OpenAI", Kind: store.KindOpenAI, BaseURL: "https://api.openai.com/v1",
		Credential: "sk-x", Models: map[string]service.ModelInput{"gpt-4o": {Pricing: &store.Pricing{Input: 2_500_000, Output: 10_000_000}}}}); err != nil {
		t.Fatal(err)
	}
	now := te.Clock.Now()
	for i, u := range []struct {
		model, session string
		cost           money.Pico
		ago            time.Duration
	}{{"gpt-4o", "ses_a", 1_000_000_000_000, 0}, {"gpt-4o", "ses_a", 500_000_000_000, time.Minute}, {"o1", "", 250_000_000_000, 48 * time.Hour}} {
		at := now.Add(-u.ago).Add(time.Duration(i) * time.Millisecond)
		res, err := svc.Ledger.Reserve(ctx, w.ID, sa.ID, u.cost)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Settle(ctx, &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: w.ID, MemberID: sa.ID,
			MemberKind: store.MemberServiceAccount, Model: u.model, Session: u.session, Cost: u.cost, Status: 200,
			Tokens: store.Tokens{Input: 10, Output: 5}}); err != nil {
			t.Fatal(err)
		}
	}

	// Without a credential: 401 naming the resource metadata, which names
	// the Console as the authorization server.
	r := call(t, srv, "POST", "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	if r.status != 401 || r.header.Get("WWW-Authenticate") != `Bearer resource_metadata="https://console.example.com/.well-known/oauth-protected-resource"` {
		t.Fatalf("no credential: %d %v", r.status, r.header)
	}
	r = call(t, srv, "POST", "ag_sk_bogus", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	if r.status != 401 || !strings.Contains(r.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("bad credential: %d %v", r.status, r.header)
	}
	mdResp, err := srv.Client().Get(srv.URL + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]any
	json.NewDecoder(mdResp.Body).Decode(&md)
	mdResp.Body.Close()
	if md["resource"] != "https://console.example.com/mcp" || field(md, "authorization_servers").([]any)[0] != "https://console.example.com" {
		t.Fatalf("metadata %v", md)
	}

	// initialize, then the session carries every call.
	r = call(t, srv, "POST", all.Key, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != 200 || sid == "" || field(r.body, "result", "protocolVersion") != "2025-06-18" {
		t.Fatalf("initialize: %d %s", r.status, r.raw)
	}
	if r := call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != 202 {
		t.Fatalf("notification: %d %s", r.status, r.raw)
	}
	r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if tools, _ := field(r.body, "result", "tools").([]any); len(tools) != 3 {
		t.Fatalf("tools/list: %s", r.raw)
	}
	r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"my_usage","arguments":{"days":7}}}`)
	usage := field(r.body, "result", "structuredContent")
	if field(usage, "total", "requests") != float64(3) || field(usage, "total", "cost_usd") != 1.75 ||
		field(usage, "by_session", "ses_a", "requests") != float64(2) || field(usage, "by_model", "o1", "cost_usd") != 0.25 {
		t.Fatalf("my_usage: %s", r.raw)
	}
	r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"my_budget","arguments":{}}}`)
	if b := field(r.body, "result", "structuredContent"); field(b, "limit_usd") != float64(20) || field(b, "remaining_usd") != 18.25 {
		t.Fatalf("my_budget: %s", r.raw)
	}
	r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"workspace_models"}}`)
	if !strings.Contains(r.raw, `"gpt-4o"`) || !strings.Contains(r.raw, `"limit"`) || !strings.Contains(r.raw, "https://gw.example.com/custom/") {
		t.Fatalf("workspace_models: %s", r.raw)
	}

	// Hosted web search: listed once on, charged per query; an
	// unreachable search API is a tool error at no charge.
	search := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"results":[{"title":"Go","url":"https://go.dev","content":"Go"}]}`))
	}))
	sc, err := svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "Search", Kind: store.KindSearch, BaseURL: search.URL, Credential: "s"})
	if err != nil {
		t.Fatal(err)
	}
	price := money.Micros(20_000)
	if _, err := svc.SetWebsearch(ctx, op, service.WebsearchInput{Connection: sc.ID, PricePerQuery: &price}); err != nil {
		t.Fatal(err)
	}
	r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":21,"method":"tools/list"}`)
	if tools, _ := field(r.body, "result", "tools").([]any); len(tools) != 4 {
		t.Fatalf("tools/list with web search: %s", r.raw)
	}
	r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"websearch","arguments":{"query":"go"}}}`)
	if field(r.body, "result", "structuredContent", "cost_usd") != 0.02 || !strings.Contains(r.raw, "https://go.dev") {
		t.Fatalf("websearch: %s", r.raw)
	}
	search.Close()
	r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"websearch","arguments":{"query":"go"}}}`)
	if field(r.body, "result", "isError") != true || !strings.Contains(r.raw, "could not be reached") {
		t.Fatalf("websearch unreachable: %s", r.raw)
	}

	// Bad input: a tool error, not a crash.
	for _, c := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"my_usage","arguments":{"days":1000}}}`, "days must be"},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"my_usage","arguments":{"colour":"red"}}}`, "unknown field"},
	} {
		r = call(t, srv, "POST", all.Key, sid, c.body)
		if r.status != 200 || field(r.body, "result", "isError") != true || !strings.Contains(r.raw, c.want) {
			t.Fatalf("%s: %d %s", c.body, r.status, r.raw)
		}
	}
	if r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"rm_rf"}}`); field(r.body, "error", "code") != float64(-32602) {
		t.Fatalf("unknown tool: %s", r.raw)
	}
	if r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":9,"method":"resources/list"}`); field(r.body, "error", "code") != float64(-32601) {
		t.Fatalf("unknown method: %s", r.raw)
	}
	if r = call(t, srv, "POST", all.Key, sid, `[{"jsonrpc":"2.0","id":10,"method":"ping"}]`); r.status != 400 {
		t.Fatalf("a batch: %d %s", r.status, r.raw)
	}
	if r = call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":11,"method":"ping","pad":"`+strings.Repeat("x", 2<<20)+`"}`); r.status != 413 {
		t.Fatalf("a 2 MiB request: %d", r.status)
	}

	// A credential the matrix refuses spend: a tool error naming why.
	r = call(t, srv, "POST", inf.Key, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	isid := r.header.Get("Mcp-Session-Id")
	r = call(t, srv, "POST", inf.Key, isid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"my_budget"}}`)
	if field(r.body, "result", "isError") != true || !strings.Contains(r.raw, "Inference only") {
		t.Fatalf("inference key reads the budget: %s", r.raw)
	}
	// Sessions: forged, another credential's, missing, ended, expired.
	for _, c := range []struct {
		cred, sid string
		status    int
	}{{all.Key, "mcp_forged", 404}, {inf.Key, sid, 404}, {all.Key, "", 400}} {
		if r := call(t, srv, "POST", c.cred, c.sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); r.status != c.status {
			t.Fatalf("session %q: %d %s", c.sid, r.status, r.raw)
		}
	}
	if r := call(t, srv, "GET", all.Key, sid, ""); r.status != 405 {
		t.Fatalf("GET: %d", r.status)
	}
	if r := call(t, srv, "DELETE", all.Key, isid, ""); r.status != 404 {
		t.Fatalf("ending another credential's session: %d", r.status)
	}
	if r := call(t, srv, "DELETE", inf.Key, isid, ""); r.status != 204 {
		t.Fatalf("ending a session: %d", r.status)
	}
	if r := call(t, srv, "POST", inf.Key, isid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); r.status != 404 {
		t.Fatalf("an ended session: %d", r.status)
	}
	te.Clock.Advance(25 * time.Hour)
	if r := call(t, srv, "POST", all.Key, sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); r.status != 404 {
		t.Fatalf("an expired session: %d", r.status)
	}
	// Revoking the key ends its use at once.
	if err := svc.RevokeKey(ctx, op, sa.ID, all.ID); err != nil {
		t.Fatal(err)
	}
	if r := call(t, srv, "POST", all.Key, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`); r.status != 401 {
		t.Fatalf("a revoked key: %d", r.status)
	}
}

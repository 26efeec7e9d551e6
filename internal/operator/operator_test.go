package operator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/operator"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/testenv"
)

type answer struct {
	status int
	raw    string
	body   map[string]any
}

func do(t *testing.T, srv *httptest.Server, method, path, body string) answer {
	t.Helper()
	r, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	res, err := srv.Client().Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: res.StatusCode, raw: string(b)}
	if strings.TrimSpace(a.raw) != "" {
		if err := json.Unmarshal([]byte(a.raw), &a.body); err != nil {
			t.Fatalf("%s %s: answer is not a JSON object: %q", method, path, a.raw)
		}
	}
	return a
}

// shape is the sorted member names of an object, or of the first item of
// a list (prefixed with "[]"), so that answers compare without their ids.
func shape(v any) string {
	prefix := ""
	if l, ok := v.([]any); ok {
		if len(l) == 0 {
			return "[]"
		}
		prefix, v = "[]", l[0]
	}
	m, ok := v.(map[string]any)
	if !ok {
		return prefix + "?"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return prefix + strings.Join(names, ",")
}

// TestRoutes calls every operator route and checks its status and the
// shape of its answer: the `caddy agentgate` commands and the README's
// quick start read these answers (data.<name>), so they must not move.
func TestRoutes(t *testing.T) {
	te := testenv.New(t, time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(operator.New(func(context.Context) (*service.Service, error) { return te.Service, nil }))
	t.Cleanup(srv.Close)

	want := func(a answer, what string, status int, data string) map[string]any {
		t.Helper()
		if a.status != status {
			t.Fatalf("%s: status %d, want %d; body %s", what, a.status, status, a.raw)
		}
		if status == http.StatusNoContent {
			if a.raw != "" {
				t.Fatalf("%s: 204 with body %q", what, a.raw)
			}
			return nil
		}
		if got := shape(a.body); got != "data" {
			t.Fatalf("%s: answer members %s, want data only; body %s", what, got, a.raw)
		}
		// An empty data checks only that data is an object.
		if got := shape(a.body["data"]); data != "" && got != data || strings.HasPrefix(got, "?") {
			t.Fatalf("%s: data %s, want %s; body %s", what, got, data, a.raw)
		}
		m, _ := a.body["data"].(map[string]any)
		return m
	}

	ws := want(do(t, srv, "POST", "/agentgate/workspaces", `{"name": "acme"}`), "create workspace", 201, "id,name")["id"].(string)
	want(do(t, srv, "GET", "/agentgate/workspaces", ""), "list workspaces", 200, "[]created,id,name")
	wp := "/agentgate/workspaces/" + ws

	// Empty lists are [] rather than null.
	for _, path := range []string{wp + "/connections", wp + "/service-accounts"} {
		if a := do(t, srv, "GET", path, ""); a.status != 200 || strings.TrimSpace(a.raw) != `{"data":[]}` {
			t.Fatalf("GET %s: %d %s", path, a.status, a.raw)
		}
	}

	owner := want(do(t, srv, "POST", "/agentgate/people", `{"email": "o@example.com", "name": "O", "password": "correct horse battery", "workspace": "`+ws+`", "role": "owner"}`),
		"create person", 201, "email,id,name")["id"].(string)
	other := want(do(t, srv, "POST", "/agentgate/people", `{"email": "m@example.com", "name": "M", "password": "correct horse battery"}`),
		"create person without workspace", 201, "email,id,name")["id"].(string)
	tok := want(do(t, srv, "POST", "/agentgate/people/"+owner+"/tokens", `{"workspace": "`+ws+`"}`), "issue token", 201, "access_token,expires_at,expires_in,family_id,org_id,token_type")
	if tok["org_id"] != ws {
		t.Fatalf("issued token %v", tok)
	}
	m := want(do(t, srv, "POST", wp+"/members", `{"person_id": "`+other+`", "role": "member"}`), "add member", 201, "member_id,role")
	if m["member_id"] != other || m["role"] != "member" {
		t.Fatalf("add member answer %v", m)
	}
	want(do(t, srv, "GET", wp+"/members", ""), "list members", 200, shape(mustList(t, te.Service, ws)))

	sa := want(do(t, srv, "POST", wp+"/service-accounts", `{"name": "robot"}`), "create service account", 201, "id,name")["id"].(string)
	want(do(t, srv, "GET", wp+"/service-accounts", ""), "list service accounts", 200, "[]id,name")
	k := want(do(t, srv, "POST", wp+"/service-accounts/"+sa+"/keys", `{"name": "ci", "permission": "inference"}`), "create key", 201, "expires_at,id,key,name,permission")
	if !strings.HasPrefix(k["key"].(string), "ag_sk_") || k["expires_at"] != nil {
		t.Fatalf("create key answer %v", k)
	}
	want(do(t, srv, "DELETE", wp+"/service-accounts/"+sa+"/keys/"+k["id"].(string), ""), "revoke key", 204, "")

	c := want(do(t, srv, "POST", wp+"/connections", `{"name": "up", "kind": "openai", "base_url": "https://api.openai.com/v1", "credential": "sk-x"}`), "create connection", 201, "")
	if c["id"] == nil || c["credential"] != nil {
		t.Fatalf("create connection answer %v", c)
	}
	want(do(t, srv, "GET", wp+"/connections", ""), "list connections", 200, "[]"+shape(c))

	// Workspace models and policies.
	for _, path := range []string{wp + "/models", wp + "/policies"} {
		if a := do(t, srv, "GET", path, ""); a.status != 200 || strings.TrimSpace(a.raw) != `{"data":[]}` {
			t.Fatalf("GET %s: %d %s", path, a.status, a.raw)
		}
	}
	conn := c["id"].(string)
	want(do(t, srv, "POST", wp+"/connections", `{"name": "m", "kind": "openai", "base_url": "https://api.openai.com/v1", "credential": "sk-x", "models": {"gpt-4o": {}}}`),
		"create connection with a model", 201, "")
	if a := do(t, srv, "POST", wp+"/models", `{"id": "smart", "targets": [{"connection": "`+conn+`", "model": "gpt-4o"}]}`); a.status != 400 {
		t.Fatalf("a target model the connection lacks: %d %s", a.status, a.raw)
	}
	cs := do(t, srv, "GET", wp+"/connections", "").body["data"].([]any)
	var withModel string
	for _, x := range cs {
		if x.(map[string]any)["name"] == "m" {
			withModel = x.(map[string]any)["id"].(string)
		}
	}
	mv := want(do(t, srv, "PUT", wp+"/connections/"+withModel+"/models/gpt-4o", `{"limit": {"context": 128000, "output": 16384}, "attachment": true}`), "put model", 200, "")
	if m := mv["models"].(map[string]any)["gpt-4o"].(map[string]any); m["max_output_tokens"] != float64(16384) || m["context_window"] != float64(128000) {
		t.Fatalf("put model answer %v", mv)
	}
	if a := do(t, srv, "PUT", wp+"/connections/"+withModel+"/models/gpt-4o", `{"limit": {"output": -1}}`); a.status != 400 {
		t.Fatalf("negative output limit: %d %s", a.status, a.raw)
	}
	wm := want(do(t, srv, "POST", wp+"/models", `{"id": "smart", "targets": [{"connection": "`+withModel+`", "model": "gpt-4o"}]}`), "create model", 201,
		"created,formats,id,name,targets,updated")
	if wm["id"] != "smart" {
		t.Fatalf("create model answer %v", wm)
	}
	if a := do(t, srv, "POST", wp+"/models", `{"id": "smart", "targets": [{"connection": "`+withModel+`", "model": "gpt-4o"}]}`); a.status != 409 {
		t.Fatalf("duplicate model id: %d %s", a.status, a.raw)
	}
	want(do(t, srv, "GET", wp+"/models/smart", ""), "get model", 200, "created,formats,id,name,targets,updated")
	want(do(t, srv, "PUT", wp+"/models/smart", `{"name": "Smart", "targets": [{"connection": "`+withModel+`", "model": "gpt-4o", "weight": 2}]}`), "replace model", 200, "")
	want(do(t, srv, "DELETE", wp+"/models/smart", ""), "delete model", 204, "")
	pol := want(do(t, srv, "POST", wp+"/policies", `{"name": "rpm", "effect": "limit", "models": ["*"], "per": "workspace", "requests_per_minute": 100}`), "create policy", 201, "")
	want(do(t, srv, "GET", wp+"/policies/"+pol["id"].(string), ""), "get policy", 200, "")
	want(do(t, srv, "PUT", wp+"/policies/"+pol["id"].(string), `{"name": "deny", "effect": "deny", "models": ["x"]}`), "replace policy", 200, "")
	want(do(t, srv, "DELETE", wp+"/policies/"+pol["id"].(string), ""), "delete policy", 204, "")

	// The workspace's Claude Code settings: read, written by the operator
	// (recorded as the operator), refused with a clear 400.
	cc := want(do(t, srv, "GET", wp+"/claude-code/settings", ""), "get claude code settings", 200,
		"checksum,declared,opencode,settings,updated,version")
	if cc["version"] != 0.0 {
		t.Fatalf("claude code settings before any edit: %v", cc)
	}
	cc = want(do(t, srv, "PUT", wp+"/claude-code/settings", `{"permissions": {"deny": ["WebFetch"]}}`), "put claude code settings", 200,
		"checksum,declared,opencode,settings,updated,updated_by,version")
	if cc["updated_by"] != "operator" || cc["version"] != 1.0 {
		t.Fatalf("claude code settings after the operator's edit: %v", cc)
	}
	if a := do(t, srv, "PUT", wp+"/claude-code/settings", `{"apiKeyHelper": "echo"}`); a.status != 400 || !strings.Contains(a.raw, "apiKeyHelper (runs a command)") {
		t.Fatalf("a refused key: %d %s", a.status, a.raw)
	}
	want(do(t, srv, "GET", wp+"/claude-code/settings/history", ""), "claude code settings history", 200,
		"[]actor_kind,checksum,declared,settings,time,version")

	b := want(do(t, srv, "PUT", wp+"/budgets/"+other, `{"limit_usd": 10, "period": "monthly"}`), "set budget", 200, "")
	if b["member_id"] != other {
		t.Fatalf("set budget answer %v", b)
	}
	want(do(t, srv, "GET", wp+"/budgets", ""), "list budgets", 200, "[]"+shape(b))

	// Bodies are strict.
	if a := do(t, srv, "POST", wp+"/service-accounts", `{"name": "x", "colour": "red"}`); a.status != 400 || a.body["_tag"] != "InvalidRequest" {
		t.Fatalf("unknown field: %d %s", a.status, a.raw)
	}
	// Unknown workspaces are 404.
	if a := do(t, srv, "GET", "/agentgate/workspaces/wrk_nope/connections", ""); a.status != 404 {
		t.Fatalf("unknown workspace: %d %s", a.status, a.raw)
	}

	want(do(t, srv, "DELETE", wp, ""), "delete workspace", 204, "")
	if a := do(t, srv, "GET", "/agentgate/workspaces", ""); strings.TrimSpace(a.raw) != `{"data":[]}` {
		t.Fatalf("workspaces after delete: %s", a.raw)
	}
}

func mustList(t *testing.T, svc *service.Service, ws string) []any {
	t.Helper()
	ms, err := svc.Members(context.Background(), service.Operator(ws))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(ms)
	var out []any
	json.Unmarshal(b, &out)
	return out
}

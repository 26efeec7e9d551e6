package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/testenv"
)

// TestMCPClient: the official MCP SDK's client (npm
// @modelcontextprotocol/sdk) over Streamable HTTP against the real binary:
// initialize, tools/list and tools/call with a key and with a person's
// access token; a key that may not read spend gets a tool error; no
// credential gets 401 naming the resource metadata.
func TestMCPClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs node")
	}
	ctx := testContext(t, 3*time.Minute)
	dir := nodeReady(t, ctx)
	s := startServer(t, ctx, caddyBinary(t), config{})
	tn := s.bootstrap(t, ctx, "MCP")
	ws := "/agentgate/workspaces/" + tn.Workspace
	key := inferenceKey(t, ctx, s, ws)
	must(t, "create connection", 201, nil)(s.admin(ctx, "POST", ws+"/connections", map[string]any{
		"name": "OpenAI", "kind": "openai", "base_url": "https://api.openai.com/v1", "credential": "sk-unused",
		"models": map[string]any{"gpt-4o": map[string]any{"limit": map[string]any{"context": 128000, "output": 16384}, "pricing": map[string]any{"input": 2.5, "output": 10}}},
	}))
	mcpURL := "http://" + s.httpAddr + "/mcp"

	run := func(cred, org string) map[string]any {
		t.Helper()
		cmd := exec.CommandContext(ctx, "node", "mcp.mjs")
		cmd.Dir = dir
		cmd.Env = testenv.ToolEnv(t, "MCP_URL="+mcpURL, "AGENTGATE_API_KEY="+cred, "ORG="+org)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if e, ok := err.(*exec.ExitError); ok {
				ee = e
				t.Fatalf("node mcp.mjs: %v\n%s", err, ee.Stderr)
			}
			t.Fatalf("node mcp.mjs: %v", err)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("node mcp.mjs printed %q", out)
		}
		return v
	}

	// A person's access token (the owner, with x-org-id).
	v := run(tn.Token, tn.Workspace)
	if field(v, "server.name") != "agentgate" || field(v, "sessionId") == "" || fmt.Sprint(field(v, "tools")) != "[my_budget my_usage workspace_models]" {
		t.Fatalf("owner: %v", v)
	}
	if field(v, "models.isError") != false || !strings.Contains(toString(field(v, "models.text")), `"output": 16384`) {
		t.Errorf("workspace_models: %v", field(v, "models"))
	}
	if field(v, "budget.isError") != false || field(v, "usage.isError") != false || field(v, "usage.structured.total.requests") != float64(0) {
		t.Errorf("owner's budget and usage: %v %v", field(v, "budget"), field(v, "usage"))
	}
	// A device-flow token (a person's sign-in bound to the workspace at
	// approval): no x-org-id needed.
	d := &deviceSite{s: s, base: "http://" + s.httpAddr, tn: tn}
	st, start := formPost(t, ctx, d.base+"/auth/device/code", url.Values{"client_id": {deviceClient}, "supports_org_scope": {"true"}})
	if st != 200 {
		t.Fatalf("device code: %d %v", st, start)
	}
	d.webApprover(t, ctx).approve(t, ctx, fmt.Sprint(start["verification_uri_complete"]), fmt.Sprint(start["user_code"]), tn.Workspace)
	st, tok := formPost(t, ctx, d.base+"/auth/device/token", pollForm(deviceClient, fmt.Sprint(start["device_code"])))
	if st != 200 {
		t.Fatalf("device token: %d %v", st, tok)
	}
	v = run(fmt.Sprint(tok["access_token"]), "")
	if field(v, "budget.isError") != false || field(v, "models.isError") != false {
		t.Fatalf("device-flow token: %v", v)
	}
	// An Inference only key may use the models tool, not read spend.
	v = run(key, "")
	if field(v, "models.isError") != false || field(v, "budget.isError") != true || !strings.Contains(toString(field(v, "budget.text")), "Inference only") {
		t.Errorf("inference key: %v", v)
	}
	// No credential: 401 naming where the resource metadata is.
	st, _, err := call(ctx, httpClient, "POST", mcpURL, http.Header{"Content-Type": {"application/json"}}, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	if err != nil || st != 401 {
		t.Fatalf("no credential: %d %v", st, err)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", mcpURL, strings.NewReader(`{}`))
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("WWW-Authenticate"); !strings.Contains(h, `resource_metadata="http://`+s.httpAddr+`/.well-known/oauth-protected-resource"`) {
		t.Fatalf("WWW-Authenticate %q", h)
	}
}

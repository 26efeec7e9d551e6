package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// TestAgentMakesTheFailingTestPass: the real binary, an instance whose
// provider is the gateway of the same process, a provider scripted to
// read, edit and run `go test` in a temporary Go project. A client
// prompts "make the failing test pass", answers the bash permission ask
// through the API, and finds the file fixed on disk, the tool parts and
// the test output in the transcript, and the calls counted in stats.
func TestAgentMakesTheFailingTestPass(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain for the project's tests")
	}
	ctx := testContext(t, 3*time.Minute)
	const secret = "sk-provider-agent-SECRET"
	s, tn, p := fakeWorkspace(t, ctx, "Agent", secret)
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	steps := []fakeprovider.Step{
		{Text: "Let me look at the code.", Calls: []fakeprovider.Call{{ID: "call_read", Name: "read", Args: args(map[string]any{"filePath": "add.go"})}}},
		{Calls: []fakeprovider.Call{{ID: "call_edit", Name: "edit", Args: args(map[string]any{"filePath": "add.go", "oldString": "return a - b", "newString": "return a + b"})}}},
		{Calls: []fakeprovider.Call{{ID: "call_test", Name: "bash", Args: args(map[string]any{"command": "go test ./...", "description": "run the tests"})}}},
		{Text: "Fixed: Add subtracted; the test passes now."},
	}
	var mu sync.Mutex
	var bodies []string
	p.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(body))
		if n := len(bodies) - 1; n < len(steps) {
			return steps[n]
		}
		return fakeprovider.Step{Text: "done"}
	}})
	project := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":      "module example.com/calc\n\ngo 1.21\n",
		"add.go":      "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n",
		"add_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add(2, 3) != 5\")\n\t}\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(project, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gi := s.gatewayInstance(t, ctx, tn, p, secret, project, "")
	base, auth, key := gi.base, gi.auth, gi.key
	st, b, _ := call(ctx, httpClient, "POST", base+"/api/session", auth, map[string]any{"title": "fix it"})
	id := gjson.GetBytes(b, "data.id").String()
	if st != 200 || id == "" {
		t.Fatalf("create: %d %s", st, b)
	}
	if st, b, _ := call(ctx, httpClient, "POST", base+"/api/session/"+id+"/prompt", auth, map[string]any{"text": "make the failing test pass"}); st != 200 {
		t.Fatalf("prompt: %d %s", st, b)
	}

	// The bash call asks; the client answers through the API.
	var req gjson.Result
	waitFor(t, ctx, "the bash permission ask", func() bool {
		_, b, _ := call(ctx, httpClient, "GET", base+"/permission", auth, nil)
		req = gjson.ParseBytes(b).Get("0")
		return req.Exists()
	})
	if req.Get("permission").String() != "bash" || req.Get("sessionID").String() != id || req.Get("patterns.0").String() != "go test ./..." {
		t.Fatalf("ask: %s", req.Raw)
	}
	if st, b, _ := call(ctx, httpClient, "POST", base+"/permission/"+req.Get("id").String()+"/reply", auth, map[string]any{"reply": "once"}); st != 200 {
		t.Fatalf("reply: %d %s", st, b)
	}
	var ex []byte
	waitFor(t, ctx, "the run settles", func() bool {
		_, ex, _ = call(ctx, httpClient, "GET", base+"/api/experimental/session/"+id+"/export", auth, nil)
		return gjson.GetBytes(ex, `data.messages.#(type=="idle")#|#`).Int() >= 1
	})
	if b, _ := os.ReadFile(filepath.Join(project, "add.go")); !strings.Contains(string(b), "return a + b") {
		t.Fatalf("add.go on disk: %s", b)
	}
	tools := gjson.GetBytes(ex, `data.messages.#(type=="assistant")#.content.#(type=="tool")#|@flatten`).Array()
	if len(tools) != 3 {
		t.Fatalf("tool parts: %s", ex)
	}
	for i, name := range []string{"read", "edit", "bash"} {
		if tools[i].Get("name").String() != name || tools[i].Get("state.status").String() != "completed" {
			t.Fatalf("part %d: %s", i, tools[i].Raw)
		}
	}
	if out := tools[2].Get("state.content.0.text").String(); !strings.Contains(out, "ok  \texample.com/calc") {
		t.Fatalf("test output: %s", out)
	}
	if gjson.GetBytes(ex, "data.info.outcome").String() != "succeeded" {
		t.Fatalf("outcome: %s", gjson.GetBytes(ex, "data.info").Raw)
	}
	mu.Lock()
	if len(bodies) != 4 || !strings.Contains(bodies[1], "return a - b") || !strings.Contains(bodies[3], "ok  \\texample.com/calc") {
		mu.Unlock()
		t.Fatalf("the provider did not read the tool results: %d requests", len(bodies))
	}
	mu.Unlock()
	_, b, _ = call(ctx, httpClient, "GET", base+"/api/experimental/session/stats?from=0&to=9999999999999&tools=detail", auth, nil)
	if gjson.GetBytes(b, "data.tools.totals.calls").Int() != 3 || gjson.GetBytes(b, "data.tools.totals.succeeded").Int() != 3 {
		t.Fatalf("stats: %s", b)
	}
	// Four steps metered by the gateway; the key never reaches the log.
	if strings.Contains(s.stderr.String(), key.Key) || strings.Contains(s.stderr.String(), secret) {
		t.Fatal("a key is in the log")
	}
}

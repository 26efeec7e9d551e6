package server

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	"github.com/agentgate/agentgate/internal/testenv"
)

// installDCP installs testdata/dcp (@tarquinen/opencode-dcp 3.1.14 and its
// runtime dependencies, at the lockfile's versions and integrity, install
// scripts off, peers left to examples/clients) into dir/node_modules.
func installDCP(t *testing.T, dir string) {
	t.Helper()
	if testing.Short() {
		t.Skip("installs a plugin from the npm registry")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("npm is not installed")
		}
		t.Skip("npm is not installed")
	}
	_, file, _, _ := runtime.Caller(0)
	os.MkdirAll(dir, 0o755)
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "testdata", "dcp", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := testenv.Command(t, t.Context(), "npm", "install", "--ignore-scripts", "--legacy-peer-deps", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
}

// TestDCPCompressRuns: @tarquinen/opencode-dcp 3.1.14, as released,
// loaded as a local plugin of the project (.opencode/plugin/dcp.js
// re-exports the package, installed in .opencode/node_modules as OpenCode
// installs a project's plugin dependencies): it is active with its hooks
// and the compress tool; the scripted model calls compress on the first
// exchange (m0001..m0002, the ids dcp's messages transform injected), the
// tool asks its permission (ctx.ask), sets its title (ctx.metadata),
// reads the session back through its client and runs to completion; the
// next request carries dcp's summary in place of the exchange, and dcp's
// notice is stored but not sent to the model. The client routes dcp
// called are logged (and all answered).
func TestDCPCompressRuns(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Text: "I read the README: it explains the build."},
		{Calls: []fakeprovider.Call{call("call_c", "compress", map[string]any{"topic": "README exploration",
			"content": []any{map[string]any{"startId": "m0001", "endId": "m0002", "summary": "SUMMARY-OF-EXPLORATION: the README explains the build."}}})}},
		{Text: "compressed."},
	}}
	h := newAgentHarness(t, "chat", sc)
	installDCP(t, filepath.Join(h.dir, ".opencode"))
	// No update check against the registry from a test.
	os.WriteFile(filepath.Join(h.dir, ".opencode", "dcp.jsonc"), []byte(`{"autoUpdate": false}`), 0o644)
	logs := withPlugins(t, h, map[string]string{
		"dcp.js": `export { default } from "@tarquinen/opencode-dcp";` + "\n",
	}, func(o *pluginhost.Options) { o.LoadTimeout = 60e9 })

	p := pluginList(t, h)["dcp"]
	t.Logf("dcp runs with the sandbox %s", p.Get("features.sandbox").String())
	if p.Get("state.status").String() != "active" || p.Get("features.tools.0").String() != "compress" {
		t.Fatalf("dcp: %s", p.Raw)
	}
	for _, hook := range []string{"experimental.chat.messages.transform", "experimental.chat.system.transform", "experimental.text.complete", "event", "config"} {
		if !strings.Contains(p.Get("features.hooks").Raw, `"`+hook+`"`) {
			t.Fatalf("dcp lacks %s: %s", hook, p.Raw)
		}
	}
	if !strings.HasPrefix(p.Get("features.unused").Get(gjson.Escape("command.execute.before")).String(), "not used by this server") {
		t.Fatalf("dcp's command hook is not reported: %s", p.Raw)
	}

	sid := newSession(t, h, map[string]any{"title": "dcp"})
	h.prompt(sid, "explore the project", nil)
	h.waitIdle(sid, 1)
	h.prompt(sid, "compress the exploration", nil)
	msgs := h.waitIdle(sid, 2)
	parts := toolParts(msgs)
	if len(parts) != 1 {
		t.Fatalf("tool parts: %v", parts)
	}
	c := parts[0]
	if c.Get("name").String() != "compress" || c.Get("state.status").String() != "completed" ||
		!strings.HasPrefix(c.Get("state.content.0.text").String(), "Compressed 2 messages") ||
		c.Get("state.metadata.title").String() != "Compress Range: README exploration" {
		t.Fatalf("the compress part: %s", c.Raw)
	}
	seen := sc.seen()
	if len(seen) != 3 {
		t.Fatalf("requests: %d", len(seen))
	}
	// dcp's system prompt and message ids reached the model, and after the
	// compression its summary stands for the exchange.
	if !strings.Contains(seen[1], "m0001") || !strings.Contains(seen[1], "compress") {
		t.Fatalf("dcp's transforms did not reach the second request: %s", seen[1])
	}
	if !strings.Contains(seen[2], "SUMMARY-OF-EXPLORATION") || strings.Contains(seen[2], "I read the README: it explains the build.") {
		t.Fatalf("the request after the compression: %s", seen[2])
	}
	// dcp's notice is a stored user message the model never reads.
	notice := ""
	for _, m := range ofType(msgs, "user") {
		if md, _ := m["metadata"].(map[string]any); md["ignored"] == true {
			notice, _ = m["text"].(string)
		}
	}
	if notice == "" || strings.Contains(seen[2], notice[:min(len(notice), 40)]) {
		t.Fatalf("dcp's notice: %q", notice)
	}
	routes := map[string]bool{}
	for _, e := range logs.FilterMessage("plugin client request").All() {
		f := e.ContextMap()
		route := f["method"].(string) + " " + f["path"].(string)
		routes[route] = true
		if st := f["status"].(int64); st >= 300 {
			t.Errorf("dcp's client call %s answered %d", route, st)
		}
	}
	list := make([]string, 0, len(routes))
	for r := range routes {
		list = append(list, strings.ReplaceAll(r, sid, "{id}"))
	}
	sort.Strings(list)
	t.Logf("client routes dcp called: %s", strings.Join(list, ", "))
	if !routes["GET /session/"+sid+"/message"] || !routes["POST /session/"+sid+"/message"] {
		t.Fatalf("dcp's client did not read the session and post its notice: %v", list)
	}
}

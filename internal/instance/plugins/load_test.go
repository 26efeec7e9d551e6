package plugins

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	"github.com/agentgate/agentgate/internal/sandbox"
	"github.com/agentgate/agentgate/internal/testenv"
)

// testBun is the Bun npm installs in examples/clients (skipped when it is
// missing, failed when CI is set).
func testBun(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "clients", "node_modules", "@oven", "bun-linux-x64", "bin", "bun")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: run npm install in examples/clients (.ci/run does)", p)
		}
		t.Skipf("%s is missing: run npm install in examples/clients", p)
	}
	return p
}

// TestProjectPackageRuns: a package a project's opencode.json names is
// installed from the registry with its dependency and its peer, loads in
// the plugin host — in the sandbox when the host can make one, reading
// the installed tree — and its tool, which imports both, runs. After a
// reload that changes nothing, the registry is not asked again.
func TestProjectPackageRuns(t *testing.T) {
	reg := startRegistry(t)
	publish(reg, "opencode-greet", "1.0.0", map[string]any{
		"type": "module", "dependencies": deps("greeting", "^2.0.0"), "peerDependencies": deps("@opencode-ai/plugin", ">=1")},
		"index.js", `import { tool } from "@opencode-ai/plugin";
import { hello } from "greeting";
export const Greet = async ({ directory }) => ({
  tool: {
    greet: tool({
      description: "Greets someone",
      args: { name: tool.schema.string().describe("who") },
      async execute(args) { return hello(args.name) + " from " + directory; },
    }),
  },
});
`)
	publish(reg, "greeting", "2.4.1", map[string]any{"type": "module"}, "index.js", `export const hello = (n) => "hello, " + n;`)
	publish(reg, "@opencode-ai/plugin", "1.18.33", map[string]any{"type": "module"}, "index.js",
		`export function tool(d) { return d; }
tool.schema = { string: () => ({ describe(d) { return { __jsonSchema: { type: "string", description: d } }; } }) };`)

	data := t.TempDir()
	m, err := New(Options{Registry: reg.URL, Dir: filepath.Join(data, "plugins")})
	if err != nil {
		t.Fatal(err)
	}
	sb := sandbox.New(sandbox.Config{Hidden: []string{data}})
	if st := sb.Status(); st.Mode != "enforced" {
		sb = sandbox.New(sandbox.Config{Off: true})
	}
	host, err := pluginhost.New(pluginhost.Options{Bun: testBun(t), Dir: filepath.Join(data, "plugin-host"), Sandbox: sb,
		Env: append(testenv.ToolVars(t), "PATH="+os.Getenv("PATH")), LoadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	m.SetRuntime(&Runtime{Host: host})
	project := writeProject(t, map[string]string{"opencode.json": `{"plugin": ["opencode-greet@^1"]}`})
	loc := Location{Dir: project, ProjectDir: project}

	p := byID(m.Running(context.Background(), loc))["opencode-greet"]
	if p.State.Status != "active" || p.Source.Version != "1.0.0" || p.Features["sandbox"] != sb.Status().Mode {
		t.Fatalf("opencode-greet = %+v", p)
	}
	tools := m.Tools(context.Background(), loc)
	if len(tools) != 1 || tools[0].Name != "greet" || !strings.Contains(string(tools[0].Schema), `"who"`) {
		t.Fatalf("tools = %+v", tools)
	}
	args, _ := json.Marshal(map[string]string{"name": "Ann"})
	res, err := m.RunTool(context.Background(), loc, tools[0].Plugin, "greet", args, pluginhost.ToolContext{SessionID: "ses_1", CallID: "c1"})
	if err != nil || res.Output != "hello, Ann from "+project {
		t.Fatalf("greet = %+v, %v", res, err)
	}
	hits := reg.Hits("")
	m.Reload()
	if p := byID(m.Running(context.Background(), loc))["opencode-greet"]; p.State.Status != "active" || reg.Hits("") != hits {
		t.Fatalf("after a reload: %+v, %d more requests", p, reg.Hits("")-hits)
	}
}

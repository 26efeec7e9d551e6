package pluginhost

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/testenv"
)

// clientsModules is examples/clients/node_modules, where npm installs Bun
// (@oven/bun-linux-x64), @opencode-ai/plugin and @opencode-ai/sdk.
func clientsModules(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "clients", "node_modules")
}

// BunPath is the Bun the tests run: from examples/clients (skipped when
// npm has not installed it, failed when CI is set).
func bunPath(t *testing.T) string {
	t.Helper()
	p := filepath.Join(clientsModules(t), "@oven", "bun-linux-x64", "bin", "bun")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: run npm install in examples/clients (.ci/run does)", p)
		}
		t.Skipf("%s is missing: run npm install in examples/clients", p)
	}
	return p
}

func newTestHost(t *testing.T, modules string, mod func(*Options)) *Host {
	t.Helper()
	// Without the sandbox, Bun runs with PATH and a temporary home,
	// XDG directories, TMPDIR and install cache (testenv.ToolVars).
	o := Options{Bun: bunPath(t), Modules: modules, Dir: t.TempDir(), Env: append(testenv.ToolVars(t), "PATH="+os.Getenv("PATH")),
		CallTimeout: 3 * time.Second, LoadTimeout: 30 * time.Second, Backoff: 50 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// writePlugins writes plugin files into a project's .opencode/plugin and
// returns their specs in name order.
func writePlugins(t *testing.T, dir string, files map[string]string) []Spec {
	t.Helper()
	pd := filepath.Join(dir, ".opencode", "plugin")
	os.MkdirAll(pd, 0o755)
	var specs []Spec
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(pd, name)
		if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, Spec{ID: strings.TrimSuffix(name, filepath.Ext(name)), Entry: p})
	}
	return specs
}

func load(t *testing.T, h *Host, dir string, specs []Spec) map[string]Status {
	t.Helper()
	st, err := h.Load(t.Context(), dir, func() LoadInput {
		return LoadInput{Directory: dir, Worktree: dir, ServerURL: "http://127.0.0.1:9", Auth: "Basic x", Plugins: specs}
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Status{}
	for _, s := range st {
		out[s.ID] = s
	}
	return out
}

// TestHostLoadsToolsAndHooks: a plugin using the host's @opencode-ai/plugin
// stand-in defines a tool (its schema as JSON Schema) and hooks; the tool
// runs with its context, before/after hooks change arguments and output,
// and $ runs in the location.
func TestHostLoadsToolsAndHooks(t *testing.T) {
	h := newTestHost(t, "", nil)
	dir := t.TempDir()
	specs := writePlugins(t, dir, map[string]string{"greet.ts": `
import { tool } from "@opencode-ai/plugin";
export const Greet = async ({ directory, $ }) => ({
  tool: {
    greet: tool({
      description: "Greets someone",
      args: { name: tool.schema.string().describe("who"), times: tool.schema.number().int().optional() },
      async execute(args, ctx) {
        const here = (await $` + "`pwd`" + `.text()).trim();
        return "hello " + args.name + " x" + (args.times ?? 1) + " from " + ctx.sessionID + " in " + here;
      },
    }),
  },
  "tool.execute.before": async (input, output) => { if (input.tool === "greet") output.args.name = output.args.name.toUpperCase(); },
  "tool.execute.after": async (input, output) => { output.output += " (checked)"; },
});
`})
	st := load(t, h, dir, specs)
	g := st["greet"]
	if !g.OK || len(g.Tools) != 1 || g.Tools[0].Name != "greet" {
		t.Fatalf("status: %+v", g)
	}
	sch := string(g.Tools[0].Schema)
	if gjson.Get(sch, "properties.name.type").String() != "string" || gjson.Get(sch, "properties.name.description").String() != "who" ||
		gjson.Get(sch, "properties.times.type").String() != "integer" || gjson.Get(sch, "required").Raw != `["name"]` {
		t.Fatalf("schema: %s", sch)
	}
	for _, hook := range []string{"tool", "tool.execute.after", "tool.execute.before"} {
		if !strings.Contains(strings.Join(g.Hooks, ","), hook) {
			t.Fatalf("hooks %v lack %s", g.Hooks, hook)
		}
	}
	out, _, err := h.Trigger(t.Context(), dir, "tool.execute.before", map[string]any{"tool": "greet"}, map[string]any{"args": map[string]any{"name": "ada"}})
	if err != nil || gjson.Get(mustJSON(out), "args.name").String() != "ADA" {
		t.Fatalf("before: %v %v", out, err)
	}
	res, err := h.Tool(t.Context(), dir, dir, "greet", "greet", json.RawMessage(`{"name":"ADA"}`), ToolContext{SessionID: "ses_1"})
	if err != nil || res.Output != "hello ADA x1 from ses_1 in "+dir {
		t.Fatalf("tool: %+v %v", res, err)
	}
	out, _, err = h.Trigger(t.Context(), dir, "tool.execute.after", map[string]any{"tool": "greet"}, map[string]any{"output": res.Output})
	if err != nil || !strings.HasSuffix(out["output"].(string), "(checked)") {
		t.Fatalf("after: %v %v", out, err)
	}
	// A hook no plugin has passes the output through without a call.
	if out, _, err := h.Trigger(t.Context(), dir, "chat.params", nil, map[string]any{"temperature": 0.5}); err != nil || out["temperature"] != 0.5 {
		t.Fatalf("chat.params: %v %v", out, err)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestHostBadPlugins: a plugin that throws at load, one without a plugin
// function, a tool with an invalid schema, a package without its entry
// module fail alone, with the loader's error; the others load.
func TestHostBadPlugins(t *testing.T) {
	h := newTestHost(t, "", nil)
	dir := t.TempDir()
	specs := writePlugins(t, dir, map[string]string{
		"a-good.js":    `export default async () => ({ tool: { ok: { description: "ok", args: {}, execute: async () => "fine" } } });`,
		"b-throws.js":  `export const P = async () => { throw new Error("boom at load"); };`,
		"c-nothing.js": `export const notAPlugin = 42;`,
		"d-schema.js":  `export const P = async () => ({ tool: { bad: { description: "x", args: { n: { notASchema: true } }, execute: async () => "" } } });`,
		"e-syntax.js":  `export const P = async () => ({ ;`,
		"g-import.js": `import pad from "agentgate-no-such-package-zz";
export const P = async () => ({});`,
	})
	specs = append(specs, Spec{ID: "f-missing", Entry: filepath.Join(dir, "node_modules", "nope", "index.js")})
	st := load(t, h, dir, specs)
	if !st["a-good"].OK {
		t.Fatalf("the good plugin: %+v", st["a-good"])
	}
	for id, want := range map[string]string{"b-throws": "boom at load", "c-nothing": "exports no plugin function",
		"d-schema": "tool bad: invalid args schema", "e-syntax": "", "f-missing": "",
		// an unknown package is an error, never a download
		"g-import": "Cannot find package 'agentgate-no-such-package-zz'"} {
		if s := st[id]; s.OK || s.Error == "" || !strings.Contains(s.Error, want) {
			t.Errorf("%s: %+v, want an error with %q", id, s, want)
		}
	}
	if res, err := h.Tool(t.Context(), dir, dir, "a-good", "ok", json.RawMessage(`{}`), ToolContext{}); err != nil || res.Output != "fine" {
		t.Fatalf("the good plugin's tool: %+v %v", res, err)
	}
}

// TestHostModuleShapes: a module whose default export is a plugin module
// ({id, server}) loads its server function only; a module exporting a
// helper function beside its plugin gets the plugin's hooks, not the
// input the helper hands back; an object export with a server function
// is a plugin. The process works in the location's directory.
func TestHostModuleShapes(t *testing.T) {
	h := newTestHost(t, "", nil)
	dir := t.TempDir()
	specs := writePlugins(t, dir, map[string]string{
		"v1.js": `export const helperNotCalled = () => { throw new Error("the default module's siblings are not plugins"); };
export default { id: "v1", server: async () => ({ tool: { v1: { description: "v1", args: {}, execute: async () => "from v1 in " + process.cwd() } } }) };`,
		"helper.js": `export const resolveFolder = (worktree) => worktree;
export const plugin = async () => ({ event: async () => {} });
export default plugin;`,
		"obj.js": `export const P = { server: async () => ({ "chat.params": async () => {} }) };`,
	})
	st := load(t, h, dir, specs)
	if s := st["v1"]; !s.OK || len(s.Tools) != 1 || s.Tools[0].Name != "v1" {
		t.Fatalf("v1: %+v", s)
	}
	if s := st["helper"]; !s.OK || strings.Join(s.Hooks, ",") != "event" {
		t.Fatalf("helper: %+v", s)
	}
	if s := st["obj"]; !s.OK || strings.Join(s.Hooks, ",") != "chat.params" {
		t.Fatalf("obj: %+v", s)
	}
	// The process works in its location, as OpenCode does in its project.
	if res, err := h.Tool(t.Context(), dir, dir, "v1", "v1", json.RawMessage(`{}`), ToolContext{}); err != nil || res.Output != "from v1 in "+dir {
		t.Fatalf("v1 tool: %+v %v", res, err)
	}
}

// TestHostSurvivesHangsGarbageAndExits: a hook that never returns fails
// that call at its deadline; a hook that blocks the host gets it killed
// and started again; stdout garbage is dropped; a plugin that exits the
// process makes the next call restart it after the backoff.
func TestHostSurvivesHangsGarbageAndExits(t *testing.T) {
	h := newTestHost(t, "", func(o *Options) { o.CallTimeout = 500 * time.Millisecond })
	dir := t.TempDir()
	specs := writePlugins(t, dir, map[string]string{"p.js": `
export const P = async () => {
  process.stdout.write("garbage without a newline ");
  process.stdout.write("\u001eagentgate-host {not json}\n");
  console.log("plugin chatter");
  return {
    "chat.params": async (input, output) => {
      if (input.mode === "hang") await new Promise(() => {});
      if (input.mode === "spin") for (;;) {}
      if (input.mode === "throw") throw new Error("hook failed");
      if (input.mode === "exit") process.exit(3);
      process.stdout.write("more garbage\n");
      output.temperature = 0.1;
    },
  };
};`})
	ctx := t.Context()
	var hookErrs []HookError
	trigger := func(mode string) (map[string]any, error) {
		if _, err := h.Load(ctx, dir, func() LoadInput { return LoadInput{Directory: dir, Worktree: dir, Plugins: specs} }); err != nil {
			return nil, err
		}
		out, errs, err := h.Trigger(ctx, dir, "chat.params", map[string]any{"mode": mode}, map[string]any{"temperature": 1})
		hookErrs = errs
		return out, err
	}
	if out, err := trigger("ok"); err != nil || out["temperature"] != 0.1 {
		t.Fatalf("ok: %v %v", out, err)
	}
	// A hook that throws leaves the output as it found it and is reported.
	if out, err := trigger("throw"); err != nil || out["temperature"] != float64(1) || len(hookErrs) != 1 ||
		hookErrs[0].Plugin != "p" || !strings.Contains(hookErrs[0].Error, "hook failed") {
		t.Fatalf("throw: %v %v %+v", out, err, hookErrs)
	}
	start := time.Now()
	if _, err := trigger("hang"); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("hang: %v after %v", err, time.Since(start))
	}
	if out, err := trigger("ok"); err != nil || out["temperature"] != 0.1 {
		t.Fatalf("after a hung hook the host answers: %v %v", out, err)
	}
	gen := h.genOf(dir)
	if _, err := trigger("spin"); err == nil {
		t.Fatal("a spinning hook answered")
	}
	waitFor(t, func() bool { _, ok := h.Loaded(dir); return !ok })
	if out, err := trigger("ok"); err != nil || out["temperature"] != 0.1 || h.genOf(dir) == gen {
		t.Fatalf("after the spin the host was not restarted: %v %v (gen %d → %d)", out, err, gen, h.genOf(dir))
	}
	if _, err := trigger("exit"); err == nil {
		t.Fatal("exit answered")
	}
	waitFor(t, func() bool {
		_, err := trigger("ok")
		return err == nil
	})
	// What the plugins print reaches the log through a pipe: wait for it.
	var logged []byte
	waitFor(t, func() bool {
		logged, _ = os.ReadFile(h.LogPath(dir))
		return strings.Contains(string(logged), "plugin chatter")
	})
}

// genOf is the count of a location's process starts.
func (h *Host) genOf(dir string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.slots[dir]; s != nil {
		return s.gen
	}
	return 0
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHostRealPluginPackage: with examples/clients' node_modules, a plugin
// importing the released @opencode-ai/plugin gets zod schemas converted,
// and its client is the released SDK's.
func TestHostRealPluginPackage(t *testing.T) {
	modules := clientsModules(t)
	if _, err := os.Stat(filepath.Join(modules, "@opencode-ai", "plugin")); err != nil {
		t.Skip("@opencode-ai/plugin is not installed in examples/clients")
	}
	h := newTestHost(t, modules, nil)
	dir := t.TempDir()
	specs := writePlugins(t, dir, map[string]string{"z.ts": `
import { tool } from "@opencode-ai/plugin";
export const Z = async ({ client }) => ({
  tool: {
    pick: tool({ description: "Picks", args: { color: tool.schema.enum(["red", "blue"]).describe("a color"), n: tool.schema.number().optional() },
      async execute(args) { return typeof client.session.list + ":" + args.color; } }),
  },
});`})
	st := load(t, h, dir, specs)
	z := st["z"]
	if !z.OK || len(z.Tools) != 1 {
		t.Fatalf("%+v", z)
	}
	sch := string(z.Tools[0].Schema)
	if gjson.Get(sch, "properties.color.enum").Raw != `["red","blue"]` || gjson.Get(sch, "required").Raw != `["color"]` {
		t.Fatalf("schema: %s", sch)
	}
	res, err := h.Tool(t.Context(), dir, dir, "z", "pick", json.RawMessage(`{"color":"red"}`), ToolContext{})
	if err != nil || res.Output != "function:red" {
		t.Fatalf("%+v %v", res, err)
	}
}

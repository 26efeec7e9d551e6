package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	"github.com/agentgate/agentgate/internal/instance/plugins"
	"github.com/agentgate/agentgate/internal/sandbox"
	"github.com/agentgate/agentgate/internal/testenv"
)

// testBun is the Bun npm installs in examples/clients (skipped when it is
// missing, failed when CI is set).
func testBun(t *testing.T) (bun, modules string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	modules = filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "clients", "node_modules")
	bun = filepath.Join(modules, "@oven", "bun-linux-x64", "bin", "bun")
	if _, err := os.Stat(bun); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: run npm install in examples/clients (.ci/run does)", bun)
		}
		t.Skipf("%s is missing: run npm install in examples/clients", bun)
	}
	return bun, modules
}

// lastPluginToken is the last token withPlugins gave plugins.
var lastPluginToken atomic.Value

// withPlugins gives a drain harness a plugin host over its manager, and
// the local plugin files in its project.
func withPlugins(t *testing.T, h *drainHarness, files map[string]string, mod func(*pluginhost.Options)) *observer.ObservedLogs {
	t.Helper()
	bun, modules := testBun(t)
	pd := filepath.Join(h.dir, ".opencode", "plugin")
	os.MkdirAll(pd, 0o755)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(pd, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	core, logs := observer.New(zapcore.DebugLevel)
	// Without the sandbox, Bun runs with PATH and a temporary home, XDG
	// directories, TMPDIR and install cache (testenv.ToolVars).
	o := pluginhost.Options{Bun: bun, Modules: modules, Dir: t.TempDir(), Env: append(testenv.ToolVars(t), "PATH="+os.Getenv("PATH")),
		CallTimeout: 5 * time.Second, LoadTimeout: 30 * time.Second, Backoff: 50 * time.Millisecond, Handler: h.srv, Logger: zap.New(core)}
	if mod != nil {
		mod(&o)
	}
	host, err := pluginhost.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	m := h.opts.Plugins
	m.SetLogger(zap.New(core))
	m.SetRuntime(&plugins.Runtime{Host: host, Auth: func(dir string) string {
		tok := ScopedToken(dir, time.Hour)
		lastPluginToken.Store(tok)
		return "Bearer " + tok
	}})
	h.runner.SetPlugins(m)
	t.Cleanup(h.opts.Bus.Tap(m.Event))
	return logs
}

func pluginList(t *testing.T, h *drainHarness) map[string]gjson.Result {
	t.Helper()
	r := h.send("GET", "/api/plugin", nil)
	if r.status != 200 {
		t.Fatalf("plugin list: %d %s", r.status, r.body)
	}
	out := map[string]gjson.Result{}
	for _, p := range gjson.GetBytes(r.body, "data").Array() {
		out[p.Get("id").String()] = p
	}
	return out
}

// TestPluginToolInTheAgentLoop: a local plugin's tool is offered to the
// model and run when it calls it; tool.execute.before's change is in the
// transcript with the result; shell.env reaches bash; chat.headers reaches
// the provider; chat.message and event saw the session; the plugin's
// client (the released SDK) reads the session back and logs through
// POST /log.
func TestPluginToolInTheAgentLoop(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("call_w", "weather", map[string]any{"city": "Paris"})}},
		{Calls: []fakeprovider.Call{call("call_b", "bash", map[string]any{"command": "echo $PLUGIN_GREETING", "description": "greet"})}},
		{Text: "It is sunny."},
	}}
	h := newAgentHarness(t, "chat", sc)
	withPlugins(t, h, map[string]string{"weather.ts": `
import { tool } from "@opencode-ai/plugin";
import { appendFileSync } from "node:fs";
export const Weather = async ({ directory, client }) => ({
  tool: {
    weather: tool({
      description: "The weather in a city",
      args: { city: tool.schema.string().describe("the city") },
      async execute(args, ctx) {
        const s = await client.session.get({ path: { id: ctx.sessionID } });
        await client.app.log({ body: { service: "weather", level: "info", message: "looked up " + args.city } });
        return "sunny in " + args.city + " for " + s.data.title;
      },
    }),
  },
  "tool.execute.before": async (input, output) => { if (input.tool === "weather") output.args.city += " (checked)"; },
  "shell.env": async (input, output) => { output.env.PLUGIN_GREETING = "hi-from-plugin"; },
  "chat.headers": async (input, output) => { output.headers["x-plugin"] = "weather"; },
  "chat.message": async (input, output) => { appendFileSync(directory + "/messages.log", output.parts[0].text + "\n"); },
  event: async ({ event }) => { appendFileSync(directory + "/events.log", event.type + "\n"); },
});`}, nil)
	r := h.send("POST", "/api/session", map[string]any{"title": "plugin run",
		"permissions": []any{map[string]any{"action": "bash", "resource": "*", "effect": "allow"}}})
	sid := gjson.GetBytes(r.body, "data.id").String()
	h.prompt(sid, "what is the weather", nil)
	msgs := h.waitIdle(sid, 1)
	parts := toolParts(msgs)
	if len(parts) != 2 {
		t.Fatalf("tool parts: %v", parts)
	}
	w := parts[0]
	if w.Get("name").String() != "weather" || w.Get("state.status").String() != "completed" || w.Get("state.input.city").String() != "Paris (checked)" ||
		w.Get("state.content.0.text").String() != "sunny in Paris (checked) for plugin run" {
		t.Fatalf("the plugin tool's part: %s", w.Raw)
	}
	if out := parts[1].Get("state.content.0.text").String(); !strings.Contains(out, "hi-from-plugin") {
		t.Fatalf("shell.env did not reach bash: %s", parts[1].Raw)
	}
	// The tool was offered with its schema, and chat.headers went out.
	first := turns(h.fake)[0]
	if !strings.Contains(string(first.Body), `"name":"weather"`) || !strings.Contains(string(first.Body), `"the city"`) {
		t.Fatalf("the first request did not offer the plugin tool: %s", first.Body)
	}
	if first.Header.Get("X-Plugin") != "weather" {
		t.Fatalf("chat.headers: %v", first.Header)
	}
	waitFile(t, filepath.Join(h.dir, "events.log"), "session.next.tool.called")
	waitFile(t, filepath.Join(h.dir, "messages.log"), "what is the weather")

	p := pluginList(t, h)["weather"]
	if p.Get("state.status").String() != "active" || p.Get("features.tools.0").String() != "weather" ||
		!strings.Contains(p.Get("features.hooks").Raw, `"tool.execute.before"`) {
		t.Fatalf("status: %s", p.Raw)
	}
}

func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lacks %q: %q", path, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPluginStatusTellsTheTruth: a plugin that throws at load is failed
// with its error and a ref into the log; of two plugins defining one tool
// name the first (by file name) wins and the other's features say so;
// without a plugin host every local plugin is failed.
func TestPluginStatusTellsTheTruth(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{call("c1", "same", map[string]any{})}}, {Text: "ok"}}}
	h := newAgentHarness(t, "chat", sc)
	logs := withPlugins(t, h, map[string]string{
		"a-dup.js":  `export const A = async () => ({ tool: { same: { description: "from a", args: {}, execute: async () => "a wins" } } });`,
		"b-dup.js":  `export const B = async () => ({ tool: { same: { description: "from b", args: {}, execute: async () => "b lost" } } });`,
		"throws.js": `export const T = async () => { throw new Error("boom at load"); };`,
	}, nil)
	list := pluginList(t, h)
	th := list["throws"]
	ref := th.Get("state.ref").String()
	if th.Get("state.status").String() != "failed" || !strings.Contains(th.Get("state.error").String(), "boom at load") || ref == "" {
		t.Fatalf("throws: %s", th.Raw)
	}
	if logs.FilterField(zap.String("ref", ref)).Len() != 1 {
		t.Fatalf("no log line has ref %s", ref)
	}
	if list["a-dup"].Get("state.status").String() != "active" || list["b-dup"].Get("features.shadowed.0").String() != "same (defined first by a-dup)" {
		t.Fatalf("duplicates: %s %s", list["a-dup"].Raw, list["b-dup"].Raw)
	}
	r := h.send("POST", "/api/session", map[string]any{"title": "dup"})
	sid := gjson.GetBytes(r.body, "data.id").String()
	h.prompt(sid, "go", nil)
	parts := toolParts(h.waitIdle(sid, 1))
	if len(parts) != 1 || parts[0].Get("state.content.0.text").String() != "a wins" {
		t.Fatalf("the duplicate tool: %v", parts)
	}
	if n := strings.Count(string(turns(h.fake)[0].Body), `"name":"same"`); n != 1 {
		t.Fatalf("the tool was offered %d times", n)
	}

	h.opts.Plugins.SetRuntime(&plugins.Runtime{NoHost: "no plugin host: Bun is not on PATH"})
	for id, p := range pluginList(t, h) {
		if p.Get("source.type").String() == "local" && (p.Get("state.status").String() != "failed" || !strings.Contains(p.Get("state.error").String(), "Bun is not on PATH")) {
			t.Fatalf("%s without a host: %s", id, p.Raw)
		}
	}
}

// TestPluginFaultsLeaveTheServerAnswering: a chat.params hook that never
// returns fails at its deadline and the step goes on; a plugin tool that
// exits the host fails that call, the run goes on and the next run loads
// the plugins again; the server answers throughout.
func TestPluginFaultsLeaveTheServerAnswering(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "crash", map[string]any{})}},
		{Text: "carried on"},
		{Calls: []fakeprovider.Call{call("c2", "echo", map[string]any{"text": "back"})}},
		{Text: "fine again"},
	}}
	h := newAgentHarness(t, "chat", sc)
	withPlugins(t, h, map[string]string{"faulty.js": `
export const F = async () => ({
  tool: {
    crash: { description: "exits the host", args: {}, execute: async () => { process.exit(7); } },
    echo: { description: "echoes", args: {}, execute: async (a) => "echo " + JSON.stringify(a) },
  },
  "chat.params": async () => { await new Promise(() => {}); },
});`}, func(o *pluginhost.Options) { o.CallTimeout = 300 * time.Millisecond })
	r := h.send("POST", "/api/session", map[string]any{"title": "faults"})
	sid := gjson.GetBytes(r.body, "data.id").String()
	h.prompt(sid, "crash it", nil)
	msgs := h.waitIdle(sid, 1)
	parts := toolParts(msgs)
	if len(parts) != 1 || parts[0].Get("state.status").String() != "error" {
		t.Fatalf("the crashing tool: %v", parts)
	}
	raw, _ := json.Marshal(msgs)
	if !strings.Contains(string(raw), "carried on") {
		t.Fatalf("the run did not go on: %s", raw)
	}
	if r := h.send("GET", "/api/info", nil); r.status != 200 {
		t.Fatalf("info: %d", r.status)
	}
	// The host starts again (after its backoff) for the next run.
	time.Sleep(200 * time.Millisecond)
	h.prompt(sid, "again", nil)
	parts = toolParts(h.waitIdle(sid, 2))
	if len(parts) != 2 || parts[1].Get("state.content.0.text").String() != `echo {"text":"back"}` {
		t.Fatalf("after the crash: %v", parts)
	}
}

// TestPluginClientIsScopedToItsLocation: the plugins' client (the
// released SDK, over the host's stdio) lists its location's sessions and
// reads them; a request for another directory, for another location's
// session, to reload the locations, to pair, or to create a session with
// permission rules is refused; the plugins' environment holds no
// instance password, and their token is no credential on the HTTP API.
func TestPluginClientIsScopedToItsLocation(t *testing.T) {
	h := newAgentHarness(t, "chat", &script{})
	other := canonicalTempDir(t)
	withPlugins(t, h, map[string]string{"probe.js": `
export const Probe = async ({ client }) => {
  const st = async (p) => { const r = await p; return r.response ? r.response.status : "no response"; };
  const run = async (fn) => JSON.stringify(await fn());
  return {
    tool: {
      mine: { description: "", args: {}, execute: () => run(async () => {
        const l = await client.session.list();
        return { status: l.response.status, dirs: l.data.map((s) => s.directory), ids: l.data.map((s) => s.id) };
      }) },
      get: { description: "", args: {}, execute: (a) => run(async () => st(client.session.get({ path: { id: a.id } }))) },
      otherDir: { description: "", args: {}, execute: (a) => run(async () => st(client.session.list({ query: { directory: a.dir } }))) },
      otherCreate: { description: "", args: {}, execute: (a) => run(async () =>
        st(client._client.post({ url: "/api/session", body: { title: "x", location: { directory: a.dir } } }))) },
      reload: { description: "", args: {}, execute: () => run(async () => st(client._client.post({ url: "/api/location/reload" }))) },
      pair: { description: "", args: {}, execute: () => run(async () => st(client._client.post({ url: "/api/pair" }))) },
      grant: { description: "", args: {}, execute: () => run(async () => [
        await st(client.session.create({ body: { title: "x", permission: [{ permission: "bash", pattern: "*", action: "allow" }] } })),
        await st(client._client.post({ url: "/api/session", body: { title: "x", permissions: [{ action: "bash", resource: "*", effect: "allow" }] } })),
      ]) },
      create: { description: "", args: {}, execute: () => run(async () => {
        const r = await client.session.create({ body: { title: "made by a plugin" } });
        return { status: r.response.status, directory: r.data && r.data.directory };
      }) },
      env: { description: "", args: {}, execute: () => JSON.stringify(process.env) },
    },
  };
};`}, nil)
	mine := gjson.GetBytes(h.send("POST", "/api/session", map[string]any{"title": "mine"}).body, "data.id").String()
	theirs := gjson.GetBytes(h.send("POST", "/api/session", map[string]any{"title": "theirs", "location": map[string]any{"directory": other}}).body, "data.id").String()
	if mine == "" || theirs == "" {
		t.Fatal("sessions not created")
	}
	loc, err := h.srv.locations.Get(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	pl := pluginLocation(loc)
	tool := func(name string, args map[string]any) string {
		t.Helper()
		h.opts.Plugins.Tools(t.Context(), pl) // loads
		b, _ := json.Marshal(args)
		res, err := h.opts.Plugins.RunTool(t.Context(), pl, "local:"+filepath.Join(h.dir, ".opencode", "plugin", "probe.js"), name, b, pluginhost.ToolContext{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res.Output
	}
	out := tool("mine", nil)
	if gjson.Get(out, "status").Int() != 200 || !strings.Contains(out, mine) || strings.Contains(out, theirs) {
		t.Fatalf("the plugin's session list: %s", out)
	}
	for _, d := range gjson.Get(out, "dirs").Array() {
		if d.String() != h.dir {
			t.Fatalf("the list has another location's session: %s", out)
		}
	}
	if out := tool("get", map[string]any{"id": mine}); out != "200" {
		t.Fatalf("its own session: %s", out)
	}
	for name, args := range map[string]map[string]any{
		"get": {"id": theirs}, "otherDir": {"dir": other}, "otherCreate": {"dir": other}, "reload": nil, "pair": nil,
	} {
		if out := tool(name, args); out != "403" {
			t.Errorf("%s %v: %s, want 403", name, args, out)
		}
	}
	if out := tool("grant", nil); out != "[403,403]" {
		t.Errorf("sessions with permission rules: %s", out)
	}
	if out := tool("create", nil); gjson.Get(out, "status").Int() != 200 || gjson.Get(out, "directory").String() != h.dir {
		t.Errorf("a session the plugin makes: %s", out)
	}
	if env := tool("env", nil); strings.Contains(env, testPassword) {
		t.Errorf("the plugin's environment has the instance password: %s", env)
	}
	token, _ := lastPluginToken.Load().(string)
	if token == "" {
		t.Fatal("the plugins got no token")
	}
	for _, a := range []string{"Bearer " + token, basicHeader("opencode", token)} {
		if r := h.do("GET", "/api/session", nil, "Authorization", a); r.status != 401 {
			t.Errorf("the plugins' token on the HTTP API (%.12s…): %d", a, r.status)
		}
	}
}

// TestPluginsNeedTheSandbox: when the sandbox is unavailable, GET
// /api/plugin shows every local plugin failed with the sandbox's reason,
// and its tools are not offered; with it, an active plugin's features
// say it runs sandboxed.
func TestPluginsNeedTheSandbox(t *testing.T) {
	h := newAgentHarness(t, "chat", &script{})
	withPlugins(t, h, map[string]string{"p.js": `export const P = async () => ({ tool: { t: { description: "", args: {}, execute: async () => "ran" } } });`},
		func(o *pluginhost.Options) {
			o.Sandbox = sandbox.New(sandbox.Config{Unavailable: "simulated: no user namespaces"})
		})
	p := pluginList(t, h)["p"]
	if p.Get("state.status").String() != "failed" || !strings.Contains(p.Get("state.error").String(), "sandbox is unavailable") ||
		!strings.Contains(p.Get("state.error").String(), "simulated: no user namespaces") {
		t.Fatalf("without a sandbox: %s", p.Raw)
	}
	loc, _ := h.srv.locations.Get(h.dir)
	if tools := h.opts.Plugins.Tools(t.Context(), pluginLocation(loc)); len(tools) != 0 {
		t.Fatalf("tools offered without a sandbox: %v", tools)
	}

	if sandbox.Default().Status().Mode != "enforced" {
		return
	}
	h2 := newAgentHarness(t, "chat", &script{})
	withPlugins(t, h2, map[string]string{"p.js": `export const P = async () => ({});`}, nil)
	if p := pluginList(t, h2)["p"]; p.Get("state.status").String() != "active" || p.Get("features.sandbox").String() != "enforced" {
		t.Fatalf("sandboxed: %s", p.Raw)
	}
}

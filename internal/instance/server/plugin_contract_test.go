package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// history is a session's durable events, oldest first.
func (h *drainHarness) history(sid string) []gjson.Result {
	h.t.Helper()
	r := h.send("GET", "/api/session/"+sid+"/history?limit=100", nil)
	if r.status != 200 {
		h.t.Fatalf("history: %d %s", r.status, r.body)
	}
	return gjson.GetBytes(r.body, "data").Array()
}

// waitHistory polls a session's durable events (written by the journal's
// worker, after they are published) until cond holds of them.
func (h *drainHarness) waitHistory(sid string, cond func([]gjson.Result) bool) []gjson.Result {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := h.history(sid)
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the session's events never met the condition: %v", evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newSession(t *testing.T, h *drainHarness, body map[string]any) string {
	t.Helper()
	r := h.send("POST", "/api/session", body)
	sid := gjson.GetBytes(r.body, "data.id").String()
	if sid == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return sid
}

// TestPluginToolAskGoesToTheUser: a plugin tool's ctx.ask is a permission
// request of the call (the TUI and the web app see it with the call's
// ids) decided by the session's rules and the user: a reply "once" lets
// the tool go on; a rejection is thrown in the tool as the released
// server throws it (PermissionRejectedError and its message), the part
// shows it and the run stops; a rejection with feedback is a
// PermissionCorrectedError; an ask a rule allows is not asked; the same
// ask twice in a call is asked once; malformed asks are refused.
func TestPluginToolAskGoesToTheUser(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("call_1", "ship", map[string]any{"target": "prod"})}},
		{Text: "deployed."},
		{Calls: []fakeprovider.Call{call("call_2", "ship", map[string]any{"target": "prod"})}},
		{Calls: []fakeprovider.Call{call("call_3", "ship", map[string]any{"target": "prod"})}},
		{Text: "understood."},
	}}
	h := newAgentHarness(t, "chat", sc)
	withPlugins(t, h, map[string]string{"deploy.js": `
import { appendFileSync } from "node:fs";
export const Deploy = async ({ directory }) => ({
  tool: {
    ship: {
      description: "ship",
      args: {},
      async execute(args, ctx) {
        const log = (s) => appendFileSync(directory + "/deploy.log", s + "\n");
        for (const bad of [null, { permission: "", patterns: ["*"] }, { permission: "deploy", patterns: "prod" }, { permission: "deploy", patterns: [] },
          { permission: "deploy", patterns: ["x"], metadata: { big: "x".repeat(20000) } }]) {
          try { await ctx.ask(bad); log("bad ask allowed"); } catch (e) { log("refused " + e.name); }
        }
        try {
          await ctx.ask({ permission: "deploy", patterns: ["prod"], always: ["prod"], metadata: { target: args.target } });
          await ctx.ask({ permission: "deploy", patterns: ["prod"], always: ["prod"], metadata: {} });
          await ctx.ask({ permission: "audit", patterns: ["prod"], always: ["prod"], metadata: {} });
        } catch (e) {
          log("caught " + e.name + ": " + e.message);
          throw e;
        }
        log("deployed " + ctx.callID);
        return "deployed to " + args.target;
      },
    },
  },
});`}, nil)
	logPath := filepath.Join(h.dir, "deploy.log")
	sid := newSession(t, h, map[string]any{"title": "ask",
		"permissions": []any{map[string]any{"action": "deploy", "resource": "*", "effect": "ask"}}})

	// 1: the ask waits for the user; "once" lets the tool finish, and the
	// same ask again in the call is not asked twice; audit is allowed by
	// the defaults.
	h.prompt(sid, "deploy", nil)
	req := h.waitPending("/permission")
	if req.Get("permission").String() != "deploy" || req.Get("patterns.0").String() != "prod" || req.Get("metadata.target").String() != "prod" ||
		req.Get("tool.callID").String() != "call_1" || req.Get("sessionID").String() != sid {
		t.Fatalf("the permission request: %s", req.Raw)
	}
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "once"}); r.status != 200 {
		t.Fatalf("reply: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle(sid, 1)
	parts := toolParts(msgs)
	if len(parts) != 1 || parts[0].Get("state.status").String() != "completed" || parts[0].Get("state.content.0.text").String() != "deployed to prod" {
		t.Fatalf("after once: %v", parts)
	}
	b, _ := os.ReadFile(logPath)
	if got := string(b); strings.Count(got, "refused InvalidAskError") != 5 || !strings.Contains(got, "deployed call_1") || strings.Contains(got, "allowed") {
		t.Fatalf("the tool saw: %q", got)
	}

	// 2: a rejection is thrown in the tool, which rethrows it; the part
	// shows it and the run stops there.
	os.Remove(logPath)
	h.prompt(sid, "deploy again", nil)
	req = h.waitPending("/permission")
	h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "reject"})
	msgs = h.waitIdle(sid, 2)
	parts = toolParts(msgs)
	last := parts[len(parts)-1]
	if last.Get("id").String() != "call_2" || last.Get("state.status").String() != "error" ||
		last.Get("state.error.type").String() != "PermissionRejectedError" ||
		last.Get("state.error.message").String() != "The user rejected permission to use this specific tool call." {
		t.Fatalf("the rejected part: %s", last.Raw)
	}
	b, _ = os.ReadFile(logPath)
	if got := string(b); !strings.Contains(got, "caught PermissionRejectedError: The user rejected permission to use this specific tool call.") {
		t.Fatalf("the tool saw: %q", got)
	}
	if n := len(sc.seen()); n != 3 {
		t.Fatalf("the run did not stop at the rejection: %d requests", n)
	}

	// 3: a rejection with feedback: the tool sees the user's words, and
	// the model reads them in the next step.
	os.Remove(logPath)
	h.prompt(sid, "and again", nil)
	req = h.waitPending("/permission")
	h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "reject", "message": "not on a Friday"})
	msgs = h.waitIdle(sid, 3)
	parts = toolParts(msgs)
	last = parts[len(parts)-1]
	if last.Get("state.error.type").String() != "PermissionCorrectedError" || !strings.Contains(last.Get("state.error.message").String(), "not on a Friday") {
		t.Fatalf("the corrected part: %s", last.Raw)
	}
	b, _ = os.ReadFile(logPath)
	if !strings.Contains(string(b), "caught PermissionCorrectedError") {
		t.Fatalf("the tool saw: %q", b)
	}
	seen := sc.seen()
	if len(seen) != 5 || !strings.Contains(seen[4], "not on a Friday") {
		t.Fatalf("the model did not read the feedback: %d requests", len(seen))
	}
}

// TestPluginToolMetadataAndAbort: a plugin tool's ctx.metadata updates
// its running part — stored (v2 message, v1 part state with title and
// metadata) and announced (session.next.tool.progress) —; malformed and
// oversized updates are dropped without harm; an interrupt fires the
// tool's abort signal, which the tool sees.
func TestPluginToolMetadataAndAbort(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{call("call_m", "slow", map[string]any{})}}}}
	h := newAgentHarness(t, "chat", sc)
	logs := withPlugins(t, h, map[string]string{"slow.js": `
import { writeFileSync } from "node:fs";
export const Slow = async ({ directory }) => ({
  tool: {
    slow: {
      description: "slow", args: {},
      async execute(args, ctx) {
        const cyclic = {}; cyclic.self = cyclic;
        ctx.metadata("not an object");
        ctx.metadata({ metadata: cyclic });
        ctx.metadata({ title: "t".repeat(5000), metadata: { big: "x".repeat(200000) } });
        ctx.metadata({ metadata: [1, 2] });
        ctx.metadata({ title: "warming up", metadata: { step: 1 } });
        ctx.metadata({ title: "halfway", metadata: { step: 2, sessionID: ctx.sessionID, messageID: ctx.messageID, agent: ctx.agent,
          directory: ctx.directory, worktree: ctx.worktree } });
        writeFileSync(directory + "/started", "yes");
        await new Promise((resolve) => ctx.abort.addEventListener("abort", resolve));
        writeFileSync(directory + "/aborted", String(ctx.abort.reason?.name));
        return "too late";
      },
    },
  },
});`}, nil)
	sid := newSession(t, h, map[string]any{"title": "meta"})
	h.prompt(sid, "go", nil)
	waitFile(t, filepath.Join(h.dir, "started"), "yes")

	// The running part, as stored and as the v1 route shows it.
	var part gjson.Result
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ps := toolParts(h.messages(sid)); len(ps) == 1 && ps[0].Get("state.metadata.title").String() == "halfway" {
			part = ps[0]
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if part.Get("state.status").String() != "running" || part.Get("state.metadata.step").Int() != 2 ||
		part.Get("state.metadata.sessionID").String() != sid || part.Get("state.metadata.agent").String() != "build" ||
		part.Get("state.metadata.messageID").String() == "" || part.Get("state.metadata.directory").String() == "" {
		t.Fatalf("the running part: %s", part.Raw)
	}
	r := h.send("GET", "/session/"+sid+"/message", nil)
	var v1part gjson.Result
	for _, m := range gjson.ParseBytes(r.body).Array() {
		for _, p := range m.Get("parts").Array() {
			if p.Get("type").String() == "tool" {
				v1part = p
			}
		}
	}
	if v1part.Get("state.status").String() != "running" || v1part.Get("state.title").String() != "halfway" || v1part.Get("state.metadata.step").Int() != 2 {
		t.Fatalf("the v1 part: %s", v1part.Raw)
	}
	var titles []string
	h.waitHistory(sid, func(evs []gjson.Result) bool {
		titles = titles[:0]
		for _, ev := range evs {
			if ev.Get("type").String() == "session.next.tool.progress" {
				title := ev.Get("data.structured.title").String()
				if len(title) > 1000 {
					t.Fatalf("a title over 1,000 bytes went out: %d", len(title))
				}
				titles = append(titles, title)
			}
		}
		return len(titles) >= 3
	})
	if strings.Join(titles, "|") != strings.Repeat("t", 1000)+"|warming up|halfway" {
		t.Fatalf("progress events: %q", titles)
	}
	if logs.FilterMessage("a plugin tool's metadata update was dropped").Len() == 0 {
		t.Fatal("the dropped updates were not logged")
	}

	// The interrupt reaches the tool.
	if r := h.send("POST", "/api/session/"+sid+"/interrupt", nil); r.status >= 300 {
		t.Fatalf("interrupt: %d %s", r.status, r.body)
	}
	waitFile(t, filepath.Join(h.dir, "aborted"), "AbortError")
	msgs := h.waitIdle(sid, 1)
	if p := toolParts(msgs)[0]; p.Get("state.error.type").String() != "MessageAbortedError" {
		t.Fatalf("the interrupted part: %s", p.Raw)
	}
}

// TestPluginTransformsShapeTheRequest: the hooks that shape a step's
// request reach the provider — tool.definition (a built-in tool's
// description, a plugin tool's parameters), experimental.chat.system.
// transform, experimental.chat.messages.transform on {info, parts}
// (a message removed, a tool output replaced, a text changed, an ignored
// part, a message added) and chat.params' maxOutputTokens —, and
// experimental.text.complete changes the stored text; what is stored of
// the conversation stays as it was.
func TestPluginTransformsShapeTheRequest(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("call_w", "weather", map[string]any{"city": "Oslo"})}},
		{Text: "DRAFT answer"},
		{Text: "second answer"},
	}}
	h := newAgentHarness(t, "chat", sc)
	withPlugins(t, h, map[string]string{"shape.js": `
export const Shape = async () => ({
  tool: {
    weather: { description: "weather", args: { city: { __jsonSchema: { type: "string" } } }, async execute(a) { return "sunny in " + a.city; } },
  },
  "tool.definition": async ({ toolID }, output) => {
    if (toolID === "read") output.description = "READ-DESC";
    if (toolID === "weather") output.parameters.properties.city.description = "CITY-DESC";
  },
  "experimental.chat.system.transform": async (input, output) => {
    output.system.push("SYS-PLUGIN for " + input.sessionID + " on " + input.model.id);
  },
  "experimental.chat.messages.transform": async (input, output) => {
    output.messages = output.messages.filter((m) => !m.parts.some((p) => p.type === "text" && p.text.includes("secret note")));
    for (const m of output.messages) for (const p of m.parts) {
      if (p.type === "tool" && p.state.status === "completed") p.state.output = "[pruned by plugin]";
      if (p.type === "text" && p.text === "second question") {
        p.text += " (edited)";
        m.parts.push({ type: "text", text: "HIDDEN", ignored: true });
      }
    }
    const last = output.messages[output.messages.length - 1];
    output.messages.push({ info: { ...last.info, id: "msg_added" }, parts: [{ type: "text", text: "ADDED BY PLUGIN", synthetic: true }] });
  },
  "experimental.text.complete": async (input, output) => { output.text = output.text.replace("DRAFT", "FINAL " + input.partID.slice(0, 4)); },
  "chat.params": async (input, output) => { output.maxOutputTokens = 321; },
});`}, nil)
	sid := newSession(t, h, map[string]any{"title": "shape"})
	h.prompt(sid, "first: secret note", nil)
	msgs := h.waitIdle(sid, 1)
	var text string
	for _, m := range ofType(msgs, "assistant") {
		for _, c := range m["content"].([]any) {
			if c.(map[string]any)["type"] == "text" {
				text = c.(map[string]any)["text"].(string)
			}
		}
	}
	if text != "FINAL prt_ answer" {
		t.Fatalf("text.complete: stored %q", text)
	}
	ended := ""
	h.waitHistory(sid, func(evs []gjson.Result) bool {
		for _, ev := range evs {
			if ev.Get("type").String() == "session.next.text.ended" {
				ended = ev.Get("data.text").String()
			}
		}
		return ended != ""
	})
	if ended != text {
		t.Fatalf("text.ended carries %q", ended)
	}
	h.prompt(sid, "second question", nil)
	h.waitIdle(sid, 2)
	seen := sc.seen()
	if len(seen) != 3 {
		t.Fatalf("requests: %d", len(seen))
	}
	first, body := gjson.Parse(seen[0]), gjson.Parse(seen[2])
	for _, tl := range first.Get("tools").Array() {
		switch tl.Get("function.name").String() {
		case "read":
			if tl.Get("function.description").String() != "READ-DESC" {
				t.Fatalf("read's definition: %s", tl.Raw)
			}
		case "weather":
			if tl.Get("function.parameters.properties.city.description").String() != "CITY-DESC" {
				t.Fatalf("weather's definition: %s", tl.Raw)
			}
		}
	}
	if !strings.Contains(first.Get("messages.0.content").String(), "SYS-PLUGIN for "+sid+" on fake-model") {
		t.Fatalf("system transform: %s", first.Get("messages.0").Raw)
	}
	if body.Get("max_tokens").Int() != 321 && body.Get("max_completion_tokens").Int() != 321 {
		t.Fatalf("chat.params maxOutputTokens: %s", seen[2])
	}
	s := seen[2]
	for _, want := range []string{"[pruned by plugin]", "second question (edited)", "ADDED BY PLUGIN", "FINAL prt_ answer"} {
		if !strings.Contains(s, want) {
			t.Fatalf("the request lacks %q: %s", want, s)
		}
	}
	for _, gone := range []string{"secret note", "sunny in Oslo", "HIDDEN"} {
		if strings.Contains(s, gone) {
			t.Fatalf("the request still has %q: %s", gone, s)
		}
	}
	// What is stored is what was said.
	storedJSON, _ := json.Marshal(h.messages(sid))
	raw := string(storedJSON)
	if !strings.Contains(raw, "first: secret note") || !strings.Contains(raw, "sunny in Oslo") || strings.Contains(raw, "pruned by plugin") {
		t.Fatalf("the stored conversation changed: %s", raw)
	}
}

// TestPluginTransformGarbageLeavesTheStepUnchanged: hooks that throw or
// leave garbage change nothing the provider gets, the run goes on, and
// each plugin's status says which of its hooks failed and why.
func TestPluginTransformGarbageLeavesTheStepUnchanged(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Text: "fine"}}}
	h := newAgentHarness(t, "chat", sc)
	withPlugins(t, h, map[string]string{
		"a-throws.js": `export const A = async () => ({
  "experimental.chat.messages.transform": async () => { throw new Error("boom in transform"); },
  "experimental.text.complete": async () => { throw new Error("boom in text"); },
});`,
		"b-system.js": `export const B = async () => ({
  "experimental.chat.system.transform": async (input, output) => { output.system = 42; },
  "experimental.text.complete": async (input, output) => { output.text = { not: "text" }; },
});`,
		"c-robot.js": `export const C = async () => ({
  "experimental.chat.messages.transform": async (input, output) => { output.messages = [{ info: { id: "x", role: "robot" }, parts: [] }]; },
  "tool.definition": async ({ toolID }, output) => { if (toolID === "read") output.parameters = { type: "string" }; },
});`,
		"d-cyclic.js": `export const D = async () => ({
  "experimental.chat.system.transform": async (input, output) => { const o = {}; o.o = o; output.system.push("ok", o); },
});`,
	}, nil)
	sid := newSession(t, h, map[string]any{"title": "garbage"})
	h.prompt(sid, "hello there", nil)
	msgs := h.waitIdle(sid, 1)
	if ofType(msgs, "assistant")[0]["content"].([]any)[0].(map[string]any)["text"] != "fine" {
		t.Fatalf("the text changed: %v", msgs)
	}
	body := gjson.Parse(sc.seen()[0])
	if body.Get("messages.#").Int() != 1 || body.Get("messages.0.content").String() != "hello there" || body.Get("messages.0.role").String() != "user" {
		t.Fatalf("the request changed: %s", body.Raw)
	}
	for _, tl := range body.Get("tools").Array() {
		if tl.Get("function.name").String() == "read" && tl.Get("function.parameters.type").String() != "object" {
			t.Fatalf("read's garbage definition was sent: %s", tl.Raw)
		}
	}
	list := pluginList(t, h)
	for id, want := range map[string]map[string]string{
		"a-throws": {"experimental.chat.messages.transform": "boom in transform", "experimental.text.complete": "boom in text"},
		"b-system": {"experimental.chat.system.transform": "output.system must be an array of strings", "experimental.text.complete": "output.text must be a string"},
		"c-robot":  {"experimental.chat.messages.transform": `role "robot"`, "tool.definition": "parameters must be an object schema"},
		"d-cyclic": {"experimental.chat.system.transform": "garbage"},
	} {
		p := list[id]
		if p.Get("state.status").String() != "active" {
			t.Fatalf("%s: %s", id, p.Raw)
		}
		for hook, msg := range want {
			e := p.Get("features.hookErrors." + gjson.Escape(hook))
			if e.Get("count").Int() < 1 || !strings.Contains(e.Get("error").String()+p.Raw, msg) {
				t.Fatalf("%s's %s: %s", id, hook, p.Get("features.hookErrors").Raw)
			}
		}
	}
}

// TestPluginStatusNamesWhatIsNotUsed: what a plugin uses that this server
// does not serve — the auth, provider, command and small-model hooks, a
// hook it does not know, a v2 plugin object, a tui export, a workspace
// adapter — is listed in its status as not used, with why.
func TestPluginStatusNamesWhatIsNotUsed(t *testing.T) {
	h := newAgentHarness(t, "chat", &script{})
	withPlugins(t, h, map[string]string{"many.js": `
export const v2 = { id: "v2-thing", setup() {} };
export default {
  id: "many",
  server: async (input, options) => {
    input.experimental_workspace.register("docker", { name: "docker" });
    if (!(input.serverUrl instanceof URL) || typeof input.$ !== "function" || !input.client || input.worktree !== input.directory) throw new Error("bad input");
    return {
      auth: { provider: "anthropic", methods: [] },
      provider: { id: "x" },
      "command.execute.before": async () => {},
      "experimental.provider.small_model": async () => {},
      "made.up.hook": async () => {},
      "chat.params": async () => {},
    };
  },
  tui: async () => ({}),
};`}, nil)
	p := pluginList(t, h)["many"]
	if p.Get("state.status").String() != "active" {
		t.Fatalf("status: %s", p.Raw)
	}
	unused := p.Get("features.unused")
	for _, k := range []string{"auth", "provider", "command.execute.before", "experimental.provider.small_model", "made.up.hook",
		"v2 plugin v2-thing", "tui", "experimental_workspace.register(docker)"} {
		if !strings.HasPrefix(unused.Get(gjson.Escape(k)).String(), "not used by this server") {
			t.Fatalf("%s is not listed as unused: %s", k, unused.Raw)
		}
	}
	if unused.Get(gjson.Escape("chat.params")).Exists() {
		t.Fatalf("a wired hook is listed as unused: %s", unused.Raw)
	}
	if !strings.Contains(unused.Get("auth").String(), "gateway holds the provider credentials") {
		t.Fatalf("auth: %s", unused.Raw)
	}
}

// TestPluginCompactionHooks: experimental.session.compacting replaces the
// compaction's prompt and adds context; experimental.chat.messages.
// transform shapes the conversation it summarises.
func TestPluginCompactionHooks(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Text: "hi"}, {Text: "SUMMARY"}}}
	h := newAgentHarness(t, "chat", sc)
	withPlugins(t, h, map[string]string{"compact.js": `
export const C = async () => ({
  "experimental.session.compacting": async (input, output) => { output.prompt = "CUSTOM PROMPT for " + input.sessionID; output.context.push("ctx-line"); },
  "experimental.chat.messages.transform": async (input, output) => {
    for (const m of output.messages) for (const p of m.parts) if (p.type === "text") p.text = p.text.replace("private", "[redacted]");
  },
});`}, nil)
	sid := newSession(t, h, map[string]any{"title": "compact"})
	h.prompt(sid, "a private matter", nil)
	h.waitIdle(sid, 1)
	if r := h.send("POST", "/api/session/"+sid+"/compact", nil); r.status != 204 {
		t.Fatalf("compact: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/api/session/"+sid+"/wait", nil); r.status != 204 {
		t.Fatalf("wait: %d %s", r.status, r.body)
	}
	seen := sc.seen()
	if len(seen) != 2 {
		t.Fatalf("requests: %d", len(seen))
	}
	s := seen[1]
	if !strings.Contains(s, "CUSTOM PROMPT for "+sid+"\\n\\nctx-line") || strings.Contains(s, "Provide a detailed summary") ||
		!strings.Contains(s, "a [redacted] matter") || strings.Contains(s, "private") {
		t.Fatalf("the compaction request: %s", s)
	}
}

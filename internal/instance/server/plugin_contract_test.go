package server

import (
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
	for _, ev := range h.history(sid) {
		if ev.Get("type").String() == "session.next.tool.progress" {
			title := ev.Get("data.structured.title").String()
			if len(title) > 1000 {
				t.Fatalf("a title over 1,000 bytes went out: %d", len(title))
			}
			titles = append(titles, title)
		}
	}
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

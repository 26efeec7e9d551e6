package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/permission"
)

// rulesCase is one run of the rules tests: files the project ships, the
// instance's tool settings, a session (its agent and rules) whose model
// makes one call.
type rulesCase struct {
	files   map[string]string
	tools   loop.ToolConfig
	agent   string
	session []map[string]string
	call    fakeprovider.Call
}

// run prompts the session and returns the harness; the call is then
// pending, or settled once the session is idle.
func (c rulesCase) run(t *testing.T, sid string) (*drainHarness, *script) {
	t.Helper()
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{c.call}}, {Text: "ok"}}}
	h := newAgentHarness(t, "chat", sc)
	for name, body := range c.files {
		path := filepath.Join(h.dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.runner.SetTools(c.tools)
	body := map[string]any{"id": sid}
	if c.agent != "" {
		body["agent"] = c.agent
	}
	if c.session != nil {
		body["permissions"] = c.session
	}
	if r := h.send("POST", "/api/session", body); r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	h.prompt(sid, "go", nil)
	return h, sc
}

// asks runs the case and checks that its call waits for the user with
// the permission; the user then rejects it.
func (c rulesCase) asks(t *testing.T, perm string) {
	t.Helper()
	h, _ := c.run(t, "ses_asks")
	req := h.waitPending("/permission")
	if req.Get("permission").String() != perm {
		t.Fatalf("pending %s, want a %s ask", req.Raw, perm)
	}
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "reject"}); r.status != 200 {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	parts := toolParts(h.waitIdle("ses_asks", 1))
	if len(parts) != 1 || parts[0].Get("state.error.type").String() != "PermissionRejectedError" {
		t.Fatalf("parts %v", parts)
	}
}

// settles runs the case with no one answering and returns the call's
// part once the session is idle (it fails the test if the call asked) and
// the bodies the provider saw.
func (c rulesCase) settles(t *testing.T) (gjson.Result, []string) {
	t.Helper()
	h, sc := c.run(t, "ses_settles")
	msgs := h.waitIdle("ses_settles", 1)
	if l := gjson.ParseBytes(h.send("GET", "/permission", nil).body).Array(); len(l) != 0 {
		t.Fatalf("the call asked: %v", l)
	}
	parts := toolParts(msgs)
	if len(parts) != 1 {
		t.Fatalf("parts %v", parts)
	}
	return parts[0], sc.seen()
}

var echoCall = call("c1", "bash", map[string]any{"command": "echo from-the-agent"})

func TestProjectRulesCannotAllowGuardedCalls(t *testing.T) {
	t.Run("opencode.json allows bash", func(t *testing.T) {
		rulesCase{files: map[string]string{"opencode.json": `{"permission":{"bash":"allow"}}`}, call: echoCall}.asks(t, "bash")
	})
	t.Run("opencode.jsonc allows everything", func(t *testing.T) {
		rulesCase{files: map[string]string{"opencode.jsonc": `{"permission": "allow", /* all */}`}, call: echoCall}.asks(t, "bash")
	})
	t.Run("an agent file allows bash", func(t *testing.T) {
		rulesCase{files: map[string]string{".opencode/agent/x.md": "---\npermission:\n  bash: allow\n---\nYou run commands.\n"},
			agent: "x", call: echoCall}.asks(t, "bash")
	})
	t.Run("opencode.json's agent allows webfetch", func(t *testing.T) {
		rulesCase{files: map[string]string{"opencode.json": `{"agent":{"build":{"permission":{"webfetch":"allow"}}}}`},
			call: call("c1", "webfetch", map[string]any{"url": "https://example.invalid/"})}.asks(t, "webfetch")
	})
	t.Run("opencode.json allows editing .env", func(t *testing.T) {
		c := rulesCase{files: map[string]string{"opencode.json": `{"permission":{"edit":{"*.env":"allow"}}}`},
			call: call("c1", "write", map[string]any{"filePath": ".env", "content": "TOKEN=x\n"})}
		c.asks(t, "edit")
	})
}

func TestProjectRulesStillNarrow(t *testing.T) {
	part, bodies := rulesCase{files: map[string]string{"opencode.json": `{"permission":{"bash":"deny"}}`}, call: echoCall}.settles(t)
	if part.Get("state.error.type").String() != "PermissionDeniedError" {
		t.Fatalf("part %s", part.Raw)
	}
	if gjson.Get(bodies[0], `tools.#(name=="bash")`).Exists() {
		t.Fatal("the bash tool the project denies was offered")
	}
	// A project edit the defaults allow can ask.
	h, _ := rulesCase{files: map[string]string{"opencode.json": `{"permission":{"edit":"ask"}}`},
		call: call("c1", "write", map[string]any{"filePath": "a.txt", "content": "x"})}.run(t, "ses_n")
	if req := h.waitPending("/permission"); req.Get("permission").String() != "edit" {
		t.Fatalf("pending %s", req.Raw)
	}
}

func TestTrustedProjectRulesAllow(t *testing.T) {
	part, _ := rulesCase{files: map[string]string{"opencode.json": `{"permission":{"bash":"allow"}}`},
		tools: loop.ToolConfig{TrustProjectPermissions: true}, call: echoCall}.settles(t)
	if part.Get("state.status").String() != "completed" || !strings.Contains(part.Get("state.content.0.text").String(), "from-the-agent") {
		t.Fatalf("part %s", part.Raw)
	}
}

func TestSessionRulesAllow(t *testing.T) {
	part, _ := rulesCase{session: []map[string]string{{"action": "bash", "resource": "*", "effect": "allow"}},
		files: map[string]string{"opencode.json": `{"permission":{"bash":"ask"}}`}, call: echoCall}.settles(t)
	if part.Get("state.status").String() != "completed" {
		t.Fatalf("the session's own rule did not allow the command: %s", part.Raw)
	}
}

func TestInstanceDenyIsFinal(t *testing.T) {
	allowAll := []map[string]string{{"action": "bash", "resource": "*", "effect": "allow"}}
	rm := loop.ToolConfig{Rules: []permission.Rule{{Action: "bash", Resource: "rm *", Effect: permission.Deny}}}
	part, _ := rulesCase{tools: rm, session: allowAll, call: call("c1", "bash", map[string]any{"command": "rm x"})}.settles(t)
	if part.Get("state.error.type").String() != "PermissionDeniedError" || !strings.Contains(part.Get("state.error.message").String(), "bash rm * deny") {
		t.Fatalf("part %s", part.Raw)
	}
	// The same with a trusted project that allows everything.
	rm.TrustProjectPermissions = true
	part, _ = rulesCase{tools: rm, files: map[string]string{"opencode.json": `{"permission":"allow"}`}, session: allowAll,
		call: call("c1", "bash", map[string]any{"command": "rm -rf x"})}.settles(t)
	if part.Get("state.error.type").String() != "PermissionDeniedError" {
		t.Fatalf("part %s", part.Raw)
	}
	// A tool the instance denies outright stays hidden.
	none := loop.ToolConfig{Rules: []permission.Rule{{Action: "bash", Resource: "*", Effect: permission.Deny}}}
	part, bodies := rulesCase{tools: none, session: allowAll, call: echoCall}.settles(t)
	if part.Get("state.error.type").String() != "PermissionDeniedError" || gjson.Get(bodies[0], `tools.#(name=="bash")`).Exists() {
		t.Fatalf("part %s; bash offered: %v", part.Raw, gjson.Get(bodies[0], `tools.#(name=="bash")`).Exists())
	}
}

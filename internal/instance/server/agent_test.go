package server

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/sandbox"
)

// script answers the fake provider's requests in order: step i of the
// list for the i-th request; past the end, a plain "done." answer. It
// keeps the bodies it saw. A session's title request, which runs beside
// its first turn, is answered scriptTitle and neither counted nor kept.
type script struct {
	mu     sync.Mutex
	steps  []fakeprovider.Step
	n      int
	bodies []string
	// pick, when set, chooses the answer from the body instead.
	pick func(body string, n int) fakeprovider.Step
}

func (s *script) next(body []byte) fakeprovider.Step {
	if isTitleRequest(body) {
		return fakeprovider.Step{Text: scriptTitle}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, string(body))
	n := s.n
	s.n++
	if s.pick != nil {
		return s.pick(string(body), n)
	}
	if n < len(s.steps) {
		return s.steps[n]
	}
	return fakeprovider.Step{Text: "done."}
}

// scriptTitle is a script's answer to a title request.
const scriptTitle = "Scripted title"

// isTitleRequest reports whether a provider request is the title
// agent's (it asks for a title before the conversation).
func isTitleRequest(body []byte) bool {
	return strings.Contains(string(body), "Generate a title for this conversation")
}

func (s *script) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

func call(id, name string, args any) fakeprovider.Call {
	b, _ := json.Marshal(args)
	return fakeprovider.Call{ID: id, Name: name, Args: string(b)}
}

// newAgentHarness is a drain harness whose fake provider follows a script
// in a format.
func newAgentHarness(t testing.TB, format string, sc *script) *drainHarness {
	t.Helper()
	h := newDrainHarness(t)
	p := h.runner.Provider()
	p.Format = format
	switch format {
	case "anthropic", "google":
		p.BaseURL = h.fake.URL
	}
	h.runner.SetProvider(p)
	h.fake.SetBehavior(fakeprovider.Behavior{Script: sc.next})
	return h
}

// tools returns the tool parts of a session's assistant messages.
func toolParts(msgs []map[string]any) []gjson.Result {
	var out []gjson.Result
	for _, m := range ofType(msgs, "assistant") {
		raw, _ := json.Marshal(m)
		for _, c := range gjson.GetBytes(raw, "content").Array() {
			if c.Get("type").String() == "tool" {
				out = append(out, c)
			}
		}
	}
	return out
}

// waitPending polls a pending list route until it holds an entry.
func (h *drainHarness) waitPending(path string) gjson.Result {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r := h.send("GET", path, nil)
		if r.status != 200 {
			h.t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		list := gjson.ParseBytes(r.body)
		if d := list.Get("data"); d.IsArray() {
			list = d // a session route's {data: [...]}
		}
		if l := list.Array(); len(l) > 0 {
			return l[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.t.Fatalf("nothing pending at %s", path)
	return gjson.Result{}
}

// goSandbox is a sandbox in which `go test` finds the host's build and
// module caches, read-only, and never downloads.
func goSandbox(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	return sandbox.New(sandbox.Config{ReadOnly: f, Env: []string{"GOCACHE=" + f[0], "GOMODCACHE=" + f[1], "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local"}})
}

// goProject writes a Go module with a failing test into the harness's
// default location.
func goProject(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"go.mod":      "module example.com/calc\n\ngo 1.21\n",
		"add.go":      "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n",
		"add_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add(2, 3) != 5\")\n\t}\n}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAgentMakesTheFailingTestPass(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	sc := &script{steps: []fakeprovider.Step{
		{Text: "Let me look.", Calls: []fakeprovider.Call{call("call_r", "read", map[string]any{"filePath": "add.go"})}},
		{Calls: []fakeprovider.Call{call("call_e", "edit", map[string]any{"filePath": "add.go", "oldString": "return a - b", "newString": "return a + b"})}},
		{Calls: []fakeprovider.Call{call("call_b", "bash", map[string]any{"command": "go test ./... && env", "description": "run the tests"})}},
		{Text: "The test passes now."},
	}}
	h := newAgentHarness(t, "chat", sc)
	goProject(t, h.dir)
	h.runner.SetTools(loop.ToolConfig{Sandbox: goSandbox(t)})
	t.Setenv("SOME_INNOCENT_NAME", "prefix-"+fakeKey)
	h.send("POST", "/api/session", map[string]any{"id": "ses_fix"})
	h.prompt("ses_fix", "make the failing test pass", nil)

	// The bash call asks (the default rule); the answer comes through the API.
	req := h.waitPending("/permission")
	if req.Get("permission").String() != "bash" || req.Get("sessionID").String() != "ses_fix" || !strings.HasPrefix(req.Get("id").String(), "per_") ||
		req.Get("tool.callID").String() != "call_b" || !strings.Contains(req.Get("patterns.0").String(), "go test") {
		t.Fatalf("permission request %s", req.Raw)
	}
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "once"}); r.status != 200 || strings.TrimSpace(string(r.body)) != "true" {
		t.Fatalf("reply: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle("ses_fix", 1)
	if b, _ := os.ReadFile(filepath.Join(h.dir, "add.go")); !strings.Contains(string(b), "return a + b") {
		t.Fatalf("add.go not fixed: %s", b)
	}
	parts := toolParts(msgs)
	if len(parts) != 3 {
		t.Fatalf("tool parts: %v", parts)
	}
	for i, name := range []string{"read", "edit", "bash"} {
		p := parts[i]
		if p.Get("name").String() != name || p.Get("state.status").String() != "completed" || !p.Get("time.ran").Exists() || !p.Get("time.completed").Exists() {
			t.Fatalf("part %d: %s", i, p.Raw)
		}
	}
	if out := parts[0].Get("state.content.0.text").String(); !strings.Contains(out, "4: func Add(a, b int) int { return a - b }") {
		t.Fatalf("read output: %s", out)
	}
	bashOut := parts[2].Get("state.content.0.text").String()
	if !strings.Contains(bashOut, "ok  \texample.com/calc") || parts[2].Get("state.metadata.exit").Int() != 0 {
		t.Fatalf("bash output: %s", bashOut)
	}
	if strings.Contains(bashOut, fakeKey) || strings.Contains(bashOut, testPassword) {
		t.Fatal("the provider key or instance password reached the command's environment")
	}
	last := ofType(msgs, "assistant")
	if text(last[len(last)-1]) != "The test passes now." || msgs[len(msgs)-1]["outcome"] != "succeeded" {
		t.Fatalf("final: %v", msgs[len(msgs)-1])
	}
	// The model read each result in Chat's tool-result shape.
	bodies := sc.seen()
	if len(bodies) != 4 {
		t.Fatalf("%d provider requests", len(bodies))
	}
	second := gjson.Parse(bodies[1])
	var result gjson.Result
	for _, m := range second.Get("messages").Array() {
		if m.Get("role").String() == "tool" {
			result = m
		}
	}
	if result.Get("tool_call_id").String() != "call_r" || !strings.Contains(result.Get("content").String(), "return a - b") {
		t.Fatalf("tool result sent: %s", bodies[1])
	}
	if !gjson.Get(bodies[0], `tools.#(function.name=="bash")`).Exists() || !gjson.Get(bodies[0], `tools.#(function.name=="edit").function.parameters.properties.oldString`).Exists() {
		t.Fatal("the tools were not offered")
	}
	// Stats count the calls.
	r := h.send("GET", "/api/experimental/session/stats?from=0&to=99999999999999&tools=detail", nil)
	tools := gjson.GetBytes(r.body, "data.tools")
	if tools.Get("totals.calls").Int() != 3 || tools.Get("totals.succeeded").Int() != 3 || !tools.Get(`usage.#(name=="bash").durationP50`).Exists() {
		t.Fatalf("stats: %s", r.body)
	}
}

func TestAgentToolRoundTripInEveryFormat(t *testing.T) {
	shapes := map[string]string{"chat": `"role":"tool"`, "responses": `"function_call_output"`, "anthropic": `"tool_result"`, "google": `"functionResponse"`}
	for format, shape := range shapes {
		t.Run(format, func(t *testing.T) {
			sc := &script{steps: []fakeprovider.Step{
				{Calls: []fakeprovider.Call{
					call("call_w", "write", map[string]any{"filePath": "notes/out.txt", "content": "written by " + format}),
					call("call_g", "glob", map[string]any{"pattern": "*.md"}),
				}},
				{Calls: []fakeprovider.Call{call("call_r", "read", map[string]any{"filePath": "notes/out.txt"})}},
				{Text: "done."},
			}}
			h := newAgentHarness(t, format, sc)
			h.send("POST", "/api/session", map[string]any{"id": "ses_f"})
			h.prompt("ses_f", "write a note", nil)
			msgs := h.waitIdle("ses_f", 1)
			if b, _ := os.ReadFile(filepath.Join(h.dir, "notes/out.txt")); string(b) != "written by "+format {
				t.Fatalf("file: %q", b)
			}
			parts := toolParts(msgs)
			if len(parts) != 3 || parts[2].Get("state.status").String() != "completed" || !strings.Contains(parts[2].Get("state.content.0.text").String(), "1: written by "+format) {
				t.Fatalf("parts: %v", parts)
			}
			bodies := sc.seen()
			if len(bodies) != 3 || !strings.Contains(bodies[2], shape) || !strings.Contains(bodies[2], "written by "+format) {
				t.Fatalf("the results were not sent back as %s: %v", shape, bodies)
			}
		})
	}
}

func TestAgentPermissionAlwaysAndReject(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "echo one"})}},
		{Calls: []fakeprovider.Call{call("c2", "bash", map[string]any{"command": "echo two"})}},
		{Calls: []fakeprovider.Call{call("c3", "webfetch", map[string]any{"url": "https://example.invalid/"})}},
		{Text: "ok"},
	}}
	h := newAgentHarness(t, "chat", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_p"})
	h.prompt("ses_p", "go", nil)
	req := h.waitPending("/permission")
	if got := req.Get("always.0").String(); got != "echo one *" {
		t.Fatalf("always %q", got)
	}
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "always"}); r.status != 200 {
		t.Fatalf("always: %d %s", r.status, r.body)
	}
	// "echo two" does not match "echo one *": it asks again.
	req2 := h.waitPending("/permission")
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "once"}); r.status != 409 || gjson.GetBytes(r.body, "_tag").String() != "ConflictError" {
		t.Fatalf("a settled request answered again: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/session/ses_other/permissions/"+req2.Get("id").String(), map[string]any{"response": "once"}); r.status != 404 {
		t.Fatalf("another session's id: %d %s", r.status, r.body)
	}
	h.send("POST", "/api/session", map[string]any{"id": "ses_other"})
	if r := h.send("POST", "/session/ses_other/permissions/"+req2.Get("id").String(), map[string]any{"response": "once"}); r.status != 404 || gjson.GetBytes(r.body, "_tag").String() != "PermissionNotFoundError" {
		t.Fatalf("another session's id: %d %s", r.status, r.body)
	}
	for _, bad := range []string{`{"reply":"maybe"}`, `{"reply":"once","message":"x"}`, `{"reply":"once","extra":1}`, `not json`} {
		if r := h.send("POST", "/permission/"+req2.Get("id").String()+"/reply", bad); r.status != 400 {
			t.Fatalf("%s: %d %s", bad, r.status, r.body)
		}
	}
	if r := h.send("POST", "/session/ses_p/permissions/"+req2.Get("id").String(), map[string]any{"response": "once"}); r.status != 200 {
		t.Fatalf("older route: %d %s", r.status, r.body)
	}
	req3 := h.waitPending("/permission")
	if req3.Get("permission").String() != "webfetch" {
		t.Fatalf("third %s", req3.Raw)
	}
	if r := h.send("POST", "/permission/"+req3.Get("id").String()+"/reply", map[string]any{"reply": "reject", "message": "do not browse; read the docs folder"}); r.status != 200 {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle("ses_p", 1)
	info, _ := h.getSession("ses_p")
	if len(info.Permissions) != 1 || info.Permissions[0].Action != "bash" || info.Permissions[0].Resource != "echo one *" || info.Permissions[0].Effect != "allow" {
		t.Fatalf("session rules after always: %+v", info.Permissions)
	}
	parts := toolParts(msgs)
	if parts[2].Get("state.error.type").String() != "PermissionCorrectedError" {
		t.Fatalf("rejected part: %s", parts[2].Raw)
	}
	bodies := sc.seen()
	if len(bodies) != 4 || !strings.Contains(bodies[3], "do not browse; read the docs folder") {
		t.Fatal("the model did not read the reject's message")
	}
}

func TestAgentRejectWithoutMessageStopsAndDenySeenByModel(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "write", map[string]any{"filePath": "x.txt", "content": "x"})}},
		{Calls: []fakeprovider.Call{call("c2", "bash", map[string]any{"command": "rm -rf build"})}},
		{Text: "never"},
	}}
	h := newAgentHarness(t, "anthropic", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_d", "permissions": []map[string]string{{"action": "edit", "resource": "*", "effect": "deny"}}})
	h.prompt("ses_d", "go", nil)
	req := h.waitPending("/permission")
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "reject"}); r.status != 200 {
		t.Fatal(r.body)
	}
	msgs := h.waitIdle("ses_d", 1)
	if _, err := os.Stat(filepath.Join(h.dir, "x.txt")); err == nil {
		t.Fatal("a denied write happened")
	}
	parts := toolParts(msgs)
	if parts[0].Get("state.error.type").String() != "PermissionDeniedError" || !strings.Contains(parts[0].Get("state.error.message").String(), "edit * deny") {
		t.Fatalf("denied part: %s", parts[0].Raw)
	}
	if parts[1].Get("state.error.type").String() != "PermissionRejectedError" {
		t.Fatalf("rejected part: %s", parts[1].Raw)
	}
	bodies := sc.seen()
	if len(bodies) != 2 || !strings.Contains(bodies[1], "prevents you from using this specific tool call") {
		t.Fatalf("%d requests; the model must see the deny and the run must stop at the reject", len(bodies))
	}
	// The write tool is hidden when the session denies edit outright.
	if gjson.Get(bodies[0], `tools.#(name=="write")`).Exists() {
		t.Fatal("a tool the session denies was offered")
	}
}

func TestAgentReloadAndRemovalCancelPendingAsks(t *testing.T) {
	sc := &script{pick: func(body string, n int) fakeprovider.Step {
		return fakeprovider.Step{Calls: []fakeprovider.Call{call(fmt.Sprintf("c%d", n), "bash", map[string]any{"command": "sleep 1"})}}
	}}
	h := newAgentHarness(t, "chat", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_rl"})
	ev := h.subscribe(t)
	ev.next(t)
	h.prompt("ses_rl", "go", nil)
	req := h.waitPending("/permission")
	if r := h.send("POST", "/api/location/reload", nil); r.status != 204 {
		t.Fatalf("reload: %d", r.status)
	}
	msgs := h.waitIdle("ses_rl", 1)
	parts := toolParts(msgs)
	if len(parts) != 1 || parts[0].Get("state.error.type").String() != "PermissionRejectedError" || !strings.Contains(parts[0].Get("state.error.message").String(), "reloaded") {
		t.Fatalf("parts: %v", parts)
	}
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "once"}); r.status != 409 {
		t.Fatalf("answer after the reload: %d %s", r.status, r.body)
	}
	sawCancel := false
	for i := 0; i < 50 && !sawCancel; i++ {
		e := gjson.Parse(strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: "))
		sawCancel = e.Get("type").String() == "permission.replied" && e.Get("data.cancelled").String() == "reloaded"
	}
	if !sawCancel {
		t.Fatal("no event said the request was cancelled")
	}
	// Removal cancels too.
	h.send("POST", "/api/session", map[string]any{"id": "ses_rm"})
	h.prompt("ses_rm", "go", nil)
	h.waitPending("/permission")
	if r := h.send("DELETE", "/api/session/ses_rm", nil); r.status != 204 {
		t.Fatalf("remove: %d", r.status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for gjson.ParseBytes(h.send("GET", "/permission", nil).body).Get("#").Int() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the removed session's request is still pending")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAgentMalformedCallsAndUnknownTools(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{{ID: "c1", Name: "read", Args: `{"filePath": `}, call("c2", "teleport", map[string]any{}), call("c3", "read", map[string]any{"offset": 1})}},
		{Text: "recovered"},
	}}
	h := newAgentHarness(t, "responses", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_m"})
	h.prompt("ses_m", "go", nil)
	msgs := h.waitIdle("ses_m", 1)
	parts := toolParts(msgs)
	want := []string{"InvalidToolInputError", "UnknownToolError", "InvalidToolInputError"}
	for i, p := range parts {
		if p.Get("state.status").String() != "error" || p.Get("state.error.type").String() != want[i] {
			t.Fatalf("part %d: %s", i, p.Raw)
		}
	}
	if len(sc.seen()) != 2 || text(ofType(msgs, "assistant")[1]) != "recovered" {
		t.Fatal("the loop did not go on after bad calls")
	}
}

func TestAgentStepLimit(t *testing.T) {
	sc := &script{pick: func(body string, n int) fakeprovider.Step {
		return fakeprovider.Step{Text: "again", Calls: []fakeprovider.Call{call(fmt.Sprintf("c%d", n), "glob", map[string]any{"pattern": "*"})}}
	}}
	h := newDrainHarness(t)
	h.fake.SetBehavior(fakeprovider.Behavior{Script: sc.next})
	h.runner.SetTools(loop.ToolConfig{MaxSteps: 3})
	h.send("POST", "/api/session", map[string]any{"id": "ses_loop"})
	h.prompt("ses_loop", "loop forever", nil)
	msgs := h.waitIdle("ses_loop", 1)
	bodies := sc.seen()
	if len(bodies) != 3 {
		t.Fatalf("%d steps, want the limit of 3", len(bodies))
	}
	if gjson.Get(bodies[2], "tools").Exists() || !strings.Contains(bodies[2], "MAXIMUM STEPS REACHED") {
		t.Fatal("the last step offered tools or did not say why")
	}
	parts := toolParts(msgs)
	if parts[len(parts)-1].Get("state.error.type").String() != "ToolsDisabledError" {
		t.Fatalf("a call on the last step: %s", parts[len(parts)-1].Raw)
	}
}

func TestAgentBudgetRefusalMidLoop(t *testing.T) {
	var h *drainHarness
	sc := &script{}
	sc.pick = func(body string, n int) fakeprovider.Step {
		// The first step spends the budget: the next request is refused.
		h.fake.SetBehavior(fakeprovider.Behavior{Status: 402, Body: `{"error":{"type":"BudgetExceeded","message":"budget exceeded"}}`})
		return fakeprovider.Step{Calls: []fakeprovider.Call{call("c1", "list", map[string]any{})}}
	}
	h = newAgentHarness(t, "chat", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_b"})
	h.prompt("ses_b", "go", nil)
	msgs := h.waitIdle("ses_b", 1)
	as := ofType(msgs, "assistant")
	if len(as) != 2 || msgs[len(msgs)-1]["outcome"] != "failed" {
		t.Fatalf("messages: %v", msgs)
	}
	raw, _ := json.Marshal(as[1])
	if gjson.GetBytes(raw, "error.status").Int() != 402 || toolParts(msgs)[0].Get("state.status").String() != "completed" {
		t.Fatalf("refused step: %s", raw)
	}
}

func TestAgentTaskRunsAChildSession(t *testing.T) {
	sc := &script{pick: func(body string, n int) fakeprovider.Step {
		switch {
		case strings.Contains(body, "task_result"):
			return fakeprovider.Step{Text: "the child found 42"}
		case strings.Contains(body, "count the files"):
			return fakeprovider.Step{Text: "42 files"}
		}
		return fakeprovider.Step{Calls: []fakeprovider.Call{call("t1", "task", map[string]any{"description": "count files", "prompt": "count the files", "subagent_type": "general"})}}
	}}
	h := newAgentHarness(t, "google", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_parent"})
	h.prompt("ses_parent", "how many files?", nil)
	msgs := h.waitIdle("ses_parent", 1)
	parts := toolParts(msgs)
	if len(parts) != 1 || parts[0].Get("state.status").String() != "completed" || !strings.Contains(parts[0].Get("state.content.0.text").String(), "42 files") {
		t.Fatalf("task part: %v", parts)
	}
	child := parts[0].Get("state.metadata.sessionId").String()
	info, r := h.getSession(child)
	if r.status != 200 || info.ParentID != "ses_parent" || info.Agent != "general" {
		t.Fatalf("child %s: %d %+v", child, r.status, info)
	}
	denied := false
	for _, rule := range info.Permissions {
		denied = denied || (rule.Action == "task" && rule.Resource == "*" && rule.Effect == "deny")
	}
	if !denied {
		t.Fatalf("a child may start tasks of its own: %+v", info.Permissions)
	}
	if strings.Contains(sc.seen()[1], `"name":"task"`) {
		t.Fatal("the task tool was offered to the child")
	}
	if text(ofType(msgs, "assistant")[1]) != "the child found 42" {
		t.Fatalf("the parent did not go on with the child's answer: %v\n%q", msgs, sc.seen())
	}
}

func TestAgentCompactsBeforePassingTheContextLimit(t *testing.T) {
	sc := &script{pick: func(body string, n int) fakeprovider.Step {
		switch {
		case strings.Contains(body, "Provide a detailed summary"):
			return fakeprovider.Step{Text: "SUMMARY: listed the files."}
		case strings.Contains(body, "SUMMARY: listed the files."):
			return fakeprovider.Step{Text: "continuing from the summary"}
		}
		return fakeprovider.Step{Calls: []fakeprovider.Call{call("c1", "list", map[string]any{})}}
	}}
	h := newAgentHarness(t, "chat", sc)
	p := h.runner.Provider()
	p.Limits = map[string]loop.ModelLimits{"fake-model": {Context: 60, Output: 40}}
	h.runner.SetProvider(p)
	h.send("POST", "/api/session", map[string]any{"id": "ses_c"})
	h.prompt("ses_c", "the original request text", nil)
	msgs := h.waitIdle("ses_c", 1)
	comp := ofType(msgs, "compaction")
	if len(comp) != 1 || comp[0]["status"] != "completed" || comp[0]["summary"] != "SUMMARY: listed the files." || comp[0]["reason"] != "auto" {
		t.Fatalf("compaction: %v", comp)
	}
	bodies := sc.seen()
	last := bodies[len(bodies)-1]
	if strings.Contains(last, "the original request text") || !strings.Contains(last, "SUMMARY") {
		t.Fatalf("the step after the compaction did not start from the summary: %s", last)
	}
	if !gjson.Get(bodies[0], "max_tokens").Exists() && !gjson.Get(bodies[0], "max_completion_tokens").Exists() {
		t.Fatal("the model's output limit was not sent")
	}
	as := ofType(msgs, "assistant")
	if text(as[len(as)-1]) != "continuing from the summary" {
		t.Fatalf("final %v", as[len(as)-1])
	}
}

func TestAgentQuestionForm(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("q1", "question", map[string]any{"questions": []map[string]any{{"question": "Which database?", "header": "DB",
			"options": []map[string]string{{"label": "Postgres", "description": "shared"}, {"label": "Badger", "description": "embedded"}}}}})}},
		{Text: "Badger it is."},
	}}
	h := newAgentHarness(t, "chat", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_q"})
	h.prompt("ses_q", "ask me", nil)
	form := h.waitPending("/question")
	id := form.Get("id").String()
	if !strings.HasPrefix(id, "que_") || form.Get("questions.0.options.1.label").String() != "Badger" || form.Get("sessionID").String() != "ses_q" {
		t.Fatalf("form %s", form.Raw)
	}
	if r := h.send("POST", "/question/que_nope/reply", map[string]any{"answers": [][]string{{"x"}}}); r.status != 404 || gjson.GetBytes(r.body, "_tag").String() != "FormNotFoundError" {
		t.Fatalf("unknown form: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/question/"+id+"/reply", map[string]any{"answers": [][]string{{"a", "b"}}}); r.status != 400 || gjson.GetBytes(r.body, "_tag").String() != "FormInvalidAnswerError" {
		t.Fatalf("invalid answer: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/question/"+id+"/reply?sessionID=ses_other", map[string]any{"answers": [][]string{{"Badger"}}}); r.status != 404 {
		t.Fatalf("another session's answer: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/question/"+id+"/reply", map[string]any{"answers": [][]string{{"Badger"}}}); r.status != 200 {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/question/"+id+"/reply", map[string]any{"answers": [][]string{{"Badger"}}}); r.status != 409 || gjson.GetBytes(r.body, "_tag").String() != "FormAlreadySettledError" {
		t.Fatalf("second answer: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/question/"+id+"/reject", nil); r.status != 409 {
		t.Fatalf("reject after answer: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle("ses_q", 1)
	if p := toolParts(msgs)[0]; p.Get("state.status").String() != "completed" || !strings.Contains(p.Get("state.content.0.text").String(), `"Which database?"="Badger"`) {
		t.Fatalf("question part: %s", p.Raw)
	}
}

func TestAgentRestartMidToolRunsItAtMostOnce(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "echo ran >> count.txt; sleep 30"})}},
		{Text: "after the restart"},
	}}
	h := newAgentHarness(t, "chat", sc)
	h.runner.SetTools(loop.ToolConfig{Rules: []permission.Rule{{Action: "bash", Resource: "*", Effect: "allow"}}})
	h.send("POST", "/api/session", map[string]any{"id": "ses_crash"})
	h.prompt("ses_crash", "go", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(filepath.Join(h.dir, "count.txt")); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.runner.Close() // the process stops mid-call
	h.restart()
	r2 := loop.NewRunner()
	r2.SetProvider(h.runner.Provider())
	t.Cleanup(r2.Close)
	New(Options{Store: h.opts.Store, Runner: r2, Bus: events.NewBus(0, nil), DefaultDirectory: h.dir})
	h.runner = r2
	msgs := h.waitIdle("ses_crash", 1)
	if b, _ := os.ReadFile(filepath.Join(h.dir, "count.txt")); string(b) != "ran\n" {
		t.Fatalf("the command ran %q", b)
	}
	p := toolParts(msgs)[0]
	if p.Get("state.error.type").String() != "ToolInterruptedError" {
		t.Fatalf("part after the restart: %s", p.Raw)
	}
	as := ofType(msgs, "assistant")
	if text(as[len(as)-1]) != "after the restart" {
		t.Fatal("the loop did not go on after the restart")
	}
}

func TestAgentInterruptKillsARunningCommand(t *testing.T) {
	marker := fmt.Sprintf("%d%04d", 8000+os.Getpid()%1000, time.Now().UnixNano()%10000)
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "sleep " + marker + "; true"})}},
	}}
	h := newAgentHarness(t, "chat", sc)
	h.runner.SetTools(loop.ToolConfig{Rules: []permission.Rule{{Action: "bash", Resource: "*", Effect: "allow"}}})
	h.send("POST", "/api/session", map[string]any{"id": "ses_i"})
	ev := h.subscribe(t)
	ev.next(t)
	h.prompt("ses_i", "go", nil)
	var types []string
	for !strings.Contains(strings.Join(types, " "), "session.next.tool.called") {
		types = append(types, gjson.Get(strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: "), "type").String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for !processWith(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := h.send("POST", "/api/session/ses_i/interrupt", nil); r.status != 204 && r.status != 200 {
		t.Fatalf("interrupt: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle("ses_i", 1)
	if msgs[len(msgs)-1]["outcome"] != "interrupted" {
		t.Fatalf("outcome %v", msgs[len(msgs)-1])
	}
	if p := toolParts(msgs)[0]; p.Get("state.error.type").String() != "MessageAbortedError" {
		t.Fatalf("part %s", p.Raw)
	}
	for deadline := time.Now().Add(5 * time.Second); processWith(marker); {
		if time.Now().After(deadline) {
			t.Fatal("the interrupted command is still running")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for !strings.Contains(strings.Join(types, " "), "session.next.tool.failed") {
		types = append(types, gjson.Get(strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: "), "type").String())
	}
	if len(sc.seen()) != 1 {
		t.Fatal("the loop went on after the interrupt")
	}
}

// processWith reports whether a live process's command line holds s.
func processWith(s string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
			return true
		}
	}
	return false
}

func TestAgentTotalsAndTodos(t *testing.T) {
	todos := []map[string]string{{"content": "write tests", "status": "in_progress", "priority": "high"}, {"content": "ship", "status": "pending", "priority": "low"}}
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "todowrite", map[string]any{"todos": todos})}},
		{Calls: []fakeprovider.Call{call("c2", "todoread", map[string]any{})}},
		{Text: "planned"},
	}}
	h := newAgentHarness(t, "chat", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_t"})
	h.prompt("ses_t", "plan", nil)
	msgs := h.waitIdle("ses_t", 1)
	if p := toolParts(msgs)[1]; !strings.Contains(p.Get("state.content.0.text").String(), "write tests") {
		t.Fatalf("todoread %s", p.Raw)
	}
	r := h.send("GET", "/session/ses_t/todo", nil)
	if r.status != 200 || gjson.ParseBytes(r.body).Get("#").Int() != 2 || gjson.GetBytes(r.body, "0.content").String() != "write tests" {
		t.Fatalf("todo route: %d %s", r.status, r.body)
	}
	if r := h.send("GET", "/session/ses_nope/todo", nil); r.status != 404 {
		t.Fatalf("unknown session's todos: %d", r.status)
	}
	// Three steps, each metered by the provider: the totals are their sums.
	info, _ := h.getSession("ses_t")
	var cost float64
	for _, m := range ofType(msgs, "assistant") {
		cost += m["cost"].(float64)
	}
	if info.Steps == nil || *info.Steps != 3 || info.Cost != cost || info.Tokens.Output != 3*float64(fakeprovider.OutputTokens-fakeprovider.ReasoningTokens) && info.Tokens.Output != 3*float64(fakeprovider.OutputTokens) {
		t.Fatalf("totals: steps %v cost %v (sum %v) tokens %+v", info.Steps, info.Cost, cost, info.Tokens)
	}
}

func TestAgentProjectAndInstanceRules(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "echo allowed-by-project"})}},
		{Calls: []fakeprovider.Call{call("c2", "read", map[string]any{"filePath": "notes.md"})}},
		{Text: "ok"},
	}}
	h := newAgentHarness(t, "chat", sc)
	os.WriteFile(filepath.Join(h.dir, "notes.md"), []byte("private notes"), 0o644)
	// The project's opencode.json allows the command (the instance trusts
	// the project's rules: otherwise they cannot allow a command); the
	// instance denies reading notes.
	os.WriteFile(filepath.Join(h.dir, "opencode.json"), []byte(`{
		// JSONC: comments allowed
		"permission": {"bash": {"echo *": "allow"}},
	}`), 0o644)
	h.runner.SetTools(loop.ToolConfig{Rules: []permission.Rule{{Action: "read", Resource: "notes.md", Effect: "deny"}}, TrustProjectPermissions: true})
	h.send("POST", "/api/session", map[string]any{"id": "ses_rules"})
	h.prompt("ses_rules", "go", nil)
	msgs := h.waitIdle("ses_rules", 1)
	parts := toolParts(msgs)
	if parts[0].Get("state.status").String() != "completed" || !strings.Contains(parts[0].Get("state.content.0.text").String(), "allowed-by-project") {
		t.Fatalf("the project's rule did not allow the command: %s", parts[0].Raw)
	}
	if parts[1].Get("state.error.type").String() != "PermissionDeniedError" {
		t.Fatalf("the instance's rule did not deny the read: %s", parts[1].Raw)
	}
}

// The session-scoped form routes of the released SDK: list, reject (204)
// and answer (204), another session's form not found.
func TestAgentQuestionSessionRoutes(t *testing.T) {
	ask := call("q1", "question", map[string]any{"questions": []map[string]any{{"question": "Go on?", "header": "Go",
		"options": []map[string]string{{"label": "Yes", "description": "y"}, {"label": "No", "description": "n"}}}}})
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{ask}}, {Text: "ok"}, {Calls: []fakeprovider.Call{ask}}, {Text: "stopped"}}}
	h := newAgentHarness(t, "chat", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_q2"})
	h.send("POST", "/api/session", map[string]any{"id": "ses_other"})
	h.prompt("ses_q2", "ask me", nil)
	form := h.waitPending("/api/session/ses_q2/question")
	id := form.Get("id").String()
	if r := h.get("/api/session/ses_other/question"); gjson.GetBytes(r.body, "data.#").Int() != 0 {
		t.Fatalf("another session's forms: %s", r.body)
	}
	wantError(t, h.send("POST", "/api/session/ses_other/question/"+id+"/reply", map[string]any{"answers": [][]string{{"Yes"}}}), 404, "FormNotFoundError", nil)
	wantError(t, h.send("POST", "/api/session/ses_none/question/"+id+"/reply", map[string]any{"answers": [][]string{{"Yes"}}}), 404, "SessionNotFoundError", nil)
	if r := h.send("POST", "/api/session/ses_q2/question/"+id+"/reply", map[string]any{"answers": [][]string{{"Yes"}}}); r.status != 204 {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	h.waitIdle("ses_q2", 1)
	h.prompt("ses_q2", "ask again", nil)
	second := h.waitPending("/api/session/ses_q2/question").Get("id").String()
	if r := h.send("POST", "/api/session/ses_q2/question/"+second+"/reject", nil); r.status != 204 {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle("ses_q2", 2)
	parts := toolParts(msgs)
	if len(parts) != 2 || parts[0].Get("state.status").String() != "completed" || parts[1].Get("state.error.type").String() != "QuestionRejectedError" {
		t.Fatalf("parts: %v", parts)
	}
}

// The released SDK's session permission routes: the pending requests of
// the session (and one by id) as PermissionV2Request records, answered
// with 204.
func TestAgentPermissionSessionRoutesV2(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "echo one"})}},
		{Text: "ok"},
	}}
	h := newAgentHarness(t, "chat", sc)
	h.send("POST", "/api/session", map[string]any{"id": "ses_v2"})
	h.send("POST", "/api/session", map[string]any{"id": "ses_v2other"})
	h.prompt("ses_v2", "go", nil)
	req := h.waitPending("/api/session/ses_v2/permission")
	id := req.Get("id").String()
	if req.Get("action").String() != "bash" || req.Get("resources.0").String() != "echo one" || req.Get("save.0").String() != "echo one *" ||
		req.Get("source.type").String() != "tool" || req.Get("source.callID").String() != "c1" || req.Get("sessionID").String() != "ses_v2" {
		t.Fatalf("request: %s", req.Raw)
	}
	if r := h.get("/api/session/ses_v2/permission/" + id); gjson.GetBytes(r.body, "data.id").String() != id || gjson.GetBytes(r.body, "data.action").String() != "bash" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	wantError(t, h.get("/api/session/ses_v2other/permission/"+id), 404, "PermissionNotFoundError", nil)
	wantError(t, h.get("/api/session/ses_none/permission/"+id), 404, "SessionNotFoundError", nil)
	if r := h.get("/api/permission/request"); gjson.GetBytes(r.body, "data.0.id").String() != id {
		t.Fatalf("instance list: %s", r.body)
	}
	if r := h.send("POST", "/api/session/ses_v2/permission/"+id+"/reply", map[string]any{"reply": "once"}); r.status != 204 {
		t.Fatalf("reply: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle("ses_v2", 1)
	if p := toolParts(msgs)[0]; p.Get("state.status").String() != "completed" {
		t.Fatalf("part: %s", p.Raw)
	}
}

// The workspace gateway's refusals name their cause in plain words, with
// the gateway's own message and what to do.
func TestAgentRefusalsSayWhy(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   []string
	}{
		{402, `{"_tag":"BudgetExceeded","message":"budget exceeded: 0 USD remaining of 5 USD","error":{"type":"BudgetExceeded","message":"budget exceeded: 0 USD remaining of 5 USD"}}`,
			[]string{"The workspace budget refused this turn: budget exceeded: 0 USD remaining of 5 USD", "raise the budget in the Console"}},
		{403, `{"_tag":"PolicyDenied","message":"model fake-model is denied by policy","error":{"type":"PolicyDenied","message":"model fake-model is denied by policy"}}`,
			[]string{"A workspace policy refused this turn: model fake-model is denied by policy", "in the Console"}},
		{401, `{"_tag":"Unauthorized","message":"missing, invalid, expired or revoked credential","error":{"type":"Unauthorized","message":"missing, invalid, expired or revoked credential"}}`,
			[]string{"refused this instance's key: missing, invalid, expired or revoked credential", "`api_key`", "`provider` block"}},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			h := newAgentHarness(t, "chat", &script{pick: func(string, int) fakeprovider.Step { return fakeprovider.Step{Text: "unused"} }})
			h.fake.SetBehavior(fakeprovider.Behavior{Status: c.status, Body: c.body})
			h.send("POST", "/api/session", map[string]any{"id": "ses_r"})
			h.prompt("ses_r", "go", nil)
			msgs := h.waitIdle("ses_r", 1)
			as := ofType(msgs, "assistant")
			if len(as) != 1 || msgs[len(msgs)-1]["outcome"] != "failed" {
				t.Fatalf("messages: %v", msgs)
			}
			raw, _ := json.Marshal(as[0])
			msg := gjson.GetBytes(raw, "error.message").String()
			if gjson.GetBytes(raw, "error.status").Int() != int64(c.status) || gjson.GetBytes(raw, "error.type").String() != "APIError" {
				t.Fatalf("error: %s", raw)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("error message %q lacks %q", msg, w)
				}
			}
		})
	}
}

// An unreachable provider is named as such, with what to check.
func TestAgentUnreachableSaysWhy(t *testing.T) {
	h := newAgentHarness(t, "chat", &script{pick: func(string, int) fakeprovider.Step { return fakeprovider.Step{Text: "unused"} }})
	p := h.runner.Provider()
	h.fake.Close() // nothing answers at its address now
	h.runner.SetProvider(p)
	h.send("POST", "/api/session", map[string]any{"id": "ses_u"})
	h.prompt("ses_u", "go", nil)
	msgs := h.waitIdle("ses_u", 1)
	as := ofType(msgs, "assistant")
	if len(as) != 1 {
		t.Fatalf("messages: %v", msgs)
	}
	raw, _ := json.Marshal(as[0])
	msg := gjson.GetBytes(raw, "error.message").String()
	if gjson.GetBytes(raw, "error.type").String() != "ProviderConnectionError" || !strings.HasPrefix(msg, "Cannot reach the provider: ") ||
		!strings.Contains(msg, "check the `provider` block's address") || strings.Contains(msg, fakeKey) {
		t.Fatalf("error: %s", raw)
	}
}

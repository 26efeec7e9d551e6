package server

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/sandbox"
)

// TestInfoReportsTheSandbox: GET /api/info says what confines commands
// and plugins: enforced (layers, network, limits), off, or unavailable.
func TestInfoReportsTheSandbox(t *testing.T) {
	h := newSrvHarness(t, nil)
	st := gjson.ParseBytes(h.get("/api/info").body).Get("sandbox")
	if st.Get("mode").String() != "enforced" {
		if os.Getenv("CI") != "" || st.Get("mode").String() != "unavailable" {
			t.Fatalf("sandbox: %s", st.Raw)
		}
		t.Skipf("no sandbox on this host: %s", st.Get("reason"))
	}
	if !strings.Contains(st.Get("layers").Raw, "namespaces") || st.Get("network").String() != "loopback only" ||
		!st.Get("limits.processes").Exists() || !st.Get("limits.cpu").Exists() {
		t.Fatalf("sandbox: %s", st.Raw)
	}
	off := newSrvHarness(t, func(o *Options) { o.Sandbox = sandbox.New(sandbox.Config{Off: true}) })
	if m := gjson.ParseBytes(off.get("/api/info").body).Get("sandbox.mode").String(); m != "off" {
		t.Fatalf("off: %s", m)
	}
	// The web app says so on every page.
	if page := string(off.get("/").body); !strings.Contains(page, "data-sandbox") || !strings.Contains(page, "sandbox is off") {
		t.Fatalf("the web app does not show the sandbox is off:\n%s", page)
	}
	if page := string(h.get("/").body); strings.Contains(page, "data-sandbox") {
		t.Fatal("the web app warns while the sandbox is enforced")
	}
	un := newSrvHarness(t, func(o *Options) { o.Sandbox = sandbox.New(sandbox.Config{Unavailable: "simulated"}) })
	if st := gjson.ParseBytes(un.get("/api/info").body).Get("sandbox"); st.Get("mode").String() != "unavailable" || st.Get("reason").String() != "simulated" {
		t.Fatalf("unavailable: %s", st.Raw)
	}
}

// TestLocationsTheSandboxRefuses: /, a home directory and a directory
// holding the server's data are no location.
func TestLocationsTheSandboxRefuses(t *testing.T) {
	data := canonicalTempDir(t)
	h := newSrvHarness(t, func(o *Options) {
		o.Sandbox = sandbox.New(sandbox.Config{Hidden: []string{filepath.Join(data, "agentgate")}})
	})
	for _, dir := range []string{"/", "/root", data} {
		r := h.get("/api/location" + locQuery(dir))
		m := wantError(t, r, 403, "LocationPermissionDeniedError", nil)
		if !strings.Contains(m["message"].(string), "refused") {
			t.Fatalf("%s: %s", dir, r.body)
		}
	}
	if r := h.get("/api/location" + locQuery(h.dir)); r.status != 200 {
		t.Fatalf("a project: %d %s", r.status, r.body)
	}
}

// TestBashRefusedWithoutASandbox: on a host without namespaces (simulated)
// bash is refused with a clear tool error, never run unconfined.
func TestBashRefusedWithoutASandbox(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "touch ran.txt"})}},
		{Text: "done"},
	}}
	h := newAgentHarness(t, "chat", sc)
	h.runner.SetTools(loop.ToolConfig{Rules: []permission.Rule{{Action: "bash", Resource: "*", Effect: "allow"}},
		Sandbox: sandbox.New(sandbox.Config{Unavailable: "user namespaces are disabled (simulated)"})})
	h.send("POST", "/api/session", map[string]any{"id": "ses_nosbx"})
	h.prompt("ses_nosbx", "go", nil)
	msgs := h.waitIdle("ses_nosbx", 1)
	p := toolParts(msgs)[0]
	if p.Get("state.status").String() != "error" || !strings.Contains(p.Get("state.error.message").String(), "sandbox") ||
		!strings.Contains(p.Get("state.error.message").String(), "sandbox off") {
		t.Fatalf("bash without a sandbox: %s", p.Raw)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "ran.txt")); err == nil {
		t.Fatal("the command ran unconfined")
	}
}

// TestBashCannotReachTheServerOrItsSecrets runs through the real tool
// path: a command cannot read the server's environment through /proc nor
// connect to the instance's own API (to answer its own asks).
func TestBashCannotReachTheServerOrItsSecrets(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	t.Setenv("AGENTGATE_MASTER_KEY", "master-key-in-env-77")
	h := newAgentHarness(t, "chat", &script{})
	cmd := "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c master-key-in-env-77; curl -sS -m 3 " + h.ts.URL + "/api/info; echo; echo done"
	h.fake.SetBehavior(fakeprovider.Behavior{Script: (&script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": cmd})}},
		{Text: "done"},
	}}).next})
	h.runner.SetTools(loop.ToolConfig{Rules: []permission.Rule{{Action: "bash", Resource: "*", Effect: "allow"}}})
	h.send("POST", "/api/session", map[string]any{"id": "ses_reach"})
	h.prompt("ses_reach", "go", nil)
	msgs := h.waitIdle("ses_reach", 1)
	out := toolParts(msgs)[0].Get("state.content.0.text").String()
	if strings.Contains(out, "master-key-in-env-77") || strings.Contains(out, `"version"`) || !strings.Contains(out, "done") {
		t.Fatalf("the command reached the server: %s", out)
	}
}

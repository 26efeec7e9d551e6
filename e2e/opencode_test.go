package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// opencodeBinary is the released OpenCode CLI's platform binary, from the
// committed lockfile of examples/clients (npm package opencode-ai and its
// platform package).
func opencodeBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := nodeReady(t, ctx)
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	bin := filepath.Join(dir, "node_modules", "opencode-"+runtime.GOOS+"-"+arch, "bin", "opencode")
	if _, err := os.Stat(bin); err != nil {
		msg := "the OpenCode CLI's platform binary is not installed: " + bin
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// opencodeEnv isolates the CLI: its home, config, data, cache and state in
// a temp dir, no update checks, model fetches, sharing or LSP downloads.
func opencodeEnv(t *testing.T) []string {
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "config"), "XDG_DATA_HOME=" + filepath.Join(home, "data"),
		"XDG_CACHE_HOME=" + filepath.Join(home, "cache"), "XDG_STATE_HOME=" + filepath.Join(home, "state"),
		"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"NO_COLOR=1", "TERM=xterm-256color"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestOpenCodeRunAttach runs `opencode run --attach` from the released
// CLI against the instance server: it creates a session over the v1
// routes, the agent reads a file through a tool and answers through the
// gateway, and the CLI prints the answer and exits 0.
func TestOpenCodeRunAttach(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	ctx := testContext(t, 3*time.Minute)
	oc := opencodeBinary(t, ctx)
	bin := caddyBinary(t)
	s := startServer(t, ctx, bin, config{})
	tn := s.bootstrap(t, ctx, "OpenCode")
	const secret = "sk-provider-opencode-SECRET"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var mu sync.Mutex
	n := 0
	p.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n == 1 {
			return fakeprovider.Step{Calls: []fakeprovider.Call{{ID: "call_read", Name: "read", Args: args(map[string]any{"filePath": "NOTES.md"})}}}
		}
		return fakeprovider.Step{Text: "The notes say: ship on Friday."}
	}})
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "NOTES.md"), []byte("ship on Friday\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gi := s.gatewayInstance(t, ctx, tn, p, secret, project, "")

	cmd := exec.CommandContext(ctx, oc, "run", "--attach", gi.base, "-p", "pw-e2e", "what do the notes say?")
	cmd.Dir = project
	cmd.Env = opencodeEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("opencode run --attach: %v\n%s\nserver log:\n%s", err, out, tail(s.stderr.String(), 40))
	}
	if !strings.Contains(string(out), "The notes say: ship on Friday.") {
		t.Fatalf("the answer is not printed:\n%s", out)
	}
	t.Logf("opencode run --attach printed:\n%s", out)

	// The session is the instance's own: its messages through the v2 API.
	_, b, _ := call(ctx, httpClient, "GET", gi.base+"/api/session?order=desc&limit=1", gi.auth, nil)
	sid := gjson.GetBytes(b, "data.0.id").String()
	_, b, _ = call(ctx, httpClient, "GET", gi.base+"/api/session/"+sid+"/message?order=asc", gi.auth, nil)
	types := gjson.GetBytes(b, "data.#.type").String()
	if types != `["user","assistant","assistant","idle"]` ||
		gjson.GetBytes(b, `data.1.content.#(type=="tool").state.status`).String() != "completed" {
		t.Fatalf("session %s messages: %s", sid, b)
	}
}

// tmuxScreen drives a terminal program under its own tmux server.
type tmuxScreen struct {
	t      *testing.T
	socket string // the server's socket, in the test's temp dir
}

func (m *tmuxScreen) run(ctx context.Context, args ...string) string {
	m.t.Helper()
	out, err := exec.CommandContext(ctx, "tmux", append([]string{"-S", m.socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		m.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (m *tmuxScreen) screen(ctx context.Context) string { return m.run(ctx, "capture-pane", "-p", "-t", "tui") }

// waitFor waits until the screen holds every text.
func (m *tmuxScreen) waitFor(ctx context.Context, what string, texts ...string) string {
	m.t.Helper()
	var last string
	for {
		last = m.screen(ctx)
		ok := true
		for _, s := range texts {
			ok = ok && strings.Contains(last, s)
		}
		if ok {
			return last
		}
		select {
		case <-ctx.Done():
			m.t.Fatalf("%s: the screen never showed %q; it shows:\n%s", what, texts, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestOpenCodeTUIJourney drives the released TUI (`opencode attach`)
// under tmux against the instance server: it opens, a prompt streams its
// answer, the agent's bash call asks for permission, the user allows it
// in the TUI, and the command's output and the final answer show.
func TestOpenCodeTUIJourney(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		msg := "tmux is not installed: the TUI journey cannot run (.ci/run installs it)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx := testContext(t, 3*time.Minute)
	oc := opencodeBinary(t, ctx)
	bin := caddyBinary(t)
	s := startServer(t, ctx, bin, config{})
	tn := s.bootstrap(t, ctx, "TUI")
	const secret = "sk-provider-tui-SECRET"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		if strings.Contains(string(body), `"role":"tool"`) {
			return fakeprovider.Step{Text: "The command printed hi-from-bash."}
		}
		return fakeprovider.Step{Text: "Running it.", Calls: []fakeprovider.Call{{ID: "call_bash", Name: "bash",
			Args: `{"command":"echo hi-from-bash","description":"say hi"}`}}}
	}})
	project := t.TempDir()
	gi := s.gatewayInstance(t, ctx, tn, p, secret, project, "")

	// The TUI runs from a script that sets its isolated environment.
	script := filepath.Join(t.TempDir(), "tui.sh")
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, kv := range opencodeEnv(t) {
		k, v, _ := strings.Cut(kv, "=")
		if k == "NO_COLOR" {
			continue
		}
		b.WriteString("export " + k + "='" + strings.ReplaceAll(v, "'", `'\''`) + "'\n")
	}
	b.WriteString("cd '" + project + "'\nexec '" + oc + "' attach '" + gi.base + "' -p pw-e2e\n")
	if err := os.WriteFile(script, []byte(b.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	m := &tmuxScreen{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock")}
	m.run(ctx, "new-session", "-d", "-s", "tui", "-x", "160", "-y", "45", script)
	t.Cleanup(func() { exec.Command("tmux", "-S", m.socket, "kill-server").Run() })

	m.waitFor(ctx, "the TUI opens", "Ask anything", "gpt-4o")
	m.run(ctx, "send-keys", "-t", "tui", "-l", "run the hello command")
	time.Sleep(300 * time.Millisecond)
	m.run(ctx, "send-keys", "-t", "tui", "Enter")
	m.waitFor(ctx, "the permission ask", "Permission required", "echo hi-from-bash", "Allow once")
	m.run(ctx, "send-keys", "-t", "tui", "Enter") // Allow once
	final := m.waitFor(ctx, "the answer", "hi-from-bash", "The command printed hi-from-bash.")
	t.Logf("the TUI shows:\n%s", final)

	// The TUI's answer reached the agent: the call ran once, allowed.
	_, body, _ := call(ctx, httpClient, "GET", gi.base+"/api/session?order=desc&limit=1", gi.auth, nil)
	sid := gjson.GetBytes(body, "data.0.id").String()
	_, body, _ = call(ctx, httpClient, "GET", gi.base+"/api/session/"+sid+"/message?order=asc", gi.auth, nil)
	part := gjson.GetBytes(body, `data.#(type=="assistant").content.#(type=="tool")`)
	if part.Get("state.status").String() != "completed" || !strings.Contains(part.Get("state.content.0.text").String(), "hi-from-bash") {
		t.Fatalf("the bash call: %s", body)
	}
}

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

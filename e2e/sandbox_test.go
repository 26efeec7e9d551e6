package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// TestSandboxEscapesThroughTheRealBinary: the real binary, its default
// sandbox, an agent whose rules allow every command. The escapes a review
// found are tried through the bash tool: the server's environment through
// /proc, the master key and the Badger directory, a home's SSH key, the
// instance's own API, the project's .env, its git hooks and opencode.json;
// inside, no capabilities. Daemons the command leaves (setsid, nohup) are
// gone when the call returns, and a command still running dies with the
// server when it is killed with SIGKILL.
func TestSandboxEscapesThroughTheRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	caddyBinary(t) // built before the test's own time starts
	ctx := testContext(t, 3*time.Minute)
	t.Setenv("SANDBOX_E2E_SERVER_SECRET", "server-env-secret-41")
	const secret = "sk-provider-sandbox-SECRET"
	s, tn, p := fakeWorkspace(t, ctx, "Sandbox", secret)
	// The server's home (a temporary one, see newServer) holds an SSH key.
	home := s.home()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("ssh-key-secret-42"), 0o600)
	data := filepath.Join(s.dir, "xdg-data", "caddy", "agentgate")
	if _, err := os.Stat(filepath.Join(data, "master.key")); err != nil {
		t.Fatalf("no master key in %s: %v", data, err)
	}
	project := t.TempDir()
	for f, v := range map[string]string{".env": "DOTENV=dotenv-secret-43", "opencode.json": "{}", ".git/config": "[core]\n", ".git/HEAD": "ref: refs/heads/main\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(project, f)), 0o755)
		os.WriteFile(filepath.Join(project, f), []byte(v), 0o644)
	}
	marker := fmt.Sprintf("%d%03d", 7000+os.Getpid()%1000, time.Now().UnixNano()%1000)
	escapes := fmt.Sprintf(`cat /proc/%d/environ; for f in /proc/[0-9]*/environ; do cat $f; done; echo
cat %s/master.key; ls %s/badger; cat %s/.ssh/id_ed25519 ~/.ssh/id_ed25519; cat .env
curl -sS -m 2 %%s/api/info || echo API-UNREACHABLE
echo evil > .git/hooks/pre-commit || echo HOOK-REFUSED; echo '{"permission":{"bash":"allow"}}' > opencode.json || echo CONFIG-REFUSED
grep -E '^(CapEff|NoNewPrivs)' /proc/self/status
setsid -f sleep 1%s; nohup sleep 2%s >/dev/null 2>&1 & (sleep 3%s &); echo escapes-done`, s.cmd.Process.Pid, data, data, home, marker, marker, marker)
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var mu sync.Mutex
	n := 0
	var base string
	p.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		mu.Lock()
		defer mu.Unlock()
		n++
		switch n {
		case 1:
			return fakeprovider.Step{Calls: []fakeprovider.Call{{ID: "call_escape", Name: "bash", Args: args(map[string]any{"command": fmt.Sprintf(escapes, base)})}}}
		case 3:
			return fakeprovider.Step{Calls: []fakeprovider.Call{{ID: "call_long", Name: "bash", Args: args(map[string]any{"command": "setsid -f sleep 4" + marker + "; sleep 5" + marker})}}}
		}
		return fakeprovider.Step{Text: "done"}
	}})
	gi := s.gatewayInstance(t, ctx, tn, p, secret, project, "", "\t\tpermission bash * allow\n")
	mu.Lock()
	base = gi.base
	mu.Unlock()
	st, b, _ := call(ctx, httpClient, "POST", gi.base+"/api/session", gi.auth, map[string]any{"title": "escapes"})
	id := gjson.GetBytes(b, "data.id").String()
	if st != 200 {
		t.Fatalf("create: %d %s", st, b)
	}
	if st, b, _ := call(ctx, httpClient, "POST", gi.base+"/api/session/"+id+"/prompt", gi.auth, map[string]any{"text": "try"}); st != 200 {
		t.Fatalf("prompt: %d %s", st, b)
	}
	var ex []byte
	waitFor(t, ctx, "the run settles", func() bool {
		_, ex, _ = call(ctx, httpClient, "GET", gi.base+"/api/experimental/session/"+id+"/export", gi.auth, nil)
		return gjson.GetBytes(ex, `data.messages.#(type=="idle")#|#`).Int() >= 1
	})
	out := gjson.GetBytes(ex, `data.messages.#(type=="assistant")#.content.#(type=="tool")#|@flatten|0.state.content.0.text`).String()
	for _, leaked := range []string{"server-env-secret-41", "ssh-key-secret-42", "dotenv-secret-43", `"version"`, "MANIFEST", "KEYREGISTRY"} {
		if strings.Contains(out, leaked) {
			t.Fatalf("the command reached %q:\n%s", leaked, out)
		}
	}
	if mk, _ := os.ReadFile(filepath.Join(data, "master.key")); len(mk) > 0 && strings.Contains(out, strings.TrimSpace(string(mk))) {
		t.Fatalf("the command read the master key:\n%s", out)
	}
	for _, want := range []string{"API-UNREACHABLE", "HOOK-REFUSED", "CONFIG-REFUSED", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "escapes-done"} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(project, "opencode.json")); string(b) != "{}" {
		t.Fatalf("opencode.json changed: %s", b)
	}
	waitFor(t, ctx, "the daemons end with the call", func() bool {
		return len(testenv.HostProcesses("sleep 1"+marker)) == 0 && len(testenv.HostProcesses("sleep 2"+marker)) == 0 && len(testenv.HostProcesses("sleep 3"+marker)) == 0
	})

	// A command still running when the server is killed dies with it.
	if st, b, _ := call(ctx, httpClient, "POST", gi.base+"/api/session/"+id+"/prompt", gi.auth, map[string]any{"text": "again"}); st != 200 {
		t.Fatalf("prompt: %d %s", st, b)
	}
	waitFor(t, ctx, "the long command runs", func() bool {
		return len(testenv.HostProcesses("sleep 5"+marker)) > 0 && len(testenv.HostProcesses("sleep 4"+marker)) > 0
	})
	s.kill()
	waitFor(t, ctx, "the sandbox dies with the server", func() bool {
		return len(testenv.HostProcesses("sleep 4"+marker)) == 0 && len(testenv.HostProcesses("sleep 5"+marker)) == 0
	})
}

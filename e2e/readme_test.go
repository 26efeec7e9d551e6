package e2e

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/testenv"
)

// readmeBlocks returns the sh blocks of the README section that starts
// with heading, in order.
func readmeBlocks(t *testing.T, readme, heading string) []string {
	t.Helper()
	_, sec, ok := strings.Cut(readme, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("the README has no section %q", heading)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var blocks []string
	for {
		_, rest, ok := strings.Cut(sec, "```sh\n")
		if !ok {
			return blocks
		}
		block, after, ok := strings.Cut(rest, "```\n")
		if !ok {
			t.Fatalf("an unclosed sh block in %q", heading)
		}
		blocks, sec = append(blocks, block), after
	}
}

// TestReadmeAsWritten runs the README's first set-up command and its
// bootstrap blocks verbatim, as a newcomer does in a fresh clone: `go run
// ./cmd/caddy run` on the default Caddyfile (its real ports), then the
// blocks in bash. Afterwards the key the blocks made reads the config with
// the connection they declared, and the checkout is as it was (no password
// file left in it). Caddy's and the shell's home, XDG and temporary
// directories and the tools' caches are temporary (testenv.ToolVars).
func TestReadmeAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip(shortSkip)
	}
	missing := t.Skipf
	if os.Getenv("CI") != "" {
		missing = t.Fatalf
	}
	for _, tool := range []string{"bash", "curl", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing("the README's commands need %s: %v", tool, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:4096", "127.0.0.1:2019"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			missing("the default Caddyfile's address %s is taken: %v", addr, err)
		}
		ln.Close()
	}
	ctx := testContext(t, 12*time.Minute)
	root := testenv.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	setup := readmeBlocks(t, string(readme), "## Set up")
	if len(setup) != 1 {
		t.Fatalf("## Set up has %d sh blocks, want exactly one", len(setup))
	}
	lines := strings.Split(strings.TrimSpace(setup[0]), "\n")
	if len(lines) != 2 {
		t.Fatalf("## Set up shows %d commands, want exactly two (run, test): %q", len(lines), lines)
	}
	runCmd, _, _ := strings.Cut(lines[0], "#")
	if strings.TrimSpace(runCmd) != "go run ./cmd/caddy run" {
		t.Fatalf("the first set-up command is %q", runCmd)
	}
	blocks := readmeBlocks(t, string(readme), "## Bootstrapping the first workspace, owner and key")
	if len(blocks) != 3 {
		t.Fatalf("the bootstrap section has %d sh blocks, want 3", len(blocks))
	}
	gitStatus := func() string {
		out, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=all").Output()
		if err != nil {
			t.Fatalf("git status: %v", err)
		}
		return string(out)
	}
	before := gitStatus()

	// The home, XDG directories, TMPDIR and the tools' caches are
	// temporary (testenv.ToolVars, which keeps the Go caches real).
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "XDG_") || strings.HasPrefix(name, "AGENTGATE_") {
			continue
		}
		env = append(env, kv)
	}
	env = testenv.SetEnv(env, testenv.ToolVars(t)...)

	var logs syncBuffer
	srv := exec.Command("bash", "-c", "exec "+strings.TrimSpace(runCmd))
	srv.Dir, srv.Env, srv.Stdout, srv.Stderr = root, env, &logs, &logs
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-srv.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("go run ./cmd/caddy run:\n%s", tail(logs.String(), 8000))
		}
	})
	for {
		resp, err := http.Get("http://localhost:8080/api/v2/config")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("go run ./cmd/caddy run exited:\n%s", tail(logs.String(), 8000))
		case <-ctx.Done():
			t.Fatal("the server did not answer on localhost:8080 in time")
		case <-time.After(300 * time.Millisecond):
		}
	}

	script := "set -euo pipefail\nshopt -s expand_aliases\n" + strings.Join(blocks, "\n")
	sh := exec.CommandContext(ctx, "bash", "-c", script)
	sh.Dir = root
	sh.Env = append(env, "OPENAI_API_KEY=sk-readme-test-0123456789")
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		t.Fatalf("the README's bootstrap blocks failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), tail(stderr.String(), 4000))
	}
	if !strings.Contains(stdout.String(), `{"providers":{}`) {
		t.Errorf("the README's GET /api/v2/config printed no config:\n%s", stdout.String())
	}
	m := regexp.MustCompile(`OpenAI SDK base URL: (http://localhost:8080/custom/conn_[A-Za-z0-9_-]+)  API key: (ag_sk_[A-Za-z0-9_]+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("the blocks did not end with a base URL and a key:\n%s", stdout.String())
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://localhost:8080/api/v2/config", nil)
	req.Header.Set("Authorization", "Bearer "+m[2])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var cfg bytes.Buffer
	cfg.ReadFrom(resp.Body)
	resp.Body.Close()
	conn := strings.TrimPrefix(m[1], "http://localhost:8080/custom/")
	if resp.StatusCode != 200 || !strings.Contains(cfg.String(), conn) || !strings.Contains(cfg.String(), "gpt-4o-mini") {
		t.Fatalf("GET /api/v2/config with the README's key: %d %s", resp.StatusCode, cfg.String())
	}
	if strings.Contains(stdout.String()+stderr.String()+logs.String(), "a long passphrase") {
		t.Error("the README's password was printed or logged")
	}
	if after := gitStatus(); after != before {
		t.Errorf("the README's commands changed the checkout:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

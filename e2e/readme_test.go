package e2e

import (
	"bytes"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// markdownBlocks returns the sh blocks of the section of a Markdown file
// (its text, and its name for messages) that starts with heading, in
// order; the section ends at the next heading of level two.
func markdownBlocks(t *testing.T, text, file, heading string) []string {
	t.Helper()
	_, sec, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", file, heading)
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
			t.Fatalf("an unclosed sh block in %s, %q", file, heading)
		}
		blocks, sec = append(blocks, block), after
	}
}

// The provider variables the Quick start's first block has the reader
// set; the test sets them to its fake provider instead.
var quickStartProvider = []string{"PROVIDER_API_KEY", "PROVIDER_BASE_URL", "PROVIDER_KIND", "PROVIDER_MODEL"}

// instanceIsWorkspaceMember reports whether the default Caddyfile makes
// the instance server a member of a workspace (agent_instance { workspace
// … }), which the Quick start's TUI step relies on.
func instanceIsWorkspaceMember(caddyfile string) bool {
	return regexp.MustCompile(`(?s)agent_instance\s*\{[^}]*\n\s*workspace\s`).MatchString(caddyfile)
}

// TestReadmeAsWritten runs the README's first set-up command and its
// Quick start verbatim, as a newcomer does in a fresh clone: `go run
// ./cmd/caddy run` on the default Caddyfile (its real ports), then the
// Quick start's blocks in one bash, with the provider variables of its
// first block pointing at a fake provider: the owner, a key, a connection
// and a workspace model, a request with the official OpenAI SDK whose
// answer and usage record are checked, and last `opencode attach` under
// tmux, where a prompt gets the provider's answer and a usage record that
// names the agent session. Then the operator's walk-through in
// docs/console.md runs too, and its key reads the config with the
// connection it declared. The checkout is as it was afterwards (no
// password file left in it), and nothing printed or logged the password.
// Caddy's, npm's, OpenCode's and the shell's home, XDG and temporary
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
	nodeReady(t, ctx) // the SDK and the released OpenCode CLI of examples/clients
	root := testenv.RepoRoot(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme := read("README.md")
	setup := markdownBlocks(t, readme, "README.md", "## Set up")
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
	if n := strings.Count(readme, "\n"); n >= 300 {
		t.Errorf("the README has %d lines; it stays under 300 (reference text goes to docs/)", n)
	}

	// The Quick start: the reader's provider variables, the blocks that
	// run in their shell, and last the TUI.
	quick := markdownBlocks(t, readme, "README.md", "## Quick start")
	if len(quick) < 3 {
		t.Fatalf("the Quick start has %d sh blocks, want the provider's variables, the commands and the TUI", len(quick))
	}
	var set []string
	for _, l := range strings.Split(strings.TrimSpace(quick[0]), "\n") {
		m := regexp.MustCompile(`^export (PROVIDER_[A-Z_]+)=\S+\s*(#.*)?$`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("the Quick start's first block only sets the provider's variables; it has %q", l)
		}
		set = append(set, m[1])
	}
	slices.Sort(set)
	if !slices.Equal(set, quickStartProvider) || !strings.Contains(quick[0], "https://api.openai.com/v1") {
		t.Fatalf("the Quick start's first block sets %v, want %v with the values for OpenAI:\n%s", set, quickStartProvider, quick[0])
	}
	shell, tui := quick[1:len(quick)-1], strings.TrimSpace(quick[len(quick)-1])
	if strings.Contains(tui, "\n") || !strings.Contains(tui, "opencode attach http://localhost:4096") {
		t.Fatalf("the Quick start's last block is one command, opencode attach http://localhost:4096: %q", tui)
	}
	for _, b := range shell {
		if strings.Contains(b, "opencode attach") {
			t.Fatalf("opencode attach is a TUI: the Quick start's last block, and alone:\n%s", b)
		}
	}
	operator := markdownBlocks(t, read("docs/console.md"), "docs/console.md", "## Bootstrapping the first workspace, owner and key")
	if len(operator) != 3 {
		t.Fatalf("docs/console.md's bootstrap section has %d sh blocks, want 3", len(operator))
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
		if name == "HOME" || name == "TMPDIR" || strings.HasPrefix(name, "XDG_") || strings.HasPrefix(name, "AGENTGATE_") ||
			strings.HasPrefix(name, "PROVIDER_") || strings.HasPrefix(name, "OPENCODE") || strings.HasPrefix(strings.ToLower(name), "npm_config_") {
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

	const secret, upstream = "sk-provider-readme-SECRET", "fake-mini"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	provider := []string{"PROVIDER_KIND=openai", "PROVIDER_BASE_URL=" + p.URL + "/v1", "PROVIDER_API_KEY=" + secret, "PROVIDER_MODEL=" + upstream}

	// The Quick start's commands, in one bash; the test's own last line
	// prints the variables it needs to check what they made.
	script := "set -euo pipefail\nshopt -s expand_aliases\n" + strings.Join(shell, "\n") +
		"\necho \"readme-test: ANN_TOKEN=$ANN_TOKEN SA=$SA CONN=$CONN\"\n"
	sh := exec.CommandContext(ctx, "bash", "-c", script)
	sh.Dir = root
	sh.Env = append(slices.Clone(env), provider...)
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		t.Fatalf("the README's Quick start failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), tail(stderr.String(), 4000))
	}
	out := stdout.String()
	m := regexp.MustCompile(`readme-test: ANN_TOKEN=(ag_at_\S+) SA=(sa_\S+) CONN=(conn_\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the Quick start made no owner token, service account or connection:\n%s", out)
	}
	annToken, sa, conn := m[1], m[2], m[3]
	if !strings.Contains(out, fakeprovider.Text+"\n") {
		t.Fatalf("the SDK did not print the provider's answer %q:\n%s\nstderr:\n%s", fakeprovider.Text, out, tail(stderr.String(), 4000))
	}
	last := p.Last()
	if gjson.GetBytes(last.Body, "model").String() != upstream || last.Header.Get("Authorization") != "Bearer "+secret {
		t.Fatalf("the provider got model %q with %q", gjson.GetBytes(last.Body, "model").String(), last.Header.Get("Authorization"))
	}

	// usage lists the usage records the owner sees for the query, once
	// they are settled (after the answer, in batches).
	usage := func(what string, q url.Values, want func(gjson.Result) bool) gjson.Result {
		t.Helper()
		var got gjson.Result
		waitFor(t, ctx, what, func() bool {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://localhost:8080/api/v1/usage?"+q.Encode(), nil)
			req.Header.Set("Authorization", "Bearer "+annToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			resp.Body.Close()
			for _, r := range gjson.GetBytes(b.Bytes(), "data").Array() {
				if want(r) {
					got = r
					return true
				}
			}
			return false
		})
		return got
	}
	rec := usage("the SDK request's usage record", url.Values{"model": {"chat"}}, func(r gjson.Result) bool {
		return r.Get("member_id").String() == sa
	})
	if rec.Get("connection").String() != conn || rec.Get("upstream_model").String() != upstream || rec.Get("status").Int() != 200 ||
		rec.Get("tokens.output").Int()+rec.Get("tokens.reasoning").Int() != fakeprovider.OutputTokens || rec.Get("cost_usd").Float() <= 0 {
		t.Fatalf("the SDK request's usage record: %s", rec.Raw)
	}

	// The operator's walk-through in docs/console.md, on the same server.
	sh = exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\nshopt -s expand_aliases\n"+strings.Join(operator, "\n"))
	sh.Dir = root
	sh.Env = append(slices.Clone(env), "OPENAI_API_KEY=sk-readme-test-0123456789")
	var opOut, opErr bytes.Buffer
	sh.Stdout, sh.Stderr = &opOut, &opErr
	if err := sh.Run(); err != nil {
		t.Fatalf("docs/console.md's bootstrap blocks failed: %v\nstdout:\n%s\nstderr:\n%s", err, opOut.String(), tail(opErr.String(), 4000))
	}
	if !strings.Contains(opOut.String(), `{"providers":{}`) {
		t.Errorf("docs/console.md's GET /api/v2/config printed no config:\n%s", opOut.String())
	}
	km := regexp.MustCompile(`OpenAI SDK base URL: (http://localhost:8080/custom/conn_[A-Za-z0-9_-]+)  API key: (ag_sk_[A-Za-z0-9_]+)`).FindStringSubmatch(opOut.String())
	if km == nil {
		t.Fatalf("docs/console.md's blocks did not end with a base URL and a key:\n%s", opOut.String())
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://localhost:8080/api/v2/config", nil)
	req.Header.Set("Authorization", "Bearer "+km[2])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var cfg bytes.Buffer
	cfg.ReadFrom(resp.Body)
	resp.Body.Close()
	opConn := strings.TrimPrefix(km[1], "http://localhost:8080/custom/")
	if resp.StatusCode != 200 || !strings.Contains(cfg.String(), opConn) || !strings.Contains(cfg.String(), "gpt-4o-mini") {
		t.Fatalf("GET /api/v2/config with docs/console.md's key: %d %s", resp.StatusCode, cfg.String())
	}

	checkTraces := func() {
		t.Helper()
		if strings.Contains(out+stderr.String()+opOut.String()+opErr.String()+logs.String(), "a long passphrase") {
			t.Error("the README's password was printed or logged")
		}
		if after := gitStatus(); after != before {
			t.Errorf("the README's commands changed the checkout:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	}
	checkTraces()

	// The TUI: the last block's command under tmux, in the same
	// environment, from the repository's root.
	if !instanceIsWorkspaceMember(read("Caddyfile")) {
		t.Fatal("the default Caddyfile's agent_instance names no workspace: the Quick start's TUI step relies on it")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		missing("tmux is not installed: the Quick start's TUI step cannot run (.ci/run installs it)")
	}
	tuiScript := filepath.Join(t.TempDir(), "tui.sh")
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	for _, kv := range append(append(slices.Clone(env), provider...), "TERM=xterm-256color",
		"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1") {
		k, v, _ := strings.Cut(kv, "=")
		if regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k) {
			b.WriteString("export " + k + "=" + quote(v) + "\n")
		}
	}
	b.WriteString("cd " + quote(root) + "\nexec bash -c " + quote(tui) + "\n")
	if err := os.WriteFile(tuiScript, []byte(b.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	screen := &tmuxScreen{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock"), env: env}
	screen.run(ctx, "new-session", "-d", "-s", "tui", "-x", "160", "-y", "45", tuiScript)
	t.Cleanup(func() {
		kill := exec.Command("tmux", "-S", screen.socket, "kill-server")
		kill.Env = env
		kill.Run()
	})
	screen.waitFor(ctx, "the TUI opens", "Ask anything")
	screen.run(ctx, "send-keys", "-t", "tui", "-l", "Say hello.")
	time.Sleep(300 * time.Millisecond)
	screen.run(ctx, "send-keys", "-t", "tui", "Enter")
	shown := screen.waitFor(ctx, "the provider's answer", fakeprovider.Text)
	t.Logf("the TUI shows:\n%s", shown)
	if strings.Contains(shown, "is not valid") {
		t.Error("the TUI complains of the model its user message carries")
	}

	// The TUI's session is metered, with the workspace model, and its
	// usage record names the session.
	_, body, err := call(ctx, httpClient, "GET", "http://localhost:4096/api/session?order=desc&limit=1", nil, nil)
	sid := gjson.GetBytes(body, "data.0.id").String()
	if err != nil || sid == "" {
		t.Fatalf("the instance's sessions: %v %s", err, body)
	}
	rec = usage("the TUI session's usage record", url.Values{"session": {sid}}, func(gjson.Result) bool { return true })
	if rec.Get("model").String() != "chat" || rec.Get("status").Int() != 200 || rec.Get("cost_usd").Float() <= 0 {
		t.Fatalf("the TUI session's usage record: %s", rec.Raw)
	}
	checkTraces()
}

// headingSlugs returns the anchors a Markdown file's headings get on its
// rendered page: lower case, punctuation dropped, spaces as hyphens, a
// repeated heading numbered.
func headingSlugs(text string) map[string]bool {
	slugs, seen := map[string]bool{}, map[string]int{}
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		h := strings.TrimLeft(l, "#")
		if fence || len(h) == len(l) || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			slugs[s+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

// TestDocsLinks follows every relative link of the repository's Markdown
// files (the README, docs/ and the examples'): the file it names exists,
// and so does the heading its #anchor names.
func TestDocsLinks(t *testing.T) {
	root := testenv.RepoRoot(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	var files []string
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "artifacts") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if !slices.Contains(files, filepath.Join(root, "docs", "README.md")) {
		t.Fatalf("no docs/README.md among %d Markdown files", len(files))
	}
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		fence := false
		for i, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "```") {
				fence = !fence
			}
			if fence {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, anchor, _ := strings.Cut(target, "#")
				dest := f
				if path != "" {
					dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				}
				st, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: %s: no such file", rel, i+1, target)
					continue
				}
				if anchor == "" {
					continue
				}
				if st.IsDir() {
					t.Errorf("%s:%d: %s: an anchor in a directory", rel, i+1, target)
					continue
				}
				text, _ := os.ReadFile(dest)
				if !headingSlugs(string(text))[anchor] {
					t.Errorf("%s:%d: %s: no heading with that anchor", rel, i+1, target)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found")
	}
}

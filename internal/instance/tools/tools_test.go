package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/sandbox"
)

// project makes a temporary project directory (symlinks resolved) inside
// a root, with files, and an Env confined to the root.
func project(t testing.TB, files map[string]string) (*Env, string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "proj")
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &Env{Dir: dir, Roots: []string{root}}, root
}

func call(t *testing.T, env *Env, name string, args any) (Result, error) {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return Call(context.Background(), env, name, b)
}

func mustCall(t *testing.T, env *Env, name string, args any) Result {
	t.Helper()
	res, err := call(t, env, name, args)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

func TestReadRangesAndCaps(t *testing.T) {
	var lines []string
	for i := 1; i <= 3000; i++ {
		lines = append(lines, "line "+strconv.Itoa(i))
	}
	env, _ := project(t, map[string]string{"a.txt": strings.Join(lines, "\n") + "\n", "long.txt": strings.Repeat("x", 5000) + "\nshort\n"})
	res := mustCall(t, env, "read", map[string]any{"filePath": "a.txt"})
	if !strings.Contains(res.Output, "1: line 1\n") || !strings.Contains(res.Output, "2000: line 2000\n") || strings.Contains(res.Output, "2001: line 2001") {
		t.Fatalf("default read is not lines 1-2000:\n%s", res.Output[len(res.Output)-300:])
	}
	if !strings.Contains(res.Output, "Showing lines 1-2000 of 3000. Use offset=2001") {
		t.Fatalf("no continuation hint: %s", res.Output[len(res.Output)-200:])
	}
	res = mustCall(t, env, "read", map[string]any{"filePath": filepath.Join(env.Dir, "a.txt"), "offset": 2999, "limit": 5})
	if !strings.Contains(res.Output, "2999: line 2999\n3000: line 3000\n") || !strings.Contains(res.Output, "End of file - total 3000 lines") {
		t.Fatalf("offset read: %s", res.Output)
	}
	if _, err := call(t, env, "read", map[string]any{"filePath": "a.txt", "offset": 4000}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("offset past the end: %v", err)
	}
	res = mustCall(t, env, "read", map[string]any{"filePath": "long.txt"})
	if !strings.Contains(res.Output, "(line truncated to 2000 chars)") || strings.Contains(res.Output, strings.Repeat("x", 2001)) {
		t.Fatal("a long line is not cut at 2000 characters")
	}
	big := strings.Repeat(strings.Repeat("y", 1000)+"\n", 200)
	if err := os.WriteFile(filepath.Join(env.Dir, "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	res = mustCall(t, env, "read", map[string]any{"filePath": "big.txt"})
	if len(res.Output) > maxReadBytes+500 || !strings.Contains(res.Output, "Output capped at 50 KB") {
		t.Fatalf("50 KB cap not applied: %d bytes", len(res.Output))
	}
}

func TestReadRefusesBinaryAndMissing(t *testing.T) {
	env, _ := project(t, map[string]string{"bin.dat": "abc\x00def", "ok.txt": "hi"})
	if _, err := call(t, env, "read", map[string]any{"filePath": "bin.dat"}); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Fatalf("binary file read: %v", err)
	}
	if _, err := call(t, env, "read", map[string]any{"filePath": "nope.txt"}); err == nil || !strings.Contains(err.Error(), "File not found") {
		t.Fatalf("missing file: %v", err)
	}
	res := mustCall(t, env, "read", map[string]any{"filePath": "."})
	if !strings.Contains(res.Output, "<type>directory</type>") || !strings.Contains(res.Output, "ok.txt") {
		t.Fatalf("directory read: %s", res.Output)
	}
}

func TestPathEscapesAreRefused(t *testing.T) {
	env, root := project(t, map[string]string{"in.txt": "inside"})
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(env.Dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(env.Dir, "filelink")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../../" + filepath.Base(outside) + "/secret.txt", secret, "link/secret.txt", "filelink", "/etc/passwd"} {
		for _, tool := range []string{"read", "write", "edit"} {
			args := map[string]any{"filePath": p, "content": "x", "oldString": "SECRET", "newString": "x"}
			_, err := call(t, env, tool, args)
			if err == nil || !errors.Is(err, ErrOutsideRoots) {
				t.Fatalf("%s %s: %v, want outside the roots", tool, p, err)
			}
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET" {
		t.Fatal("a file outside the roots was changed")
	}
	if _, err := call(t, env, "bash", map[string]any{"command": "pwd", "workdir": outside}); !errors.Is(err, ErrOutsideRoots) {
		t.Fatalf("bash workdir outside the roots: %v", err)
	}
	if _, err := call(t, env, "grep", map[string]any{"pattern": "SECRET", "path": "link"}); !errors.Is(err, ErrOutsideRoots) {
		t.Fatalf("grep through a link out: %v", err)
	}
	// A link inside the project to outside is not followed by a search.
	res := mustCall(t, env, "grep", map[string]any{"pattern": "SECRET"})
	if strings.Contains(res.Output, "secret") {
		t.Fatalf("grep followed a link out of the roots: %s", res.Output)
	}
	// Inside the roots but outside the project asks external_directory.
	sibling := filepath.Join(root, "other")
	os.MkdirAll(sibling, 0o755)
	os.WriteFile(filepath.Join(sibling, "f.txt"), []byte("sib"), 0o644)
	var asked []Ask
	env.Permit = func(_ context.Context, a Ask) error {
		asked = append(asked, a)
		if a.Permission == "external_directory" {
			return errors.New("denied for the test")
		}
		return nil
	}
	if _, err := call(t, env, "read", map[string]any{"filePath": filepath.Join(sibling, "f.txt")}); err == nil {
		t.Fatal("a read outside the project did not ask")
	}
	if len(asked) != 1 || asked[0].Permission != "external_directory" || asked[0].Patterns[0] != filepath.ToSlash(sibling)+"/*" {
		t.Fatalf("asked %+v", asked)
	}
}

func TestWriteAndEdit(t *testing.T) {
	env, _ := project(t, map[string]string{"a.go": "package a\n\nfunc A() int { return 1 }\nfunc B() int { return 1 }\n"})
	var asked []Ask
	env.Permit = func(_ context.Context, a Ask) error { asked = append(asked, a); return nil }
	mustCall(t, env, "write", map[string]any{"filePath": "sub/dir/new.txt", "content": "hello"})
	if b, _ := os.ReadFile(filepath.Join(env.Dir, "sub/dir/new.txt")); string(b) != "hello" {
		t.Fatalf("write: %q", b)
	}
	if len(asked) != 1 || asked[0].Permission != "edit" || asked[0].Patterns[0] != "sub/dir/new.txt" {
		t.Fatalf("write asked %+v", asked)
	}
	if _, err := call(t, env, "edit", map[string]any{"filePath": "a.go", "oldString": "return 1", "newString": "return 2"}); err == nil || !strings.Contains(err.Error(), "multiple matches") {
		t.Fatalf("ambiguous edit: %v", err)
	}
	if _, err := call(t, env, "edit", map[string]any{"filePath": "a.go", "oldString": "return 9", "newString": "return 2"}); err == nil || !strings.Contains(err.Error(), "Could not find") {
		t.Fatalf("edit of missing text: %v", err)
	}
	mustCall(t, env, "edit", map[string]any{"filePath": "a.go", "oldString": "func A() int { return 1 }", "newString": "func A() int { return 2 }"})
	b, _ := os.ReadFile(filepath.Join(env.Dir, "a.go"))
	if !strings.Contains(string(b), "A() int { return 2 }") || !strings.Contains(string(b), "B() int { return 1 }") {
		t.Fatalf("edit: %s", b)
	}
	res := mustCall(t, env, "edit", map[string]any{"filePath": "a.go", "oldString": "int", "newString": "int64", "replaceAll": true})
	if res.Metadata["replacements"] != 2 {
		t.Fatalf("replaceAll replaced %v", res.Metadata["replacements"])
	}
	if _, err := call(t, env, "edit", map[string]any{"filePath": "a.go", "oldString": "x", "newString": "x"}); err == nil {
		t.Fatal("an edit with identical strings was applied")
	}
}

func TestGlobGrepListRespectGitignore(t *testing.T) {
	env, _ := project(t, map[string]string{
		".gitignore":        "build/\n*.log\n!keep.log\n",
		"main.go":           "package main // MARK fix\n",
		"pkg/util.go":       "package pkg // MARK later\n",
		"pkg/.gitignore":    "gen.go\n",
		"pkg/gen.go":        "package pkg // MARK generated\n",
		"build/out.go":      "package out // MARK built\n",
		"debug.log":         "MARK log\n",
		"keep.log":          "MARK keep\n",
		"node_modules/x.js": "// MARK dep\n",
		"web/app.ts":        "// MARK ts\n",
	})
	res := mustCall(t, env, "glob", map[string]any{"pattern": "**/*.go"})
	for _, want := range []string{"main.go", "pkg/util.go"} {
		if !strings.Contains(res.Output, want) {
			t.Fatalf("glob misses %s: %s", want, res.Output)
		}
	}
	for _, not := range []string{"gen.go", "build/out.go"} {
		if strings.Contains(res.Output, not) {
			t.Fatalf("glob lists ignored %s: %s", not, res.Output)
		}
	}
	res = mustCall(t, env, "grep", map[string]any{"pattern": `MARK \w+`})
	for _, want := range []string{"main.go:\n  Line 1: package main // MARK fix", "keep.log", "web/app.ts"} {
		if !strings.Contains(res.Output, want) {
			t.Fatalf("grep misses %q:\n%s", want, res.Output)
		}
	}
	for _, not := range []string{"generated", "built", "debug.log", "dep"} {
		if strings.Contains(res.Output, not) {
			t.Fatalf("grep searched ignored %q:\n%s", not, res.Output)
		}
	}
	res = mustCall(t, env, "grep", map[string]any{"pattern": "MARK", "include": "*.{ts,go}"})
	if strings.Contains(res.Output, "keep.log") || !strings.Contains(res.Output, "app.ts") {
		t.Fatalf("grep include: %s", res.Output)
	}
	if _, err := call(t, env, "grep", map[string]any{"pattern": "("}); err == nil {
		t.Fatal("a bad regular expression was accepted")
	}
	res = mustCall(t, env, "list", map[string]any{})
	if !strings.Contains(res.Output, "  pkg/\n") || !strings.Contains(res.Output, "\n    util.go\n") || strings.Contains(res.Output, "node_modules") || strings.Contains(res.Output, "out.go") {
		t.Fatalf("list: %s", res.Output)
	}
}

func TestMalformedArgumentsAndUnknownTools(t *testing.T) {
	env, _ := project(t, nil)
	for _, c := range []struct{ tool, args string }{
		{"read", `{}`}, {"read", `{"filePath": 3}`}, {"read", `[1]`}, {"read", `{"filePath":`},
		{"edit", `{"filePath":"a"}`}, {"bash", `{"command": ""}`}, {"bash", `{"command":"ls","timeout":-1}`},
		{"webfetch", `{"url":"ftp://x"}`}, {"todowrite", `{"todos":[{"content":"a","status":"done","priority":"high"}]}`},
	} {
		_, err := Call(context.Background(), env, c.tool, json.RawMessage(c.args))
		var ae *ArgumentError
		if !errors.As(err, &ae) {
			t.Fatalf("%s %s: %v, want an argument error", c.tool, c.args, err)
		}
	}
	_, err := Call(context.Background(), env, "rm_rf", json.RawMessage(`{}`))
	var ue *UnknownToolError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "read") {
		t.Fatalf("unknown tool: %v", err)
	}
}

func TestBashOutputAndExitCode(t *testing.T) {
	env, _ := project(t, map[string]string{"f.txt": "data"})
	res := mustCall(t, env, "bash", map[string]any{"command": "cat f.txt; echo; echo err >&2; exit 3", "description": "cat"})
	if !strings.Contains(res.Output, "data\nerr\n") || res.Metadata["exit"] == nil || *res.Metadata["exit"].(*int) != 3 || !strings.Contains(res.Output, "exit code 3") {
		t.Fatalf("bash: %q %v", res.Output, res.Metadata)
	}
	res = mustCall(t, env, "bash", map[string]any{"command": "pwd"})
	if strings.TrimSpace(strings.Split(res.Output, "\n")[0]) != env.Dir {
		t.Fatalf("bash ran in %q, not the project", res.Output)
	}
}

func TestBashFloodIsCapped(t *testing.T) {
	env, _ := project(t, nil)
	res := mustCall(t, env, "bash", map[string]any{"command": "head -c 20000000 /dev/zero | tr '\\0' 'a'; echo; echo END"})
	if len(res.Output) > maxBashOutput+1000 || !strings.Contains(res.Output, "END") || !strings.Contains(res.Output, "output truncated") {
		t.Fatalf("flood: %d bytes, tail %q", len(res.Output), res.Output[len(res.Output)-100:])
	}
}

// alive lists the processes whose command line holds marker.
func alive(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && strings.Contains(string(st), ") Z ") {
				continue // a zombie is dead
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// sleepMarker is a sleep duration no other process uses: the processes a
// test starts are found by it in the process table.
func sleepMarker() string {
	return fmt.Sprintf("%d%04d", 9000+os.Getpid()%1000, time.Now().UnixNano()%10000)
}

func waitGone(t *testing.T, marker string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if len(alive(marker)) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	pids := alive(marker)
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	t.Fatalf("processes left behind: %v", pids)
}

func TestBashTimeoutKillsTheWholeGroup(t *testing.T) {
	env, _ := project(t, nil)
	marker := sleepMarker()
	// A command that never ends and forks children that would outlive it.
	cmd := fmt.Sprintf("(sleep %[1]s; echo done) & (bash -c 'sleep %[1]s.5; true' &) ; sleep %[1]s.7; true", marker)
	seen := make(chan int, 1)
	go func() {
		for i := 0; i < 200; i++ {
			if n := len(alive(marker)); n >= 3 {
				seen <- n
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		seen <- 0
	}()
	res := mustCall(t, env, "bash", map[string]any{"command": cmd, "timeout": 600})
	if n := <-seen; n < 3 {
		t.Fatalf("the command's processes were never seen running (%d)", n)
	}
	if !strings.Contains(res.Output, "timed out after 600 ms") || res.Metadata["exit"].(*int) != nil {
		t.Fatalf("timeout: %q %v", res.Output, res.Metadata)
	}
	waitGone(t, marker)
}

func TestBashInterruptKillsTheGroup(t *testing.T) {
	env, _ := project(t, nil)
	marker := sleepMarker()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(alive(marker)) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	args, _ := json.Marshal(map[string]any{"command": "sleep " + marker + "; true"})
	res, err := Call(ctx, env, "bash", args)
	if err != nil || !strings.Contains(res.Output, "aborted") {
		t.Fatalf("interrupt: %v %q", err, res.Output)
	}
	waitGone(t, marker)
}

func TestBashBackgroundChildEndsWithTheCommand(t *testing.T) {
	env, _ := project(t, nil)
	marker := sleepMarker()
	res := mustCall(t, env, "bash", map[string]any{"command": "sleep " + marker + " &\necho started"})
	if !strings.Contains(res.Output, "started") {
		t.Fatalf("bg: %q", res.Output)
	}
	waitGone(t, marker)
}

// TestBashEnvironmentIsAnAllowList: a command's environment is built from
// an allow-list (PATH, HOME and TMPDIR inside the sandbox, locale, TERM,
// the operator's named variables), never from the server's environment
// minus a list: credentials named like anything at all stay out.
func TestBashEnvironmentIsAnAllowList(t *testing.T) {
	env, _ := project(t, nil)
	for k, v := range map[string]string{"AGENTGATE_MASTER_KEY": "mk-value-1234", "OPENCODE_SERVER_PASSWORD": "pw-value-1234",
		"ANTHROPIC_API_KEY": "sk-ant-value", "GITHUB_TOKEN": "ghp-value", "INNOCENT_LOOKING": "prefix-ws-key-secret-value-suffix",
		"BEARER": "bearer-value", "GITHUB_PAT": "pat-value", "MY_DB_URL": "postgres://u:dbpass-value@h/db", "OPERATOR_NAMED": "kept",
		"LANG": "C.UTF-8"} {
		t.Setenv(k, v)
	}
	env.Sandbox = sandbox.New(sandbox.Config{Env: []string{"OPERATOR_NAMED", "GOFLAGS=-mod=mod"}})
	res := mustCall(t, env, "bash", map[string]any{"command": "env"})
	for _, leaked := range []string{"mk-value-1234", "pw-value-1234", "sk-ant-value", "ghp-value", "ws-key-secret-value", "bearer-value",
		"pat-value", "dbpass-value"} {
		if strings.Contains(res.Output, leaked) {
			t.Fatalf("the command's environment holds %q:\n%s", leaked, res.Output)
		}
	}
	for _, want := range []string{"OPERATOR_NAMED=kept", "GOFLAGS=-mod=mod", "PATH=", "HOME=" + sandbox.Home, "TMPDIR=/tmp", "LANG=C.UTF-8"} {
		if !strings.Contains(res.Output, want) {
			t.Fatalf("the environment lacks %s:\n%s", want, res.Output)
		}
	}
}

func TestWebfetchRefusesPrivateAddresses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><head><title>x</title><script>evil()</script></head><body><h1>Hello</h1><p>World <a href=\"https://example.org/\">link</a></p></body></html>")
	}))
	defer srv.Close()
	env, _ := project(t, nil)
	_, err := call(t, env, "webfetch", map[string]any{"url": srv.URL, "format": "text"})
	if !errors.Is(err, ErrPrivateAddress) {
		t.Fatalf("loopback fetch: %v", err)
	}
	for _, u := range []string{"http://10.0.0.1/", "http://169.254.169.254/latest/meta-data", "http://[::1]:9/", "http://100.64.0.1/", "http://[::ffff:127.0.0.1]:9/"} {
		if _, err := call(t, env, "webfetch", map[string]any{"url": u, "timeout": 2}); !errors.Is(err, ErrPrivateAddress) {
			t.Fatalf("%s: %v", u, err)
		}
	}
	env.Fetch.AllowPrivate = true
	res := mustCall(t, env, "webfetch", map[string]any{"url": srv.URL, "format": "markdown"})
	if !strings.Contains(res.Output, "# Hello") || !strings.Contains(res.Output, "World") || strings.Contains(res.Output, "evil") ||
		!strings.Contains(res.Output, "(https://example.org/)") {
		t.Fatalf("markdown: %q", res.Output)
	}
}

func TestTodosAndQuestionsGoThroughTheEnv(t *testing.T) {
	env, _ := project(t, nil)
	res := mustCall(t, env, "todowrite", map[string]any{"todos": []map[string]string{
		{"content": "a", "status": "in_progress", "priority": "high"}, {"content": "b", "status": "completed", "priority": "low"}}})
	if res.Title != "1 todos" || len(res.Metadata["todos"].([]Todo)) != 2 {
		t.Fatalf("todowrite: %+v", res)
	}
	env.Question = func(_ context.Context, qs []Question) ([][]string, error) {
		return [][]string{{qs[0].Options[1].Label}}, nil
	}
	res = mustCall(t, env, "question", map[string]any{"questions": []map[string]any{{"question": "Which?", "header": "Pick",
		"options": []map[string]string{{"label": "A", "description": "a"}, {"label": "B", "description": "b"}}}}})
	if !strings.Contains(res.Output, `"Which?"="B"`) {
		t.Fatalf("question: %s", res.Output)
	}
	env.Question = func(context.Context, []Question) ([][]string, error) { return nil, ErrDismissed }
	if _, err := call(t, env, "question", map[string]any{"questions": []map[string]any{{"question": "Q", "header": "h", "options": []any{}}}}); !errors.Is(err, ErrDismissed) {
		t.Fatalf("dismissed: %v", err)
	}
}

func TestEveryToolHasAValidSchema(t *testing.T) {
	for _, d := range Definitions(nil, nil) {
		var s struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(d.Schema, &s); err != nil || s.Type != "object" {
			t.Fatalf("%s: schema %s", d.Name, d.Schema)
		}
		for _, r := range s.Required {
			if _, ok := s.Properties[r]; !ok {
				t.Fatalf("%s requires %s, which it does not describe", d.Name, r)
			}
		}
		t2, _ := Lookup(d.Name)
		if strings.Join(t2.Required, ",") != strings.Join(s.Required, ",") {
			t.Fatalf("%s: the checked required %v differ from the schema's %v", d.Name, t2.Required, s.Required)
		}
	}
}

// TestBashLimitHitIsAClearError: a command that reaches the sandbox's
// memory limit is killed, and the result says which limit it reached.
func TestBashLimitHitIsAClearError(t *testing.T) {
	env, _ := project(t, nil)
	env.Sandbox = sandbox.New(sandbox.Config{Limits: sandbox.Limits{Memory: 64 << 20}})
	st := env.Sandbox.Status()
	if st.Mode != "enforced" || strings.HasPrefix(st.Limits["memory"], "not enforced") {
		if os.Getenv("CI") != "" && st.Mode != "enforced" {
			t.Fatalf("no sandbox: %+v", st)
		}
		t.Skipf("no memory limit on this host: %+v", st)
	}
	res := mustCall(t, env, "bash", map[string]any{"command": `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo survived ${#x}`})
	if strings.Contains(res.Output, "survived") || !strings.Contains(res.Output, "sandbox's memory limit") || res.Metadata["exit"] != (*int)(nil) {
		t.Fatalf("the memory limit: %q %v", res.Output, res.Metadata)
	}
}

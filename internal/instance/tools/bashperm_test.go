package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/instance/permission"
)

// scanned is a scan flattened for the table: every bash pattern, every
// always pattern, the unknown texts and the files as kind:path (or
// kind:?text when unknown).
func scanned(t *testing.T, cmd string) (patterns, always, unknown, files []string) {
	t.Helper()
	s, ok := scanBash(cmd, "/p")
	if !ok {
		t.Fatalf("%q does not parse", cmd)
	}
	for _, c := range s.commands {
		patterns = append(patterns, c.patterns...)
		always = append(always, c.always...)
	}
	for _, f := range s.files {
		if f.path == "" {
			files = append(files, f.kind+":?"+f.text)
		} else {
			files = append(files, f.kind+":"+f.path)
		}
	}
	return patterns, always, s.unknown, files
}

func TestScanBashFindsEveryCommand(t *testing.T) {
	for _, c := range []struct {
		cmd      string
		patterns []string // all of them, in order
		unknown  bool
	}{
		{"ls -la", []string{"ls -la"}, false},
		{"ls ; cat ../outside/secret", []string{"ls", "cat ../outside/secret"}, false},
		{"ls && rm x || echo no", []string{"ls", "rm x", "echo no"}, false},
		{"ls | sh", []string{"ls", "sh"}, false},
		{"ls\nrm x", []string{"ls", "rm x"}, false},
		{"ls `rm x`", []string{"rm x", "ls `rm x`"}, false},
		{"ls $(rm x)", []string{"rm x", "ls $(rm x)"}, false},
		{"diff <(rm x) y", []string{"rm x", "diff <(rm x) y"}, false},
		{"(cd sub; rm x) && { make; }", []string{"rm x", "make"}, false},
		{"if test -f x; then rm x; elif true; then :; else echo; fi", []string{"test -f x", "rm x", "true", ":", "echo"}, false},
		{"for f in $(ls); do rm $f; done", []string{"ls", "rm $f"}, false},
		{"while read l; do echo $l; done < list", []string{"read l", "echo $l", "read l"}, false},
		{"case $x in a) rm x;; esac", []string{"rm x"}, false},
		{"[[ -f $(rm x) ]] && (( $(rm y) ))", []string{"rm x", "rm y"}, false},
		{"cat <<EOF\n$(rm x)\nEOF", []string{"rm x", "cat"}, false},
		{"FOO=1 BAR=$(id) rm x", []string{"id", "rm x"}, false},
		{`\rm x`, []string{"rm x"}, false},
		{`'rm' "x"`, []string{"rm x"}, false},
		{`git commit -m "fix the bug"`, []string{"git commit -m fix the bug"}, false},
		{"/bin/rm x", []string{"/bin/rm x", "rm x"}, false},
		{"./rm x", []string{"./rm x", "rm x"}, false},
		{"command rm x", []string{"rm x"}, false},
		{"command -v rm", []string{"command -v rm"}, false},
		{"builtin exec nohup rm x &", []string{"rm x"}, false},
		{"sh -c 'rm x'", []string{"rm x"}, false},
		{`bash -lc "rm x; ls"`, []string{"rm x", "ls"}, false},
		{"dash -c 'sh -c \"zsh -c rm\"'", []string{"rm"}, false},
		{"bash script.sh", []string{"bash script.sh"}, false},
		{"timeout -s KILL 5 rm x", []string{"rm x"}, false},
		{"env -i -u HOME A=1 rm x", []string{"rm x"}, false},
		{"env", []string{"env"}, false},
		{"nice -n 5 stdbuf -oL setsid time rm x", []string{"rm x"}, false},
		{"xargs -0 -n1 rm -f < list", []string{"rm -f …"}, false},
		{"xargs < list", []string{"echo …"}, false},
		{"find . -name '*.o' -exec rm {} \\; -execdir sh -c 'rm y' \\;", []string{"find . -name *.o -exec rm {} ; -execdir sh -c rm y ;", "rm {}", "rm y"}, false},
		{"sudo -u root rm x", []string{"rm x", "sudo rm x"}, false},
		{"busybox rm x", []string{"rm x"}, false},
		{"trap 'rm x' EXIT", []string{"trap rm x EXIT", "rm x"}, false},
		{"alias ls='rm x'", []string{"alias ls=rm x", "rm x"}, false},
		{"cd sub && pwd", []string{"pwd"}, false},
		// What the text does not show asks.
		{"$(echo rm) x", []string{"echo rm"}, true},
		{"$CMD x", nil, true},
		{"/bin/r? x", nil, true},
		{"{rm,x}", nil, true},
		{`eval "rm x"`, []string{"rm x"}, true},
		{"eval $X", nil, true},
		{"source $F", nil, true},
		{"f(){ rm x; }; f", []string{"rm x", "f"}, true},
		{"PATH=/tmp ls", []string{"ls"}, true},
		{"LD_PRELOAD=x.so ls", []string{"ls"}, true},
		{"export GIT_SSH_COMMAND=evil", []string{"export GIT_SSH_COMMAND=evil"}, true},
		{"env PATH=. ls", nil, true},
		{"x='a[$(rm x)]'; echo $((x))", []string{"echo $((x))"}, true},
		{"sh -c \"$X\"", nil, true},
		{"timeout --bogus 5 rm x", nil, true},
		{"hash -p /bin/rm ls; ls x", []string{"hash -p /bin/rm ls", "ls x"}, true},
		{"enable -f ./x.so rm", []string{"enable -f ./x.so rm"}, true},
		{"hash -r", []string{"hash -r"}, false},
	} {
		patterns, _, unknown, _ := scanned(t, c.cmd)
		if !slices.Equal(patterns, c.patterns) {
			t.Errorf("%q: patterns %q, want %q", c.cmd, patterns, c.patterns)
		}
		if (len(unknown) > 0) != c.unknown {
			t.Errorf("%q: unknown %q, want some: %v", c.cmd, unknown, c.unknown)
		}
	}
}

func TestScanBashAlwaysIsTheCommandNeverItsWrapper(t *testing.T) {
	for _, c := range []struct {
		cmd    string
		always []string
	}{
		{"timeout 5 make", []string{"make *"}},
		{"git status --short", []string{"git status *"}},
		{"go test ./...", []string{"go test *"}},
		{"npm run build", []string{"npm run *"}},
		{"env FOO=1 nice -n 3 nohup go build ./cmd/x", []string{"go build *"}},
		{"ls -la | xargs grep -l x", []string{"ls *", "grep *"}},
		{"sudo npm install", []string{"npm install *", "sudo npm install *"}},
		{"/usr/bin/git status", []string{"/usr/bin/git status *", "git status *"}},
		{"'*' x", nil},
		{`"git status" x`, nil},
		{"$X status", nil},
	} {
		_, always, _, _ := scanned(t, c.cmd)
		if !slices.Equal(always, c.always) {
			t.Errorf("%q: always %q, want %q", c.cmd, always, c.always)
		}
	}
}

func TestScanBashRedirectionsAndCds(t *testing.T) {
	for _, c := range []struct {
		cmd   string
		files []string
	}{
		{"ls 2>&1", nil},
		{"ls >/dev/null 2>/dev/stderr </dev/null >&2 3>&1- <&0", nil},
		{"ls > x", []string{"edit:/p/x"}},
		{"ls >> sub/x 2> err &> all &>> all2 >| clob <> rw", []string{"edit:/p/sub/x", "edit:/p/err", "edit:/p/all", "edit:/p/all2", "edit:/p/clob", "edit:/p/rw"}},
		{"ls > /elsewhere/f", []string{"edit:/elsewhere/f"}},
		{"sort < in", []string{"read:/p/in"}},
		{"ls >& out", []string{"edit:/p/out"}},
		{"echo hi > ../out", []string{"edit:/out"}},
		{"ls > $F", []string{"edit:?$F"}},
		{"ls > ~/.bashrc", []string{"edit:?~/.bashrc"}},
		{"ls > *.txt", []string{"edit:?*.txt"}},
		{"cat <<'EOF' <<< word\nbody\nEOF", nil},
		{"cd sub && make > log && cd .. && ls > top", []string{"dir:/p/sub", "edit:/p/sub/log", "dir:/p", "edit:/p/sub/top", "edit:/p/top"}},
		{"cd /abs; ls > f", []string{"dir:/abs", "edit:/abs/f"}},
		{"(cd sub); ls > f", []string{"dir:/p/sub", "edit:/p/f"}},
		{"ls | cd sub; ls > f", []string{"dir:/p/sub", "edit:/p/f"}},
		{"pushd sub; popd; ls > f", []string{"dir:/p/sub", "edit:/p/f"}},
		{"cd $X; ls > f; ls > /abs/g", []string{"edit:?f", "edit:/abs/g"}},
		{"for i in 1 2; do ls > f; cd a; done", []string{"edit:/p/f", "dir:/p/a", "edit:/p/f", "edit:/p/a/f", "dir:/p/a", "dir:/p/a/a"}},
		{"find . -fprint list", []string{"edit:/p/list"}},
	} {
		_, _, _, files := scanned(t, c.cmd)
		if !slices.Equal(files, c.files) {
			t.Errorf("%q: files %q, want %q", c.cmd, files, c.files)
		}
	}
	if _, ok := scanBash("ls (", "/p"); ok {
		t.Fatal("a parse error is scanned")
	}
	deep := strings.Repeat("sh -c '", 1) + "rm x" + "'"
	for range maxBashDepth + 2 {
		deep = "eval " + shellQuote(deep)
	}
	if s, ok := scanBash(deep, "/p"); !ok || len(s.unknown) == 0 {
		t.Fatalf("deeply nested code: %v %q", ok, s.unknown)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// errAsked is what the test Permit answers for an ask: the user said no.
var errAsked = errors.New("asked, and the user rejected it")

// ruledEnv is a project (in a root, with a file x and a list naming it)
// whose Permit decides by the defaults and rules as the loop does,
// recording every ask, and rejecting asks unless asked is allowed.
func ruledEnv(t *testing.T, rules []permission.Rule) (*Env, *[]Ask) {
	t.Helper()
	env, root := project(t, map[string]string{"x": "keep", "list": "x\n", "sub/y": "y"})
	if err := os.MkdirAll(filepath.Join(root, "outside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "outside", "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	var asks []Ask
	env.Permit = func(ctx context.Context, a Ask) error {
		d := permission.EvaluateRequest(a.Permission, a.Patterns, len(a.Unknown) > 0, permission.Defaults, rules)
		switch d.Effect {
		case permission.Allow:
			return nil
		case permission.Deny:
			return errors.New("PermissionDeniedError: the rule " + d.Rule.Action + " " + d.Rule.Resource + " deny matches " +
				a.Permission + " " + strings.Join(a.Patterns, ", "))
		}
		asks = append(asks, a)
		return errAsked
	}
	return env, &asks
}

func TestBashAsksForEveryCommandNotAllowed(t *testing.T) {
	rules := []permission.Rule{{Action: "bash", Resource: "ls *", Effect: permission.Allow}}
	for _, c := range []struct {
		cmd        string
		permission string
		pattern    string // one of the asked patterns
	}{
		{"ls ; cat ../outside/secret", "bash", "cat ../outside/secret"},
		{"ls && rm x", "bash", "rm x"},
		{"ls | sh", "bash", "sh"},
		{"ls\nrm x", "bash", "rm x"},
		{"ls `rm x`", "bash", "rm x"},
		{"ls $(rm x)", "bash", "rm x"},
		{"ls > ../outside/f", "external_directory", "/outside/*"},
		{"echo hi > ../out", "bash", "echo hi"},
		{"ls > $F", "external_directory", "$F"},
		{"ls (", "bash", "ls ("},
	} {
		env, asks := ruledEnv(t, rules)
		_, err := call(t, env, "bash", map[string]any{"command": c.cmd})
		if !errors.Is(err, errAsked) || len(*asks) != 1 {
			t.Errorf("%q: %v, asks %+v", c.cmd, err, *asks)
			continue
		}
		a := (*asks)[0]
		found := slices.ContainsFunc(a.Patterns, func(p string) bool { return strings.HasSuffix(p, c.pattern) })
		if a.Permission != c.permission || !found {
			t.Errorf("%q: asked %s %q, want %s …%s", c.cmd, a.Permission, a.Patterns, c.permission, c.pattern)
		}
		if b, err := os.ReadFile(filepath.Join(env.Dir, "x")); err != nil || string(b) != "keep" {
			t.Errorf("%q: x is gone or changed: %q %v", c.cmd, b, err)
		}
	}
	// The edit of a file in the project is allowed by the defaults; one
	// outside it asks for its directory.
	env, asks := ruledEnv(t, rules)
	if res, err := call(t, env, "bash", map[string]any{"command": "ls > listing"}); err != nil || len(*asks) != 0 {
		t.Fatalf("ls > listing: %v %+v %v", err, res, *asks)
	}
	if b, _ := os.ReadFile(filepath.Join(env.Dir, "listing")); !strings.Contains(string(b), "list") {
		t.Fatalf("ls > listing wrote %q", b)
	}
	rules2 := append(rules, permission.Rule{Action: "bash", Resource: "echo *", Effect: permission.Allow})
	env, asks = ruledEnv(t, rules2)
	if _, err := call(t, env, "bash", map[string]any{"command": "echo hi > ../out"}); !errors.Is(err, errAsked) ||
		len(*asks) != 1 || (*asks)[0].Permission != "external_directory" || (*asks)[0].Always[0] != (*asks)[0].Patterns[0] {
		t.Fatalf("echo hi > ../out: %v %+v", err, *asks)
	}
	if _, err := call(t, env, "bash", map[string]any{"command": "ls > /elsewhere/f"}); !errors.Is(err, ErrOutsideRoots) {
		t.Fatalf("a redirection outside the roots: %v", err)
	}
	// Allowed commands run without asking.
	env, asks = ruledEnv(t, rules)
	for _, cmd := range []string{"ls -la", "ls 2>&1", "ls >/dev/null", "ls -d sub && ls sub"} {
		if res, err := call(t, env, "bash", map[string]any{"command": cmd}); err != nil || len(*asks) != 0 {
			t.Fatalf("%q: %v %+v %v", cmd, err, res, *asks)
		}
	}
	// An edit rule sees a redirection's file.
	env, asks = ruledEnv(t, append(rules, permission.Rule{Action: "edit", Resource: "sub/*", Effect: permission.Deny}))
	if _, err := call(t, env, "bash", map[string]any{"command": "cd sub && ls > y"}); err == nil || !strings.Contains(err.Error(), "edit sub/y") {
		t.Fatalf("cd sub && ls > y: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(env.Dir, "sub", "y")); string(b) != "y" {
		t.Fatalf("sub/y was written: %q", b)
	}
}

func TestBashDenyRulesCannotBeWalkedAround(t *testing.T) {
	rules := []permission.Rule{{Action: "bash", Resource: "*", Effect: permission.Allow}, {Action: "bash", Resource: "rm *", Effect: permission.Deny}}
	for _, cmd := range []string{
		"FOO=1 rm x", "ls; rm x", "/bin/rm x", "command rm x", `\rm x`, "sh -c 'rm x'", `bash -c "rm x"`, "timeout 5 rm x",
		"env -i rm x", "nohup rm x &", "xargs rm < list", `find . -name x -exec rm {} \;`, "sudo rm x", "busybox rm x",
		"$(echo rm) x", `eval "rm x"`, "f(){ rm x; }; f", "r\\m x", "'/bin/rm' x", "exec rm x", "x=$(rm x)", "echo > $(rm x)",
		"ls <(rm x)", "alias r='rm x'", "$'\\x72m' x", "{rm,x}", "hash -p /bin/rm ls; ls x",
	} {
		env, asks := ruledEnv(t, rules)
		_, err := call(t, env, "bash", map[string]any{"command": cmd})
		denied := err != nil && strings.Contains(err.Error(), "PermissionDenied") && strings.Contains(err.Error(), "rm * deny")
		if !denied && !errors.Is(err, errAsked) {
			t.Errorf("%q: neither denied nor asked: %v", cmd, err)
		}
		if errors.Is(err, errAsked) && (len(*asks) != 1 || len((*asks)[0].Unknown) == 0) {
			t.Errorf("%q: asks %+v", cmd, *asks)
		}
		if b, err := os.ReadFile(filepath.Join(env.Dir, "x")); err != nil || string(b) != "keep" {
			t.Errorf("%q: x is gone or changed: %v", cmd, err)
		}
	}
	// Everything else still runs.
	env, asks := ruledEnv(t, rules)
	res, err := call(t, env, "bash", map[string]any{"command": "FOO=1 timeout 5 cat x | xargs echo got"})
	if err != nil || len(*asks) != 0 || !strings.Contains(res.Output, "got keep") {
		t.Fatalf("an allowed pipeline: %v %q %v", err, res.Output, *asks)
	}
	// With everything allowed, what the text does not show runs too.
	env, asks = ruledEnv(t, rules[:1])
	res, err = call(t, env, "bash", map[string]any{"command": `eval "echo evaluated"`})
	if err != nil || len(*asks) != 0 || !strings.Contains(res.Output, "evaluated") {
		t.Fatalf("eval with bash * allowed: %v %q %v", err, res.Output, *asks)
	}
}

func TestBashAskCoversEveryCommandAndOffersTheirPrefixes(t *testing.T) {
	env, asks := ruledEnv(t, nil)
	if _, err := call(t, env, "bash", map[string]any{"command": "timeout 5 make && git status --short | sudo tee out"}); !errors.Is(err, errAsked) {
		t.Fatal(err)
	}
	a := (*asks)[0]
	if a.Permission != "bash" || !slices.Equal(a.Patterns, []string{"make", "git status --short", "tee out", "sudo tee out"}) ||
		!slices.Equal(a.Always, []string{"make *", "git status *", "tee out *", "sudo tee out *"}) || len(a.Unknown) != 0 ||
		a.Metadata["command"] == nil {
		t.Fatalf("the ask: %+v", a)
	}
	*asks = nil
	if _, err := call(t, env, "bash", map[string]any{"command": "$(which make) all; ls"}); !errors.Is(err, errAsked) {
		t.Fatal(err)
	}
	a = (*asks)[0]
	if !slices.Equal(a.Patterns, []string{"which make", "ls", "$(which make) all"}) || !slices.Equal(a.Unknown, []string{"$(which make) all"}) ||
		!slices.Equal(a.Always, []string{"which make *", "ls *"}) {
		t.Fatalf("an ask with an unknown command: %+v", a)
	}
	// "Always" on an ask stores its Always; the next call needs no ask.
	stored := []permission.Rule{}
	for _, p := range []string{"make *", "git status *"} {
		stored = append(stored, permission.Rule{Action: "bash", Resource: p, Effect: permission.Allow})
	}
	env, asks = ruledEnv(t, stored)
	env.Shell = "/bin/true" // nothing needs to run
	if _, err := call(t, env, "bash", map[string]any{"command": "timeout 5 make -j4 && git status"}); err != nil || len(*asks) != 0 {
		t.Fatalf("after always: %v %+v", err, *asks)
	}
}

func BenchmarkScanBash(b *testing.B) {
	cmd := "cd sub && FOO=1 timeout 60 go test ./... -run 'TestX|TestY' 2>&1 | tee ../log.txt | grep -v '^ok' || { echo failed $(date) >> errs; exit 1; }"
	for b.Loop() {
		if _, ok := scanBash(cmd, "/p"); !ok {
			b.Fatal("no parse")
		}
	}
}

package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// IsolateCaddy prepares a test binary that runs Caddy in its own process:
// it makes a temporary directory and points Caddy's config and data
// directories (XDG_CONFIG_HOME, XDG_DATA_HOME, the config autosave path and
// the default storage, which Caddy computes once at start) into it, so that
// nothing the tests start writes to the user's own directories. Call it
// from TestMain before any test runs; the caller removes the directory
// when the tests end.
func IsolateCaddy(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	for name, sub := range map[string]string{"XDG_CONFIG_HOME": "xdg-config", "XDG_DATA_HOME": "xdg-data"} {
		if err := os.Setenv(name, filepath.Join(dir, sub)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	caddy.ConfigAutosavePath = filepath.Join(caddy.AppConfigDir(), "autosave.json")
	caddy.DefaultStorage.Path = caddy.AppDataDir()
	return dir, nil
}

// childEnv marks the process RunIsolated starts, so that the test calling
// RunIsolated does not start itself again there.
const childEnv = "AGENTGATE_TEST_ISOLATED_CHILD"

// IsolatedChild reports whether this test binary is the child of
// RunIsolated.
func IsolatedChild() bool { return os.Getenv(childEnv) != "" }

// RunIsolated runs the tests of this test binary that match pattern in a
// child process whose HOME, XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_STATE_HOME
// and XDG_CACHE_HOME point at one empty directory and whose TMPDIR points
// at another (GOCACHE, GOMODCACHE, GOPATH and GOENV keep their real values,
// npm's and Bun's caches and tmux's socket directory are not inherited,
// and the user's .npmrc is named by npm_config_userconfig so that npm
// keeps its registry). It fails unless the child passes and both
// directories are empty afterwards: a test that writes into a user's home
// (a tool run without ToolVars), Caddy's default directories or leaves
// temporary files behind is caught. extraEnv adds NAME=value pairs.
func RunIsolated(t *testing.T, pattern string, extraEnv ...string) {
	t.Helper()
	if IsolatedChild() {
		t.Skip("this is the isolated child run")
	}
	// TMPDIR gets a short name, not t.TempDir's (which carries the
	// test's name): the child's tools make sockets in it (Chromium's
	// singleton socket, under ToolVars's TMPDIR), whose paths hold at most
	// 107 bytes.
	home := t.TempDir()
	tmp, err := os.MkdirTemp("", "isolated-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	env := append([]string{childEnv + "=1", "HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home,
		"XDG_STATE_HOME=" + home, "XDG_CACHE_HOME=" + home, "TMPDIR=" + tmp}, GoDirs(t)...)
	if user := npmUserConfig(); user != "" {
		env = append(env, "npm_config_userconfig="+user)
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "TMPDIR", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV",
			"BUN_INSTALL_CACHE_DIR", "TMUX_TMPDIR", childEnv:
			continue
		}
		if l := strings.ToLower(name); l == "npm_config_cache" || l == "npm_config_userconfig" {
			continue
		}
		env = append(env, kv)
	}
	args := []string{"-test.run=" + pattern, "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+max(time.Until(d)-30*time.Second, time.Minute).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(env, extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the isolated run of %s failed: %v\n%s", pattern, err, tail(out.String(), 6000))
	}
	if !strings.Contains(out.String(), "--- PASS") {
		t.Fatalf("the isolated run of %s ran no test:\n%s", pattern, tail(out.String(), 6000))
	}
	for what, dir := range map[string]string{"HOME and XDG directories": home, "TMPDIR": tmp} {
		var left []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if p != dir {
				left = append(left, strings.TrimPrefix(p, dir+"/"))
			}
			return nil
		})
		if len(left) > 0 {
			t.Errorf("the tests %s wrote into %s: %v", pattern, what, left)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// GoDirs returns GOCACHE, GOMODCACHE, GOPATH and GOENV as NAME=value
// pairs, with the values the go command uses now (asked once per test
// binary): a child run with another HOME keeps using the real build and
// module caches and the go command's own settings. When the environment
// sets all four (as RunIsolated does for its child) they are taken from
// it: the go command run with a moved home would write its telemetry
// there.
func GoDirs(t testing.TB) []string {
	t.Helper()
	goDirs.Do(func() {
		names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"}
		for _, n := range names {
			if v := os.Getenv(n); v != "" {
				goDirs.vars = append(goDirs.vars, n+"="+v)
			}
		}
		if len(goDirs.vars) == len(names) {
			return
		}
		goDirs.vars = nil
		out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
		if err != nil {
			goDirs.err = fmt.Errorf("go env: %v", err)
			return
		}
		vals := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(vals) != len(names) {
			goDirs.err = fmt.Errorf("go env printed %q", out)
			return
		}
		for i := range vals {
			goDirs.vars = append(goDirs.vars, names[i]+"="+vals[i])
		}
	})
	if goDirs.err != nil {
		t.Fatal(goDirs.err)
	}
	return append([]string(nil), goDirs.vars...)
}

var goDirs struct {
	sync.Once
	vars []string
	err  error
}

// RepoRoot is the directory of the go.mod of the module under test.
func RepoRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("finding the repository root with go env GOMOD: %q, %v", gomod, err)
	}
	return filepath.Dir(gomod)
}

package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func lookup(env []string, name string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == name {
			v, ok = val, true
		}
	}
	return v, ok
}

// TestToolVarsPointIntoOneTempDir: the home, the XDG directories, TMPDIR,
// npm's and Bun's caches and tmux's socket directory lie in one temporary
// directory, each existing; the go command's directories keep the values
// go env prints.
func TestToolVarsPointIntoOneTempDir(t *testing.T) {
	vars := ToolVars(t)
	home, _ := lookup(vars, "HOME")
	root := filepath.Dir(home)
	for _, name := range []string{"HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "TMPDIR",
		"TMUX_TMPDIR", "npm_config_cache", "BUN_INSTALL_CACHE_DIR"} {
		v, ok := lookup(vars, name)
		if !ok || filepath.Dir(v) != root {
			t.Errorf("%s=%q, want a directory of %s", name, v, root)
			continue
		}
		if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
			t.Errorf("%s=%s: not a directory (%v)", name, v, err)
		}
	}
	if real, _ := os.UserHomeDir(); real != "" && strings.HasPrefix(root, real+"/") {
		t.Errorf("the tools' directory %s lies in the home %s", root, real)
	}
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"} {
		if v, _ := lookup(vars, name); v != strings.Split(strings.TrimSpace(string(out)), "\n")[i] {
			t.Errorf("%s=%q, go env prints %q", name, v, out)
		}
	}
	if other, _ := lookup(ToolVars(t), "HOME"); other == home {
		t.Errorf("two calls share the home %s", home)
	}
}

// TestSetEnvReplaces: a variable given replaces every entry of its name,
// npm's settings whatever their case; the rest stays in order.
func TestSetEnvReplaces(t *testing.T) {
	got := SetEnv([]string{"A=1", "HOME=/root", "NPM_CONFIG_CACHE=/root/.npm", "B=2", "HOME=/again", "home=lower"},
		"HOME=/tmp/h", "npm_config_cache=/tmp/c")
	want := []string{"A=1", "B=2", "home=lower", "HOME=/tmp/h", "npm_config_cache=/tmp/c"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("SetEnv = %q, want %q", got, want)
	}
}

// envRegistry passes the registry npm names with the real home to the
// isolated run, whose home is empty.
const envRegistry = "AGENTGATE_TEST_NPM_REGISTRY"

// TestToolsWriteOnlyTheirTempDir runs TestToolsInTheirOwnHome with an
// empty home and TMPDIR: nothing is left in either.
func TestToolsWriteOnlyTheirTempDir(t *testing.T) {
	var extra []string
	if _, err := exec.LookPath("npm"); err == nil {
		extra = append(extra, envRegistry+"="+NPMRegistry(t))
	}
	RunIsolated(t, "^TestToolsInTheirOwnHome$", extra...)
}

// TestToolsInTheirOwnHome runs npm, node and tmux (those installed) with
// ToolEnv as their tests do: npm keeps the registry the real home's
// configuration names and logs into the temporary cache, node's home and
// temporary directory are the temporary ones, and tmux's socket lies in
// TMUX_TMPDIR.
func TestToolsInTheirOwnHome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ran := 0
	if _, err := exec.LookPath("npm"); err == nil {
		ran++
		env := ToolEnv(t)
		cmd := exec.CommandContext(ctx, "npm", "config", "get", "registry")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("npm config get registry: %v", err)
		}
		if want := os.Getenv(envRegistry); want != "" && strings.TrimSpace(string(out)) != want {
			t.Errorf("npm's registry with the home moved is %q, with the real home %q", out, want)
		}
		cache, _ := lookup(env, "npm_config_cache")
		if logs, _ := os.ReadDir(filepath.Join(cache, "_logs")); len(logs) == 0 {
			t.Errorf("npm logged nothing into its temporary cache %s", cache)
		}
	}
	if _, err := exec.LookPath("node"); err == nil {
		ran++
		env := ToolEnv(t)
		cmd := exec.CommandContext(ctx, "node", "-e", `const fs = require("fs"), os = require("os"), path = require("path");
fs.writeFileSync(path.join(os.homedir(), "home-file"), "x");
fs.mkdtempSync(path.join(os.tmpdir(), "left-"));
console.log(os.homedir() + "\n" + os.tmpdir());`)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v", err)
		}
		home, _ := lookup(env, "HOME")
		tmp, _ := lookup(env, "TMPDIR")
		if got := strings.TrimSpace(string(out)); got != home+"\n"+tmp {
			t.Errorf("node's home and tmpdir: %q, want %s and %s", got, home, tmp)
		}
	}
	if _, err := exec.LookPath("tmux"); err == nil {
		ran++
		cmd := Command(t, ctx, "tmux", "-f", "/dev/null", "new-session", "-d", "-s", "tool", "sleep 30")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tmux new-session: %v\n%s", err, out)
		}
		kill := exec.Command("tmux", "kill-server")
		kill.Env = cmd.Env
		defer kill.Run()
		dir, _ := lookup(cmd.Env, "TMUX_TMPDIR")
		socks, _ := filepath.Glob(filepath.Join(dir, "tmux-*", "default"))
		if len(socks) != 1 {
			t.Errorf("no tmux socket in TMUX_TMPDIR %s", dir)
		}
	}
	if ran == 0 {
		t.Skip("none of npm, node and tmux is installed")
	}
}

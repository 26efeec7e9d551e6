package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ToolVars returns the NAME=value pairs that give one run of an outside
// tool — npm, npx, node, Bun, the OpenCode CLI and TUI (under tmux too),
// Chromium, or the real binary that starts such tools — a home of its
// own, in a temporary directory (removed when the test t ends):
//
//   - HOME, XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_STATE_HOME, XDG_CACHE_HOME
//     and TMPDIR: where OpenCode keeps its config, data, state, logs and
//     caches, Chromium its profile, crash reports and NSS database, node
//     and the scripts their temporary files;
//   - npm_config_cache (npm's cache and logs), npm_config_update_notifier
//     off, BUN_INSTALL_CACHE_DIR (Bun's install cache) and TMUX_TMPDIR
//     (tmux's socket directory).
//
// What must keep working with the home moved keeps its real value:
// GOCACHE, GOMODCACHE, GOPATH and GOENV (GoDirs), and npm's registry,
// read once from npm's configuration as the user has it (the
// npm_config_registry environment variable or the user's .npmrc), passed
// on as npm_config_registry, with the user's .npmrc itself named by
// npm_config_userconfig (npm only reads it). Installing the packages of a
// lockfile therefore fills a temporary cache from the registry the
// machine is configured with.
func ToolVars(t testing.TB) []string {
	t.Helper()
	// A short name, not t.TempDir's (which carries the test's name):
	// Chromium's singleton socket lies in TMPDIR, and a socket's path
	// holds at most 107 bytes.
	dir, err := os.MkdirTemp("", "tool-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing the tools' directory: %v", err)
		}
	})
	sub := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	vars := []string{
		"HOME=" + sub("home"),
		"XDG_CONFIG_HOME=" + sub("config"),
		"XDG_DATA_HOME=" + sub("data"),
		"XDG_STATE_HOME=" + sub("state"),
		"XDG_CACHE_HOME=" + sub("cache"),
		"TMPDIR=" + sub("tmp"),
		"TMUX_TMPDIR=" + sub("tmux"),
		"npm_config_cache=" + sub("npm-cache"),
		"npm_config_update_notifier=false",
		"BUN_INSTALL_CACHE_DIR=" + sub("bun-cache"),
	}
	vars = append(vars, GoDirs(t)...)
	return append(vars, npmSettings()...)
}

// ToolEnv is this process's environment with ToolVars (then extra) in
// place of the variables of the same names: what a test gives a tool it
// runs, as cmd.Env.
func ToolEnv(t testing.TB, extra ...string) []string {
	t.Helper()
	return SetEnv(os.Environ(), append(ToolVars(t), extra...)...)
}

// Command is exec.CommandContext with ToolEnv as the environment.
func Command(t testing.TB, ctx context.Context, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = ToolEnv(t)
	return cmd
}

// SetEnv returns env with each NAME=value of kv in place of the entries
// of that name (npm's npm_config_ settings compared without case, as npm
// reads them), or added.
func SetEnv(env []string, kv ...string) []string {
	key := func(s string) string {
		name, _, _ := strings.Cut(s, "=")
		if strings.HasPrefix(strings.ToLower(name), "npm_config_") {
			return strings.ToLower(name)
		}
		return name
	}
	set := map[string]bool{}
	for _, s := range kv {
		set[key(s)] = true
	}
	out := make([]string, 0, len(env)+len(kv))
	for _, s := range env {
		if !set[key(s)] {
			out = append(out, s)
		}
	}
	return append(out, kv...)
}

// NPMRegistry is the registry npm is configured with on this machine (as
// npm_config_registry, see ToolVars); the test fails without npm.
func NPMRegistry(t testing.TB) string {
	t.Helper()
	for _, kv := range npmSettings() {
		if v, ok := strings.CutPrefix(kv, "npm_config_registry="); ok {
			return v
		}
	}
	t.Fatalf("npm config get registry printed no http(s) URL (is npm installed?)")
	return ""
}

// npmEnv is the value of npm's setting name in this process's
// environment (npm_config_<name>, in any case), or "".
func npmEnv(name string) string {
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.EqualFold(k, "npm_config_"+name) {
			return v
		}
	}
	return ""
}

// npmUserConfig is the user's npm configuration file: the one
// npm_config_userconfig names, else the .npmrc of this process's home if
// there is one, else "".
func npmUserConfig() string {
	if user := npmEnv("userconfig"); user != "" {
		return user
	}
	if home, err := os.UserHomeDir(); err == nil {
		if _, err := os.Stat(filepath.Join(home, ".npmrc")); err == nil {
			return filepath.Join(home, ".npmrc")
		}
	}
	return ""
}

var npmOnce struct {
	sync.Once
	vars []string
}

// npmSettings reads npm's registry once, with this process's home and
// environment but a throwaway cache (so that npm's log of the call lands
// there), and names the user's .npmrc when there is one. Without npm it
// returns nothing: no tool test that needs npm runs then.
func npmSettings() []string {
	npmOnce.Do(func() {
		if user := npmUserConfig(); user != "" {
			npmOnce.vars = append(npmOnce.vars, "npm_config_userconfig="+user)
		}
		if _, err := exec.LookPath("npm"); err != nil {
			return
		}
		cache, err := os.MkdirTemp("", "agentgate-npm-config-")
		if err != nil {
			return
		}
		defer os.RemoveAll(cache)
		cmd := exec.Command("npm", "config", "get", "registry")
		cmd.Env = SetEnv(os.Environ(), "npm_config_cache="+cache, "npm_config_update_notifier=false")
		out, err := cmd.Output()
		if reg := strings.TrimSpace(string(out)); err == nil && strings.HasPrefix(reg, "http") {
			npmOnce.vars = append(npmOnce.vars, "npm_config_registry="+reg)
		}
	})
	return npmOnce.vars
}

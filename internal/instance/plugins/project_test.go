package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeregistry"
)

func startRegistry(t *testing.T) *fakeregistry.Registry {
	t.Helper()
	r, err := fakeregistry.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// plugin publishes a package whose index.js is a plugin module.
func publish(r *fakeregistry.Registry, name, version string, meta map[string]any, files ...string) {
	f := map[string]string{"index.js": "export default async () => ({}) // " + name + "@" + version + "\n"}
	for i := 0; i+1 < len(files); i += 2 {
		f[files[i]] = files[i+1]
	}
	m := map[string]any{"main": "index.js"}
	for k, v := range meta {
		m[k] = v
	}
	r.Publish(fakeregistry.Package{Name: name, Version: version, Meta: m, Files: f})
}

func deps(kv ...string) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func readLock(t *testing.T, dir string) treeLock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(lockFile)))
	if err != nil {
		t.Fatal(err)
	}
	var lk treeLock
	if err := json.Unmarshal(b, &lk); err != nil {
		t.Fatal(err)
	}
	return lk
}

func pkgVersion(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	var pj struct{ Version string }
	json.Unmarshal(b, &pj)
	return pj.Version
}

// writeProject writes a project's files (slash paths) and returns its
// directory.
func writeProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func noHost(m *Manager) *Manager {
	m.SetRuntime(&Runtime{NoHost: "no plugin host (test)"})
	return m
}

func byID(list []Info) map[string]Info {
	out := map[string]Info{}
	for _, p := range list {
		out[p.ID] = p
	}
	return out
}

// TestTreeInstall: a plugin's dependency tree is installed as npm lays it
// out — shared versions at the top, a conflicting one under the package
// that needs it, peers beside the plugin, optional packages only for this
// platform — with a lock file naming every package, and no install script
// run.
func TestTreeInstall(t *testing.T) {
	reg := startRegistry(t)
	publish(reg, "plug", "1.0.0", map[string]any{
		"dependencies":         deps("a", "^1.0.0", "b", "~1.2.0"),
		"peerDependencies":     deps("host", ">=2", "tui", "^1"),
		"peerDependenciesMeta": map[string]any{"tui": map[string]any{"optional": true}},
		"optionalDependencies": deps("native-here", "1.0.0", "native-elsewhere", "1.0.0"),
	})
	publish(reg, "a", "1.0.0", nil)
	publish(reg, "a", "1.4.0", map[string]any{"dependencies": deps("c", "^1.0.0")})
	publish(reg, "a", "2.0.0", nil)
	publish(reg, "b", "1.2.3", map[string]any{"dependencies": deps("c", "^2.0.0")})
	publish(reg, "c", "1.1.0", nil)
	publish(reg, "c", "2.0.1", map[string]any{"scripts": map[string]any{"postinstall": "touch ../../../pwned"}, "hasInstallScript": true})
	publish(reg, "host", "2.3.0", nil)
	publish(reg, "tui", "1.0.0", nil)
	plat := hostPlatform()
	publish(reg, "native-here", "1.0.0", map[string]any{"os": []string{plat.os}, "cpu": []string{plat.cpu}})
	publish(reg, "native-elsewhere", "1.0.0", map[string]any{"os": []string{"!" + plat.os}})

	dir := t.TempDir()
	m, err := New(Options{Registry: reg.URL, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	project := writeProject(t, map[string]string{"opencode.json": `{"plugin": ["plug@^1.0.0"]}`})
	list := byID(noHost(m).Running(context.Background(), Location{Dir: project, ProjectDir: project}))
	if p := list["plug"]; p.Source.Version != "1.0.0" || p.State.Error != "no plugin host (test)" {
		t.Fatalf("plug = %+v", p)
	}
	root := filepath.Join(dir, "plug", "1.0.0")
	for rel, want := range map[string]string{
		"":                              "1.0.0",
		"node_modules/a":                "1.4.0",
		"node_modules/b":                "1.2.3",
		"node_modules/c":                "1.1.0",
		"node_modules/b/node_modules/c": "2.0.1",
		"node_modules/host":             "2.3.0",
		"node_modules/native-here":      "1.0.0",
	} {
		if got := pkgVersion(t, filepath.Join(root, filepath.FromSlash(rel))); got != want {
			t.Errorf("%s: version %s, want %s", rel, got, want)
		}
	}
	for _, absent := range []string{"node_modules/tui", "node_modules/native-elsewhere", "pwned"} {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(absent))); err == nil {
			t.Errorf("%s was installed", absent)
		}
	}
	lk := readLock(t, root)
	var paths []string
	for p := range lk.Packages {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	want := []string{"", "node_modules/a", "node_modules/b", "node_modules/b/node_modules/c", "node_modules/c", "node_modules/host", "node_modules/native-here"}
	if !slices.Equal(paths, want) {
		t.Errorf("lock packages = %v, want %v", paths, want)
	}
	if e := lk.Packages["node_modules/b/node_modules/c"]; e.Integrity != reg.Integrity("c", "2.0.1") || !e.InstallScript {
		t.Errorf("lock of nested c = %+v", e)
	}
	notes := strings.Join(lk.Notes, "\n")
	// Another platform's optional build is left out without a word, as npm does.
	if !strings.Contains(notes, "c@2.0.1 has an install script; it was not run") || strings.Contains(notes, "native-elsewhere") {
		t.Errorf("notes = %q", notes)
	}
	// Nothing but the tree and the project's lock is left in the plugin directory.
	for _, p := range listTree(t, dir) {
		if strings.Contains(p, ".install-") || strings.Contains(p, ".download-") {
			t.Errorf("left behind: %s", p)
		}
	}
}

// TestProjectPluginsLockAndReinstall: a project's list resolves once
// (from the server's registry, whatever the project's .npmrc says); a
// new manager over the same data directory loads the locked versions
// without asking the registry; a changed entry is resolved again, the
// others are not.
func TestProjectPluginsLockAndReinstall(t *testing.T) {
	reg := startRegistry(t)
	publish(reg, "alpha", "1.0.0", nil)
	publish(reg, "alpha", "1.2.0", nil)
	publish(reg, "@scope/beta", "0.3.0", nil)
	dir := t.TempDir()
	project := writeProject(t, map[string]string{
		"opencode.jsonc":           "// the project's plugins\n{\"plugin\": [\"alpha@^1.0.0\", [\"@scope/beta\", {\"x\": 1}]]}",
		".opencode/opencode.json":  `{"plugin": ["./tools/mine.js", "alpha@^1.0.0"]}`,
		".opencode/tools/mine.js":  "export default async () => ({})",
		".opencode/plugin/more.js": "export default async () => ({})",
		// A project's .npmrc names no registry for the server.
		".npmrc": "registry=http://127.0.0.1:1/\n",
	})
	loc := Location{Dir: project, ProjectDir: project}
	newM := func() *Manager {
		m, err := New(Options{Registry: reg.URL, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return noHost(m)
	}
	list := newM().Running(context.Background(), loc)
	var ids []string
	for _, p := range list {
		ids = append(ids, p.ID+"="+p.Source.Version)
	}
	if want := []string{"agentgate.gateway-auth=", "alpha=1.2.0", "@scope/beta=0.3.0", "mine=", "more="}; !slices.Equal(ids, want) {
		t.Fatalf("list = %v, want %v", ids, want)
	}
	if p := byID(list)["mine"]; p.Source.Type != "local" || p.Source.Path != filepath.Join(project, ".opencode", "tools", "mine.js") {
		t.Errorf("mine = %+v", p)
	}
	before := reg.Hits("")

	// Restart: the lock answers.
	list = newM().Running(context.Background(), loc)
	if reg.Hits("") != before {
		t.Errorf("the registry was asked again: %d requests", reg.Hits("")-before)
	}
	if p := byID(list)["alpha"]; p.Source.Version != "1.2.0" {
		t.Errorf("alpha after restart = %+v", p)
	}
	// A newer alpha is published: the locked version stays while the list is the same.
	publish(reg, "alpha", "1.3.0", nil)
	if p := byID(newM().Running(context.Background(), loc))["alpha"]; p.Source.Version != "1.2.0" {
		t.Errorf("alpha moved without a list change: %+v", p)
	}

	// The list changes: only the changed entry is resolved.
	os.WriteFile(filepath.Join(project, ".opencode", "opencode.json"), []byte(`{"plugin": ["./tools/mine.js", "alpha@~1.3.0"]}`), 0o644)
	betaHits := reg.Hits("/@scope%2Fbeta")
	list = newM().Running(context.Background(), loc)
	if p := byID(list)["alpha"]; p.Source.Version != "1.3.0" {
		t.Errorf("alpha after the change = %+v", p)
	}
	if reg.Hits("/@scope%2Fbeta") != betaHits {
		t.Error("beta was resolved again though its entry did not change")
	}
}

// TestProjectPluginPolicy: plugins_from_projects deny refuses a
// project's packages and files; the allow list refuses packages it does
// not name; the deny list refuses packages as plugins and as
// dependencies. A refused package is never fetched.
func TestProjectPluginPolicy(t *testing.T) {
	reg := startRegistry(t)
	publish(reg, "opencode-good", "1.0.0", nil)
	publish(reg, "opencode-evil", "1.0.0", nil)
	publish(reg, "@acme/tool", "1.0.0", nil)
	publish(reg, "needs-bad-dep", "1.0.0", map[string]any{"dependencies": deps("left-pad-evil", "1")})
	publish(reg, "left-pad-evil", "1.0.0", nil)
	project := writeProject(t, map[string]string{
		"opencode.json":         `{"plugin": ["opencode-good@1.0.0", "opencode-evil@1.0.0", "@acme/tool@1.0.0", "needs-bad-dep@1.0.0"]}`,
		".opencode/plugin/a.js": "export default async () => ({})",
	})
	loc := Location{Dir: project, ProjectDir: project}
	run := func(p Policy) map[string]Info {
		m, err := New(Options{Registry: reg.URL, Dir: t.TempDir(), Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		return byID(noHost(m).Running(context.Background(), loc))
	}
	before := reg.Hits("")
	list := run(Policy{DenyProjects: true})
	for _, id := range []string{"opencode-good", "opencode-evil", "@acme/tool", "needs-bad-dep", "a"} {
		if p := list[id]; p.State.Status != "failed" || !strings.HasPrefix(p.State.Error, "not allowed: plugins_from_projects is deny") {
			t.Errorf("deny projects: %s = %+v", id, p)
		}
	}
	if reg.Hits("") != before {
		t.Errorf("refused plugins were fetched: %d requests", reg.Hits("")-before)
	}

	list = run(Policy{Allow: []string{"opencode-*", "needs-*"}, Deny: []string{"*-evil"}})
	if p := list["opencode-good"]; p.Source.Version != "1.0.0" || p.State.Error != "no plugin host (test)" {
		t.Errorf("good = %+v", p)
	}
	if p := list["opencode-evil"]; p.State.Error != `not allowed: plugin_packages_deny names opencode-evil (pattern "*-evil")` {
		t.Errorf("evil = %+v", p)
	}
	if p := list["@acme/tool"]; p.State.Error != "not allowed: plugin_packages does not list @acme/tool (allowed: opencode-* needs-*)" {
		t.Errorf("acme = %+v", p)
	}
	if p := list["needs-bad-dep"]; !strings.HasPrefix(p.State.Error, "install failed: dependency left-pad-evil@1: not allowed: plugin_packages_deny names left-pad-evil") || p.State.Ref == "" {
		t.Errorf("needs-bad-dep = %+v", p)
	}
	if p := list["a"]; p.State.Error != "no plugin host (test)" {
		t.Errorf("local file = %+v", p)
	}
	for _, path := range []string{"/opencode-evil", "/left-pad-evil", "/@acme%2Ftool"} {
		if n := reg.Hits(path); n != 0 {
			t.Errorf("%s fetched %d times", path, n)
		}
	}
	if _, err := New(Options{Policy: Policy{Deny: []string{"[bad"}}}); err == nil {
		t.Error("a malformed pattern was accepted")
	}
}

// TestProjectPluginInstallFaults: each fault fails the plugin's install
// with the registry's error in its status (and a ref), leaves nothing
// half-written in the data directory, and leaves the project's other
// plugins installed.
func TestProjectPluginInstallFaults(t *testing.T) {
	for name, tc := range map[string]struct {
		setup func(r *fakeregistry.Registry)
		opts  Options
		want  string
	}{
		"not on the registry": {func(r *fakeregistry.Registry) {}, Options{}, "install failed: package not found in the registry"},
		"integrity mismatch": {func(r *fakeregistry.Registry) {
			publish(r, "victim", "1.0.0", map[string]any{"dependencies": deps("dep", "^1")})
			publish(r, "dep", "1.0.0", nil)
			r.SetFault("dep", fakeregistry.Fault{WrongIntegrity: true})
		}, Options{}, "install failed: dep@1.0.0 (node_modules/dep): tarball does not match its sha512 integrity"},
		"over the size limit": {func(r *fakeregistry.Registry) {
			publish(r, "victim", "1.0.0", map[string]any{"dependencies": deps("big", "^1")})
			publish(r, "big", "1.0.0", nil, "blob.bin", strings.Repeat("x", 64<<10))
		}, Options{MaxTreeSize: 32 << 10}, "the size limit of 32 KiB"},
		"over the size limit, as the registry says": {func(r *fakeregistry.Registry) {
			publish(r, "victim", "1.0.0", map[string]any{"dependencies": deps("big", "^1")})
			publish(r, "big", "1.0.0", map[string]any{"dist": map[string]any{"unpackedSize": 300 << 20}})
		}, Options{}, "over the size limit of 200 MiB"},
		"a registry that hangs": {func(r *fakeregistry.Registry) {
			publish(r, "victim", "1.0.0", map[string]any{"dependencies": deps("slow", "^1")})
			publish(r, "slow", "1.0.0", nil)
			r.SetFault("slow", fakeregistry.Fault{HangPackument: true})
		}, Options{RequestTimeout: 300 * time.Millisecond}, "install failed: dependency slow@^1: registry request timed out (nothing received for 300ms)"},
		"a tarball that stops": {func(r *fakeregistry.Registry) {
			publish(r, "victim", "1.0.0", nil, "blob.bin", strings.Repeat("y", 256<<10))
			r.SetFault("victim", fakeregistry.Fault{HangTarball: true})
		}, Options{RequestTimeout: 300 * time.Millisecond}, "install failed: downloading tarball: registry request timed out (nothing received for 300ms)"},
		"a dependency spec that is no registry version": {func(r *fakeregistry.Registry) {
			publish(r, "victim", "1.0.0", map[string]any{"dependencies": deps("x", "git+https://example.invalid/x.git")})
		}, Options{}, `is not a registry version`},
	} {
		t.Run(name, func(t *testing.T) {
			reg := startRegistry(t)
			publish(reg, "fine", "1.0.0", nil)
			tc.setup(reg)
			dir := t.TempDir()
			tc.opts.Registry, tc.opts.Dir = reg.URL, dir
			m, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			project := writeProject(t, map[string]string{"opencode.json": `{"plugin": ["victim@^1.0.0", "fine@1.0.0"]}`})
			list := byID(noHost(m).Running(context.Background(), Location{Dir: project, ProjectDir: project}))
			p := list["victim"]
			if p.State.Status != "failed" || !strings.Contains(p.State.Error, tc.want) || p.State.Ref == "" {
				t.Errorf("victim = %+v, want an error with %q", p, tc.want)
			}
			if p := list["fine"]; p.Source.Version != "1.0.0" || p.State.Error != "no plugin host (test)" {
				t.Errorf("fine = %+v", p)
			}
			if got := listTree(t, filepath.Join(dir, "victim")); len(got) != 0 {
				t.Errorf("left behind: %v", got)
			}
			// The lock keeps what installed.
			if lk := m.readProjectLock(project); len(lk) != 1 || lk["fine@1.0.0"] != "1.0.0" {
				t.Errorf("project lock = %v", lk)
			}
		})
	}
}

// TestProjectPluginInstalling: while a project's package installs, a
// listing that stops waiting shows it installing; a later one shows it
// installed.
func TestProjectPluginInstalling(t *testing.T) {
	reg := startRegistry(t)
	publish(reg, "slow", "1.0.0", nil)
	reg.SetFault("slow", fakeregistry.Fault{HangTarball: true})
	m, err := New(Options{Registry: reg.URL, Dir: t.TempDir(), RequestTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	project := writeProject(t, map[string]string{"opencode.json": `{"plugin": ["slow"]}`})
	loc := Location{Dir: project, ProjectDir: project}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for reg.Waiting() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	p := byID(noHost(m).Running(ctx, loc))["slow"]
	if p.State.Status != "failed" || p.State.Error != "installing" || !p.Source.Updating {
		t.Fatalf("while installing = %+v", p)
	}
	reg.SetFault("slow", fakeregistry.Fault{})
	reg.Release() // the held download is cut, the install fails; a reload tries again
	p = byID(m.Running(context.Background(), loc))["slow"]
	if !strings.HasPrefix(p.State.Error, "install failed:") {
		t.Fatalf("after the cut = %+v", p)
	}
	m.Reload()
	if p := byID(m.Running(context.Background(), loc))["slow"]; p.Source.Version != "1.0.0" || p.State.Error != "no plugin host (test)" {
		t.Fatalf("after the reload = %+v", p)
	}
}

// TestConfiguredPluginInstallsAtStart: the Caddyfile's plugins install in
// the background (listed installing meanwhile); a failure says why with
// a ref.
func TestConfiguredPluginInstallsAtStart(t *testing.T) {
	reg := startRegistry(t)
	publish(reg, "alpha", "1.0.0", map[string]any{"dependencies": deps("dep", "1")})
	publish(reg, "alpha", "2.0.0", nil)
	publish(reg, "dep", "1.0.0", nil)
	reg.SetFault("dep", fakeregistry.Fault{HangTarball: true})
	dir := t.TempDir()
	m, err := New(Options{Registry: reg.URL, Dir: dir, Targets: []string{"alpha@1.0.0", "gone@^1"}})
	if err != nil {
		t.Fatal(err)
	}
	noHost(m).InstallConfigured()
	for reg.Waiting() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if p := findPlugin(t, m.List(""), "alpha"); p.State.Error != "installing" || !p.Source.Updating {
		t.Fatalf("while installing = %+v", p)
	}
	reg.SetFault("dep", fakeregistry.Fault{})
	reg.Release()
	// Running waits for the install (which the cut failed): the next
	// start installs it.
	list := byID(m.Running(context.Background(), Location{}))
	if p := list["alpha"]; !strings.HasPrefix(p.State.Error, "install failed: dep@1.0.0") || p.State.Ref == "" {
		t.Fatalf("after the cut = %+v", p)
	}
	if p := list["gone"]; p.State.Error != "install failed: package not found in the registry" {
		t.Fatalf("gone = %+v", p)
	}
	m.Close()
	m2, err := New(Options{Registry: reg.URL, Dir: dir, Targets: []string{"alpha@1.0.0"}})
	if err != nil {
		t.Fatal(err)
	}
	m2.InstallConfigured()
	// The pinned version, not the latest.
	if p := byID(noHost(m2).Running(context.Background(), Location{}))["alpha"]; p.Source.Version != "1.0.0" || p.State.Error != "no plugin host (test)" {
		t.Fatalf("installed = %+v", p)
	}
	if v := pkgVersion(t, filepath.Join(dir, "alpha", "1.0.0", "node_modules", "dep")); v != "1.0.0" {
		t.Errorf("dep = %q", v)
	}
}

// TestRunningShowsCheckFlags: a check's outdated flag shows in the
// running listing of a location planned before it.
func TestRunningShowsCheckFlags(t *testing.T) {
	reg := startRegistry(t)
	publish(reg, "alpha", "1.0.0", nil)
	m, err := New(Options{Registry: reg.URL, Dir: t.TempDir(), Targets: []string{"alpha@1.0.0"}})
	if err != nil {
		t.Fatal(err)
	}
	noHost(m).InstallConfigured()
	loc := Location{Dir: t.TempDir()}
	if p := byID(m.Running(context.Background(), loc))["alpha"]; p.Source.Version != "1.0.0" || p.Source.Outdated {
		t.Fatalf("before = %+v", p)
	}
	publish(reg, "alpha", "1.1.0", nil)
	if _, err := m.Check(context.Background(), "", ""); err != nil {
		t.Fatal(err)
	}
	if p := byID(m.Running(context.Background(), loc))["alpha"]; !p.Source.Outdated {
		t.Fatalf("after the check = %+v", p)
	}
}

// TestProjectPluginNoRegistry: with no registry configured and none in
// npm's configuration, a project's package is not installed and says why;
// one already installed (and locked) still loads.
func TestProjectPluginNoRegistry(t *testing.T) {
	dir := t.TempDir()
	writeInstalled(t, dir, "there", "1.0.0", "there", "1.0.0", true)
	os.WriteFile(filepath.Join(dir, "there", "1.0.0", "index.js"), []byte("export default async () => ({})"), 0o644)
	m, err := New(Options{Dir: dir, RegistryFallback: func() (string, error) { return "", errors.New("npm is not installed") }})
	if err != nil {
		t.Fatal(err)
	}
	project := writeProject(t, map[string]string{"opencode.json": `{"plugin": ["missing@^1", "there@1.0.0"]}`})
	list := byID(noHost(m).Running(context.Background(), Location{Dir: project, ProjectDir: project}))
	if p := list["missing"]; p.State.Error != "not installed: no plugin registry is configured, and npm's configuration names none: npm is not installed" {
		t.Errorf("missing = %+v", p)
	}
	if p := list["there"]; p.Source.Version != "1.0.0" || p.State.Error != "no plugin host (test)" {
		t.Errorf("there = %+v", p)
	}
}

// TestProjectPluginRetried: a failed install stands for a while, then
// the location's next load tries again, with no reload.
func TestProjectPluginRetried(t *testing.T) {
	reg := startRegistry(t)
	m, err := New(Options{Registry: reg.URL, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	project := writeProject(t, map[string]string{"opencode.json": `{"plugin": ["late@^1"]}`})
	loc := Location{Dir: project, ProjectDir: project}
	if p := byID(noHost(m).Running(context.Background(), loc))["late"]; p.State.Error != "install failed: package not found in the registry" {
		t.Fatalf("before it is published = %+v", p)
	}
	publish(reg, "late", "1.0.0", nil)
	if p := byID(m.Running(context.Background(), loc))["late"]; !strings.HasPrefix(p.State.Error, "install failed:") {
		t.Fatalf("the failure did not stand: %+v", p)
	}
	saved := retryFailedInstall
	retryFailedInstall = 0
	t.Cleanup(func() { retryFailedInstall = saved })
	if p := byID(m.Running(context.Background(), loc))["late"]; p.Source.Version != "1.0.0" || p.State.Error != "no plugin host (test)" {
		t.Fatalf("after the wait = %+v", p)
	}
}

// A [spec, options] entry keeps its options for the plugin's functions;
// a plain entry has none, and a later file's entry for the same package
// replaces the earlier one with its own options.
func TestProjectPluginOptions(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".opencode"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "opencode.json"), []byte(`{"plugin": [["a-plugin@1.0.0", {"mode": "fast", "n": 2}], "b-plugin"]}`), 0o644)
	os.WriteFile(filepath.Join(dir, ".opencode", "opencode.json"), []byte(`{"plugin": [["b-plugin@2", {"level": 3}]]}`), 0o644)
	got := map[string]map[string]any{}
	for _, e := range readProjectPlugins(dir) {
		got[e.name] = e.options
	}
	if got["a-plugin"]["mode"] != "fast" || got["a-plugin"]["n"] != float64(2) || got["b-plugin"]["level"] != float64(3) || len(got) != 2 {
		t.Fatalf("options: %v", got)
	}
}

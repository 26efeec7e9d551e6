package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeregistry"
)

func TestBunPackage(t *testing.T) {
	for _, tc := range []struct {
		goos, goarch string
		avx2, musl   bool
		want         string
	}{
		{"linux", "amd64", true, false, "@oven/bun-linux-x64"},
		{"linux", "amd64", false, false, "@oven/bun-linux-x64-baseline"},
		{"linux", "amd64", true, true, "@oven/bun-linux-x64-musl"},
		{"linux", "amd64", false, true, "@oven/bun-linux-x64-musl-baseline"},
		{"linux", "arm64", false, false, "@oven/bun-linux-aarch64"},
		{"linux", "arm64", false, true, "@oven/bun-linux-aarch64-musl"},
		{"darwin", "amd64", true, false, "@oven/bun-darwin-x64"},
		{"darwin", "amd64", false, false, "@oven/bun-darwin-x64-baseline"},
		{"darwin", "arm64", false, false, "@oven/bun-darwin-aarch64"},
	} {
		got, err := BunPackage(tc.goos, tc.goarch, tc.avx2, tc.musl)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v", tc, got, err)
		}
		// Every build the server may pick has its integrity pinned.
		if pinnedIntegrity(got, BunVersion) == "" {
			t.Errorf("%s@%s has no pinned integrity", got, BunVersion)
		}
	}
	if _, err := BunPackage("windows", "amd64", true, false); err == nil || !strings.Contains(err.Error(), "plugin_host { bun <path> }") {
		t.Errorf("windows: %v", err)
	}
	for name, versions := range pinned {
		for v, sri := range versions {
			if _, err := parseIntegrity(sri); err != nil {
				t.Errorf("%s@%s: %v", name, v, err)
			}
		}
	}
}

// fakeBun publishes this host's Bun package at BunVersion, its tarball
// pinned (as a release of this binary pins the real one), and returns
// its name.
func fakeBun(t *testing.T, reg *fakeregistry.Registry) string {
	t.Helper()
	name, err := hostBunPackage()
	if err != nil {
		t.Skip(err)
	}
	reg.Publish(fakeregistry.Package{Name: name, Version: BunVersion,
		Meta:  map[string]any{"os": []string{"linux"}, "bin": map[string]string{"bun": "bin/bun"}},
		Files: map[string]string{"bin/bun": "#!/bin/sh\necho fake bun\n", "README.md": strings.Repeat("bun ", 1<<14)}})
	testPins = map[string]string{name + "@" + BunVersion: reg.Integrity(name, BunVersion)}
	t.Cleanup(func() { testPins = nil })
	return name
}

// wantEmpty fails unless dir holds no file (directories may remain).
func wantEmpty(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

// TestInstallBun: with no Bun anywhere, the pinned build for this host
// is installed from the registry, checked against the integrity this
// binary pins, once.
func TestInstallBun(t *testing.T) {
	reg := startRegistry(t)
	name := fakeBun(t, reg)
	m, err := New(Options{Registry: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	exe, err := m.InstallBun(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, filepath.FromSlash(name), BunVersion, "bin", "bun"); exe != want {
		t.Errorf("bun = %s, want %s", exe, want)
	}
	if fi, err := os.Stat(exe); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("bun is not executable: %v %v", fi, err)
	}
	hits := reg.Hits("")
	if again, err := m.InstallBun(context.Background(), dir); err != nil || again != exe || reg.Hits("") != hits {
		t.Errorf("second install: %s, %v, %d more requests", again, err, reg.Hits("")-hits)
	}
}

// TestInstallBunFaults: a tarball that is not the pinned one, a registry
// that does not have it, answers an error or hangs: each fails with a
// clear error and leaves nothing in the directory.
func TestInstallBunFaults(t *testing.T) {
	for what, tc := range map[string]struct {
		fault   fakeregistry.Fault
		unpin   bool
		timeout time.Duration
		want    string
	}{
		"a tarball other than the pinned one": {unpin: true, want: "tarball does not match its sha512 integrity"},
		"the registry lacks the package":      {fault: fakeregistry.Fault{NotFound: true}, want: "package not found in the registry"},
		"the tarball download fails":          {fault: fakeregistry.Fault{TarballStatus: 502}, want: "tarball download answered 502 Bad Gateway: tarball refused"},
		"the registry hangs":                  {fault: fakeregistry.Fault{HangPackument: true}, timeout: 200 * time.Millisecond, want: "registry request timed out"},
		"the download stops halfway":          {fault: fakeregistry.Fault{HangTarball: true}, timeout: 200 * time.Millisecond, want: "registry request timed out"},
	} {
		t.Run(what, func(t *testing.T) {
			reg := startRegistry(t)
			name := fakeBun(t, reg)
			if tc.unpin {
				testPins[name+"@"+BunVersion] = fakeregistry.SRI([]byte("another build"))
			}
			reg.SetFault(name, tc.fault)
			m, err := New(Options{Registry: reg.URL, RequestTimeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			_, err = m.InstallBun(context.Background(), dir)
			if err == nil || !strings.Contains(err.Error(), "installing "+name+"@"+BunVersion+" from the registry failed") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one with %q", err, tc.want)
			}
			wantEmpty(t, dir)
		})
	}
	t.Run("no registry", func(t *testing.T) {
		m, err := New(Options{RegistryFallback: func() (string, error) { return "", os.ErrNotExist }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.InstallBun(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "no plugin registry is configured, and npm's configuration names none") {
			t.Fatalf("error = %v", err)
		}
	})
}

// TestInstallRuntimeModules: the pinned runtime modules install with
// their dependencies under one node_modules; a registry serving another
// tarball for a pinned one fails it.
func TestInstallRuntimeModules(t *testing.T) {
	reg := startRegistry(t)
	saved := RuntimeModules
	t.Cleanup(func() { RuntimeModules = saved })
	RuntimeModules = map[string]string{"@opencode-ai/sdk": "9.9.9", "zod": "9.0.0"}
	publish(reg, "@opencode-ai/sdk", "9.9.9", map[string]any{"dependencies": deps("cross-spawn", "^7")})
	publish(reg, "cross-spawn", "7.0.6", nil)
	publish(reg, "zod", "9.0.0", nil)
	testPins = map[string]string{"@opencode-ai/sdk@9.9.9": reg.Integrity("@opencode-ai/sdk", "9.9.9"), "zod@9.0.0": fakeregistry.SRI([]byte("not zod"))}
	t.Cleanup(func() { testPins = nil })
	m, err := New(Options{Registry: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := m.InstallRuntimeModules(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "zod@9.0.0 (node_modules/zod): tarball does not match its sha512 integrity") {
		t.Fatalf("with a tampered zod: %v", err)
	}
	wantEmpty(t, dir)
	testPins["zod@9.0.0"] = reg.Integrity("zod", "9.0.0")
	modules, err := m.InstallRuntimeModules(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"@opencode-ai/sdk", "cross-spawn", "zod"} {
		if _, err := os.Stat(filepath.Join(modules, filepath.FromSlash(p), "package.json")); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestNPMRegistry: without a Caddyfile registry, npm's own configuration
// names one: its environment variable, the user's .npmrc, or npm itself
// (a stand-in npm here, run outside any project).
func TestNPMRegistry(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	if got, err := npmRegistry(ctx, []string{"NPM_CONFIG_REGISTRY=http://env.invalid/", "HOME=" + home}, "no-such-npm"); err != nil || got != "http://env.invalid/" {
		t.Errorf("from the environment: %q, %v", got, err)
	}
	os.WriteFile(filepath.Join(home, ".npmrc"), []byte("; comment\n@acme:registry=http://scoped.invalid/\nregistry = \"http://rc.invalid/\"\n"), 0o600)
	if got, err := npmRegistry(ctx, []string{"HOME=" + home}, "no-such-npm"); err != nil || got != "http://rc.invalid/" {
		t.Errorf("from .npmrc: %q, %v", got, err)
	}
	bin := t.TempDir()
	fake := filepath.Join(bin, "npm")
	os.WriteFile(fake, []byte("#!/bin/sh\n[ \"$1 $2 $3\" = \"config get registry\" ] && pwd\n"), 0o755)
	empty := t.TempDir()
	if got, err := npmRegistry(ctx, []string{"HOME=" + empty, "PATH=/usr/bin:/bin"}, fake); err != nil || got != "/" {
		t.Errorf("from npm: %q, %v (want the directory it ran in, /)", got, err)
	}
	if _, err := npmRegistry(ctx, []string{"HOME=" + empty}, "no-such-npm"); err == nil || !strings.Contains(err.Error(), "npm is not installed") {
		t.Errorf("without npm: %v", err)
	}
}

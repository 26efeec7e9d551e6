package instance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeregistry"
)

func TestPluginPolicyCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`agent_instance {
		plugin opencode-skills@0.1.7
		registry http://127.0.0.1:4873
		plugins_from_projects deny
		plugin_packages opencode-* @acme/*
		plugin_packages_deny *-evil
		plugin_install {
			max_size 50MiB
			request_timeout 5s
			downloads 4
		}
	}`)
	var in Instance
	if err := in.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := Instance{Plugins: []string{"opencode-skills@0.1.7"}, Registry: "http://127.0.0.1:4873", PluginsFromProjects: "deny",
		PluginPackages: []string{"opencode-*", "@acme/*"}, PluginPackagesDeny: []string{"*-evil"},
		PluginInstall: &PluginInstall{MaxSize: 50 << 20, RequestTimeout: caddy.Duration(5 * time.Second), Downloads: 4}}
	if !reflect.DeepEqual(in, want) {
		t.Fatalf("parsed %+v", in)
	}
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"agent_instance {\n plugins_from_projects maybe\n}",
		"agent_instance {\n plugins_from_projects\n}",
		"agent_instance {\n plugin_packages\n}",
		"agent_instance {\n plugin_packages_deny [oops\n}",
		"agent_instance {\n plugin_install {\n max_size lots\n }\n}",
		"agent_instance {\n plugin_install {\n request_timeout 0s\n }\n}",
		"agent_instance {\n plugin_install {\n downloads 0\n }\n}",
		"agent_instance {\n plugin_install {\n colour blue\n }\n}",
		"agent_instance {\n plugin_install {\n }\n plugin_install {\n }\n}",
	} {
		var in Instance
		if err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, in := range []Instance{{PluginsFromProjects: "sometimes"}, {PluginPackages: []string{"[x"}}, {PluginInstall: &PluginInstall{Downloads: -1}}} {
		if err := in.Validate(); err == nil {
			t.Errorf("%+v validated", in)
		}
	}
}

// TestPluginsArriveWithoutManualSteps: with only a registry configured,
// the Caddyfile's plugin installs at start and the project's
// opencode.json plugin on its location's first load, each with its
// dependencies; the deny list keeps one out; with no Bun configured or on
// PATH the server installs one from the registry — which has none here,
// so every plugin that would load says so, and nothing of Bun is left in
// the data directory.
func TestPluginsArriveWithoutManualSteps(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no bun, no npm
	reg, err := fakeregistry.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	pub := func(name, version string, deps map[string]any) {
		reg.Publish(fakeregistry.Package{Name: name, Version: version, Meta: map[string]any{"main": "index.js", "dependencies": deps},
			Files: map[string]string{"index.js": "export default async () => ({})"}})
	}
	pub("site-plugin", "1.0.0", map[string]any{"shared": "^1"})
	pub("project-plugin", "2.1.0", map[string]any{"shared": "^1"})
	pub("shared", "1.3.0", nil)
	pub("opencode-evil", "1.0.0", nil)
	project := t.TempDir()
	os.WriteFile(filepath.Join(project, "opencode.json"), []byte(`{"plugin": ["project-plugin@^2", "opencode-evil"]}`), 0o644)
	data := t.TempDir()
	appJSON, _ := json.Marshal(map[string]any{"storage": map[string]any{"path": data}})
	ctx, err := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}, AppsRaw: caddy.ModuleMap{"agentgate": appJSON}})
	if err != nil {
		t.Fatal(err)
	}
	in := &Instance{Name: t.Name(), Directory: project, Plugins: []string{"site-plugin@1.0.0"}, Registry: reg.URL,
		PluginPackagesDeny: []string{"*-evil"}, Sandbox: &Sandbox{Off: true}}
	if err := in.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Cleanup() })

	res := serve(t, in, "GET", "/api/plugin")
	if res.status != 200 {
		t.Fatalf("plugin list: %d %s", res.status, res.body)
	}
	byID := map[string]gjson.Result{}
	for _, p := range gjson.Get(res.body, "data").Array() {
		byID[p.Get("id").String()] = p
	}
	bunErr := "no plugin host: Bun is not configured (plugin_host { bun <path> }) nor on PATH, and installing @oven/bun-"
	for id, version := range map[string]string{"site-plugin": "1.0.0", "project-plugin": "2.1.0"} {
		p := byID[id]
		if p.Get("source.version").String() != version || !strings.HasPrefix(p.Get("state.error").String(), bunErr) ||
			!strings.HasSuffix(p.Get("state.error").String(), "from the registry failed: package not found in the registry") {
			t.Errorf("%s = %s", id, p.Raw)
		}
		if _, err := os.Stat(filepath.Join(data, "plugins", t.Name(), id, version, "node_modules", "shared", "package.json")); err != nil {
			t.Errorf("%s's dependency: %v", id, err)
		}
	}
	if e := byID["opencode-evil"].Get("state.error").String(); !strings.HasPrefix(e, "not allowed: plugin_packages_deny names opencode-evil") {
		t.Errorf("opencode-evil = %s", byID["opencode-evil"].Raw)
	}
	if n := reg.Hits("/opencode-evil"); n != 0 {
		t.Errorf("the denied package was fetched %d times", n)
	}
	filepath.WalkDir(filepath.Join(data, "plugin-runtime"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

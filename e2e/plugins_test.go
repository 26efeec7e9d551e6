package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/testenv"
)

// bunBinary is the Bun npm installs with examples/clients
// (@oven/bun-linux-x64), installed from the lockfile when missing.
func bunBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := nodeReady(t, ctx)
	if !installed(dir, "@oven/bun-linux-x64") {
		npmInstall(t, ctx, dir)
	}
	p, err := filepath.Abs(filepath.Join(dir, "node_modules", "@oven", "bun-linux-x64", "bin", "bun"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRealPluginPackageRuns: a released OpenCode plugin from the npm
// registry, pinned (opencode-copilot-auth 0.0.9, no dependencies), named
// in the Caddyfile, is installed at start with its integrity checked (no
// plugin.update), loads in the plugin host (in the sandbox) and reports
// active with the hooks it defines; plugin.update then finds it up to
// date.
func TestRealPluginPackageRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and reaches the npm registry")
	}
	ctx := testContext(t, 3*time.Minute)
	bun := bunBinary(t, ctx)
	registry := testenv.NPMRegistry(t)
	const pkg, version = "opencode-copilot-auth", "0.0.9"
	project := t.TempDir()
	s := newServer(t, caddyBinary(t), config{})
	cfg := fmt.Sprintf(`{
	admin %s
	agentgate {
		storage badger %q
	}
}

http://%s {
	bind 127.0.0.1
	agent_instance {
		password pw-plugins
		directory %q
		plugin %s@%s
		registry %s
		plugin_host {
			bun %q
		}
	}
}
`, s.adminAddr, filepath.Join(s.dir, "data"), s.httpAddr, project, pkg, version, registry, bun)
	os.WriteFile(s.cfgPath, []byte(cfg), 0o600)
	s.start()
	base := "http://" + s.httpAddr
	auth := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:pw-plugins"))}}
	waitFor(t, ctx, "instance answers", func() bool {
		st, _, err := call(ctx, httpClient, "GET", base+"/api/info", auth, nil)
		return err == nil && st == 200
	})
	type plugin struct {
		ID       string
		Source   struct{ Type, Version string }
		State    struct{ Status, Error, Ref string }
		Features map[string]any
	}
	list := func() plugin {
		st, b, err := call(ctx, httpClient, "GET", base+"/api/plugin", auth, nil)
		var out struct{ Data []plugin }
		if err != nil || st != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("plugin list: %d %v %s", st, err, b)
		}
		for _, p := range out.Data {
			if p.ID == pkg {
				return p
			}
		}
		t.Fatalf("%s is not listed: %s", pkg, b)
		return plugin{}
	}
	// Installed at start, with no plugin.update: the listing waits for it.
	p := list()
	hooks, _ := p.Features["hooks"].([]any)
	if p.State.Status != "active" || p.Source.Version != version || p.Features["server"] != true || len(hooks) == 0 || hooks[0] != "auth" {
		t.Fatalf("after the install: %+v", p)
	}
	// It runs in the sandbox, its installed package bound read-only.
	if p.Features["sandbox"] != "enforced" {
		t.Fatalf("the plugin does not run sandboxed: %+v", p)
	}
	// plugin.update finds it up to date.
	if st, b, _ := call(ctx, httpClient, "POST", base+"/api/plugin/update", auth, map[string]any{"targets": []string{pkg}}); st != 204 {
		t.Fatalf("update: %d %s", st, b)
	}
	if p := list(); p.State.Status != "active" || p.Source.Version != version {
		t.Fatalf("after the update: %+v", p)
	}
}

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// pathWithoutBun is this process's PATH without the directories that hold
// a bun: the server finds none and installs its own.
func pathWithoutBun() string {
	var keep []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "bun")); err != nil {
			keep = append(keep, d)
		}
	}
	return strings.Join(keep, string(os.PathListSeparator))
}

// TestPluginFromTheProjectOnAFreshMachine is the done-when: the
// real binary on the default Caddyfile's shape (the gateway and the
// Console on one site, the instance with `workspace default` on another,
// no registry and no plugin_host: the registry is npm's configured one,
// and there is no Bun on PATH); a project whose opencode.json names
// @tarquinen/opencode-dcp gets it installed from the registry with its
// dependencies, the server installs its pinned Bun (the real tarball,
// checked against the integrity in the binary) and the plugins' runtime
// modules, the plugin loads in the sandbox, and its compress tool runs
// in a session driven by a scripted provider.
func TestPluginFromTheProjectOnAFreshMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and installs a plugin and Bun from the npm registry")
	}
	ctx := testContext(t, 5*time.Minute)
	testenv.NPMRegistry(t) // npm is configured (the server reads it from npm_config_registry)
	const secret = "sk-provider-fresh-SECRET"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var mu sync.Mutex
	var requests []string
	p.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		mu.Lock()
		requests = append(requests, string(body))
		mu.Unlock()
		msgs := gjson.GetBytes(body, "messages").Array()
		last := msgs[len(msgs)-1]
		text := last.Get("content").String()
		if last.Get("content").IsArray() {
			text = last.Get("content.0.text").String()
		}
		switch {
		case last.Get("role").String() == "user" && strings.Contains(text, "Please compress"):
			args, _ := json.Marshal(map[string]any{"topic": "the answer", "content": []any{
				map[string]any{"startId": "m0001", "endId": "m0002", "summary": "The user said the answer is 42; the agent noted it."}}})
			return fakeprovider.Step{Text: "Compressing.", Calls: []fakeprovider.Call{{ID: "call_compress", Name: "compress", Args: string(args)}}}
		case last.Get("role").String() == "user" && strings.Contains(text, "the answer is 42"):
			return fakeprovider.Step{Text: "Noted: 42."}
		}
		return fakeprovider.Step{Text: "Done."}
	}})

	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "opencode.json"), []byte(`{"plugin": ["@tarquinen/opencode-dcp@3.1.14"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, caddyBinary(t), config{})
	s.env = testenv.SetEnv(s.env, "PATH="+pathWithoutBun())
	instAddr := freeAddr(t)
	cfg := s.caddyfile(config{}) + fmt.Sprintf("\nhttp://%s {\n\tbind 127.0.0.1\n\tagent_instance {\n\t\tworkspace default\n\t\tdirectory %q\n\t}\n}\n",
		instAddr, project)
	if err := os.WriteFile(s.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start()
	s.waitReady(ctx)
	base := "http://" + instAddr

	// An owner adds the provider and a model, as the README's quick start does.
	var wss []idName
	must(t, "list workspaces", 200, &wss)(s.admin(ctx, "GET", "/agentgate/workspaces", nil))
	ws := ""
	for _, w := range wss {
		if w.Name == "default" {
			ws = w.ID
		}
	}
	tn := tenant{Workspace: ws, Email: "owner@example.com", Password: "pw-" + randomHex(12)}
	var person idName
	must(t, "create owner", 201, &person)(s.admin(ctx, "POST", "/agentgate/people",
		map[string]any{"email": tn.Email, "name": "Owner", "password": tn.Password, "workspace": ws, "role": "owner"}))
	tn.Token = s.token(t, ctx, person.ID, ws)
	var conn idName
	st, b, _ := s.console(ctx, "POST", "/api/v1/connections", tn.Token, map[string]any{"name": "Fake OpenAI", "kind": "openai", "base_url": p.URL + "/v1",
		"credential": secret, "models": map[string]any{"gpt-4o": map[string]any{"pricing": map[string]any{"input": 2.5, "output": 10}}}})
	if st != 201 {
		t.Fatalf("connection: %d %s", st, b)
	}
	decodeData(t, "connection", b, &conn)
	if st, b, _ := s.console(ctx, "POST", "/api/v1/models", tn.Token, map[string]any{"id": "smart",
		"targets": []any{map[string]any{"connection": conn.ID, "model": "gpt-4o"}}}); st != 201 {
		t.Fatalf("model: %d %s", st, b)
	}

	// The first listing of the project's plugins installs them (and Bun).
	hdr := http.Header{"X-Opencode-Directory": {project}}
	st, b, err = call(ctx, httpClient, "GET", base+"/api/plugin", hdr, nil)
	if err != nil || st != 200 {
		t.Fatalf("plugin list: %d %v %s", st, err, b)
	}
	dcp := gjson.GetBytes(b, `data.#(id=="@tarquinen/opencode-dcp")`)
	if dcp.Get("state.status").String() != "active" || dcp.Get("source.version").String() != "3.1.14" ||
		dcp.Get("features.tools.0").String() != "compress" || dcp.Get("features.sandbox").String() != "enforced" {
		t.Fatalf("dcp: %s\nserver log:\n%s", dcp.Raw, tail(s.stderr.String(), 6000))
	}
	bins, _ := filepath.Glob(filepath.Join(s.dataDir(), "plugin-runtime", "@oven", "bun-*", "1.4.5", "bin", "bun"))
	if len(bins) != 1 {
		t.Fatalf("the server's Bun: %v", bins)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir(), "plugins", "default", "@tarquinen", "opencode-dcp", "3.1.14", "node_modules", "@opencode-ai", "plugin", "package.json")); err != nil {
		t.Fatalf("dcp's peer @opencode-ai/plugin is not installed with it: %v", err)
	}

	// A session: a first turn, then one whose step calls compress.
	st, b, _ = call(ctx, httpClient, "POST", base+"/api/session", hdr, map[string]any{"title": "dcp"})
	id := gjson.GetBytes(b, "data.id").String()
	if st != 200 || id == "" {
		t.Fatalf("create: %d %s", st, b)
	}
	turn := func(text string, n int) []byte {
		t.Helper()
		if st, b, _ := call(ctx, httpClient, "POST", base+"/api/session/"+id+"/prompt", hdr, map[string]any{"text": text}); st != 200 {
			t.Fatalf("prompt: %d %s", st, b)
		}
		var ex []byte
		waitFor(t, ctx, "the turn settles", func() bool {
			_, ex, _ = call(ctx, httpClient, "GET", base+"/api/experimental/session/"+id+"/export", hdr, nil)
			return gjson.GetBytes(ex, `data.messages.#(type=="idle")#|#`).Int() >= int64(n)
		})
		return ex
	}
	turn("Remember: the answer is 42.", 1)
	ex := turn("Please compress what we said.", 2)
	part := gjson.GetBytes(ex, `data.messages.#(type=="assistant")#.content.#(type=="tool")#|@flatten|0`)
	if part.Get("name").String() != "compress" {
		t.Fatalf("no compress call in the transcript: %s", ex)
	}
	if part.Get("state.status").String() != "completed" || !strings.Contains(part.Get("state.content.0.text").String(), "Compressed") {
		t.Fatalf("compress did not run to completion: %s\nserver log:\n%s", part.Raw, tail(s.stderr.String(), 6000))
	}
}

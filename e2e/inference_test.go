package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// inferenceKey makes a service account of the workspace at ws (its
// operator path) and returns a new Inference only key of it.
func inferenceKey(t *testing.T, ctx context.Context, s *server, ws string) string {
	t.Helper()
	var sa idName
	must(t, "create service account", 201, &sa)(s.admin(ctx, "POST", ws+"/service-accounts", map[string]any{"name": "clients"}))
	var key struct {
		Key string `json:"key"`
	}
	must(t, "create key", 201, &key)(s.admin(ctx, "POST", ws+"/service-accounts/"+sa.ID+"/keys", map[string]any{"name": "clients", "permission": "inference"}))
	return key.Key
}

// fakeConnection starts a fake provider of the test's own and connects it
// to the workspace at ws (its operator path) with models; the provider
// expects secret, and base is the path under its URL the connection uses.
func fakeConnection(t *testing.T, ctx context.Context, s *server, ws, kind, base, secret string, models map[string]any) (*fakeprovider.Provider, string) {
	t.Helper()
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var c idName
	must(t, "create "+kind+" connection", 201, &c)(s.admin(ctx, "POST", ws+"/connections", map[string]any{
		"name": kind, "kind": kind, "base_url": p.URL + base, "credential": secret, "models": models}))
	return p, c.ID
}

// TestOfficialSDKsInferenceAPI points the official OpenAI, Anthropic and
// Google SDKs at the Inference API, configured only with its base URL and a
// workspace key: each reaches a workspace model served by its own
// connection, lists the workspace's models in its own shape, and gets 403
// for a model whose targets are disabled. The OpenAI model's first target
// is a dead connection: every request falls back to the second.
func TestOfficialSDKsInferenceAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs node")
	}
	ctx := testContext(t, 4*time.Minute)
	dir := nodeReady(t, ctx)
	s := startServer(t, ctx, caddyBinary(t), config{})
	tn := s.bootstrap(t, ctx, "Inference")
	ws := "/agentgate/workspaces/" + tn.Workspace

	key := inferenceKey(t, ctx, s, ws)

	const secret = "sk-provider-inference-SECRET-7"
	connection := func(kind, baseURL, model, upstream string) string {
		var c idName
		must(t, "create "+kind+" connection", 201, &c)(s.admin(ctx, "POST", ws+"/connections", map[string]any{
			"name": kind, "kind": kind, "base_url": baseURL, "credential": secret,
			"models": map[string]any{model: map[string]any{"upstream_id": upstream, "pricing": map[string]any{"input": 1, "output": 2}}, "off": map[string]any{"enabled": false}},
		}))
		return c.ID
	}
	model := func(id string, targets ...map[string]any) {
		must(t, "create model "+id, 201, nil)(s.admin(ctx, "POST", ws+"/models", map[string]any{"id": id, "targets": targets}))
	}
	providers := map[string]*fakeprovider.Provider{}
	for _, kind := range []string{"openai", "anthropic", "google"} {
		p, err := fakeprovider.Start(secret)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		providers[kind] = p
	}
	dead, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	deadURL := dead.URL + "/v1"
	dead.Close()
	deadConn := connection("openai", deadURL, "gpt-4o", "gpt-4o-2024-08-06")
	openai := connection("openai", providers["openai"].URL+"/v1", "gpt-4o", "gpt-4o-2024-08-06")
	anthropic := connection("anthropic", providers["anthropic"].URL+"/v1", "claude-sonnet", "claude-sonnet-4-5-20250929")
	google := connection("google", providers["google"].URL+"/v1beta", "gemini-pro", "gemini-2.5-pro")
	model("team-gpt", map[string]any{"connection": deadConn, "model": "gpt-4o", "order": 1}, map[string]any{"connection": openai, "model": "gpt-4o", "order": 2})
	model("team-claude", map[string]any{"connection": anthropic, "model": "claude-sonnet"})
	model("team-gemini", map[string]any{"connection": google, "model": "gemini-pro"})
	model("team-off", map[string]any{"connection": openai, "model": "off"}, map[string]any{"connection": anthropic, "model": "off"},
		map[string]any{"connection": google, "model": "off"})

	base := "http://" + s.httpAddr
	cases := []struct {
		kind, script, model, baseURL, upstream string
		answers                                []string
	}{
		{"openai", "openai.mjs", "team-gpt", base + "/v1", "gpt-4o-2024-08-06", []string{"chat", "chatStream", "responses", "responsesStream"}},
		{"anthropic", "anthropic.mjs", "team-claude", base, "claude-sonnet-4-5-20250929", []string{"messages", "messagesStream"}},
		{"google", "google.mjs", "team-gemini", base, "gemini-2.5-pro", []string{"generate", "generateStream"}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			out := runClient(t, ctx, dir, c.script, c.baseURL, key, c.model, "team-off")
			for _, a := range c.answers {
				if got := field(out, a+".text"); got != fakeprovider.Text {
					t.Errorf("%s: the SDK got %q, want %q", a, got, fakeprovider.Text)
				}
			}
			got := providers[c.kind].Received()
			if len(got) == 0 {
				t.Fatal("the provider got nothing")
			}
			for _, r := range got {
				if !strings.Contains(string(r.Body)+r.Path, c.upstream) || strings.Contains(strings.Join(flatten(r.Header), " "), key) {
					t.Errorf("the provider got %s %s %v", r.Path, r.Body, r.Header)
				}
			}
			// Every model that can serve, in the SDK's own list shape.
			want := []string{"team-claude", "team-gemini", "team-gpt"}
			if c.kind == "google" {
				want = []string{"models/team-claude", "models/team-gemini", "models/team-gpt"}
			}
			var listed []string
			for _, m := range field(out, "models").([]any) {
				listed = append(listed, m.(string))
			}
			slices.Sort(listed)
			if !slices.Equal(listed, want) {
				t.Errorf("the SDK listed %v, want %v", listed, want)
			}
			if field(out, "disabled.status") != float64(403) {
				t.Errorf("a model whose targets are disabled: the SDK raised %v", field(out, "disabled"))
			}
		})
	}

	// The usage records name the workspace model and the connection that
	// answered; the OpenAI model's records list the dead target's attempt.
	var page struct {
		Data []struct {
			Model      string `json:"model"`
			Connection string `json:"connection"`
			Status     int    `json:"status"`
			Attempts   []struct {
				Connection string `json:"connection"`
				Error      string `json:"error"`
			} `json:"attempts"`
		} `json:"data"`
	}
	st, b, err := s.console(ctx, "GET", "/api/v1/usage?limit=1000", tn.Token, nil)
	if err != nil || st != 200 || json.Unmarshal(b, &page) != nil {
		t.Fatalf("usage: %d %v %s", st, err, b)
	}
	fellBack := 0
	for _, u := range page.Data {
		if u.Model == "team-gpt" && u.Status == 200 {
			if u.Connection != openai {
				t.Errorf("team-gpt answered by %s, want %s", u.Connection, openai)
			}
			if len(u.Attempts) == 1 && u.Attempts[0].Connection == deadConn && u.Attempts[0].Error == "UpstreamUnreachable" {
				fellBack++
			}
		}
	}
	// The first request found the dead target; the cool-down puts it last
	// for the others.
	if fellBack < 1 {
		t.Errorf("no usage record lists the dead target's attempt: %s", b)
	}
}

// TestOpenCodeRunInferenceAPI runs the released OpenCode CLI on the
// Inference API with an opencode.json derived field by field from the
// config's Inference entry: one provider, a client package per model. It
// answers `opencode run` for an Anthropic-format and an OpenAI-format
// model, and the Anthropic request's max_tokens is the model's
// limit.output.
func TestOpenCodeRunInferenceAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs the OpenCode CLI")
	}
	ctx := testContext(t, 4*time.Minute)
	oc := opencodeBinary(t, ctx)
	s := startServer(t, ctx, caddyBinary(t), config{})
	tn := s.bootstrap(t, ctx, "OpenCodeInference")
	ws := "/agentgate/workspaces/" + tn.Workspace
	key := inferenceKey(t, ctx, s, ws)

	const secret = "sk-provider-oc-inference-SECRET"
	providers := map[string]*fakeprovider.Provider{}
	conns := map[string]string{}
	for kind, m := range map[string]map[string]any{
		"anthropic": {"claude-sonnet": map[string]any{"upstream_id": "claude-sonnet-4-5", "limit": map[string]any{"context": 200000, "output": 3333},
			"pricing": map[string]any{"input": 3, "output": 15}, "reasoning": true}},
		"openai": {"gpt-4o": map[string]any{"limit": map[string]any{"context": 128000, "output": 2222}, "pricing": map[string]any{"input": 2.5, "output": 10}}},
	} {
		providers[kind], conns[kind] = fakeConnection(t, ctx, s, ws, kind, "/v1", secret, m)
	}
	must(t, "create team-claude", 201, nil)(s.admin(ctx, "POST", ws+"/models", map[string]any{"id": "team-claude", "name": "Team Claude",
		"targets": []any{map[string]any{"connection": conns["anthropic"], "model": "claude-sonnet"}}}))
	must(t, "create team-gpt", 201, nil)(s.admin(ctx, "POST", ws+"/models", map[string]any{"id": "team-gpt",
		"targets": []any{map[string]any{"connection": conns["openai"], "model": "gpt-4o"}}}))

	// The config as the key reads it, and the opencode.json made from its
	// Inference entry.
	st, b, err := call(ctx, httpClient, "GET", "http://"+s.httpAddr+"/api/v2/config", http.Header{"Authorization": {"Bearer " + key}}, nil)
	if err != nil || st != 200 {
		t.Fatalf("config: %d %v %s", st, err, b)
	}
	var cfg struct {
		Providers map[string]struct {
			Name     string            `json:"name"`
			Package  string            `json:"package"`
			Headers  map[string]string `json:"headers"`
			Settings struct {
				BaseURL string `json:"baseURL"`
				APIKey  string `json:"apiKey"`
			} `json:"settings"`
			Models map[string]map[string]any `json:"models"`
		} `json:"providers"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	entry, ok := cfg.Providers["agentgate"]
	if !ok || entry.Settings.BaseURL != "http://"+s.httpAddr+"/v1" {
		t.Fatalf("no Inference entry: %s", b)
	}
	models := map[string]any{}
	for id, m := range entry.Models {
		v1 := map[string]any{}
		for _, f := range []string{"name", "limit", "cost", "tool_call", "reasoning", "attachment", "temperature", "modalities"} {
			v1[f] = m[f]
		}
		if pkg, ok := m["package"].(string); ok {
			v1["provider"] = map[string]any{"npm": pkg}
		}
		models[id] = v1
	}
	ocConfig, _ := json.Marshal(map[string]any{"provider": map[string]any{"agentgate": map[string]any{
		"npm": entry.Package, "name": entry.Name,
		"options": map[string]any{"baseURL": entry.Settings.BaseURL, "apiKey": entry.Settings.APIKey, "headers": entry.Headers},
		"models":  models}}})
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "opencode.json"), ocConfig, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ model, kind, path string }{
		{"team-claude", "anthropic", "/v1/messages"},
		{"team-gpt", "openai", "/v1/responses"},
	} {
		cmd := exec.CommandContext(ctx, oc, "run", "--model", "agentgate/"+c.model, "Say hello")
		cmd.Dir = project
		cmd.Env = append(opencodeEnv(t), "AGENTGATE_API_KEY="+key)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), fakeprovider.Text) {
			t.Fatalf("opencode run --model agentgate/%s: %v\n%s\nserver log:\n%s", c.model, err, out, tail(s.stderr.String(), 30))
		}
		got := providers[c.kind].Received()
		if len(got) == 0 {
			t.Fatalf("%s: the provider got nothing", c.model)
		}
		for _, r := range got {
			if r.Path != c.path {
				t.Errorf("%s: the provider got %s, want %s", c.model, r.Path, c.path)
			}
		}
		if c.kind == "anthropic" {
			last := got[len(got)-1]
			if mt := gjson.GetBytes(last.Body, "max_tokens").Int(); mt != 3333 {
				t.Errorf("the Anthropic request's max_tokens is %d, want limit.output 3333: %s", mt, last.Body)
			}
			if m := gjson.GetBytes(last.Body, "model").String(); m != "claude-sonnet-4-5" {
				t.Errorf("the provider got model %q", m)
			}
		}
	}
	s.stop()
	if strings.Contains(s.stderr.String(), key) || strings.Contains(s.stderr.String(), secret) {
		t.Error("the server log holds a key")
	}
}

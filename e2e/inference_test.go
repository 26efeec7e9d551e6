package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

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

	var sa idName
	must(t, "create service account", 201, &sa)(s.admin(ctx, "POST", ws+"/service-accounts", map[string]any{"name": "sdk"}))
	var key struct {
		Key string `json:"key"`
	}
	must(t, "create key", 201, &key)(s.admin(ctx, "POST", ws+"/service-accounts/"+sa.ID+"/keys", map[string]any{"name": "sdk", "permission": "inference"}))

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
			out := runClient(t, ctx, dir, c.script, c.baseURL, key.Key, c.model, "team-off")
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
				if !strings.Contains(string(r.Body)+r.Path, c.upstream) || strings.Contains(strings.Join(flatten(r.Header), " "), key.Key) {
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

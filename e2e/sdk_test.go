package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// clientCase is one SDK program and the connection it talks to.
type clientCase struct {
	kind, script, model, upstream, disabled string
	directBase                              func(p *fakeprovider.Provider) string
	basePath                                string
	answers                                 []string
	slot                                    string // the provider's native credential header
}

// clientsDir is examples/clients, where the SDK programs and their lockfile live.
func clientsDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "examples", "clients")
}

// nodeReady makes sure node and the SDKs are installed (from the
// committed lockfile when node_modules is missing).
func nodeReady(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := clientsDir(t)
	if _, err := exec.LookPath("node"); err != nil {
		msg := "node is not installed: the official SDK clients cannot run (.ci/run installs it)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if !installed(dir, "openai", "@anthropic-ai/sdk", "@google/genai", "openid-client", "opencode-ai", "@opencode-ai/sdk", "@anthropic-ai/claude-code") {
		npmInstall(t, ctx, dir)
	}
	return dir
}

// npmInstall installs dir's packages at the versions of its committed
// lockfile, from the registry npm's configuration names, with npm's cache
// and logs in a temporary directory (testenv.ToolEnv). Not `npm ci`: the
// lockfile holds only the OpenCode platform packages the registry serves
// (this machine's), and npm ci refuses a lockfile that lacks the other
// platforms' optional packages; npm install installs the locked versions
// and skips those it cannot fetch.
func npmInstall(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	cmd := testenv.Command(t, ctx, "npm", "install", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install in %s: %v\n%s", dir, err, out)
	}
}

// installed reports whether every package is in dir's node_modules.
func installed(dir string, pkgs ...string) bool {
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", filepath.FromSlash(p), "package.json")); err != nil {
			return false
		}
	}
	return true
}

// runClient runs one SDK program and decodes the JSON it prints.
// Through the gateway (disabled names a disabled model) the program also
// lists the models, which the gateway answers without the provider.
func runClient(t *testing.T, ctx context.Context, dir, script, baseURL, key, model, disabled string) map[string]any {
	t.Helper()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = testenv.ToolEnv(t, "AGENTGATE_BASE_URL="+baseURL, "AGENTGATE_API_KEY="+key, "MODEL="+model, "DISABLED_MODEL="+disabled)
	if disabled != "" {
		cmd.Env = append(cmd.Env, "LIST_MODELS=1")
	}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("node %s: %v\n%s", script, err, ee.Stderr)
		}
		t.Fatalf("node %s: %v", script, err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("node %s printed %q: %v", script, out, err)
	}
	return v
}

func field(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// TestOfficialSDKs points the official OpenAI, Anthropic and Google SDKs
// from npm at the real binary, configured only with a base URL and a
// workspace key. Each SDK program also runs once directly against the fake
// provider (with the provider's model id and credential): what the provider
// received through the gateway must equal what it received directly, byte
// for byte — path, query and body — except the credential, which the
// gateway swapped.
func TestOfficialSDKs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs node")
	}
	ctx := testContext(t, 4*time.Minute)
	dir := nodeReady(t, ctx)
	bin := caddyBinary(t)
	s := startServer(t, ctx, bin, config{Debug: true, AccessLog: true})
	tn := s.bootstrap(t, ctx, "SDKs")

	const secret = "sk-provider-e2e-SECRET-42"
	cases := []clientCase{
		{"openai", "openai.mjs", "gpt-4o", "gpt-4o-2024-08-06", "o1",
			func(p *fakeprovider.Provider) string { return p.URL + "/v1" }, "/v1", []string{"chat", "chatStream", "responses", "responsesStream"}, "Authorization"},
		{"anthropic", "anthropic.mjs", "claude-sonnet", "claude-sonnet-4-5-20250929", "claude-off",
			func(p *fakeprovider.Provider) string { return p.URL }, "/v1", []string{"messages", "messagesStream"}, "X-Api-Key"},
		{"google", "google.mjs", "gemini-pro", "gemini-2.5-pro", "gemini-off",
			func(p *fakeprovider.Provider) string { return p.URL }, "/v1beta", []string{"generate", "generateStream"}, "X-Goog-Api-Key"},
	}

	key := inferenceKey(t, ctx, s, "/agentgate/workspaces/"+tn.Workspace)

	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			p, err := fakeprovider.Start(secret)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var conn idName
			must(t, "create connection", 201, &conn)(s.admin(ctx, "POST", "/agentgate/workspaces/"+tn.Workspace+"/connections", map[string]any{
				"name": c.kind, "kind": c.kind, "base_url": p.URL + c.basePath, "credential": secret,
				"models": map[string]any{
					c.model:    map[string]any{"upstream_id": c.upstream, "pricing": map[string]any{"input": 1, "output": 2}},
					c.disabled: map[string]any{"enabled": false},
				},
			}))

			direct := runClient(t, ctx, dir, c.script, c.directBase(p), secret, c.upstream, "")
			viaDirect := p.Received()
			p.Reset()
			gw := runClient(t, ctx, dir, c.script, "http://"+s.httpAddr+"/custom/"+url.PathEscape(conn.ID), key, c.model, c.disabled)
			viaGateway := p.Received()

			for _, a := range c.answers {
				if got := field(gw, a+".text"); got != fakeprovider.Text {
					t.Errorf("%s: the SDK got %q through the gateway, want %q", a, got, fakeprovider.Text)
				}
				if d, g := field(direct, a+".usage"), field(gw, a+".usage"); g != nil && !jsonEqual(d, g) {
					t.Errorf("%s: usage through the gateway %v differs from direct %v", a, g, d)
				}
			}
			switch c.kind {
			case "anthropic":
				if d, g := field(direct, "countTokens.input_tokens"), field(gw, "countTokens.input_tokens"); g == nil || !jsonEqual(d, g) {
					t.Errorf("count_tokens through the gateway: %v, directly: %v", g, d)
				}
			case "google":
				if d, g := field(direct, "countTokens.totalTokens"), field(gw, "countTokens.totalTokens"); g == nil || !jsonEqual(d, g) {
					t.Errorf("countTokens through the gateway: %v, directly: %v", g, d)
				}
			}
			// The model list holds the enabled alias only, as each SDK reads it.
			want := []any{c.model}
			if c.kind == "google" {
				want = []any{"models/" + c.model}
			}
			if got := field(gw, "models"); !jsonEqual(got, want) {
				t.Errorf("the SDK listed the models %v through the gateway, want %v", got, want)
			}
			if field(gw, "disabled.status") != float64(403) || !strings.Contains(toString(field(gw, "disabled.message")), "not enabled") {
				t.Errorf("a disabled model: the SDK raised %v", field(gw, "disabled"))
			}
			if len(viaGateway) != len(viaDirect) {
				t.Fatalf("the provider got %d requests through the gateway, %d directly", len(viaGateway), len(viaDirect))
			}
			for i := range viaDirect {
				d, g := viaDirect[i], viaGateway[i]
				gb := g.Body
				// The one change the gateway makes to a body besides the model: a
				// chat stream is asked for its usage (and the client never sees
				// the extra chunk).
				if !gjson.GetBytes(d.Body, "stream_options").Exists() && gjson.GetBytes(gb, "stream_options.include_usage").Bool() {
					gb, _ = sjson.DeleteBytes(gb, "stream_options")
				}
				if g.Path != d.Path || g.RawQuery != d.RawQuery || string(gb) != string(d.Body) {
					t.Errorf("request %d differs:\n gateway %s?%s %s\n  direct %s?%s %s", i, g.Path, g.RawQuery, g.Body, d.Path, d.RawQuery, d.Body)
				}
				if got := g.Header.Get(c.slot); got != c.slotValue(secret) {
					t.Errorf("request %d: %s %q through the gateway, want the provider credential", i, c.slot, got)
				}
				if strings.Contains(strings.Join(flatten(g.Header), " "), key) {
					t.Errorf("request %d: the workspace key reached the provider", i)
				}
			}
		})
	}
	// Every SDK request left a usage record the owner can read, and the
	// gateway's metrics are on Caddy's admin /metrics.
	var page struct {
		Data []struct {
			Status    int     `json:"status"`
			Cost      float64 `json:"cost_usd"`
			Operation string  `json:"operation"`
			Tokens    struct {
				Input, Output int64
			} `json:"tokens"`
		} `json:"data"`
	}
	st, b, err := s.console(ctx, "GET", "/api/v1/usage?limit=1000", tn.Token, nil)
	if err != nil || st != 200 || json.Unmarshal(b, &page) != nil {
		t.Fatalf("usage: %d %v %s", st, err, b)
	}
	ok, refused, counted := 0, 0, 0
	for _, u := range page.Data {
		switch {
		case u.Operation == "count_tokens" && u.Status == 200 && u.Cost == 0:
			counted++
		case u.Status == 200 && u.Cost > 0 && u.Tokens.Input > 0 && u.Tokens.Output > 0:
			ok++
		case u.Status == 403 && u.Cost == 0:
			refused++
		default:
			t.Errorf("unexpected usage record %+v", u)
		}
	}
	if ok != 8 || refused != 3 || counted != 2 {
		t.Errorf("%d metered, %d refused and %d token-count requests recorded, want 8, 3 and 2", ok, refused, counted)
	}
	_, metrics, err := call(ctx, httpClient, "GET", "http://"+s.adminAddr+"/metrics", nil, nil)
	if err != nil || !strings.Contains(string(metrics), `caddy_llm_gateway_requests_total{code="2xx",format="chat"}`) ||
		!strings.Contains(string(metrics), "caddy_llm_gateway_tokens_total") {
		t.Errorf("gateway metrics missing from /metrics: %v", err)
	}

	s.stop()
	logs := s.stderr.String()
	if !strings.Contains(logs, `"agentgate":{"workspace":"`+tn.Workspace) || !strings.Contains(logs, `"input_tokens":`) {
		t.Error("the access log lacks the gateway's metering fields")
	}
	for name, v := range map[string]string{"workspace key": key, "provider credential": secret, "owner token": tn.Token} {
		if strings.Contains(logs, v) {
			t.Errorf("the server log holds the %s", name)
		}
	}
}

func (c clientCase) slotValue(secret string) string {
	if c.slot == "Authorization" {
		return "Bearer " + secret
	}
	return secret
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}

func flatten(h map[string][]string) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k+": "+strings.Join(vs, ","))
	}
	return out
}

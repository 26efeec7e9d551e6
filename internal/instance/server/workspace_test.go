package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// fakeWorkspace stands in for the workspace of an instance that is a
// member: its models as a test sets them, and a client that sends the
// in-process requests to a fake provider instead (the gateway's own
// answers are the fake's Behavior).
type fakeWorkspace struct {
	mu     sync.Mutex
	models []loop.WorkspaceModel
	err    error
	fake   *fakeprovider.Provider
}

func (w *fakeWorkspace) Models(context.Context) ([]loop.WorkspaceModel, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.models), w.err
}

func (w *fakeWorkspace) set(models []loop.WorkspaceModel, err error) {
	w.mu.Lock()
	w.models, w.err = models, err
	w.mu.Unlock()
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (w *fakeWorkspace) Client() *http.Client {
	return &http.Client{Transport: rtFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "agentgate.local" || r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" {
			return nil, fmt.Errorf("not an in-process request: %s %v", r.URL, r.Header)
		}
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host = "http", strings.TrimPrefix(w.fake.URL, "http://"), ""
		out.Header.Set("Authorization", "Bearer "+fakeKey)
		out.Header.Set("X-Api-Key", fakeKey)
		out.Header.Set("X-Goog-Api-Key", fakeKey)
		return http.DefaultTransport.RoundTrip(out)
	})}
}

func mp(v money.Micros) *money.Micros { return &v }

// workspaceModels: alpha (Chat Completions, cache reads at half the input
// price), beta (Anthropic), gamma (denied by a policy).
func workspaceModels() []loop.WorkspaceModel {
	return []loop.WorkspaceModel{
		{ID: "alpha", Name: "Alpha", Format: "chat", Limits: loop.ModelLimits{Context: 100_000, Output: 4000},
			Pricing:  store.Pricing{Input: 2 * money.Scale, Output: 8 * money.Scale, CacheRead: mp(money.Scale)},
			ToolCall: true, Reasoning: true, Temp: true, InputModalities: []string{"text", "image"}, OutputModalities: []string{"text"}},
		{ID: "beta", Name: "Beta", Format: "anthropic", Limits: loop.ModelLimits{Context: 200_000, Output: 8000},
			Pricing: store.Pricing{Input: 3 * money.Scale, Output: 15 * money.Scale}, ToolCall: true},
		{ID: "delta", Name: "Delta", Format: "google", Limits: loop.ModelLimits{Context: 1_000_000, Output: 8000}},
		{ID: "gamma", Name: "Gamma", Format: "chat", Denied: `policy "no gamma" (pol_x) denies model "gamma"`},
	}
}

func newWorkspaceHarness(t *testing.T, defaultModel string) (*drainHarness, *fakeWorkspace) {
	t.Helper()
	fake, err := fakeprovider.Start(fakeKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	ws := &fakeWorkspace{models: workspaceModels(), fake: fake}
	runner := loop.NewRunner()
	runner.SetProvider(loop.ProviderConfig{Workspace: ws, Model: defaultModel})
	sh := newSessHarness(t, func(o *Options) { o.Runner = runner })
	t.Cleanup(runner.Close)
	return &drainHarness{sessHarness: sh, fake: fake, runner: runner}, ws
}

// An instance that is a workspace member lists the workspace's models it
// may use, with their limits, costs and capabilities, on every model
// list; defaults to the first by id; speaks each model's format on the
// Inference API path with the session named; and prices turns with the
// workspace's prices.
func TestWorkspaceModelsAndTurns(t *testing.T) {
	h, ws := newWorkspaceHarness(t, "")
	r := h.get("/api/model")
	ids := gjson.GetBytes(r.body, "data.#.id").Array()
	if r.status != 200 || len(ids) != 3 || ids[0].String() != "alpha" || ids[1].String() != "beta" || ids[2].String() != "delta" {
		t.Fatalf("/api/model: %d %s", r.status, r.body)
	}
	a := gjson.GetBytes(r.body, "data.0")
	if a.Get("providerID").String() != loop.ProviderID || a.Get("name").String() != "Alpha" || a.Get("limit.context").Int() != 100_000 ||
		a.Get("limit.output").Int() != 4000 || a.Get("cost.0.input").Float() != 2 || a.Get("cost.0.output").Float() != 8 ||
		a.Get("cost.0.cache.read").Float() != 1 || a.Get("cost.0.cache.write").Float() != 2 || !a.Get("capabilities.tools").Bool() ||
		a.Get("capabilities.input.1").String() != "image" {
		t.Fatalf("alpha: %s", a.Raw)
	}
	r = h.get("/config/providers")
	if gjson.GetBytes(r.body, "default.agentgate").String() != "alpha" || gjson.GetBytes(r.body, "providers.0.models.gamma").Exists() ||
		gjson.GetBytes(r.body, "providers.0.models.beta.cost.output").Float() != 15 ||
		!gjson.GetBytes(r.body, "providers.0.models.alpha.capabilities.reasoning").Bool() ||
		!gjson.GetBytes(r.body, "providers.0.models.alpha.capabilities.input.image").Bool() {
		t.Fatalf("/config/providers: %s", r.body)
	}
	if r := h.get("/provider"); gjson.GetBytes(r.body, "connected.0").String() != loop.ProviderID {
		t.Fatalf("/provider: %s", r.body)
	}

	// The default model: Chat Completions under /v1, the session named,
	// the model's output limit, priced with its cache price.
	h.send("POST", "/api/session", map[string]any{"id": "ses_w"})
	h.prompt("ses_w", "hello", nil)
	msgs := h.waitIdle("ses_w", 1)
	last := lastTurn(t, h.fake)
	if last.Path != "/v1/chat/completions" || gjson.GetBytes(last.Body, "model").String() != "alpha" ||
		last.Header.Get(loop.SessionHeader) != "ses_w" || gjson.GetBytes(last.Body, "max_tokens").Int() != 4000 {
		t.Fatalf("request %s %v %s", last.Path, last.Header, last.Body)
	}
	as := ofType(msgs, "assistant")
	in := float64(fakeprovider.InputTokens - fakeprovider.CachedTokens)
	want := (in*2 + fakeprovider.CachedTokens*1 + float64(fakeprovider.OutputTokens)*8) / 1e6
	if len(as) != 1 || text(as[0]) != fakeprovider.Text || as[0]["cost"].(float64) < want-1e-12 || as[0]["cost"].(float64) > want+1e-12 {
		t.Fatalf("assistant %v, want cost %v", as, want)
	}

	// A session that picks beta speaks Anthropic Messages.
	if r := h.send("POST", "/api/session/ses_w/model", map[string]any{"model": map[string]any{"id": "beta", "providerID": loop.ProviderID}}); r.status != 204 {
		t.Fatalf("switch: %d %s", r.status, r.body)
	}
	h.prompt("ses_w", "again", nil)
	h.waitIdle("ses_w", 2)
	if last := lastTurn(t, h.fake); last.Path != "/v1/messages" || gjson.GetBytes(last.Body, "model").String() != "beta" ||
		last.Header.Get(loop.SessionHeader) != "ses_w" {
		t.Fatalf("beta request %s %s", last.Path, last.Body)
	}

	// And delta Google's streamGenerateContent, without a version in the
	// base URL.
	h.send("POST", "/api/session/ses_w/model", map[string]any{"model": map[string]any{"id": "delta", "providerID": loop.ProviderID}})
	h.prompt("ses_w", "and again", nil)
	h.waitIdle("ses_w", 3)
	if last := lastTurn(t, h.fake); last.Path != "/v1beta/models/delta:streamGenerateContent" || last.Header.Get(loop.SessionHeader) != "ses_w" {
		t.Fatalf("delta request %s?%s", last.Path, last.RawQuery)
	}

	// A configured default wins over the first model.
	h.runner.SetProvider(loop.ProviderConfig{Workspace: ws, Model: "beta"})
	if r := h.get("/config/providers"); gjson.GetBytes(r.body, "default.agentgate").String() != "beta" {
		t.Fatalf("configured default: %s", r.body)
	}

	// A model removed from the workspace is gone from the next list.
	ws.set(workspaceModels()[1:], nil)
	if r := h.get("/api/model"); gjson.GetBytes(r.body, "data.#").Int() != 2 || gjson.GetBytes(r.body, "data.0.id").String() != "beta" {
		t.Fatalf("after the removal: %s", r.body)
	}
	// None left that the instance may use: no provider is listed.
	ws.set(workspaceModels()[3:], nil)
	if r := h.get("/config/providers"); gjson.GetBytes(r.body, "providers.#").Int() != 0 {
		t.Fatalf("no usable model: %s", r.body)
	}
}

// A prompt that cannot run says why, as the step's failed event and the
// assistant message's error, and the session answers again once the cause
// is gone.
func TestWorkspaceTurnsSayWhy(t *testing.T) {
	gw := func(status int, tag, msg string) string {
		return fmt.Sprintf(`{"_tag":%q,"message":%q,"error":{"type":%q,"message":%q}}`, tag, msg, tag, msg)
	}
	for _, c := range []struct {
		name   string
		model  string // the session's model ("" for the default)
		models []loop.WorkspaceModel
		err    error
		status int // the gateway's answer, 0 for none
		body   string
		want   []string
	}{
		{name: "no model", models: workspaceModels()[3:], want: []string{loop.NoWorkspaceModelMessage}},
		{name: "models unreadable", err: errors.New("the store is closed"), want: []string{"Cannot read the workspace's models: the store is closed"}},
		{name: "model removed", model: "zeta", status: 404, body: gw(404, "ModelNotFound", `model "zeta" is not a model of this workspace`),
			want: []string{`Model "zeta" is not a model of the workspace`, "/models", "adds it in the Console"}},
		{name: "policy", model: "gamma", status: 403, body: gw(403, "PolicyDenied", `policy "no gamma" (pol_x) denies model "gamma"`),
			want: []string{"A workspace policy refused this turn: policy \"no gamma\"", "pick another model"}},
		{name: "budget", status: 402, body: gw(402, "BudgetExceeded", "budget exceeded: 0 USD remaining of 1 USD"),
			want: []string{"The workspace budget refused this turn: budget exceeded", "instance's service account"}},
		{name: "account deleted", status: 401, body: gw(401, "Unauthorized", `service account sa_1 of instance "default" was deleted from the workspace`),
			want: []string{"This instance's service account can no longer use the workspace: service account sa_1", "reload", "create the account again"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, ws := newWorkspaceHarness(t, "")
			ws.set(c.models, c.err)
			if c.models == nil && c.err == nil {
				ws.set(workspaceModels(), nil)
			}
			if c.status != 0 {
				h.fake.SetBehavior(fakeprovider.Behavior{Status: c.status, Body: c.body})
			}
			body := map[string]any{"id": "ses_y"}
			if c.model != "" {
				body["model"] = map[string]any{"id": c.model, "providerID": loop.ProviderID}
			}
			h.send("POST", "/api/session", body)
			ev := h.subscribe(t)
			ev.next(t) // server.connected
			h.prompt("ses_y", "go", nil)
			msgs := h.waitIdle("ses_y", 1)
			as := ofType(msgs, "assistant")
			if len(as) != 1 || msgs[len(msgs)-1]["outcome"] != "failed" {
				t.Fatalf("messages %v", msgs)
			}
			raw, _ := json.Marshal(as[0])
			msg := gjson.GetBytes(raw, "error.message").String()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("error %q lacks %q", msg, w)
				}
			}
			if c.status != 0 && gjson.GetBytes(raw, "error.status").Int() != int64(c.status) {
				t.Fatalf("error %s", raw)
			}
			failed := ""
			for failed == "" {
				data := strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: ")
				if gjson.Get(data, "type").String() == "session.next.step.failed" {
					failed = gjson.Get(data, "data.error.message").String()
				}
			}
			if failed != msg {
				t.Fatalf("step.failed %q, message %q", failed, msg)
			}
			// The cause gone, the same session answers.
			ws.set(workspaceModels(), nil)
			h.fake.SetBehavior(fakeprovider.Behavior{})
			if c.model != "" {
				h.send("POST", "/api/session/ses_y/model", map[string]any{"model": map[string]any{"id": "alpha", "providerID": loop.ProviderID}})
			}
			h.prompt("ses_y", "again", nil)
			msgs = h.waitIdle("ses_y", 2)
			if as := ofType(msgs, "assistant"); len(as) != 2 || text(as[1]) != fakeprovider.Text || msgs[len(msgs)-1]["outcome"] != "succeeded" {
				t.Fatalf("after the fix: %v", msgs)
			}
		})
	}
}

// A config that fails to start puts back the runner's configuration from
// before it; one that a later config replaced changes nothing.
func TestRunnerRestore(t *testing.T) {
	r := loop.NewRunner()
	defer r.Close()
	r.SetProvider(loop.ProviderConfig{Model: "first"})
	if r.Restore(r.Snapshot(), r.Snapshot()) || r.Provider().Model != "first" {
		t.Fatal("restored to a runner attached to no sessions")
	}
	newSessHarness(t, func(o *Options) { o.Runner = r }) // attaches r
	r.SetProvider(loop.ProviderConfig{Model: "running"})
	prev := r.Snapshot()
	r.SetProvider(loop.ProviderConfig{Model: "refused"})
	r.SetTools(loop.ToolConfig{MaxSteps: 7})
	mine := r.Snapshot()
	if !r.Restore(prev, mine) || r.Provider().Model != "running" {
		t.Fatalf("not restored: %q", r.Provider().Model)
	}
	prev = r.Snapshot()
	r.SetProvider(loop.ProviderConfig{Model: "old"})
	mine = r.Snapshot()
	r.SetProvider(loop.ProviderConfig{Model: "new"}) // the next config
	if r.Restore(prev, mine) || r.Provider().Model != "new" {
		t.Fatalf("a replaced config restored: %q", r.Provider().Model)
	}
}

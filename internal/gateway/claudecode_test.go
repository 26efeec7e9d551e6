package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

// ccEnv is the Inference API on loopback over a real store and a fake
// clock, with a workspace whose model "claude-ws" is a fake Anthropic
// provider's, and a member person.
type ccEnv struct {
	te     *testenv.Env
	svc    *service.Service
	fake   *fakeprovider.Provider
	srv    *httptest.Server
	ws     string
	person *store.Person
}

// fakeWorkspace is a service on a temporary store whose clock starts at
// start, a fake provider taking the credential "sk-up", and a workspace
// "acme" with its operator.
func fakeWorkspace(tb testing.TB, start time.Time) (*testenv.Env, *fakeprovider.Provider, *store.Workspace, *service.Principal) {
	tb.Helper()
	te := testenv.New(tb, start)
	fake, err := fakeprovider.Start("sk-up")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { fake.Close() })
	w, err := te.Service.CreateWorkspace(context.Background(), "acme")
	if err != nil {
		tb.Fatal(err)
	}
	return te, fake, w, service.Operator(w.ID)
}

func newCCEnv(t *testing.T) *ccEnv {
	t.Helper()
	te, fake, w, op := fakeWorkspace(t, time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC))
	ctx := context.Background()
	person, err := te.Service.CreatePerson(ctx, service.NewPerson{Email: "ann@example.com", Name: "Ann", Password: "a long passphrase",
		Workspace: w.ID, Role: store.RoleMember})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := te.Service.CreateConnection(ctx, op, service.ConnectionInput{Name: "anthropic", Kind: store.KindAnthropic, BaseURL: fake.URL + "/v1",
		Credential: "sk-up", Models: map[string]service.ModelInput{"claude-sonnet": {Pricing: &store.Pricing{Input: 3 * money.Scale, Output: 15 * money.Scale}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.Service.CreateWorkspaceModel(ctx, op, service.WorkspaceModelInput{ID: "claude-ws",
		Targets: []store.ModelTarget{{Connection: conn.ID, Model: "claude-sonnet"}}}); err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{Service: func(context.Context) (*service.Service, error) { return te.Service, nil }, Forwarder: proxyForwarder{},
		MaxRequestBody: 1 << 20, Metrics: NewMetrics(nil), Logger: zap.NewNop()}
	srv := httptest.NewServer(http.HandlerFunc(p.Serve))
	t.Cleanup(srv.Close)
	return &ccEnv{te: te, svc: te.Service, fake: fake, srv: srv, ws: w.ID, person: person}
}

// signIn runs Claude Code's device sign-in, approved for the workspace.
func (e *ccEnv) signIn(t *testing.T) *service.TokenPair {
	t.Helper()
	ctx := context.Background()
	d, err := e.svc.StartDeviceFor(ctx, service.DeviceRequest{ClientID: service.ClaudeCodeClient, VerificationURI: "http://console/device"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DecideDevice(ctx, e.person.ID, d.UserCode, true, e.ws); err != nil {
		t.Fatal(err)
	}
	pair, err := e.svc.PollDevice(ctx, service.ClaudeCodeClient, d.DeviceCode)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// call sends what Claude Code sends: a bearer access token (no x-api-key),
// anthropic-version and -beta, its session id.
func (e *ccEnv) call(t *testing.T, method, path, token, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("anthropic-beta", "claude-code-20250219")
	req.Header.Set("X-Claude-Code-Session-Id", "0b6b9c1e-cc-session")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const ccMessage = `{"model":"claude-ws","max_tokens":256,"messages":[{"role":"user","content":"say hello"}]}`

// usage waits for n usage records of the workspace.
func (e *ccEnv) usage(t *testing.T, n int) []*store.UsageRecord {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		recs, _, err := e.svc.Usage(context.Background(), service.Operator(e.ws), service.UsageQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) >= n || time.Now().After(deadline) {
			if len(recs) < n {
				t.Fatalf("%d usage records, want %d", len(recs), n)
			}
			return recs
		}
	}
}

// wantRefused asserts a 401 that Claude Code does not retry, in
// Anthropic's error shape.
func wantRefused(t *testing.T, what string, resp *http.Response, body string) {
	t.Helper()
	if resp.StatusCode != 401 || resp.Header.Get("X-Should-Retry") != "false" ||
		gjson.Get(body, "type").String() != "error" || gjson.Get(body, "error.type").String() != "authentication_error" ||
		gjson.Get(body, "error.message").String() == "" {
		t.Fatalf("%s: %d x-should-retry %q %s", what, resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
}

// Claude Code's access token on the Inference API acts as the person who
// signed in: messages, token counts and the model list answer; usage is
// recorded against the person with Claude Code's session id; the
// workspace's policies, rate limits and budgets apply.
func TestClaudeCodeTokenOnInferenceAPI(t *testing.T) {
	e := newCCEnv(t)
	ctx := context.Background()
	pair := e.signIn(t)
	at := pair.AccessToken

	resp, body := e.call(t, "POST", "/v1/messages?beta=true", at, ccMessage)
	if resp.StatusCode != 200 || !strings.Contains(body, fakeprovider.Text) {
		t.Fatalf("messages: %d %s", resp.StatusCode, body)
	}
	if got := e.fake.Last(); got.Header.Get("X-Api-Key") != "sk-up" || got.Header.Get("Authorization") != "" ||
		gjson.GetBytes(got.Body, "model").String() != "claude-sonnet" {
		t.Fatalf("the provider got %v %s", got.Header, got.Body)
	}
	resp, body = e.call(t, "POST", "/v1/messages/count_tokens?beta=true", at, `{"model":"claude-ws","messages":[{"role":"user","content":"say hello"}]}`)
	if resp.StatusCode != 200 || !gjson.Get(body, "input_tokens").Exists() {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, body)
	}
	resp, body = e.call(t, "GET", "/v1/models?limit=1000", at, "")
	if resp.StatusCode != 200 || gjson.Get(body, `data.#(id=="claude-ws").type`).String() != "model" {
		t.Fatalf("models: %d %s", resp.StatusCode, body)
	}
	recs := e.usage(t, 2)
	for _, r := range recs {
		if r.MemberID != e.person.ID || r.MemberKind != store.MemberPerson || r.FamilyID == "" || r.KeyID != "" ||
			r.Session != "0b6b9c1e-cc-session" || r.Model != "claude-ws" {
			t.Fatalf("usage record %+v", r)
		}
	}
	// One generation, charged, and one token count (in either order: the
	// fake clock gives both the same time).
	gen, count := recs[0], recs[1]
	if gen.Operation == store.OpCountTokens {
		gen, count = count, gen
	}
	if gen.Operation != "" || gen.Cost == 0 || count.Operation != store.OpCountTokens || count.Cost != 0 {
		t.Fatalf("records %+v %+v", recs[0], recs[1])
	}

	op := service.Operator(e.ws)
	// A deny policy for members.
	pol, err := e.svc.CreatePolicy(ctx, op, service.PolicyInput{Name: "no claude for members", Effect: store.EffectDeny,
		Models: []string{"claude-*"}, Roles: []string{store.RoleMember}})
	if err != nil {
		t.Fatal(err)
	}
	resp, body = e.call(t, "POST", "/v1/messages", at, ccMessage)
	if resp.StatusCode != 403 || gjson.Get(body, "_tag").String() != "PolicyDenied" || gjson.Get(body, "error.type").String() != "permission_error" {
		t.Fatalf("denied by policy: %d %s", resp.StatusCode, body)
	}
	if err := e.svc.DeletePolicy(ctx, op, pol.ID); err != nil {
		t.Fatal(err)
	}
	// A rate limit per key: the sign-in is the person's key.
	pol, err = e.svc.CreatePolicy(ctx, op, service.PolicyInput{Name: "one a minute", Effect: store.EffectLimit,
		Models: []string{"*"}, Per: "key", RequestsPerMinute: 1})
	if err != nil {
		t.Fatal(err)
	}
	if resp, body = e.call(t, "POST", "/v1/messages", at, ccMessage); resp.StatusCode != 200 {
		t.Fatalf("first under the limit: %d %s", resp.StatusCode, body)
	}
	if resp, body = e.call(t, "POST", "/v1/messages", at, ccMessage); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second under the limit: %d %s", resp.StatusCode, body)
	}
	if err := e.svc.DeletePolicy(ctx, op, pol.ID); err != nil {
		t.Fatal(err)
	}
	// A budget with no room left.
	zero := money.Micros(0)
	if _, err := e.svc.SetBudget(ctx, op, e.person.ID, service.BudgetInput{LimitUSD: &zero, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	if resp, body = e.call(t, "POST", "/v1/messages", at, ccMessage); resp.StatusCode != 402 || gjson.Get(body, "_tag").String() != "BudgetExceeded" {
		t.Fatalf("over budget: %d %s", resp.StatusCode, body)
	}
	if _, err := e.svc.SetBudget(ctx, op, e.person.ID, service.BudgetInput{}); err != nil {
		t.Fatal(err)
	}
	e.te.Clock.Advance(time.Minute)
	if resp, body = e.call(t, "POST", "/v1/messages", at, ccMessage); resp.StatusCode != 200 {
		t.Fatalf("budget removed: %d %s", resp.StatusCode, body)
	}
}

// A revoked sign-in's token and an expired one get 401 with
// x-should-retry: false in Anthropic's error shape, on every route
// Claude Code calls, and nothing goes upstream.
func TestClaudeCodeTokenRefused(t *testing.T) {
	e := newCCEnv(t)
	ctx := context.Background()
	revoked := e.signIn(t)
	if err := e.svc.RevokeToken(ctx, service.ClaudeCodeClient, revoked.RefreshToken); err != nil {
		t.Fatal(err)
	}
	expiring := e.signIn(t)
	e.te.Clock.Advance(e.svc.AccessTokenTTL + time.Second)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/messages?beta=true", ccMessage},
		{"POST", "/v1/messages/count_tokens?beta=true", `{"model":"claude-ws","messages":[]}`},
		{"GET", "/v1/models?limit=1000", ""},
	} {
		resp, body := e.call(t, c.method, c.path, revoked.AccessToken, c.body)
		wantRefused(t, "revoked sign-in on "+c.path, resp, body)
		resp, body = e.call(t, c.method, c.path, expiring.AccessToken, c.body)
		wantRefused(t, "expired access token on "+c.path, resp, body)
	}
	if n := len(e.fake.Received()); n != 0 {
		t.Fatalf("%d requests reached the provider", n)
	}
	// The expired sign-in refreshes and works again.
	next, err := e.svc.Refresh(ctx, service.ClaudeCodeClient, expiring.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := e.call(t, "POST", "/v1/messages", next.AccessToken, ccMessage); resp.StatusCode != 200 {
		t.Fatalf("after a refresh: %d %s", resp.StatusCode, body)
	}
}

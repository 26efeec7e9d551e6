package gateway_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// ownKey makes a service account of the test's own (so that the policies
// and budgets a test sets touch no other test) with an inference key.
func (e *env) ownKey(t *testing.T, name string) (sa, key string) {
	t.Helper()
	ctx := context.Background()
	op := service.Operator(e.ws)
	s, err := e.svc.CreateServiceAccount(ctx, op, name)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.svc.CreateKey(ctx, op, s.ID, service.NewKey{Name: name, Permission: store.PermissionInference})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID, k.Key
}

// clearOfMinuteEnd waits, when the wall clock is in the last 15 seconds of
// a minute, for the next one: policy limits count in one-minute windows of
// the server's (real) clock, and a test's burst must fall in one window.
func clearOfMinuteEnd() {
	if s := time.Now().Second(); s >= 45 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
}

func (e *env) policy(t *testing.T, in service.PolicyInput) *store.Policy {
	t.Helper()
	p, err := e.svc.CreatePolicy(context.Background(), service.Operator(e.ws), in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.svc.DeletePolicy(context.Background(), service.Operator(e.ws), p.ID) })
	return p
}

// A deny policy refuses on both APIs, in the format's envelope, naming the
// policy; an allow policy narrows a service account to its models.
func TestPolicyDenies(t *testing.T) {
	e := setup(t)
	sa, key := e.ownKey(t, "denied")
	e.workspaceModel(t, "pol-claude", store.ModelTarget{Connection: e.conns["anthropic"], Model: "claude-sonnet"})
	deny := e.policy(t, service.PolicyInput{Name: "no claude for ci", Effect: "deny", Models: []string{"claude-*", "pol-claude"}, ServiceAccounts: []string{sa}})
	for _, path := range []string{"/custom/" + e.conns["anthropic"] + "/v1/messages", "/v1/messages"} {
		model := "claude-sonnet"
		if path == "/v1/messages" {
			model = "pol-claude"
		}
		resp, body := e.post(t, path, `{"model":"`+model+`","max_tokens":5,"messages":[]}`, "x-api-key", key)
		if resp.StatusCode != 403 || errorTag(t, body) != "PolicyDenied" || jsonField(t, body, "policy") != deny.ID ||
			jsonField(t, body, "type") != "error" || !strings.Contains(body, "no claude for ci") {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	// Other callers are not subjects of it.
	if resp, body := e.post(t, "/v1/messages", `{"model":"pol-claude","max_tokens":5,"messages":[]}`, "x-api-key", e.key); resp.StatusCode != 200 {
		t.Fatalf("another key: %d %s", resp.StatusCode, body)
	}
	allow := e.policy(t, service.PolicyInput{Name: "ci uses mini", Effect: "allow", Models: []string{"*-mini"}, ServiceAccounts: []string{sa}})
	resp, body := e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o","messages":[]}`, "Authorization", "Bearer "+key)
	if resp.StatusCode != 403 || jsonField(t, body, "policy") != allow.ID {
		t.Fatalf("model outside the allow policy: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, "Authorization", "Bearer "+key); resp.StatusCode != 200 {
		t.Fatalf("allowed model: %d %s", resp.StatusCode, body)
	}
}

// A requests-per-minute limit admits exactly its room of 200 concurrent
// requests on the Inference API; the rest get 429 with Retry-After and the
// x-ratelimit headers, and never reach the provider.
func TestPolicyRateLimitRace(t *testing.T) {
	e := setup(t)
	sa, key := e.ownKey(t, "limited")
	p, cp := e.ownProvider(t, nil)
	e.workspaceModel(t, "pol-rpm", store.ModelTarget{Connection: cp, Model: "m"})
	const room, total = 13, 200
	lim := e.policy(t, service.PolicyInput{Name: "13 rpm", Effect: "limit", Models: []string{"*"}, ServiceAccounts: []string{sa}, Per: "key", RequestsPerMinute: room})
	p.SetBehavior(fakeprovider.Behavior{Delay: 100 * time.Millisecond})
	clearOfMinuteEnd()
	statuses, last, bodies := e.burst(t, total, "/v1/chat/completions", `{"model":"pol-rpm","messages":[]}`, "Authorization", "Bearer "+key)
	refused, refusedBody := last[429], bodies[429]
	if statuses[200] != room || statuses[429] != total-room || len(p.Received()) != room {
		t.Fatalf("statuses %v, provider got %d; want exactly %d admitted", statuses, len(p.Received()), room)
	}
	ra, _ := strconv.Atoi(refused.Header.Get("Retry-After"))
	if ra < 1 || ra > 60 || refused.Header.Get("X-Ratelimit-Limit-Requests") != strconv.Itoa(room) ||
		refused.Header.Get("X-Ratelimit-Remaining-Requests") != "0" || errorTag(t, refusedBody) != "RateLimited" || jsonField(t, refusedBody, "policy") != lim.ID {
		t.Fatalf("429: %v %s", refused.Header, refusedBody)
	}
}

// A tokens-per-minute limit reserves each request's upper bound (body
// bytes plus max_tokens) and settles what it used: of concurrent requests
// only as many as the room holds are admitted; one after another, each
// settled at the few tokens it used, many fit.
func TestPolicyTokenLimit(t *testing.T) {
	e := setup(t)
	sa, key := e.ownKey(t, "tokens")
	p, cp := e.ownProvider(t, nil)
	e.workspaceModel(t, "pol-tpm", store.ModelTarget{Connection: cp, Model: "m"})
	body := `{"model":"pol-tpm","max_tokens":1000,"messages":[]}`
	bound := len(body) + 1000
	e.policy(t, service.PolicyInput{Name: "tpm", Effect: "limit", Models: []string{"pol-*"}, ServiceAccounts: []string{sa}, Per: "member",
		TokensPerMinute: int64(2*bound + bound/2)})
	p.SetBehavior(fakeprovider.Behavior{Delay: 2 * time.Second})
	clearOfMinuteEnd()
	statuses, _, _ := e.burst(t, 6, "/v1/chat/completions", body, "Authorization", "Bearer "+key)
	if statuses[200] != 2 || statuses[429] != 4 {
		t.Fatalf("concurrent: %v, want 2 admitted", statuses)
	}
	p.SetBehavior(fakeprovider.Behavior{})
	e.svc.Ledger.Wait()
	// Settled one at a time, each uses only the fake's few tokens: many fit.
	for i := range 5 {
		if resp, b := e.post(t, "/v1/chat/completions", body, "Authorization", "Bearer "+key); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	// A request whose bound alone exceeds the room is refused by tokens.
	big := `{"model":"pol-tpm","max_tokens":100000,"messages":[]}`
	resp, b := e.post(t, "/v1/chat/completions", big, "Authorization", "Bearer "+key)
	if resp.StatusCode != 429 || resp.Header.Get("X-Ratelimit-Limit-Tokens") == "" || !strings.Contains(b, "tokens") {
		t.Fatalf("over the token room: %d %v %s", resp.StatusCode, resp.Header, b)
	}
}

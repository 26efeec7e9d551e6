package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// attacker is a loopback server that records everything it receives.
type attacker struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // each request's headers, query and body, as text
}

func newAttacker(t *testing.T) *attacker {
	a := &attacker{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var sb strings.Builder
		_ = r.Header.Write(&sb)
		a.mu.Lock()
		a.seen = append(a.seen, r.URL.String()+"\n"+sb.String()+"\n"+string(b))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *attacker) received() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// TestStolenCredentialRefused is the reported attack: an All key moves a
// connection's base URL to its own server and sends one gateway request
// through the connection. The move is refused, the gateway keeps using the
// provider, and the attacker's server never sees the stored credential;
// a move that brings its own credential sends only that one.
func TestStolenCredentialRefused(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	provider, err := fakeprovider.Start(providerSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { provider.Close() })
	c, err := e.svc.CreateConnection(ctx, service.Operator(e.ws), service.ConnectionInput{Name: "victim", Kind: store.KindOpenAI,
		BaseURL: provider.URL + "/v1", Credential: providerSecret, Models: map[string]service.ModelInput{"gpt-4o-mini": {}}})
	if err != nil {
		t.Fatal(err)
	}
	evil := newAttacker(t)
	console := "/api/v1/connections/" + c.ID
	auth := []string{"Authorization", "Bearer " + e.allKey}

	for _, body := range []string{`{"base_url": "` + evil.URL + `/v1"}`, `{"base_url": "` + evil.URL + `/v1", "kind": "openai-compatible"}`, `{"kind": "anthropic"}`} {
		resp, got := e.do(t, "PATCH", console, body, append([]string{"Content-Type", "application/json"}, auth...)...)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, `"_tag":"InvalidRequest"`) || !strings.Contains(got, "needs a new credential") {
			t.Fatalf("PATCH %s: %d %s", body, resp.StatusCode, got)
		}
	}

	resp, got := e.post(t, "/custom/"+c.ID+"/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`,
		"Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 {
		t.Fatalf("gateway request after the refused PATCH: %d %s", resp.StatusCode, got)
	}
	if rec := provider.Last(); rec.Header.Get("Authorization") != "Bearer "+providerSecret {
		t.Fatalf("the provider did not get the request with its credential: %q", rec.Header.Get("Authorization"))
	}
	if seen := evil.received(); len(seen) != 0 {
		t.Fatalf("the attacker's server received %d requests", len(seen))
	}

	// Moving with a credential of one's own is allowed (and audited): only
	// that credential reaches the new origin, never the stored one.
	resp, got = e.do(t, "PATCH", console, `{"base_url": "`+evil.URL+`/v1", "credential": "sk-attacker-own"}`,
		append([]string{"Content-Type", "application/json"}, auth...)...)
	if resp.StatusCode != 200 {
		t.Fatalf("PATCH with a credential: %d %s", resp.StatusCode, got)
	}
	resp, got = e.post(t, "/custom/"+c.ID+"/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`,
		"Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 {
		t.Fatalf("gateway request after the accepted PATCH: %d %s", resp.StatusCode, got)
	}
	seen := evil.received()
	if len(seen) != 1 || !strings.Contains(seen[0], "Bearer sk-attacker-own") {
		t.Fatalf("the new origin received %q", seen)
	}
	for _, s := range seen {
		if strings.Contains(s, providerSecret) || strings.Contains(s, e.key) {
			t.Fatal("the stored credential (or the client's key) reached the new origin")
		}
	}
	trail, err := e.svc.ConnectionAudit(ctx, service.Operator(e.ws), c.ID)
	if err != nil || len(trail) != 1 || trail[0].NewOrigin != evil.URL || trail[0].ActorKind != "key" {
		t.Fatalf("audit trail %+v, %v", trail, err)
	}
}

package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func TestChatForwardedWithSwapAndRewrite(t *testing.T) {
	e := setup(t)
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"big":12345678901234567890,"z":1,"a":{"k":[1,2]}}`
	resp, got := e.post(t, "/custom/"+e.conns["openai"]+"/v1/chat/completions", body,
		"Authorization", "Bearer "+e.key, "Cookie", "session=abc", "X-Org-Id", e.ws, "OpenAI-Beta", "assistants=v2", "X-Custom", "1",
		"Forwarded", "for=192.0.2.7", "Via", "1.1 client-proxy", "X-Forwarded-Host", "client.example")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	if !strings.Contains(got, fakeprovider.Text) {
		t.Fatalf("answer: %s", got)
	}
	if resp.Header.Get("X-Ratelimit-Remaining-Requests") != "99" {
		t.Fatal("provider rate-limit headers were not returned")
	}
	rec := e.providers["openai"].Last()
	if rec.Path != "/v1/chat/completions" {
		t.Fatalf("upstream path %q", rec.Path)
	}
	if want := strings.TrimPrefix(e.providers["openai"].URL, "http://"); rec.Host != want {
		t.Fatalf("upstream Host %q, want the provider's %q", rec.Host, want)
	}
	want := strings.Replace(body, `"gpt-4o"`, `"gpt-4o-2024-08-06"`, 1)
	if string(rec.Body) != want {
		t.Fatalf("upstream body\n got %s\nwant %s", rec.Body, want)
	}
	h := rec.Header
	if h.Get("Authorization") != "Bearer "+providerSecret {
		t.Fatalf("upstream Authorization %q", h.Get("Authorization"))
	}
	for _, name := range []string{"Cookie", "X-Org-Id", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via", "Forwarded", "X-Api-Key"} {
		if h.Get(name) != "" {
			t.Errorf("header %s leaked upstream: %q", name, h.Get(name))
		}
	}
	if h.Get("Openai-Beta") != "assistants=v2" || h.Get("X-Custom") != "1" || h.Get("X-Team") != "agents" {
		t.Errorf("pass-through headers lost: %v", h)
	}
}

func TestAuthFailuresNeverReachUpstream(t *testing.T) {
	e := setup(t)
	path := "/custom/" + e.conns["openai"] + "/chat/completions"
	body := `{"model":"gpt-4o","messages":[]}`
	cases := []struct {
		name   string
		hdr    []string
		status int
		tag    string
	}{
		{"no key", nil, 401, "Unauthorized"},
		{"malformed key", []string{"Authorization", "Bearer ag_sk_nope"}, 401, "Unauthorized"},
		{"bad checksum", []string{"Authorization", "Bearer " + flipLast(e.key)}, 401, "Unauthorized"},
		{"other workspace's key", []string{"Authorization", "Bearer " + e.otherKey}, 404, "ConnectionNotFound"},
		{"x-org-id of another workspace", []string{"Authorization", "Bearer " + e.key, "X-Org-Id", e.otherWS}, 403, "Forbidden"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, got := e.post(t, path, body, c.hdr...)
			if resp.StatusCode != c.status || jsonField(t, got, "_tag") != c.tag {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, got, c.status, c.tag)
			}
			if jsonField(t, got, "error.message") == nil {
				t.Fatalf("no OpenAI error envelope: %s", got)
			}
		})
	}
	if n := len(e.providers["openai"].Received()); n != 0 {
		t.Fatalf("%d rejected requests reached the provider", n)
	}
}

func TestKeyHeadersOfEverySDK(t *testing.T) {
	e := setup(t)
	for _, h := range []string{"x-api-key", "api-key"} {
		resp, got := e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, h, e.allKey)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", h, resp.StatusCode, got)
		}
		if rec := e.providers["openai"].Last(); rec.Header.Get("X-Api-Key") != "" || rec.Header.Get("Api-Key") != "" {
			t.Fatalf("%s: the client key went upstream", h)
		}
	}
}

func TestRevokedAndExpiredKeys(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	sa, _ := e.svc.CreateServiceAccount(ctx, op, "short-lived")
	k, _ := e.svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "k", Permission: store.PermissionInference})
	path := "/custom/" + e.conns["openai"] + "/chat/completions"
	body := `{"model":"gpt-4o-mini","messages":[]}`
	if resp, got := e.post(t, path, body, "Authorization", "Bearer "+k.Key); resp.StatusCode != 200 {
		t.Fatalf("fresh key: %d %s", resp.StatusCode, got)
	}
	if err := e.svc.RevokeKey(ctx, op, sa.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.post(t, path, body, "Authorization", "Bearer "+k.Key); resp.StatusCode != 401 {
		t.Fatalf("revoked key: %d", resp.StatusCode)
	}
	k2, _ := e.svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "k2", Permission: store.PermissionInference})
	past := time.Now().Add(-time.Minute)
	e.svc.Store.Update(ctx, func(tx store.Tx) error {
		rec, err := tx.APIKey(k2.ID)
		if err != nil {
			return err
		}
		rec.ExpiresAt = &past
		return tx.PutAPIKey(rec, false)
	})
	if resp, _ := e.post(t, path, body, "Authorization", "Bearer "+k2.Key); resp.StatusCode != 401 {
		t.Fatalf("expired key: %d", resp.StatusCode)
	}
}

func TestModelChecks(t *testing.T) {
	e := setup(t)
	path := "/custom/" + e.conns["openai"] + "/chat/completions"
	auth := []string{"Authorization", "Bearer " + e.key}
	for _, c := range []struct {
		body   string
		status int
		tag    string
	}{
		{`{"messages":[]}`, 400, "InvalidRequest"},
		{`{"model":7,"messages":[]}`, 400, "InvalidRequest"},
		{`{"model":"o1","messages":[]}`, 403, "ModelNotEnabled"},
		{`{"model":"gpt-5-unknown","messages":[]}`, 403, "ModelNotEnabled"},
		{`not json`, 400, "InvalidRequest"},
		{`["model"]`, 400, "InvalidRequest"},
	} {
		resp, got := e.post(t, path, c.body, auth...)
		if resp.StatusCode != c.status || jsonField(t, got, "_tag") != c.tag {
			t.Errorf("%s: got %d %s, want %d %s", c.body, resp.StatusCode, got, c.status, c.tag)
		}
	}
	// Anthropic without max_tokens: 400 before going upstream, in Anthropic's envelope.
	resp, got := e.post(t, "/custom/"+e.conns["anthropic"]+"/v1/messages", `{"model":"claude-sonnet","messages":[]}`, auth...)
	if resp.StatusCode != 400 || jsonField(t, got, "type") != "error" || jsonField(t, got, "error.type") != "invalid_request_error" {
		t.Fatalf("anthropic without max_tokens: %d %s", resp.StatusCode, got)
	}
	for kind, p := range e.providers {
		if n := len(p.Received()); n != 0 {
			t.Errorf("%s: %d refused requests reached the provider", kind, n)
		}
	}
}

func TestAnthropicSwapAndHeaders(t *testing.T) {
	e := setup(t)
	body := `{"model":"claude-sonnet","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	resp, got := e.post(t, "/custom/"+e.conns["anthropic"]+"/v1/messages", body,
		"x-api-key", e.key, "anthropic-beta", "prompt-caching-2024-07-31")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	rec := e.providers["anthropic"].Last()
	if rec.Path != "/v1/messages" || rec.Header.Get("X-Api-Key") != providerSecret || rec.Header.Get("Authorization") != "" {
		t.Fatalf("upstream %s %v", rec.Path, rec.Header)
	}
	if rec.Header.Get("Anthropic-Version") != "2023-06-01" || rec.Header.Get("Anthropic-Beta") != "prompt-caching-2024-07-31" {
		t.Fatalf("anthropic headers: %v", rec.Header)
	}
	if string(rec.Body) != strings.Replace(body, "claude-sonnet", "claude-sonnet-4-5-20250929", 1) {
		t.Fatalf("body %s", rec.Body)
	}
}

func TestGooglePathRewriteAndQueryKey(t *testing.T) {
	e := setup(t)
	body := `{"contents":[{"parts":[{"text":"hi"}]}]}`
	resp, got := e.post(t, "/custom/"+e.conns["google"]+"/v1beta/models/gemini-pro:streamGenerateContent?alt=sse&key="+e.key, body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	rec := e.providers["google"].Last()
	if rec.Path != "/v1beta/models/gemini-2.5-pro:streamGenerateContent" || rec.RawQuery != "alt=sse" {
		t.Fatalf("upstream %s?%s", rec.Path, rec.RawQuery)
	}
	if rec.Header.Get("X-Goog-Api-Key") != providerSecret || string(rec.Body) != body {
		t.Fatalf("upstream header/body: %v %s", rec.Header, rec.Body)
	}
	if strings.Count(got, "data: ") != 3 {
		t.Fatalf("stream: %s", got)
	}
	// Not enabled / unknown model in the path: 403 in Google's envelope.
	resp, got = e.post(t, "/custom/"+e.conns["google"]+"/models/gemini-ultra:generateContent", body, "x-goog-api-key", e.key)
	if resp.StatusCode != 403 || jsonField(t, got, "error.status") != "PERMISSION_DENIED" {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
}

func TestResponsesAndStreams(t *testing.T) {
	e := setup(t)
	auth := []string{"Authorization", "Bearer " + e.key}
	resp, got := e.post(t, "/custom/"+e.conns["openai"]+"/responses", `{"model":"gpt-4o-mini","input":"hi","stream":true}`, auth...)
	if resp.StatusCode != 200 || !strings.Contains(got, "event: response.completed") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	if e.providers["openai"].Last().Path != "/v1/responses" {
		t.Fatal("wrong upstream path")
	}
	resp, got = e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[]}`, auth...)
	if resp.StatusCode != 200 || !strings.HasSuffix(got, "data: [DONE]\n\n") {
		t.Fatalf("%d %q", resp.StatusCode, got)
	}
	if resp.Header.Get("Content-Encoding") != "" {
		t.Fatal("a stream was compressed")
	}
}

func TestHTTPSUpstream(t *testing.T) {
	e := setup(t)
	resp, got := e.post(t, "/custom/"+e.conns["tls"]+"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 || !strings.Contains(got, fakeprovider.Text) {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	rec := e.providers["tls"].Last()
	if rec.Header.Get("Authorization") != "Bearer "+providerSecret {
		t.Fatal("credential not swapped over TLS")
	}
	if want := strings.TrimPrefix(e.providers["tls"].URL, "https://"); rec.Host != want {
		t.Fatalf("upstream Host %q, want the provider's %q", rec.Host, want)
	}
}

func TestPersonTokensOnTheGateway(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, err := e.svc.CreatePerson(ctx, service.NewPerson{Email: "dev-" + secrets.RandomString(6) + "@example.com", Name: "Dev", Password: "long enough pw", Workspace: e.ws, Role: store.RoleMember})
	if err != nil {
		t.Fatal(err)
	}
	bound, _ := e.svc.IssuePersonToken(ctx, p.ID, e.ws, "test")
	unbound, _ := e.svc.IssuePersonToken(ctx, p.ID, "", "test")
	path := "/custom/" + e.conns["openai"] + "/chat/completions"
	body := `{"model":"gpt-4o-mini","messages":[]}`
	if resp, got := e.post(t, path, body, "Authorization", "Bearer "+bound.AccessToken); resp.StatusCode != 200 {
		t.Fatalf("bound token: %d %s", resp.StatusCode, got)
	}
	if resp, got := e.post(t, path, body, "Authorization", "Bearer "+unbound.AccessToken); resp.StatusCode != 400 || jsonField(t, got, "_tag") != "OrgRequired" {
		t.Fatalf("unbound token without x-org-id: %d %s", resp.StatusCode, got)
	}
	if resp, got := e.post(t, path, body, "Authorization", "Bearer "+unbound.AccessToken, "X-Org-Id", e.ws); resp.StatusCode != 200 {
		t.Fatalf("unbound token with x-org-id: %d %s", resp.StatusCode, got)
	}
	if resp, got := e.post(t, path, body, "Authorization", "Bearer "+bound.AccessToken, "X-Org-Id", e.otherWS); resp.StatusCode != 403 {
		t.Fatalf("bound token, other x-org-id: %d %s", resp.StatusCode, got)
	}
	if rec := e.providers["openai"].Last(); rec.Header.Get("X-Org-Id") != "" {
		t.Fatal("x-org-id went upstream")
	}
}

// flipLast changes the last character of a key (never to itself).
func flipLast(k string) string {
	last := byte('x')
	if k[len(k)-1] == last {
		last = 'y'
	}
	return k[:len(k)-1] + string(last)
}

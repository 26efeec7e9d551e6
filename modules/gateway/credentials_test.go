package gateway_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/store"
)

// credSlot is one place a client may carry its workspace key in.
type credSlot struct {
	name string
	put  func(h http.Header, q url.Values, key string)
}

var credSlots = []credSlot{
	{"Authorization", func(h http.Header, _ url.Values, k string) { h.Add("Authorization", "Bearer "+k) }},
	{"x-api-key", func(h http.Header, _ url.Values, k string) { h.Add("X-Api-Key", k) }},
	{"api-key", func(h http.Header, _ url.Values, k string) { h.Add("Api-Key", k) }},
	{"x-goog-api-key", func(h http.Header, _ url.Values, k string) { h.Add("X-Goog-Api-Key", k) }},
	{"?key=", func(_ http.Header, q url.Values, k string) { q.Add("key", k) }},
}

// withCredentials sends a gateway request with key a in slot sa and key b
// in slot sb (the same slot twice: a repeated header or query parameter).
func (e *env) withCredentials(t *testing.T, path, body string, sa credSlot, a string, sb credSlot, b string) (int, string) {
	t.Helper()
	u, err := url.Parse(e.base + path)
	if err != nil {
		t.Fatal(err)
	}
	h, q := http.Header{"Content-Type": {"application/json"}}, u.Query()
	sa.put(h, q, a)
	sb.put(h, q, b)
	u.RawQuery = q.Encode()
	req, _ := http.NewRequest("POST", u.String(), strings.NewReader(body))
	req.Header = h
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

// A request that carries two different workspace credentials, in any two
// slots or twice in one, is refused with 400 in its format's envelope
// before either is resolved, and nothing reaches a provider: two valid
// keys, a valid key and a wrong one either way round. The same key in two
// slots goes through.
func TestAmbiguousCredentialRefused(t *testing.T) {
	e := setup(t)
	e.workspaceModel(t, "amb-gpt", store.ModelTarget{Connection: e.conns["openai"], Model: "gpt-4o"})
	e.workspaceModel(t, "amb-claude", store.ModelTarget{Connection: e.conns["anthropic"], Model: "claude-sonnet"})
	e.workspaceModel(t, "amb-gemini", store.ModelTarget{Connection: e.conns["google"], Model: "gemini-pro"})
	chat, responses := `{"model":"gpt-4o","messages":[]}`, `{"model":"gpt-4o-mini","input":"hi"}`
	messages, google := `{"model":"claude-sonnet","max_tokens":10,"messages":[]}`, `{"contents":[{"parts":[{"text":"hi"}]}]}`
	targets := []struct{ format, path, body string }{
		{"openai", "/custom/" + e.conns["openai"] + "/chat/completions", chat},
		{"openai", "/custom/" + e.conns["openai"] + "/responses", responses},
		{"anthropic", "/custom/" + e.conns["anthropic"] + "/v1/messages", messages},
		{"google", "/custom/" + e.conns["google"] + "/v1beta/models/gemini-pro:generateContent", google},
		{"openai", "/v1/chat/completions", strings.Replace(chat, "gpt-4o", "amb-gpt", 1)},
		{"openai", "/v1/responses", strings.Replace(responses, "gpt-4o-mini", "amb-gpt", 1)},
		{"anthropic", "/v1/messages", strings.Replace(messages, "claude-sonnet", "amb-claude", 1)},
		{"google", "/v1beta/models/amb-gemini:generateContent", google},
	}
	const wrong = "agk_notakey0123456789abcdefghijklmnopqrstuv"
	pairs := [][2]string{{e.key, e.allKey}, {e.key, e.otherKey}, {e.key, wrong}, {wrong, e.key}}
	n := 0
	for _, tg := range targets {
		for i, sa := range credSlots {
			for _, sb := range credSlots[i:] {
				for _, keys := range pairs {
					status, body := e.withCredentials(t, tg.path, tg.body, sa, keys[0], sb, keys[1])
					if status != 400 {
						t.Fatalf("%s, %s + %s: %d %s", tg.path, sa.name, sb.name, status, body)
					}
					envelopeOf(t, tg.format, body, 400, "AmbiguousCredential")
					for _, k := range []string{e.key, e.allKey, e.otherKey, wrong} {
						if strings.Contains(body, k) {
							t.Fatalf("the refusal names a credential: %s", body)
						}
					}
					n++
				}
			}
		}
	}
	e.noneReceived(t)

	// The same key in any two slots, or twice in one, goes through.
	for _, tg := range targets {
		for i, sa := range credSlots {
			for _, sb := range credSlots[i:] {
				if status, body := e.withCredentials(t, tg.path, tg.body, sa, e.key, sb, e.key); status != 200 {
					t.Fatalf("%s, the same key in %s + %s: %d %s", tg.path, sa.name, sb.name, status, body)
				}
			}
		}
	}
	t.Logf("%d ambiguous requests refused", n)
}

// The hosted web search reads the same slots and refuses the same way.
func TestAmbiguousCredentialWebsearch(t *testing.T) {
	e := setup(t)
	status, body := e.withCredentials(t, "/websearch", `{"query":"x"}`, credSlots[0], e.key, credSlots[1], e.allKey)
	if status != 400 {
		t.Fatalf("%d %s", status, body)
	}
	envelopeOf(t, "openai", body, 400, "AmbiguousCredential")
}

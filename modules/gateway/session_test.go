package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/store"
)

// postRaw sends a gateway request with headers set exactly as named (no
// canonicalisation, so that "session_id" goes on the wire as written).
func (e *env) postRaw(t *testing.T, path, body string, hdr [][2]string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", e.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.key)
	for _, h := range hdr {
		req.Header[h[0]] = append(req.Header[h[0]], h[1])
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestAgentSessionIsRecorded: each coding agent's session header ends up
// in the usage record, in the documented precedence; values too long or
// not printable ASCII are not recorded; every header reaches the provider
// unchanged. The harness's server allows the session_id header (Caddy
// drops names with an underscore otherwise), as docs/usage-and-budgets.md
// tells operators to; Caddy then drops its hyphenated twin Session-Id,
// which TestRequestSession covers instead.
func TestAgentSessionIsRecorded(t *testing.T) {
	e := setup(t)
	chat := [3]string{"openai", "/custom/" + e.conns["openai"] + "/chat/completions", `{"model":"gpt-4o","messages":[]}`}
	responses := [3]string{"openai", "/custom/" + e.conns["openai"] + "/responses", `{"model":"gpt-4o-mini","input":"hi"}`}
	messages := [3]string{"anthropic", "/custom/" + e.conns["anthropic"] + "/v1/messages", `{"model":"claude-sonnet","max_tokens":50,"messages":[]}`}
	google := [3]string{"google", "/custom/" + e.conns["google"] + "/v1beta/models/gemini-pro:generateContent", `{"contents":[]}`}
	max := strings.Repeat("s", store.MaxSessionLen)
	cases := []struct {
		name  string
		route [3]string // provider, path, body
		hdr   [][2]string
		want  string
	}{
		{"opencode", chat, [][2]string{{"x-opencode-session", "ses_01JX9ABCDEF"}}, "ses_01JX9ABCDEF"},
		{"claude code", messages, [][2]string{{"X-Claude-Code-Session-Id", "6f1c2e1a-8d3b-4f0e-9a77-0c5b8e2d4a10"}}, "6f1c2e1a-8d3b-4f0e-9a77-0c5b8e2d4a10"},
		{"codex session_id", responses, [][2]string{{"session_id", "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}}, "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"},
		{"qwen code", chat, [][2]string{{"X-Qwen-Code-Session-Id", "qwen-1"}}, "qwen-1"},
		{"kilo code", chat, [][2]string{{"X-KiloCode-TaskId", "task-7"}}, "task-7"},
		{"generic x-session-id", chat, [][2]string{{"X-Session-Id", "generic-1"}}, "generic-1"},
		{"gemini cli names none", google, [][2]string{{"x-gemini-api-privileged-user-id", "install-1"}}, ""},
		{"no header", chat, nil, ""},
		{"codex session_id with another agent's header", chat, [][2]string{{"session_id", "codex-x"}, {"x-opencode-session", "oc-x"}}, "oc-x"},
		{"claude code wins over generic", messages, [][2]string{{"X-Session-Id", "g-x"}, {"X-Claude-Code-Session-Id", "cc-x"}}, "cc-x"},
		{"empty header falls through", chat, [][2]string{{"x-opencode-session", ""}, {"session_id", "codex-y"}}, "codex-y"},
		{"spaces and punctuation kept", chat, [][2]string{{"x-opencode-session", "a b/c:d~"}}, "a b/c:d~"},
		{"longest kept", chat, [][2]string{{"x-opencode-session", max}}, max},
		{"too long not recorded", chat, [][2]string{{"x-opencode-session", max + "s"}}, ""},
		{"too long is not replaced by the next", chat, [][2]string{{"x-opencode-session", max + "s"}, {"session_id", "codex-z"}}, ""},
		{"tab not recorded", chat, [][2]string{{"x-opencode-session", "a\tb"}}, ""},
		{"non-ASCII not recorded", chat, [][2]string{{"X-Claude-Code-Session-Id", "sé"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.usageCount()
			if status := e.postRaw(t, c.route[1], c.route[2], c.hdr); status != 200 {
				t.Fatalf("status %d", status)
			}
			rec := e.usageSince(t, before, 1)[0]
			if rec.Session != c.want {
				t.Errorf("recorded session %q, want %q", rec.Session, c.want)
			}
			got := e.providers[c.route[0]].Last().Header
			for _, h := range c.hdr {
				if vs := got.Values(h[0]); len(vs) != 1 || vs[0] != h[1] {
					t.Errorf("provider got %s = %q, want %q", h[0], vs, h[1])
				}
			}
		})
	}
	// The access log entry's agentgate object names the session too.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(e.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"session":"ses_01JX9ABCDEF"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no access log entry with the session")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

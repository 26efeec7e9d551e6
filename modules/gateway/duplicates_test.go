package gateway_test

import (
	"strings"
	"testing"
)

// envelopeOf checks a gateway-made error: _tag and message, inside the
// error envelope of the format ("openai", "anthropic" or "google").
func envelopeOf(t *testing.T, format, body string, status int, tag string) {
	t.Helper()
	if got := jsonField(t, body, "_tag"); got != tag {
		t.Fatalf("_tag %v, want %s: %s", got, tag, body)
	}
	if m, _ := jsonField(t, body, "message").(string); m == "" {
		t.Fatalf("no message: %s", body)
	}
	switch format {
	case "anthropic":
		if jsonField(t, body, "type") != "error" || jsonField(t, body, "error.type") == nil || jsonField(t, body, "error.message") == nil {
			t.Fatalf("not an Anthropic error envelope: %s", body)
		}
	case "google":
		if jsonField(t, body, "error.code") != float64(status) || jsonField(t, body, "error.status") == nil || jsonField(t, body, "error.message") == nil {
			t.Fatalf("not a Google error envelope: %s", body)
		}
	default:
		if jsonField(t, body, "type") != nil || jsonField(t, body, "error.type") == nil || jsonField(t, body, "error.code") != tag {
			t.Fatalf("not an OpenAI error envelope: %s", body)
		}
	}
}

// A body that repeats a key is refused before anything goes upstream: the
// provider would act on the copy the gateway did not check (a model that
// is not enabled, a stream metered as a plain answer).
func TestDuplicateKeysRefused(t *testing.T) {
	e := setup(t)
	type target struct {
		format, kind, path string
		hdr                []string
		bodies             []string
	}
	auth := []string{"Authorization", "Bearer " + e.key}
	targets := []target{
		{"openai", "openai", "/chat/completions", auth, []string{
			`{"model":"gpt-4o","messages":[],"model":"o1"}`,
			`{"model":"o1","model":"gpt-4o","messages":[]}`,
			`{"messages":[],"model":"gpt-4o","stream":false,"model":"o1","temperature":1}`,
			`{"model":"gpt-4o","messages":[],"mod\u0065l":"o1"}`,
			`{"model":"gpt-4o","messages":[],"MODEL":"o1"}`,
			`{"model":"gpt-4o","messages":[],"stream":false,"stream":true}`,
			`{"model":"gpt-4o","messages":[],"stream":true,"str\u0065am":false}`,
			`{"model":"gpt-4o","messages":[],"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`,
			`{"model":"gpt-4o","messages":[],"max_tokens":1,"max_tokens":100000}`,
		}},
		{"openai", "openai", "/v1/responses", auth, []string{
			`{"model":"gpt-4o-mini","input":"hi","model":"o1"}`,
			`{"model":"o1","input":"hi","model":"gpt-4o-mini","stream":true}`,
			`{"model":"gpt-4o-mini","input":"hi","stream":false,"stream":true}`,
			`{"model":"gpt-4o-mini","input":"hi","max_output_tokens":1,"max_output_tokens":99999}`,
		}},
		{"anthropic", "anthropic", "/v1/messages", []string{"x-api-key", e.key}, []string{
			`{"model":"claude-sonnet","max_tokens":10,"messages":[],"model":"claude-off"}`,
			`{"model":"claude-off","model":"claude-sonnet","max_tokens":10,"messages":[]}`,
			`{"max_tokens":10,"model":"claude-sonnet","stream":true,"model":"claude-off","messages":[]}`,
			`{"model":"claude-sonnet","max_tokens":10,"messages":[],"\u006d\u006f\u0064\u0065\u006c":"claude-off"}`,
			`{"model":"claude-sonnet","max_tokens":10,"messages":[],"stream":false,"stream":true}`,
			`{"model":"claude-sonnet","max_tokens":10,"max_tokens":64000,"messages":[]}`,
		}},
		{"google", "google", "/v1beta/models/gemini-pro:generateContent", []string{"x-goog-api-key", e.key}, []string{
			`{"contents":[],"generationConfig":{"maxOutputTokens":5},"generation_config":{"max_output_tokens":60000}}`,
			`{"generation_config":{},"contents":[],"generationConfig":{}}`,
			`{"contents":[],"generationConfig":{"maxOutputTokens":5,"max_output_tokens":60000}}`,
			`{"contents":[],"generationConfig":{"max_output_tokens":5,"maxOutputTokens":60000}}`,
			`{"contents":[],"generationConfig":{"thinkingConfig":{"thinkingBudget":1,"thinking_budget":30000}}}`,
			`{"contents":[],"contents":[]}`,
			`{"contents":[],"cont\u0065nts":[]}`,
		}},
		{"google", "google", "/v1beta/models/gemini-pro:streamGenerateContent?alt=sse", []string{"x-goog-api-key", e.key}, []string{
			`{"contents":[],"generationConfig":{},"generation_config":{}}`,
			`{"generationConfig":{"maxOutputTokens":5,"max_output_tokens":60000},"contents":[]}`,
		}},
	}
	before := e.usageCount()
	n := 0
	for _, tg := range targets {
		for _, body := range tg.bodies {
			t.Run(tg.path+" "+body, func(t *testing.T) {
				resp, got := e.post(t, "/custom/"+e.conns[tg.kind]+tg.path, body, tg.hdr...)
				if resp.StatusCode != 400 {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				envelopeOf(t, tg.format, got, 400, "InvalidRequest")
				if !strings.Contains(got, "repeats the key") {
					t.Fatalf("message does not name the repeated key: %s", got)
				}
			})
			n++
		}
	}
	// A key the gateway reads, spelled another way, is refused even alone.
	for _, c := range []struct{ format, kind, path, body string }{
		{"openai", "openai", "/chat/completions", `{"model":"gpt-4o","messages":[],"Stream":true}`},
		{"anthropic", "anthropic", "/v1/messages", `{"model":"claude-sonnet","max_tokens":10,"messages":[],"ſtream":true}`},
		{"google", "google", "/v1beta/models/gemini-pro:generateContent", `{"contents":[],"GenerationConfig":{"maxOutputTokens":60000}}`},
	} {
		resp, got := e.post(t, "/custom/"+e.conns[c.kind]+c.path, c.body, "Authorization", "Bearer "+e.key)
		if resp.StatusCode != 400 || !strings.Contains(got, "another spelling") {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, got)
			continue
		}
		envelopeOf(t, c.format, got, 400, "InvalidRequest")
		n++
	}
	for kind, p := range e.providers {
		if r := p.Received(); len(r) != 0 {
			t.Errorf("%s: %d requests with a repeated key reached the provider; first: %s", kind, len(r), r[0].Body)
		}
	}
	// Refusals are recorded like any other refusal, at no cost.
	for _, rec := range e.usageSince(t, before, n) {
		if rec.Status != 400 || rec.Cost != 0 {
			t.Errorf("usage record of a refusal: status %d cost %s", rec.Status, rec.Cost)
		}
	}
	// The same bodies without the repeat go through.
	if resp, got := e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o","messages":[],"stream":false}`, auth...); resp.StatusCode != 200 {
		t.Fatalf("a body without a repeat: %d %s", resp.StatusCode, got)
	}
}

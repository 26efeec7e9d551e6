package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// boundsProvider starts a fake provider of the test's own with a
// connection of kind serving model "big" at 1 USD per million input tokens
// and 1,000 USD per million output tokens.
func (e *env) boundsProvider(t *testing.T, kind string) (*fakeprovider.Provider, string) {
	t.Helper()
	p, err := fakeprovider.Start(providerSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	base := p.URL + "/v1"
	if kind == store.KindGoogle {
		base = p.URL + "/v1beta"
	}
	price := store.Pricing{Input: money.Micros(money.Scale), Output: money.Micros(1000 * money.Scale)}
	c, err := e.svc.CreateConnection(context.Background(), service.Operator(e.ws), service.ConnectionInput{Name: "bounds-" + kind, Kind: kind,
		BaseURL: base, Credential: providerSecret, Models: map[string]service.ModelInput{"big": {Pricing: &price}}})
	if err != nil {
		t.Fatal(err)
	}
	return p, c.ID
}

// With a 100 USD budget and output at 1,000 USD per million tokens (room
// for 100,000 output tokens), after one ordinary request: an output bound
// that is not a whole count up to 2^53 is refused with 400, and a whole
// one the budget cannot hold with 402, however it is spelled, in every
// format, on the Providers API and on the Inference API (a model with a
// fallback target); the providers receive none of them. A bound spelled
// as a float is forwarded.
func TestOutputBoundsAgainstBudget(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	sa, key := e.ownKey(t, "bounds")
	limit := money.Micros(100 * money.Scale)
	if _, err := e.svc.SetBudget(ctx, op, sa, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	var providers []*fakeprovider.Provider
	conns := map[string]string{}
	for _, kind := range []string{store.KindOpenAI, store.KindAnthropic, store.KindGoogle} {
		a, ca := e.boundsProvider(t, kind)
		b, cb := e.boundsProvider(t, kind)
		providers = append(providers, a, b)
		conns[kind] = ca
		e.workspaceModel(t, "bounds-"+kind, store.ModelTarget{Connection: ca, Model: "big", Order: 1},
			store.ModelTarget{Connection: cb, Model: "big", Order: 2})
	}
	received := func() int {
		n := 0
		for _, p := range providers {
			n += len(p.Received())
		}
		return n
	}

	bearer := []string{"Authorization", "Bearer " + key}
	anthropic := []string{"x-api-key", key, "anthropic-version", "2023-06-01"}
	google := []string{"x-goog-api-key", key}
	type field struct {
		name   string
		body   string // M: the model, V: the number
		hdr    []string
		custom string // the Providers API path
		v1     string // the Inference API path
		model  string // the Inference API model
	}
	var fields []field
	for _, f := range []struct{ name, body string }{
		{"chat max_tokens", `{"model":M,"messages":[{"role":"user","content":"hi"}],"max_tokens":V}`},
		{"chat max_completion_tokens", `{"model":M,"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":V}`},
	} {
		fields = append(fields, field{f.name, f.body, bearer, "/custom/" + conns["openai"] + "/v1/chat/completions", "/v1/chat/completions", "bounds-openai"})
	}
	fields = append(fields,
		field{"responses max_output_tokens", `{"model":M,"input":"hi","max_output_tokens":V}`, bearer,
			"/custom/" + conns["openai"] + "/v1/responses", "/v1/responses", "bounds-openai"},
		field{"anthropic max_tokens", `{"model":M,"messages":[{"role":"user","content":"hi"}],"max_tokens":V}`, anthropic,
			"/custom/" + conns["anthropic"] + "/v1/messages", "/v1/messages", "bounds-anthropic"})
	for _, f := range []struct{ name, body string }{
		{"google maxOutputTokens", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":V}}`},
		{"google max_output_tokens", `{"contents":[{"parts":[{"text":"hi"}]}],"generation_config":{"max_output_tokens":V}}`},
		{"google thinkingBudget", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":V}}}`},
	} {
		fields = append(fields, field{f.name, f.body, google,
			"/custom/" + conns["google"] + "/v1beta/models/big:generateContent", "/v1beta/models/bounds-google:generateContent", ""})
	}

	// One ordinary request: the budget has spend.
	resp, body := e.post(t, fields[0].custom, strings.NewReplacer("M", `"big"`, "V", "100").Replace(fields[0].body), bearer...)
	if resp.StatusCode != 200 {
		t.Fatalf("ordinary request: %d %s", resp.StatusCode, body)
	}
	e.svc.Ledger.Wait()
	if bs, _ := e.svc.Budgets(ctx, op); !spent(bs, sa) {
		t.Fatalf("no spend after an ordinary request: %+v", bs)
	}

	for _, v := range []struct {
		text   string
		status int
	}{
		{"18446744073709551617", 400}, // 2^64+1
		{"99999999999999999999999", 400},
		{"9007199254740993", 400}, // 2^53+1
		{"1e400", 400},
		{"1.5", 400},
		{"-1", 400},
		{"9.3e9", 402},
		{"9.5e9", 402},
		{"18446744073", 402},
		{"2e10", 402},
		{"3e10", 402},
		{"1e11", 402},
		{"9007199254740992", 402}, // 2^53
		{"200000", 402},           // twice the budget, no saturation involved
		{"4096.0", 200},
	} {
		for _, f := range fields {
			if v.text == "-1" && strings.Contains(f.name, "thinking") {
				continue // -1 is a thinking budget the model decides
			}
			for _, api := range []struct{ path, model string }{{f.custom, `"big"`}, {f.v1, `"` + f.model + `"`}} {
				before := received()
				body := strings.NewReplacer("M", api.model, "V", v.text).Replace(f.body)
				resp, got := e.post(t, api.path, body, f.hdr...)
				if resp.StatusCode != v.status {
					t.Errorf("%s = %s on %s: %d %s, want %d", f.name, v.text, api.path, resp.StatusCode, got, v.status)
					continue
				}
				want := map[int]string{400: "InvalidRequest", 402: "BudgetExceeded"}[v.status]
				if v.status != 200 && (errorTag(t, got) != want || jsonField(t, got, "error") == nil) {
					t.Errorf("%s = %s on %s: envelope %s", f.name, v.text, api.path, got)
				}
				if v.status == 400 && strings.HasPrefix(f.name, "anthropic") && jsonField(t, got, "error.type") != "invalid_request_error" {
					t.Errorf("%s = %s: anthropic envelope %s", f.name, v.text, got)
				}
				if sent := received() - before; (v.status == 200) != (sent == 1) || sent > 1 {
					t.Errorf("%s = %s on %s: %d requests reached a provider", f.name, v.text, api.path, sent)
				}
			}
		}
	}
}

// spent reports whether member's budget has spend.
func spent(bs []service.BudgetView, member string) bool {
	for _, v := range bs {
		if v.MemberID == member && v.SpentUSD > 0 {
			return true
		}
	}
	return false
}

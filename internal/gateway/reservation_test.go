package gateway

import (
	"testing"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// A reservation covers the request's own output limit, else the model's,
// else the default, plus a thinking budget that the output limit does not
// count; the body is priced as input at the dearest input rate.
func TestReservation(t *testing.T) {
	cacheWrite := money.Micros(3)
	m := store.Model{Pricing: store.Pricing{Input: 1, Output: 10, CacheWrite: &cacheWrite}}
	for _, c := range []struct {
		name   string
		format formats.Format
		body   string
		model  int64      // the model's max_output_tokens
		output money.Pico // the reserved output tokens; the body is reserved as input at 3
	}{
		{"request limit", formats.Chat, `{"max_tokens":100}`, 0, 10 * 100},
		{"newer limit wins", formats.Chat, `{"max_tokens":100,"max_completion_tokens":7}`, 0, 10 * 7},
		{"model limit", formats.Anthropic, `{"messages":[]}`, 50, 10 * 50},
		{"default", formats.Responses, `{}`, 0, 10 * DefaultMaxOutputTokens},
		{"thinking budget", formats.Google, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":1000}}}`, 0,
			10 * 1010},
		{"thinking budget, snake case", formats.Google, `{"generation_config":{"max_output_tokens":10,"thinking_config":{"thinking_budget":1000}}}`, 0,
			10 * 1010},
	} {
		mm := m
		mm.MaxOutputTokens = c.model
		fs := formats.ScanFields([]byte(c.body), c.format)
		want := 3*money.Pico(len(c.body)) + c.output
		if got := reservation(mm, &fs, len(c.body)); got != want {
			t.Errorf("%s: %d, want %d", c.name, got, want)
		}
	}
}

func TestIsObject(t *testing.T) {
	for body, want := range map[string]bool{`{}`: true, " \n\t{\"a\":1}": true, ` [1]`: false, `"x"`: false, ``: false} {
		if isObject([]byte(body)) != want {
			t.Errorf("isObject(%q) = %v", body, !want)
		}
	}
}

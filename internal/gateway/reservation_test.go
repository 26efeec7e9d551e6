package gateway

import (
	"math"
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

// A bound plus a thinking budget never wraps: unchecked bounds read as
// math.MaxInt64 and the sum saturates there; the reservation of a bound
// no budget holds is capped just over the largest budget limit, never
// wrapped or negative.
func TestReservationSaturates(t *testing.T) {
	m := store.Model{Pricing: store.Pricing{Input: 1, Output: money.Micros(1000 * money.Scale)}}
	for _, body := range []string{
		`{"generationConfig":{"maxOutputTokens":9007199254740993,"thinkingConfig":{"thinkingBudget":4096}}}`,
		`{"generationConfig":{"maxOutputTokens":4096,"thinkingConfig":{"thinkingBudget":9007199254740993}}}`,
		`{"generationConfig":{"maxOutputTokens":18446744073709551617,"thinkingConfig":{"thinkingBudget":18446744073709551617}}}`,
	} {
		fs := formats.ScanFields([]byte(body), formats.Google)
		if got := outputBound(m, &fs); got != math.MaxInt64 {
			t.Errorf("%s: bound %d, want saturated", body, got)
		}
		if got := reservation(m, &fs, len(body)); got != maxReservation {
			t.Errorf("%s: reservation %d, want %d", body, got, maxReservation)
		}
	}
	// Valid bounds at the top of the range: 2^53 + 2^53 fits; the cost
	// does not, and is capped.
	body := `{"generationConfig":{"maxOutputTokens":9007199254740992,"thinkingConfig":{"thinkingBudget":9.007199254740992e15}}}`
	fs := formats.ScanFields([]byte(body), formats.Google)
	if e := (formats.Route{Format: formats.Google}).Check(&fs); e != nil {
		t.Fatal(e)
	}
	if got := outputBound(m, &fs); got != 2*formats.MaxCount {
		t.Errorf("bound %d", got)
	}
	if got := reservation(m, &fs, len(body)); got != maxReservation {
		t.Errorf("reservation %d", got)
	}
	if money.AddSat[int64](math.MaxInt64-1, 2) != math.MaxInt64 || money.AddSat[int64](3, 4) != 7 {
		t.Error("AddSat")
	}
}

// Only a JSON object is a request body.
func TestBodyMustBeAnObject(t *testing.T) {
	for body, want := range map[string]bool{`{}`: true, " \n\t{\"a\":1} ": true, ` [1]`: false, `"x"`: false, ``: false, `{} {}`: false} {
		if _, ok := formats.ScanBody([]byte(body), formats.Chat); ok != want {
			t.Errorf("ScanBody(%q) accepts: %v", body, !want)
		}
	}
}

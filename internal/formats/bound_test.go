package formats

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// boundField is one member of one format that bounds output: body wraps a
// number's text into a request, and extra says the member is a thinking
// budget (read by ExtraOutput, not OutputLimit).
type boundField struct {
	name   string
	format Format
	body   string // with V where the number goes
	extra  bool
	// min is the least count the format's check lets through (Anthropic's
	// max_tokens must be at least 1); minusOne: -1 is let through as 0.
	min      int64
	minusOne bool
}

var boundFields = []boundField{
	{name: "chat max_tokens", format: Chat, body: `{"model":"m","messages":[],"max_tokens":V}`},
	{name: "chat max_completion_tokens", format: Chat, body: `{"model":"m","messages":[],"max_completion_tokens":V}`},
	{name: "responses max_output_tokens", format: Responses, body: `{"model":"m","input":"hi","max_output_tokens":V}`},
	{name: "anthropic max_tokens", format: Anthropic, body: `{"model":"m","messages":[],"max_tokens":V}`, min: 1},
	{name: "google maxOutputTokens", format: Google, body: `{"contents":[],"generationConfig":{"maxOutputTokens":V}}`},
	{name: "google max_output_tokens", format: Google, body: `{"contents":[],"generationConfig":{"max_output_tokens":V}}`},
	{name: "google generation_config", format: Google, body: `{"contents":[],"generation_config":{"maxOutputTokens":V}}`},
	{name: "google snake case", format: Google, body: `{"contents":[],"generation_config":{"max_output_tokens":V}}`},
	{name: "google thinkingBudget", format: Google, body: `{"contents":[],"generationConfig":{"thinkingConfig":{"thinkingBudget":V}}}`,
		extra: true, minusOne: true},
	{name: "google thinking_budget", format: Google, body: `{"contents":[],"generation_config":{"thinking_config":{"thinking_budget":V}}}`,
		extra: true, minusOne: true},
}

// boundValues are number spellings and the count each reads as; -1 marks
// a spelling that is refused whatever the member (a negative other than
// -1 is refused everywhere too).
var boundValues = []struct {
	text string
	want int64
}{
	{"18446744073709551617", -2}, // 2^64+1: gjson's Int() reads 1
	{"99999999999999999999999", -2},
	{"1e11", 100_000_000_000},
	{"3e10", 30_000_000_000},
	{"9.3e9", 9_300_000_000},
	{"18446744073", 18_446_744_073},
	{"1.5", -2},
	{"-1", -1},
	{"-2", -2},
	{"-1.5", -2},
	{"1e400", -2},
	{"-1e400", -2},
	{"1e-400", -2},
	{"4096", 4096},
	{"4096.0", 4096},
	{"4.096e3", 4096},
	{"4096E0", 4096},
	{"409600e-2", 4096},
	{"40960e-1", 4096},
	{"0.4096e4", 4096},
	{"1E+3", 1000},
	{"0", 0},
	{"-0", 0},
	{"0.0", 0},
	{"0e99999999999999999999", 0},
	{"9007199254740992", MaxCount},
	{"9007199254740992.000", MaxCount},
	{"9.007199254740992e15", MaxCount},
	{"9007199254740993", -2},
	{"9007199254740991.5", -2},
	{"1e16", -2},
	{"1e99999999999999999999", -2},
	{"1e-99999999999999999999", -2},
	{"4096.5e1", 40965},
	{"4096.05e1", -2},
}

func TestOutputBounds(t *testing.T) {
	for _, fld := range boundFields {
		for _, v := range boundValues {
			body := strings.Replace(fld.body, "V", v.text, 1)
			if !json.Valid([]byte(body)) {
				t.Fatalf("%s: invalid test body %s", fld.name, body)
			}
			f := ScanFields([]byte(body), fld.format)
			e := Route{Format: fld.format, Op: Generate}.Check(&f)
			want := v.want
			switch {
			case want == -1 && fld.minusOne:
				want = 0
			case want < fld.min:
				want = -2
			}
			if want < 0 {
				if e == nil || e.Status != 400 {
					t.Errorf("%s = %s: admitted (%v), want 400", fld.name, v.text, e)
				}
				continue
			}
			if e != nil {
				t.Errorf("%s = %s: refused: %v", fld.name, v.text, e.Message)
				continue
			}
			got, other := f.OutputLimit(), f.ExtraOutput()
			if fld.extra {
				got, other = other, got
			}
			if got != want || other != 0 {
				t.Errorf("%s = %s: bound %d (other %d), want %d", fld.name, v.text, got, other, want)
			}
		}
	}
}

// The refusal names the member and is in the format's own envelope.
func TestOutputBoundRefusal(t *testing.T) {
	f := ScanFields([]byte(`{"model":"m","max_tokens":18446744073709551617,"messages":[]}`), Anthropic)
	e := Route{Format: Anthropic, Op: Generate}.Check(&f)
	if e == nil || e.Status != 400 || !strings.Contains(e.Message, "max_tokens") {
		t.Fatalf("refusal %+v", e)
	}
	var env struct {
		Type  string                `json:"type"`
		Error struct{ Type string } `json:"error"`
	}
	json.Unmarshal(ErrorBody(Anthropic, e.Status, e.Tag, e.Message, nil), &env)
	if env.Type != "error" || env.Error.Type != "invalid_request_error" {
		t.Fatalf("envelope %+v", env)
	}
	f = ScanFields([]byte(`{"generationConfig":{"thinkingConfig":{"thinkingBudget":1.5}}}`), Google)
	if e := (Route{Format: Google, Op: Generate}).Check(&f); e == nil || !strings.Contains(e.Message, "thinkingBudget") {
		t.Fatalf("thinking budget refusal %+v", e)
	}
}

// Values that are not numbers are not the gateway's to judge: they read
// as no bound, as before, and the provider decides.
func TestOutputBoundNotANumber(t *testing.T) {
	for _, v := range []string{`"4096"`, `"1e400"`, `true`, `null`, `{}`, `[1]`} {
		for _, fld := range boundFields {
			body := strings.Replace(fld.body, "V", v, 1)
			f := ScanFields([]byte(body), fld.format)
			e := Route{Format: fld.format, Op: Generate}.Check(&f)
			if fld.format == Anthropic { // max_tokens is required as a number
				if e == nil {
					t.Errorf("%s = %s admitted", fld.name, v)
				}
				continue
			}
			if e != nil || f.OutputLimit() != 0 || f.ExtraOutput() != 0 {
				t.Errorf("%s = %s: %v, %d, %d", fld.name, v, e, f.OutputLimit(), f.ExtraOutput())
			}
		}
	}
}

// A token count is never reserved: its bounds are left to the provider.
func TestCountTokensBoundsUnchecked(t *testing.T) {
	f := ScanFields([]byte(`{"generationConfig":{"maxOutputTokens":1.5}}`), Google)
	if e := (Route{Format: Google, Op: CountTokens}).Check(&f); e != nil {
		t.Fatal(e)
	}
}

// A bound that Check would refuse, read without it, is more than any
// budget: never wrapped, never negative, never small.
func TestUncheckedBoundSaturates(t *testing.T) {
	for _, v := range []string{"18446744073709551617", "1e400", "-5", "1.5", "9007199254740993"} {
		f := ScanFields([]byte(`{"generationConfig":{"maxOutputTokens":`+v+`,"thinkingConfig":{"thinkingBudget":`+v+`}}}`), Google)
		if f.OutputLimit() != math.MaxInt64 || f.ExtraOutput() != math.MaxInt64 {
			t.Errorf("%s: %d, %d", v, f.OutputLimit(), f.ExtraOutput())
		}
	}
}

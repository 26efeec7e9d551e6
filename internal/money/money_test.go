package money

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Micros
	}{
		{"0", 0},
		{"-0", 0},
		{"0.0", 0},
		{"3", 3_000_000},
		{"2.5", 2_500_000},
		{"2.50", 2_500_000},
		{"2.500000", 2_500_000},
		{"0.000001", 1},
		{"0.000125", 125},
		{"0.1", 100_000},
		{"0.123456", 123_456},
		{"1.000001", 1_000_001},
		{"-1.5", -1_500_000},
		{"-0.000001", -1},
		{"007", 7_000_000},
		{"100000", 100_000 * Scale},
		{"999999999999.999999", 999_999_999_999_999_999},
		{"-999999999999.999999", -999_999_999_999_999_999},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %d, want %d", tt.in, int64(got), int64(tt.want))
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"", "-", ".", "-.", "1.", ".5", "-.5", "1.0000001", "0.0000001", "1e3", "1E3", "1e-3",
		"abc", "+1", "--1", "- 1", " 1", "1 ", "1,5", "1.2.3", "0x10", "1_000", "١", "NaN",
		"Inf", "-Inf", "1.-5", "1.+5", "\x00",
		"1000000000000",                       // 13 integer digits
		"9223372036854775807",                 // MaxInt64
		"99999999999999999999999999999",       // overflows int64
		"-99999999999999999999999999999.5",    // overflows int64
		strings.Repeat("9", 1000),             // absurdly long
		"1." + strings.Repeat("0", 100) + "1", // too many places even if trailing
	} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, int64(got))
		}
	}
}

func TestParseErrorQuotesInput(t *testing.T) {
	_, err := Parse("1.2345678")
	if err == nil || !strings.Contains(err.Error(), `"1.2345678"`) {
		t.Fatalf("error %v does not name the input", err)
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		in   Micros
		want string
	}{
		{0, "0"},
		{1, "0.000001"},
		{125, "0.000125"},
		{100_000, "0.1"},
		{2_500_000, "2.5"},
		{3_000_000, "3"},
		{1_000_001, "1.000001"},
		{123_456_789, "123.456789"},
		{-1, "-0.000001"},
		{-500_000, "-0.5"},
		{-1_500_000, "-1.5"},
		{MaxPrice, "100000"},
		{math.MaxInt64, "9223372036854.775807"},
		{math.MinInt64, "-9223372036854.775808"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Micros(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
	}
}

func TestStringParseRoundTrip(t *testing.T) {
	values := []Micros{0, 1, -1, 9, 10, 99, 100_000, 999_999, 1_000_000, 1_000_001, 2_500_000, -2_500_000,
		123_456_789, MaxPrice, MaxPrice + 1, 999_999_999_999_999_999, -999_999_999_999_999_999}
	for v := Micros(-2_000_003); v <= 2_000_003; v += 7_919 {
		values = append(values, v)
	}
	for _, v := range values {
		s := v.String()
		got, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q) (from %d): %v", s, int64(v), err)
		}
		if got != v {
			t.Fatalf("Parse(String(%d)) = %d via %q", int64(v), int64(got), s)
		}
		if strings.Contains(s, ".") && strings.HasSuffix(s, "0") {
			t.Fatalf("String(%d) = %q has trailing zeros", int64(v), s)
		}
	}
}

func TestMarshalJSON(t *testing.T) {
	type priced struct {
		Input  Micros  `json:"input"`
		Output *Micros `json:"output,omitempty"`
	}
	out := Micros(125)
	b, err := json.Marshal(priced{Input: 2_500_000, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"input":2.5,"output":0.000125}` {
		t.Fatalf("Marshal = %s", b)
	}
	b, err = json.Marshal([]Micros{0, -1_500_000, 3_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `[0,-1.5,3]` {
		t.Fatalf("Marshal = %s", b)
	}
}

func TestUnmarshalJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    Micros
		wantErr bool
	}{
		{`2.5`, 2_500_000, false},
		{`0.000001`, 1, false},
		{`3`, 3_000_000, false},
		{`-1.5`, -1_500_000, false},
		{`0.1`, 100_000, false},
		{` 0.3 `, 300_000, false},
		{`"2.5"`, 0, true},
		{`""`, 0, true},
		{`1e3`, 0, true},
		{`1E-6`, 0, true},
		{`0.0000001`, 0, true},
		{`1.0000001`, 0, true},
		{`true`, 0, true},
		{`{}`, 0, true},
		{`[]`, 0, true},
		{`1000000000000`, 0, true},
		{`-`, 0, true},
		{`01`, 0, true}, // invalid JSON
	}
	for _, tt := range tests {
		var m Micros
		err := json.Unmarshal([]byte(tt.in), &m)
		if tt.wantErr {
			if err == nil {
				t.Errorf("Unmarshal(%s) = %d, want an error", tt.in, int64(m))
			}
			continue
		}
		if err != nil {
			t.Errorf("Unmarshal(%s): %v", tt.in, err)
			continue
		}
		if m != tt.want {
			t.Errorf("Unmarshal(%s) = %d, want %d", tt.in, int64(m), int64(tt.want))
		}
	}
}

func TestUnmarshalJSONStringRefusedMessage(t *testing.T) {
	var m Micros
	err := json.Unmarshal([]byte(`"2.5"`), &m)
	if err == nil || !strings.Contains(err.Error(), "JSON number") {
		t.Fatalf("err = %v, want a message about JSON numbers", err)
	}
	if m != 0 {
		t.Fatalf("value changed to %d on error", int64(m))
	}
}

func TestUnmarshalJSONNull(t *testing.T) {
	m := Micros(42)
	if err := json.Unmarshal([]byte(`null`), &m); err != nil {
		t.Fatal(err)
	}
	if m != 42 {
		t.Fatalf("null changed the value to %d", int64(m))
	}
	var p struct {
		X *Micros `json:"x"`
	}
	if err := json.Unmarshal([]byte(`{"x":null}`), &p); err != nil || p.X != nil {
		t.Fatalf("null pointer: %v, %v", p.X, err)
	}
	if err := json.Unmarshal([]byte(`{"x":0.25}`), &p); err != nil || p.X == nil || *p.X != 250_000 {
		t.Fatalf("pointer: %v, %v", p.X, err)
	}
}

// Amounts are exact: no float ever sits between the JSON text and the integer.
func TestNoFloatDrift(t *testing.T) {
	var v struct{ A, B, C Micros }
	if err := json.Unmarshal([]byte(`{"A":0.1,"B":0.2,"C":0.3}`), &v); err != nil {
		t.Fatal(err)
	}
	want, _ := Parse("0.3")
	if v.A+v.B != want || v.A+v.B != v.C {
		t.Fatalf("0.1 + 0.2 = %d, want %d", int64(v.A+v.B), int64(want))
	}
	// Values a float64 cannot hold exactly survive unchanged.
	for _, s := range []string{"999999999999.999999", "123456789012.345678", "0.000001", "4503599627.370497"} {
		var m Micros
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("Unmarshal(%s): %v", s, err)
		}
		if m.String() != s {
			t.Fatalf("Unmarshal(%s) then String = %s", s, m)
		}
		b, err := json.Marshal(m)
		if err != nil || string(b) != s {
			t.Fatalf("Marshal = %s, %v; want %s", b, err, s)
		}
	}
	// Summing 0.000001 a million times gives exactly 1.
	one, _ := Parse("0.000001")
	var sum Micros
	for i := 0; i < 1_000_000; i++ {
		sum += one
	}
	if sum.String() != "1" {
		t.Fatalf("sum = %s, want 1", sum)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, v := range []Micros{0, 1, -1, 2_500_000, 123_456_789, MaxPrice, -999_999_999_999_999_999} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got Micros
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if got != v {
			t.Fatalf("round trip of %d via %s = %d", int64(v), b, int64(got))
		}
	}
}

func TestValidatePrice(t *testing.T) {
	tests := []struct {
		p       Micros
		wantErr string
	}{
		{0, ""},
		{1, ""},
		{2_500_000, ""},
		{MaxPrice, ""},
		{-1, "negative"},
		{-2_500_000, "negative"},
		{MaxPrice + 1, "above the limit"},
		{math.MaxInt64, "above the limit"},
		{math.MinInt64, "negative"},
	}
	for _, tt := range tests {
		err := ValidatePrice("input", tt.p)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("ValidatePrice(%s): %v", tt.p, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("ValidatePrice(%s) = nil, want an error", tt.p)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "input") {
			t.Errorf("ValidatePrice(%s) = %q, want it to name the price and say %q", tt.p, err, tt.wantErr)
		}
	}
}

func TestConstants(t *testing.T) {
	if Scale != 1_000_000 || Decimals != 6 {
		t.Fatal("Scale and Decimals disagree")
	}
	if MaxPrice.String() != "100000" {
		t.Fatalf("MaxPrice = %s", MaxPrice)
	}
}

func TestPico(t *testing.T) {
	for _, c := range []struct {
		p    Pico
		want string
	}{
		{0, "0"}, {1, "0.000000000001"}, {PicoOf(2_500_000), "2.5"}, {Pico(52_500_000), "0.0000525"}, {-PicoOf(1), "-0.000001"},
		{Pico(1_000_000_000_000), "1"}, {Pico(-10), "-0.00000000001"}, {Pico(100_000_000_000_001), "100.000000000001"},
		{Pico(math.MaxInt64), "9223372.036854775807"}, {Pico(math.MinInt64), "-9223372.036854775808"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%d: %s, want %s", c.p, got, c.want)
		}
	}
	var p Pico
	if err := p.UnmarshalJSON([]byte("12.34")); err != nil || p != PicoOf(12_340_000) {
		t.Fatalf("%v %v", p, err)
	}
	if err := p.UnmarshalJSON([]byte(`"1"`)); err == nil {
		t.Fatal("a string amount was accepted")
	}
	// 1,000,000 requests of 1,234 tokens at 2.5 USD per million: exact.
	var sum Pico
	for i := 0; i < 1_000_000; i++ {
		sum += Pico(1234) * Pico(2_500_000)
	}
	if sum.String() != "3085" {
		t.Fatalf("sum %s", sum)
	}
}

// The largest budget (one million dollars) and spend above it round-trip
// through JSON; amounts that do not fit an int64 are refused, not wrapped.
func TestPicoLargeAmounts(t *testing.T) {
	for _, p := range []Pico{MaxSpend, MaxSpend + 1, 9_000_000 * 1_000_000_000_000} {
		b, _ := p.MarshalJSON()
		var back Pico
		if err := back.UnmarshalJSON(b); err != nil || back != p {
			t.Fatalf("%s: %v %v", b, back, err)
		}
	}
	var p Pico
	if err := p.UnmarshalJSON([]byte("9300000")); err == nil {
		t.Fatal("an amount past int64 was accepted")
	}
}

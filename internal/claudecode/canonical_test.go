package claudecode

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCanonicalDetails(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{map[string]any{"b": "<>&", "a": "\u2028"}, `{"a":"` + "\u2028" + `","b":"<>&"}`},
		{map[string]any{"10": 1, "9": 2, "x": 3, "01": 4}, `{"9":2,"10":1,"01":4,"x":3}`},
		{[]any{json.Number("-0"), json.Number("1e21"), json.Number("1e-7"), json.Number("0.1"), 2.5, int64(7)}, `[0,1e+21,1e-7,0.1,2.5,7]`},
		{map[string]string{"\uff01": "a", "😀": "b"}, `{"😀":"b","！":"a"}`}, // U+1F600 is D83D DE00 in UTF-16, before FF01
		{"\x01\x7f", `"\u0001` + "\x7f" + `"`},
		{[]string{}, `[]`},
	} {
		got, err := Canonical(tc.in)
		if err != nil {
			t.Fatalf("Canonical(%v): %v", tc.in, err)
		}
		if string(got) != tc.want {
			t.Errorf("Canonical(%#v) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, bad := range []any{struct{}{}, json.Number("1e400"), "\xff"} {
		if _, err := Canonical(bad); err == nil {
			t.Errorf("Canonical(%#v) succeeded, want an error", bad)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": 1, "a": 2}`, `"a" appears twice`},
		{`{"a": {"b": 1, "b": 1}}`, `"b" appears twice`},
		{`{"a": 1} {}`, "unexpected data"},
		{`{"a": 1e999}`, "out of range"},
		{`{"a": `, "unexpected end"},
		{`{"a" 1}`, "malformed JSON"},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), "nested deeper"},
	} {
		if _, err := Parse([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
	if _, err := Parse([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth))); err != nil {
		t.Errorf("Parse at the depth bound: %v", err)
	}
}

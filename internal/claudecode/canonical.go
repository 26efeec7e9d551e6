// Package claudecode is what agentgate knows of the Claude Code CLI's
// settings: the canonical JSON its managed-settings checksum is computed
// over (canonical.go), the settings document a workspace owner writes and
// what it may hold (document.go), and how its permission rules read as
// OpenCode permission rules (opencode.go). It has no Caddy import and no
// store: the service builds what a member receives from it.
package claudecode

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The Claude Code CLI checks the settings it receives against the checksum
// it is sent (and sends the same value back in If-None-Match): "sha256:"
// and the hex SHA-256 of JSON.stringify applied to the settings after the
// keys of every object were sorted (Object.keys(o).sort(), then inserted
// into a new object). So the canonical form is what a JavaScript engine
// prints for that object:
//
//   - no whitespace;
//   - keys that are array indexes ("0", "7", "4294967294": canonical
//     decimal integers below 2^32-1) first, in numeric order, as every
//     JavaScript object orders them, then the other keys in the order of
//     their UTF-16 code units (what Array.prototype.sort compares);
//   - strings escaped as JSON.stringify escapes them: '"', '\' and the
//     control characters below U+0020 (\b \t \n \f \r by name, the others
//     as \u00xx in lower case), every other character as itself — no
//     HTML escaping of < > &, and U+2028 and U+2029 as themselves;
//   - numbers as JavaScript prints a double: the shortest decimal that
//     reads back the same, in exponent form below 1e-6 and from 1e21, and
//     0 for -0.
//
// Go's encoding/json differs on three of these (it escapes < > & and
// U+2028/U+2029, sorts keys by their UTF-8 bytes, and prints -0), hence
// this encoder.

// Checksum is the checksum of settings as the Claude Code CLI computes it:
// "sha256:" and the hex SHA-256 of Canonical(settings).
func Checksum(settings any) (string, error) {
	b, err := Canonical(settings)
	if err != nil {
		return "", err
	}
	return ChecksumOf(b), nil
}

// ChecksumOf is the checksum of settings already in canonical form.
func ChecksumOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Canonical encodes v in the canonical form. v is made of nil, bool,
// string, json.Number, float64, int, int64, []any, []string,
// map[string]any and map[string]string (what Parse returns, and what the
// service builds). A number that is not finite, a string that is not
// UTF-8, or another type is an error.
func Canonical(v any) ([]byte, error) {
	return appendValue(make([]byte, 0, 256), v)
}

func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case string:
		return appendString(b, x)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s is out of range", x)
		}
		return appendNumber(b, f)
	case float64:
		return appendNumber(b, x)
	case int:
		return appendNumber(b, float64(x))
	case int64:
		return appendNumber(b, float64(x))
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case []string:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendString(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		return appendObject(b, keysOf(x), func(b []byte, k string) ([]byte, error) { return appendValue(b, x[k]) })
	case map[string]string:
		return appendObject(b, keysOf(x), func(b []byte, k string) ([]byte, error) { return appendString(b, x[k]) })
	}
	return nil, fmt.Errorf("cannot encode a %T", v)
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func appendObject(b []byte, keys []string, value func([]byte, string) ([]byte, error)) ([]byte, error) {
	SortKeys(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendString(b, k); err != nil {
			return nil, err
		}
		b = append(b, ':')
		if b, err = value(b, k); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// SortKeys orders an object's keys as the canonical form has them: array
// indexes in numeric order, then the rest by UTF-16 code units.
func SortKeys(keys []string) {
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
}

func keyLess(a, b string) bool {
	ia, aIndex := arrayIndex(a)
	ib, bIndex := arrayIndex(b)
	switch {
	case aIndex && bIndex:
		return ia < ib
	case aIndex != bIndex:
		return aIndex
	}
	return utf16Less(a, b)
}

// arrayIndex reports whether k is a canonical array index (0 to 2^32-2)
// and its value.
func arrayIndex(k string) (uint64, bool) {
	if k == "" || len(k) > 10 || (k[0] == '0' && len(k) > 1) {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n <= math.MaxUint32-1
}

// utf16Less compares two strings by their UTF-16 code units.
func utf16Less(a, b string) bool {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := units(ra), units(rb)
			for i := 0; i < len(ua) && i < len(ub); i++ {
				if ua[i] != ub[i] {
					return ua[i] < ub[i]
				}
			}
			return len(ua) < len(ub)
		}
		a, b = a[na:], b[nb:]
	}
	return a == "" && b != ""
}

func units(r rune) []uint16 {
	if r >= 0x10000 {
		r1, r2 := utf16.EncodeRune(r)
		return []uint16{uint16(r1), uint16(r2)}
	}
	return []uint16{uint16(r)}
}

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, errors.New("a string is not valid UTF-8")
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), nil
}

// appendNumber prints f as JavaScript's Number.prototype.toString does.
func appendNumber(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, errors.New("a number is not finite")
	}
	if f == 0 {
		return append(b, '0'), nil // -0 too
	}
	format := byte('f')
	if abs := math.Abs(f); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Go writes e-07 where JavaScript writes e-7.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// MaxDepth bounds the nesting of a parsed document.
const MaxDepth = 32

// Parse reads one JSON value strictly: numbers are kept as json.Number,
// objects become map[string]any, and a key repeated in an object is an
// error (JavaScript keeps the last copy, other readers the first: the
// document would mean two things). Nesting deeper than MaxDepth, trailing
// data, and numbers out of a double's range are errors too.
func Parse(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return nil, fmt.Errorf("the JSON is nested deeper than %d levels", MaxDepth)
		}
		if t == '[' {
			out := []any{}
			for dec.More() {
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, syntaxError(err)
		}
		out := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, syntaxError(err)
			}
			k := kt.(string)
			if _, dup := out[k]; dup {
				return nil, fmt.Errorf("the key %q appears twice in one object", k)
			}
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		_, err := dec.Token()
		return out, syntaxError(err)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("the number %s is out of range", t)
		}
		return t, nil
	}
	return tok, nil
}

func syntaxError(err error) error {
	if err == nil {
		return nil
	}
	if err == io.EOF {
		return errors.New("malformed JSON: unexpected end of input")
	}
	return fmt.Errorf("malformed JSON: %v", err)
}

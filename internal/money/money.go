// Package money holds exact decimal amounts of US dollars as integers.
//
// Prices are USD per one million tokens with at most six decimal places, so a
// price is an integer count of micro-dollars per million tokens, which is the
// same number as pico-dollars per token.
package money

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Scale is the number of units in one US dollar.
const Scale = 1_000_000

// Decimals is the number of decimal places kept.
const Decimals = 6

// MaxPrice is the largest accepted price: 100,000 USD per million tokens.
// Anything above it is a configuration mistake (a price given per token
// instead of per million, say).
const MaxPrice = Micros(100_000 * Scale)

// Micros is an amount of micro-dollars (1e-6 USD). In JSON it is a decimal
// number of dollars, e.g. 2.5 for 2_500_000 micros, and it is parsed exactly,
// never through a float.
type Micros int64

// Parse reads a decimal number of dollars such as "2.50", "0.000125" or "3".
// Exponents, more than six decimal places, signs other than a leading minus
// and non-digits are rejected.
func Parse(s string) (Micros, error) {
	v, err := parseDecimal(s, Decimals, 12)
	return Micros(v), err
}

// parseDecimal reads a plain decimal number with at most decimals places and
// intDigits integer digits, scaled by 10^decimals.
func parseDecimal(s string, decimals, intDigits int) (int64, error) {
	orig := s
	if s == "" {
		return 0, errors.New("empty amount")
	}
	neg := false
	if s[0] == '-' {
		neg, s = true, s[1:]
	}
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && frac == "") || !digits(intPart) || !digits(frac) {
		return 0, fmt.Errorf("%q is not a plain decimal number", orig)
	}
	if len(frac) > decimals {
		return 0, fmt.Errorf("%q has more than %d decimal places", orig, decimals)
	}
	if len(strings.TrimLeft(intPart, "0")) > intDigits {
		return 0, fmt.Errorf("%q is too large", orig)
	}
	whole, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %v", orig, err)
	}
	scale := int64(1)
	for i := 0; i < decimals; i++ {
		scale *= 10
	}
	frac += strings.Repeat("0", decimals-len(frac))
	f, _ := strconv.ParseInt(frac, 10, 64)
	// The magnitude is bounded in uint64: a negative amount reaches one
	// further than a positive one, so every int64 (math.MinInt64 too, a
	// saturated amount's floor) reads back what String wrote.
	bound := uint64(math.MaxInt64)
	if neg {
		bound++
	}
	if uint64(whole) > (bound-uint64(f))/uint64(scale) {
		return 0, fmt.Errorf("%q is too large", orig)
	}
	v := uint64(whole)*uint64(scale) + uint64(f)
	if neg {
		return -int64(v), nil
	}
	return int64(v), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats the amount as a decimal number of dollars with no trailing
// zeros: 2.5, 0.000125, 3.
func (m Micros) String() string {
	neg := m < 0
	u := uint64(m)
	if neg {
		u = uint64(-m)
	}
	s := strconv.FormatUint(u/Scale, 10)
	if f := u % Scale; f != 0 {
		fs := fmt.Sprintf("%06d", f)
		s += "." + strings.TrimRight(fs, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// MarshalJSON writes the amount as a JSON number of dollars.
func (m Micros) MarshalJSON() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalJSON reads a JSON number of dollars exactly. Strings are refused.
func (m *Micros) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) > 0 && s[0] == '"' {
		return errors.New("an amount must be a JSON number, not a string")
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	v, err := Parse(n.String())
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ValidatePrice rejects negative and absurd prices.
func ValidatePrice(name string, p Micros) error {
	if p < 0 {
		return fmt.Errorf("price %s is negative (%s)", name, p)
	}
	if p > MaxPrice {
		return fmt.Errorf("price %s is %s USD per million tokens, above the limit of %s: prices are per million tokens", name, p, MaxPrice)
	}
	return nil
}

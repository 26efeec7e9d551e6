package money

import (
	"errors"
	"strconv"
	"strings"
)

// PicoPerMicro is the number of pico-dollars in a micro-dollar.
const PicoPerMicro = 1_000_000

// Pico is an amount of pico-dollars (1e-12 USD): the unit of costs and spend.
// A price of P micro-dollars per million tokens is exactly P pico-dollars
// per token, so the cost of T tokens is T×P pico-dollars with no rounding.
// An int64 holds up to about 9.2 million dollars.
type Pico int64

// MaxSpend is the largest budget limit accepted: one million dollars.
const MaxSpend = Pico(1_000_000 * Scale * PicoPerMicro)

// PicoOf converts micro-dollars to pico-dollars.
func PicoOf(m Micros) Pico { return Pico(m) * PicoPerMicro }

// String formats the amount as a decimal number of dollars, up to twelve
// decimal places, without trailing zeros.
func (p Pico) String() string {
	neg := p < 0
	u := uint64(p)
	if neg {
		u = uint64(-p)
	}
	const unit = 1_000_000_000_000
	s := strconv.FormatUint(u/unit, 10)
	if f := u % unit; f != 0 {
		fs := strconv.FormatUint(f, 10)
		fs = strings.Repeat("0", 12-len(fs)) + fs
		s += "." + strings.TrimRight(fs, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// MarshalJSON writes the amount as a JSON number of dollars.
func (p Pico) MarshalJSON() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalJSON reads a JSON number of dollars with up to twelve decimal
// places. Strings and null are refused.
func (p *Pico) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" || (len(s) > 0 && s[0] == '"') {
		return errors.New("an amount must be a JSON number")
	}
	v, err := parseDecimal(s, 12, 7)
	if err != nil {
		return err
	}
	*p = Pico(v)
	return nil
}

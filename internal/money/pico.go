package money

import (
	"errors"
	"strconv"
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

// PicoOf converts micro-dollars to pico-dollars; an amount past what Pico
// holds saturates (MulSat).
func PicoOf(m Micros) Pico { return MulSat(Pico(m), PicoPerMicro) }

// String formats the amount as a decimal number of dollars, up to twelve
// decimal places, without trailing zeros.
func (p Pico) String() string { return string(p.Append(nil)) }

// Append appends the amount as String formats it.
func (p Pico) Append(b []byte) []byte {
	u := uint64(p)
	if p < 0 {
		b = append(b, '-')
		u = uint64(-p)
	}
	const unit = 1_000_000_000_000
	b = strconv.AppendUint(b, u/unit, 10)
	if f := u % unit; f != 0 {
		var d [12]byte
		for i := len(d) - 1; i >= 0; i-- {
			d[i] = byte('0' + f%10)
			f /= 10
		}
		n := len(d)
		for d[n-1] == '0' {
			n--
		}
		b = append(append(b, '.'), d[:n]...)
	}
	return b
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

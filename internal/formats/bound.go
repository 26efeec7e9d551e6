package formats

import (
	"math"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
)

// MaxCount is the largest token count the gateway reads from a request
// (an output bound or a thinking budget): 2^53, the largest integer up to
// which every integer has an exact float64, so that the provider's parser,
// whatever it decodes numbers into, reads the same count as the gateway.
// A larger count is refused rather than read as something else.
const MaxCount = 1 << 53

// wholeNumber reads JSON number text exactly, never through a float: ok
// when it is a whole number of magnitude at most MaxCount, in any
// spelling (4096, 4096.0, 4.096e3, 409600e-2; -0 is 0). A fraction, a
// larger magnitude or text that is not a JSON number is not ok.
func wholeNumber(s string) (n int64, ok bool) {
	i := 0
	neg := i < len(s) && s[i] == '-'
	if neg {
		i++
	}
	intStart := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[intStart:i]
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return 0, false
	}
	var frac string
	if i < len(s) && s[i] == '.' {
		i++
		fracStart := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if frac = s[fracStart:i]; frac == "" {
			return 0, false
		}
	}
	// exp is the exponent, saturated far beyond any that could leave a
	// count in range (a body is smaller than a billion digits).
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		expNeg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			expNeg = s[i] == '-'
			i++
		}
		expStart := i
		for ; i < len(s) && isDigit(s[i]); i++ {
			if exp < 1e9 {
				exp = exp*10 + int(s[i]-'0')
			}
		}
		if i == expStart {
			return 0, false
		}
		if expNeg {
			exp = -exp
		}
	}
	if i != len(s) {
		return 0, false
	}
	// The digits of intPart and frac read as one integer D; the value is
	// D × 10^(exp − len(frac)). first and last are D's outermost nonzero
	// digits.
	nd := len(intPart) + len(frac)
	digit := func(k int) byte {
		if k < len(intPart) {
			return intPart[k]
		}
		return frac[k-len(intPart)]
	}
	first, last := -1, -1
	for k := 0; k < nd; k++ {
		if digit(k) != '0' {
			if first < 0 {
				first = k
			}
			last = k
		}
	}
	if first < 0 {
		return 0, true // zero, however spelled
	}
	// value = sig × 10^e, sig the digits first..last.
	e := exp - len(frac) + (nd - 1 - last)
	sigDigits := last - first + 1
	if e < 0 || sigDigits+e > 16 { // a fraction, or at least 10^16 > MaxCount
		return 0, false
	}
	var v uint64
	for k := first; k <= last; k++ {
		v = v*10 + uint64(digit(k)-'0')
	}
	for ; e > 0; e-- {
		v *= 10
	}
	if v > MaxCount {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// countOf reads a member that counts tokens. A member that is absent or
// not a number counts 0 and is no refusal: the gateway does not read it,
// and the provider refuses it or reads it as no bound. A number must be a
// whole count from 0 to MaxCount in any JSON spelling; minusOne also lets
// -1 through (a "let the model decide" value), counted as 0. bad is
// whether the number is refused.
func countOf(v gjson.Result, minusOne bool) (n int64, bad bool) {
	if v.Type != gjson.Number {
		return 0, false
	}
	n, ok := wholeNumber(v.Raw)
	switch {
	case !ok:
		return 0, true
	case n == -1 && minusOne:
		return 0, false
	case n < 0:
		return 0, true
	}
	return n, false
}

// count is a member's token count for a reservation: a refused number
// (which Route.Check turns away before any reservation) counts as
// math.MaxInt64, more than any budget holds.
func count(v gjson.Result, minusOne bool) int64 {
	n, bad := countOf(v, minusOne)
	if bad {
		return math.MaxInt64
	}
	return n
}

// checkCount refuses a member that counts tokens but is not a whole count
// from 0 to MaxCount (see countOf); name is the member's name as the
// client spelled it.
func checkCount(v gjson.Result, name string, minusOne bool) *apierr.Error {
	if _, bad := countOf(v, minusOne); bad {
		if minusOne {
			return apierr.BadRequest("%s must be -1 or a whole number from 0 to %d", name, MaxCount)
		}
		return apierr.BadRequest("%s must be a whole number from 0 to %d", name, MaxCount)
	}
	return nil
}

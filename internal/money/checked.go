package money

import "math"

// Saturated is the amount an overflowing sum or product of money (or of
// token counts) comes to: more than any budget or limit can hold, so a
// request whose bound saturates is refused, never admitted as a wrapped,
// small or negative amount.
const Saturated = Pico(math.MaxInt64)

// Int64 is any of the integer amounts summed and multiplied exactly: Pico,
// Micros, and token counts.
type Int64 interface{ ~int64 }

// Add returns a+b and true, or false when the sum does not fit an int64.
func Add[T Int64](a, b T) (T, bool) {
	s := a + b
	// The sum overflowed when both operands have one sign and the result
	// has the other.
	return s, (s > a) == (b > 0)
}

// Sub returns a−b and true, or false when the difference does not fit an
// int64.
func Sub[T Int64](a, b T) (T, bool) {
	d := a - b
	return d, (d < a) == (b > 0)
}

// Mul returns a×b and true, or false when the product does not fit an
// int64.
func Mul[T Int64](a, b T) (T, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	p := a * b
	if (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) || p/b != a {
		return p, false
	}
	return p, true
}

// AddSat returns a+b, or the int64 bound on the side it overflowed:
// math.MaxInt64 (Saturated) past the top, math.MinInt64 past the bottom.
func AddSat[T Int64](a, b T) T {
	s, ok := Add(a, b)
	if ok {
		return s
	}
	return satSign[T](b > 0)
}

// SubSat returns a−b, or the int64 bound on the side it overflowed.
func SubSat[T Int64](a, b T) T {
	d, ok := Sub(a, b)
	if ok {
		return d
	}
	return satSign[T](b < 0)
}

// MulSat returns a×b, or the int64 bound on the side it overflowed.
func MulSat[T Int64](a, b T) T {
	p, ok := Mul(a, b)
	if ok {
		return p
	}
	return satSign[T]((a < 0) == (b < 0))
}

// Charge adds a cost to settled spend: a negative cost, which only an
// overflowing computation can produce, counts as Saturated, and a sum past
// the top saturates, so that spend never wraps to a small or negative
// amount and the member is refused until the period resets.
func Charge(spent, cost Pico) Pico {
	if cost < 0 {
		cost = Saturated
	}
	return AddSat(spent, cost)
}

func satSign[T Int64](up bool) T {
	if up {
		return math.MaxInt64
	}
	return math.MinInt64
}

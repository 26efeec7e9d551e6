package money

import (
	"math"
	"math/big"
	"testing"
)

var extremes = []int64{0, 1, -1, 2, -2, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1,
	math.MaxInt64 / 2, math.MinInt64 / 2, 3037000499, 3037000500, -3037000500, int64(MaxSpend), int64(MaxSpend) + 1}

// clamp is the int64 a saturating operation must give for the exact result r.
func clamp(r *big.Int) (int64, bool) {
	switch {
	case r.Cmp(big.NewInt(math.MaxInt64)) > 0:
		return math.MaxInt64, false
	case r.Cmp(big.NewInt(math.MinInt64)) < 0:
		return math.MinInt64, false
	}
	return r.Int64(), true
}

func checkOps(t *testing.T, a, b int64) {
	t.Helper()
	A, B := big.NewInt(a), big.NewInt(b)
	for _, op := range []struct {
		name  string
		exact *big.Int
		chk   func(int64, int64) (int64, bool)
		sat   func(int64, int64) int64
	}{
		{"add", new(big.Int).Add(A, B), Add[int64], AddSat[int64]},
		{"sub", new(big.Int).Sub(A, B), Sub[int64], SubSat[int64]},
		{"mul", new(big.Int).Mul(A, B), Mul[int64], MulSat[int64]},
	} {
		want, fits := clamp(op.exact)
		got, ok := op.chk(a, b)
		if ok != fits || (ok && got != want) {
			t.Fatalf("%s(%d, %d) = %d, %v; exact %s", op.name, a, b, got, ok, op.exact)
		}
		if got := op.sat(a, b); got != want {
			t.Fatalf("%s saturating (%d, %d) = %d, want %d (exact %s)", op.name, a, b, got, want, op.exact)
		}
	}
}

func TestCheckedExtremes(t *testing.T) {
	for _, a := range extremes {
		for _, b := range extremes {
			checkOps(t, a, b)
			checkOps(t, -a, b)
		}
	}
}

func TestCheckedTypes(t *testing.T) {
	if s, ok := Add(Pico(math.MaxInt64-5), Pico(6)); ok {
		t.Fatalf("Add of Pico overflowed to %d unnoticed", s)
	}
	if got := AddSat(Pico(5), Pico(math.MaxInt64)); got != Saturated {
		t.Fatalf("AddSat = %d, want Saturated", got)
	}
	if got := MulSat(Micros(MaxPrice), Micros(math.MaxInt64/1000)); got != math.MaxInt64 {
		t.Fatalf("MulSat of Micros = %d", got)
	}
	// 2,000 tokens of output at 1,000 USD per million tokens, after a
	// spend of 1 USD, is 3 USD; a bound near MaxInt64 saturates.
	price := PicoOf(1000*Scale) / 1_000_000
	if got := AddSat(PicoOf(Scale), MulSat(price, 2000)); got != PicoOf(3*Scale) {
		t.Fatalf("cost = %s", got)
	}
	if got := AddSat(PicoOf(Scale), MulSat(price, math.MaxInt64-7)); got != Saturated {
		t.Fatalf("huge cost = %s, want Saturated", got)
	}
}

func TestCharge(t *testing.T) {
	for _, tt := range []struct{ spent, cost, want Pico }{
		{0, 0, 0},
		{5, 7, 12},
		{PicoOf(Scale), Saturated - 10, Saturated},
		{Saturated, 1, Saturated},
		{10, -1, Saturated}, // a wrapped (negative) cost charges everything
		{10, math.MinInt64, Saturated},
	} {
		if got := Charge(tt.spent, tt.cost); got != tt.want {
			t.Errorf("Charge(%d, %d) = %d, want %d", tt.spent, tt.cost, got, tt.want)
		}
	}
}

func TestCheckedNoAllocs(t *testing.T) {
	a, b := Pico(math.MaxInt64-1), Pico(3)
	var sink Pico
	if n := testing.AllocsPerRun(100, func() {
		sink = AddSat(a, b) + MulSat(a, b) + SubSat(b, a)
		if _, ok := Add(a, b); ok {
			sink++
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	_ = sink
}

func FuzzChecked(f *testing.F) {
	for _, a := range extremes {
		for _, b := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64} {
			f.Add(a, b)
		}
	}
	f.Fuzz(checkOps)
}

func BenchmarkAddSat(b *testing.B) {
	x := Pico(1)
	for i := 0; i < b.N; i++ {
		x = AddSat(x, Pico(i))
	}
	_ = x
}

// Every Pico, the saturated bounds included, reads back what it writes.
func TestPicoJSONRoundTripExtremes(t *testing.T) {
	for _, v := range []Pico{Saturated, math.MinInt64, math.MinInt64 + 1, math.MaxInt64 - 1, -1, 0, MaxSpend} {
		var got Pico
		b, _ := v.MarshalJSON()
		if err := got.UnmarshalJSON(b); err != nil || got != v {
			t.Errorf("%d: wrote %s, read %d (%v)", int64(v), b, int64(got), err)
		}
	}
	var p Pico
	if err := p.UnmarshalJSON([]byte("-9223372.036854775809")); err == nil {
		t.Errorf("one past MinInt64 read as %d", int64(p))
	}
	if err := p.UnmarshalJSON([]byte("9223372.036854775808")); err == nil {
		t.Errorf("one past MaxInt64 read as %d", int64(p))
	}
}

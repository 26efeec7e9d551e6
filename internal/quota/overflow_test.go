package quota

import (
	"math"
	"math/big"
	"testing"

	"github.com/agentgate/agentgate/internal/clock"
)

// A token reservation near MaxInt64 after a small one is refused: the sum
// saturates instead of wrapping to a small count; so is a negative one
// (what an overflowing bound gives).
func TestHugeTokenReservationRefused(t *testing.T) {
	clk := clock.NewFake(t0)
	for _, lim := range []int64{1000, math.MaxInt64 - 10} {
		l := new(Limiter)
		lims := []Limit{{Tokens: lim}}
		if _, r := l.Admit(clk.Now(), []string{"k"}, lims, 100); r != nil {
			t.Fatal(r)
		}
		for _, reserve := range []int64{math.MaxInt64, math.MaxInt64 - 50, math.MaxInt64 - 99, -1, math.MinInt64} {
			if tk, r := l.Admit(clk.Now(), []string{"k"}, lims, reserve); r == nil || !r.ByTokens {
				t.Fatalf("limit %d: %d more tokens admitted (%v)", lim, reserve, tk)
			}
		}
		// The refusals counted nothing: the room is still there.
		if _, r := l.Admit(clk.Now(), []string{"k"}, lims, lim-100); r != nil {
			t.Fatalf("limit %d: the room left is refused: %+v", lim, r)
		}
	}
}

// A key without a token bound counts a huge reservation saturated, never
// wrapped: a bound that applies to it later in the window refuses.
func TestUnboundedTokenCountSaturates(t *testing.T) {
	clk := clock.NewFake(t0)
	l := new(Limiter)
	free := []Limit{{Requests: 100}}
	for range 3 {
		if _, r := l.Admit(clk.Now(), []string{"k"}, free, math.MaxInt64-1); r != nil {
			t.Fatal(r)
		}
	}
	if tk, r := l.Admit(clk.Now(), []string{"k"}, []Limit{{Tokens: 1000}}, 1); r == nil || r.Tokens != math.MaxInt64 {
		t.Fatalf("admitted (%v) beside a saturated count: %+v", tk, r)
	}
}

// Settling a huge (or negative, wrapped) token count saturates the window
// for the rest of the minute instead of wrapping it.
func TestHugeTokenSettlementSaturates(t *testing.T) {
	for _, used := range []int64{math.MaxInt64, math.MaxInt64 - 50, -1} {
		clk := clock.NewFake(t0)
		l := new(Limiter)
		lims := []Limit{{Tokens: 1000}}
		a, r := l.Admit(clk.Now(), []string{"k"}, lims, 100)
		if r != nil {
			t.Fatal(r)
		}
		b, r := l.Admit(clk.Now(), []string{"k"}, lims, 100)
		if r != nil {
			t.Fatal(r)
		}
		l.Settle(a, used)
		l.Settle(b, 0)
		if tk, r := l.Admit(clk.Now(), []string{"k"}, lims, 1); r == nil || r.Tokens != math.MaxInt64 {
			t.Fatalf("used %d: admitted (%v) after a saturated settlement: %+v", used, tk, r)
		}
	}
}

// checkAdmit holds Admit to the exact sum: a token bound never admits a
// window past it, and admits whatever fits when nothing is negative.
func checkAdmit(t *testing.T, limit, first, reserve int64) {
	if limit <= 0 {
		return // no bound
	}
	l := new(Limiter)
	lims := []Limit{{Tokens: limit}}
	_, r1 := l.Admit(t0, []string{"k"}, lims, first)
	counted := new(big.Int)
	if r1 == nil {
		counted.SetInt64(first)
		if first < 0 || first > limit { // a negative one is more than any limit
			t.Fatalf("limit %d: admitted a first reservation of %d", limit, first)
		}
	}
	_, r2 := l.Admit(t0, []string{"k"}, lims, reserve)
	sum := new(big.Int).Add(counted, big.NewInt(reserve))
	fits := reserve >= 0 && sum.Cmp(big.NewInt(limit)) <= 0
	if (r2 == nil) != fits {
		t.Fatalf("limit %d, counted %s, reserve %d: refusal %+v, want fits=%v", limit, counted, reserve, r2, fits)
	}
}

func FuzzAdmit(f *testing.F) {
	for _, v := range []int64{0, 1, -1, 100, math.MaxInt64, math.MaxInt64 - 99, math.MinInt64} {
		f.Add(int64(1000), int64(100), v)
		f.Add(int64(math.MaxInt64), v, v)
	}
	f.Fuzz(checkAdmit)
}

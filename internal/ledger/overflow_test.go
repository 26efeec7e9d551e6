package ledger

import (
	"errors"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// hugeAmounts are reservations that wrap around int64 when added to a
// small spend (one dollar) and would look small, or negative, if summed
// unchecked; a negative amount is what an overflowing estimate gives.
var hugeAmounts = []money.Pico{
	math.MaxInt64,
	math.MaxInt64 - usd("1") + 1,
	math.MaxInt64 - usd("0.5"),
	math.MaxInt64/2 + 1,
	-1,
	math.MinInt64,
}

func wantExceeded(t *testing.T, what string, r *Reservation, err error) {
	t.Helper()
	var ee *ExceededError
	if !errors.As(err, &ee) {
		if r != nil {
			r.Release()
		}
		t.Fatalf("%s: admitted (%v), want the budget's refusal", what, err)
	}
	if ee.Remaining < 0 || ee.Remaining > ee.Limit {
		t.Fatalf("%s: remaining %s of %s", what, ee.Remaining, ee.Limit)
	}
}

// With 100 USD, a request bound at 2,000 tokens over the budget is refused,
// and so is any reservation that wraps around int64 after a small spend,
// on a single node's fast path.
func TestHugeReservationRefused(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(st, clk)
	defer l.Close()
	if _, err := l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("100"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	r, err := l.Reserve(ctx, "w", "m", usd("1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, record(clk, "w", "m", usd("1"))); err != nil {
		t.Fatal(err)
	}
	// 1,000 USD per million tokens is 10⁹ pico-dollars per token: 100,000
	// tokens are the whole budget.
	over := money.MulSat(money.Pico(100_000+2_000), 1_000_000_000)
	r, err = l.Reserve(ctx, "w", "m", over)
	wantExceeded(t, "2,000 tokens over", r, err)
	for _, a := range hugeAmounts {
		r, err := l.Reserve(ctx, "w", "m", a)
		wantExceeded(t, a.String(), r, err)
	}
	// A small reservation in flight, then a huge one.
	small, err := l.Reserve(ctx, "w", "m", usd("2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hugeAmounts {
		r, err := l.Reserve(ctx, "w", "m", a)
		wantExceeded(t, "in flight, "+a.String(), r, err)
	}
	small.Release()
	st1, _ := l.Status(ctx, "w", "m")
	if st1.Reserved != 0 || st1.Budget.Spent != usd("1") {
		t.Fatalf("refusals left reserved %s, spent %s", st1.Reserved, st1.Budget.Spent)
	}
	if r, err := l.Reserve(ctx, "w", "m", usd("99")); err != nil {
		t.Fatalf("the room left is refused: %v", err)
	} else {
		r.Release()
	}
}

// A member without a budget is admitted whatever it may cost, but the
// ledger never wraps its sum of reservations in flight.
func TestUnlimitedReservationsNeverWrap(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	l := New(st, clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)))
	defer l.Close()
	r, err := l.Reserve(ctx, "w", "free", math.MaxInt64-5)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Reserve(ctx, "w", "free", 6)
	wantExceeded(t, "past int64 in flight", r2, err)
	r.Release()
	if r, err := l.Reserve(ctx, "w", "free", 6); err != nil {
		t.Fatal(err)
	} else {
		r.Release()
	}
	if st, _ := l.Status(ctx, "w", "free"); st.Reserved != 0 {
		t.Fatalf("reserved %s after releases", st.Reserved)
	}
}

// A settlement of a huge cost saturates spend (more than any budget), never
// wraps it to negative spend, in memory, in the store and when a budget's
// spend is recomputed from the usage records; a negative cost (only an
// overflowing computation gives one) charges as much.
func TestHugeSettlementSaturates(t *testing.T) {
	for _, cost := range []money.Pico{math.MaxInt64, math.MaxInt64 - usd("1") + 1, -1, -usd("2")} {
		t.Run(cost.String(), func(t *testing.T) {
			st := open(t, t.TempDir())
			defer st.Close()
			clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
			l := New(st, clk)
			defer l.Close()
			if _, err := l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("100"), store.PeriodMonthly); err != nil {
				t.Fatal(err)
			}
			for _, c := range []money.Pico{usd("1"), cost} {
				r, err := l.Reserve(ctx, "w", "m", usd("1"))
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Settle(ctx, record(clk, "w", "m", c)); err != nil {
					t.Fatal(err)
				}
				clk.Advance(time.Second)
			}
			checkSaturated(t, l, st)
			// Recomputed from the usage records.
			if _, err := l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("100"), store.PeriodMonthly); err != nil {
				t.Fatal(err)
			}
			checkSaturated(t, l, st)
		})
	}
}

func checkSaturated(t *testing.T, l *Ledger, st store.Store) {
	t.Helper()
	s, err := l.Status(ctx, "w", "m")
	if err != nil {
		t.Fatal(err)
	}
	if s.Budget.Spent != money.Saturated {
		t.Fatalf("spent %s (%d), want it saturated", s.Budget.Spent, int64(s.Budget.Spent))
	}
	var b *store.Budget
	st.View(ctx, func(tx store.Tx) (err error) { b, err = tx.Budget("w", "m"); return err })
	if b.Spent != money.Saturated {
		t.Fatalf("stored spend %d, want it saturated", int64(b.Spent))
	}
	r, err := l.Reserve(ctx, "w", "m", 1)
	wantExceeded(t, "after a saturated spend", r, err)
}

// On a store shared by several nodes, holds and fleet slices: a huge
// reservation after a small spend is refused, on the fleet's local fast
// path as on the writer's, and a huge hold of another node counts as more
// than the budget instead of wrapping the sum of holds.
func TestSharedHugeReservationRefused(t *testing.T) { bothModes(t, testSharedHugeReservationRefused) }

func testSharedHugeReservationRefused(t *testing.T, fleet bool) {
	nodes, sts, clk, _ := pgNodes(t, 2, fleet)
	l := nodes[0]
	if _, err := l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("100"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	r, err := l.Reserve(ctx, "w", "m", usd("1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, record(clk, "w", "m", usd("1"))); err != nil {
		t.Fatal(err)
	}
	// A small reservation in flight: a fleet node now admits from its
	// slice without the writer.
	small, err := l.Reserve(ctx, "w", "m", usd("0.01"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hugeAmounts {
		r, err := l.Reserve(ctx, "w", "m", a)
		wantExceeded(t, a.String(), r, err)
	}
	// The same through a transaction (a fleet node's writer: the node
	// forgot what it knew of the budget).
	for _, a := range hugeAmounts {
		l.forget()
		r, err := l.Reserve(ctx, "w", "m", a)
		wantExceeded(t, "read again, "+a.String(), r, err)
	}
	small.Release()
	l.Wait()
	// Another node's hold (or slice) near MaxInt64.
	if err := sts[1].Update(ctx, func(tx store.Tx) error {
		return tx.PutHold(&store.Hold{ID: "slice_other", Workspace: "w", MemberID: "m", Amount: math.MaxInt64 - usd("1") + 1,
			Node: "other", ExpiresAt: clk.Now().Add(time.Hour), Exact: true})
	}); err != nil {
		t.Fatal(err)
	}
	nodes[1].forget()
	r, err = nodes[1].Reserve(ctx, "w", "m", usd("1"))
	wantExceeded(t, "beside a huge hold", r, err)
	if err := sts[1].Update(ctx, func(tx store.Tx) error { return tx.DeleteHold("w", "m", "slice_other") }); err != nil {
		t.Fatal(err)
	}
	if r, err := nodes[1].Reserve(ctx, "w", "m", usd("1")); err != nil {
		t.Fatalf("the room left is refused: %v", err)
	} else {
		r.Release()
	}
}

// A settlement of a huge cost on a shared store saturates spend.
func TestSharedHugeSettlementSaturates(t *testing.T) { bothModes(t, testSharedHugeSettlementSaturates) }

func testSharedHugeSettlementSaturates(t *testing.T, fleet bool) {
	nodes, sts, clk, _ := pgNodes(t, 1, fleet)
	l := nodes[0]
	if _, err := l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("100"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	for _, c := range []money.Pico{usd("1"), math.MaxInt64 - usd("1") + 1} {
		r, err := l.Reserve(ctx, "w", "m", usd("1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Settle(ctx, record(clk, "w", "m", c)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	checkSaturated(t, l, sts[0])
}

// fitsSeeds are the extreme values the reservation decision is checked at.
var fitsSeeds = []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1,
	math.MaxInt64 / 2, math.MaxInt64/2 + 1, int64(money.MaxSpend), 1_000_000_000_000}

func TestFitsExtremes(t *testing.T) {
	for _, a := range fitsSeeds {
		for _, b := range fitsSeeds {
			for _, c := range fitsSeeds {
				for _, d := range fitsSeeds {
					checkFits(t, a, b, c, d)
				}
			}
		}
	}
}

// checkFits holds fits to the exact (big.Int) sum: it never admits past the
// limit, nor anything negative or saturated; it admits whatever fits
// otherwise; remaining is the exact room, clamped to [0, MaxInt64] (0 when
// spend or holds are negative or saturated).
func checkFits(t *testing.T, limit, spent, held, amount int64) {
	ok, rem := fits(money.Pico(limit), money.Pico(spent), money.Pico(held), money.Pico(amount))
	sum := new(big.Int).Add(big.NewInt(spent), big.NewInt(held))
	sum.Add(sum, big.NewInt(amount))
	over := sum.Cmp(big.NewInt(limit)) > 0
	// money.Saturated stands for more than any limit.
	nonneg := amount >= 0 && spent >= 0 && held >= 0 && amount != math.MaxInt64 && spent != math.MaxInt64 && held != math.MaxInt64
	if ok && (over || !nonneg) {
		t.Fatalf("fits(%d, %d, %d, %d) admits a sum of %s", limit, spent, held, amount, sum)
	}
	if !ok && !over && nonneg {
		t.Fatalf("fits(%d, %d, %d, %d) refuses a sum of %s", limit, spent, held, amount, sum)
	}
	room := new(big.Int).Sub(big.NewInt(limit), big.NewInt(spent))
	room.Sub(room, big.NewInt(held))
	want := int64(0)
	switch {
	case spent < 0 || held < 0 || spent == math.MaxInt64 || held == math.MaxInt64:
	case room.Cmp(big.NewInt(math.MaxInt64)) > 0:
		want = math.MaxInt64
	case room.Sign() > 0:
		want = room.Int64()
	}
	if int64(rem) != want {
		t.Fatalf("fits(%d, %d, %d, %d): remaining %d, want %d", limit, spent, held, amount, int64(rem), want)
	}
}

func FuzzFits(f *testing.F) {
	for _, a := range fitsSeeds {
		f.Add(int64(money.MaxSpend), int64(usd("1")), int64(0), a)
		f.Add(a, a, a, a)
	}
	f.Fuzz(checkFits)
}

func TestFitsNoAllocs(t *testing.T) {
	var sink bool
	if n := testing.AllocsPerRun(100, func() {
		ok, _ := fits(usd("100"), usd("1"), usd("2"), math.MaxInt64)
		sink = sink || ok
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

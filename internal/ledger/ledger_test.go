package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

var ctx = context.Background()

func open(t *testing.T, dir string) *store.Badger {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func usd(s string) money.Pico {
	m, err := money.Parse(s)
	if err != nil {
		panic(err)
	}
	return money.PicoOf(m)
}

func record(clk clock.Clock, ws, member string, cost money.Pico) *store.UsageRecord {
	now := clk.Now()
	return &store.UsageRecord{ID: UsageID(now), Time: now, Workspace: ws, MemberID: member, Cost: cost, Status: 200}
}

// 200 concurrent requests against a budget with room for exactly N of them:
// exactly N are admitted, spend never passes the limit, and after
// settlement spend is the sum of the admitted requests' actual costs.
func TestBudgetRace(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(st, clk)
	const n = 37
	reservation := usd("0.20")
	limit := reservation * n
	if _, err := l.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, limit, store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	var admitted, refused atomic.Int64
	var actual atomic.Int64
	var wg, reserved sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 200; i++ {
		wg.Add(1)
		reserved.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			r, err := l.Reserve(ctx, "wrk_a", "sa_x", reservation)
			// Every request holds its reservation until all have asked: a
			// request that settled early would leave room for one more,
			// and the count would depend on scheduling.
			reserved.Done()
			reserved.Wait()
			var ee *ExceededError
			if errors.As(err, &ee) {
				refused.Add(1)
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			admitted.Add(1)
			cost := usd("0.05") + money.Pico(i) // actual ≤ reservation, all different
			actual.Add(int64(cost))
			if err := r.Settle(ctx, record(clk, "wrk_a", "sa_x", cost)); err != nil {
				t.Error(err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	if admitted.Load() != n || refused.Load() != 200-n {
		t.Fatalf("admitted %d, refused %d; want exactly %d admitted", admitted.Load(), refused.Load(), n)
	}
	stat, _ := l.Status(ctx, "wrk_a", "sa_x")
	if stat.Reserved != 0 || stat.Budget.Spent != money.Pico(actual.Load()) || stat.Budget.Spent > limit {
		t.Fatalf("after settlement: spent %s reserved %s, want spent %s", stat.Budget.Spent, stat.Reserved, money.Pico(actual.Load()))
	}
	var stored *store.Budget
	st.View(ctx, func(tx store.Tx) (err error) { stored, err = tx.Budget("wrk_a", "sa_x"); return })
	if stored.Spent != money.Pico(actual.Load()) {
		t.Fatalf("stored spend %s, want %s", stored.Spent, money.Pico(actual.Load()))
	}
	var records int
	st.View(ctx, func(tx store.Tx) error {
		return tx.Usage("wrk_a", "", func(*store.UsageRecord) (bool, error) { records++; return true, nil })
	})
	if records != n {
		t.Fatalf("%d usage records, want %d", records, n)
	}
}

func TestExceededErrorTellsWhatIsLeft(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(st, clk)
	l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("1"), store.PeriodDaily)
	r, err := l.Reserve(ctx, "w", "m", usd("0.7"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Reserve(ctx, "w", "m", usd("0.5"))
	var ee *ExceededError
	if !errors.As(err, &ee) || ee.Remaining != usd("0.3") || ee.Needed != usd("0.5") || !ee.ResetsAt.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%+v", err)
	}
	r.Release()
	if _, err := l.Reserve(ctx, "w", "m", usd("1")); err != nil {
		t.Fatalf("a released reservation still counts: %v", err)
	}
	// No budget: always admitted.
	if _, err := l.Reserve(ctx, "w", "someone-else", usd("1000000")); err != nil {
		t.Fatal(err)
	}
}

// A crash between admission and settlement loses the reservation, never the
// settled spend.
func TestCrashReleasesReservationsKeepsSpend(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	st := open(t, dir)
	l := New(st, clk)
	l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("1"), store.PeriodTotal)
	r1, _ := l.Reserve(ctx, "w", "m", usd("0.4"))
	if err := r1.Settle(ctx, record(clk, "w", "m", usd("0.25"))); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, "w", "m", usd("0.7")); err != nil { // admitted, never settled
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, "w", "m", usd("0.1")); err == nil {
		t.Fatal("the in-flight reservation was not counted")
	}
	st.Close() // the crash: the ledger is gone with its reservations

	st = open(t, dir)
	defer st.Close()
	l = New(st, clk)
	stat, _ := l.Status(ctx, "w", "m")
	if stat.Reserved != 0 || stat.Budget.Spent != usd("0.25") {
		t.Fatalf("after restart: spent %s reserved %s", stat.Budget.Spent, stat.Reserved)
	}
	if _, err := l.Reserve(ctx, "w", "m", usd("0.75")); err != nil {
		t.Fatalf("room after restart: %v", err)
	}
}

func TestPeriodRollsOver(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC))
	l := New(st, clk)
	l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("1"), store.PeriodMonthly)
	r, _ := l.Reserve(ctx, "w", "m", usd("1"))
	r.Settle(ctx, record(clk, "w", "m", usd("1")))
	if _, err := l.Reserve(ctx, "w", "m", usd("0.01")); err == nil {
		t.Fatal("admitted over a spent budget")
	}
	clk.Advance(2 * time.Minute) // February
	stat, _ := l.Status(ctx, "w", "m")
	if stat.Budget.Spent != 0 || !stat.Budget.PeriodStart.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("after the month turned: %+v", stat.Budget)
	}
	r, err := l.Reserve(ctx, "w", "m", usd("1"))
	if err != nil {
		t.Fatalf("new period: %v", err)
	}
	r.Settle(ctx, record(clk, "w", "m", usd("0.5")))
	var stored *store.Budget
	st.View(ctx, func(tx store.Tx) (err error) { stored, err = tx.Budget("w", "m"); return })
	if stored.Spent != usd("0.5") || !stored.PeriodStart.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("stored %+v", stored)
	}
	// A request admitted in January and settled in February counts in February.
	clk.Set(time.Date(2026, 2, 28, 23, 59, 59, 0, time.UTC))
	r, _ = l.Reserve(ctx, "w", "m", usd("0.5"))
	clk.Advance(2 * time.Second)
	r.Settle(ctx, record(clk, "w", "m", usd("0.2")))
	stat, _ = l.Status(ctx, "w", "m")
	if stat.Budget.Spent != usd("0.2") || stat.Reserved != 0 {
		t.Fatalf("settled across the boundary: %+v reserved %s", stat.Budget, stat.Reserved)
	}
}

func TestPeriods(t *testing.T) {
	at := time.Date(2026, 11, 22, 15, 4, 5, 0, time.UTC) // a Sunday
	for _, c := range []struct {
		period     string
		start, end time.Time
	}{
		{store.PeriodDaily, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
		{store.PeriodWeekly, time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
		{store.PeriodMonthly, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{store.PeriodTotal, time.Time{}, time.Time{}},
	} {
		s := PeriodStart(c.period, at)
		if !s.Equal(c.start) || !PeriodEnd(c.period, s).Equal(c.end) {
			t.Errorf("%s: %v – %v", c.period, s, PeriodEnd(c.period, s))
		}
	}
	if s := PeriodStart(store.PeriodWeekly, time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)); !s.Equal(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("a Monday starts its own week: %v", s)
	}
}

// SetBudget starts from what the member really spent this period.
func TestSetBudgetRecomputesSpend(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(st, clk)
	for _, c := range []struct {
		at   time.Time
		cost string
	}{
		{time.Date(2026, 3, 9, 23, 0, 0, 0, time.UTC), "5"}, // yesterday
		{time.Date(2026, 3, 10, 1, 0, 0, 0, time.UTC), "0.3"},
		{time.Date(2026, 3, 10, 11, 0, 0, 0, time.UTC), "0.2"},
	} {
		clk.Set(c.at)
		r, _ := l.Reserve(ctx, "w", "m", 0)
		r.Settle(ctx, record(clk, "w", "m", usd(c.cost)))
	}
	clk.Set(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	b, err := l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("1"), store.PeriodDaily)
	if err != nil || b.Spent != usd("0.5") {
		t.Fatalf("daily: %+v %v", b, err)
	}
	b, _ = l.SetBudget(ctx, "w", "m", store.MemberPerson, usd("10"), store.PeriodTotal)
	if b.Spent != usd("5.5") {
		t.Fatalf("total: %+v", b)
	}
	if b, err := l.SetBudget(ctx, "w", "m", store.MemberPerson, -1, ""); b != nil || err != nil {
		t.Fatalf("remove: %v %v", b, err)
	}
	if stat, _ := l.Status(ctx, "w", "m"); stat.Budget != nil {
		t.Fatal("budget still there")
	}
}

// Many settlements for one budgeted member at once: every usage record and
// every cent is written (a single batching writer, no conflicts to run out
// of retries on), and Close writes what is still queued.
func TestConcurrentSettlementsLoseNothing(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(st, clk)
	l.SetBudget(ctx, "w", "m", store.MemberServiceAccount, usd("100000"), store.PeriodMonthly)
	const n = 3000
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < n; i++ {
		r, err := l.Reserve(ctx, "w", "m", usd("0.01"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		r.SettleAsync(record(clk, "w", "m", money.Pico(1000+i)), func(err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
	}
	wg.Wait()
	l.Close()
	if failed.Load() != 0 {
		t.Fatalf("%d settlements failed", failed.Load())
	}
	var want money.Pico
	for i := 0; i < n; i++ {
		want += money.Pico(1000 + i)
	}
	var stored *store.Budget
	records := 0
	st.View(ctx, func(tx store.Tx) error {
		stored, _ = tx.Budget("w", "m")
		return tx.Usage("w", "", func(*store.UsageRecord) (bool, error) { records++; return true, nil })
	})
	if records != n || stored.Spent != want {
		t.Fatalf("%d records, spent %s; want %d and %s", records, stored.Spent, n, want)
	}
	// After Close a settlement fails cleanly instead of hanging.
	r, _ := l.Reserve(ctx, "w", "m", 0)
	if err := r.Settle(ctx, record(clk, "w", "m", 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("settle after close: %v", err)
	}
}

// countingStore counts write transactions.
type countingStore struct {
	store.Store
	updates atomic.Int64
}

func (c *countingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	c.updates.Add(1)
	return c.Store.Update(ctx, fn)
}

// Settlements that trickle in (one every 100 µs, as at low concurrency)
// share transactions: the writer lingers for more before it commits. A
// synchronous Settle is written without lingering, and every settlement is
// there afterwards.
func TestSettlementsShareTransactionsAtLowConcurrency(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	cs := &countingStore{Store: st}
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(cs, clk)
	defer l.Close()
	const n = 40
	for i := range n {
		r, err := l.Reserve(ctx, "wrk_a", "sa_x", usd("0.01"))
		if err != nil {
			t.Fatal(err)
		}
		rec := record(clk, "wrk_a", "sa_x", usd("0.01"))
		rec.ID = UsageID(clk.Now()) + string(rune('a'+i%26))
		r.SettleAsync(rec, nil)
		time.Sleep(100 * time.Microsecond)
	}
	l.Wait()
	if got := cs.updates.Load(); got > n/2 {
		t.Fatalf("%d settlements took %d transactions; lingering should batch them", n, got)
	}
	r, _ := l.Reserve(ctx, "wrk_a", "sa_x", usd("0.01"))
	if err := r.Settle(ctx, record(clk, "wrk_a", "sa_x", usd("0.01"))); err != nil {
		t.Fatal(err)
	}
	count := 0
	st.View(ctx, func(tx store.Tx) error {
		return tx.Usage("wrk_a", "", func(*store.UsageRecord) (bool, error) { count++; return true, nil })
	})
	if count != n+1 {
		t.Fatalf("%d usage records, want %d", count, n+1)
	}
}

// A lingering writer sleeps out its linger instead of taking settlements
// as they come: a synchronous Settle, or a full batch in the queue, must
// still end the linger (here an hour long: the test would hang otherwise).
func TestLingerEndsForSettleAndFullBatch(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(st, clk)
	defer l.Close()
	l.linger = time.Hour
	done := make(chan error, 2*maxBatch)
	settle := func(i int, sync bool) {
		r, err := l.Reserve(ctx, "wrk_a", "sa_x", usd("0.01"))
		if err != nil {
			t.Fatal(err)
		}
		rec := record(clk, "wrk_a", "sa_x", usd("0.01"))
		rec.ID = fmt.Sprintf("%s%08d", UsageID(clk.Now())[:16], i)
		if sync {
			if err := r.Settle(ctx, rec); err != nil {
				t.Fatal(err)
			}
			return
		}
		r.SettleAsync(rec, func(err error) { done <- err })
	}
	settle(0, false) // the writer takes it and lingers
	settle(1, true)  // returns once written: the Settle ended the linger
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Two batches' worth more: the writer takes the first and lingers;
	// the queue filling up to a batch ends the linger, and that batch is
	// written without waiting for the hour.
	for i := range 2 * maxBatch {
		settle(2+i, false)
	}
	for range maxBatch {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	settle(2*maxBatch+2, true) // and the rest with it
	l.Wait()
	count := 0
	st.View(ctx, func(tx store.Tx) error {
		return tx.Usage("wrk_a", "", func(*store.UsageRecord) (bool, error) { count++; return true, nil })
	})
	if want := 2*maxBatch + 3; count != want {
		t.Fatalf("%d usage records, want %d", count, want)
	}
}

// TestUsageIDSortsByTime pins the usage id: sixteen hex digits of the Unix
// nanosecond, then eight base62 characters of the process's sequence, so
// ids sort by time.
func TestUsageIDSortsByTime(t *testing.T) {
	times := []time.Time{time.Unix(0, 1), time.Unix(1764000000, 123), time.Unix(1764000000, 124), time.Unix(1<<33, 0)}
	prev := ""
	for _, tm := range times {
		id := UsageID(tm)
		if len(id) != 24 || id[:16] != fmt.Sprintf("%016x", tm.UnixNano()) {
			t.Fatalf("UsageID(%v) = %q", tm, id)
		}
		for _, c := range id[16:] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				t.Fatalf("UsageID(%v) = %q: not base62 after the time", tm, id)
			}
		}
		if id <= prev {
			t.Fatalf("%q sorts before %q", id, prev)
		}
		prev = id
	}
	if UsageID(times[1]) == UsageID(times[1]) {
		t.Fatal("two ids of one instant are equal")
	}
}

// lostCommitStore reports its first transaction after armed as failed and
// unavailable once it has been written: a sync that failed after the
// write, or a database whose answer to the commit was lost.
type lostCommitStore struct {
	store.Store
	armed, lost atomic.Bool
}

type lostCommit struct{}

func (lostCommit) Error() string     { return "the answer to the commit was lost" }
func (lostCommit) Unavailable() bool { return true }

func (s *lostCommitStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	err := s.Store.Update(ctx, fn)
	if err == nil && s.armed.Load() && s.lost.CompareAndSwap(false, true) {
		return lostCommit{}
	}
	return err
}

// A settlement whose commit was written but reported failed is tried
// again; the retry finds its usage record there and takes the settlement
// as written: the budget is charged once, in the store and in the ledger,
// and there is one record. (A retry that appended again would write over
// the record and charge the budget a second time.)
func TestLostCommitChargedOnce(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	ls := &lostCommitStore{Store: st}
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	l := New(ls, clk)
	defer l.Close()
	if _, err := l.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("1"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	ls.armed.Store(true)
	r, err := l.Reserve(ctx, "wrk_a", "sa_x", usd("0.10"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, record(clk, "wrk_a", "sa_x", usd("0.05"))); err != nil {
		t.Fatalf("Settle after a lost commit: %v", err)
	}
	if !ls.lost.Load() {
		t.Fatal("the commit was not reported lost")
	}
	var b *store.Budget
	count := 0
	st.View(ctx, func(tx store.Tx) error {
		b, err = tx.Budget("wrk_a", "sa_x")
		return tx.Usage("wrk_a", "", func(*store.UsageRecord) (bool, error) { count++; return true, nil })
	})
	if err != nil || b.Spent != usd("0.05") || count != 1 {
		t.Fatalf("stored budget %+v (%v), %d records; want 0.05 spent, 1 record", b, err, count)
	}
	s, err := l.Status(ctx, "wrk_a", "sa_x")
	if err != nil || s.Budget == nil || s.Budget.Spent != usd("0.05") || s.Reserved != 0 {
		t.Fatalf("ledger status %+v, %v; want 0.05 spent, nothing reserved", s, err)
	}
}

// Usage ids of one process never repeat, even at one instant (a fake
// clock), and follow the order they were made in.
func TestUsageIDsDoNotRepeat(t *testing.T) {
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	seen := make(map[string]bool, 100_000)
	wrapped := 0
	prev := ""
	for range 100_000 {
		id := UsageID(at)
		if seen[id] {
			t.Fatalf("%q made twice", id)
		}
		seen[id] = true
		if id <= prev {
			wrapped++ // the sequence passed its largest value
		}
		prev = id
	}
	if wrapped > 1 {
		t.Fatalf("ids of one instant out of order %d times", wrapped)
	}
}

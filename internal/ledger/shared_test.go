package ledger

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/pgtest"
	"github.com/agentgate/agentgate/internal/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// pgNodes opens n stores on one fresh PostgreSQL database, as n gateway
// nodes would, with a ledger each on one shared fake clock. A fleet's
// stores are coherent, and their ledgers lease budget slices; the others
// hold every reservation in the store.
func pgNodes(t *testing.T, n int, fleet bool) ([]*Ledger, []*store.Postgres, *clock.Fake, *pgtest.Server) {
	t.Helper()
	srv := pgtest.Shared(t)
	dsn := srv.NewDatabase(t)
	clk := clock.NewFake(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	var ls []*Ledger
	var sts []*store.Postgres
	for range n {
		st, err := store.OpenPostgres(ctx, store.PostgresOptions{DSN: dsn, Coherent: fleet})
		if err != nil {
			t.Fatal(err)
		}
		l := New(st, clk)
		if !l.shared || (l.fleet != nil) != fleet {
			t.Fatalf("a ledger over PostgreSQL: shared %v, fleet %v", l.shared, l.fleet != nil)
		}
		t.Cleanup(func() { l.Close(); st.Close() })
		ls, sts = append(ls, l), append(sts, st)
	}
	return ls, sts, clk, srv
}

// Two nodes admit 200 concurrent requests against one budget with room for
// exactly 37: exactly 37 are admitted across both, and after settlement the
// spend is the exact sum of their actual costs with no hold left.
func TestSharedBudgetRaceAcrossNodes(t *testing.T) { bothModes(t, testSharedBudgetRaceAcrossNodes) }

func testSharedBudgetRaceAcrossNodes(t *testing.T, fleet bool) {
	nodes, _, clk, _ := pgNodes(t, 2, fleet)
	const n = 37
	reservation := usd("0.20")
	if _, err := nodes[0].SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, reservation*n, store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	var admitted, refused, actual atomic.Int64
	var wg, reserved sync.WaitGroup
	start, settle := make(chan struct{}), make(chan struct{})
	for i := range 200 {
		wg.Add(1)
		reserved.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l := nodes[i%2]
			r, err := l.Reserve(ctx, "wrk_a", "sa_x", reservation)
			reserved.Done()
			if err != nil {
				if _, ok := err.(*ExceededError); !ok {
					t.Errorf("Reserve: %v", err)
				}
				refused.Add(1)
				return
			}
			admitted.Add(1)
			<-settle // every admission is decided before any spend settles
			cost := usd("0.05") + usd("0.01")*money.Pico(i%7)
			actual.Add(int64(cost))
			rec := record(clk, "wrk_a", "sa_x", cost)
			rec.ID = newHoldID(clk.Now())
			if err := r.Settle(ctx, rec); err != nil {
				t.Errorf("Settle: %v", err)
			}
		}()
	}
	close(start)
	reserved.Wait()
	close(settle)
	wg.Wait()
	if admitted.Load() != n || refused.Load() != 200-n {
		t.Fatalf("admitted %d, refused %d; want %d and %d", admitted.Load(), refused.Load(), n, 200-n)
	}
	for _, l := range nodes {
		l.giveBack() // a fleet node's idle slice
	}
	for i, l := range nodes {
		st, err := l.Status(ctx, "wrk_a", "sa_x")
		if err != nil {
			t.Fatal(err)
		}
		if int64(st.Budget.Spent) != actual.Load() || st.Reserved != 0 {
			t.Fatalf("node %d: spent %s reserved %s; want %d pico and 0", i, st.Budget.Spent, st.Reserved, actual.Load())
		}
	}
}

// A node that dies with a request in flight leaves a hold; it stops
// counting after HoldTTL, and a released hold stops counting at once.
func TestSharedHoldsExpireAndRelease(t *testing.T) { bothModes(t, testSharedHoldsExpireAndRelease) }

func testSharedHoldsExpireAndRelease(t *testing.T, fleet bool) {
	nodes, _, clk, _ := pgNodes(t, 2, fleet)
	a, b := nodes[0], nodes[1]
	if _, err := a.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("1.00"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reserve(ctx, "wrk_a", "sa_x", usd("0.80")); err != nil { // never settled: its node "dies"
		t.Fatal(err)
	}
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", usd("0.50")); err == nil {
		t.Fatal("node B admitted past node A's hold")
	}
	r, err := b.Reserve(ctx, "wrk_a", "sa_x", usd("0.20"))
	if err != nil {
		t.Fatalf("room for 0.20: %v", err)
	}
	r.Release()
	b.giveBack()
	if st, _ := b.Status(ctx, "wrk_a", "sa_x"); st.Reserved != usd("0.80") {
		t.Fatalf("reserved after release: %s, want 0.80", st.Reserved)
	}
	clk.Advance(max(HoldTTL, SliceTTL))
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", usd("1.00")); err != nil {
		t.Fatalf("after the dead node's hold expired: %v", err)
	}
}

// A budget set on one node binds the other at once (no cached copy).
func TestSharedBudgetSeenByEveryNode(t *testing.T) { bothModes(t, testSharedBudgetSeenByEveryNode) }

func testSharedBudgetSeenByEveryNode(t *testing.T, fleet bool) {
	nodes, _, _, _ := pgNodes(t, 2, fleet)
	if _, err := nodes[1].Reserve(ctx, "wrk_a", "sa_x", usd("5")); err != nil {
		t.Fatalf("no budget yet: %v", err)
	}
	if _, err := nodes[0].SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("1"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].Reserve(ctx, "wrk_a", "sa_x", usd("5")); err == nil {
		t.Fatal("node B ignored the budget node A just set")
	}
}

// Settlements made while PostgreSQL is down are written once it is back:
// no settled spend is lost.
func TestSharedSettlementWaitsForTheDatabase(t *testing.T) {
	bothModes(t, testSharedSettlementWaitsForTheDatabase)
}

func testSharedSettlementWaitsForTheDatabase(t *testing.T, fleet bool) {
	nodes, _, clk, srv := pgNodes(t, 1, fleet)
	if !srv.CanStop() {
		t.Skip("an external server cannot be restarted")
	}
	l := nodes[0]
	if _, err := l.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("10"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	r, err := l.Reserve(ctx, "wrk_a", "sa_x", usd("1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	r.SettleAsync(record(clk, "wrk_a", "sa_x", usd("0.25")), func(err error) { done <- err })
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	select {
	case err := <-done:
		t.Fatalf("settled while the database was down: %v", err)
	default:
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("settlement after restart: %v", err)
	}
	l.giveBack()
	st, err := l.Status(ctx, "wrk_a", "sa_x")
	if err != nil {
		t.Fatal(err)
	}
	if st.Budget.Spent != usd("0.25") || st.Reserved != 0 {
		t.Fatalf("spent %s reserved %s, want 0.25 and 0", st.Budget.Spent, st.Reserved)
	}
}

func bothModes(t *testing.T, test func(t *testing.T, fleet bool)) {
	t.Run("holds", func(t *testing.T) { test(t, false) })
	t.Run("fleet", func(t *testing.T) { test(t, true) })
}

// A fleet node admits from its slice: 2,000 requests of one member, with
// their settlements, cost well under 0.1 database round trips each, and
// the spend is exact.
func TestFleetAdmitsWithoutRoundTrips(t *testing.T) {
	nodes, sts, clk, _ := pgNodes(t, 1, true)
	l, st := nodes[0], sts[0]
	if _, err := l.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("1000"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	before := st.RoundTrips()
	var want money.Pico
	var wg sync.WaitGroup
	for i := range n {
		r, err := l.Reserve(ctx, "wrk_a", "sa_x", usd("0.10"))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		cost := usd("0.01") + money.Pico(i)
		want += cost
		rec := record(clk, "wrk_a", "sa_x", cost)
		rec.ID = newHoldID(clk.Now())
		wg.Add(1)
		r.SettleAsync(rec, func(err error) {
			if err != nil {
				t.Errorf("settle: %v", err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	trips := st.RoundTrips() - before
	if per := float64(trips) / n; per > 0.1 {
		t.Fatalf("%d round trips for %d requests (%.3f each), want ≤ 0.1", trips, n, per)
	}
	t.Logf("%d round trips for %d requests", trips, n)
	l.giveBack()
	s, err := l.Status(ctx, "wrk_a", "sa_x")
	if err != nil {
		t.Fatal(err)
	}
	if s.Budget.Spent != want || s.Reserved != 0 {
		t.Fatalf("spent %s reserved %s, want %s and 0", s.Budget.Spent, s.Reserved, want)
	}
}

// A node that cannot fit a request while another node's slice has idle
// room recalls it: the other node keeps only what it has in flight, and
// the request gets exactly the rest of the room.
func TestFleetRecallGivesTheWholeRoom(t *testing.T) {
	nodes, sts, clk, _ := pgNodes(t, 2, true)
	a, b := nodes[0], nodes[1]
	// A second ledger on node A's store, closed at once (as a service's
	// default ledger is, replaced by the one shared across reloads): the
	// recall must still reach the live one.
	New(sts[0], clk).Close()
	if _, err := a.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("1.00"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.Reserve(ctx, "wrk_a", "sa_x", usd("0.10")); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := a.Status(ctx, "wrk_a", "sa_x"); s.Reserved <= usd("0.30") {
		t.Fatalf("node A holds %s: no idle room to recall, the test proves nothing", s.Reserved)
	}
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", usd("0.70")); err != nil {
		t.Fatalf("the room left beside A's 0.30 in flight: %v", err)
	}
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", usd("0.01")); err == nil {
		t.Fatal("admitted past the limit")
	}
	if _, err := a.Reserve(ctx, "wrk_a", "sa_x", usd("0.01")); err == nil {
		t.Fatal("admitted past the limit")
	}
}

// A node killed while holding a slice: its settled spend stays, its slice
// blocks the room until SliceTTL has passed, then the room comes back
// whole to the other node.
func TestFleetDeadNodesSliceExpires(t *testing.T) {
	nodes, sts, clk, _ := pgNodes(t, 2, true)
	a, b := nodes[0], nodes[1]
	if _, err := a.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("1.00"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	var spent money.Pico
	for i := range 3 {
		r, err := a.Reserve(ctx, "wrk_a", "sa_x", usd("0.20"))
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			cost := usd("0.15")
			spent += cost
			rec := record(clk, "wrk_a", "sa_x", cost)
			rec.ID = newHoldID(clk.Now())
			if err := r.Settle(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	sts[0].Close() // node A dies: nothing of it reaches the database again
	s, err := b.Status(ctx, "wrk_a", "sa_x")
	if err != nil {
		t.Fatal(err)
	}
	if s.Budget.Spent != spent || s.Reserved < usd("0.20") {
		t.Fatalf("after the kill: spent %s held %s; want %s and at least A's 0.20 in flight", s.Budget.Spent, s.Reserved, spent)
	}
	room := usd("1.00") - spent
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", room); err == nil {
		t.Fatal("node B took the room of node A's live slice")
	}
	clk.Advance(SliceTTL)
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", room); err != nil {
		t.Fatalf("after the dead node's slice expired: %v", err)
	}
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", usd("0.01")); err == nil {
		t.Fatal("admitted past the limit")
	}
	if s, _ := b.Status(ctx, "wrk_a", "sa_x"); s.Budget.Spent != spent {
		t.Fatalf("spent %s, want %s: spend was lost", s.Budget.Spent, spent)
	}
}

// Right after a budget change (every node forgets what it knew and keeps
// only what is in flight, while the slices in the store still hold idle
// room), a race across two nodes that both held slices still admits
// exactly the room: the recall rewrites the stored slices, not only the
// local ones.
func TestFleetRaceAfterABudgetChange(t *testing.T) {
	nodes, _, clk, _ := pgNodes(t, 2, true)
	const amount = 24
	if _, err := nodes[0].SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, 1_000_000, store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	var spent money.Pico
	for i := range 40 { // both nodes take slices with headroom
		r, err := nodes[i%2].Reserve(ctx, "wrk_a", "sa_x", amount)
		if err != nil {
			t.Fatal(err)
		}
		rec := record(clk, "wrk_a", "sa_x", amount)
		rec.ID = newHoldID(clk.Now())
		if err := r.Settle(ctx, rec); err != nil {
			t.Fatal(err)
		}
		spent += amount
	}
	const n = 50
	if _, err := nodes[1].SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, spent+n*amount+amount/2, store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	// Node A, idle since the change, still holds a slice in the store:
	// node B gets the whole room at once only if A gives it back.
	if st, _ := nodes[1].Status(ctx, "wrk_a", "sa_x"); st.Reserved == 0 {
		t.Fatal("no slice left in the store: the test proves nothing")
	}
	whole, err := nodes[1].Reserve(ctx, "wrk_a", "sa_x", n*amount)
	if err != nil {
		t.Fatalf("the whole room on node B: %v", err)
	}
	whole.Release()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := nodes[i%2].Reserve(ctx, "wrk_a", "sa_x", amount); err == nil {
				admitted.Add(1)
			} else if _, ok := err.(*ExceededError); !ok {
				t.Errorf("Reserve: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if admitted.Load() != n {
		t.Fatalf("admitted %d, want exactly %d", admitted.Load(), n)
	}
}

// The writer's upkeep gives an idle slice back after SliceIdle, and
// renews a slice in use before it expires, so that a long request's room
// keeps counting on the other nodes.
func TestFleetUpkeepGivesBackAndRenews(t *testing.T) {
	nodes, _, clk, _ := pgNodes(t, 2, true)
	a, b := nodes[0], nodes[1]
	if _, err := a.SetBudget(ctx, "wrk_a", "sa_x", store.MemberServiceAccount, usd("1.00"), store.PeriodMonthly); err != nil {
		t.Fatal(err)
	}
	held := func() money.Pico {
		t.Helper()
		s, err := b.Status(ctx, "wrk_a", "sa_x")
		if err != nil {
			t.Fatal(err)
		}
		return s.Reserved
	}
	upkeep := func(l *Ledger) {
		if batch := l.upkeepFleet(false); len(batch) > 0 {
			l.write(batch, false)
		}
	}
	r, err := a.Reserve(ctx, "wrk_a", "sa_x", usd("0.10"))
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	if held() == 0 {
		t.Fatal("no slice in the store")
	}
	upkeep(a) // not idle long enough: kept
	if held() == 0 {
		t.Fatal("a slice used just now was given back")
	}
	clk.Advance(SliceIdle)
	upkeep(a)
	if h := held(); h != 0 {
		t.Fatalf("an idle slice still holds %s", h)
	}

	// A request in flight for longer than SliceTTL: its room is renewed.
	if _, err := a.Reserve(ctx, "wrk_a", "sa_x", usd("0.90")); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		clk.Advance(SliceTTL / 3)
		upkeep(a)
	}
	if _, err := b.Reserve(ctx, "wrk_a", "sa_x", usd("0.20")); err == nil {
		t.Fatal("node B took the room of a request still in flight on node A")
	}
}

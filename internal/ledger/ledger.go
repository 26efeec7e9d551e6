// Package ledger enforces budgets by reservation: a request reserves an
// upper bound of its cost on admission and is refused when settled spend
// plus every reservation in flight plus its own would pass the limit; when
// it ends, the reservation is replaced by the actual cost.
//
// Settled spend and usage records are durable in the store. Where the
// reservations live depends on the store:
//
//   - A store of one process (Badger): in memory, decided under one lock
//     per process, so concurrent requests can never take spend past the
//     limit. A crash releases them and never loses settled spend.
//   - A store shared by several nodes (PostgreSQL; Shared() true): as holds
//     in the store, admitted in a transaction that holds the member's lock
//     across every node (store.Locker), reads the budget and every live
//     hold of the member and adds its own, so nodes admitting at once never
//     take spend past the limit either. A settlement moves a hold into
//     spend in one transaction under the same lock. A hold whose node died
//     expires after HoldTTL.
//
// Every sum of money is checked (fits, and the money package's checked and
// saturating helpers): a sum past int64 is more than any budget, so a huge
// reservation is refused on every path and a huge settlement saturates
// spend (money.Saturated), never wrapping to a small or negative amount.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// ExceededError refuses a request whose reservation does not fit.
type ExceededError struct {
	Limit     money.Pico
	Remaining money.Pico // limit − spent − reserved, never negative
	Needed    money.Pico // the reservation asked for
	ResetsAt  time.Time  // zero for the total period
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("budget exceeded: %s USD remaining of %s, this request may cost up to %s", e.Remaining, e.Limit, e.Needed)
}

// Ledger is safe for concurrent use.
type Ledger struct {
	store store.Store
	clock clock.Clock

	// shared: reservations are holds in the store (several nodes).
	shared bool
	node   string
	// fleet: a shared store that keeps caches coherent: admissions come
	// from budget slices (lease.go).
	fleet  Fleet
	unhook []func() // unregisters from the fleet's store
	linger time.Duration

	mu      sync.Mutex
	members map[string]*member // workspace/member → state
	pending sync.WaitGroup     // settlements in flight
	// settling is held shared by the settlement writer and exclusively by
	// SetBudget, so that a budget's spend recomputed from the usage records
	// never misses, nor counts twice, a settlement written at the same time.
	settling sync.RWMutex

	// Settlements go through one writer that batches them: one transaction
	// (and one sync to disk) for many requests, and no conflicts between
	// settlements on a shared budget record.
	queue chan *settlement
	// urgent tells a lingering writer that a synchronous entry is queued,
	// or a full batch: the writer does not take settlements one by one
	// while it lingers (each would wake it, a goroutine switch per
	// request), so the queue alone does not reach it then.
	urgent    chan struct{}
	sendMu    sync.RWMutex // held shared by senders, exclusively by Close
	closed    bool
	stop      chan struct{}
	writerEnd chan struct{}
	closeOnce sync.Once
	stoppedAt time.Time // when the writer first saw Close while retrying (writer only)
}

type settlement struct {
	r    *Reservation
	rec  *store.UsageRecord
	done func(error)
	sync bool // a caller waits for it (Settle): written without lingering
	// A fleet node's writer also decides admissions that do not fit a
	// slice (ext) and keeps slices (up); such an entry settles nothing.
	ext *extension
	up  *upkeep
}

// maxBatch bounds how many settlements share one transaction. A batch's
// cost is mostly its one sync to disk, so large batches let the writer
// keep up when a sync is slow.
const maxBatch = 1024

// queueLen is how many settlements may wait for the writer. A request
// whose settlement finds the queue full waits for room (nothing is
// dropped), after its response but before its connection serves the
// next request: the queue is long enough to ride out a slow sync (about
// three seconds of a node's traffic).
const queueLen = 8 * maxBatch

// ErrClosed is returned by settlements after Close.
var ErrClosed = errors.New("ledger is closed")

type member struct {
	budget   *store.Budget // nil: no budget (unlimited); a cached copy
	reserved money.Pico
	lease    lease // a fleet node's slice (lease.go)
}

// New returns a ledger over st.
func New(st store.Store, clk clock.Clock) *Ledger {
	if clk == nil {
		clk = clock.Real{}
	}
	l := &Ledger{store: st, clock: clk, members: map[string]*member{},
		queue: make(chan *settlement, queueLen), urgent: make(chan struct{}, 1), stop: make(chan struct{}), writerEnd: make(chan struct{})}
	l.linger = linger
	if sh, ok := st.(interface{ Shared() bool }); ok && sh.Shared() {
		l.shared, l.node = true, newNodeID()
		if f, ok := st.(Fleet); ok && f.Coherent() {
			l.startFleet(f)
			l.linger = fleetLinger
		}
	}
	go l.writer()
	return l
}

// Close writes the settlements already queued and stops the writer. It is
// safe to call more than once.
func (l *Ledger) Close() {
	l.closeOnce.Do(func() {
		l.sendMu.Lock()
		l.closed = true
		l.sendMu.Unlock()
		close(l.stop)
		<-l.writerEnd
		l.giveBack()
		for _, f := range l.unhook {
			f()
		}
	})
}

// Reservation is an admitted request's hold on its member's budget.
type Reservation struct {
	Workspace, MemberID string
	Amount              money.Pico
	l                   *Ledger
	done                bool
	hold                string // the hold's id in a shared store; "" for none
}

func key(ws, m string) string { return ws + "/" + m }

// state returns the member's state, loading the budget on first use.
// Callers hold l.mu.
func (l *Ledger) state(ctx context.Context, ws, memberID string) (*member, error) {
	if m, ok := l.members[key(ws, memberID)]; ok {
		return m, nil
	}
	var b *store.Budget
	err := l.store.View(ctx, func(tx store.Tx) error {
		var err error
		b, err = tx.Budget(ws, memberID)
		if errors.Is(err, store.ErrNotFound) {
			b, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	m := &member{budget: b}
	l.members[key(ws, memberID)] = m
	return m, nil
}

// roll resets a budget whose period has ended by now.
func roll(b *store.Budget, now time.Time) {
	if start := PeriodStart(b.Period, now); start.After(b.PeriodStart) {
		b.PeriodStart = start
		b.Spent = 0
	}
}

// Reserve admits a request that may cost up to amount, or refuses it with
// an *ExceededError. A member without a budget is always admitted.
func (l *Ledger) Reserve(ctx context.Context, ws, memberID string, amount money.Pico) (*Reservation, error) {
	if amount < 0 {
		// Only an overflowing estimate is negative: it is more than any
		// budget, never free.
		amount = money.Saturated
	}
	if l.fleet != nil {
		return l.reserveFleet(ctx, ws, memberID, amount)
	}
	if l.shared {
		return l.reserveShared(ctx, ws, memberID, amount)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.state(ctx, ws, memberID)
	if err != nil {
		return nil, err
	}
	if b := m.budget; b != nil {
		roll(b, l.clock.Now())
		if ok, rem := fits(b.Limit, b.Spent, m.reserved, amount); !ok {
			return nil, exceeded(b, rem, amount)
		}
	}
	reserved, ok := money.Add(m.reserved, amount)
	if !ok {
		return nil, uncountable(m.reserved, amount)
	}
	m.reserved = reserved
	return &Reservation{Workspace: ws, MemberID: memberID, Amount: amount, l: l}, nil
}

// Settle records the request's usage durably, adds its cost to the
// member's spend in the period of rec.Time, and releases the reservation;
// it returns once that is on disk. Only the first Settle or Release of a
// reservation counts.
func (r *Reservation) Settle(ctx context.Context, rec *store.UsageRecord) error {
	res := make(chan error, 1)
	if !r.enqueue(rec, func(err error) { res <- err }, true) {
		return nil
	}
	return <-res
}

// SettleAsync settles in the background, so that the response need not wait
// for the durable write; done (if not nil) gets the result. Ledger.Wait
// waits for it.
func (r *Reservation) SettleAsync(rec *store.UsageRecord, done func(error)) {
	r.enqueue(rec, done, false)
}

// enqueue hands the settlement to the writer; false when the reservation
// was already settled or released.
func (r *Reservation) enqueue(rec *store.UsageRecord, done func(error), sync bool) bool {
	l := r.l
	l.mu.Lock()
	if r.done {
		l.mu.Unlock()
		return false
	}
	r.done = true
	l.pending.Add(1)
	l.mu.Unlock()
	s := &settlement{r: r, rec: rec, done: done, sync: sync}
	if !l.send(s) {
		l.finish([]*settlement{s}, ErrClosed)
	}
	return true
}

// send hands an entry to the writer; false after Close. The writer runs
// until Close, which waits for sends in progress.
func (l *Ledger) send(s *settlement) bool {
	l.sendMu.RLock()
	defer l.sendMu.RUnlock()
	if l.closed {
		return false
	}
	l.queue <- s
	if s.sync || len(l.queue) >= maxBatch {
		select {
		case l.urgent <- struct{}{}:
		default: // the writer has been told already
		}
	}
	return true
}

// member returns a member's state, made empty on first use. Callers hold
// l.mu.
func (l *Ledger) member(k string) *member {
	m := l.members[k]
	if m == nil {
		m = &member{}
		l.members[k] = m
	}
	return m
}

// writer takes queued settlements and writes them in batches until Close,
// then writes what is still queued.
func (l *Ledger) writer() {
	defer close(l.writerEnd)
	var tick <-chan time.Time
	if l.fleet != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	for {
		var first *settlement
		select {
		case first = <-l.queue:
		case <-tick:
			if up := l.upkeepFleet(false); len(up) > 0 {
				l.write(up, false)
			}
			continue
		case <-l.stop:
			for {
				select {
				case s := <-l.queue:
					l.write([]*settlement{s}, false)
				default:
					return
				}
			}
		}
		l.write(l.fill(first), false)
	}
}

// linger is how long the writer waits for more settlements to share a
// batch when the queue runs dry. Settlements are written after the
// response, so the client never waits for it; it turns one transaction
// and one sync to disk per request into one per many. Under load a
// batch's cost is mostly that sync (the store's sync of its log is tens
// of microseconds of CPU whatever the batch holds): at 5,000 requests a
// second, 10 ms makes batches of some fifty settlements where 2 ms made
// about ten, and the sync's share of a request a fifth. A settlement is
// durable at most linger (and its write) after its response, as before;
// its reservation is held until then, so a budget is never overshot for
// it. Settle (synchronous) skips it.
const linger = 10 * time.Millisecond

// fill gathers a batch: whatever is queued, then, unless a synchronous
// settlement is waiting, what arrives within linger, up to maxBatch.
//
// While it lingers the writer sleeps on a timer rather than receiving
// each settlement as it comes: a receive per settlement would wake the
// writer once per request, and on a busy core every wake-up is a
// goroutine switch that the requests' goroutines wait behind. A
// synchronous settlement, or a full batch in the queue, ends the linger
// through l.urgent.
func (l *Ledger) fill(first *settlement) []*settlement {
	batch := []*settlement{first}
	urgent := first.sync
	// A signal sent before the drain below is for entries it takes.
	select {
	case <-l.urgent:
	default:
	}
	drain := func() {
		for len(batch) < maxBatch {
			select {
			case s := <-l.queue:
				batch, urgent = append(batch, s), urgent || s.sync
				continue
			default:
			}
			return
		}
	}
	drain()
	if urgent || len(batch) >= maxBatch {
		return batch
	}
	timer := time.NewTimer(l.linger)
	select {
	case <-timer.C:
	case <-l.urgent:
	case <-l.stop:
	}
	timer.Stop()
	drain()
	return batch
}

// write stores a batch in one transaction: every usage record, and each
// touched budget read once and written once. If the batch fails, each
// settlement is retried on its own so that one bad record costs no other.
//
// A batch's usage records are appended without a check that their ids are
// free (the ids were just made) on its first attempt only: a failed
// transaction may still have been written (its sync failed, or the
// database's answer to the commit was lost), and a later attempt that
// took a record already there as new would charge its budget twice. Such
// an attempt finds the id taken, and as no other writer has this process's
// ids, the batch was written: it counts as settled. repeat says the batch
// was tried before.
func (l *Ledger) write(batch []*settlement, repeat bool) {
	var err error
	var groups []*fleetGroup
	for attempt := 0; ; attempt++ {
		l.settling.RLock()
		if l.fleet != nil {
			groups, err = l.commitFleet(batch)
		} else {
			checked := repeat || attempt > 0
			err = l.commit(batch, checked)
			if checked && errors.Is(err, store.ErrExists) {
				err = nil
			}
		}
		l.settling.RUnlock()
		if err == nil || !unavailable(err) || !l.backoff(attempt) {
			break
		}
	}
	if err != nil && len(batch) > 1 {
		for _, s := range batch {
			l.write([]*settlement{s}, true)
		}
		return
	}
	if l.fleet != nil {
		l.applyFleet(groups, l.clock.Now(), err)
	}
	l.finish(batch, err)
}

// unavailable reports a store that cannot be reached for now (a shared
// database restarting): worth waiting for, not a failure of the records.
func unavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return errors.As(err, &u) && u.Unavailable() && !errors.Is(err, store.ErrClosed)
}

// Settlement retries while the store is unavailable: settled spend is not
// dropped because the database restarted. Before Close the writer waits
// for as long as it takes; after Close it gives up after closeRetry.
const (
	retryMin   = 50 * time.Millisecond
	retryMax   = 2 * time.Second
	closeRetry = 10 * time.Second
)

// backoff waits before the next attempt of a batch; false means give up.
func (l *Ledger) backoff(attempt int) bool {
	d := min(retryMin<<min(attempt, 6), retryMax)
	select {
	case <-l.stop:
		if l.stoppedAt.IsZero() {
			l.stoppedAt = time.Now()
		}
		if time.Since(l.stoppedAt) > closeRetry {
			return false
		}
		time.Sleep(d)
	case <-time.After(d):
	}
	return true
}

func (l *Ledger) commit(batch []*settlement, repeat bool) error {
	var locks []string
	if l.shared {
		for _, s := range batch {
			locks = append(locks, lockName(s.r.Workspace, s.r.MemberID))
		}
	}
	return l.update(context.Background(), locks, func(tx store.Tx) error {
		budgets := map[string]*store.Budget{}
		put := tx.AppendUsage
		if repeat {
			put = tx.PutUsage
		}
		for _, s := range batch {
			if err := put(s.rec); err != nil {
				return err
			}
			if s.r.hold != "" {
				if err := tx.DeleteHold(s.r.Workspace, s.r.MemberID, s.r.hold); err != nil {
					return err
				}
			}
			k := key(s.r.Workspace, s.r.MemberID)
			b, seen := budgets[k]
			if !seen {
				var err error
				b, err = tx.Budget(s.r.Workspace, s.r.MemberID)
				if errors.Is(err, store.ErrNotFound) {
					b, err = nil, nil
				}
				if err != nil {
					return err
				}
				budgets[k] = b
			}
			if b != nil {
				roll(b, s.rec.Time)
				if !s.rec.Time.Before(b.PeriodStart) {
					b.Spent = money.Charge(b.Spent, s.rec.Cost)
				}
			}
		}
		for _, b := range budgets {
			if b != nil {
				if err := tx.PutBudget(b); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// finish releases the reservations of a written (or failed) batch, adds the
// costs to the cached budgets, and reports to the callers.
func (l *Ledger) finish(batch []*settlement, err error) {
	l.mu.Lock()
	for _, s := range batch {
		if l.fleet != nil || s.r == nil {
			continue // applyFleet did it
		}
		if m, ok := l.members[key(s.r.Workspace, s.r.MemberID)]; ok {
			m.reserved -= s.r.Amount
			if err == nil && m.budget != nil {
				roll(m.budget, s.rec.Time)
				if !s.rec.Time.Before(m.budget.PeriodStart) {
					m.budget.Spent = money.Charge(m.budget.Spent, s.rec.Cost)
				}
			}
		}
	}
	l.mu.Unlock()
	for _, s := range batch {
		if s.r == nil {
			continue // an admission or a slice's upkeep: no settlement
		}
		if s.done != nil {
			s.done(err)
		}
		l.pending.Done()
	}
}

// Record appends a usage record of a request that was never admitted (it
// costs nothing): refused by its budget, say. It is written once, not
// retried, so its fresh id is appended without a check.
func (l *Ledger) Record(ctx context.Context, rec *store.UsageRecord) error {
	return l.store.Update(context.WithoutCancel(ctx), func(tx store.Tx) error { return tx.AppendUsage(rec) })
}

// Release gives a reservation back without recording anything (the
// request never reached the provider).
func (r *Reservation) Release() {
	l := r.l
	l.mu.Lock()
	if r.done {
		l.mu.Unlock()
		return
	}
	r.done = true
	if r.hold != "" {
		l.mu.Unlock()
		l.releaseHold(r)
		return
	}
	defer l.mu.Unlock()
	if m, ok := l.members[key(r.Workspace, r.MemberID)]; ok {
		m.reserved -= r.Amount
	}
}

// Status is a member's budget as the ledger sees it now.
type Status struct {
	Budget   *store.Budget // nil: no budget
	Reserved money.Pico
}

// Status returns the member's budget with settled spend rolled to the
// current period, and the reservations in flight.
func (l *Ledger) Status(ctx context.Context, ws, memberID string) (Status, error) {
	if l.shared {
		return l.statusShared(ctx, ws, memberID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.state(ctx, ws, memberID)
	if err != nil {
		return Status{}, err
	}
	st := Status{Reserved: m.reserved}
	if m.budget != nil {
		roll(m.budget, l.clock.Now())
		b := *m.budget
		st.Budget = &b
	}
	return st, nil
}

// SetBudget sets (limit ≥ 0) or removes (limit < 0) a member's budget. The
// spend of the current period is recomputed from the usage records, so a
// new or changed budget starts from what the member really spent.
func (l *Ledger) SetBudget(ctx context.Context, ws, memberID, memberKind string, limit money.Pico, period string) (*store.Budget, error) {
	l.settling.Lock()
	defer l.settling.Unlock()
	if !l.shared {
		// A fleet node must not hold it: the write's invalidation reaches
		// this node's forget before the write returns.
		l.mu.Lock()
		defer l.mu.Unlock()
	}
	now := l.clock.Now().UTC()
	var out *store.Budget
	err := l.update(ctx, []string{lockName(ws, memberID)}, func(tx store.Tx) error {
		// Every node that knows the budget forgets it before this returns.
		if inv, ok := tx.(interface{ Invalidate() }); ok {
			inv.Invalidate()
		}
		if limit < 0 {
			out = nil
			return tx.DeleteBudget(ws, memberID)
		}
		start := PeriodStart(period, now)
		// Read the budget: a settlement that wrote it meanwhile makes this
		// transaction conflict and retry.
		if _, err := tx.Budget(ws, memberID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		var spent money.Pico
		err := tx.Usage(ws, UsageCursor(start), func(u *store.UsageRecord) (bool, error) {
			if u.MemberID == memberID && !u.Time.Before(start) {
				spent = money.Charge(spent, u.Cost)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		out = &store.Budget{Workspace: ws, MemberID: memberID, MemberKind: memberKind, Limit: limit, Period: period,
			Spent: spent, PeriodStart: start, Updated: now}
		return tx.PutBudget(out)
	})
	if err != nil {
		return nil, err
	}
	if l.shared {
		return out, nil
	}
	m, ok := l.members[key(ws, memberID)]
	if !ok {
		m = &member{}
		l.members[key(ws, memberID)] = m
	}
	if out == nil {
		m.budget = nil
		return nil, nil
	}
	b := *out
	m.budget = &b
	return out, nil
}

// Wait blocks until every settlement in flight has been written.
func (l *Ledger) Wait() { l.pending.Wait() }

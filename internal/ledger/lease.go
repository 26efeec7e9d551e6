package ledger

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// Budget leases: the ledger of a node of a fleet on a coherent shared
// store (store.Postgres with Coherent) admits requests without a database
// round trip.
//
// The node holds a slice of each busy member's room: a hold in the store
// with the id "slice_<node>", counted against the budget by every node
// like any hold. It admits locally while its requests in flight fit the
// slice. A request that does not fit goes to the settlement writer, which
// in one transaction under the member's lock reads the budget and every
// live hold and grows the slice by the request and, when the room allows,
// by about a second of the member's traffic (half the free room at most).
// Settlements shrink the slice by their cost as they move it into spend,
// so spend plus every live hold never passes the limit.
//
// A node that cannot fit a request while another node's slice has idle
// room signals a recall: every holder shrinks its slice to exactly what it
// has in flight (marked Exact) and keeps it exact for a while; the caller
// retries, and is refused only once the others hold no idle room, so a
// race across nodes admits exactly the room, as one node would. Idle
// slices are given back after SliceIdle; a slice lives SliceTTL past its
// last write (renewed while in use), so a dead node's slice expires.
//
// Whether a member has a budget, and its limit, are known from the last
// transaction; every write to a budget (SetBudget) invalidates the fleet's
// caches before it returns, and an invalidation makes this node forget
// what it knew and shrink its slices to what is in flight.
const (
	// SliceTTL is how long a slice counts after its last write.
	SliceTTL = 10 * time.Second
	// SliceIdle is how long a slice may go unused before it is given back.
	SliceIdle = 2 * time.Second
	// exactFor is how long a recalled slice stays exact.
	exactFor = 5 * time.Second
	// fleetLinger batches settlements longer than one node does: the
	// client never waits for them, and each batch costs about five round
	// trips (begin, locks, the budget, the writes, commit).
	fleetLinger = 200 * time.Millisecond
	// recallWait bounds how long a request waits for the other nodes to
	// give back idle room; a node that does not answer (dead) keeps its
	// slice until it expires.
	recallWait = 2 * time.Second
)

// Fleet is the coherent shared store the leases need.
type Fleet interface {
	store.Locker
	Coherent() bool
	OnInvalidate(fn func()) (remove func())
	Signal(ctx context.Context, topic, payload string) error
	OnSignal(topic string, fn func(payload string)) (remove func())
}

const recallTopic = "budget-recall"

// lease is a member's slice on this node, in member.
type lease struct {
	known   bool // the budget's existence was read since the last invalidation
	limited bool
	// slice bounds what may be in flight here (reserved); the hold in the
	// store is at least this much until `until`.
	slice money.Pico
	held  money.Pico // the slice in the store, as last written
	until time.Time
	exact time.Time // kept exact until then (recalled)
	// rate: amounts admitted in the current and the previous second.
	sec      int64
	cur, prv money.Pico
	lastUse  time.Time
}

func (ls *lease) count(now time.Time, amount money.Pico) {
	s := now.Unix()
	switch {
	case s == ls.sec:
	case s == ls.sec+1:
		ls.prv, ls.cur = ls.cur, 0
	default:
		ls.prv, ls.cur = 0, 0
	}
	ls.sec = s
	ls.cur = money.AddSat(ls.cur, amount)
	ls.lastUse = now
}

// headroom is about a second of the member's admitted amounts.
func (ls *lease) headroom() money.Pico { return max(ls.cur, ls.prv) }

// extension is an admission that did not fit the slice, decided by the
// writer.
type extension struct {
	ws, member string
	amount     money.Pico
	r          *Reservation
	err        error
	recall     bool // refused while another node's slice has idle room
	done       chan struct{}
}

// upkeep asks the writer to rewrite a member's slice: renew it, or shrink
// it to what is in flight.
type upkeep struct {
	ws, member string
	shrink     bool
}

func (l *Ledger) sliceID() string { return "slice_" + l.node }

func (l *Ledger) startFleet(f Fleet) {
	l.fleet = f
	// Several ledgers may share a store (one replaced across a reload):
	// each hears the store for itself until it closes.
	l.unhook = append(l.unhook, f.OnInvalidate(l.forget), f.OnSignal(recallTopic, l.recalled))
}

// forget drops what the node knows of budgets and shrinks every slice to
// what is in flight: the next admission of each member reads the store.
func (l *Ledger) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.members {
		m.lease.known = false
		m.lease.slice = min(m.lease.slice, m.reserved)
	}
}

// recalled answers another node's recall of a member's idle room.
func (l *Ledger) recalled(k string) {
	ws, member, ok := strings.Cut(k, "/")
	if !ok {
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	m, ok := l.members[k]
	if !ok || !m.lease.limited {
		l.mu.Unlock()
		return
	}
	m.lease.exact = now.Add(exactFor)
	// The stored slice may hold more than the local one (an invalidation
	// shrinks only the local one): rewrite it exact whenever there is one.
	held := m.lease.held > 0
	l.mu.Unlock()
	if held {
		l.send(&settlement{up: &upkeep{ws: ws, member: member, shrink: true}, sync: true})
	}
}

// reserveFleet admits from the slice, or through the writer.
func (l *Ledger) reserveFleet(ctx context.Context, ws, memberID string, amount money.Pico) (*Reservation, error) {
	now := l.clock.Now()
	k := key(ws, memberID)
	l.mu.Lock()
	m := l.member(k)
	m.lease.count(now, amount)
	if ls := &m.lease; ls.known {
		// The slice is checked exactly: spent 0 and a limit of the slice.
		if ok, _ := fits(ls.slice, 0, m.reserved, amount); !ls.limited || (now.Before(ls.until) && ok) {
			reserved, ok := money.Add(m.reserved, amount)
			if !ok {
				l.mu.Unlock()
				return nil, uncountable(m.reserved, amount)
			}
			m.reserved = reserved
			l.mu.Unlock()
			return &Reservation{Workspace: ws, MemberID: memberID, Amount: amount, l: l}, nil
		}
	}
	l.mu.Unlock()
	wait := time.Millisecond
	var deadline, signalled time.Time
	for attempt := 0; ; attempt++ {
		e := &extension{ws: ws, member: memberID, amount: amount, done: make(chan struct{})}
		if !l.send(&settlement{ext: e, sync: true}) {
			return nil, ErrClosed
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			// The writer still decides it; an admission nobody takes is
			// given back.
			go func() {
				<-e.done
				if e.r != nil {
					e.r.Release()
				}
			}()
			return nil, ctx.Err()
		}
		if e.err == nil || !e.recall || (attempt > 0 && time.Now().After(deadline)) {
			return e.r, e.err
		}
		if attempt == 0 {
			deadline = time.Now().Add(recallWait)
			l.mu.Lock()
			m.lease.exact = l.clock.Now().Add(exactFor) // contended: hoard nothing either
			l.mu.Unlock()
		}
		if time.Since(signalled) >= 50*time.Millisecond {
			// Again now and then: a holder may have taken more since.
			if err := l.fleet.Signal(ctx, recallTopic, k); err != nil {
				return nil, err
			}
			signalled = time.Now()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		wait = min(wait*2, 100*time.Millisecond)
	}
}

// fleetGroup is what one batch does to one member.
type fleetGroup struct {
	ws, member string
	settled    []*settlement
	exts       []*extension
	shrink     bool
	// planned in the transaction
	limited  bool
	hold     money.Pico
	exact    bool
	admitted money.Pico // granted extensions
}

// commitFleet writes a batch of a fleet node: usage records, spend, and
// the new slice of every member it touches, in one transaction holding
// their locks. It returns what to apply once the batch is committed.
func (l *Ledger) commitFleet(batch []*settlement) ([]*fleetGroup, error) {
	groups := map[string]*fleetGroup{}
	var order []string
	group := func(ws, member string) *fleetGroup {
		k := key(ws, member)
		g, ok := groups[k]
		if !ok {
			g = &fleetGroup{ws: ws, member: member}
			groups[k] = g
			order = append(order, k)
		}
		return g
	}
	var usage []*store.UsageRecord
	for _, s := range batch {
		switch {
		case s.ext != nil:
			g := group(s.ext.ws, s.ext.member)
			g.exts = append(g.exts, s.ext)
		case s.up != nil:
			g := group(s.up.ws, s.up.member)
			g.shrink = g.shrink || s.up.shrink
		default:
			g := group(s.r.Workspace, s.r.MemberID)
			g.settled = append(g.settled, s)
			usage = append(usage, s.rec)
		}
	}
	slices.Sort(order)
	locks := make([]string, len(order))
	for i, k := range order {
		g := groups[k]
		locks[i] = lockName(g.ws, g.member)
	}
	now := l.clock.Now().UTC()
	err := l.update(context.Background(), locks, func(tx store.Tx) error {
		// Reads first: the writes (usage records, budgets, slices) then
		// reach the database together with the commit.
		for _, k := range order {
			if err := l.planFleet(tx, groups[k], now); err != nil {
				return err
			}
		}
		for _, u := range usage {
			if err := tx.PutUsage(u); err != nil {
				return err
			}
		}
		return nil
	})
	out := make([]*fleetGroup, len(order))
	for i, k := range order {
		out[i] = groups[k]
	}
	return out, err
}

// planFleet settles a member's part of the batch and writes its slice.
func (l *Ledger) planFleet(tx store.Tx, g *fleetGroup, now time.Time) error {
	b, err := tx.Budget(g.ws, g.member)
	if errors.Is(err, store.ErrNotFound) {
		g.limited, g.hold = false, 0
		return tx.DeleteHold(g.ws, g.member, l.sliceID())
	}
	if err != nil {
		return err
	}
	g.limited = true
	roll(b, now)
	var settledA, settledC money.Pico
	for _, s := range g.settled {
		settledA = money.AddSat(settledA, s.r.Amount)
		settledC = money.Charge(settledC, s.rec.Cost)
		if !s.rec.Time.Before(b.PeriodStart) {
			b.Spent = money.Charge(b.Spent, s.rec.Cost)
		}
	}
	if len(g.settled) > 0 {
		if err := tx.PutBudget(b); err != nil {
			return err
		}
	}
	// What the slice must keep: with the slice kept, every admission the
	// node may still make from it (the slice less what settles); exact,
	// what is in flight once the batch is settled, with no admission from
	// the slice meanwhile.
	k := key(g.ws, g.member)
	l.mu.Lock()
	m := l.member(k)
	ls := &m.lease
	g.exact = g.shrink || now.Before(ls.exact)
	// A slice past its local expiry may have expired in the store and its
	// room gone to others: only what is in flight is kept, and checked.
	lapsed := !now.Before(ls.until)
	var base money.Pico
	if g.exact || lapsed {
		ls.slice = min(ls.slice, m.reserved)
		base = money.SubSat(m.reserved, settledA)
	} else {
		base = money.SubSat(ls.slice, min(settledC, settledA))
	}
	// Grow by about a second of the member's traffic, and at least by
	// what is in flight (so that a cold slice doubles instead of creeping).
	headroom := max(ls.headroom(), m.reserved)
	l.mu.Unlock()
	base = max(base, 0)
	hold := base
	if len(g.exts) > 0 || lapsed {
		holds, err := tx.Holds(g.ws, g.member)
		if err != nil {
			return err
		}
		var others money.Pico
		recallable := false
		for _, h := range holds {
			if h.ID == l.sliceID() {
				continue
			}
			if !now.Before(h.ExpiresAt) {
				if err := tx.DeleteHold(g.ws, g.member, h.ID); err != nil {
					return err
				}
				continue
			}
			others = money.Charge(others, h.Amount)
			if strings.HasPrefix(h.ID, "slice_") && !h.Exact {
				recallable = true
			}
		}
		for _, e := range g.exts {
			// This slice (hold) is counted with the other holds: spent +
			// others + hold + amount ≤ limit, exactly.
			held := money.AddSat(others, hold)
			ok, rem := fits(b.Limit, b.Spent, held, e.amount)
			if ok {
				hold = money.AddSat(hold, e.amount)
				g.admitted = money.AddSat(g.admitted, e.amount)
				e.r = &Reservation{Workspace: g.ws, MemberID: g.member, Amount: e.amount, l: l}
				continue
			}
			e.err = exceeded(b, rem, e.amount)
			// A recall cannot help an amount that would not fit even with
			// no hold at all (a huge or saturated one): refused at once.
			alone, _ := fits(b.Limit, b.Spent, 0, e.amount)
			e.recall = recallable && alone
		}
		if !g.exact && g.admitted > 0 {
			// The room left (free − hold), halved; never negative, never
			// wrapped.
			_, room := fits(b.Limit, b.Spent, money.AddSat(others, hold), 0)
			if grow := min(headroom, room/2); grow > 0 {
				hold += grow
			}
		}
	}
	g.hold = hold
	if hold == 0 {
		return tx.DeleteHold(g.ws, g.member, l.sliceID())
	}
	return tx.PutHold(&store.Hold{ID: l.sliceID(), Workspace: g.ws, MemberID: g.member, Amount: hold, Node: l.node,
		ExpiresAt: now.Add(SliceTTL), Exact: g.exact})
}

// applyFleet makes a committed batch's slices the node's, admits its
// extensions and settles its reservations; after a failed batch only the
// reservations are released and the extensions answered with the error.
func (l *Ledger) applyFleet(groups []*fleetGroup, now time.Time, err error) {
	l.mu.Lock()
	for _, g := range groups {
		m := l.member(key(g.ws, g.member))
		for _, s := range g.settled {
			m.reserved -= s.r.Amount
		}
		if err != nil {
			continue
		}
		ls := &m.lease
		ls.known, ls.limited = true, g.limited
		m.reserved = money.AddSat(m.reserved, g.admitted)
		if !g.limited {
			ls.slice, ls.held = 0, 0
			for _, e := range g.exts {
				reserved, ok := money.Add(m.reserved, e.amount)
				if !ok {
					e.err = uncountable(m.reserved, e.amount)
					continue
				}
				e.r = &Reservation{Workspace: g.ws, MemberID: g.member, Amount: e.amount, l: l}
				m.reserved = reserved
			}
			continue
		}
		ls.slice, ls.held = g.hold, g.hold
		// The stored slice expires SliceTTL after now; stop admitting
		// from it a little earlier, so that it never runs past what the
		// other nodes count.
		ls.until = now.Add(SliceTTL - SliceTTL/5)
	}
	l.mu.Unlock()
	for _, g := range groups {
		for _, e := range g.exts {
			if err != nil {
				e.err, e.r = err, nil
			}
			close(e.done)
		}
	}
}

// upkeepFleet lists the slices to rewrite: in use and getting old
// (renewed), idle for SliceIdle (given back), or, when the node is
// leaving, every slice with idle room. The writer runs it about once a
// second.
func (l *Ledger) upkeepFleet(leaving bool) []*settlement {
	now := l.clock.Now()
	var out []*settlement
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, m := range l.members {
		ls := &m.lease
		if !ls.limited || (ls.slice == 0 && m.reserved == 0) {
			continue
		}
		idle := ls.slice > m.reserved && (leaving || now.Sub(ls.lastUse) >= SliceIdle)
		if !idle && (leaving || ls.until.Sub(now) >= SliceTTL/2) {
			continue
		}
		ws, member, _ := strings.Cut(k, "/")
		out = append(out, &settlement{up: &upkeep{ws: ws, member: member, shrink: idle}})
	}
	return out
}

// giveBack returns every slice's idle room to the store (a node leaving
// the fleet does, on Close, once its writer has stopped).
func (l *Ledger) giveBack() {
	if l.fleet == nil {
		return
	}
	if batch := l.upkeepFleet(true); len(batch) > 0 {
		l.write(batch, false)
	}
}

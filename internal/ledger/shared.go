package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// HoldTTL bounds how long a hold of a shared store counts against its
// budget: longer than any request may run, so that only the holds of a
// node that died (and never settled them) expire.
const HoldTTL = 2 * time.Hour

// lockName names the lock that orders every change of a member's budget
// and holds in a shared store.
func lockName(ws, memberID string) string { return "budget/" + ws + "/" + memberID }

// update runs fn in a write transaction of the store. On a shared store
// that can lock (store.Locker), the transaction holds the members' budget
// locks, so that contending requests of one member queue instead of
// failing serialization and retrying; otherwise it relies on the store's
// own isolation.
func (l *Ledger) update(ctx context.Context, locks []string, fn func(store.Tx) error) error {
	if lk, ok := l.store.(store.Locker); ok && l.shared {
		return lk.UpdateLocked(ctx, locks, fn)
	}
	return l.store.Update(ctx, fn)
}

func newNodeID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "node_" + hex.EncodeToString(b)
}

func newHoldID(now time.Time) string {
	b := make([]byte, 6)
	rand.Read(b)
	return UsageID(now) + hex.EncodeToString(b)
}

// liveHolds sums a member's unexpired holds and deletes the expired ones.
func liveHolds(tx store.Tx, ws, memberID string, now time.Time, prune bool) (money.Pico, error) {
	holds, err := tx.Holds(ws, memberID)
	if err != nil {
		return 0, err
	}
	var sum money.Pico
	for _, h := range holds {
		if !now.Before(h.ExpiresAt) {
			if prune {
				if err := tx.DeleteHold(ws, memberID, h.ID); err != nil {
					return 0, err
				}
			}
			continue
		}
		// A negative hold makes no sense: it counts as Saturated, like
		// any sum past int64.
		sum = money.Charge(sum, h.Amount)
	}
	return sum, nil
}

// reserveShared admits a request against a budget kept in a shared store:
// one transaction, holding the member's lock (or serializable), reads the
// budget and the member's live holds and adds a hold of its own, so that
// concurrent admissions on any number of nodes are ordered and never pass
// the limit. A member without a budget costs one read and no write.
func (l *Ledger) reserveShared(ctx context.Context, ws, memberID string, amount money.Pico) (*Reservation, error) {
	now := l.clock.Now().UTC()
	var budget *store.Budget
	err := l.store.View(ctx, func(tx store.Tx) error {
		b, err := tx.Budget(ws, memberID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		budget = b
		return err
	})
	if err != nil {
		return nil, err
	}
	r := &Reservation{Workspace: ws, MemberID: memberID, Amount: amount, l: l}
	if budget == nil {
		return r, nil
	}
	hold := &store.Hold{ID: newHoldID(now), Workspace: ws, MemberID: memberID, Amount: amount, Node: l.node, ExpiresAt: now.Add(HoldTTL)}
	var refused *ExceededError
	err = l.update(ctx, []string{lockName(ws, memberID)}, func(tx store.Tx) error {
		refused = nil
		b, err := tx.Budget(ws, memberID)
		if errors.Is(err, store.ErrNotFound) {
			return nil // removed meanwhile: unlimited, no hold
		}
		if err != nil {
			return err
		}
		roll(b, now)
		held, err := liveHolds(tx, ws, memberID, now, true)
		if err != nil {
			return err
		}
		if ok, rem := fits(b.Limit, b.Spent, held, amount); !ok {
			refused = exceeded(b, rem, amount)
			return nil
		}
		r.hold = hold.ID
		return tx.PutHold(hold)
	})
	if err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return r, nil
}

// releaseHold deletes a hold that will never be settled. It never fails the
// caller: a hold left behind expires after HoldTTL.
func (l *Ledger) releaseHold(r *Reservation) {
	l.update(context.Background(), []string{lockName(r.Workspace, r.MemberID)}, func(tx store.Tx) error {
		return tx.DeleteHold(r.Workspace, r.MemberID, r.hold)
	})
}

// statusShared reads a member's budget and live holds from the shared store.
func (l *Ledger) statusShared(ctx context.Context, ws, memberID string) (Status, error) {
	now := l.clock.Now().UTC()
	var st Status
	err := l.store.View(ctx, func(tx store.Tx) error {
		st = Status{}
		b, err := tx.Budget(ws, memberID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		roll(b, now)
		st.Budget = b
		st.Reserved, err = liveHolds(tx, ws, memberID, now, false)
		return err
	})
	return st, err
}

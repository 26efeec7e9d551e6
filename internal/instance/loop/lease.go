package loop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentgate/agentgate/internal/store"
)

// Drain leases: at most one drain per session across every process that
// shares the store. A drain claims its session's lease before each run and
// renews it while it runs; it gives the lease up only in the transaction
// that finds no work left, so a prompt stored by another node meanwhile is
// either seen by this drain or finds the lease free. A process that dies
// holding a lease loses it after LeaseTTL, and a node sharing the store
// sweeps for such sessions every LeaseTTL. A store of one process (Badger)
// needs none of this: no lease is written there.
const (
	// LeaseTTL is how long a lease holds without renewal.
	LeaseTTL   = 30 * time.Second
	leaseRenew = 10 * time.Second
)

type drainLease struct {
	Node  string    `json:"node,omitempty"`
	Until time.Time `json:"until,omitzero"`
}

// LeaseKey is the store's meta key of a session's drain lease.
func LeaseKey(instance, sid string) string { return "drain_lease/" + instance + "/" + sid }

func newNodeID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func readLease(tx store.Tx, key string) (drainLease, error) {
	var l drainLease
	raw, err := tx.Meta(key)
	if errors.Is(err, store.ErrNotFound) {
		return l, nil
	}
	if err != nil {
		return l, err
	}
	if len(raw) > 0 {
		json.Unmarshal(raw, &l) // unreadable: treated as free
	}
	return l, nil
}

// claimDrain takes or renews the session's drain lease for node; false
// when another node holds it.
func (s svc) claimDrain(ctx context.Context, sid, node string) (bool, error) {
	if !s.Shared(ctx) {
		return true, nil
	}
	key := LeaseKey(s.InstanceName(), sid)
	var ok bool
	err := s.WriteTx(ctx, func(tx store.Tx) error {
		ok = false
		now := s.Clock.Now()
		l, err := readLease(tx, key)
		if err != nil {
			return err
		}
		if l.Node != "" && l.Node != node && now.Before(l.Until) {
			return nil
		}
		ok = true
		raw, _ := json.Marshal(drainLease{Node: node, Until: now.Add(LeaseTTL)})
		return tx.PutMeta(key, raw)
	})
	return ok, err
}

// releaseDrain gives node's lease up unless the session has work left
// (then it reports pending and keeps the lease), in one transaction.
func (s svc) releaseDrain(ctx context.Context, sid, node string) (pending bool, err error) {
	if !s.Shared(ctx) {
		return false, nil
	}
	key := LeaseKey(s.InstanceName(), sid)
	err = s.WriteTx(ctx, func(tx store.Tx) error {
		pending = false
		w, err := s.nextWork(tx, sid, true)
		if err != nil {
			return err
		}
		if w != nil {
			pending = true
			return nil
		}
		return freeLease(tx, key, node)
	})
	return pending, err
}

// freeLease gives up node's lease (a lease of another node is left alone).
func freeLease(tx store.Tx, key, node string) error {
	l, err := readLease(tx, key)
	if err != nil || l.Node != node {
		return err
	}
	raw, _ := json.Marshal(drainLease{})
	return tx.PutMeta(key, raw)
}

// releaseLease gives node's lease up whatever work is left (the drain is
// stopping), so that another node need not wait for it to expire.
func (s svc) releaseLease(ctx context.Context, sid, node string) {
	if !s.Shared(ctx) {
		return
	}
	key := LeaseKey(s.InstanceName(), sid)
	s.WriteTx(ctx, func(tx store.Tx) error { return freeLease(tx, key, node) })
}

package store

import (
	"context"
	"sync/atomic"
)

// Tracked wraps a single-process store and counts the committed writes to
// the records that decide who a request is and where it goes: workspaces,
// people, members, service accounts, API keys, token families, tokens,
// connections, workspace models and policies. Readers cache what they derive from those records together
// with the Generation they read it under, and trust the cached copy only
// while Generation is unchanged.
//
// The count is raised after the write commits and before Update returns,
// so a revocation is seen by the very next request: a reader that loaded a
// record before the commit holds an older generation, and one that loads
// it after the raise reads the committed value. A write that fails raises
// it too (nothing is lost by dropping caches once more).
//
// Only a store with a single process writing it may be tracked: writes by
// another process would not raise the count.
type Tracked struct {
	Store
	gen atomic.Uint64
}

// Track wraps s.
func Track(s Store) *Tracked { return &Tracked{Store: s} }

// Generation is the number of tracked write transactions so far.
func (t *Tracked) Generation() uint64 { return t.gen.Load() }

// Update runs fn and raises the generation when fn wrote a tracked record.
func (t *Tracked) Update(ctx context.Context, fn func(Tx) error) error {
	var dirty atomic.Bool
	err := t.Store.Update(ctx, func(tx Tx) error { return fn(trackingTx{Tx: tx, dirty: &dirty}) })
	if dirty.Load() {
		t.gen.Add(1)
	}
	return err
}

// CacheGeneration is Generation, always trusted: one process writes the store.
func (t *Tracked) CacheGeneration() (uint64, bool) { return t.gen.Load(), true }

// Shared reports whether the wrapped store is shared by several processes;
// a tracked store never is.
func (t *Tracked) Shared() bool { return false }

// trackingTx marks the transaction dirty on every write of a tracked record.
type trackingTx struct {
	Tx
	dirty *atomic.Bool
}

func (t trackingTx) mark(err error) error { t.dirty.Store(true); return err }

// Invalidate marks the transaction as one that every node's cache must
// see: a write the caches depend on without being one of the tracked
// records (a budget's limit, say).
func (t trackingTx) Invalidate() { t.dirty.Store(true) }

func (t trackingTx) PutWorkspace(w *Workspace) error { return t.mark(t.Tx.PutWorkspace(w)) }
func (t trackingTx) PutPerson(p *Person) error       { return t.mark(t.Tx.PutPerson(p)) }
func (t trackingTx) PutMember(m *Member) error       { return t.mark(t.Tx.PutMember(m)) }
func (t trackingTx) DeleteMember(ws, p string) error { return t.mark(t.Tx.DeleteMember(ws, p)) }
func (t trackingTx) DeleteServiceAccount(id string) error {
	return t.mark(t.Tx.DeleteServiceAccount(id))
}
func (t trackingTx) PutServiceAccount(sa *ServiceAccount) error {
	return t.mark(t.Tx.PutServiceAccount(sa))
}
func (t trackingTx) PutAPIKey(k *APIKey, create bool) error { return t.mark(t.Tx.PutAPIKey(k, create)) }
func (t trackingTx) PutConnection(c *Connection, create bool) error {
	return t.mark(t.Tx.PutConnection(c, create))
}
func (t trackingTx) DeleteConnection(id string) error { return t.mark(t.Tx.DeleteConnection(id)) }
func (t trackingTx) PutWorkspaceModel(m *WorkspaceModel, create bool) error {
	return t.mark(t.Tx.PutWorkspaceModel(m, create))
}
func (t trackingTx) DeleteWorkspaceModel(ws, id string) error {
	return t.mark(t.Tx.DeleteWorkspaceModel(ws, id))
}
func (t trackingTx) PutPolicy(p *Policy) error { return t.mark(t.Tx.PutPolicy(p)) }
func (t trackingTx) DeletePolicy(ws, id string) error {
	return t.mark(t.Tx.DeletePolicy(ws, id))
}
func (t trackingTx) PutTokenFamily(f *TokenFamily) error { return t.mark(t.Tx.PutTokenFamily(f)) }
func (t trackingTx) PutToken(tok *Token, create bool) error {
	return t.mark(t.Tx.PutToken(tok, create))
}

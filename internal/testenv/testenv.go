// Package testenv builds what many tests share: a real Console service over
// a real Badger store in a temporary directory, a fresh random master key,
// and a fake clock.
package testenv

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// Env is a service, its store and its clock.
type Env struct {
	Dir string
	// Store is the Badger store tracked as the app tracks it (store.Track),
	// so that tests exercise the hot-path caches; write through it.
	Store   *store.Tracked
	Badger  *store.Badger
	Service *service.Service
	Clock   *clock.Fake
}

// New opens the store (closed when the test ends) and builds the service,
// with the clock set to start.
func New(t testing.TB, start time.Time) *Env {
	t.Helper()
	dir := t.TempDir()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	master := make([]byte, secrets.MasterKeySize)
	if _, err := rand.Read(master); err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.NewKeys(master)
	if err != nil {
		t.Fatalf("NewKeys: %v", err)
	}
	clk := clock.NewFake(start)
	tracked := store.Track(st)
	svc := service.New(tracked, keys, clk, nil)
	t.Cleanup(svc.Ledger.Close)
	return &Env{Dir: dir, Store: tracked, Badger: st, Service: svc, Clock: clk}
}

package store

import (
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/pgtest"
)

func openCoherent(t *testing.T, dsn string, lease time.Duration) *Postgres {
	t.Helper()
	s, err := OpenPostgres(ctx, PostgresOptions{DSN: dsn, Coherent: true, CacheLease: lease})
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestCoherentConformance(t *testing.T) {
	pgtest.Shared(t)
	runConformance(t, func(t *testing.T) Store {
		return openCoherent(t, pgtest.Shared(t).NewDatabase(t), 0)
	})
}

// A tracked write on one node has moved every node's cache generation when
// it returns; an untracked one (usage, meta) moves none.
func TestCoherentWritesMoveEveryNodesGeneration(t *testing.T) {
	dsn := pgtest.Shared(t).NewDatabase(t)
	a, b := openCoherent(t, dsn, 0), openCoherent(t, dsn, 0)
	for i := range 100 {
		ga, oka := a.CacheGeneration()
		gb, okb := b.CacheGeneration()
		if !oka || !okb {
			t.Fatalf("round %d: a node does not trust its cache (%v, %v)", i, oka, okb)
		}
		w := a
		if i%2 == 1 {
			w = b
		}
		update(t, w, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1", Name: "n"}) })
		if g, _ := a.CacheGeneration(); g == ga {
			t.Fatalf("round %d: node A's generation did not move", i)
		}
		if g, _ := b.CacheGeneration(); g == gb {
			t.Fatalf("round %d: node B's generation did not move", i)
		}
	}
	ga, _ := a.CacheGeneration()
	gb, _ := b.CacheGeneration()
	update(t, a, func(tx Tx) error {
		if err := tx.PutMeta("x", []byte("1")); err != nil {
			return err
		}
		return tx.PutUsage(&UsageRecord{ID: "u1", Workspace: "ws1"})
	})
	time.Sleep(50 * time.Millisecond) // a notification would have arrived
	if g, _ := a.CacheGeneration(); g != ga {
		t.Fatal("an untracked write moved node A's generation")
	}
	if g, _ := b.CacheGeneration(); g != gb {
		t.Fatal("an untracked write moved node B's generation")
	}
	if n := waitLiveNodes(a, 2); n != 2 {
		t.Fatalf("live nodes seen by A: %d, want 2", n)
	}
}

// waitLiveNodes waits (up to 5 s: a heartbeat a second) until s counts n
// live nodes, and returns what it counts.
func waitLiveNodes(s *Postgres, n int) int {
	deadline := time.Now().Add(5 * time.Second)
	for s.LiveNodes() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return s.LiveNodes()
}

// A node that stopped answering (here: a row nobody renews, its
// generation unacknowledged) holds a write back only until its lease has
// run out; a node that leaves removes its row and holds nothing back.
func TestCoherentWriteWaitsForASilentNodesLease(t *testing.T) {
	dsn := pgtest.Shared(t).NewDatabase(t)
	a := openCoherent(t, dsn, 0)
	sqlQuery[int32](t, dsn, `INSERT INTO agentgate_nodes (node, acked, expires_at) VALUES ('node_silent', 0, now() + interval '700 milliseconds') RETURNING 1`)
	update(t, a, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
	if live := sqlQuery[bool](t, dsn, `SELECT expires_at > now() FROM agentgate_nodes WHERE node = 'node_silent'`); len(live) != 1 || live[0] {
		t.Fatalf("the write returned while the silent node's lease was live (%v)", live)
	}
	b := openCoherent(t, dsn, 0)
	node := b.Node()
	b.Close()
	if rows := sqlQuery[string](t, dsn, `SELECT node FROM agentgate_nodes WHERE node = $1`, node); len(rows) != 0 {
		t.Fatalf("a closed node left its row: %v", rows)
	}
}

package store

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/agentgate/agentgate/internal/pgtest"
)

// The same store operations on both backends: go test -bench . -run '^$'
// ./internal/store (the PostgreSQL ones need PostgreSQL, as the tests do).

func benchBackends(b *testing.B, run func(b *testing.B, s Store)) {
	b.Run("badger", func(b *testing.B) {
		s, err := OpenBadger(BadgerOptions{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
	b.Run("postgres", func(b *testing.B) {
		s, err := OpenPostgres(ctx, PostgresOptions{DSN: pgtest.Shared(b).NewDatabase(b)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
}

// A key lookup in a read-only transaction, as every gateway request does.
func BenchmarkViewAPIKey(b *testing.B) {
	benchBackends(b, func(b *testing.B, s Store) {
		if err := s.Update(ctx, func(tx Tx) error {
			return tx.PutAPIKey(&APIKey{ID: "key000000001", Workspace: "ws", ServiceAccount: "sa", MAC: make([]byte, 32)}, true)
		}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.View(ctx, func(tx Tx) error { _, err := tx.APIKey("key000000001"); return err }); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// An append of a usage record, as every settled request does.
func BenchmarkUpdatePutUsage(b *testing.B) {
	benchBackends(b, func(b *testing.B, s Store) {
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := fmt.Sprintf("u%012d", n.Add(1))
				if err := s.Update(ctx, func(tx Tx) error {
					return tx.PutUsage(&UsageRecord{ID: id, Workspace: "ws", MemberID: "m", Cost: 1})
				}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// A page of 50 sessions, newest first.
func BenchmarkListSessions(b *testing.B) {
	benchBackends(b, func(b *testing.B, s Store) {
		if err := s.Update(ctx, func(tx Tx) error {
			for i := 0; i < 200; i++ {
				if err := tx.PutInstanceSession(session("i", fmt.Sprintf("ses_%04d", i), "", "/d", "p", "", int64(i)), true); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			n := 0
			if err := s.View(ctx, func(tx Tx) error {
				return tx.ListInstanceSessions("i", SessionScan{Desc: true}, func(*InstanceSession) (bool, error) { n++; return n < 50, nil })
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

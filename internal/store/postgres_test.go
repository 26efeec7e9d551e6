package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/pgtest"
)

func openPG(t *testing.T, dsn string) *Postgres {
	t.Helper()
	s, err := OpenPostgres(ctx, PostgresOptions{DSN: dsn})
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newPG opens a store on a fresh database of the shared test server.
func newPG(t *testing.T) (*Postgres, string) {
	t.Helper()
	dsn := pgtest.Shared(t).NewDatabase(t)
	return openPG(t, dsn), dsn
}

func TestPostgresConformance(t *testing.T) {
	pgtest.Shared(t)
	start := time.Now()
	runConformance(t, func(t *testing.T) Store { s, _ := newPG(t); return s })
	t.Logf("conformance suite on PostgreSQL: %v", time.Since(start))
}

// PostgreSQL's AppendUsage still refuses a taken id (its primary key):
// the records of several nodes meet in one table.
func TestPostgresAppendUsageRefusesTakenID(t *testing.T) {
	s, _ := newPG(t)
	if err := testAppendUsageTaken(t, s); !errors.Is(err, ErrExists) {
		t.Fatalf("AppendUsage of a taken id: %v, want ErrExists", err)
	}
}

func sqlQuery[T any](t *testing.T, dsn, sql string, args ...any) []T {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[T])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Several nodes starting at once on a new database: each migration is
// applied exactly once and every node opens.
func TestPostgresConcurrentMigrations(t *testing.T) {
	dsn := pgtest.Shared(t).NewDatabase(t)
	const n = 4
	var wg sync.WaitGroup
	stores := make([]*Postgres, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = OpenPostgres(ctx, PostgresOptions{DSN: dsn})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("opener %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	equal(t, "applied migrations", sqlQuery[int32](t, dsn, `SELECT version FROM agentgate_schema_migrations ORDER BY version`), []int32{1, 2, 3, 4})
	equal(t, "tables", sqlQuery[string](t, dsn, `SELECT tablename::text FROM pg_tables WHERE tablename LIKE 'agentgate%' ORDER BY 1`),
		[]string{"agentgate_cache", "agentgate_kv", "agentgate_nodes", "agentgate_schema_migrations"})
	equal(t, "cache generation rows", sqlQuery[int64](t, dsn, `SELECT gen FROM agentgate_cache`), []int64{0})
	// All of them work on the one database.
	for i, s := range stores {
		update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: fmt.Sprintf("ws%d", i)}) })
	}
	view(t, stores[0], func(tx Tx) error {
		list, err := tx.Workspaces()
		if err != nil || len(list) != n {
			t.Fatalf("Workspaces: %d, %v", len(list), err)
		}
		v, err := tx.Meta("schema_version")
		if err != nil || string(v) != strconv.Itoa(SchemaVersion) {
			t.Fatalf("schema_version = %q, %v", v, err)
		}
		return nil
	})
	// Opening again applies nothing more.
	openPG(t, dsn)
	equal(t, "migrations after reopen", len(sqlQuery[int32](t, dsn, `SELECT version FROM agentgate_schema_migrations`)), len(postgresMigrations)-1)
}

func TestPostgresRefusesNewerMigration(t *testing.T) {
	s, dsn := newPG(t)
	s.Close()
	sqlQuery[int32](t, dsn, `INSERT INTO agentgate_schema_migrations (version) VALUES (99) RETURNING version`)
	for i := 0; i < 2; i++ {
		s, err := OpenPostgres(ctx, PostgresOptions{DSN: dsn})
		if err == nil {
			s.Close()
			t.Fatal("a database of migration 99 was opened")
		}
		if !strings.Contains(err.Error(), "newer") || !strings.Contains(err.Error(), "99") {
			t.Fatalf("error %q does not say the database is newer", err)
		}
	}
}

// The records' schema version is checked as Badger checks it.
func TestPostgresRefusesNewerSchema(t *testing.T) {
	s, dsn := newPG(t)
	update(t, s, func(tx Tx) error { return tx.PutMeta("schema_version", []byte("99")) })
	s.Close()
	if s, err := OpenPostgres(ctx, PostgresOptions{DSN: dsn}); err == nil {
		s.Close()
		t.Fatal("records of schema 99 were opened")
	} else if !strings.Contains(err.Error(), "newer") || !strings.Contains(err.Error(), "99") {
		t.Fatalf("error %q does not say the data is newer", err)
	}
}

// A commit is visible to another store on the same database (another node):
// nothing is kept in the process.
func TestPostgresDurableAcrossStores(t *testing.T) {
	a, dsn := newPG(t)
	conn := testConnection("conn_1", "ws1")
	update(t, a, func(tx Tx) error {
		for _, err := range []error{
			tx.PutWorkspace(&Workspace{ID: "ws1", Name: "One", Created: t0}),
			tx.PutPerson(&Person{ID: "p1", Email: "P1@example.com", Created: t0}),
			tx.PutMember(&Member{Workspace: "ws1", PersonID: "p1", Role: RoleOwner, Created: t0}),
			tx.PutConnection(conn, true),
			tx.PutHold(&Hold{ID: "h1", Workspace: "ws1", MemberID: "p1", Amount: 5, ExpiresAt: t0}),
			tx.PutMeta("master_key_fingerprint", []byte("fp")),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	})
	b := openPG(t, dsn)
	view(t, b, func(tx Tx) error {
		p, err := tx.PersonByEmail("p1@EXAMPLE.com")
		if err != nil || p.ID != "p1" {
			t.Fatalf("PersonByEmail on the second store: %v, %v", p, err)
		}
		conns, err := tx.Connections("ws1")
		if err != nil || len(conns) != 1 {
			t.Fatalf("Connections: %v, %v", conns, err)
		}
		equal(t, "Connection on the second store", conns[0], conn)
		hs, err := tx.Holds("ws1", "p1")
		if err != nil || len(hs) != 1 {
			t.Fatalf("Holds: %v, %v", hs, err)
		}
		v, err := tx.Meta("master_key_fingerprint")
		if err != nil || string(v) != "fp" {
			t.Fatalf("Meta: %q, %v", v, err)
		}
		return nil
	})
	// A uniqueness check sees the other store's commit.
	err := b.Update(ctx, func(tx Tx) error { return tx.PutPerson(&Person{ID: "p2", Email: "p1@example.com"}) })
	if !errors.Is(err, ErrExists) {
		t.Fatalf("email taken on the other store: %v, want ErrExists", err)
	}
	a.Close()
	b.Close()
	c := openPG(t, dsn)
	view(t, c, func(tx Tx) error {
		_, err := tx.Workspace("ws1")
		return err
	})
}

// Two transactions each read a member's holds and add one: under
// SERIALIZABLE the range read conflicts with the other's insert, so one of
// them is retried and sees the other's hold. This is what keeps a budget
// exact across nodes.
func TestPostgresHoldsConflict(t *testing.T) {
	a, dsn := newPG(t)
	b := openPG(t, dsn) // two nodes
	var attempts atomic.Int32
	var read sync.WaitGroup
	read.Add(2)
	seen := make([][]string, 2)
	var wg sync.WaitGroup
	for i, s := range []*Postgres{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			err := s.Update(ctx, func(tx Tx) error {
				attempts.Add(1)
				hs, err := tx.Holds("ws1", "m1")
				if err != nil {
					return err
				}
				seen[i] = ids(hs, func(h *Hold) string { return h.ID })
				if first {
					// Both have read before either writes.
					first = false
					read.Done()
					read.Wait()
				}
				return tx.PutHold(&Hold{ID: fmt.Sprintf("h%d", i), Workspace: "ws1", MemberID: "m1", Amount: 1, ExpiresAt: t0})
			})
			if err != nil {
				t.Errorf("node %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if got := attempts.Load(); got != 3 {
		t.Fatalf("%d attempts, want 3 (one of the two retried once)", got)
	}
	if !(len(seen[0]) == 0 && len(seen[1]) == 1) && !(len(seen[1]) == 0 && len(seen[0]) == 1) {
		t.Fatalf("last reads %v: the retried one must see the other's hold", seen)
	}
	view(t, a, func(tx Tx) error {
		hs, _ := tx.Holds("ws1", "m1")
		equal(t, "holds", ids(hs, func(h *Hold) string { return h.ID }), []string{"h0", "h1"})
		return nil
	})
}

// Many nodes admitting against one limit never admit more than it.
func TestPostgresHoldsExactUnderContention(t *testing.T) {
	first, dsn := newPG(t)
	nodes := []*Postgres{first, openPG(t, dsn), openPG(t, dsn)}
	const limit, amount, tries = 10, 1, 30
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < tries; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := false
			err := nodes[i%len(nodes)].Update(ctx, func(tx Tx) error {
				ok = false
				hs, err := tx.Holds("ws1", "m1")
				if err != nil {
					return err
				}
				var sum int
				for _, h := range hs {
					sum += int(h.Amount)
				}
				if sum+amount > limit {
					return nil
				}
				ok = true
				return tx.PutHold(&Hold{ID: fmt.Sprintf("h%02d", i), Workspace: "ws1", MemberID: "m1", Amount: amount, ExpiresAt: t0})
			})
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			if ok {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	view(t, first, func(tx Tx) error {
		hs, _ := tx.Holds("ws1", "m1")
		if len(hs) != limit || admitted.Load() != limit {
			t.Fatalf("%d holds stored, %d admitted; want exactly %d", len(hs), admitted.Load(), limit)
		}
		return nil
	})
}

func isUnavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return errors.As(err, &u) && u.Unavailable()
}

// While the server is down, calls fail at once with an Unavailable error
// (503 on the wire); when it is back, the same store works again without
// being reopened, and nothing committed is lost.
func TestPostgresUnavailableAndRecovery(t *testing.T) {
	shared := pgtest.Shared(t)
	if !shared.CanStop() {
		t.Skip("an external server cannot be stopped")
	}
	srv, err := pgtest.Start() // its own server: stopping it disturbs no other test
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dsn := srv.NewDatabase(t)
	s := openPG(t, dsn)
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1", Name: "before"}) })
	// Several idle connections in the pool, all of which the stop kills.
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.View(ctx, func(tx Tx) error { _, err := tx.Workspace("ws1"); time.Sleep(20 * time.Millisecond); return err })
		}()
	}
	wg.Wait()

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"View", func() error { return s.View(ctx, func(tx Tx) error { _, err := tx.Workspace("ws1"); return err }) }},
		{"Update", func() error {
			return s.Update(ctx, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws2"}) })
		}},
	} {
		for i := 0; i < 3; i++ {
			began := time.Now()
			err := op.run()
			if !isUnavailable(err) {
				t.Fatalf("%s %d while stopped: %v (%T), want an Unavailable error", op.name, i, err, err)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Fatalf("%s while stopped took %v", op.name, took)
			}
			if e := apierr.As(err); e.Status != http.StatusServiceUnavailable {
				t.Fatalf("%s while stopped maps to %d, want 503", op.name, e.Status)
			}
			if strings.Contains(err.Error(), "password") {
				t.Fatalf("error mentions a password: %v", err)
			}
		}
	}
	// A deadline while the database cannot be reached is Unavailable too.
	dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	time.Sleep(time.Millisecond)
	err = s.View(dctx, func(Tx) error { return nil })
	cancel()
	if !isUnavailable(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("View with an expired deadline: %v", err)
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The very first call after the restart works.
	update(t, s, func(tx Tx) error {
		w, err := tx.Workspace("ws1")
		if err != nil {
			return err
		}
		w.Name = "after"
		return tx.PutWorkspace(w)
	})
	view(t, s, func(tx Tx) error {
		w, err := tx.Workspace("ws1")
		if err != nil || w.Name != "after" {
			t.Fatalf("after restart: %+v, %v", w, err)
		}
		_, err = tx.Workspace("ws2")
		isNotFound(t, "write refused while stopped", err)
		return nil
	})

	// A restart between two calls, with the pool's connections fresh (no
	// idle time for a ping): the dead connections are replaced and the
	// call succeeds.
	for i := 0; i < 3; i++ {
		s.View(ctx, func(tx Tx) error { return nil })
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: fmt.Sprintf("wsr%d", i)}) })
	}

	// A transaction in flight when the server goes away fails as
	// Unavailable, and the next one after the restart works.
	inTx := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.View(ctx, func(tx Tx) error {
			close(inTx)
			time.Sleep(300 * time.Millisecond)
			_, err := tx.Workspace("ws1")
			return err
		})
	}()
	<-inTx
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !isUnavailable(err) {
		t.Fatalf("transaction in flight at stop: %v, want Unavailable", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	view(t, s, func(tx Tx) error { _, err := tx.Workspace("wsr2"); return err })
}

func TestPostgresOpenErrors(t *testing.T) {
	// An unparsable DSN: the error does not quote it (it may hold a password).
	_, err := OpenPostgres(ctx, PostgresOptions{DSN: "postgres://agent:s3cretpw@127.0.0.1:notaport/db"})
	if err == nil || strings.Contains(err.Error(), "s3cretpw") {
		t.Fatalf("bad DSN: %v", err)
	}
	// Nothing listens: Unavailable, quickly, without the password.
	port := closedPort(t)
	began := time.Now()
	_, err = OpenPostgres(ctx, PostgresOptions{DSN: fmt.Sprintf("postgres://agent:s3cretpw@127.0.0.1:%d/db?sslmode=disable", port)})
	if !isUnavailable(err) {
		t.Fatalf("no server: %v (%T), want Unavailable", err, err)
	}
	if strings.Contains(err.Error(), "s3cretpw") {
		t.Fatalf("error quotes the password: %v", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("open without a server took %v", took)
	}
}

func closedPort(t *testing.T) int {
	t.Helper()
	// A port that was free a moment ago: nothing listens on it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestPostgresShared(t *testing.T) {
	if !(&Postgres{}).Shared() {
		t.Fatal("Postgres is not Shared")
	}
	if (&Badger{}).Shared() {
		t.Fatal("Badger is Shared")
	}
}

// A read-only View cannot write, and sees one snapshot: a commit made
// meanwhile by another transaction is not visible in it.
func TestPostgresViewSnapshot(t *testing.T) {
	s, _ := newPG(t)
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1", Name: "v1"}) })
	view(t, s, func(tx Tx) error {
		w, err := tx.Workspace("ws1")
		if err != nil || w.Name != "v1" {
			t.Fatalf("first read: %v, %v", w, err)
		}
		update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1", Name: "v2"}) })
		w, err = tx.Workspace("ws1")
		if err != nil || w.Name != "v1" {
			t.Fatalf("second read in the same View: %v, %v; want the snapshot's v1", w, err)
		}
		if err := tx.PutWorkspace(&Workspace{ID: "ws3"}); err == nil {
			t.Fatal("a write in View succeeded")
		}
		return nil
	})
}

// A caller that goes away gets its context's error, not a 503, and the
// store keeps working.
func TestPostgresCanceledIsNotUnavailable(t *testing.T) {
	s, _ := newPG(t)
	for _, run := range []func(context.Context, func(Tx) error) error{s.View, s.Update} {
		cctx, cancel := context.WithCancel(ctx)
		calls := 0
		err := run(cctx, func(tx Tx) error {
			calls++
			cancel()
			_, err := tx.Workspace("ws1")
			return err
		})
		if isUnavailable(err) || !errors.Is(err, context.Canceled) || calls != 1 {
			t.Fatalf("canceled mid-transaction: %v after %d calls, want context.Canceled after 1", err, calls)
		}
	}
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
}

// UpdateLocked orders read-modify-write transactions of two stores (two
// nodes) on one lock: 2 × 40 concurrent increments of one budget's spend
// all count, none fails. Without the lock, READ COMMITTED would lose
// updates.
func TestPostgresUpdateLockedOrdersWriters(t *testing.T) {
	a, dsn := newPG(t)
	b := openPG(t, dsn)
	update(t, a, func(tx Tx) error {
		return tx.PutBudget(&Budget{Workspace: "wrk_1", MemberID: "sa_1", Limit: 1 << 40, Period: PeriodTotal})
	})
	var wg sync.WaitGroup
	errs := make(chan error, 80)
	for i := range 80 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.UpdateLocked(ctx, []string{"budget/wrk_1/sa_1", "other"}, func(tx Tx) error {
				bu, err := tx.Budget("wrk_1", "sa_1")
				if err != nil {
					return err
				}
				bu.Spent++
				return tx.PutBudget(bu)
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("UpdateLocked: %v", err)
		}
	}
	view(t, a, func(tx Tx) error {
		bu, err := tx.Budget("wrk_1", "sa_1")
		if err != nil {
			return err
		}
		if bu.Spent != 80 {
			t.Fatalf("spent %d after 80 locked increments", bu.Spent)
		}
		return nil
	})
}

// TestPostgresCountsRoundTrips: every statement a transaction sends (its
// BEGIN and COMMIT included) counts one round trip.
func TestPostgresCountsRoundTrips(t *testing.T) {
	s, _ := newPG(t)
	ctx := t.Context()
	before := s.RoundTrips()
	if err := s.View(ctx, func(tx Tx) error { _, err := tx.Meta("nothing"); return ignoreNotFound(err) }); err != nil {
		t.Fatal(err)
	}
	view := s.RoundTrips() - before
	if view < 3 || view > 4 { // BEGIN, one SELECT, COMMIT (and the isolation level)
		t.Fatalf("a one-read view took %d round trips", view)
	}
	before = s.RoundTrips()
	if err := s.View(ctx, func(tx Tx) error {
		for i := range 5 {
			if _, err := tx.Meta(fmt.Sprint("m", i)); ignoreNotFound(err) != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if five := s.RoundTrips() - before; five != view+4 {
		t.Fatalf("five reads took %d round trips, one took %d", five, view)
	}
}

func ignoreNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

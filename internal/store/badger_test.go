package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBadgerConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) Store { return newStore(t) })
}

// Badger's AppendUsage writes without reading the key first (the ledger's
// ids do not repeat; a retry uses PutUsage): a taken id is written over,
// one record remains, and PutUsage still refuses it.
func TestBadgerAppendUsageDoesNotRead(t *testing.T) {
	s := newStore(t)
	if err := testAppendUsageTaken(t, s); err != nil {
		t.Fatalf("AppendUsage of a taken id: %v", err)
	}
	var got []*UsageRecord
	s.View(ctx, func(tx Tx) error {
		return tx.Usage("ws1", "", func(u *UsageRecord) (bool, error) { got = append(got, u); return true, nil })
	})
	if len(got) != 1 || got[0].Cost != 2 {
		t.Fatalf("records %+v, want the one written last", got)
	}
	err := s.Update(ctx, func(tx Tx) error { return tx.PutUsage(got[0]) })
	if !errors.Is(err, ErrExists) {
		t.Fatalf("PutUsage of a taken id: %v, want ErrExists", err)
	}
}

// A store written by an earlier version holds usage records as JSON:
// they are listed with the records written since, in id order, each as
// it was written.
func TestUsageJSONRecordsStillRead(t *testing.T) {
	s := newStore(t)
	old := &UsageRecord{ID: "0001", Time: time.Unix(1764000000, 5).UTC(), Workspace: "ws1", MemberID: "p1", MemberKind: MemberPerson,
		Connection: "conn_1", Format: "chat", Model: "m", UpstreamModel: "m-1", Tokens: Tokens{Input: 3, Output: 4}, Cost: 70, Status: 200,
		Session: "ses_a", Attempts: []Attempt{{Connection: "conn_0", Status: 503, Error: "unavailable"}}}
	js, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	fresh := *old
	fresh.ID, fresh.Cost, fresh.Attempts = "0002", 80, nil
	if err := s.Update(ctx, func(tx Tx) error {
		if err := tx.(*btx).kv.Set(pUsage+"ws1/0001", js); err != nil {
			return err
		}
		return tx.AppendUsage(&fresh)
	}); err != nil {
		t.Fatal(err)
	}
	var got []*UsageRecord
	s.View(ctx, func(tx Tx) error {
		return tx.Usage("ws1", "", func(u *UsageRecord) (bool, error) { got = append(got, u); return true, nil })
	})
	equal(t, "records", got, []*UsageRecord{old, &fresh})
	var raw []byte
	s.View(ctx, func(tx Tx) error { raw, err = tx.(*btx).value(pUsage + "ws1/0002"); return err })
	if err != nil || len(raw) == 0 || raw[0] != usageBinV1 {
		t.Fatalf("the new record is stored as %q (%v), not in its binary form", raw, err)
	}
}

func openAt(t *testing.T, dir string) *Badger {
	t.Helper()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatalf("OpenBadger(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T) *Badger {
	t.Helper()
	return openAt(t, t.TempDir())
}

func TestPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	conn := testConnection("conn_1", "ws1")
	key := &APIKey{ID: "key000000001", Workspace: "ws1", ServiceAccount: "sa_1", MAC: []byte{1}, Created: t0}
	update(t, s, func(tx Tx) error {
		for _, err := range []error{
			tx.PutWorkspace(&Workspace{ID: "ws1", Name: "One", Created: t0}),
			tx.PutPerson(&Person{ID: "p1", Email: "P1@example.com", Created: t0}),
			tx.PutMember(&Member{Workspace: "ws1", PersonID: "p1", Role: RoleOwner, Created: t0}),
			tx.PutServiceAccount(&ServiceAccount{ID: "sa_1", Workspace: "ws1", Created: t0}),
			tx.PutAPIKey(key, true),
			tx.PutConnection(conn, true),
			tx.PutTokenFamily(&TokenFamily{ID: "tf_1", PersonID: "p1", Created: t0, ExpiresAt: t0}),
			tx.PutToken(&Token{ID: "tok_1", FamilyID: "tf_1", Created: t0, ExpiresAt: t0}, true),
			tx.PutMeta("key_fingerprint", []byte("fp")),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, dir)
	view(t, s, func(tx Tx) error {
		must := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s after reopen: %v", what, err)
			}
		}
		count := func(what string, n int, err error) {
			t.Helper()
			must(what, err)
			if n != 1 {
				t.Fatalf("%s after reopen: %d records, want 1", what, n)
			}
		}
		w, err := tx.Workspace("ws1")
		must("Workspace", err)
		equal(t, "Workspace after reopen", w, &Workspace{ID: "ws1", Name: "One", Created: t0})
		ws, err := tx.Workspaces()
		count("Workspaces", len(ws), err)
		p, err := tx.PersonByEmail("p1@EXAMPLE.com")
		must("PersonByEmail", err)
		equal(t, "Person after reopen", p, &Person{ID: "p1", Email: "p1@example.com", Created: t0})
		ms, err := tx.Members("ws1")
		count("Members", len(ms), err)
		ms, err = tx.Memberships("p1")
		count("Memberships", len(ms), err)
		sas, err := tx.ServiceAccounts("ws1")
		count("ServiceAccounts", len(sas), err)
		keys, err := tx.APIKeys("sa_1")
		count("APIKeys", len(keys), err)
		equal(t, "APIKey after reopen", keys[0], key)
		conns, err := tx.Connections("ws1")
		count("Connections", len(conns), err)
		equal(t, "Connection after reopen", conns[0], conn)
		fams, err := tx.TokenFamilies("p1")
		count("TokenFamilies", len(fams), err)
		_, err = tx.Token("tok_1")
		must("Token", err)
		v, err := tx.Meta("key_fingerprint")
		must("Meta", err)
		if string(v) != "fp" {
			t.Fatalf("Meta after reopen = %q", v)
		}
		v, err = tx.Meta("schema_version")
		if err != nil || string(v) != strconv.Itoa(SchemaVersion) {
			t.Fatalf("schema_version after reopen = %q, %v", v, err)
		}
		return nil
	})
}

func TestRefusesNewerSchema(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutMeta("schema_version", []byte("99")) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Twice: the refused open must release the directory lock.
	for i := 0; i < 2; i++ {
		s, err := OpenBadger(BadgerOptions{Dir: dir})
		if err == nil {
			s.Close()
			t.Fatal("a store of schema 99 was opened")
		}
		if !strings.Contains(err.Error(), "newer") || !strings.Contains(err.Error(), "99") {
			t.Fatalf("attempt %d: error %q does not say the data is newer", i, err)
		}
	}
}

func TestRefusesBadSchema(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutMeta("schema_version", []byte("one")) })
	s.Close()
	if s, err := OpenBadger(BadgerOptions{Dir: dir}); err == nil {
		s.Close()
		t.Fatal("a store with a garbled schema version was opened")
	} else if !strings.Contains(err.Error(), "schema") {
		t.Fatalf("error %q does not mention the schema", err)
	}
}

// A store of an older schema opens, keeps what it holds, and is raised to
// this build's schema: what this build writes (usage records in their
// binary form since schema 2) an older build cannot read, so an older
// build refuses it from then on.
func TestOlderSchemaAcceptedAndRaised(t *testing.T) {
	for _, old := range []string{"0", "1"} {
		dir := t.TempDir()
		s, err := OpenBadger(BadgerOptions{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		update(t, s, func(tx Tx) error {
			if err := tx.PutWorkspace(&Workspace{ID: "ws1"}); err != nil {
				return err
			}
			return tx.PutMeta("schema_version", []byte(old))
		})
		s.Close()
		s = openAt(t, dir)
		view(t, s, func(tx Tx) error {
			if v, _ := tx.Meta("schema_version"); string(v) != strconv.Itoa(SchemaVersion) {
				t.Fatalf("schema %s: schema_version after open %q, want %d", old, v, SchemaVersion)
			}
			if _, err := tx.Workspace("ws1"); err != nil {
				t.Fatalf("schema %s: workspace after open: %v", old, err)
			}
			return nil
		})
	}
}

func TestBadDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "data")
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("opened a store under a regular file")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not name the path %s", err, dir)
	}

	// The data dir itself is a regular file.
	s, err = OpenBadger(BadgerOptions{Dir: file})
	if err == nil {
		s.Close()
		t.Fatal("opened a store on a regular file")
	}
	if !strings.Contains(err.Error(), file) {
		t.Fatalf("error %q does not name the path %s", err, file)
	}

	if s, err := OpenBadger(BadgerOptions{}); err == nil {
		s.Close()
		t.Fatal("opened a store with no directory")
	}
}

func TestReadOnlyDataDir(t *testing.T) {
	if runtime.GOOS == "windows" || os.Geteuid() == 0 {
		t.Skip("permissions are not enforced")
	}
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("opened a store in a read-only directory")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("error %q does not explain the read-only path", err)
	}
}

func TestDataDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	openAt(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() {
		t.Fatal("data dir is not a directory")
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %o, want 700", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, ".agentgate-write-test")); !os.IsNotExist(err) {
		t.Fatalf("write probe left behind: %v", err)
	}
}

func TestSecondOpenOfSameDirFails(t *testing.T) {
	dir := t.TempDir()
	openAt(t, dir)
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("the same directory was opened twice")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not name the path", err)
	}
}

func TestClose(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Dir: t.TempDir(), GCInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
	time.Sleep(5 * time.Millisecond) // let the GC loop tick
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	called := false
	if err := s.View(ctx, func(Tx) error { called = true; return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("View after Close: %v, want ErrClosed", err)
	}
	if err := s.Update(ctx, func(Tx) error { called = true; return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Update after Close: %v, want ErrClosed", err)
	}
	if called {
		t.Fatal("fn ran on a closed store")
	}
}

func TestConcurrentClose(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Close()
		}()
	}
	wg.Wait()
	if err := s.View(ctx, func(Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("View after Close: %v", err)
	}
}

// Close waits for the transactions in flight, which see the database
// open to their end (an iterator of a closed Badger database panics), and
// turns new ones away, a transaction begun inside one included.
func TestCloseWaitsForTransactions(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
	closed := make(chan error, 1)
	err = s.View(ctx, func(tx Tx) error {
		go func() { closed <- s.Close() }()
		for !s.closing.Load() {
			runtime.Gosched()
		}
		if err := s.Update(ctx, func(Tx) error { return nil }); !errors.Is(err, ErrClosed) {
			t.Errorf("a transaction begun while closing: %v, want ErrClosed", err)
		}
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) with a transaction in flight", err)
		default:
		}
		ws, err := tx.Workspaces()
		if err != nil || len(ws) != 1 {
			t.Errorf("iterating in the transaction in flight: %d workspaces, %v", len(ws), err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the transaction in flight: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.View(ctx, func(Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("View after Close: %v", err)
	}
}

// Readers and writers that iterate while the store closes end with nil or
// ErrClosed, never a panic.
func TestCloseUnderLoad(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
	var wg sync.WaitGroup
	var ran atomic.Int64
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := 0; ; i++ {
				var err error
				if g%2 == 0 {
					err = s.View(ctx, func(tx Tx) error { _, err := tx.Workspaces(); return err })
				} else {
					err = s.Update(ctx, func(tx Tx) error {
						if _, err := tx.Workspaces(); err != nil {
							return err
						}
						return tx.PutWorkspace(&Workspace{ID: fmt.Sprintf("w%d-%d", g, i)})
					})
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if ran.Add(1) == 400 {
					go s.Close()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestUpdateCanceledContextAfterConflict(t *testing.T) {
	// A canceled context does not stop a first, non-conflicting attempt...
	s := newStore(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Update(cctx, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) }); err != nil {
		t.Fatalf("Update with canceled context and no conflict: %v", err)
	}
}

func TestInMemory(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1", Name: "mem"}) })
	view(t, s, func(tx Tx) error {
		w, err := tx.Workspace("ws1")
		if err != nil || w.Name != "mem" {
			t.Fatalf("in-memory Workspace: %v, %v", w, err)
		}
		v, err := tx.Meta("schema_version")
		if err != nil || string(v) != strconv.Itoa(SchemaVersion) {
			t.Fatalf("in-memory schema_version: %q, %v", v, err)
		}
		return nil
	})
}

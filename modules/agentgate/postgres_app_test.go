package agentgate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentgate/agentgate/internal/pgtest"
	"github.com/agentgate/agentgate/internal/store"
)

// TestMain stops the PostgreSQL server of the tests, if they started one.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestPostgresStorageProvisionErrors(t *testing.T) {
	ctx, _ := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
	t.Setenv("AGENTGATE_TEST_DSN", "postgres://agent:s3cretpw@db.internal/agentgate")
	for name, c := range map[string]struct {
		app  *App
		want string
	}{
		"no master key": {&App{Storage: &StorageConfig{Backend: "postgres", DSN: "{env.AGENTGATE_TEST_DSN}"}}, "master_key is required"},
		"empty DSN": {&App{Storage: &StorageConfig{Backend: "postgres", DSN: "{env.AGENTGATE_TEST_UNSET}"},
			MasterKey: strings.Repeat("ab", 32)}, "DSN is empty"},
	} {
		err := c.app.Provision(ctx)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("%s: the DSN's password is in the error", name)
		}
	}
	ok := &App{Storage: &StorageConfig{Backend: "postgres", DSN: "{env.AGENTGATE_TEST_DSN}"}, MasterKey: strings.Repeat("ab", 32)}
	if err := ok.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.dsn != "postgres://agent:s3cretpw@db.internal/agentgate" || ok.poolKey == ok.dir {
		t.Fatalf("DSN %q, pool key %q", ok.dsn, ok.poolKey)
	}
	bad := &App{Storage: &StorageConfig{Backend: "mysql"}}
	if err := bad.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "badger and postgres") {
		t.Fatalf("unknown backend: %v", err)
	}
}

// With storage postgres the app opens the database (shared across reloads
// by DSN), uses it untracked (other nodes write it too), binds it to the
// master key, and the data outlives the app.
func TestPostgresStorage(t *testing.T) {
	srv := pgtest.Shared(t)
	dsn := srv.NewDatabase(t)
	// A password (the test server trusts loopback and ignores it) that
	// must appear in no log line.
	secret := ""
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, has := u.User.Password(); has {
			secret = pw
		} else {
			secret = "pw-never-logged"
			u.User = url.UserPassword(u.User.Username(), secret)
			dsn = u.String()
		}
	}
	t.Setenv("AGENTGATE_TEST_POSTGRES_DSN_APP", dsn)
	key := strings.Repeat("0f", 32)
	conf := func() *App {
		return &App{Storage: &StorageConfig{Backend: "postgres", DSN: "{env.AGENTGATE_TEST_POSTGRES_DSN_APP}"}, MasterKey: key}
	}
	ctx := context.Background()
	a := provisionApp(t, conf())
	core, logs := observer.New(zap.DebugLevel)
	a.logger = zap.New(core)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	svc1, err := a.Service(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sawDatabase := false
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + fmt.Sprint(v)
		}
		if secret != "" && strings.Contains(line, secret) {
			t.Fatalf("a log line carries the DSN's password: %s", line)
		}
		if strings.Contains(line, "127.0.0.1") || strings.Contains(line, "database=") {
			sawDatabase = true
		}
	}
	if !sawDatabase {
		t.Fatalf("no log line names the database: %v", logs.All())
	}
	if sh, ok := svc1.Store.(interface{ Shared() bool }); !ok || !sh.Shared() {
		t.Fatalf("the app's store %T does not report Shared", svc1.Store)
	}
	if _, ok := svc1.Store.(*store.Postgres); !ok {
		t.Fatalf("the app's store is %T, want the bare *store.Postgres", svc1.Store)
	}
	ws, err := svc1.CreateWorkspace(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	// A reload shares the open store.
	b := conf()
	svc2 := startApp(t, b)
	if svc1.Store != svc2.Store {
		t.Fatal("the new config opened a second store instead of sharing the open one")
	}
	a.Stop()
	b.Stop()
	if err := svc2.Store.View(ctx, func(store.Tx) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("store after the last Stop: %v, want ErrClosed", err)
	}
	// Another node (here: a later start) with the same key sees the data.
	c := conf()
	svc3 := startApp(t, c)
	all, err := svc3.Workspaces(ctx)
	if err != nil || len(all) != 1 || all[0].ID != ws.ID {
		t.Fatalf("after reopen: %v, %v", all, err)
	}
	c.Stop()
	// A node with another master key is refused.
	d := provisionApp(t, &App{Storage: &StorageConfig{Backend: "postgres", DSN: "{env.AGENTGATE_TEST_POSTGRES_DSN_APP}"},
		MasterKey: strings.Repeat("ee", 32)})
	err = d.Start()
	if err == nil || !strings.Contains(err.Error(), "master key does not match the one this database") {
		t.Fatalf("start with another master key: %v", err)
	}
}

// The Badger path keeps its tracked store.
func TestBadgerStorageIsNotShared(t *testing.T) {
	a := &App{Storage: &StorageConfig{Path: t.TempDir()}}
	svc := startApp(t, a)
	defer a.Stop()
	if sh, ok := svc.Store.(interface{ Shared() bool }); !ok || sh.Shared() {
		t.Fatalf("Badger store %T: Shared missing or true", svc.Store)
	}
}

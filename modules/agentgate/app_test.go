package agentgate

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func provisionApp(t *testing.T, app *App) *App {
	t.Helper()
	ctx, err := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Provision(ctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := app.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return app
}

func startApp(t *testing.T, app *App) *service.Service {
	t.Helper()
	provisionApp(t, app)
	if err := app.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	svc, err := app.Service(context.Background())
	if err != nil {
		t.Fatalf("service: %v", err)
	}
	return svc
}

// A reload provisions and starts the new config before the old one stops:
// the store must be shared, not reopened (Badger's directory lock would make
// a second open fail), and must survive the old config's Stop.
func TestReloadSharesTheStore(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	oldApp := &App{Storage: &StorageConfig{Path: dir}}
	svc1 := startApp(t, oldApp)
	ws, err := svc1.CreateWorkspace(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}

	newApp := &App{Storage: &StorageConfig{Path: dir}, StartTimeout: caddy.Duration(time.Second)}
	svc2 := startApp(t, newApp)
	if svc1.Store != svc2.Store {
		t.Fatal("the new config opened a second store instead of sharing the open one")
	}
	if err := oldApp.Stop(); err != nil {
		t.Fatal(err)
	}
	// The store is still open for the new config: read the old write, write more.
	if _, err := svc2.Workspace(ctx, service.Operator(ws.ID)); err != nil {
		t.Fatalf("reading after the old config stopped: %v", err)
	}
	if _, err := svc2.CreateWorkspace(ctx, "Second"); err != nil {
		t.Fatalf("writing after the old config stopped: %v", err)
	}
	if err := newApp.Stop(); err != nil {
		t.Fatal(err)
	}
	// Last reference gone: the store is closed.
	if err := svc2.Store.View(ctx, func(store.Tx) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("store after the last Stop: %v, want ErrClosed", err)
	}
	// And it reopens with everything in it.
	again := &App{Storage: &StorageConfig{Path: dir}}
	svc3 := startApp(t, again)
	defer again.Stop()
	all, err := svc3.Workspaces(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("after reopen: %d workspaces, %v", len(all), err)
	}
}

func TestRequestsBeforeStartWaitThen503(t *testing.T) {
	app := provisionApp(t, &App{Storage: &StorageConfig{Path: t.TempDir()}, StartTimeout: caddy.Duration(20 * time.Millisecond)})
	_, err := app.Service(context.Background())
	if e := apierr.As(err); e.Status != http.StatusServiceUnavailable {
		t.Fatalf("before start: %v, want 503", err)
	}
	// A request already waiting when Start finishes gets the service.
	app.StartTimeout = caddy.Duration(10 * time.Second)
	got := make(chan error, 1)
	go func() {
		_, err := app.Service(context.Background())
		got <- err
	}()
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	defer app.Stop()
	if err := <-got; err != nil {
		t.Fatalf("waiting request: %v", err)
	}
}

func TestMasterKeyGeneratedOnceAndBound(t *testing.T) {
	dir := t.TempDir()
	a := &App{Storage: &StorageConfig{Path: dir}}
	startApp(t, a)
	a.Stop()
	fi, err := os.Stat(filepath.Join(dir, "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("master.key mode %v, want 0600", fi.Mode().Perm())
	}
	generated, _ := os.ReadFile(filepath.Join(dir, "master.key"))

	// Same directory, same generated key: starts.
	b := &App{Storage: &StorageConfig{Path: dir}}
	startApp(t, b)
	b.Stop()
	again, _ := os.ReadFile(filepath.Join(dir, "master.key"))
	if string(again) != string(generated) {
		t.Fatal("the master key was regenerated")
	}

	// Another master key on the same data: refused with a clear error.
	c := provisionApp(t, &App{Storage: &StorageConfig{Path: dir}, MasterKey: hex.EncodeToString(make([]byte, 32))})
	err = c.Start()
	if err == nil || !strings.Contains(err.Error(), "master key does not match") {
		t.Fatalf("start with another master key: %v", err)
	}
	// The failed start released its reference: the directory opens again.
	d := &App{Storage: &StorageConfig{Path: dir}}
	startApp(t, d)
	d.Stop()
}

func TestMasterKeyFromPlaceholder(t *testing.T) {
	t.Setenv("AGENTGATE_TEST_MASTER_KEY", strings.Repeat("0f", 32))
	a := provisionApp(t, &App{Storage: &StorageConfig{Path: t.TempDir()}, MasterKey: "{env.AGENTGATE_TEST_MASTER_KEY}"})
	if hex.EncodeToString(a.masterKey) != strings.Repeat("0f", 32) {
		t.Fatal("placeholder not resolved")
	}
	// The agent's commands must never see the master key, whatever the
	// name of the variable that carries it.
	if v := a.SecretValues(); len(v) != 1 || v[0] != strings.Repeat("0f", 32) {
		t.Fatalf("secret values %q", v)
	}
	ctx, _ := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
	bad := &App{MasterKey: "{env.AGENTGATE_TEST_UNSET}"}
	if err := bad.Provision(ctx); err == nil {
		t.Fatal("an empty master key placeholder was accepted")
	}
}

func TestUnwritableDataDirIsAClearError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o600)
	a := provisionApp(t, &App{Storage: &StorageConfig{Path: filepath.Join(file, "data")}})
	err := a.Start()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(file, "data")) {
		t.Fatalf("start on a data dir under a file: %v", err)
	}
	if _, err := a.Service(context.Background()); apierr.As(err).Status != http.StatusServiceUnavailable {
		t.Fatalf("service after a failed start: %v, want 503", err)
	}
}

func TestDeclaredConnectionsReconciled(t *testing.T) {
	t.Setenv("AGENTGATE_TEST_CRED", "sk-declared-secret")
	dir := t.TempDir()
	enabled := false
	conf := func() *App {
		return &App{Storage: &StorageConfig{Path: dir}, Connections: []*DeclaredConnection{{
			ID: "conn_main", Workspace: "Acme", Kind: "openai", BaseURL: "https://api.openai.com/v1/",
			Credential: "{env.AGENTGATE_TEST_CRED}",
			Models:     map[string]service.ModelInput{"gpt-4o": {}, "o1": {Enabled: &enabled}},
		}}}
	}
	ctx := context.Background()
	a := conf()
	svc := startApp(t, a)
	ws, err := svc.Workspaces(ctx)
	if err != nil || len(ws) != 1 || ws[0].Name != "Acme" {
		t.Fatalf("workspace by name: %v %v", ws, err)
	}
	c, err := svc.LookupConnection(ctx, service.Operator(ws[0].ID), "conn_main")
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL != "https://api.openai.com/v1" || !c.Declared || !c.Models["gpt-4o"].Enabled || c.Models["o1"].Enabled {
		t.Fatalf("declared connection stored as %+v", c)
	}
	if strings.Contains(string(c.Credential), "sk-declared-secret") {
		t.Fatal("credential stored in clear")
	}
	if cred, _ := svc.Credential(c); cred != "sk-declared-secret" {
		t.Fatalf("credential decrypts to %q", cred)
	}
	a.Stop()

	// The same config again: the same workspace, the connection untouched.
	b := conf()
	svc = startApp(t, b)
	defer b.Stop()
	ws2, _ := svc.Workspaces(ctx)
	if len(ws2) != 1 || ws2[0].ID != ws[0].ID {
		t.Fatalf("workspaces after a restart: %v", ws2)
	}
	c2, _ := svc.LookupConnection(ctx, service.Operator(ws[0].ID), "conn_main")
	if !c2.Updated.Equal(c.Updated) || string(c2.Credential) != string(c.Credential) {
		t.Fatal("an unchanged declared connection was rewritten")
	}
}

func TestDeclaredConnectionErrorsAtProvision(t *testing.T) {
	ctx, _ := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
	for name, dc := range map[string]*DeclaredConnection{
		"no workspace": {ID: "conn_a", Kind: "openai", BaseURL: "https://x", Credential: "k"},
		"bad url":      {ID: "conn_a", Workspace: "A", Kind: "openai", BaseURL: "x", Credential: "k"},
		"bad id":       {ID: "a/b", Workspace: "A", Kind: "openai", BaseURL: "https://x", Credential: "k"},
		"no id":        {Workspace: "A", Kind: "openai", BaseURL: "https://x", Credential: "k"},
		"bad kind":     {ID: "conn_a", Workspace: "A", Kind: "x", BaseURL: "https://x", Credential: "k"},
	} {
		a := &App{Connections: []*DeclaredConnection{dc}}
		if err := a.Provision(ctx); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	twice := &App{Connections: []*DeclaredConnection{
		{ID: "conn_a", Workspace: "A", Kind: "openai", BaseURL: "https://x", Credential: "k"},
		{ID: "conn_a", Workspace: "A", Kind: "openai", BaseURL: "https://x", Credential: "k"},
	}}
	if err := twice.Provision(ctx); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate declared connection: %v", err)
	}
}

func TestDeclaredPoliciesReconciled(t *testing.T) {
	dir := t.TempDir()
	conf := func(rpm int64) *App {
		return &App{Storage: &StorageConfig{Path: dir}, Policies: []*DeclaredPolicy{{ID: "pol_members", Workspace: "Acme",
			PolicyInput: service.PolicyInput{Name: "members", Effect: "limit", Models: []string{"*"}, Roles: []string{"member"}, Per: "member", RequestsPerMinute: rpm}}}}
	}
	ctx := context.Background()
	a := conf(30)
	svc := startApp(t, a)
	ws, _ := svc.Workspaces(ctx)
	if len(ws) != 1 {
		t.Fatalf("workspaces %v", ws)
	}
	op := service.Operator(ws[0].ID)
	pol, err := svc.Policy(ctx, op, "pol_members")
	if err != nil || !pol.Declared || pol.RequestsPerMinute != 30 {
		t.Fatalf("declared policy %+v %v", pol, err)
	}
	// Read-only through the APIs.
	if _, err := svc.ReplacePolicy(ctx, op, "pol_members", service.PolicyInput{Name: "x", Effect: "deny", Models: []string{"*"}}); apierr.As(err).Status != 409 {
		t.Fatalf("replacing a declared policy: %v", err)
	}
	if err := svc.DeletePolicy(ctx, op, "pol_members"); apierr.As(err).Status != 409 {
		t.Fatalf("deleting a declared policy: %v", err)
	}
	a.Stop()
	// A changed declaration updates it in place.
	b := conf(60)
	svc = startApp(t, b)
	defer b.Stop()
	if pol, _ := svc.Policy(ctx, op, "pol_members"); pol.RequestsPerMinute != 60 || !pol.Declared {
		t.Fatalf("after the change: %+v", pol)
	}

	pctx, _ := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
	for name, dp := range map[string]*DeclaredPolicy{
		"bad id":       {ID: "members", Workspace: "A"},
		"no workspace": {ID: "pol_a"},
	} {
		if err := (&App{Policies: []*DeclaredPolicy{dp}}).Provision(pctx); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDeclaredClaudeCodeSettingsReconciled(t *testing.T) {
	dir := t.TempDir()
	conf := func(doc string) *App {
		a := &App{Storage: &StorageConfig{Path: dir}}
		if doc != "" {
			a.ClaudeCodeSettings = []*DeclaredClaudeCodeSettings{{Workspace: "Acme", Settings: []byte(doc)}}
		}
		return a
	}
	ctx := context.Background()
	a := conf(`{"permissions": {"deny": ["WebFetch"]}}`)
	svc := startApp(t, a)
	ws, _ := svc.Workspaces(ctx)
	if len(ws) != 1 || ws[0].Name != "Acme" {
		t.Fatalf("workspaces %v", ws)
	}
	op := service.Operator(ws[0].ID)
	v, err := svc.ClaudeCodeSettings(ctx, op)
	if err != nil || !v.Declared || v.Version != 1 || string(v.Settings) != `{"permissions":{"deny":["WebFetch"]}}` {
		t.Fatalf("declared settings %+v %v", v, err)
	}
	if _, err := svc.SetClaudeCodeSettings(ctx, op, []byte(`{}`)); apierr.As(err).Status != 409 {
		t.Fatalf("editing declared settings: %v", err)
	}
	a.Stop()
	// The same declaration again changes nothing; a new one is a new version.
	for i, doc := range []string{`{"permissions": {"deny": ["WebFetch"]}}`, `{"permissions": {"deny": ["WebFetch", "Bash(curl *)"]}}`} {
		b := conf(doc)
		svc = startApp(t, b)
		if v, _ := svc.ClaudeCodeSettings(ctx, op); v.Version != 1+i {
			t.Fatalf("start %d: version %d", i, v.Version)
		}
		b.Stop()
	}
	// No longer declared: kept, editable again.
	c := conf("")
	svc = startApp(t, c)
	defer c.Stop()
	if v, err := svc.SetClaudeCodeSettings(ctx, op, []byte(`{"model": "claude-sonnet-4-5"}`)); err != nil || v.Declared {
		t.Fatalf("after the declaration is gone: %+v %v", v, err)
	}

	pctx, _ := caddy.ProvisionContext(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}})
	for name, tc := range map[string]struct {
		decls []*DeclaredClaudeCodeSettings
		want  string
	}{
		"no workspace":  {[]*DeclaredClaudeCodeSettings{{Settings: []byte(`{}`)}}, "workspace is required"},
		"a refused key": {[]*DeclaredClaudeCodeSettings{{Workspace: "A", Settings: []byte(`{"hooks": {}}`)}}, "hooks (runs commands)"},
		"not an object": {[]*DeclaredClaudeCodeSettings{{Workspace: "A", Settings: []byte(`[]`)}}, "must be a JSON object"},
		"twice":         {[]*DeclaredClaudeCodeSettings{{Workspace: "A", Settings: []byte(`{}`)}, {Workspace: "A", Settings: []byte(`{}`)}}, "declared twice"},
	} {
		if err := (&App{ClaudeCodeSettings: tc.decls}).Provision(pctx); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// Package agentgate is the agentgate Caddy app: it opens the store once per
// data directory or database (shared across config reloads through a
// UsagePool), holds the master key and the Console service that every
// handler shares, and reconciles the connections declared in the Caddyfile
// into the store.
package agentgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/gateway"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func init() {
	caddy.RegisterModule(new(App))
}

// storePool keeps one open store per data directory (Badger) or DSN
// (PostgreSQL) across config reloads:
// a new config takes a reference before the old one lets go of its own, so
// the store is never closed and reopened by a reload.
var storePool = caddy.NewUsagePool()

// App is the agentgate app: the store, the master key and the shared Console
// service. Configure it with the `agentgate` global option; a config that
// uses an agentgate handler without it gets the defaults.
type App struct {
	// Storage chooses where state lives. Default: the embedded Badger store
	// in `caddy.AppDataDir()/agentgate`. With "postgres", several nodes
	// share one PostgreSQL database.
	Storage *StorageConfig `json:"storage,omitempty"`

	// MasterKey encrypts provider credentials at rest and keys the HMACs of
	// API keys and tokens: 32 bytes as 64 hex characters or base64. Use a
	// placeholder such as `{env.AGENTGATE_MASTER_KEY}` or
	// `{file./run/secrets/agentgate}`: it is resolved at provision and never
	// written into the adapted JSON. Default: generated once into
	// `<data dir>/master.key` with mode 0600. Required with the postgres
	// backend, where every node must use the same key. A data directory or
	// database refuses to open with a master key other than the one it was
	// created with.
	MasterKey string `json:"master_key,omitempty"`

	// Connections are provider connections declared in the config. They are
	// written into the store when the app starts, idempotently: unchanged
	// connections are left alone, changed ones are updated in place. They are
	// read-only in the Console.
	Connections []*DeclaredConnection `json:"connections,omitempty"`

	// Policies are workspace policies declared in the config, written
	// into the store when the app starts like connections (after them),
	// and read-only in the Console.
	Policies []*DeclaredPolicy `json:"policies,omitempty"`

	// ClaudeCodeSettings are workspaces' Claude Code settings documents
	// declared in the config (what the owner would otherwise edit: the
	// permission rules, environment and switches of their members'
	// Claude Code CLIs), written into the store when the app starts and
	// read-only elsewhere. A workspace the config no longer declares
	// keeps its document, editable again.
	ClaudeCodeSettings []*DeclaredClaudeCodeSettings `json:"claude_code_settings,omitempty"`

	// StartTimeout is how long a request that arrives before the store is
	// open waits for it before it is answered 503. Default: 10s.
	StartTimeout caddy.Duration `json:"start_timeout,omitempty"`

	// AccessTokenTTL is the lifetime of the access tokens the device flow
	// and the operator issue (refresh tokens renew them). Default: 1h;
	// from 1s to 24h.
	AccessTokenTTL caddy.Duration `json:"access_token_ttl,omitempty"`

	// Clock is the time source; tests set a fake one. Default: the wall clock.
	Clock clock.Clock `json:"-"`

	dir       string
	dsn       string // resolved PostgreSQL DSN; may carry a password: never logged
	poolKey   string // storePool key: the data directory, or the DSN
	masterKey []byte
	// masterKeyText is the configured master key as given, kept only so
	// that commands the agent runs never see it (SecretValues).
	masterKeyText string
	ready         chan struct{}
	svc           *service.Service
	roundTrips    atomic.Pointer[store.Postgres] // the PostgreSQL store, for its metrics
	startErr      error
	pooled        bool
	logger        *zap.Logger

	// The config's handlers, registered as they provision: the gateway
	// that instances call in-process, the instances that name a workspace
	// (by instance name), and their members once Start has resolved them.
	regMu     sync.Mutex
	gateway   LocalGateway
	instances map[string]string
	members   map[string]gateway.Member
}

// LocalGateway is a gateway that serves requests of this process
// in-process (llm_gateway's ServeLocal): the request's context carries
// the member it acts as (gateway.WithMember).
type LocalGateway interface {
	ServeLocal(w http.ResponseWriter, r *http.Request)
}

// RegisterGateway makes g the gateway this config's instances call; the
// first one registered is kept (every llm_gateway of a config shares the
// store and so serves the same workspaces).
func (a *App) RegisterGateway(g LocalGateway) {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	if a.gateway == nil {
		a.gateway = g
	}
}

// RegisterInstance records that the agent_instance named name is a member
// of workspace (an id or a name): Start resolves the workspace and the
// instance's service account, and fails when the config has no
// llm_gateway. The same instance may be served on several sites, but with
// one workspace.
func (a *App) RegisterInstance(name, workspace string) error {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	if a.instances == nil {
		a.instances = map[string]string{}
	}
	if old, ok := a.instances[name]; ok && old != workspace {
		return fmt.Errorf("agent_instance %q names two workspaces, %q and %q", name, old, workspace)
	}
	a.instances[name] = workspace
	return nil
}

// InstanceMember returns the member an instance acts as and the gateway
// it calls, waiting (like Service) for Start to resolve them.
func (a *App) InstanceMember(ctx context.Context, name string) (gateway.Member, LocalGateway, error) {
	if _, err := a.Service(ctx); err != nil {
		return gateway.Member{}, nil, err
	}
	a.regMu.Lock()
	defer a.regMu.Unlock()
	m, ok := a.members[name]
	if !ok || a.gateway == nil {
		return gateway.Member{}, nil, apierr.Unavailable("agent_instance %q has no workspace member in this config", name)
	}
	return m, a.gateway, nil
}

// startInstances resolves the workspace and service account of every
// instance that names a workspace.
func (a *App) startInstances(svc *service.Service) error {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	names := make([]string, 0, len(a.instances))
	for name := range a.instances {
		names = append(names, name)
	}
	sort.Strings(names)
	a.members = map[string]gateway.Member{}
	for _, name := range names {
		ref := a.instances[name]
		if a.gateway == nil {
			return fmt.Errorf("agentgate: agent_instance %q names workspace %q, but this config has no llm_gateway: "+
				"the instance calls the gateway in-process, so add llm_gateway to a site (as the default Caddyfile does), "+
				"or give the instance a provider block instead of a workspace", name, ref)
		}
		im, err := svc.EnsureInstanceMember(context.Background(), ref, name)
		if err != nil {
			msg := err.Error()
			var ae *apierr.Error
			if errors.As(err, &ae) {
				msg = ae.Message
			}
			return fmt.Errorf("agentgate: agent_instance %q: workspace %q: %s", name, ref, msg)
		}
		if im.WorkspaceCreated {
			a.logger.Info("workspace created for agent_instance", zap.String("instance", name), zap.String("workspace", im.Workspace),
				zap.String("name", ref))
		}
		if im.AccountCreated {
			a.logger.Info("service account created for agent_instance", zap.String("instance", name), zap.String("workspace", im.Workspace),
				zap.String("service_account", im.Account.ID))
		}
		a.members[name] = gateway.Member{Workspace: im.Workspace, ServiceAccount: im.Account.ID, Instance: name}
	}
	return nil
}

// StorageConfig selects the store backend.
type StorageConfig struct {
	// Backend is the store: "badger" (the embedded default, one node) or
	// "postgres" (a PostgreSQL database that several nodes share).
	Backend string `json:"backend,omitempty"`
	// Path is the data directory: Badger files go to `<path>/badger`, the
	// generated master key to `<path>/master.key`. Placeholders are
	// resolved. Default: `caddy.AppDataDir()/agentgate`.
	Path string `json:"path,omitempty"`
	// DSN is the PostgreSQL connection string (a URL or key=value pairs)
	// of the postgres backend. It may carry a password: give it as a
	// placeholder such as `{env.AGENTGATE_POSTGRES_DSN}`, resolved at
	// provision; it is never logged (only its host and database are).
	DSN string `json:"dsn,omitempty"`
}

// DeclaredConnection is a provider connection declared in the config.
type DeclaredConnection struct {
	// ID is the connection id used in gateway paths, `conn_…`.
	ID string `json:"id"`
	// Workspace is a workspace id (`wrk_…`, which must exist) or a name (the
	// workspace is created at start when no workspace has that name).
	Workspace string `json:"workspace"`
	// Name is shown in the Console and the config. Default: the id.
	Name string `json:"name,omitempty"`
	// Kind is openai, anthropic, google or openai-compatible.
	Kind string `json:"kind"`
	// BaseURL is the provider's API base URL, e.g. https://api.openai.com/v1.
	BaseURL string `json:"base_url"`
	// Credential is the provider API key, as a placeholder
	// (`{env.OPENAI_API_KEY}`); it is stored encrypted.
	Credential string `json:"credential"`
	// Headers are extra headers sent upstream.
	Headers map[string]string `json:"headers,omitempty"`
	// Models maps model ids to their settings and pricing (USD per million tokens).
	Models map[string]service.ModelInput `json:"models,omitempty"`

	credential string
}

// DeclaredPolicy is a workspace policy declared in the config: an allow,
// deny or limit statement over model globs for roles, service accounts
// (which must exist) and keys (likewise).
type DeclaredPolicy struct {
	// ID is the policy's id, `pol_…`.
	ID string `json:"id"`
	// Workspace is a workspace id (`wrk_…`, which must exist) or a name
	// (created at start when missing).
	Workspace string `json:"workspace"`
	service.PolicyInput
}

// DeclaredClaudeCodeSettings is a workspace's Claude Code settings
// document declared in the config.
type DeclaredClaudeCodeSettings struct {
	// Workspace is a workspace id (`wrk_…`, which must exist) or a name
	// (created at start when missing).
	Workspace string `json:"workspace"`
	// Settings is the document: a JSON object of the keys a workspace's
	// Claude Code settings may hold (permissions, env, …).
	Settings json.RawMessage `json:"settings"`
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "agentgate", New: func() caddy.Module { return new(App) }}
}

// registerMetrics registers the store's collectors, per config (a reload's
// registry is new). On Badger they read 0, except trusted (1).
func (a *App) registerMetrics(reg *prometheus.Registry) error {
	pg := func(f func(*store.Postgres) float64, badger float64) func() float64 {
		return func() float64 {
			if p := a.roundTrips.Load(); p != nil {
				return f(p)
			}
			return badger
		}
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "agentgate", Subsystem: "store", Name: "round_trips_total",
			Help: "Statements and batches sent to the PostgreSQL store, each a network round trip (0 on Badger).",
		}, pg(func(p *store.Postgres) float64 { return float64(p.RoundTrips()) }, 0)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "agentgate", Subsystem: "fleet", Name: "live_nodes",
			Help: "Nodes whose lease was live at this node's last heartbeat, this one included (0 on Badger).",
		}, pg(func(p *store.Postgres) float64 { return float64(p.LiveNodes()) }, 0)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "agentgate", Subsystem: "fleet", Name: "cache_trusted",
			Help: "1 while this node may serve from its cache (listening and its lease live), else 0: it reads the database for every request.",
		}, pg(func(p *store.Postgres) float64 {
			if _, ok := p.CacheGeneration(); ok {
				return 1
			}
			return 0
		}, 1)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "agentgate", Subsystem: "fleet", Name: "cache_drops_total",
			Help: "Times this node dropped its cache: a write anywhere in the fleet to the records it caches, or a lost listening connection (0 on Badger).",
		}, pg(func(p *store.Postgres) float64 { return float64(p.CacheDrops()) }, 0)),
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// Provision sets defaults and checks the config. It opens nothing, so that
// `caddy validate` works while a server runs on the same data directory.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	if err := a.registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	a.ready = make(chan struct{})
	if a.Clock == nil {
		a.Clock = clock.Real{}
	}
	if a.AccessTokenTTL != 0 && (a.AccessTokenTTL < caddy.Duration(time.Second) || a.AccessTokenTTL > caddy.Duration(24*time.Hour)) {
		return fmt.Errorf("access_token_ttl must be from 1s to 24h")
	}
	if a.StartTimeout <= 0 {
		a.StartTimeout = caddy.Duration(10 * time.Second)
	}
	repl := caddy.NewReplacer()
	if a.Storage == nil {
		a.Storage = &StorageConfig{}
	}
	if a.Storage.Backend == "" {
		a.Storage.Backend = "badger"
	}
	dir := repl.ReplaceAll(a.Storage.Path, "")
	if dir == "" {
		dir = filepath.Join(caddy.AppDataDir(), "agentgate")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("data directory %q: %v", dir, err)
	}
	a.dir = filepath.Clean(abs)
	a.poolKey = a.dir
	if a.Storage.Backend == "postgres" {
		a.dsn = strings.TrimSpace(repl.ReplaceAll(a.Storage.DSN, ""))
		if a.dsn == "" {
			return errors.New("storage postgres: the DSN is empty (is its environment variable or file there?)")
		}
		if a.MasterKey == "" {
			return errors.New("storage postgres: master_key is required (every node sharing the database must use the same key)")
		}
		a.poolKey = "postgres\x00" + a.dsn
	}
	if a.MasterKey != "" {
		mk := strings.TrimSpace(repl.ReplaceAll(a.MasterKey, ""))
		if mk == "" {
			return errors.New("master_key is set but empty (is its environment variable or file there?)")
		}
		if a.masterKey, err = secrets.ParseMasterKey(mk); err != nil {
			return fmt.Errorf("master_key: %v", err)
		}
		a.masterKeyText = mk
	}
	seen := map[string]bool{}
	for i, dc := range a.Connections {
		if dc == nil {
			return fmt.Errorf("connection %d is empty", i)
		}
		if seen[dc.ID] {
			return fmt.Errorf("connection %s is declared twice", dc.ID)
		}
		seen[dc.ID] = true
		if strings.TrimSpace(dc.Workspace) == "" {
			return fmt.Errorf("connection %s: workspace is required", dc.ID)
		}
		dc.credential = strings.TrimSpace(repl.ReplaceAll(dc.Credential, ""))
		if dc.credential == "" {
			return fmt.Errorf("connection %s: credential is empty (is its environment variable or file there?)", dc.ID)
		}
		if _, err := service.PrepareConnection("", dc.input(), time.Time{}); err != nil {
			return fmt.Errorf("connection %s: %s", dc.ID, apierr.As(err).Message)
		}
	}
	for i, dp := range a.Policies {
		if dp == nil {
			return fmt.Errorf("policy %d is empty", i)
		}
		if !service.ValidPolicyID(dp.ID) {
			return fmt.Errorf("policy %q: the id must match pol_[A-Za-z0-9_-]{1,48}", dp.ID)
		}
		if seen[dp.ID] {
			return fmt.Errorf("policy %s is declared twice", dp.ID)
		}
		seen[dp.ID] = true
		if strings.TrimSpace(dp.Workspace) == "" {
			return fmt.Errorf("policy %s: workspace is required", dp.ID)
		}
	}
	declaredCC := map[string]bool{}
	for i, dc := range a.ClaudeCodeSettings {
		if dc == nil || strings.TrimSpace(dc.Workspace) == "" {
			return fmt.Errorf("claude_code_settings %d: workspace is required", i)
		}
		if declaredCC[dc.Workspace] {
			return fmt.Errorf("claude_code_settings of workspace %s are declared twice", dc.Workspace)
		}
		declaredCC[dc.Workspace] = true
		if err := service.CheckDeclaredClaudeCode(dc.Settings); err != nil {
			return fmt.Errorf("claude_code_settings of workspace %s: %s", dc.Workspace, apierr.As(err).Message)
		}
	}
	return nil
}

func (dc *DeclaredConnection) input() service.ConnectionInput {
	name := dc.Name
	if name == "" {
		name = dc.ID
	}
	id := dc.ID
	if id == "" {
		id = "-" // makes PrepareConnection reject a missing id instead of making one
	}
	return service.ConnectionInput{ID: id, Name: name, Kind: dc.Kind, BaseURL: dc.BaseURL, Credential: dc.credential,
		Headers: dc.Headers, Models: dc.Models}
}

// Validate checks the parts of the config that Provision did not.
func (a *App) Validate() error {
	switch a.Storage.Backend {
	case "badger", "postgres":
		return nil
	}
	return fmt.Errorf("storage backend %q is not available (badger and postgres are)", a.Storage.Backend)
}

// pooledStore is what the pool shares across reloads: the store and the
// budget ledger, whose reservations of requests in flight must survive a
// reload too.
type pooledStore struct {
	store.Store
	ledger *ledger.Ledger
}

// Destruct writes the settlements still queued, then closes the store.
func (p pooledStore) Destruct() error {
	p.ledger.Close()
	return p.Close()
}

// Start opens (or shares) the store, checks the master key against it,
// reconciles declared connections and releases waiting requests.
func (a *App) Start() error {
	err := a.start()
	if err != nil {
		a.startErr = err
		if a.pooled {
			storePool.Delete(a.poolKey)
			a.pooled = false
		}
	}
	close(a.ready)
	return err
}

func (a *App) start() error {
	val, loaded, err := storePool.LoadOrNew(a.poolKey, func() (caddy.Destructor, error) {
		if a.Storage.Backend == "postgres" {
			// Several processes write the database: this node caches only
			// what the fleet's coherence (LISTEN/NOTIFY, heartbeats and
			// acknowledgments) keeps current.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pg, err := store.OpenPostgres(ctx, store.PostgresOptions{DSN: a.dsn, Logger: a.logger.Named("postgres"), Coherent: true})
			if err != nil {
				return nil, err
			}
			return pooledStore{Store: pg, ledger: ledger.New(pg, a.Clock)}, nil
		}
		b, err := store.OpenBadger(store.BadgerOptions{Dir: filepath.Join(a.dir, "badger"), Logger: a.logger.Named("badger")})
		if err != nil {
			return nil, err
		}
		// One process owns a Badger directory, so the hot path may cache
		// what it reads, invalidated by the tracked generation.
		st := store.Track(b)
		return pooledStore{Store: st, ledger: ledger.New(st, a.Clock)}, nil
	})
	if err != nil {
		return fmt.Errorf("agentgate: %w", err)
	}
	a.pooled = true
	pooled := val.(pooledStore)
	st := pooled.Store

	master := a.masterKey
	if master == nil {
		if master, err = secrets.LoadOrCreateMasterKey(filepath.Join(a.dir, "master.key")); err != nil {
			return fmt.Errorf("agentgate: %w", err)
		}
	}
	keys, err := secrets.NewKeys(master)
	if err != nil {
		return fmt.Errorf("agentgate: %w", err)
	}
	if err := checkFingerprint(st, keys, a.Storage.Backend == "postgres"); err != nil {
		return err
	}
	svc := service.New(st, keys, a.Clock, a.logger)
	if a.AccessTokenTTL > 0 {
		svc.AccessTokenTTL = time.Duration(a.AccessTokenTTL)
	}
	svc.Ledger.Close() // the pooled ledger, shared across reloads, replaces the default one
	svc.Ledger = pooled.ledger
	for _, dc := range a.Connections {
		changed, err := svc.Reconcile(context.Background(), dc.Workspace, dc.input())
		if err != nil {
			return fmt.Errorf("agentgate: declaring connection %s: %v", dc.ID, apierr.As(err).Message)
		}
		if changed {
			a.logger.Info("declared connection written", zap.String("connection", dc.ID))
		}
	}
	for _, dp := range a.Policies {
		changed, err := svc.ReconcilePolicy(context.Background(), dp.Workspace, dp.ID, dp.PolicyInput)
		if err != nil {
			return fmt.Errorf("agentgate: declaring policy %s: %v", dp.ID, apierr.As(err).Message)
		}
		if changed {
			a.logger.Info("declared policy written", zap.String("policy", dp.ID))
		}
	}
	decls := make([]service.DeclaredClaudeCode, len(a.ClaudeCodeSettings))
	for i, dc := range a.ClaudeCodeSettings {
		decls[i] = service.DeclaredClaudeCode{Workspace: dc.Workspace, Settings: dc.Settings}
	}
	changed, err := svc.ReconcileClaudeCodeSettings(context.Background(), decls)
	if err != nil {
		return fmt.Errorf("agentgate: declaring Claude Code settings: %v", err)
	}
	for _, ws := range changed {
		a.logger.Info("declared Claude Code settings written", zap.String("workspace", ws))
	}
	if err := a.startInstances(svc); err != nil {
		return err
	}
	a.svc = svc
	if pg, ok := st.(*store.Postgres); ok {
		a.roundTrips.Store(pg)
	}
	if a.Storage.Backend == "postgres" {
		a.logger.Info("store ready", zap.String("backend", "postgres"), zap.String("database", store.PostgresTarget(a.dsn)),
			zap.Bool("shared_with_previous_config", loaded))
	} else {
		a.logger.Info("store ready", zap.String("dir", a.dir), zap.Bool("shared_with_previous_config", loaded))
	}
	return nil
}

// checkFingerprint binds a data directory or database to its master key.
func checkFingerprint(st store.Store, keys *secrets.Keys, database bool) error {
	return st.Update(context.Background(), func(tx store.Tx) error {
		fp, err := tx.Meta("master_key_fingerprint")
		if errors.Is(err, store.ErrNotFound) {
			return tx.PutMeta("master_key_fingerprint", []byte(keys.Fingerprint()))
		}
		if err != nil {
			return err
		}
		if string(fp) != keys.Fingerprint() {
			if database {
				return errors.New("agentgate: the master key does not match the one this database was created with (every node must use the same key)")
			}
			return errors.New("agentgate: the master key does not match the one this data directory was created with")
		}
		return nil
	})
}

// Stop lets go of this config's reference to the store; the store closes
// when no config holds it any more.
func (a *App) Stop() error {
	if a.pooled {
		a.pooled = false
		if _, err := storePool.Delete(a.poolKey); err != nil {
			return err
		}
	}
	return nil
}

// Service returns the shared Console service, waiting up to StartTimeout for
// the store to open. It answers a 503 API error when the store is not ready.
func (a *App) Service(ctx context.Context) (*service.Service, error) {
	select {
	case <-a.ready:
	default:
		t := time.NewTimer(time.Duration(a.StartTimeout))
		defer t.Stop()
		select {
		case <-a.ready:
		case <-t.C:
			return nil, apierr.Unavailable("agentgate is starting; try again shortly")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if a.svc == nil {
		return nil, apierr.Unavailable("agentgate store is not available")
	}
	return a.svc, nil
}

// DataDir is the resolved data directory.
func (a *App) DataDir() string { return a.dir }

// SecretValues are the app's configured secrets (the master key as
// given), for scrubbing the environment of commands the agent runs.
func (a *App) SecretValues() []string {
	if a.masterKeyText == "" {
		return nil
	}
	return []string{a.masterKeyText}
}

// FromContext returns the agentgate app of a config, loading it with its
// defaults when the config does not configure it.
func FromContext(ctx caddy.Context) (*App, error) {
	v, err := ctx.App("agentgate")
	if err != nil {
		return nil, err
	}
	app, ok := v.(*App)
	if !ok {
		return nil, fmt.Errorf(`expected ctx.App("agentgate") to return *agentgate.App, got %T`, v)
	}
	return app, nil
}

// Interface guards
var (
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
	_ caddy.Validator   = (*App)(nil)
)

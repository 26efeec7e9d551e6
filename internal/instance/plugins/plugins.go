// Package plugins keeps the instance's plugins: the built-in ones, a
// project's local ones, and package plugins installed from an npm registry
// (packument and tarball client, sha512 integrity, a confined unpacker).
package plugins

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/ids"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
)

// Info is Plugin.Info's wire record.
type Info struct {
	ID       string         `json:"id,omitempty"`
	Source   Source         `json:"source"`
	Features map[string]any `json:"features"`
	State    State          `json:"state"`
}

// Source says where a plugin comes from.
type Source struct {
	Type     string `json:"type"` // builtin | package | local
	Target   string `json:"target,omitempty"`
	Version  string `json:"version,omitempty"`
	Outdated bool   `json:"outdated,omitempty"`
	Updating bool   `json:"updating,omitempty"`
	Path     string `json:"path,omitempty"`
}

// State is active, or failed with an error and the ref of the server log
// line that has it.
type State struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	Ref    string `json:"ref,omitempty"`
}

// Limits and timeouts of the registry client and the unpacker.
const (
	// DefaultRequestTimeout is how long a registry request may go without
	// an answer (or without receiving more of one).
	DefaultRequestTimeout = 30 * time.Second
	pluginDownloadTimeout = 10 * time.Minute
	pluginMaxPackument    = 64 << 20
	pluginMaxEntries      = maxTreeEntries
	pluginCheckParallel   = 8
	pluginMaxLocal        = 256
)

// retryFailedInstall is how long a failed install of a project's plugin
// stands before the next load tries again (a location reload tries at
// once).
var retryFailedInstall = time.Minute

// builtinPlugins are compiled into the gateway and always active.
var builtinPlugins = []string{"agentgate.gateway-auth"}

// pluginPackage is one package plugin of the Caddyfile.
type pluginPackage struct {
	name string // the npm package name; identifies the target
	spec string // the configured version: an exact version, a range or a dist-tag

	// Guarded by Manager.mu.
	version    string // installed (or pinned) version
	installed  bool   // Dir/<name>/<version> holds the package and its tree
	err        string // why the plugin is not active
	ref        string // the log line of err, when it is an install's
	outdated   bool
	updaters   int
	installing chan struct{} // closed when the install at start ends

	install sync.Mutex // serialises installs of this package
}

// Manager keeps the plugin inventory: the built-in plugins, the
// package plugins of the configuration and of each project (installed
// with their dependency trees under Dir/<name>/<version> from an npm
// registry) and the local plugin files of a project.
type Manager struct {
	registry         string // base URL without trailing slash; "" = none
	registryFallback func() (string, error)
	fallbackOnce     sync.Once
	fallbackURL      string
	fallbackErr      error

	dir    string
	client *http.Client
	policy Policy

	maxTarball     int64
	maxUnpacked    int64 // of a whole tree
	maxEntries     int   // of a whole tree
	requestTimeout time.Duration
	downloads      int

	// ctx bounds the installs the manager runs in the background; Close
	// cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	log    *zap.Logger
	pkgs   []*pluginPackage
	byName map[string]*pluginPackage
	rt     *Runtime // what runs the plugins (see Running)

	failures hookFailures // the hooks that failed since the plugins loaded
	trMu     sync.Mutex
	tr       *v1.Translator // the v1 form of the events the event hooks get
	// gen counts finished installs: a location planned before the last
	// one plans its plugins again on its next load.
	gen   uint64
	jobs  map[string]*job     // project installs by name@spec
	locs  map[string]*locPlan // by location directory
	start *hostStart          // the plugin host being made (Runtime.Start)
	host  *pluginhost.Host    // the host Runtime.Start made
}

// Options configure a Manager.
type Options struct {
	// Targets are the package plugins, as name@version.
	Targets []string
	// Registry is the npm registry base URL.
	Registry string
	// RegistryFallback, when Registry is empty, names one on first need
	// (npm's configured registry).
	RegistryFallback func() (string, error)
	// Dir is where packages are unpacked.
	Dir string
	// Policy says which plugins projects may bring.
	Policy Policy
	// MaxTreeSize bounds what a plugin and its dependencies unpack to,
	// together (default DefaultMaxTreeSize).
	MaxTreeSize int64
	// RequestTimeout bounds each registry request's wait for an answer
	// and for each part of it (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// Downloads bounds the registry requests one install runs at once
	// (default DefaultDownloads).
	Downloads int
	Logger    *zap.Logger
}

// New builds the inventory. It reads what is installed under
// Dir but does no network I/O: packages are installed by Update,
// InstallConfigured and on a location's first load.
func New(opts Options) (*Manager, error) {
	m := &Manager{
		dir:              opts.Dir,
		log:              opts.Logger,
		client:           &http.Client{},
		policy:           opts.Policy,
		registryFallback: opts.RegistryFallback,
		maxTarball:       opts.MaxTreeSize,
		maxUnpacked:      opts.MaxTreeSize,
		maxEntries:       pluginMaxEntries,
		requestTimeout:   opts.RequestTimeout,
		downloads:        opts.Downloads,
		byName:           map[string]*pluginPackage{},
		jobs:             map[string]*job{},
		locs:             map[string]*locPlan{},
	}
	if m.maxUnpacked <= 0 {
		m.maxTarball, m.maxUnpacked = DefaultMaxTreeSize, DefaultMaxTreeSize
	}
	if m.requestTimeout <= 0 {
		m.requestTimeout = DefaultRequestTimeout
	}
	if m.downloads <= 0 {
		m.downloads = DefaultDownloads
	}
	if err := m.policy.Validate(); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if m.log == nil {
		m.log = zap.NewNop()
	}
	if m.dir != "" {
		m.dir = filepath.Clean(m.dir)
	}
	if reg := strings.TrimSpace(opts.Registry); reg != "" {
		r, err := checkRegistryURL(reg)
		if err != nil {
			return nil, err
		}
		m.registry = r
	}
	for _, t := range opts.Targets {
		name, spec, err := parsePluginTarget(t)
		if err != nil {
			return nil, err
		}
		if _, dup := m.byName[name]; dup {
			return nil, fmt.Errorf("plugin %q is listed more than once", name)
		}
		p := &pluginPackage{name: name, spec: spec}
		m.resolveInstalled(p)
		m.pkgs = append(m.pkgs, p)
		m.byName[name] = p
	}
	return m, nil
}

// noPlugins stands in for a nil manager.
var noPlugins = func() *Manager {
	m, _ := New(Options{})
	return m
}()

func (m *Manager) self() *Manager {
	if m == nil {
		return noPlugins
	}
	return m
}

// resolveInstalled finds the installed version of a package at start-up:
// the pinned version for an exact pin, else the highest installed one.
func (m *Manager) resolveInstalled(p *pluginPackage) {
	p.err = "not installed"
	if _, ok := parseSemver(p.spec); ok {
		p.version = p.spec
		if why := m.policy.denied(p.name); why != "" {
			p.err = why
			return
		}
		if m.dir != "" {
			if _, err := readTreeLock(m.versionDir(p.name, p.spec), p.name, p.spec, false); err == nil {
				p.installed, p.err = true, ""
			} else if !errors.Is(err, os.ErrNotExist) {
				p.err = err.Error()
			}
		}
		return
	}
	if why := m.policy.denied(p.name); why != "" {
		p.err = why
		return
	}
	if m.dir == "" {
		return
	}
	ents, err := os.ReadDir(filepath.Join(m.dir, filepath.FromSlash(p.name)))
	if err != nil {
		return
	}
	var best string
	var bestV *semver.Version
	for _, e := range ents {
		v, ok := parseSemver(e.Name())
		if !ok || !e.IsDir() || (best != "" && v.Compare(bestV) <= 0) {
			continue
		}
		if _, err := readTreeLock(m.versionDir(p.name, e.Name()), p.name, e.Name(), false); err == nil {
			best, bestV = e.Name(), v
		}
	}
	if best != "" {
		p.version, p.installed, p.err = best, true, ""
	}
}

func (m *Manager) versionDir(name, version string) string {
	return filepath.Join(m.dir, filepath.FromSlash(name), version)
}

// List returns the inventory as seen from a project directory: what is
// configured and installed. Whether a plugin runs is Running's answer.
func (m *Manager) List(projectDir string) []Info {
	m = m.self()
	out := make([]Info, 0, len(builtinPlugins)+len(m.pkgs))
	for _, id := range builtinPlugins {
		out = append(out, Info{
			ID: id, Source: Source{Type: "builtin"},
			Features: map[string]any{"server": true}, State: State{Status: "active"},
		})
	}
	m.mu.Lock()
	for _, p := range m.pkgs {
		out = append(out, p.info())
	}
	m.mu.Unlock()
	return append(out, localPlugins(projectDir)...)
}

// info is a Caddyfile package's record before it loads (m.mu held).
func (p *pluginPackage) info() Info {
	info := Info{
		ID: p.name,
		Source: Source{Type: "package", Target: p.name, Version: p.version,
			Outdated: p.outdated, Updating: p.updaters > 0 || p.installing != nil},
		Features: map[string]any{},
		State:    State{Status: "active"},
	}
	switch {
	case p.installed:
		info.Features["server"] = true
	case p.installing != nil:
		info.State = State{Status: "failed", Error: "installing"}
	default:
		info.State = State{Status: "failed", Error: p.err, Ref: p.ref}
	}
	return info
}

// localPlugins lists the plugin files of a project's .opencode/plugin and
// .opencode/plugins directories.
func localPlugins(projectDir string) []Info {
	if projectDir == "" {
		return nil
	}
	var out []Info
	for _, sub := range []string{"plugin", "plugins"} {
		dir := filepath.Join(projectDir, ".opencode", sub)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			ext := filepath.Ext(name)
			if strings.HasPrefix(name, ".") || (ext != ".js" && ext != ".ts" && ext != ".mjs") {
				continue
			}
			full := filepath.Join(dir, name)
			if !e.Type().IsRegular() {
				fi, err := os.Stat(full)
				if e.Type()&os.ModeSymlink == 0 || err != nil || !fi.Mode().IsRegular() {
					continue
				}
			}
			if len(out) >= pluginMaxLocal {
				return out
			}
			out = append(out, Info{
				ID:       strings.TrimSuffix(name, ext),
				Source:   Source{Type: "local", Path: full},
				Features: map[string]any{"server": true},
				State:    State{Status: "active"},
			})
		}
	}
	return out
}

// lookup finds the package of a target given as "name" or "name@version".
func (m *Manager) lookup(target string) *pluginPackage {
	name := target
	if i := strings.LastIndex(target, "@"); i > 0 {
		name = target[:i]
	}
	return m.byName[name]
}

// Check asks the registry for newer versions of one package (or all) and
// returns the full inventory. Registry failures are logged and leave the
// plugins as they were.
func (m *Manager) Check(ctx context.Context, projectDir, target string) ([]Info, error) {
	m = m.self()
	pkgs := m.pkgs
	if target != "" {
		p := m.lookup(target)
		if p == nil {
			return nil, errs.New(400, "InvalidRequestError",
				clip("Plugin package is not in the current server inventory: "+target), "field", "target")
		}
		pkgs = []*pluginPackage{p}
	}
	if _, err := m.registryBase(); err != nil {
		if len(pkgs) > 0 {
			m.logger().Warn("plugin check skipped", zap.Error(err))
		}
		return m.List(projectDir), nil
	}
	sem := make(chan struct{}, pluginCheckParallel)
	var wg sync.WaitGroup
	for _, p := range pkgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pk, err := m.fetchPackument(ctx, p.name)
			if err != nil {
				m.logger().Warn("plugin check failed", zap.String("target", p.name), zap.Error(err))
				return
			}
			want := pk.pick(p.spec)
			if want == "" {
				m.logger().Warn("plugin check: registry names no usable version", zap.String("target", p.name))
				return
			}
			m.mu.Lock()
			p.outdated = isNewer(want, p.version)
			m.mu.Unlock()
		}()
	}
	wg.Wait()
	return m.List(projectDir), nil
}

// Update installs the newest versions of the named packages concurrently;
// it returns the targets that changed and the joined failures.
func (m *Manager) Update(ctx context.Context, targets []string) ([]string, error) {
	m = m.self()
	var pkgs []*pluginPackage
	var unknown []string
	seen := map[*pluginPackage]bool{}
	for _, t := range targets {
		p := m.lookup(t)
		switch {
		case p == nil:
			unknown = append(unknown, t)
		case !seen[p]:
			seen[p] = true
			pkgs = append(pkgs, p)
		}
	}
	if len(unknown) > 0 {
		return nil, errs.New(400, "InvalidRequestError",
			clip("Plugin packages are not in the current server inventory: "+strings.Join(unknown, ", ")), "field", "targets")
	}
	m.mu.Lock()
	for _, p := range pkgs {
		p.updaters++
	}
	m.mu.Unlock()
	changed := make([]bool, len(pkgs))
	failed := make([]error, len(pkgs))
	var wg sync.WaitGroup
	for i, p := range pkgs {
		wg.Go(func() {
			changed[i], failed[i] = m.updateOne(ctx, p)
			m.mu.Lock()
			p.updaters--
			m.mu.Unlock()
		})
	}
	wg.Wait()
	var updated, failures []string
	for i, p := range pkgs {
		if failed[i] != nil {
			m.logger().Error("plugin update failed", zap.String("target", p.name), zap.Error(failed[i]))
			failures = append(failures, p.name+": "+failed[i].Error())
		} else if changed[i] {
			updated = append(updated, p.name)
		}
	}
	if len(failures) > 0 {
		return updated, errs.Unavailable("plugin", clip("Failed to update plugin packages: "+strings.Join(failures, "; ")))
	}
	return updated, nil
}

// clip bounds a message that echoes caller input.
func clip(msg string) string {
	if len(msg) > 1024 {
		return fmt.Sprintf("%s... (%d more chars)", msg[:1024], len(msg)-1024)
	}
	return msg
}

// updateOne brings one package to the registry's newest version. It reports
// whether the inventory changed.
func (m *Manager) updateOne(ctx context.Context, p *pluginPackage) (bool, error) {
	return m.installPackage(ctx, p, true)
}

// installPackage installs a Caddyfile package: with latest, the version
// an update moves to (pick); else the version its spec names (resolve).
// It reports whether the inventory changed.
func (m *Manager) installPackage(ctx context.Context, p *pluginPackage, latest bool) (bool, error) {
	p.install.Lock()
	defer p.install.Unlock()
	if _, err := m.registryBase(); err != nil {
		return false, err
	}
	if m.dir == "" {
		return false, errors.New("no plugin directory is configured")
	}
	if why := m.policy.denied(p.name); why != "" {
		return false, errors.New(why)
	}
	pk, err := m.fetchPackument(ctx, p.name)
	if err != nil {
		return false, err
	}
	var want string
	if latest {
		if want = pk.pick(p.spec); want == "" {
			return false, errors.New("registry names no usable latest version")
		}
	} else if want, err = pk.resolve(p.spec); err != nil {
		return false, err
	}
	m.mu.Lock()
	current, installed := p.version, p.installed
	m.mu.Unlock()
	if installed && (current == want || (latest && !isNewer(want, current))) {
		m.mu.Lock()
		p.outdated = false
		m.mu.Unlock()
		return false, nil
	}
	meta, err := pk.version(want)
	if err != nil {
		return false, err
	}
	if _, err := m.installTree(ctx, installRoot{name: p.name, version: want, meta: meta}, m.versionDir(p.name, want)); err != nil {
		return false, err
	}
	m.mu.Lock()
	p.version, p.installed, p.err, p.ref, p.outdated = want, true, "", "", false
	m.mu.Unlock()
	m.logger().Info("plugin installed", zap.String("target", p.name), zap.String("from", current), zap.String("to", want))
	return true, nil
}

// InstallConfigured installs, in the background, the Caddyfile's package
// plugins that are not installed yet (the version each names): meanwhile
// they are listed failed with "installing" and source.updating, and a
// location's load waits for them. Failures are logged with a ref the
// plugin's status carries.
func (m *Manager) InstallConfigured() {
	m = m.self()
	if _, err := m.registryBaseQuiet(); err != nil {
		if !errors.Is(err, errNothingToInstall) {
			m.mu.Lock()
			for _, p := range m.pkgs {
				if !p.installed && p.err == "not installed" {
					p.err = "not installed: " + err.Error()
				}
			}
			m.mu.Unlock()
		}
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pkgs {
		if p.installed || p.installing != nil || m.policy.denied(p.name) != "" {
			continue
		}
		done := make(chan struct{})
		p.installing = done
		go func() {
			_, err := m.installPackage(m.ctx, p, false)
			m.mu.Lock()
			if err != nil {
				p.ref = ids.New("ref", false, time.Now())
				p.err = clip("install failed: " + err.Error())
				m.log.Error("plugin install failed", zap.String("target", p.name+"@"+p.spec), zap.String("ref", p.ref), zap.Error(err))
			}
			p.installing = nil
			m.gen++
			m.mu.Unlock()
			close(done)
		}()
	}
}

var errNothingToInstall = errors.New("nothing to install")

// registryBaseQuiet is registryBase without asking npm when there is no
// fallback; it exists so that InstallConfigured with nothing to install
// asks nobody.
func (m *Manager) registryBaseQuiet() (string, error) {
	need := false
	m.mu.Lock()
	for _, p := range m.pkgs {
		if !p.installed {
			need = true
		}
	}
	m.mu.Unlock()
	if !need {
		return "", errNothingToInstall
	}
	return m.registryBase()
}

// Close stops the background installs and the plugin host the manager
// started.
func (m *Manager) Close() {
	if m == nil {
		return
	}
	m.cancel()
	m.mu.Lock()
	h := m.host
	m.host = nil
	m.mu.Unlock()
	if h != nil {
		h.Close()
	}
}

func (m *Manager) logger() *zap.Logger {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log
}

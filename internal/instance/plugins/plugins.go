// Package plugins keeps the instance's plugins: the built-in ones, a
// project's local ones, and package plugins installed from an npm registry
// (packument and tarball client, sha512 integrity, a confined unpacker).
package plugins

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/errs"
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
	pluginMetaTimeout     = 30 * time.Second
	pluginDownloadTimeout = 5 * time.Minute
	pluginMaxPackument    = 32 << 20
	pluginMaxTarball      = 64 << 20
	pluginMaxUnpacked     = 64 << 20
	pluginMaxEntries      = 20000
	pluginCheckParallel   = 8
	pluginMaxLocal        = 256
)

// builtinPlugins are compiled into the gateway and always active.
var builtinPlugins = []string{"agentgate.gateway-auth"}

// pluginPackage is one package plugin of the inventory.
type pluginPackage struct {
	name string // the npm package name; identifies the target
	spec string // the configured version: an exact version, a range or a dist-tag

	// Guarded by Manager.mu.
	version   string // installed (or pinned) version
	installed bool   // Dir/<name>/<version> holds the package
	err       string // why the plugin is not active
	outdated  bool
	updaters  int

	install sync.Mutex // serialises installs of this package
}

// Manager keeps the plugin inventory: the built-in plugins, the
// package plugins of the configuration (installed under Dir/<name>/<version>
// from an npm registry) and the local plugin files of a project.
type Manager struct {
	registry string // base URL without trailing slash; "" = none
	dir      string
	log      *zap.Logger
	client   *http.Client

	maxTarball  int64
	maxUnpacked int64
	maxEntries  int

	mu     sync.Mutex
	pkgs   []*pluginPackage
	byName map[string]*pluginPackage
	rt     *Runtime // what runs the plugins (see Running)

	failures hookFailures // the hooks that failed since the plugins loaded
	trMu     sync.Mutex
	tr       *v1.Translator // the v1 form of the events the event hooks get
}

// Options configure a Manager.
type Options struct {
	// Targets are the package plugins, as name@version.
	Targets []string
	// Registry is the npm registry base URL.
	Registry string
	// Dir is where packages are unpacked.
	Dir    string
	Logger *zap.Logger
}

// New builds the inventory. It reads what is installed under
// Dir but does no network I/O: packages are installed by Update.
func New(opts Options) (*Manager, error) {
	m := &Manager{
		dir:         opts.Dir,
		log:         opts.Logger,
		client:      &http.Client{},
		maxTarball:  pluginMaxTarball,
		maxUnpacked: pluginMaxUnpacked,
		maxEntries:  pluginMaxEntries,
		byName:      map[string]*pluginPackage{},
	}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	if m.dir != "" {
		m.dir = filepath.Clean(m.dir)
	}
	if reg := strings.TrimSpace(opts.Registry); reg != "" {
		u, err := url.Parse(reg)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("plugin registry must be an http(s) URL, got %q", reg)
		}
		m.registry = strings.TrimRight(reg, "/")
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
var noPlugins = &Manager{log: zap.NewNop(), byName: map[string]*pluginPackage{}}

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
		if m.dir != "" {
			if err := verifyInstalled(m.versionDir(p.name, p.spec), p.name, p.spec); err == nil {
				p.installed, p.err = true, ""
			} else if !errors.Is(err, os.ErrNotExist) {
				p.err = err.Error()
			}
		}
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
		if verifyInstalled(m.versionDir(p.name, e.Name()), p.name, e.Name()) == nil {
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
		info := Info{
			ID: p.name,
			Source: Source{Type: "package", Target: p.name, Version: p.version,
				Outdated: p.outdated, Updating: p.updaters > 0},
			Features: map[string]any{},
			State:    State{Status: "active"},
		}
		if p.installed {
			info.Features["server"] = true
		} else {
			info.State = State{Status: "failed", Error: p.err}
		}
		out = append(out, info)
	}
	m.mu.Unlock()
	return append(out, localPlugins(projectDir)...)
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
	if m.registry == "" {
		if len(pkgs) > 0 {
			m.log.Warn("plugin check skipped: no registry configured")
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
				m.log.Warn("plugin check failed", zap.String("target", p.name), zap.Error(err))
				return
			}
			want := pk.pick(p.spec)
			if want == "" {
				m.log.Warn("plugin check: registry names no usable version", zap.String("target", p.name))
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
			m.log.Error("plugin update failed", zap.String("target", p.name), zap.Error(failed[i]))
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
	p.install.Lock()
	defer p.install.Unlock()
	if m.registry == "" {
		return false, errors.New("no plugin registry is configured")
	}
	if m.dir == "" {
		return false, errors.New("no plugin directory is configured")
	}
	pk, err := m.fetchPackument(ctx, p.name)
	if err != nil {
		return false, err
	}
	want := pk.pick(p.spec)
	if want == "" {
		return false, errors.New("registry names no usable latest version")
	}
	m.mu.Lock()
	current, installed := p.version, p.installed
	m.mu.Unlock()
	if installed && !isNewer(want, current) {
		m.mu.Lock()
		p.outdated = false
		m.mu.Unlock()
		return false, nil
	}
	meta, ok := pk.Versions[want]
	if !ok {
		return false, fmt.Errorf("registry lists no version %s", want)
	}
	dest := m.versionDir(p.name, want)
	if verifyInstalled(dest, p.name, want) != nil {
		if err := m.install(ctx, p.name, want, meta.Dist, dest); err != nil {
			return false, err
		}
	}
	m.mu.Lock()
	p.version, p.installed, p.err, p.outdated = want, true, "", false
	m.mu.Unlock()
	m.log.Info("plugin updated", zap.String("target", p.name), zap.String("from", current), zap.String("to", want))
	return true, nil
}

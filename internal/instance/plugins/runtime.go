package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/ids"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
)

// Location is where plugins load: a location's directory and its
// project.
type Location struct {
	Dir, ProjectDir, ProjectID string
}

// Runtime runs the inventory's plugins: the plugin host (nil when there is
// none, NoHost saying why, or Start making it on first use) and what
// their input needs.
type Runtime struct {
	Host   *pluginhost.Host
	NoHost string
	// Start, when Host is nil and NoHost empty, makes the host the first
	// time a location loads plugins (installing Bun when it has to). Its
	// error is every plugin's status; a load after RetryStart (or after
	// Reload) tries again. The manager closes the host it made in Close.
	Start func(ctx context.Context) (*pluginhost.Host, error)
	// Auth is the Authorization header the plugins' client of a location
	// sends (over its host's stdio): a credential valid for that location
	// only, never an instance credential.
	Auth func(dir string) string
	// Config is what the plugins' config hooks see of a location.
	Config func(loc Location) any
}

// RetryStart is how long a failed Runtime.Start stands before a load
// tries again.
const RetryStart = time.Minute

// hostStart is one run of Runtime.Start.
type hostStart struct {
	done chan struct{}
	err  error
	at   time.Time
}

// SetRuntime sets what runs the plugins (nil: none).
func (m *Manager) SetRuntime(rt *Runtime) {
	m = m.self()
	m.mu.Lock()
	m.rt = rt
	m.start = nil
	m.mu.Unlock()
}

func (m *Manager) runtime() *Runtime {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rt
}

// currentHost is the host that runs the plugins now, if any (never
// starting one).
func (m *Manager) currentHost() *pluginhost.Host {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rt != nil && m.rt.Host != nil {
		return m.rt.Host
	}
	return m.host
}

// hostFor returns the plugin host, making it (Runtime.Start) on first use;
// a start in progress is waited for, at most until ctx ends.
func (m *Manager) hostFor(ctx context.Context) (*pluginhost.Host, error) {
	m.mu.Lock()
	rt := m.rt
	switch {
	case rt == nil:
		m.mu.Unlock()
		return nil, errors.New("no plugin host")
	case rt.Host != nil:
		m.mu.Unlock()
		return rt.Host, nil
	case m.host != nil:
		h := m.host
		m.mu.Unlock()
		return h, nil
	case rt.Start == nil:
		m.mu.Unlock()
		why := "no plugin host"
		if rt.NoHost != "" {
			why = rt.NoHost
		}
		return nil, errors.New(why)
	}
	hs := m.start
	if hs == nil || (hs.err != nil && time.Since(hs.at) > RetryStart) {
		hs = &hostStart{done: make(chan struct{})}
		m.start = hs
		go func() {
			h, err := rt.Start(m.ctx)
			m.mu.Lock()
			hs.err, hs.at = err, time.Now()
			if err == nil {
				if m.rt == rt && m.start == hs && m.ctx.Err() == nil {
					m.host = h
				} else {
					h.Close()
					hs.err = errors.New("the plugins were reloaded meanwhile")
				}
			}
			m.mu.Unlock()
			if err != nil {
				m.logger().Error("the plugin host cannot start", zap.Error(err))
			}
			close(hs.done)
		}()
	}
	m.mu.Unlock()
	select {
	case <-hs.done:
	case <-ctx.Done():
		return nil, errors.New("the plugin host is starting (installing its runtime); try again")
	}
	if hs.err != nil {
		return nil, hs.err
	}
	return m.currentHost(), nil
}

// hostID is a plugin's id in the host: packages and local files never
// collide.
func packageHostID(name string) string { return "package:" + name }
func localHostID(path string) string   { return "local:" + path }

// item is one plugin of a location's plan: its record before it loads,
// and what the host loads (nil when it is not loaded: refused, not
// installed, failed to install).
type item struct {
	info Info
	spec *pluginhost.Spec
}

// locPlan is what a location loads, as of the manager's generation gen.
type locPlan struct {
	gen   uint64
	items []item
	// pending: a package was still installing when the plan was made,
	// or its install had failed (the next load tries again once the
	// failure is old enough).
	pending bool
}

func (lp *locPlan) specs() []pluginhost.Spec {
	var out []pluginhost.Spec
	for _, it := range lp.items {
		if it.spec != nil {
			out = append(out, *it.spec)
		}
	}
	return out
}

func samePlan(a, b *locPlan) bool {
	sa, sb := a.specs(), b.specs()
	if len(sa) != len(sb) {
		return false
	}
	for i := range sa {
		if !reflect.DeepEqual(sa[i], sb[i]) {
			return false
		}
	}
	return true
}

// job is one install of a project's package (name@spec), shared by the
// projects that name the same.
type job struct {
	done     chan struct{}
	version  string
	err      error
	ref      string
	finished time.Time
}

// projectJob returns the install of name@spec, starting it unless one
// runs, succeeded or failed less than retryFailedInstall ago.
func (m *Manager) projectJob(name, spec string) *job {
	key := name + "@" + spec
	m.mu.Lock()
	defer m.mu.Unlock()
	if j := m.jobs[key]; j != nil {
		select {
		case <-j.done:
			if j.err == nil || time.Since(j.finished) < retryFailedInstall {
				return j
			}
		default:
			return j
		}
	}
	j := &job{done: make(chan struct{})}
	m.jobs[key] = j
	go func() {
		version, err := m.installProjectPackage(name, spec)
		m.mu.Lock()
		j.version, j.err, j.finished = version, err, time.Now()
		if err != nil {
			j.ref = ids.New("ref", false, time.Now())
			m.log.Error("plugin install failed", zap.String("target", key), zap.String("ref", j.ref), zap.Error(err))
		}
		m.gen++
		m.mu.Unlock()
		close(j.done)
	}()
	return j
}

// installProjectPackage resolves and installs a project's package with
// its tree.
func (m *Manager) installProjectPackage(name, spec string) (string, error) {
	if m.dir == "" {
		return "", errors.New("no plugin directory is configured")
	}
	pk, err := m.fetchPackument(m.ctx, name)
	if err != nil {
		return "", err
	}
	version, err := pk.resolve(spec)
	if err != nil {
		return "", err
	}
	meta, err := pk.version(version)
	if err != nil {
		return "", err
	}
	if _, err := m.installTree(m.ctx, installRoot{name: name, version: version, meta: meta}, m.versionDir(name, version)); err != nil {
		return "", err
	}
	m.logger().Info("plugin installed", zap.String("target", name+"@"+spec), zap.String("version", version))
	return version, nil
}

// plan is what a location loads: the Caddyfile's packages (waiting for
// their installs at start), then the plugins its project names — the
// packages of its opencode.json(c) plugin list, installed now when they
// are not (waiting for the installs), and its plugin files — each
// checked against the operator's policy. Waits end with ctx: a package
// still installing is listed as such and the location plans again once
// it is done.
func (m *Manager) plan(ctx context.Context, loc Location) *locPlan {
	m.mu.Lock()
	gen := m.gen
	var waits []chan struct{}
	for _, p := range m.pkgs {
		if p.installing != nil {
			waits = append(waits, p.installing)
		}
	}
	m.mu.Unlock()
	wait(ctx, waits)

	lp := &locPlan{gen: gen}
	m.mu.Lock()
	configured := map[string]bool{}
	for _, p := range m.pkgs {
		configured[p.name] = true
		it := item{info: p.info()}
		if p.installed {
			root := m.versionDir(p.name, p.version)
			sp := pluginhost.Spec{ID: packageHostID(p.name), Root: root}
			entry, err := packageEntry(root)
			sp.Entry = entry
			if err != nil {
				sp.Error = err.Error()
			}
			it.spec = &sp
		}
		lp.items = append(lp.items, it)
	}
	m.mu.Unlock()

	entries := readProjectPlugins(loc.ProjectDir)
	locked := m.readProjectLock(loc.ProjectDir)
	jobs := map[int]*job{}
	versions := map[int]string{}
	waits = nil
	for i, e := range entries {
		if e.name == "" || e.err != "" || configured[e.name] || m.policy.refusedPackage(e.name) != "" {
			continue
		}
		if v := locked[e.name+"@"+e.spec]; v != "" && m.treeReady(e.name, v) {
			versions[i] = v
			continue
		}
		if _, ok := parseSemver(e.spec); ok && m.treeReady(e.name, e.spec) {
			versions[i] = e.spec
			continue
		}
		if _, err := m.registryBase(); err != nil {
			continue // listed "not installed" with the reason below
		}
		j := m.projectJob(e.name, e.spec)
		jobs[i] = j
		waits = append(waits, j.done)
	}
	wait(ctx, waits)

	files := map[string]bool{}
	complete, failed := true, false
	lock := map[string]string{}
	for i, e := range entries {
		info := Info{ID: e.name, Source: Source{Type: "package", Target: e.name}, Features: map[string]any{}, State: State{Status: "active"}}
		if e.name == "" {
			info = Info{ID: strings.TrimSuffix(filepath.Base(e.file), filepath.Ext(e.file)), Source: Source{Type: "local", Path: e.file},
				Features: map[string]any{}, State: State{Status: "active"}}
			if e.file == "" {
				info = Info{Source: Source{Type: "local", Path: e.config}, Features: map[string]any{}}
			}
		}
		fail := func(msg, ref string) {
			info.State = State{Status: "failed", Error: clip(msg), Ref: ref}
			lp.items = append(lp.items, item{info: info})
		}
		switch {
		case e.err != "":
			fail(e.err, "")
		case e.name != "" && configured[e.name]:
			// The Caddyfile names this package: its version loads.
		case e.name != "":
			if why := m.policy.refusedPackage(e.name); why != "" {
				fail(why, "")
				continue
			}
			version := versions[i]
			if j := jobs[i]; j != nil {
				select {
				case <-j.done:
					if j.err != nil {
						failed = true
						fail("install failed: "+j.err.Error(), j.ref)
						continue
					}
					version = j.version
				default:
					complete = false
					info.Source.Updating = true
					fail("installing", "")
					continue
				}
			}
			if version == "" {
				msg := "not installed"
				if _, err := m.registryBase(); err != nil {
					msg += ": " + err.Error()
				}
				fail(msg, "")
				continue
			}
			lock[e.name+"@"+e.spec] = version
			info.Source.Version = version
			info.Features["server"] = true
			root := m.versionDir(e.name, version)
			sp := pluginhost.Spec{ID: packageHostID(e.name), Root: root, Options: e.options}
			entry, err := packageEntry(root)
			sp.Entry = entry
			if err != nil {
				sp.Error = err.Error()
			}
			lp.items = append(lp.items, item{info: info, spec: &sp})
		default:
			if why := m.policy.refusedFile(); why != "" {
				fail(why, "")
				continue
			}
			files[e.file] = true
			entry, err := fileEntry(e.file)
			sp := pluginhost.Spec{ID: localHostID(e.file), Entry: entry, Options: e.options}
			if err != nil {
				sp.Error = err.Error()
			}
			info.Features["server"] = true
			lp.items = append(lp.items, item{info: info, spec: &sp})
		}
	}
	lp.pending = !complete || failed
	if complete && loc.ProjectDir != "" && !sameStrings(lock, locked) {
		if err := m.writeProjectLock(loc.ProjectDir, lock); err != nil {
			m.logger().Warn("writing the project's plugin lock failed", zap.String("project", loc.ProjectDir), zap.Error(err))
		}
	}

	locals := localPlugins(loc.ProjectDir)
	sort.Slice(locals, func(i, j int) bool {
		return filepath.Base(locals[i].Source.Path) < filepath.Base(locals[j].Source.Path)
	})
	for _, l := range locals {
		if files[l.Source.Path] {
			continue
		}
		if why := m.policy.refusedFile(); why != "" {
			l.Features = map[string]any{}
			l.State = State{Status: "failed", Error: why}
			lp.items = append(lp.items, item{info: l})
			continue
		}
		lp.items = append(lp.items, item{info: l, spec: &pluginhost.Spec{ID: localHostID(l.Source.Path), Entry: l.Source.Path}})
	}
	return lp
}

// wait waits for every channel, at most until ctx ends.
func wait(ctx context.Context, chans []chan struct{}) {
	for _, ch := range chans {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func sameStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// treeReady reports whether name@version is installed, tree and lock.
func (m *Manager) treeReady(name, version string) bool {
	if m.dir == "" {
		return false
	}
	_, err := readTreeLock(m.versionDir(name, version), name, version, false)
	return err == nil
}

// fileEntry is the module of a plugin file a project's list names: the
// file, or for a directory its package's entry (or index file).
func fileEntry(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("plugin file %s: %v", p, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return p, nil
	}
	if _, err := os.Stat(filepath.Join(p, "package.json")); err == nil {
		return packageEntry(p)
	}
	for _, name := range []string{"index.ts", "index.js", "index.mjs"} {
		if fi, err := os.Stat(filepath.Join(p, name)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(p, name), nil
		}
	}
	return "", fmt.Errorf("plugin directory %s has no package.json or index file", p)
}

// packageEntry is an installed package's entry module: package.json's
// exports ("./server", then ".": a path, or its import or default
// condition), module or main, else index.js; it must be a file inside the
// package.
func packageEntry(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", errors.New("the package has no package.json")
	}
	var pj struct {
		Exports json.RawMessage `json:"exports"`
		Module  string          `json:"module"`
		Main    string          `json:"main"`
	}
	json.Unmarshal(b, &pj)
	var cands []string
	var exp any
	if json.Unmarshal(pj.Exports, &exp) == nil {
		switch e := exp.(type) {
		case string:
			cands = append(cands, e)
		case map[string]any:
			// "./server" is a plugin's server entry (OpenCode reads it
			// first), then ".".
			for _, key := range []string{"./server", "."} {
				dot, ok := e[key]
				if !ok && key == "." {
					dot = any(e)
				}
				switch d := dot.(type) {
				case string:
					cands = append(cands, d)
				case map[string]any:
					for _, k := range []string{"import", "bun", "default", "node", "require"} {
						if v, ok := d[k].(string); ok {
							cands = append(cands, v)
						}
					}
				}
			}
		}
	}
	cands = append(cands, pj.Module, pj.Main, "index.js", "index.mjs")
	for _, c := range cands {
		if c == "" {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(c))
		if rel, err := filepath.Rel(dir, p); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errors.New("the package has no entry point (package.json exports, module or main, or index.js)")
}

// load loads a location's plugins in the host (once per host process:
// a loaded location answers without reading the plugins again, until an
// install finishes or the plugins reload) and returns its plan and the
// statuses in load order; err when no host runs them.
func (m *Manager) load(ctx context.Context, loc Location) (*locPlan, []pluginhost.Status, error) {
	m.mu.Lock()
	lp, gen, rt := m.locs[loc.Dir], m.gen, m.rt
	m.mu.Unlock()
	if lp != nil && lp.gen == gen && !lp.pending {
		if h := m.currentHost(); h != nil && len(lp.specs()) > 0 {
			if st, ok := h.Loaded(loc.Dir); ok {
				return lp, st, nil
			}
		}
	} else {
		next := m.plan(ctx, loc)
		if h := m.currentHost(); h != nil && lp != nil && !samePlan(lp, next) {
			// What the location loads changed (an install finished): its
			// process starts again with the new set.
			h.Forget(loc.Dir)
		}
		lp = next
		m.mu.Lock()
		m.locs[loc.Dir] = lp
		m.mu.Unlock()
	}
	specs := lp.specs()
	if len(specs) == 0 {
		return lp, nil, nil // no plugin: the host is not started (nor Bun installed) for nothing
	}
	host, err := m.hostFor(ctx)
	if err != nil {
		return lp, nil, err
	}
	st, err := host.Load(ctx, loc.Dir, func() pluginhost.LoadInput {
		in := pluginhost.LoadInput{Directory: loc.Dir, Worktree: loc.ProjectDir, Plugins: specs,
			Project: map[string]any{"id": loc.ProjectID, "worktree": loc.ProjectDir}}
		if rt != nil && rt.Auth != nil {
			in.Auth = rt.Auth(loc.Dir)
		}
		if rt != nil && rt.Config != nil {
			in.Config = rt.Config(loc)
		}
		return in
	})
	return lp, st, err
}

// Running lists the inventory as it runs in a location: built-in plugins
// active; a package or local plugin active only when it loaded in the
// plugin host (with its hooks and tools as features), else failed with
// why: not allowed (the rule), not installed, install failed (the
// registry's error), installing, or the loader's error, with a ref to the
// server log line that has it. It waits for the location's installs, at
// most until ctx ends.
func (m *Manager) Running(ctx context.Context, loc Location) []Info {
	m = m.self()
	out := m.List("")[:len(builtinPlugins)]
	lp, loaded, err := m.load(ctx, loc)
	host := m.currentHost()
	st := make(map[string]pluginhost.Status, len(loaded))
	for _, s := range loaded {
		st[s.ID] = s
	}
	for _, it := range lp.items {
		info := it.info
		info.Features = maps.Clone(info.Features)
		if info.Source.Type == "package" {
			// check and update change a Caddyfile package's flags
			// between plans.
			m.mu.Lock()
			if p := m.byName[info.ID]; p != nil {
				info.Source.Outdated, info.Source.Updating = p.outdated, p.updaters > 0 || p.installing != nil
			}
			m.mu.Unlock()
		}
		if it.spec != nil {
			s, ok := st[it.spec.ID]
			switch {
			case err != nil:
				m.fail(&info, err.Error())
			case !ok:
				m.fail(&info, "the plugin host did not report on this plugin")
			case !s.OK:
				m.fail(&info, s.Error)
			default:
				info.Features = m.features(s, host)
			}
		}
		out = append(out, info)
	}
	shadowed(out)
	return out
}

// sandboxMode is how the plugins run: "enforced" (each location's host
// in its own sandbox) or "off" (plain processes, the operator's choice).
func sandboxMode(h *pluginhost.Host) string {
	mode, _ := h.Confinement()
	return mode
}

// Confinement is how the plugins run (see pluginhost.Host.Confinement):
// "enforced", "off" or "unavailable" with its reason; "" when no host
// runs them.
func (m *Manager) Confinement() (mode, reason string) {
	h := m.self().currentHost()
	if h == nil {
		return "", ""
	}
	return h.Confinement()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func toolNames(ts []pluginhost.ToolDef) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// fail marks a plugin failed, logging the error under a ref the status
// carries.
func (m *Manager) fail(info *Info, msg string) {
	ref := ids.New("ref", false, time.Now())
	m.logger().Warn("plugin failed", zap.String("plugin", info.ID), zap.String("ref", ref), zap.String("error", clip(msg)))
	info.Features = map[string]any{}
	info.State = State{Status: "failed", Error: clip(msg), Ref: ref}
}

// shadowed notes, on each active plugin's features, the tools another
// plugin defined first (the first in load order wins).
func shadowed(list []Info) {
	owner := map[string]string{}
	for i := range list {
		tools, _ := list[i].Features["tools"].([]string)
		var lost []string
		for _, t := range tools {
			if o, taken := owner[t]; taken {
				lost = append(lost, t+" (defined first by "+o+")")
				continue
			}
			owner[t] = list[i].ID
		}
		if lost != nil {
			list[i].Features["shadowed"] = lost
		}
	}
}

// Tool is a plugin tool as the agent is offered it, with the plugin that
// runs it.
type Tool struct {
	pluginhost.ToolDef
	Plugin string // host id
}

// Tools are the tools a location's plugins define, the first definition
// of a name winning (packages in configuration order, then local files by
// name). Errors (no host, a failed load) leave none.
func (m *Manager) Tools(ctx context.Context, loc Location) []Tool {
	m = m.self()
	_, loaded, err := m.load(ctx, loc)
	if err != nil {
		return nil
	}
	var out []Tool
	seen := map[string]bool{}
	for _, s := range loaded { // in load order
		if !s.OK {
			continue
		}
		for _, t := range s.Tools {
			if !seen[t.Name] {
				seen[t.Name] = true
				out = append(out, Tool{ToolDef: t, Plugin: s.ID})
			}
		}
	}
	return out
}

// RunTool runs a plugin's tool in a location.
func (m *Manager) RunTool(ctx context.Context, loc Location, plugin, name string, args json.RawMessage, tc pluginhost.ToolContext) (pluginhost.ToolResult, error) {
	h := m.self().currentHost()
	if h == nil {
		return pluginhost.ToolResult{}, errors.New("no plugin host")
	}
	return h.Tool(ctx, loc.Dir, loc.ProjectDir, plugin, name, args, tc)
}

// Trigger runs a hook of a location's loaded plugins and returns the
// output they left; a failure (a plugin that throws, a deadline) is logged
// and leaves output as it was.
func (m *Manager) Trigger(ctx context.Context, loc Location, hook string, input, output map[string]any) map[string]any {
	m = m.self()
	if _, _, err := m.load(ctx, loc); err != nil {
		return output
	}
	h := m.currentHost()
	if h == nil {
		return output
	}
	out, errs, err := h.Trigger(ctx, loc.Dir, hook, input, output)
	m.reportHookErrors(hook, errs)
	if err != nil {
		m.logger().Warn("plugin hook failed", zap.String("hook", hook), zap.String("error", clip(err.Error())))
		return output
	}
	return out
}

// Event hands an event record to the event hooks of the location it
// belongs to, when that location's plugins are loaded.
func (m *Manager) Event(record []byte) {
	h := m.self().currentHost()
	if h == nil {
		return
	}
	var ev struct {
		Location *struct {
			Directory string `json:"directory"`
		} `json:"location"`
	}
	if json.Unmarshal(record, &ev) != nil || ev.Location == nil {
		return
	}
	if evs := m.eventsFor(record); len(evs) > 0 {
		h.Event(ev.Location.Directory, evs...)
	}
}

// Reload makes every location load its plugins afresh on next use: the
// project lists and plugin files are read again, failed installs and a
// failed host start are tried again.
func (m *Manager) Reload() {
	m = m.self()
	m.failures.reset()
	m.mu.Lock()
	m.locs = map[string]*locPlan{}
	for k, j := range m.jobs {
		select {
		case <-j.done:
			if j.err != nil {
				delete(m.jobs, k)
			}
		default:
		}
	}
	if m.start != nil && m.start.err != nil {
		m.start = nil
	}
	m.mu.Unlock()
	if h := m.currentHost(); h != nil {
		h.Reload()
	}
}

// SetLogger replaces the manager's logger.
func (m *Manager) SetLogger(l *zap.Logger) {
	m = m.self()
	m.mu.Lock()
	m.log = l
	m.mu.Unlock()
}

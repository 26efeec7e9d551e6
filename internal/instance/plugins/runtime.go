package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
// none, NoHost saying why) and what their input needs.
type Runtime struct {
	Host   *pluginhost.Host
	NoHost string
	// Auth is the Authorization header the plugins' client of a location
	// sends (over its host's stdio): a credential valid for that location
	// only, never an instance credential.
	Auth func(dir string) string
	// Config is what the plugins' config hooks see of a location.
	Config func(loc Location) any
}

// SetRuntime sets what runs the plugins (nil: none).
func (m *Manager) SetRuntime(rt *Runtime) {
	m = m.self()
	m.mu.Lock()
	m.rt = rt
	m.mu.Unlock()
}

func (m *Manager) runtime() *Runtime {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rt
}

// hostID is a plugin's id in the host: packages and local files never
// collide.
func packageHostID(name string) string { return "package:" + name }
func localHostID(path string) string   { return "local:" + path }

// specs are the plugins of a project in load order: the package plugins
// in the configuration's order, then the project's local files by name.
func (m *Manager) specs(projectDir string) []pluginhost.Spec {
	var out []pluginhost.Spec
	m.mu.Lock()
	for _, p := range m.pkgs {
		if !p.installed {
			continue
		}
		entry, err := packageEntry(m.versionDir(p.name, p.version))
		sp := pluginhost.Spec{ID: packageHostID(p.name), Entry: entry, Root: m.versionDir(p.name, p.version)}
		if err != nil {
			sp.Error = err.Error()
		}
		out = append(out, sp)
	}
	m.mu.Unlock()
	locals := localPlugins(projectDir)
	sort.Slice(locals, func(i, j int) bool {
		return filepath.Base(locals[i].Source.Path) < filepath.Base(locals[j].Source.Path)
	})
	for _, l := range locals {
		out = append(out, pluginhost.Spec{ID: localHostID(l.Source.Path), Entry: l.Source.Path})
	}
	return out
}

// packageEntry is an installed package's entry module: package.json's
// exports (".": a path, or its import or default condition), module or
// main, else index.js; it must be a file inside the package.
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
			dot := any(e)
			if d, ok := e["."]; ok {
				dot = d
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
// a loaded location answers without reading the plugins again) and returns
// their statuses in load order; err when no host runs them.
func (m *Manager) load(ctx context.Context, loc Location) ([]pluginhost.Status, error) {
	rt := m.runtime()
	if rt == nil || rt.Host == nil {
		why := "no plugin host"
		if rt != nil && rt.NoHost != "" {
			why = rt.NoHost
		}
		return nil, errors.New(why)
	}
	if st, ok := rt.Host.Loaded(loc.Dir); ok {
		return st, nil
	}
	specs := m.specs(loc.ProjectDir)
	if len(specs) == 0 {
		return nil, nil // no plugin: the host is not started for nothing
	}
	return rt.Host.Load(ctx, loc.Dir, func() pluginhost.LoadInput {
		in := pluginhost.LoadInput{Directory: loc.Dir, Worktree: loc.ProjectDir, Plugins: specs,
			Project: map[string]any{"id": loc.ProjectID, "worktree": loc.ProjectDir}}
		if rt.Auth != nil {
			in.Auth = rt.Auth(loc.Dir)
		}
		if rt.Config != nil {
			in.Config = rt.Config(loc)
		}
		return in
	})
}

// Running lists the inventory as it runs in a location: built-in plugins
// active; a package or local plugin active only when it loaded in the
// plugin host (with its hooks and tools as features), else failed with
// the loader's error and a ref to the server log line that has it.
func (m *Manager) Running(ctx context.Context, loc Location) []Info {
	m = m.self()
	list := m.List(loc.ProjectDir)
	rt := m.runtime()
	loaded, err := m.load(ctx, loc)
	st := make(map[string]pluginhost.Status, len(loaded))
	for _, s := range loaded {
		st[s.ID] = s
	}
	for i := range list {
		info := &list[i]
		var id string
		switch info.Source.Type {
		case "package":
			if info.State.Status != "active" {
				continue // not installed: List says why
			}
			id = packageHostID(info.ID)
		case "local":
			id = localHostID(info.Source.Path)
		default:
			continue
		}
		s, ok := st[id]
		switch {
		case err != nil:
			m.fail(info, err.Error())
		case !ok:
			m.fail(info, "the plugin host did not report on this plugin")
		case !s.OK:
			m.fail(info, s.Error)
		default:
			info.Features = m.features(s, rt)
		}
	}
	shadowed(list)
	return list
}

// sandboxMode is how the plugins run: "enforced" (each location's host
// in its own sandbox) or "off" (plain processes, the operator's choice).
func sandboxMode(rt *Runtime) string {
	mode, _ := rt.Host.Confinement()
	return mode
}

// Confinement is how the plugins run (see pluginhost.Host.Confinement):
// "enforced", "off" or "unavailable" with its reason; "" when no host
// runs them.
func (m *Manager) Confinement() (mode, reason string) {
	rt := m.self().runtime()
	if rt == nil || rt.Host == nil {
		return "", ""
	}
	return rt.Host.Confinement()
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
	m.log.Warn("plugin failed", zap.String("plugin", info.ID), zap.String("ref", ref), zap.String("error", clip(msg)))
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
	loaded, err := m.load(ctx, loc)
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
	rt := m.self().runtime()
	if rt == nil || rt.Host == nil {
		return pluginhost.ToolResult{}, errors.New("no plugin host")
	}
	return rt.Host.Tool(ctx, loc.Dir, loc.ProjectDir, plugin, name, args, tc)
}

// Trigger runs a hook of a location's loaded plugins and returns the
// output they left; a failure (a plugin that throws, a deadline) is logged
// and leaves output as it was.
func (m *Manager) Trigger(ctx context.Context, loc Location, hook string, input, output map[string]any) map[string]any {
	m = m.self()
	rt := m.runtime()
	if rt == nil || rt.Host == nil {
		return output
	}
	if _, err := m.load(ctx, loc); err != nil {
		return output
	}
	out, errs, err := rt.Host.Trigger(ctx, loc.Dir, hook, input, output)
	m.reportHookErrors(hook, errs)
	if err != nil {
		m.log.Warn("plugin hook failed", zap.String("hook", hook), zap.String("error", clip(err.Error())))
		return output
	}
	return out
}

// Event hands an event record to the event hooks of the location it
// belongs to, when that location's plugins are loaded.
func (m *Manager) Event(record []byte) {
	rt := m.self().runtime()
	if rt == nil || rt.Host == nil {
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
		rt.Host.Event(ev.Location.Directory, evs...)
	}
}

// Reload makes every location load its plugins afresh on next use.
func (m *Manager) Reload() {
	m.self().failures.reset()
	if rt := m.self().runtime(); rt != nil && rt.Host != nil {
		rt.Host.Reload()
	}
}

// SetLogger replaces the manager's logger.
func (m *Manager) SetLogger(l *zap.Logger) {
	m = m.self()
	m.mu.Lock()
	m.log = l
	m.mu.Unlock()
}

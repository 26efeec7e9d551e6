package plugins

import (
	"context"
	"encoding/json"
	"sync"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
)

// WiredHooks are the plugin hooks the instance calls (see docs/instance.md,
// "Plugins run").
var WiredHooks = map[string]bool{
	"tool": true, "event": true, "config": true, "dispose": true,
	"chat.message": true, "chat.params": true, "chat.headers": true, "permission.ask": true,
	"tool.execute.before": true, "tool.execute.after": true, "tool.definition": true, "shell.env": true,
	"experimental.chat.messages.transform": true, "experimental.chat.system.transform": true,
	"experimental.text.complete": true, "experimental.session.compacting": true,
	"experimental.compaction.autocontinue": true,
}

// UnusedHooks are the hooks of the released plugin contract this server
// does not call, with why; a plugin that defines one is told so in its
// status (features.unused), never silently.
var UnusedHooks = map[string]string{
	"auth":                              "not used by this server: the gateway holds the provider credentials",
	"provider":                          "not used by this server: the models come from the instance's provider or the workspace's gateway",
	"experimental.provider.small_model": "not used by this server: it has no small model to choose",
	"command.execute.before":            "not used by this server: it does not run commands (/api/command lists them for the clients)",
}

// unusedOf is what a loaded plugin uses that this server does not serve:
// its hooks that are not wired, and what the host reported (a v2 plugin
// object, a tui export, workspace adapters).
func unusedOf(s pluginhost.Status) map[string]string {
	out := map[string]string{}
	for _, h := range s.Hooks {
		if WiredHooks[h] {
			continue
		}
		if why, ok := UnusedHooks[h]; ok {
			out[h] = why
		} else {
			out[h] = "not used by this server: not a hook it knows"
		}
	}
	for k, why := range s.Unused {
		out[k] = "not used by this server: " + why
	}
	return out
}

// hookFailures are the hooks of each plugin that threw or left garbage
// since the plugins loaded: how often, and the last error.
type hookFailures struct {
	mu sync.Mutex
	by map[string]map[string]*HookFailure // host id → hook → failure
}

// HookFailure is how a plugin's hook failed (features.hookErrors).
type HookFailure struct {
	Count int    `json:"count"`
	Error string `json:"error"`
}

func (f *hookFailures) add(plugin, hook, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[string]map[string]*HookFailure{}
	}
	if f.by[plugin] == nil {
		f.by[plugin] = map[string]*HookFailure{}
	}
	h := f.by[plugin][hook]
	if h == nil {
		h = &HookFailure{}
		f.by[plugin][hook] = h
	}
	h.Count++
	h.Error = clip(msg)
}

func (f *hookFailures) of(plugin string) map[string]HookFailure {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.by[plugin]) == 0 {
		return nil
	}
	out := map[string]HookFailure{}
	for k, v := range f.by[plugin] {
		out[k] = *v
	}
	return out
}

func (f *hookFailures) reset() {
	f.mu.Lock()
	f.by = nil
	f.mu.Unlock()
}

// reportHookErrors logs and records the plugins whose hook failed.
func (m *Manager) reportHookErrors(hook string, errs []pluginhost.HookError) {
	for _, e := range errs {
		name := hook
		if e.Tool != "" {
			name = hook + " (" + e.Tool + ")"
		}
		m.failures.add(e.Plugin, hook, e.Error)
		m.log.Warn("plugin hook failed; the step goes on without its change", zap.String("plugin", e.Plugin),
			zap.String("hook", name), zap.String("error", clip(e.Error)))
	}
}

// HookFailed records a hook whose output the instance could not use (the
// plugins' output as a whole, after the host's own checks): it is logged
// and shown on every plugin of the location that has the hook.
func (m *Manager) HookFailed(ctx context.Context, loc Location, hook, msg string) {
	m = m.self()
	_, loaded, _ := m.load(ctx, loc)
	var errs []pluginhost.HookError
	for _, s := range loaded {
		for _, h := range s.Hooks {
			if h == hook {
				errs = append(errs, pluginhost.HookError{Plugin: s.ID, Error: msg})
			}
		}
	}
	m.reportHookErrors(hook, errs)
}

// HasHook reports whether a plugin of a location has a hook.
func (m *Manager) HasHook(ctx context.Context, loc Location, hook string) bool {
	m = m.self()
	if _, _, err := m.load(ctx, loc); err != nil {
		return false
	}
	h := m.currentHost()
	return h != nil && h.HasHook(loc.Dir, hook)
}

// Definitions lets tool.definition change the tools a step offers (their
// descriptions and parameters); a failure leaves them as they were.
func (m *Manager) Definitions(ctx context.Context, loc Location, defs []pluginhost.Definition) []pluginhost.Definition {
	m = m.self()
	if len(defs) == 0 {
		return defs
	}
	if _, _, err := m.load(ctx, loc); err != nil {
		return defs
	}
	h := m.currentHost()
	if h == nil {
		return defs
	}
	out, errs, err := h.Definitions(ctx, loc.Dir, defs)
	m.reportHookErrors("tool.definition", errs)
	if err != nil {
		m.logger().Warn("plugin hook failed", zap.String("hook", "tool.definition"), zap.String("error", clip(err.Error())))
		return defs
	}
	return out
}

// eventsFor is what the event hooks get of one event record: the record
// with its data also as properties (the released server's {id, type,
// properties} events), then its v1 translations (message.updated,
// message.part.updated, session.status …), as the released server's
// plugins see them.
func (m *Manager) eventsFor(record []byte) []json.RawMessage {
	var rec map[string]json.RawMessage
	if json.Unmarshal(record, &rec) != nil {
		return nil
	}
	if d, ok := rec["data"]; ok {
		rec["properties"] = d
	}
	first, err := json.Marshal(rec)
	if err != nil {
		return nil
	}
	out := []json.RawMessage{first}
	m.trMu.Lock()
	if m.tr == nil {
		m.tr = &v1.Translator{}
	}
	evs, _ := m.tr.Translate(record)
	m.trMu.Unlock()
	for _, ev := range evs {
		if b, err := json.Marshal(ev); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// features is an active plugin's features: its hooks and tools, what it
// uses that is not served, and the hooks that failed since it loaded.
func (m *Manager) features(s pluginhost.Status, h *pluginhost.Host) map[string]any {
	f := map[string]any{"server": true, "hooks": nonNil(s.Hooks), "tools": toolNames(s.Tools), "sandbox": sandboxMode(h)}
	if n := h.Network(); n != "" {
		f["network"] = n
	}
	if u := unusedOf(s); len(u) > 0 {
		f["unused"] = u
	}
	if e := m.failures.of(s.ID); len(e) > 0 {
		f["hookErrors"] = e
	}
	return f
}

package loop

import (
	"github.com/agentgate/agentgate/internal/instance/plugins"
	"github.com/agentgate/agentgate/internal/instance/session"
)

// Snapshot is the runner's configuration at one moment: the session
// service it is attached to, the provider, the tools and the plugins that
// a config gave it. A runner outlives config reloads, and a config
// configures it while it is provisioned, before it is known to start: a
// config that fails to start (a reload refused) puts back the snapshot
// taken before it (Restore), so that the running config's instance goes
// on as it was.
type Snapshot struct {
	srv     *session.Service
	prov    ProviderConfig
	tools   ToolConfig
	plugins *plugins.Manager
	gen     uint64
}

// Snapshot returns the runner's configuration now.
func (r *Runner) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Snapshot{srv: r.srv, prov: r.prov, tools: r.tools, plugins: r.plugins, gen: r.cfgGen}
}

// Restore puts prev back when the runner is still configured as mine (no
// configuration changed it since mine was taken), and reports whether it
// did. A config that was replaced by a later one changes nothing, and
// neither does one that had no config before it (prev is attached to no
// session service: the runner goes with that config).
func (r *Runner) Restore(prev, mine Snapshot) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfgGen != mine.gen || r.closed || prev.srv == nil {
		return false
	}
	r.srv, r.prov, r.tools, r.plugins = prev.srv, prev.prov, prev.tools, prev.plugins
	r.cfgGen++
	return true
}

// Package instance is the instance server handler
// (http.handlers.agent_instance): the coding-agent session API that
// OpenCode-style clients speak, over the plain packages of internal/instance.
package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	"github.com/agentgate/agentgate/internal/instance/plugins"
	"github.com/agentgate/agentgate/internal/instance/server"
	"github.com/agentgate/agentgate/internal/instance/snapshot"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/ratelimit"
	"github.com/agentgate/agentgate/internal/sandbox"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/modules/agentgate"
	"github.com/agentgate/agentgate/modules/internal/accesslog"
)

func init() {
	caddy.RegisterModule(new(Instance))
}

// shared keeps what must survive a config reload (pairing codes, event
// subscribers, the counts of failed authentications per client address)
// per instance name.
var shared = caddy.NewUsagePool()

type sharedState struct {
	pairing *server.Pairing
	bus     *events.Bus
	limiter *ratelimit.Limiter // a reload does not forgive a guesser
	runner  *loop.Runner       // session drains: they survive config reloads
}

func (s sharedState) Destruct() error {
	s.runner.Close()
	return nil
}

// Provider configures where session turns go (the Caddyfile "provider"
// block).
type Provider struct {
	// BaseURL of the endpoint, as the format's official SDK takes it:
	// chat posts to <base_url>/chat/completions, responses to
	// <base_url>/responses, anthropic to <base_url>/v1/messages, google to
	// <base_url>/v1beta/models/<model>:streamGenerateContent. Placeholders
	// are replaced.
	BaseURL string `json:"base_url,omitempty"`
	// Connection, when BaseURL is empty, is a gateway connection id of this
	// same server: the base URL is http://<this server's address>/custom/<id>.
	Connection string `json:"connection,omitempty"`
	// APIKey is the workspace key (a placeholder such as
	// {env.AGENTGATE_API_KEY}); it is never logged.
	APIKey string `json:"api_key,omitempty"`
	// Format of the endpoint: chat (default), responses, anthropic, google.
	Format string `json:"format,omitempty"`
	// Model is the model id used when the session and its agent name none.
	Model string `json:"model,omitempty"`
	// InputPrice and OutputPrice, USD per million tokens (decimal strings),
	// price the session's cost; without them a turn costs 0.
	InputPrice  string `json:"input_price,omitempty"`
	OutputPrice string `json:"output_price,omitempty"`
	// Limits are models' token limits by model id: context is the
	// model's context window (the conversation is summarised before a
	// request would pass it), output the most a step may write.
	Limits map[string]ModelLimits `json:"limits,omitempty"`
}

// ModelLimits are a model's token limits.
type ModelLimits struct {
	Context int64 `json:"context,omitempty"`
	Output  int64 `json:"output,omitempty"`
}

func (p *Provider) config(repl *caddy.Replacer) (loop.ProviderConfig, error) {
	c := loop.ProviderConfig{BaseURL: repl.ReplaceAll(p.BaseURL, ""), Connection: repl.ReplaceAll(p.Connection, ""),
		APIKey: repl.ReplaceAll(p.APIKey, ""), Format: p.Format, Model: repl.ReplaceAll(p.Model, "")}
	if c.Format == "" {
		c.Format = "chat"
	}
	for id, l := range p.Limits {
		if l.Context < 0 || l.Output < 0 || (l.Context > 0 && l.Output >= l.Context) {
			return c, fmt.Errorf("provider limits of %q: context and output must be positive, output below context", id)
		}
		if c.Limits == nil {
			c.Limits = map[string]loop.ModelLimits{}
		}
		c.Limits[id] = loop.ModelLimits{Context: l.Context, Output: l.Output}
	}
	if !knownFormat(c.Format) {
		return c, fmt.Errorf("provider format %q is not one of chat, responses, anthropic, google", c.Format)
	}
	if c.BaseURL == "" && c.Connection == "" {
		return c, errors.New("provider needs base_url or connection")
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("provider base_url must be an http(s) URL, got %q", c.BaseURL)
		}
	}
	if p.APIKey != "" && c.APIKey == "" {
		return c, errors.New("provider api_key is set but empty (is its environment variable there?)")
	}
	for _, pr := range []struct {
		name string
		in   string
		out  *money.Micros
	}{{"input_price", p.InputPrice, &c.InputPrice}, {"output_price", p.OutputPrice, &c.OutputPrice}} {
		if pr.in == "" {
			continue
		}
		v, err := money.Parse(pr.in)
		if err == nil {
			err = money.ValidatePrice(pr.name, v)
		}
		if err != nil {
			return c, fmt.Errorf("provider %s: %v", pr.name, err)
		}
		*pr.out = v
	}
	return c, nil
}

// Instance serves the instance API: `/api/…` and `/auth/connect/{code}`.
// Requests for other paths go to the next handler.
//
// Authentication is HTTP Basic with the username (default `opencode`) and
// the password or a pairing token; `?auth_token=` carries the same for
// event-stream clients, and a paired browser's cookie is honoured for
// same-origin requests. Without a password, authentication is off (a
// warning is logged) and only this machine is answered: a loopback peer
// (behind a trusted proxy, a loopback client too) naming a loopback Host.
// Failed authentications are limited per client address as Caddy
// determines it (trusted_proxies honoured). Requests a browser sends for
// another site's page (Sec-Fetch-Site cross-site or same-site, or an
// Origin other than the instance's own and not in cors_origins) are
// refused with 403 before authentication, password or not. No access or
// error log entry of a request that reaches the handler shows its
// `?auth_token=` or the code of `/auth/connect/{code}` (package accesslog).
type Instance struct {
	// Name identifies the instance; pairing codes and event subscribers are
	// kept across config reloads per name. Default: "default".
	Name string `json:"name,omitempty"`

	// Password is the instance password; use a placeholder such as
	// `{env.AGENT_INSTANCE_PASSWORD}`. Empty turns authentication off.
	Password string `json:"password,omitempty"`

	// Username of HTTP Basic. Default: opencode.
	Username string `json:"username,omitempty"`

	// Directory is the default location. Default: the working directory.
	Directory string `json:"directory,omitempty"`

	// AllowedRoots restrict locations to these directories and their
	// descendants (after symlinks resolve). Default: the default location
	// only when it is set; otherwise any directory.
	AllowedRoots []string `json:"allowed_roots,omitempty"`

	// Agents are agent definitions by id, in the shape of an opencode.json
	// "agent" entry (description, mode, model "provider/model", prompt,
	// color, steps, hidden, permission…).
	Agents map[string]json.RawMessage `json:"agents,omitempty"`

	// Plugins are package plugins, as `name@version` targets (a version,
	// a range or a dist-tag). Each is installed with its dependencies in
	// the background at start when it is not installed yet.
	Plugins []string `json:"plugins,omitempty"`

	// Registry is the npm registry URL plugins are installed from: the
	// Caddyfile's plugins, the projects' (their opencode.json(c) "plugin"
	// lists), plugin check and update, and Bun when the plugin host has
	// none. Default: npm's configured registry (the npm_config_registry
	// variable, the user's .npmrc, or `npm config get registry`).
	Registry string `json:"registry,omitempty"`

	// PluginsFromProjects is "allow" (default) or "deny": whether the
	// plugins a project names — the packages of its opencode.json(c)
	// "plugin" list and its plugin files — load. They run in the agent's
	// sandbox, with what it can reach; deny them on a server shared by
	// people who do not trust each other's repositories.
	PluginsFromProjects string `json:"plugins_from_projects,omitempty"`

	// PluginPackages, when set, are the only package names a project may
	// install as plugins: globs as Go's path.Match reads them
	// ("opencode-*", "@acme/*").
	PluginPackages []string `json:"plugin_packages,omitempty"`

	// PluginPackagesDeny are package names (globs) never installed, as a
	// plugin of a project or of the Caddyfile, or as a dependency of one.
	PluginPackagesDeny []string `json:"plugin_packages_deny,omitempty"`

	// PluginInstall bounds plugin installs.
	PluginInstall *PluginInstall `json:"plugin_install,omitempty"`

	// Heartbeat is the event-stream heartbeat interval. Default: 15s.
	Heartbeat caddy.Duration `json:"heartbeat,omitempty"`

	// Workspace makes the instance a member of a workspace of this
	// server, named by id (`wrk_…`, which must exist) or by name (created
	// at start when no workspace has it). The instance runs as a service
	// account of the workspace (`instance <name>`, created at start when
	// missing and shown in the Console as the instance's), and its agent
	// uses the workspace's models through the config's llm_gateway,
	// in-process: no key, and the budgets, policies, rate limits,
	// fallbacks and usage records of any service account, each record
	// naming its agent session. The config fails to load when it has no
	// llm_gateway. Not with Provider.
	Workspace string `json:"workspace,omitempty"`

	// Model is the workspace model that sessions use when neither they
	// nor their agent name one. Default: the first of the workspace's
	// models (by id) that the instance may use. Only with Workspace.
	Model string `json:"model,omitempty"`

	// TitleModel is the model that titles sessions after their first
	// prompt (a small, cheap one): a workspace model id with Workspace, a
	// model of the Provider block's endpoint with Provider. Default: the
	// session's own model. A title agent that names a model uses that.
	TitleModel string `json:"title_model,omitempty"`

	// Provider, when set, makes the instance answer prompts from an
	// endpoint of its own (an outside gateway or a provider): admitted
	// inputs become provider turns, and the agent runs tools. With neither
	// it nor Workspace a prompt is admitted and its turn fails at once
	// with an error message that says to add one.
	Provider *Provider `json:"provider,omitempty"`

	// Permissions are the instance's permission rules for tool calls,
	// after the defaults (bash, webfetch and paths outside the project
	// ask) and before the project's opencode.json, the agent's and the
	// session's; the last matching rule wins, except that a call these
	// rules deny (their own last matching rule denies) stays denied
	// whatever the later rules say.
	Permissions []agents.PermissionRule `json:"permissions,omitempty"`

	// TrustProjectPermissions lets the rules a project ships (the
	// top-level "permission" of its opencode.json(c) and the permission of
	// the agents its opencode.json "agent" map and .opencode/agent(s)/*.md
	// files define) turn the guarded asks into allows: running commands,
	// fetching from the web, touching paths outside the project, and
	// reading or editing files that hold secrets. Default: those rules can
	// only make such calls stricter (an allow into an ask or a deny, an
	// ask into a deny), so that a repository opened in a session cannot
	// grant itself shell access; the session's own rules (set by the
	// client, or by "always" replies) still can.
	TrustProjectPermissions bool `json:"trust_project_permissions,omitempty"`

	// WebfetchPrivate lets the webfetch tool reach loopback, private and
	// link-local addresses. Default: refused.
	WebfetchPrivate bool `json:"webfetch_private,omitempty"`

	// BashTimeout is a command's default time limit (at most 10 minutes).
	// Default: 2 minutes.
	BashTimeout caddy.Duration `json:"bash_timeout,omitempty"`

	// MaxSteps bounds the provider steps of one run when the agent sets no
	// steps. Default: 100.
	MaxSteps int `json:"max_steps,omitempty"`

	// PluginHost configures the process that runs the plugins (Bun).
	// Default: the bun found on PATH, no node_modules.
	PluginHost *PluginHost `json:"plugin_host,omitempty"`

	// Sandbox configures the sandbox that bash commands and the plugin
	// host run in. Default: enforced, with the default limits and no
	// network but the sandbox's own loopback.
	Sandbox *Sandbox `json:"sandbox,omitempty"`

	// Snapshots configures the file snapshots taken around the agent's
	// steps, which reverts put back. Default: on (when git is installed),
	// files up to 2 MiB, 200,000 files and 2 GiB per project.
	Snapshots *Snapshots `json:"snapshots,omitempty"`

	// CORSOrigins are the origins (`scheme://host[:port]`) of web pages
	// allowed to call the instance from a browser: their requests and
	// preflights get CORS headers. Every other page's request, one a
	// browser marks cross-site or same-site or whose Origin is not the
	// instance's own, is refused with 403, reads included. Default: none.
	CORSOrigins []string `json:"cors_origins,omitempty"`

	server    *server.Server
	accessLog *accesslog.Log
	sandbox   *sandbox.Sandbox
	// pluginSandbox is the plugin host's: the sandbox's, or one like it
	// with the network plugin_host names.
	pluginSandbox *sandbox.Sandbox
	runner        *loop.Runner
	logger        *zap.Logger
	key           string
	host          *pluginhost.Host
	plugins       *plugins.Manager
	snaps         *snapshot.Manager
	stopTap       func()
	// undo puts back the runner's configuration from before this config
	// when this config is cleaned up before another configured the runner
	// (a reload that fails to start leaves the running config's in place).
	undo func()
}

// Sandbox configures the sandbox of commands and plugins. Inside it, the
// session's project is writable (its .git/hooks, .git/config,
// opencode.json(c) and .opencode/ read-only, its .env and key files
// masked), the system read-only, /tmp private; the server's data
// directory, configuration, the home directory and every process outside
// are out of reach.
type Sandbox struct {
	// Off runs commands and plugins unconfined, with the server's
	// privileges: GET /api/info and the web app say so.
	Off bool `json:"off,omitempty"`
	// Read are paths bound read-only into every sandbox: language caches
	// (the Go module and build caches), toolchains outside /usr.
	Read []string `json:"read,omitempty"`
	// Write are paths bound read-write into every sandbox (a build cache
	// shared with the agent).
	Write []string `json:"write,omitempty"`
	// Env are variables commands get besides PATH, HOME, TMPDIR, the
	// locale and TERM: a NAME passes the server's value, NAME=value sets
	// one.
	Env []string `json:"env,omitempty"`
	// Network is "none" (default: the sandbox's own loopback only; the
	// host's, and so this server's API, unreachable) or "host" (the
	// host's network, its loopback included).
	Network string `json:"network,omitempty"`
	// Memory bounds everything in one sandbox, in bytes (-1: none;
	// default 4 GiB), where the host's cgroups allow it.
	Memory int64 `json:"memory,omitempty"`
	// Processes bounds the processes of one sandbox (-1: none; default
	// 1024), where the host's cgroups allow it.
	Processes int `json:"processes,omitempty"`
	// CPU bounds the CPU time of each process (-1: none; default 10m).
	CPU caddy.Duration `json:"cpu,omitempty"`
	// Files bounds the open files of each process (-1: the host's;
	// default 4096).
	Files int `json:"files,omitempty"`
	// Unavailable makes the host count as one without namespaces, with
	// this reason (tests of the refusal).
	Unavailable string `json:"unavailable,omitempty"`
}

// config is the sandbox package's configuration of an instance.
func (sb *Sandbox) config(repl *caddy.Replacer, hidden []string) (sandbox.Config, error) {
	if sb == nil {
		sb = &Sandbox{}
	}
	c := sandbox.Config{Off: sb.Off, Hidden: hidden, Unavailable: sb.Unavailable,
		Limits: sandbox.Limits{Memory: sb.Memory, Processes: sb.Processes, CPU: time.Duration(sb.CPU), Files: sb.Files}}
	for _, p := range sb.Read {
		p = repl.ReplaceAll(p, "")
		if !filepath.IsAbs(p) {
			return c, fmt.Errorf("sandbox read %q: an absolute path", p)
		}
		c.ReadOnly = append(c.ReadOnly, p)
	}
	for _, p := range sb.Write {
		p = repl.ReplaceAll(p, "")
		if !filepath.IsAbs(p) {
			return c, fmt.Errorf("sandbox write %q: an absolute path", p)
		}
		if err := sandbox.CheckRoot(p, hidden); err != nil {
			return c, fmt.Errorf("sandbox write: %v", err)
		}
		c.Writable = append(c.Writable, p)
	}
	for _, e := range sb.Env {
		name, _, _ := strings.Cut(e, "=")
		if name == "" || strings.ContainsAny(name, " \t") {
			return c, fmt.Errorf("sandbox env %q: NAME or NAME=value", e)
		}
		c.Env = append(c.Env, repl.ReplaceAll(e, ""))
	}
	switch sb.Network {
	case "", "none":
	case "host":
		c.Network = true
	default:
		return c, fmt.Errorf("sandbox network %q: none or host", sb.Network)
	}
	return c, nil
}

// PluginHost configures the plugin host: the Bun that runs the plugins
// and where their shared packages are.
type PluginHost struct {
	// Bun is the Bun executable (for example the one npm installs with
	// @oven/bun-linux-x64). Default: bun on PATH.
	Bun string `json:"bun,omitempty"`
	// NodeModules is a node_modules directory: imports a plugin cannot
	// resolve from its own directory resolve there, and when it has
	// @opencode-ai/sdk the plugins' client is that SDK's. Default: none
	// (the host's own small @opencode-ai/plugin stands in, and plugins
	// get no client).
	NodeModules string `json:"node_modules,omitempty"`
	// CallTimeout bounds each hook call (default 30s); ToolTimeout a
	// plugin tool's run (default 10m).
	CallTimeout caddy.Duration `json:"call_timeout,omitempty"`
	ToolTimeout caddy.Duration `json:"tool_timeout,omitempty"`
	// Network is the plugins' network, when it differs from the
	// commands' (the sandbox's network): "none" (the sandbox's own
	// loopback) or "host" (the host's network; plugins that report to a
	// service need it while commands may stay off the network). Default:
	// the sandbox's.
	Network string `json:"network,omitempty"`
}

// PluginInstall bounds the installs of plugins from the registry.
type PluginInstall struct {
	// MaxSize bounds what one plugin and its dependencies unpack to, in
	// bytes. Default: 200 MiB.
	MaxSize int64 `json:"max_size,omitempty"`
	// RequestTimeout is how long each registry request may wait for an
	// answer, or for more of one: a registry that hangs fails the
	// install after it. Default: 30s.
	RequestTimeout caddy.Duration `json:"request_timeout,omitempty"`
	// Downloads bounds the registry requests of one install at once.
	// Default: 8.
	Downloads int `json:"downloads,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (*Instance) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.agent_instance", New: func() caddy.Module { return new(Instance) }}
}

// Provision resolves placeholders and builds the server.
func (in *Instance) Provision(ctx caddy.Context) error {
	in.logger = ctx.Logger()
	in.accessLog = accesslog.New(ctx, accesslog.Instance)
	app, err := agentgate.FromContext(ctx)
	if err != nil {
		return fmt.Errorf("loading agentgate app: %v", err)
	}
	if err := in.checkModels(); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	if in.Name == "" {
		in.Name = "default"
	}
	if in.Username == "" {
		in.Username = "opencode"
	}
	password := repl.ReplaceAll(in.Password, "")
	if in.Password != "" && password == "" {
		return errors.New("password is set but empty (is its environment variable or file there?)")
	}
	if password == "" {
		in.logger.Warn("agent_instance has no password: authentication is off")
	}
	dir := repl.ReplaceAll(in.Directory, "")
	if dir != "" && !filepath.IsAbs(dir) {
		return fmt.Errorf("directory must be an absolute path, got %q", dir)
	}
	roots := make([]string, 0, len(in.AllowedRoots))
	for _, r := range in.AllowedRoots {
		r = repl.ReplaceAll(r, "")
		if !filepath.IsAbs(r) {
			return fmt.Errorf("allowed root %q must be an absolute path", r)
		}
		if c, err := filepath.EvalSymlinks(r); err == nil {
			r = c
		}
		roots = append(roots, filepath.Clean(r))
	}
	if len(roots) == 0 && dir != "" {
		// A default directory that does not resolve (yet) still confines
		// locations to itself rather than lifting the restriction.
		c, err := filepath.EvalSymlinks(dir)
		if err != nil {
			c = filepath.Clean(dir)
		}
		roots = append(roots, c)
	}
	// Malformed agent definitions are a config error now, not a 503 on
	// every location later.
	if _, err := agents.Load("", "", in.Agents); err != nil {
		return fmt.Errorf("agents: %v", err)
	}
	// What no command or plugin may reach: the data directory, Caddy's
	// data and configuration directories.
	hidden := []string{app.DataDir(), caddy.AppDataDir(), caddy.AppConfigDir()}
	sbc, err := in.Sandbox.config(repl, hidden)
	if err != nil {
		return err
	}
	in.sandbox = sandbox.New(sbc)
	in.pluginSandbox = in.sandbox
	if ph := in.PluginHost; ph != nil && ph.Network != "" {
		switch ph.Network {
		case "none", "host":
		default:
			return fmt.Errorf("plugin_host network %q: none or host", ph.Network)
		}
		if want := ph.Network == "host"; want != sbc.Network {
			pc := sbc
			pc.Network = want
			in.pluginSandbox = sandbox.New(pc)
		}
	}
	in.logSandbox()
	in.key = in.Name
	val, _, err := shared.LoadOrNew(in.key, func() (caddy.Destructor, error) {
		return sharedState{pairing: server.NewPairing(clock.Real{}), bus: events.NewBus(0, clock.Real{}),
			limiter: server.NewAuthLimiter(clock.Real{}), runner: loop.NewRunner()}, nil
	})
	if err != nil {
		return err
	}
	st := val.(sharedState)
	prev := st.runner.Snapshot()
	defer func() {
		// Whatever this config set on the runner, successful or not.
		mine := st.runner.Snapshot()
		in.undo = func() { st.runner.Restore(prev, mine) }
	}()
	// The drains run with or without a provider: without one, each turn
	// fails at once with an error message that says how to configure it,
	// and the session goes idle (a later prompt uses the provider a reload
	// brings).
	var pc loop.ProviderConfig
	switch {
	case in.Workspace != "":
		ws := repl.ReplaceAll(in.Workspace, "")
		if ws == "" {
			err = errors.New("workspace is set but empty (is its environment variable there?)")
		} else if err = app.RegisterInstance(in.Name, ws); err == nil {
			pc = loop.ProviderConfig{Workspace: newMemberWorkspace(app, in.Name), Model: repl.ReplaceAll(in.Model, "")}
		}
	case in.Provider != nil:
		pc, err = in.Provider.config(repl)
	}
	pc.TitleModel = repl.ReplaceAll(in.TitleModel, "")
	if err != nil {
		shared.Delete(in.key)
		in.key = ""
		return err
	}
	runner := st.runner
	runner.SetProvider(pc)
	runner.SetTools(loop.ToolConfig{Rules: in.Permissions, TrustProjectPermissions: in.TrustProjectPermissions, Roots: roots, FetchPrivate: in.WebfetchPrivate,
		BashTimeout: time.Duration(in.BashTimeout), MaxSteps: in.MaxSteps, Sandbox: in.sandbox,
		Secrets: func() []string { return append([]string{password}, app.SecretValues()...) }})
	in.runner = runner
	inst := in.PluginInstall
	if inst == nil {
		inst = &PluginInstall{}
	}
	pm, err := plugins.New(plugins.Options{
		Targets: in.Plugins, Registry: repl.ReplaceAll(in.Registry, ""),
		RegistryFallback: func() (string, error) { return plugins.NPMRegistry(context.Background()) },
		Dir:              filepath.Join(app.DataDir(), "plugins", in.Name), Logger: in.logger.Named("plugins"),
		Policy:      plugins.Policy{DenyProjects: in.PluginsFromProjects == "deny", Allow: in.PluginPackages, Deny: in.PluginPackagesDeny},
		MaxTreeSize: inst.MaxSize, RequestTimeout: time.Duration(inst.RequestTimeout), Downloads: inst.Downloads,
	})
	if err != nil {
		shared.Delete(in.key)
		in.key = ""
		return err
	}
	in.snaps = in.snapshots(app)
	opts := server.Options{
		Auth:    &server.Auth{Username: in.Username, Password: password, Clock: clock.Real{}},
		Pairing: st.pairing, Bus: st.bus, Limiter: st.limiter, ClientIP: agentgate.ClientIP,
		TrustedProxy: agentgate.TrustedProxy, CORSOrigins: in.CORSOrigins,
		DefaultDirectory: dir, AllowedRoots: roots, Agents: in.Agents,
		Plugins: pm, Version: caddy.CustomVersion, Heartbeat: time.Duration(in.Heartbeat), Logger: in.logger,
		Instance: in.Name, Sandbox: in.sandbox, Snapshots: in.snaps,
		Store: func(ctx context.Context) (store.Store, error) {
			svc, err := app.Service(ctx)
			if err != nil {
				return nil, err
			}
			return svc.Store, nil
		},
	}
	opts.Runner = runner
	in.server = server.New(opts)
	in.plugins = pm
	rt, err := in.pluginRuntime(app, repl, pm)
	if err != nil {
		shared.Delete(in.key)
		in.key = ""
		return err
	}
	pm.SetRuntime(rt)
	runner.SetPlugins(pm)
	in.stopTap = st.bus.Tap(pm.Event)
	pm.InstallConfigured()
	return nil
}

// logSandbox says at start what confines commands and plugins, or that
// nothing does.
func (in *Instance) logSandbox() {
	st := in.sandbox.Status()
	switch st.Mode {
	case "enforced":
		fields := []zap.Field{zap.Strings("layers", st.Layers), zap.String("network", st.Network)}
		for k, v := range st.Limits {
			fields = append(fields, zap.String("limit_"+k, v))
		}
		in.logger.Info("commands and plugins run in a sandbox", fields...)
	case "off":
		in.logger.Warn("the sandbox is off: commands and plugins run with the server's privileges", zap.String("reason", st.Reason))
	default:
		in.logger.Error("no sandbox can be made on this host: bash and plugins are refused (write `sandbox off` to run them unconfined)",
			zap.String("reason", st.Reason))
	}
}

// pluginRuntime makes what runs the plugins: a process per location in
// the instance's sandbox (with the sandbox off, plain processes with the
// environment a command gets: an allow-list, never the server's own), its
// files in a private directory under the data directory. Bun is the
// configured one, else the one on PATH, else the pinned build the server
// installs from the registry the first time a location has plugins to
// load (into plugin-runtime/ in the data directory); the shared modules
// are the configured node_modules, else the pinned runtime modules
// installed the same way (the SDK whose client the plugins get). The
// plugins' client talks to this instance's handler over the host's
// stdio with a token scoped to its location: no instance credential
// reaches a plugin.
func (in *Instance) pluginRuntime(app *agentgate.App, repl *caddy.Replacer, pm *plugins.Manager) (*plugins.Runtime, error) {
	cfg := in.PluginHost
	if cfg == nil {
		cfg = &PluginHost{}
	}
	bun := repl.ReplaceAll(cfg.Bun, "")
	modules := repl.ReplaceAll(cfg.NodeModules, "")
	if bun == "" {
		if p, err := exec.LookPath("bun"); err == nil {
			bun = p
		}
	}
	newHost := func(bun, modules string) (*pluginhost.Host, error) {
		h, err := pluginhost.New(pluginhost.Options{Bun: bun, Modules: modules,
			Dir:     filepath.Join(app.DataDir(), "plugin-host", in.Name),
			Sandbox: in.pluginSandbox, Handler: in.server,
			CallTimeout: time.Duration(cfg.CallTimeout), ToolTimeout: time.Duration(cfg.ToolTimeout), Logger: in.logger.Named("plugins")})
		if err != nil {
			return nil, fmt.Errorf("plugin host: %v", err)
		}
		return h, nil
	}
	rt := &plugins.Runtime{
		Auth: func(dir string) string { return "Bearer " + server.ScopedToken(dir, server.TokenTTL) },
		Config: func(loc plugins.Location) any {
			return map[string]any{"agent": in.Agents, "plugin": in.Plugins, "directory": loc.Dir}
		},
	}
	if bun != "" && modules != "" {
		host, err := newHost(bun, modules)
		if err != nil {
			return nil, err
		}
		in.host, rt.Host = host, host
		return rt, nil
	}
	runtimeDir := filepath.Join(app.DataDir(), "plugin-runtime")
	log := in.logger.Named("plugins")
	rt.Start = func(ctx context.Context) (*pluginhost.Host, error) {
		b := bun
		if b == "" {
			log.Info("no Bun is configured or on PATH: installing the pinned Bun from the registry", zap.String("version", plugins.BunVersion))
			exe, err := pm.InstallBun(ctx, runtimeDir)
			if err != nil {
				return nil, fmt.Errorf("no plugin host: Bun is not configured (plugin_host { bun <path> }) nor on PATH, and %v", err)
			}
			b = exe
		}
		mods := modules
		if mods == "" {
			dir, err := pm.InstallRuntimeModules(ctx, runtimeDir)
			if err != nil {
				log.Warn("plugins run without the SDK client and zod (configure plugin_host { node_modules <dir> })", zap.Error(err))
			} else {
				mods = dir
			}
		}
		return newHost(b, mods)
	}
	return rt, nil
}

// checkModels checks where the models come from: a workspace or a
// provider block, not both; a default model only with a workspace.
func (in *Instance) checkModels() error {
	switch {
	case in.Workspace != "" && in.Provider != nil:
		return errors.New("agent_instance takes `workspace` or a `provider` block, not both: `workspace` uses the workspace's models " +
			"through this server's gateway, `provider` an endpoint of its own")
	case in.Model != "" && in.Workspace == "":
		return errors.New("agent_instance `model` is the default workspace model and needs `workspace` (a `provider` block sets its own model)")
	case in.TitleModel != "" && in.Workspace == "" && in.Provider == nil:
		return errors.New("agent_instance `title_model` names a model of the instance's models and needs `workspace` or a `provider` block")
	}
	return nil
}

// Validate checks the configuration.
func (in *Instance) Validate() error {
	if err := in.checkModels(); err != nil {
		return err
	}
	for i, r := range in.Permissions {
		if r.Action == "" || r.Resource == "" || (r.Effect != "allow" && r.Effect != "deny" && r.Effect != "ask") {
			return fmt.Errorf("permissions[%d] needs an action, a resource and an effect of allow, deny or ask", i)
		}
	}
	if in.MaxSteps < 0 || in.BashTimeout < 0 || time.Duration(in.BashTimeout) > 10*time.Minute {
		return errors.New("max_steps must not be negative and bash_timeout must be between 0 and 10m")
	}
	if in.Directory != "" && !strings.Contains(in.Directory, "{") && !filepath.IsAbs(in.Directory) {
		return fmt.Errorf("directory must be an absolute path, got %q", in.Directory)
	}
	for _, o := range in.CORSOrigins {
		if _, err := server.NormalizeOrigin(o); err != nil {
			return fmt.Errorf("cors_origins: %q is not an origin: %v", o, err)
		}
	}
	switch in.PluginsFromProjects {
	case "", "allow", "deny":
	default:
		return fmt.Errorf("plugins_from_projects must be allow or deny, not %q", in.PluginsFromProjects)
	}
	if err := (plugins.Policy{Allow: in.PluginPackages, Deny: in.PluginPackagesDeny}).Validate(); err != nil {
		return err
	}
	if pi := in.PluginInstall; pi != nil && (pi.MaxSize < 0 || pi.RequestTimeout < 0 || pi.Downloads < 0) {
		return errors.New("plugin_install limits must not be negative")
	}
	return nil
}

// ServeHTTP serves the instance routes and passes other paths on.
func (in *Instance) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if taken, err := in.accessLog.Serve(w, r, in, next); taken {
		return err // logged without ?auth_token= or the pairing code (package accesslog)
	}
	if !server.Handles(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	if in.runner != nil {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			in.runner.LearnAddr(a.String())
		}
	}
	in.server.ServeHTTP(w, r)
	return nil
}

// Cleanup releases the shared state of this config.
func (in *Instance) Cleanup() error {
	if in.undo != nil {
		in.undo()
		in.undo = nil
	}
	if in.stopTap != nil {
		in.stopTap()
	}
	if in.host != nil {
		in.host.Close()
	}
	in.snaps.Close()
	if in.plugins != nil {
		in.plugins.Close()
	}
	if in.key != "" {
		_, err := shared.Delete(in.key)
		in.key = ""
		return err
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Instance)(nil)
	_ caddy.Validator             = (*Instance)(nil)
	_ caddy.CleanerUpper          = (*Instance)(nil)
	_ caddyhttp.MiddlewareHandler = (*Instance)(nil)
)

package instance

import (
	"encoding/json"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/server"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("agent_instance", parseCaddyfile)
	// Before reverse_proxy, like llm_gateway: it answers /api/… and
	// /auth/connect/… and passes other paths on.
	httpcaddyfile.RegisterDirectiveOrder("agent_instance", httpcaddyfile.Before, "reverse_proxy")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	in := new(Instance)
	err := in.UnmarshalCaddyfile(h.Dispenser)
	return in, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	agent_instance {
//		name <instance name>
//		password <password or placeholder>
//		username <basic username>
//		directory <default location>
//		allow_root <directories...>
//		cors_origins <origins...>
//		plugin <name@version...>
//		registry <npm registry url>
//		plugins_from_projects allow|deny
//		plugin_packages <glob...>
//		plugin_packages_deny <glob...>
//		plugin_install {
//			max_size <size>
//			request_timeout <duration>
//			downloads <n>
//		}
//		plugin_host {
//			bun <path to bun>
//			node_modules <directory>
//			call_timeout <duration>
//			tool_timeout <duration>
//			network none|host
//		}
//		sandbox off
//		sandbox {
//			read <paths...>
//			write <paths...>
//			env <NAME|NAME=value...>
//			network none|host
//			memory <size>|none
//			processes <n>|none
//			cpu <duration>|none
//			files <n>|none
//		}
//		heartbeat <duration>
//		permission <action> <pattern> allow|deny|ask
//		trust_project_permissions
//		webfetch_private
//		bash_timeout <duration>
//		max_steps <n>
//		workspace <id or name>
//		model <workspace model id>
//		title_model <model id>
//		provider {
//			base_url <url> | connection <id>
//			api_key <key>
//			format chat|responses|anthropic|google
//			model <id>
//			input_price <usd per million>
//			output_price <usd per million>
//			context_limit [<model>] <tokens>
//			output_limit [<model>] <tokens>
//		}
//		agent <id> {
//			description <text>
//			mode primary|subagent|all
//			model <provider/model>
//			prompt <system prompt>
//			color <color>
//			steps <n>
//			hidden
//		}
//	}
func (in *Instance) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "name":
			if !d.AllArgs(&in.Name) {
				return d.ArgErr()
			}
		case "password":
			if !d.AllArgs(&in.Password) {
				return d.ArgErr()
			}
		case "username":
			if !d.AllArgs(&in.Username) {
				return d.ArgErr()
			}
		case "directory":
			if !d.AllArgs(&in.Directory) {
				return d.ArgErr()
			}
		case "allow_root":
			roots := d.RemainingArgs()
			if len(roots) == 0 {
				return d.ArgErr()
			}
			in.AllowedRoots = append(in.AllowedRoots, roots...)
		case "cors_origins":
			origins := d.RemainingArgs()
			if len(origins) == 0 {
				return d.ArgErr()
			}
			for _, o := range origins {
				if _, err := server.NormalizeOrigin(o); err != nil {
					return d.Errf("cors_origins: '%s' is not an origin (scheme://host[:port]): %v", o, err)
				}
			}
			in.CORSOrigins = append(in.CORSOrigins, origins...)
		case "plugin":
			ps := d.RemainingArgs()
			if len(ps) == 0 {
				return d.ArgErr()
			}
			in.Plugins = append(in.Plugins, ps...)
		case "registry":
			if !d.AllArgs(&in.Registry) {
				return d.ArgErr()
			}
		case "plugins_from_projects":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			if v != "allow" && v != "deny" {
				return d.Errf("plugins_from_projects must be allow or deny, not '%s'", v)
			}
			in.PluginsFromProjects = v
		case "plugin_packages", "plugin_packages_deny":
			key := d.Val()
			pats := d.RemainingArgs()
			if len(pats) == 0 {
				return d.ArgErr()
			}
			for _, p := range pats {
				if _, err := path.Match(p, ""); err != nil {
					return d.Errf("%s: '%s' is not a valid glob: %v", key, p, err)
				}
			}
			if key == "plugin_packages" {
				in.PluginPackages = append(in.PluginPackages, pats...)
			} else {
				in.PluginPackagesDeny = append(in.PluginPackagesDeny, pats...)
			}
		case "plugin_install":
			if err := in.unmarshalPluginInstall(d); err != nil {
				return err
			}
		case "heartbeat":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil {
				return d.Errf("heartbeat: %v", err)
			}
			in.Heartbeat = caddy.Duration(dur)
		case "permission":
			var action, pattern, effect string
			if !d.AllArgs(&action, &pattern, &effect) {
				return d.ArgErr()
			}
			if effect != "allow" && effect != "deny" && effect != "ask" {
				return d.Errf("permission effect must be allow, deny or ask, not '%s'", effect)
			}
			in.Permissions = append(in.Permissions, agents.PermissionRule{Action: action, Resource: pattern, Effect: effect})
		case "trust_project_permissions":
			if d.NextArg() {
				return d.ArgErr()
			}
			in.TrustProjectPermissions = true
		case "webfetch_private":
			if d.NextArg() {
				return d.ArgErr()
			}
			in.WebfetchPrivate = true
		case "bash_timeout":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil || dur <= 0 {
				return d.Errf("bash_timeout must be a positive duration, not '%s'", s)
			}
			in.BashTimeout = caddy.Duration(dur)
		case "max_steps":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return d.Errf("max_steps must be a positive whole number, not '%s'", s)
			}
			in.MaxSteps = n
		case "sandbox":
			if err := in.unmarshalSandbox(d); err != nil {
				return err
			}
		case "snapshots":
			if err := in.unmarshalSnapshots(d); err != nil {
				return err
			}
		case "plugin_host":
			if d.NextArg() {
				return d.ArgErr()
			}
			if in.PluginHost != nil {
				return d.Err("plugin_host is declared twice")
			}
			in.PluginHost = &PluginHost{}
			for n := d.Nesting(); d.NextBlock(n); {
				key := d.Val()
				var v string
				if !d.AllArgs(&v) {
					return d.ArgErr()
				}
				switch key {
				case "bun":
					in.PluginHost.Bun = v
				case "node_modules":
					in.PluginHost.NodeModules = v
				case "network":
					if v != "none" && v != "host" {
						return d.Errf("plugin_host network: none or host, got %q", v)
					}
					in.PluginHost.Network = v
				case "call_timeout", "tool_timeout":
					dur, err := caddy.ParseDuration(v)
					if err != nil || dur <= 0 {
						return d.Errf("%s: a positive duration, got %q", key, v)
					}
					if key == "call_timeout" {
						in.PluginHost.CallTimeout = caddy.Duration(dur)
					} else {
						in.PluginHost.ToolTimeout = caddy.Duration(dur)
					}
				default:
					return d.Errf("unknown plugin_host option %q", key)
				}
			}
		case "workspace":
			if !d.AllArgs(&in.Workspace) {
				return d.ArgErr()
			}
		case "model":
			if !d.AllArgs(&in.Model) {
				return d.ArgErr()
			}
		case "title_model":
			if !d.AllArgs(&in.TitleModel) {
				return d.ArgErr()
			}
		case "provider":
			if d.NextArg() {
				return d.ArgErr()
			}
			if in.Provider != nil {
				return d.Err("provider is declared twice")
			}
			in.Provider = &Provider{}
			for n := d.Nesting(); d.NextBlock(n); {
				key := d.Val()
				if key == "context_limit" || key == "output_limit" {
					if err := parseLimit(d, in.Provider, key); err != nil {
						return err
					}
					continue
				}
				var v string
				if !d.AllArgs(&v) {
					return d.ArgErr()
				}
				switch key {
				case "base_url":
					in.Provider.BaseURL = v
				case "connection":
					in.Provider.Connection = v
				case "api_key":
					in.Provider.APIKey = v
				case "format":
					if !knownFormat(v) {
						return d.Errf("provider format must be chat, responses, anthropic or google, not '%s'", v)
					}
					in.Provider.Format = v
				case "model":
					in.Provider.Model = v
				case "input_price":
					in.Provider.InputPrice = v
				case "output_price":
					in.Provider.OutputPrice = v
				default:
					return d.Errf("unrecognized provider subdirective '%s'", key)
				}
			}
		case "agent":
			id, def, err := parseAgent(d)
			if err != nil {
				return err
			}
			if in.Agents == nil {
				in.Agents = map[string]json.RawMessage{}
			}
			if _, dup := in.Agents[id]; dup {
				return d.Errf("agent '%s' is declared twice", id)
			}
			in.Agents[id] = def
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	if err := in.checkModels(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// parseLimit reads `context_limit|output_limit [<model>] <tokens>`; without
// a model it is the provider's default model's.
func parseLimit(d *caddyfile.Dispenser, p *Provider, key string) error {
	args := d.RemainingArgs()
	model := p.Model
	switch len(args) {
	case 1:
		if model == "" {
			return d.Errf("%s without a model needs the provider's model set before it", key)
		}
	case 2:
		model = args[0]
		args = args[1:]
	default:
		return d.ArgErr()
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n < 1 {
		return d.Errf("%s must be a positive number of tokens, not '%s'", key, args[0])
	}
	if p.Limits == nil {
		p.Limits = map[string]ModelLimits{}
	}
	l := p.Limits[model]
	if key == "context_limit" {
		l.Context = n
	} else {
		l.Output = n
	}
	p.Limits[model] = l
	return nil
}

func parseAgent(d *caddyfile.Dispenser) (string, json.RawMessage, error) {
	var id string
	if !d.AllArgs(&id) {
		return "", nil, d.ArgErr()
	}
	def := map[string]any{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		switch key {
		case "description", "mode", "model", "prompt", "color":
			var v string
			if !d.AllArgs(&v) {
				return "", nil, d.ArgErr()
			}
			if key == "mode" && v != "primary" && v != "subagent" && v != "all" {
				return "", nil, d.Errf("agent mode must be primary, subagent or all, not '%s'", v)
			}
			def[key] = v
		case "steps":
			var v string
			if !d.AllArgs(&v) {
				return "", nil, d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "", nil, d.Errf("agent steps must be a positive whole number, not '%s'", v)
			}
			def["steps"] = n
		case "hidden":
			if d.NextArg() {
				return "", nil, d.ArgErr()
			}
			def["hidden"] = true
		default:
			return "", nil, d.Errf("unrecognized agent subdirective '%s'", key)
		}
	}
	b, err := json.Marshal(def)
	return id, b, err
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Instance)(nil)

// knownFormat reports whether turns can be made in a provider format.
func knownFormat(name string) bool {
	_, ok := formats.Named(name)
	return ok
}

// unmarshalPluginInstall reads a plugin_install block (max_size,
// request_timeout, downloads).
func (in *Instance) unmarshalPluginInstall(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	if in.PluginInstall != nil {
		return d.Err("plugin_install is declared twice")
	}
	in.PluginInstall = &PluginInstall{}
	for n := d.Nesting(); d.NextBlock(n); {
		key := d.Val()
		var v string
		if !d.AllArgs(&v) {
			return d.ArgErr()
		}
		switch key {
		case "max_size":
			b, err := humanize.ParseBytes(v)
			if err != nil || b == 0 || b > 1<<40 {
				return d.Errf("max_size: a size such as 200MiB, got '%s'", v)
			}
			in.PluginInstall.MaxSize = int64(b)
		case "request_timeout":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return d.Errf("request_timeout: a positive duration, got '%s'", v)
			}
			in.PluginInstall.RequestTimeout = caddy.Duration(dur)
		case "downloads":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 64 {
				return d.Errf("downloads: a whole number from 1 to 64, got '%s'", v)
			}
			in.PluginInstall.Downloads = n
		default:
			return d.Errf("unknown plugin_install option '%s'", key)
		}
	}
	return nil
}

// unmarshalSandbox reads `sandbox off` or a sandbox block.
func (in *Instance) unmarshalSandbox(d *caddyfile.Dispenser) error {
	if in.Sandbox != nil {
		return d.Err("sandbox is declared twice")
	}
	in.Sandbox = &Sandbox{}
	if d.NextArg() {
		if d.Val() != "off" || d.NextArg() {
			return d.Errf("sandbox takes `off` or a block, not %q", d.Val())
		}
		in.Sandbox.Off = true
		return nil
	}
	for n := d.Nesting(); d.NextBlock(n); {
		key := d.Val()
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.ArgErr()
		}
		one := func() (string, error) {
			if len(args) != 1 {
				return "", d.Errf("sandbox %s takes one value", key)
			}
			return args[0], nil
		}
		switch key {
		case "read":
			in.Sandbox.Read = append(in.Sandbox.Read, args...)
		case "write":
			in.Sandbox.Write = append(in.Sandbox.Write, args...)
		case "env":
			in.Sandbox.Env = append(in.Sandbox.Env, args...)
		case "network":
			v, err := one()
			if err != nil {
				return err
			}
			if v != "none" && v != "host" {
				return d.Errf("sandbox network: none or host, got %q", v)
			}
			in.Sandbox.Network = v
		case "memory":
			v, err := one()
			if err != nil {
				return err
			}
			if v == "none" {
				in.Sandbox.Memory = -1
				continue
			}
			b, err := humanize.ParseBytes(v)
			if err != nil || b == 0 || b > 1<<50 {
				return d.Errf("sandbox memory: a size such as 4GiB, or none; got %q", v)
			}
			in.Sandbox.Memory = int64(b)
		case "processes", "files":
			v, err := one()
			if err != nil {
				return err
			}
			n := -1
			if v != "none" {
				if n, err = strconv.Atoi(v); err != nil || n <= 0 {
					return d.Errf("sandbox %s: a positive number, or none; got %q", key, v)
				}
			}
			if key == "processes" {
				in.Sandbox.Processes = n
			} else {
				in.Sandbox.Files = n
			}
		case "cpu":
			v, err := one()
			if err != nil {
				return err
			}
			if v == "none" {
				in.Sandbox.CPU = -1
				continue
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur < time.Second {
				return d.Errf("sandbox cpu: a duration of a second or more, or none; got %q", v)
			}
			in.Sandbox.CPU = caddy.Duration(dur)
		case "unavailable":
			in.Sandbox.Unavailable = strings.Join(args, " ")
		default:
			return d.Errf("unknown sandbox option %q", key)
		}
	}
	return nil
}

package agentgate

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("agentgate", parseGlobalOption)
}

func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "agentgate", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the app from the `agentgate` global option:
//
//	agentgate {
//		storage badger [<dir>]
//		storage postgres <dsn placeholder>
//		master_key <key or placeholder>
//		start_timeout <duration>
//		access_token_ttl <duration>
//		connection <conn_id> {
//			workspace <wrk_id or name>
//			name <display name>
//			kind openai|anthropic|google|openai-compatible
//			base_url <url>
//			credential <placeholder>
//			header <name> <value>
//			model <model_id> [{
//				name <display name>
//				upstream_id <provider model id>
//				max_output_tokens <n>
//				limit [context <tokens>] [output <tokens>]
//				tool_call|reasoning|attachment|temperature [true|false]
//				modalities input|output <text|image|audio|video|pdf...>
//				disabled
//				pricing [input <usd> output <usd> ...] [{
//					input <usd>
//					output <usd>
//					cache_read <usd>
//					cache_write <usd>
//					reasoning <usd>
//				}]
//			}]
//		}
//		policy <pol_id> {
//			workspace <wrk_id or name>
//			name <display name>
//			effect allow|deny|limit
//			models <glob...>
//			roles owner|admin|member...
//			service_accounts <sa_id...>
//			keys <key_id...>
//			per key|member|workspace
//			requests_per_minute <n>
//			tokens_per_minute <n>
//		}
//		claude_code_settings <wrk_id or name> <JSON document>
//	}
//
// Prices are USD per million tokens. A model is enabled unless `disabled`.
// `limit output` is `max_output_tokens`; the limits, capabilities and
// modalities are what clients are configured with (defaults: context
// 128000, output 8192, tool calls and temperature, text in and out).
//
// `claude_code_settings` declares a workspace's Claude Code settings
// document (read-only in the Console): one JSON object, in a heredoc
// (<<JSON … JSON) or backquotes.
//
// `storage postgres` keeps the state in a PostgreSQL database that several
// agentgate nodes share; give the DSN (which may carry a password) as a
// placeholder such as `{env.AGENTGATE_POSTGRES_DSN}`. It requires
// `master_key`, the same on every node.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "storage":
			if !d.NextArg() {
				return d.ArgErr()
			}
			switch d.Val() {
			case "badger":
				a.Storage = &StorageConfig{Backend: "badger"}
				if d.NextArg() {
					a.Storage.Path = d.Val()
				}
			case "postgres":
				a.Storage = &StorageConfig{Backend: "postgres"}
				if !d.NextArg() {
					return d.Errf("storage postgres needs a DSN, e.g. {env.AGENTGATE_POSTGRES_DSN}")
				}
				a.Storage.DSN = d.Val()
			default:
				return d.Errf("unknown storage backend '%s' (available: badger, postgres)", d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		case "master_key":
			if !d.AllArgs(&a.MasterKey) {
				return d.ArgErr()
			}
		case "start_timeout":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil {
				return d.Errf("start_timeout: %v", err)
			}
			a.StartTimeout = caddy.Duration(dur)
		case "access_token_ttl":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil {
				return d.Errf("access_token_ttl: %v", err)
			}
			a.AccessTokenTTL = caddy.Duration(dur)
		case "connection":
			dc, err := parseConnection(d)
			if err != nil {
				return err
			}
			a.Connections = append(a.Connections, dc)
		case "policy":
			dp, err := parsePolicy(d)
			if err != nil {
				return err
			}
			a.Policies = append(a.Policies, dp)
		case "claude_code_settings":
			var ws, doc string
			if !d.AllArgs(&ws, &doc) {
				return d.Errf("claude_code_settings needs a workspace and a JSON document (a heredoc or backquotes)")
			}
			if !json.Valid([]byte(doc)) {
				return d.Errf("claude_code_settings of %s: the document is not valid JSON", ws)
			}
			a.ClaudeCodeSettings = append(a.ClaudeCodeSettings, &DeclaredClaudeCodeSettings{Workspace: ws, Settings: json.RawMessage(doc)})
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	return nil
}

// parsePolicy reads a `policy <pol_id> { … }` block.
func parsePolicy(d *caddyfile.Dispenser) (*DeclaredPolicy, error) {
	dp := new(DeclaredPolicy)
	if !d.AllArgs(&dp.ID) {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		switch key {
		case "workspace", "name", "effect", "per":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			*map[string]*string{"workspace": &dp.Workspace, "name": &dp.Name, "effect": &dp.Effect, "per": &dp.Per}[key] = v
		case "models", "roles", "service_accounts", "keys":
			vs := d.RemainingArgs()
			if len(vs) == 0 {
				return nil, d.ArgErr()
			}
			dst := map[string]*[]string{"models": &dp.Models, "roles": &dp.Roles, "service_accounts": &dp.ServiceAccounts, "keys": &dp.Keys}[key]
			*dst = append(*dst, vs...)
		case "requests_per_minute", "tokens_per_minute":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return nil, d.Errf("%s must be a positive whole number, not '%s'", key, v)
			}
			*map[string]*int64{"requests_per_minute": &dp.RequestsPerMinute, "tokens_per_minute": &dp.TokensPerMinute}[key] = n
		default:
			return nil, d.Errf("unrecognized policy subdirective '%s'", key)
		}
	}
	if dp.Workspace == "" || dp.Effect == "" {
		return nil, d.Errf("policy %s needs workspace and effect", dp.ID)
	}
	if dp.Name == "" {
		dp.Name = dp.ID
	}
	return dp, nil
}

func parseConnection(d *caddyfile.Dispenser) (*DeclaredConnection, error) {
	dc := &DeclaredConnection{}
	if !d.AllArgs(&dc.ID) {
		return nil, d.ArgErr()
	}
	if !service.ValidConnectionID(dc.ID) {
		return nil, d.Errf("connection id '%s' must match conn_[A-Za-z0-9_-]{1,48}", dc.ID)
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		switch key {
		case "workspace", "name", "kind", "base_url", "credential":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			switch key {
			case "workspace":
				dc.Workspace = v
			case "name":
				dc.Name = v
			case "kind":
				if !store.ValidKind(v) {
					return nil, d.Errf("kind must be openai, anthropic, google or openai-compatible, not '%s'", v)
				}
				dc.Kind = v
			case "base_url":
				dc.BaseURL = v
			case "credential":
				dc.Credential = v
			}
		case "header":
			var name, value string
			if !d.AllArgs(&name, &value) {
				return nil, d.ArgErr()
			}
			if dc.Headers == nil {
				dc.Headers = map[string]string{}
			}
			dc.Headers[name] = value
		case "model":
			id, m, err := parseModel(d)
			if err != nil {
				return nil, err
			}
			if dc.Models == nil {
				dc.Models = map[string]service.ModelInput{}
			}
			if _, dup := dc.Models[id]; dup {
				return nil, d.Errf("model '%s' is declared twice", id)
			}
			dc.Models[id] = m
		default:
			return nil, d.Errf("unrecognized connection subdirective '%s'", key)
		}
	}
	if dc.Workspace == "" || dc.Kind == "" || dc.BaseURL == "" || dc.Credential == "" {
		return nil, d.Errf("connection %s needs workspace, kind, base_url and credential", dc.ID)
	}
	return dc, nil
}

func parseModel(d *caddyfile.Dispenser) (string, service.ModelInput, error) {
	var m service.ModelInput
	var id string
	if !d.AllArgs(&id) {
		return "", m, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "name":
			if !d.AllArgs(&m.Name) {
				return "", m, d.ArgErr()
			}
		case "upstream_id":
			if !d.AllArgs(&m.UpstreamID) {
				return "", m, d.ArgErr()
			}
		case "max_output_tokens":
			var s string
			if !d.AllArgs(&s) {
				return "", m, d.ArgErr()
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 1 {
				return "", m, d.Errf("max_output_tokens must be a positive whole number, not '%s'", s)
			}
			m.MaxOutputTokens = &n
		case "disabled":
			if d.NextArg() {
				return "", m, d.ArgErr()
			}
			f := false
			m.Enabled = &f
		case "limit":
			args := d.RemainingArgs()
			if len(args) == 0 || len(args)%2 != 0 {
				return "", m, d.Errf("limit takes pairs: limit context <tokens> output <tokens>")
			}
			if m.Limit == nil {
				m.Limit = &service.LimitInput{}
			}
			for i := 0; i < len(args); i += 2 {
				n, err := strconv.ParseInt(args[i+1], 10, 64)
				if err != nil || n < 1 {
					return "", m, d.Errf("limit %s must be a positive whole number, not '%s'", args[i], args[i+1])
				}
				switch args[i] {
				case "context":
					m.Limit.Context = &n
				case "output":
					m.Limit.Output = &n
				default:
					return "", m, d.Errf("unknown limit '%s' (context, output)", args[i])
				}
			}
		case "tool_call", "reasoning", "attachment", "temperature":
			name := d.Val()
			v := true
			if d.NextArg() {
				b, err := strconv.ParseBool(d.Val())
				if err != nil {
					return "", m, d.Errf("%s takes true or false, not '%s'", name, d.Val())
				}
				v = b
			}
			if d.NextArg() {
				return "", m, d.ArgErr()
			}
			*map[string]**bool{"tool_call": &m.ToolCall, "reasoning": &m.Reasoning, "attachment": &m.Attachment, "temperature": &m.Temperature}[name] = &v
		case "modalities":
			args := d.RemainingArgs()
			if len(args) < 2 || (args[0] != "input" && args[0] != "output") {
				return "", m, d.Errf("modalities input|output <modality...>")
			}
			if m.Modalities == nil {
				m.Modalities = &service.Modalities{Input: []string{"text"}, Output: []string{"text"}}
			}
			if args[0] == "input" {
				m.Modalities.Input = args[1:]
			} else {
				m.Modalities.Output = args[1:]
			}
		case "pricing":
			p, err := parsePricing(d)
			if err != nil {
				return "", m, err
			}
			m.Pricing = p
		default:
			return "", m, d.Errf("unrecognized model subdirective '%s'", d.Val())
		}
	}
	return id, m, nil
}

// parsePricing reads `pricing [name usd]...` and an optional block of
// `name usd` lines.
func parsePricing(d *caddyfile.Dispenser) (*store.Pricing, error) {
	p := &store.Pricing{}
	seen := map[string]bool{}
	set := func(name, val string) error {
		v, err := money.Parse(val)
		if err != nil {
			return d.Errf("pricing %s: %v", name, err)
		}
		if err := money.ValidatePrice(name, v); err != nil {
			return d.Errf("%v", err)
		}
		if seen[name] {
			return d.Errf("pricing %s is given twice", name)
		}
		seen[name] = true
		switch name {
		case "input":
			p.Input = v
		case "output":
			p.Output = v
		case "cache_read":
			p.CacheRead = &v
		case "cache_write":
			p.CacheWrite = &v
		case "reasoning":
			p.Reasoning = &v
		default:
			return d.Errf("unknown price '%s' (input, output, cache_read, cache_write, reasoning)", name)
		}
		return nil
	}
	args := d.RemainingArgs()
	if len(args)%2 != 0 {
		return nil, d.Errf("pricing takes pairs of a price name and USD per million tokens")
	}
	for i := 0; i < len(args); i += 2 {
		if err := set(strings.ToLower(args[i]), args[i+1]); err != nil {
			return nil, err
		}
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		var val string
		if !d.AllArgs(&val) {
			return nil, d.ArgErr()
		}
		if err := set(name, val); err != nil {
			return nil, err
		}
	}
	if !seen["input"] || !seen["output"] {
		return nil, d.Errf("pricing needs at least input and output")
	}
	return p, nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*App)(nil)

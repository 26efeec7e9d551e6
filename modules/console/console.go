// Package console is the workspace Console handler
// (http.handlers.workspace_console): the Console JSON API, the device-flow
// endpoints and the web pages over the agentgate app's shared store.
package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/console/api"
	"github.com/agentgate/agentgate/internal/console/managed"
	"github.com/agentgate/agentgate/internal/console/mcp"
	"github.com/agentgate/agentgate/internal/console/oauth"
	"github.com/agentgate/agentgate/internal/console/otlp"
	"github.com/agentgate/agentgate/internal/console/web"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/modules/agentgate"
	"github.com/agentgate/agentgate/modules/internal/accesslog"
)

func init() {
	caddy.RegisterModule(new(Console))
}

// Console serves the workspace Console: `GET /api/v2/config` and the
// management API under `/api/v1/` (service accounts, keys, members,
// connections, models and pricing), the device authorization endpoints, and
// the server-rendered web pages (sign-in, device verification, workspace
// pages) on every other path. The API authenticates service-account keys
// and person access tokens sent as `Authorization: Bearer`, with `x-org-id`
// for tokens not bound to a workspace, and enforces the permission matrix.
// Unknown routes under /api/ answer 404 and wrong methods 405, both as JSON
// `_tag` errors; other unknown paths get an HTML 404 page. It is a terminal
// handler.
//
// For Claude Code CLIs signed in to the workspace it also serves
// `GET /managed/settings` (the managed settings built from the workspace
// and its owner's Claude Code document) and the telemetry relay,
// `POST /v1/metrics`, `/v1/logs` and `/v1/traces` (OTLP over HTTP from
// signed-in people, stamped with who sent it and forwarded to the
// operator's collector, see Telemetry). The gateway passes those three
// paths on when it shares the site.
type Console struct {
	// InferenceURL is the public base URL of the gateway, used in the
	// `settings.baseURL` of `/api/v2/config` as `<inference_url>/custom/<id>`.
	// Default: the scheme and host of the request.
	InferenceURL string `json:"inference_url,omitempty"`

	// MaxRequestBody is the largest accepted request body in bytes; larger
	// bodies answer 413. Default: 1 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`

	// ConsoleURL is the Console's public base URL, used in device sign-in
	// answers (`verification_uri`) and the OAuth metadata. Default: the
	// scheme and host of the request.
	ConsoleURL string `json:"console_url,omitempty"`

	// DeviceClients are the client_ids allowed to start a device sign-in
	// (RFC 8628); any other gets 401 invalid_client. Default: agentgate-cli,
	// opencode-cli (the released OpenCode CLI's console login) and
	// claude-code (Claude Code's gateway sign-in, which sends
	// surface=claude_code and no client_id). A list that leaves claude-code
	// out turns Claude Code's sign-in off.
	DeviceClients []string `json:"device_clients,omitempty"`

	// Telemetry configures the telemetry relay. Without a collector
	// (otlp_endpoint) the relay still answers members' exports (200) and
	// drops them, and the managed settings do not ask the CLIs to send any.
	Telemetry *Telemetry `json:"telemetry,omitempty"`

	api       *api.API
	managed   *managed.Handler
	relay     *otlp.Relay
	oauth     *oauth.Handler
	mcp       *mcp.Server
	wellKnown http.HandlerFunc
	web       *web.Web
	logger    *zap.Logger
	accessLog *accesslog.Log
}

// Telemetry is the telemetry relay's configuration.
type Telemetry struct {
	// OTLPEndpoint is the base URL of the operator's OTLP/HTTP collector:
	// metrics go to <otlp_endpoint>/v1/metrics, logs and traces likewise.
	// Placeholders are resolved at provision. When set, the managed
	// settings make members' Claude Code CLIs export their metrics,
	// events (logs) and traces to this Console's origin.
	OTLPEndpoint string `json:"otlp_endpoint,omitempty"`

	// Headers are sent to the collector with every export, e.g. its
	// credential as `{env.OTLP_TOKEN}` (resolved at provision).
	Headers map[string]string `json:"headers,omitempty"`

	// MaxBody bounds an export's body in bytes, after decompression; larger
	// ones answer 413. Default: 4 MiB.
	MaxBody int64 `json:"max_body,omitempty"`

	// RequestsPerMinute bounds the exports of one sign-in per minute;
	// more answer 429 with Retry-After. Default: 120.
	RequestsPerMinute int64 `json:"requests_per_minute,omitempty"`

	// Timeout bounds one export to the collector. Default: 10s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	endpoint string
	headers  map[string]string
}

// CaddyModule returns the Caddy module information.
func (*Console) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.workspace_console", New: func() caddy.Module { return new(Console) }}
}

// Provision wires the handler to the agentgate app.
func (c *Console) Provision(ctx caddy.Context) error {
	c.logger = ctx.Logger()
	c.accessLog = accesslog.New(ctx, accesslog.Console)
	app, err := agentgate.FromContext(ctx)
	if err != nil {
		return fmt.Errorf("loading agentgate app: %v", err)
	}
	c.api = api.New(api.Options{Service: app.Service, InferenceURL: c.InferenceURL, ConsoleURL: c.ConsoleURL, MaxBody: c.MaxRequestBody})
	c.mcp = mcp.New(mcp.Options{Service: app.Service, BaseURL: c.ConsoleURL, InferenceURL: c.InferenceURL})
	c.wellKnown = api.WellKnown(c.ConsoleURL)
	clients := c.DeviceClients
	if len(clients) == 0 {
		clients = []string{"agentgate-cli", "opencode-cli", service.ClaudeCodeClient}
	}
	c.oauth = &oauth.Handler{Service: app.Service, BaseURL: c.ConsoleURL, Clients: map[string]bool{}, ClientIP: agentgate.ClientIP}
	for _, id := range clients {
		c.oauth.Clients[id] = true
	}
	c.web = web.New(web.Options{Service: app.Service, InferenceURL: c.InferenceURL, Logger: c.logger, ClientIP: agentgate.ClientIP})
	tel := c.Telemetry
	if tel == nil {
		tel = &Telemetry{}
	}
	repl := caddy.NewReplacer()
	tel.endpoint = strings.TrimSpace(repl.ReplaceAll(tel.OTLPEndpoint, ""))
	tel.headers = make(map[string]string, len(tel.Headers))
	for k, v := range tel.Headers {
		tel.headers[k] = repl.ReplaceAll(v, "")
	}
	c.relay = otlp.New(otlp.Options{Service: app.Service, Endpoint: tel.endpoint, Headers: tel.headers, MaxBody: tel.MaxBody,
		RequestsPerMinute: tel.RequestsPerMinute, Timeout: time.Duration(tel.Timeout), Clock: app.Clock, Logger: c.logger.Named("telemetry")})
	c.managed = &managed.Handler{Service: app.Service}
	if c.relay.Forwards() {
		c.managed.TelemetryEnv = func(r *http.Request) map[string]string { return otlp.ClientEnv(c.origin(r)) }
	}
	return nil
}

// origin is the Console's public origin: console_url, else the scheme and
// host of the request.
func (c *Console) origin(r *http.Request) string {
	if c.ConsoleURL != "" {
		return strings.TrimRight(c.ConsoleURL, "/")
	}
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// Cleanup stops the telemetry exports still on their way.
func (c *Console) Cleanup() error {
	if c.relay != nil {
		c.relay.Close()
	}
	return nil
}

// Validate checks the configuration.
func (c *Console) Validate() error {
	if c.InferenceURL != "" {
		u, err := url.Parse(c.InferenceURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("inference_url must be an absolute http or https URL, got %q", c.InferenceURL)
		}
	}
	if c.ConsoleURL != "" {
		u, err := url.Parse(c.ConsoleURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("console_url must be an absolute http or https URL, got %q", c.ConsoleURL)
		}
	}
	for _, id := range c.DeviceClients {
		if id == "" || len(id) > 128 || strings.ContainsAny(id, " \t\r\n") {
			return fmt.Errorf("device client id %q is not valid", id)
		}
	}
	if c.MaxRequestBody < 0 {
		return fmt.Errorf("max_request_body must not be negative")
	}
	if t := c.Telemetry; t != nil {
		if t.endpoint != "" {
			u, err := url.Parse(t.endpoint)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
				return fmt.Errorf("telemetry: otlp_endpoint must be an absolute http or https URL without query, got %q", t.endpoint)
			}
		} else if t.OTLPEndpoint != "" {
			return fmt.Errorf("telemetry: otlp_endpoint %q is empty once resolved (is its environment variable or file there?)", t.OTLPEndpoint)
		}
		if len(t.Headers) > 0 && t.OTLPEndpoint == "" {
			return fmt.Errorf("telemetry: headers need an otlp_endpoint")
		}
		for k, v := range t.headers {
			if k == "" || strings.ContainsAny(k, " \t\r\n:") || strings.ContainsAny(v, "\r\n") {
				return fmt.Errorf("telemetry: header %q is not valid", k)
			}
		}
		if t.MaxBody < 0 || t.RequestsPerMinute < 0 || t.Timeout < 0 {
			return fmt.Errorf("telemetry: max_body, requests_per_minute and timeout must not be negative")
		}
	}
	return nil
}

// ServeHTTP serves the Console routes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if taken, err := c.accessLog.Serve(w, r, c, next); taken {
		return err // logged without the key (package accesslog)
	}
	switch p := r.URL.Path; {
	case oauth.Handles(p):
		c.oauth.ServeHTTP(w, r)
	case mcp.Handles(p):
		c.mcp.ServeHTTP(w, r)
	case managed.Handles(p):
		c.managed.ServeHTTP(w, r)
	case otlp.Handles(p):
		c.relay.ServeHTTP(w, r)
	case p == api.WellKnownPath:
		c.wellKnown(w, r)
	case p == "/api" || strings.HasPrefix(p, "/api/"):
		c.api.ServeHTTP(w, r)
	default:
		c.web.ServeHTTP(w, r)
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Console)(nil)
	_ caddy.Validator             = (*Console)(nil)
	_ caddy.CleanerUpper          = (*Console)(nil)
	_ caddyhttp.MiddlewareHandler = (*Console)(nil)
)

// Package gateway is the provider gateway handler (http.handlers.llm_gateway):
// the Caddy glue of the pipeline in internal/gateway, which it hands
// Caddy's own reverse_proxy to forward with (the provider credential is
// added by the proxy's transport), Caddy's metrics registry and the access
// log's fields.
package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/console/otlp"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/gateway"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/modules/agentgate"
	"github.com/agentgate/agentgate/modules/internal/accesslog"
)

func init() {
	caddy.RegisterModule(new(Gateway))
}

// Gateway serves the Providers API, `{inference_url}/custom/<connection_id>/…`,
// and the Inference API, `{inference_url}/v1/…` (and `/v1beta/…`), where
// the model a request names is one of the workspace's models and picks
// the connection, with fallbacks between its targets. Routes: Chat
// Completions (`/chat/completions`), Responses (`/responses`), Anthropic
// Messages (`/messages`, and `/messages/count_tokens`) and Google
// (`/models/<model>:generateContent`, `:streamGenerateContent` and
// `:countTokens`), also under the `/v1/` and `/v1beta/` prefixes that the
// official SDKs add; and `GET /models` (`/models/<id>`), answered from the
// store in the list shape of the connection's kind (on the Inference API:
// the workspace's models). Requests under neither API go to the next
// handler, so the gateway can share a site with the Console; so do
// `/v1/metrics`, `/v1/logs` and `/v1/traces`, the Console's telemetry
// relay for Claude Code.
//
// The workspace credential is read from `Authorization: Bearer`,
// `x-api-key`, `api-key`, `x-goog-api-key` or `?key=`, and checked before
// the path is. A request whose slots (a repeated header or `?key=`
// included) carry two different credentials is refused with 400
// `AmbiguousCredential`; the same credential in several slots is one
// credential. Every client credential, cookie and `x-org-id` is removed
// before forwarding, and the connection's credential is set in the
// provider's native header. Gateway errors are JSON with `_tag` and
// `message` inside the error envelope of the connection's format (before
// the connection is known: the path's, else the credential slot's).
type Gateway struct {
	// MaxRequestBody is the largest request body in bytes; larger bodies
	// answer 413. Default: 32 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`

	// DialTimeout bounds connecting to a provider. Default: 10s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`

	// ResponseHeaderTimeout bounds the wait for a provider's response
	// headers (time to first byte of a non-streamed answer). Default: 10m.
	ResponseHeaderTimeout caddy.Duration `json:"response_header_timeout,omitempty"`

	// DisconnectGrace is how long the provider's answer to a non-stream
	// request is still awaited after the client went away. Such a request
	// is not cancelled with its client (the provider answers and bills it
	// anyway): its answer is read to the end and metered, and its usage
	// record has the provider's tokens and cost with client_disconnected
	// set. Past the grace (and at most two tenths of it more, each tenth
	// at least 10ms and at most 1s) the upstream request is cancelled.
	// Streams are cancelled when their client leaves. Default: the
	// response_header_timeout.
	DisconnectGrace caddy.Duration `json:"disconnect_grace,omitempty"`

	// MaxIdleConnsPerProvider is how many idle connections to one provider
	// host are kept for the next request. A gateway sends all of its
	// members' requests to a few provider hosts, so it keeps as many
	// warm as it has requests in flight rather than reverse_proxy's 32,
	// which under a few hundred concurrent requests closes and redials
	// (and, to an HTTPS provider, renegotiates TLS for) most of them.
	// Default: 1024.
	MaxIdleConnsPerProvider int `json:"max_idle_conns_per_provider,omitempty"`

	// TLSTrustedCACerts are PEM files of extra CAs to trust for HTTPS
	// providers (private or test endpoints). Default: the system roots.
	TLSTrustedCACerts []string `json:"tls_trusted_ca_certs,omitempty"`

	// MaxAttempts is the most targets of a workspace model one Inference
	// API request tries. Default: 3.
	MaxAttempts int `json:"max_attempts,omitempty"`

	// TryTimeout bounds the wait for one target's response headers on the
	// Inference API while another target could still be tried. Default: 30s.
	TryTimeout caddy.Duration `json:"try_timeout,omitempty"`

	// FallbackDeadline bounds the time from an Inference API request's
	// first attempt to its answer's response headers, over all attempts,
	// when its model has several targets. Default: 2m.
	FallbackDeadline caddy.Duration `json:"fallback_deadline,omitempty"`

	// Cooldown is how long a target that failed (unreachable, 429, 5xx, or
	// no headers in time) is tried only after the model's other targets.
	// Default: 30s.
	Cooldown caddy.Duration `json:"cooldown,omitempty"`

	pipeline       *gateway.Pipeline
	plain          *reverseproxy.Handler // for http:// base URLs
	tls            *reverseproxy.Handler // for https:// base URLs
	plainTransport *reverseproxy.HTTPTransport
	tlsTransport   *reverseproxy.HTTPTransport
	accessLog      *accesslog.Log
	// local is the server in-process requests are prepared with (no
	// site's: their requests come from no listener).
	local *caddyhttp.Server
}

// CaddyModule returns the Caddy module information.
func (*Gateway) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.llm_gateway", New: func() caddy.Module { return new(Gateway) }}
}

const varUpstream = "agentgate.upstream"

// Provision sets defaults, provisions the two reverse proxies and builds
// the pipeline.
func (g *Gateway) Provision(ctx caddy.Context) error {
	g.accessLog = accesslog.New(ctx, accesslog.Gateway)
	app, err := agentgate.FromContext(ctx)
	if err != nil {
		return fmt.Errorf("loading agentgate app: %v", err)
	}
	if g.MaxRequestBody == 0 {
		g.MaxRequestBody = 32 << 20
	}
	if g.DialTimeout == 0 {
		g.DialTimeout = caddy.Duration(10 * time.Second)
	}
	if g.ResponseHeaderTimeout == 0 {
		g.ResponseHeaderTimeout = caddy.Duration(10 * time.Minute)
	}
	if g.DisconnectGrace == 0 {
		g.DisconnectGrace = g.ResponseHeaderTimeout
	}
	if g.plain, g.plainTransport, err = g.newProxy(ctx, false); err != nil {
		return fmt.Errorf("provisioning proxy: %v", err)
	}
	if g.tls, g.tlsTransport, err = g.newProxy(ctx, true); err != nil {
		return fmt.Errorf("provisioning TLS proxy: %v", err)
	}
	g.pipeline = &gateway.Pipeline{Service: app.Service, Forwarder: g, MaxRequestBody: g.MaxRequestBody,
		Metrics: gateway.NewMetrics(ctx.GetMetricsRegistry()), Logger: ctx.Logger(), RequestID: requestID, Annotate: logFields,
		Fallback: gateway.Fallback{MaxAttempts: g.MaxAttempts, TryTimeout: time.Duration(g.TryTimeout),
			Deadline: time.Duration(g.FallbackDeadline), Cooldown: time.Duration(g.Cooldown)},
		DisconnectGrace: time.Duration(g.DisconnectGrace)}
	g.local = new(caddyhttp.Server)
	app.RegisterGateway(g)
	return nil
}

// newProxy builds one of Caddy's own reverse proxies: upstream chosen per
// request, streams flushed as they come.
// Its transport is Caddy's HTTP transport, wrapped so that the provider
// credential is added to a copy of the outgoing request's headers at the
// last moment: it never sits in a request that a handler, a placeholder or
// the proxy's debug log can see. The same copy drops the X-Forwarded-*,
// Via and Forwarded headers and takes the provider's Host (cheaper there
// than a header handler, which would expand a placeholder per request).
func (g *Gateway) newProxy(ctx caddy.Context, useTLS bool) (*reverseproxy.Handler, *reverseproxy.HTTPTransport, error) {
	tr := g.transport(useTLS)
	if err := tr.Provision(ctx); err != nil {
		return nil, nil, err
	}
	rp := &reverseproxy.Handler{
		Transport:        credentialTransport{tr},
		DynamicUpstreams: upstreamFromVars{},
		// The default flush interval: Caddy flushes every write of a
		// streamed answer (text/event-stream, or no Content-Length), and
		// writes a sized answer in one piece.
	}
	if err := rp.Provision(ctx); err != nil {
		tr.Cleanup()
		return nil, nil, err
	}
	return rp, tr, nil
}

// transport is the configuration of the proxy's transport to providers
// (plain or TLS), before it is provisioned.
func (g *Gateway) transport(useTLS bool) *reverseproxy.HTTPTransport {
	idle := g.MaxIdleConnsPerProvider
	if idle == 0 {
		idle = 1024
	}
	tr := &reverseproxy.HTTPTransport{
		DialTimeout:           g.DialTimeout,
		ResponseHeaderTimeout: g.ResponseHeaderTimeout,
		KeepAlive:             &reverseproxy.KeepAlive{MaxIdleConns: idle, MaxIdleConnsPerHost: idle},
	}
	if useTLS {
		tr.TLS = &reverseproxy.TLSConfig{}
		if len(g.TLSTrustedCACerts) > 0 {
			tr.TLS.CARaw = caddyconfig.JSONModuleObject(map[string]any{"pem_files": g.TLSTrustedCACerts}, "provider", "file", nil)
		}
	}
	return tr
}

// credentialTransport sends gateway.UpstreamRequest's copy of the request:
// with the provider credential the pipeline put in the request's context,
// without the proxy's client headers.
type credentialTransport struct {
	*reverseproxy.HTTPTransport
}

func (t credentialTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.HTTPTransport.RoundTrip(gateway.UpstreamRequest(req))
}

// Validate checks the configuration.
func (g *Gateway) Validate() error {
	if g.MaxRequestBody < 0 {
		return errors.New("max_request_body must not be negative")
	}
	if g.MaxAttempts < 0 || g.MaxAttempts > 16 {
		return errors.New("max_attempts must be from 1 to 16")
	}
	if g.TryTimeout < 0 || g.FallbackDeadline < 0 || g.Cooldown < 0 || g.DisconnectGrace < 0 {
		return errors.New("try_timeout, fallback_deadline, cooldown and disconnect_grace must not be negative")
	}
	if g.MaxIdleConnsPerProvider < 0 {
		return errors.New("max_idle_conns_per_provider must not be negative")
	}
	return nil
}

// Cleanup releases the reverse proxies and their transports, which Caddy
// did not load itself.
func (g *Gateway) Cleanup() error {
	var errs []error
	for _, rp := range []*reverseproxy.Handler{g.plain, g.tls} {
		if rp != nil {
			errs = append(errs, rp.Cleanup())
		}
	}
	for _, tr := range []*reverseproxy.HTTPTransport{g.plainTransport, g.tlsTransport} {
		if tr != nil {
			errs = append(errs, tr.Cleanup())
		}
	}
	return errors.Join(errs...)
}

// ServeHTTP forwards a gateway request, or passes other paths on.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if taken, err := g.accessLog.Serve(w, r, g, next); taken {
		return err // logged without the key (package accesslog)
	}
	if r.URL.Path == gateway.WebsearchPath {
		g.pipeline.ServeWebsearch(w, r)
		return nil
	}
	// The telemetry relay's routes lie under the Inference API's /v1/
	// but are the Console's (it serves them next on the site).
	if !formats.IsGatewayPath(r.URL.EscapedPath()) || otlp.Handles(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	g.pipeline.Serve(w, r)
	return nil
}

// ServeLocal serves an in-process request of an instance server that is a
// workspace member: its context carries the member (gateway.WithMember)
// and it has no credential. It gets the request context Caddy's handlers
// expect (a replacer, vars, a server) and then goes through the pipeline
// and Caddy's reverse proxy like a request over HTTP: it is metered,
// recorded and counted in the gateway's metrics, but, coming from no
// listener, it is in no access log.
func (g *Gateway) ServeLocal(w http.ResponseWriter, r *http.Request) {
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, g.local)
	g.pipeline.Serve(w, r)
}

// Forward sends a request through Caddy's reverse proxy: the TLS one for
// HTTPS providers. The upstream is chosen per request, through a var the
// proxy's dynamic upstreams read.
func (g *Gateway) Forward(w http.ResponseWriter, out *http.Request, to gateway.Upstream) error {
	// A fresh Upstream per request: the proxy writes into the one it is
	// given (its dynamic host state), so sharing one across concurrent
	// requests would race.
	caddyhttp.SetVar(out.Context(), varUpstream, []*reverseproxy.Upstream{{Dial: to.Dial}})
	proxy := g.plain
	if to.HTTPS {
		proxy = g.tls
	}
	err := proxy.ServeHTTP(w, out, nil)
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return &gateway.ForwardError{Status: he.StatusCode, Err: err}
	}
	return err
}

// upstreamFromVars hands the proxy the upstream chosen for the request.
type upstreamFromVars struct{}

func (upstreamFromVars) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	if u, ok := caddyhttp.GetVar(r.Context(), varUpstream).([]*reverseproxy.Upstream); ok {
		return u, nil
	}
	return nil, errors.New("no upstream chosen for this request")
}

// requestID is a request's id, for its usage record and the access log
// (gateway.NewRequestID). It is not Caddy's {http.request.uuid}, which the
// gateway no longer generates for every request: a site that wants that
// placeholder too gets a different id from it.
func requestID(*http.Request) string { return gateway.NewRequestID() }

// logFields adds the request's metering (and the agent session, when the
// request named one) to Caddy's access log entry. A server that writes no
// access log gets none: only access log entries carry the fields.
func logFields(r *http.Request, rec *store.UsageRecord) {
	if srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv.Logs == nil {
		return
	}
	if extra, ok := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields); ok {
		extra.Add(zap.Object("agentgate", gateway.LogObject(rec)))
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Gateway)(nil)
	_ caddy.Validator             = (*Gateway)(nil)
	_ caddy.CleanerUpper          = (*Gateway)(nil)
	_ caddyhttp.MiddlewareHandler = (*Gateway)(nil)
	_ agentgate.LocalGateway      = (*Gateway)(nil)
)

// Package gateway is the provider gateway handler (http.handlers.llm_gateway):
// it authenticates a workspace credential, checks the model against the
// connection, rewrites the model id, swaps the credential for the
// connection's provider credential and forwards with Caddy's own
// reverse_proxy, streaming the answer back unchanged.
package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/modules/agentgate"
	"github.com/agentgate/agentgate/modules/gateway/formats"
	"github.com/agentgate/agentgate/modules/gateway/usage"
	"github.com/agentgate/agentgate/modules/internal/accesslog"
)

func init() {
	caddy.RegisterModule(new(Gateway))
}

// Gateway serves `{inference_url}/custom/<connection_id>/…`: Chat
// Completions (`/chat/completions`), Responses (`/responses`), Anthropic
// Messages (`/messages`, and `/messages/count_tokens`) and Google
// (`/models/<model>:generateContent`, `:streamGenerateContent` and
// `:countTokens`), also under the `/v1/` and `/v1beta/` prefixes that the
// official SDKs add; and `GET /models` (`/models/<id>`), answered from the
// store in the list shape of the connection's kind. Requests whose path
// does not start with `/custom/` go to the next handler, so the gateway can
// share a site with the Console.
//
// The workspace credential is read from `Authorization: Bearer`,
// `x-api-key`, `api-key`, `x-goog-api-key` or `?key=`, and checked before
// the path is; every client credential, cookie and `x-org-id` is removed
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

	// TLSTrustedCACerts are PEM files of extra CAs to trust for HTTPS
	// providers (private or test endpoints). Default: the system roots.
	TLSTrustedCACerts []string `json:"tls_trusted_ca_certs,omitempty"`

	app            *agentgate.App
	plain          *reverseproxy.Handler // for http:// base URLs
	tls            *reverseproxy.Handler // for https:// base URLs
	plainTransport *reverseproxy.HTTPTransport
	tlsTransport   *reverseproxy.HTTPTransport
	upstreams      sync.Map // base URL → *upstream
	metrics        *metrics
	logger         *zap.Logger
	accessLog      *accesslog.Log
}

// CaddyModule returns the Caddy module information.
func (*Gateway) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.llm_gateway", New: func() caddy.Module { return new(Gateway) }}
}

const varUpstream = "agentgate.upstream"

// Provision sets defaults and provisions the two reverse proxies.
func (g *Gateway) Provision(ctx caddy.Context) error {
	g.logger = ctx.Logger()
	g.accessLog = accesslog.New(ctx)
	app, err := agentgate.FromContext(ctx)
	if err != nil {
		return fmt.Errorf("loading agentgate app: %v", err)
	}
	g.app = app
	g.metrics = newMetrics(ctx.GetMetricsRegistry())
	if g.MaxRequestBody == 0 {
		g.MaxRequestBody = 32 << 20
	}
	if g.DialTimeout == 0 {
		g.DialTimeout = caddy.Duration(10 * time.Second)
	}
	if g.ResponseHeaderTimeout == 0 {
		g.ResponseHeaderTimeout = caddy.Duration(10 * time.Minute)
	}
	if g.plain, g.plainTransport, err = g.newProxy(ctx, false); err != nil {
		return fmt.Errorf("provisioning proxy: %v", err)
	}
	if g.tls, g.tlsTransport, err = g.newProxy(ctx, true); err != nil {
		return fmt.Errorf("provisioning TLS proxy: %v", err)
	}
	return nil
}

// newProxy builds one of Caddy's own reverse proxies: upstream chosen per
// request, streams flushed as they come, no X-Forwarded-* or Via leaking
// the client.
// Its transport is Caddy's HTTP transport, wrapped so that the provider
// credential is added to a copy of the outgoing request's headers at the
// last moment: it never sits in a request that a handler, a placeholder or
// the proxy's debug log can see.
func (g *Gateway) newProxy(ctx caddy.Context, useTLS bool) (*reverseproxy.Handler, *reverseproxy.HTTPTransport, error) {
	tr := &reverseproxy.HTTPTransport{
		DialTimeout:           g.DialTimeout,
		ResponseHeaderTimeout: g.ResponseHeaderTimeout,
	}
	if useTLS {
		tr.TLS = &reverseproxy.TLSConfig{}
		if len(g.TLSTrustedCACerts) > 0 {
			tr.TLS.CARaw = caddyconfig.JSONModuleObject(map[string]any{"pem_files": g.TLSTrustedCACerts}, "provider", "file", nil)
		}
	}
	if err := tr.Provision(ctx); err != nil {
		return nil, nil, err
	}
	rp := &reverseproxy.Handler{
		Transport:        credentialTransport{tr},
		DynamicUpstreams: upstreamFromVars{},
		// The default flush interval: Caddy flushes every write of a
		// streamed answer (text/event-stream, or no Content-Length), and
		// writes a sized answer in one piece.
		Headers: &headers.Handler{Request: &headers.HeaderOps{
			Set:    http.Header{"Host": []string{"{http.reverse_proxy.upstream.hostport}"}},
			Delete: []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via", "Forwarded"},
		}},
	}
	if err := rp.Provision(ctx); err != nil {
		tr.Cleanup()
		return nil, nil, err
	}
	return rp, tr, nil
}

type credentialKey struct{}

// upstreamCredential is the provider credential of one request, carried in
// the request context under a private key (not in vars, which placeholders
// and logs can read).
type upstreamCredential struct {
	kind, secret string
}

// credentialTransport sets the provider credential on a copy of the
// request just before the round trip.
type credentialTransport struct {
	*reverseproxy.HTTPTransport
}

func (t credentialTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, ok := req.Context().Value(credentialKey{}).(*upstreamCredential)
	if !ok {
		return t.HTTPTransport.RoundTrip(req)
	}
	out := new(http.Request)
	*out = *req
	// A new map sharing the (never modified) value slices: Set below
	// replaces a key's slice rather than writing into it, so the request
	// that the proxy and its logs hold never sees the credential.
	out.Header = make(http.Header, len(req.Header)+2)
	for k, v := range req.Header {
		out.Header[k] = v
	}
	formats.SetCredential(out.Header, c.kind, c.secret)
	return t.HTTPTransport.RoundTrip(out)
}

// Validate checks the configuration.
func (g *Gateway) Validate() error {
	if g.MaxRequestBody < 0 {
		return errors.New("max_request_body must not be negative")
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

// failure is a gateway-made error answered in the request's format.
type failure struct {
	status  int
	tag     string
	message string
	extra   map[string]any
}

func fail(status int, tag, format string, a ...any) *failure {
	return &failure{status: status, tag: tag, message: fmt.Sprintf(format, a...)}
}

func fromAPI(err error) *failure {
	e := apierr.As(err)
	return &failure{status: e.Status, tag: e.Tag, message: e.Message}
}

// ServeHTTP forwards a gateway request, or passes other paths on.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if taken, err := g.accessLog.Serve(w, r, g, next); taken {
		return err // logged without the key (internal/accesslog)
	}
	if !strings.HasPrefix(r.URL.Path, formats.Prefix) {
		return next.ServeHTTP(w, r)
	}
	route, perr := formats.ParseRoute(r.URL.EscapedPath())
	// The envelope of gateway-made errors: what the path suggests until
	// serve knows the connection, then the connection's format.
	envelope := route.Format
	if f := g.serve(w, r, route, perr, &envelope); f != nil {
		writeFailure(w, envelope, f)
	}
	return nil
}

// serve answers a request under /custom/. The credential is checked before
// anything else, the path included: an unknown route with a bad key is 401.
// perr is why the path is not a route, answered once the credential (and,
// when the path names one, the connection) is known.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, route formats.Route, perr *formats.ParseError, envelope *formats.Format) *failure {
	// Take the client's credential and remove it from the request at once,
	// so that no later step (and no access log) sees it.
	q := r.URL.Query()
	cred := formats.ClientCredential(r.Header, q.Get("key"))
	if *envelope == 0 {
		*envelope = formats.CredentialFormat(r.Header, q.Get("key"))
	}
	orgID := r.Header.Get("X-Org-Id")
	stripClientSecrets(r, q)

	svc, err := g.app.Service(r.Context())
	if err != nil {
		return fromAPI(err)
	}
	if cred == "" {
		return fromAPI(apierr.Unauthorized())
	}
	p, err := svc.Authenticate(r.Context(), cred, orgID)
	if err != nil {
		return fromAPI(err)
	}
	if route.Connection == "" {
		return pathFailure(perr)
	}
	conn, err := svc.LookupConnection(r.Context(), p, route.Connection)
	if err != nil {
		return fromAPI(err)
	}
	*envelope = formats.OfKind(conn.Kind, route.Format)
	if perr != nil {
		return pathFailure(perr)
	}
	if m := route.HTTPMethod(); r.Method != m {
		w.Header().Set("Allow", m)
		return fail(http.StatusMethodNotAllowed, "MethodNotAllowed", "this gateway route takes %s", m)
	}
	if route.Op == formats.ListModels || route.Op == formats.GetModel {
		return listModels(w, conn, route)
	}
	// From here on the request belongs to a member and a connection: every
	// outcome, refusals included, leaves a usage record.
	rec := &store.UsageRecord{Workspace: p.Workspace, MemberID: p.MemberID(), MemberKind: store.MemberPerson,
		KeyID: p.KeyID, FamilyID: p.FamilyID, Connection: conn.ID, Format: route.Format.String(), Model: route.Model}
	rec.Session = requestSession(r.Header)
	counting := route.Op == formats.CountTokens
	if counting {
		rec.Operation = store.OpCountTokens
	}
	if p.Kind == service.KindServiceKey {
		rec.MemberKind = store.MemberServiceAccount
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		rec.RequestID, _ = repl.GetString("http.request.uuid")
	}
	refuse := func(f *failure) *failure {
		g.finish(r, svc, nil, rec, f.status, usage.Result{}, route.Format)
		return f
	}
	if !formats.Supports(conn.Kind, route.Format) {
		return refuse(fail(http.StatusNotFound, "NotFound", "connection %s (%s) does not serve the %s format", conn.ID, conn.Kind, route.Format))
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return refuse(fail(http.StatusUnsupportedMediaType, "UnsupportedMediaType", "compressed request bodies (%s) are not accepted; send plain JSON", enc))
	}
	body, pooled, f := g.readBody(w, r)
	if f != nil {
		return refuse(f)
	}
	// Runs last: a pooled body buffer goes back unless the upstream request
	// took it (then its Close returns it, see forward).
	defer func() {
		if pooled != nil {
			pooled.put()
		}
	}()
	fs := scanFields(body, route.Format == formats.Google)
	if f := fs.refusal(); f != nil {
		return refuse(f)
	}
	if route.Format != formats.Google {
		rec.Model = fs.model.String()
	}
	requested, model, upstream, body, f := prepareModel(route, conn, body, &fs)
	if f != nil {
		return refuse(f)
	}
	rec.Model, rec.UpstreamModel = requested, upstream
	credential, err := svc.Credential(conn)
	if err != nil {
		g.logger.Error("provider credential cannot be decrypted", zap.String("connection", conn.ID))
		return refuse(fail(http.StatusBadGateway, "UpstreamCredentialUnavailable", "the connection's provider credential cannot be used"))
	}

	// A token count is free: it is recorded but never reserved against a
	// budget, so a member over budget can still count tokens.
	var res *ledger.Reservation
	if !counting {
		res, err = svc.Ledger.Reserve(r.Context(), p.Workspace, p.MemberID(), reservation(route.Format, model, &fs, len(body)))
	}
	var exceeded *ledger.ExceededError
	if errors.As(err, &exceeded) {
		g.metrics.of(route.Format).refused.Inc()
		fl := fail(http.StatusPaymentRequired, "BudgetExceeded", "budget exceeded: %s USD remaining of %s USD; this request may cost up to %s USD",
			exceeded.Remaining, exceeded.Limit, exceeded.Needed)
		fl.extra = map[string]any{"remaining_usd": exceeded.Remaining, "limit_usd": exceeded.Limit}
		if !exceeded.ResetsAt.IsZero() {
			fl.extra["resets_at"] = exceeded.ResetsAt
		}
		return refuse(fl)
	}
	if err != nil {
		return refuse(fromAPI(err))
	}

	// A chat stream reports usage only when asked: ask, and hide the extra
	// chunk from a client that did not.
	opts := usage.Options{Format: route.Format, StreamRequested: !counting && (route.Stream() || fs.stream.Bool()), RequestBytes: int64(len(body))}
	if route.Format == formats.Chat && opts.StreamRequested && !fs.streamOptions.Get("include_usage").Bool() {
		if patched, err := sjson.SetBytes(body, "stream_options.include_usage", true); err == nil {
			body, opts.DropUsageChunk = patched, true
		}
	}
	mw := &meterWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, opts: opts, start: time.Now(), unmetered: counting}
	var fl *failure
	// Account in a deferred call: the reverse proxy aborts a response cut
	// by either side with a panic (http.ErrAbortHandler), and such a
	// request must be recorded and charged too.
	defer func() {
		status := mw.status
		if fl != nil {
			status = fl.status
		}
		if status == 0 {
			status = http.StatusBadGateway
		}
		g.metrics.of(route.Format).duration.Observe(time.Since(mw.start).Seconds())
		if mw.status != 0 {
			g.metrics.of(route.Format).firstByte.Observe(mw.firstByte.Seconds())
		}
		result, _ := mw.result()
		rec.Streamed = opts.StreamRequested
		rec.ClientDisconnected = r.Context().Err() != nil
		rec.Cost = usage.Cost(result.Tokens, model.Pricing)
		g.finish(r, svc, res, rec, status, result, route.Format)
	}()
	fl = g.forward(mw, r, route, conn, upstream, credential, body, &pooled, q)
	return fl
}

// finish completes and records a request's usage: settled against its
// reservation in the background (so the response does not wait for the
// durable write), or appended on its own when it was never admitted.
func (g *Gateway) finish(r *http.Request, svc *service.Service, res *ledger.Reservation, rec *store.UsageRecord,
	status int, result usage.Result, f formats.Format) {
	now := svc.Clock.Now().UTC()
	rec.ID, rec.Time, rec.Status = ledger.UsageID(now), now, status
	if len(rec.Model) > 256 {
		rec.Model = rec.Model[:256]
	}
	rec.Tokens = result.Tokens
	rec.Estimated = result.Estimated
	logFields(r, rec)
	record := func(err error) {
		if err != nil {
			g.logger.Error("recording usage failed", zap.String("workspace", rec.Workspace), zap.String("usage_id", rec.ID), zap.Error(err))
			return
		}
		g.metrics.observe(f, status, rec.Tokens, rec.Cost)
	}
	if res == nil {
		record(svc.Ledger.Record(r.Context(), rec))
		return
	}
	res.SettleAsync(rec, record)
}

// stripClientSecrets removes every client credential, cookie and x-org-id
// from the request, and ?key= from its URL and request URI.
func stripClientSecrets(r *http.Request, q url.Values) {
	for _, h := range formats.ClientCredentialHeaders {
		r.Header.Del(h)
	}
	r.Header.Del("Cookie")
	r.Header.Del("X-Org-Id")
	r.Header.Del("Proxy-Authorization")
	if q.Has("key") {
		q.Del("key")
		r.URL.RawQuery = q.Encode()
		r.RequestURI = r.URL.RequestURI()
	}
}

func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *pooledBuf, *failure) {
	tooLarge := func() ([]byte, *pooledBuf, *failure) {
		return nil, nil, fail(http.StatusRequestEntityTooLarge, "PayloadTooLarge", "request body is larger than %d bytes", g.MaxRequestBody)
	}
	if r.ContentLength > g.MaxRequestBody {
		return tooLarge()
	}
	rd := http.MaxBytesReader(w, r.Body, g.MaxRequestBody)
	readFailed := func(err error) ([]byte, *pooledBuf, *failure) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		return nil, nil, fail(http.StatusBadRequest, "InvalidRequest", "reading the request body failed")
	}
	var body []byte
	var pooled *pooledBuf
	if r.ContentLength >= poolMin {
		p, b, err := readPooled(rd, int(r.ContentLength))
		if err != nil {
			return readFailed(err)
		}
		pooled, body = p, b
	}
	if pooled == nil {
		var buf bytes.Buffer
		if r.ContentLength > 0 {
			// Room for the body and for the read that sees EOF: without it
			// the buffer doubles (and copies) the whole body at its end.
			buf.Grow(int(r.ContentLength) + bytes.MinRead)
		}
		if _, err := buf.ReadFrom(rd); err != nil {
			return readFailed(err)
		}
		body = buf.Bytes()
	}
	if !gjson.ValidBytes(body) || !isObject(body) {
		if pooled != nil {
			pooled.put()
		}
		return nil, nil, fail(http.StatusBadRequest, "InvalidRequest", "the request body must be a JSON object")
	}
	return body, pooled, nil
}

// isObject reports whether valid JSON is an object (without gjson.ParseBytes,
// which copies the whole body).
func isObject(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

// prepareModel checks the requested model against the connection and
// rewrites it to the upstream id: in the body with sjson (every other byte
// kept), or for Google in the path.
func prepareModel(route formats.Route, conn *store.Connection, body []byte, fl *fields) (requested string, model store.Model, upstream string, _ []byte, _ *failure) {
	if route.Format == formats.Google {
		requested = route.Model
	} else {
		m := fl.model
		if !m.Exists() {
			return "", model, "", nil, fail(http.StatusBadRequest, "InvalidRequest", "model is required")
		}
		if m.Type != gjson.String || m.Str == "" {
			return "", model, "", nil, fail(http.StatusBadRequest, "InvalidRequest", "model must be a non-empty string")
		}
		requested = m.Str
	}
	if route.Format == formats.Anthropic && route.Op == formats.Generate {
		mt := fl.maxTokens
		if !mt.Exists() {
			return "", model, "", nil, fail(http.StatusBadRequest, "InvalidRequest", "max_tokens is required for Anthropic Messages")
		}
		if mt.Type != gjson.Number || mt.Num != float64(int64(mt.Num)) || mt.Num < 1 {
			return "", model, "", nil, fail(http.StatusBadRequest, "InvalidRequest", "max_tokens must be a positive integer")
		}
	}
	model, ok := conn.Models[requested]
	if !ok || !model.Enabled {
		return "", model, "", nil, fail(http.StatusForbidden, "ModelNotEnabled", "model %q is not enabled on this connection", requested)
	}
	upstream = requested
	if model.UpstreamID != "" && model.UpstreamID != requested {
		upstream = model.UpstreamID
		if route.Format != formats.Google {
			var err error
			if body, err = sjson.SetBytes(body, "model", upstream); err != nil {
				return "", model, "", nil, fail(http.StatusBadRequest, "InvalidRequest", "the model cannot be rewritten")
			}
		}
	}
	if route.Format == formats.Google {
		var f *failure
		if body, f = googleBodyModel(body, fl.model, "model", requested, upstream); f != nil {
			return "", model, "", nil, f
		}
		if route.Op == formats.CountTokens {
			if body, f = googleCountRequest(body, requested, upstream); f != nil {
				return "", model, "", nil, f
			}
		}
	}
	return requested, model, upstream, body, nil
}

// googleBodyModel checks a model that a Google body names besides its path
// (at path in the body): it must be the path's model, with or without
// "models/", and is rewritten to the upstream id with it, so that the body
// cannot ask for a model the path check did not see.
func googleBodyModel(body []byte, m gjson.Result, path, requested, upstream string) ([]byte, *failure) {
	if !m.Exists() {
		return body, nil
	}
	if m.Type != gjson.String || (m.Str != requested && m.Str != "models/"+requested) {
		return nil, fail(http.StatusBadRequest, "InvalidRequest", "%s must be the model of the path (%s)", path, requested)
	}
	if upstream == requested {
		return body, nil
	}
	rewritten := upstream
	if strings.HasPrefix(m.Str, "models/") {
		rewritten = "models/" + upstream
	}
	body, err := sjson.SetBytes(body, path, rewritten)
	if err != nil {
		return nil, fail(http.StatusBadRequest, "InvalidRequest", "the model cannot be rewritten")
	}
	return body, nil
}

// googleCountRequest checks the model that a Google token count may name
// in the request it wraps (generateContentRequest.model, either spelling of
// the outer name; both at once are a repeated key, refused before).
func googleCountRequest(body []byte, requested, upstream string) ([]byte, *failure) {
	outer := "generateContentRequest"
	gcr := gjson.GetBytes(body, outer)
	if !gcr.Exists() {
		outer = "generate_content_request"
		if gcr = gjson.GetBytes(body, outer); !gcr.Exists() {
			return body, nil
		}
	}
	if d := duplicateKey(gcr, true, 0); d != "" {
		return nil, fail(http.StatusBadRequest, "InvalidRequest", "the request body repeats the key %q; send each key once", outer+"."+d)
	}
	return googleBodyModel(body, gcr.Get("model"), outer+".model", requested, upstream)
}

// pathFailure answers a path that is not a gateway route.
func pathFailure(perr *formats.ParseError) *failure {
	tag := "InvalidRequest"
	if perr.Status == http.StatusNotFound {
		tag = "NotFound"
	}
	return &failure{status: perr.Status, tag: tag, message: perr.Message}
}

// listModels answers GET /models and GET /models/<id> from the store: the
// connection's enabled models under the names clients send, sorted, in the
// list shape of the connection's kind. No provider call, no usage record.
func listModels(w http.ResponseWriter, conn *store.Connection, route formats.Route) *failure {
	f := formats.OfKind(conn.Kind, 0)
	info := func(id string, m store.Model) formats.ModelInfo {
		return formats.ModelInfo{ID: id, Name: m.Name, Created: conn.Created, MaxOutputTokens: m.MaxOutputTokens}
	}
	var body []byte
	if route.Op == formats.GetModel {
		id := strings.TrimPrefix(route.Model, "models/")
		m, ok := conn.Models[id]
		if !ok || !m.Enabled {
			return fail(http.StatusNotFound, "ModelNotFound", "model %q is not enabled on this connection", id)
		}
		body = formats.ModelObject(f, info(id, m), conn.Kind)
	} else {
		ids := make([]string, 0, len(conn.Models))
		for id, m := range conn.Models {
			if m.Enabled {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		list := make([]formats.ModelInfo, len(ids))
		for i, id := range ids {
			list[i] = info(id, conn.Models[id])
		}
		body = formats.ModelList(f, list, conn.Kind)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	return nil
}

// forward sends the request upstream through Caddy's reverse proxy. The
// provider credential never reaches the request handed to the proxy: the
// transport adds it to the copy it sends.
func (g *Gateway) forward(w *meterWriter, r *http.Request, route formats.Route, conn *store.Connection,
	model, credential string, body []byte, pooled **pooledBuf, q url.Values) *failure {
	base, err := g.upstreamOf(conn.BaseURL)
	if err != nil {
		return fail(http.StatusBadGateway, "UpstreamUnreachable", "the connection's base URL is invalid")
	}
	up := *r.URL
	up.Scheme, up.Host = "", ""
	up.Path = base.path + route.UpstreamPath(model)
	up.RawPath = ""
	up.RawQuery = q.Encode()

	out := r.WithContext(context.WithValue(r.Context(), credentialKey{}, &upstreamCredential{kind: conn.Kind, secret: credential}))
	out.URL = &up
	out.RequestURI = up.RequestURI()
	// The client's credentials are already gone from r.Header, and nothing
	// secret is ever set on it (the transport adds the provider credential
	// to its own copy), so the request can be edited in place.
	out.Header = r.Header
	out.Header.Del("Accept-Encoding") // the transport asks for gzip itself and decodes it
	for k, v := range conn.Headers {
		out.Header.Set(k, v)
	}
	out.Header.Set("Content-Type", "application/json")
	if conn.Kind == store.KindAnthropic && out.Header.Get("Anthropic-Version") == "" {
		out.Header.Set("Anthropic-Version", formats.DefaultAnthropicVersion)
	}
	if p := *pooled; p != nil && &body[0] == &p.b[0] {
		out.Body = &releasingBody{Reader: bytes.NewReader(body), p: p}
		*pooled = nil
	} else {
		out.Body = io.NopCloser(bytes.NewReader(body))
	}
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	out.Header.Del("Transfer-Encoding")
	out.TransferEncoding = nil

	// A fresh Upstream per request: the proxy writes into the one it is
	// given (its dynamic host state), so sharing one across concurrent
	// requests would race.
	caddyhttp.SetVar(out.Context(), varUpstream, []*reverseproxy.Upstream{{Dial: base.dial}})
	proxy := g.plain
	if base.https {
		proxy = g.tls
	}
	if c := g.logger.Check(zapcore.DebugLevel, "forwarding"); c != nil {
		c.Write(zap.String("connection", conn.ID), zap.String("format", route.Format.String()), zap.String("model", model))
	}
	err = proxy.ServeHTTP(w, out, nil)
	if err != nil && w.status == 0 {
		var he caddyhttp.HandlerError
		status := http.StatusBadGateway
		if errors.As(err, &he) && he.StatusCode != 0 {
			status = he.StatusCode
		}
		if status == http.StatusGatewayTimeout {
			return fail(status, "UpstreamTimeout", "the provider did not answer in time")
		}
		return fail(status, "UpstreamUnreachable", "the provider could not be reached")
	}
	return nil
}

// upstream is a connection's base URL, parsed once: the path its routes
// go under, whether it is HTTPS, and the address to dial.
type upstream struct {
	path  string
	https bool
	dial  string
}

// upstreamOf parses a base URL once per distinct URL (a handful per
// config); the map lives as long as the handler, which a reload replaces.
func (g *Gateway) upstreamOf(baseURL string) (*upstream, error) {
	if v, ok := g.upstreams.Load(baseURL); ok {
		return v.(*upstream), nil
	}
	base, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	addr := base.Host
	if base.Port() == "" {
		if base.Scheme == "https" {
			addr = net.JoinHostPort(base.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(base.Hostname(), "80")
		}
	}
	u := &upstream{path: strings.TrimRight(base.Path, "/"), https: base.Scheme == "https", dial: addr}
	v, _ := g.upstreams.LoadOrStore(baseURL, u)
	return v.(*upstream), nil
}

// upstreamFromVars hands the proxy the upstream chosen for the request.
type upstreamFromVars struct{}

func (upstreamFromVars) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	if u, ok := caddyhttp.GetVar(r.Context(), varUpstream).([]*reverseproxy.Upstream); ok {
		return u, nil
	}
	return nil, errors.New("no upstream chosen for this request")
}

func writeFailure(w http.ResponseWriter, f formats.Format, fl *failure) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if fl.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	w.WriteHeader(fl.status)
	w.Write(formats.ErrorBody(f, fl.status, fl.tag, fl.message, fl.extra))
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Gateway)(nil)
	_ caddy.Validator             = (*Gateway)(nil)
	_ caddy.CleanerUpper          = (*Gateway)(nil)
	_ caddyhttp.MiddlewareHandler = (*Gateway)(nil)
)

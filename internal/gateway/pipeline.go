// Package gateway is the provider gateway's request pipeline: it
// authenticates a workspace credential, checks the route and the model
// against the connection, reserves the request's worst cost against the
// member's budgets, rewrites the model id, hands the request to a
// Forwarder (Caddy's reverse proxy, in the llm_gateway module) with the
// connection's provider credential, meters the answer as it streams back,
// and settles its usage. What a format looks like on the wire is the
// formats package's; this package never branches on a format.
package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/quota"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// Pipeline serves gateway requests. Set its fields, then call Serve from
// any number of goroutines.
type Pipeline struct {
	// Service returns the shared service, waiting for the store to open.
	Service func(ctx context.Context) (*service.Service, error)
	// Forwarder sends requests upstream.
	Forwarder Forwarder
	// MaxRequestBody is the largest request body in bytes.
	MaxRequestBody int64
	// Metrics are the gateway's collectors (NewMetrics).
	Metrics *Metrics
	Logger  *zap.Logger
	// RequestID, when set, returns a request's id for its usage record.
	RequestID func(r *http.Request) string
	// Annotate, when set, is given each usage record once it is complete,
	// before it is stored (the access log's metering fields).
	Annotate func(r *http.Request, rec *store.UsageRecord)
	// Fallback bounds the Inference API's moves between a model's targets.
	Fallback Fallback
	// DisconnectGrace is how long the provider's answer to a non-stream
	// request is still awaited, read and metered after its client left
	// (DefaultDisconnectGrace when 0); then, at most two tenths of it
	// more (each tenth at least 10 ms, at most a second), the upstream
	// request is cancelled (disconnect.go).
	DisconnectGrace time.Duration

	upstreams sync.Map // base URL → *upstream
	detached  detachedSet
	cool      cooldowns
	quotas    quota.Limiter // the workspace policies' per-minute counters
}

// Forwarder sends a prepared request to a provider and streams the answer
// into w. The request's context carries the provider credential (and the
// body as admitted, see outgoing), which the forwarder's transport adds to
// the request it sends (UpstreamRequest).
type Forwarder interface {
	Forward(w http.ResponseWriter, out *http.Request, to Upstream) error
}

// Upstream is where a request goes: the address to dial, and whether the
// connection is TLS.
type Upstream struct {
	Dial  string
	HTTPS bool
}

// ForwardError is a forwarder's failure with the status it maps to (504
// for a timeout, else 502).
type ForwardError struct {
	Status int
	Err    error
}

func (e *ForwardError) Error() string { return e.Err.Error() }
func (e *ForwardError) Unwrap() error { return e.Err }

// Serve answers a request under formats.Prefix. Gateway-made errors are
// JSON with _tag and message inside the error envelope of the connection's
// format (before the connection is known: the path's, else the credential
// slot's).
func (p *Pipeline) Serve(w http.ResponseWriter, r *http.Request) {
	route, perr := formats.ParseRoute(r.URL.EscapedPath())
	c := callPool.Get().(*call)
	*c = call{p: p, w: w, r: r, route: route, envelope: route.Format}
	if e := c.serve(perr); e != nil {
		writeError(w, c.envelope, e)
	}
	// Nothing holds the call once it is served (the usage record's
	// settlement holds the record and the pipeline), so the next request
	// reuses it. A request a forwarder aborts with a panic leaves it to
	// the collector.
	*c = call{}
	callPool.Put(c)
}

// callPool recycles calls: a call carries the request's scanned fields,
// about a kilobyte, which would otherwise be a fresh allocation per
// request.
var callPool = sync.Pool{New: func() any { return new(call) }}

// call is one gateway request in flight.
type call struct {
	p     *Pipeline
	w     http.ResponseWriter
	r     *http.Request
	route formats.Route
	// envelope is the format of gateway-made errors: what the path
	// suggests until the connection is known, then the connection's.
	envelope formats.Format
	query    url.Values

	svc    *service.Service
	conn   *store.Connection
	rec    *store.UsageRecord
	fields formats.Fields
	// body is the client's body, pooled its buffer when it is a pooled
	// one, and out what goes upstream: body with the model (and stream
	// options) rewritten.
	body   []byte
	pooled *pooledBuf
	out    formats.Body
	// model is the connection's model the request asked for; upstream is
	// its provider id.
	model    store.Model
	upstream string
	secret   string

	// Inference API: the workspace model asked for, and its targets in
	// the order to try them.
	requested string
	targets   []service.Target

	// ticket holds the request's counts against policy limits, settled
	// with its tokens when it finishes.
	ticket *quota.Ticket

	// mw is the answer's writer (forward), part of the pooled call.
	mw meterWriter
	// upstreamCtx is the context of the upstream requests (forward): the
	// client's, or for a non-stream answer one the client's departure
	// does not cancel (detach).
	upstreamCtx context.Context
}

// serve answers the request. The credential is checked before anything
// else, the path included: an unknown route with a bad key is 401. perr is
// why the path is not a route, answered once the credential (and, when the
// path names one, the connection) is known.
func (c *call) serve(perr *formats.ParseError) *apierr.Error {
	p, e := c.authenticate()
	if e != nil {
		return e
	}
	if c.route.Inference {
		return c.serveInference(p, perr)
	}
	if c.route.Connection == "" {
		return pathError(perr)
	}
	conn, err := c.svc.LookupConnection(c.r.Context(), p, c.route.Connection)
	if err != nil {
		return apierr.As(err)
	}
	c.conn = conn
	c.envelope = formats.OfKind(conn.Kind, c.route.Format)
	if perr != nil {
		return pathError(perr)
	}
	if m := c.route.HTTPMethod(); c.r.Method != m {
		c.w.Header().Set("Allow", m)
		return apierr.New(http.StatusMethodNotAllowed, "MethodNotAllowed", "this gateway route takes %s", m)
	}
	if c.route.Op == formats.ListModels || c.route.Op == formats.GetModel {
		return listModels(c.w, conn, c.route)
	}
	// From here on the request belongs to a member and a connection: every
	// outcome, refusals included, leaves a usage record.
	c.rec = c.newRecord(p)
	defer func() {
		if c.pooled != nil {
			c.pooled.release() // upstream bodies made of it hold it on (see outgoing)
		}
	}()
	if e := c.admit(); e != nil {
		c.finish(nil, e.Status, formats.MeterResult{})
		return e
	}
	if e := c.checkPolicies(p, c.rec.Model, outputBound(c.model, &c.fields)); e != nil {
		c.finish(nil, e.Status, formats.MeterResult{})
		return e
	}
	// A token count is free: it is recorded but never reserved against a
	// budget, so a member over budget can still count tokens.
	return c.reserveAndForward(p, reservation(c.model, &c.fields, c.out.Len()))
}

// reserveAndForward holds amount against the member's budgets (not for a
// token count) and forwards the request, or answers the budget's refusal.
func (c *call) reserveAndForward(p *service.Principal, amount money.Pico) *apierr.Error {
	var res *ledger.Reservation
	if c.route.Op != formats.CountTokens {
		var err error
		if res, err = c.svc.Ledger.Reserve(c.r.Context(), p.Workspace, p.MemberID(), amount); err != nil {
			e := budgetError(err)
			if e.Tag == "BudgetExceeded" {
				c.p.Metrics.of(c.route.Format).refused.Inc()
			}
			c.finish(nil, e.Status, formats.MeterResult{})
			return e
		}
	}
	return c.forward(res)
}

// authenticate takes the client's credential, removes it from the request
// at once (so that no later step, and no access log, sees it) and
// resolves it; an in-process request acts as the member its context
// carries instead (WithMember).
func (c *call) authenticate() (*service.Principal, *apierr.Error) {
	r := c.r
	if r.URL.RawQuery != "" {
		c.query = r.URL.Query() // nil otherwise: the common request has no query to parse
	}
	cred, conflict := formats.ClientCredential(r.Header, c.query[formats.QueryKey])
	if !c.envelope.Valid() {
		c.envelope = formats.CredentialFormat(r.Header, c.query.Get(formats.QueryKey))
	}
	orgID := headerValue(r.Header, "X-Org-Id")
	stripClientSecrets(r, c.query)
	if conflict {
		return nil, ambiguousCredential()
	}

	svc, err := c.p.Service(r.Context())
	if err != nil {
		return nil, apierr.As(err)
	}
	c.svc = svc
	if cred == "" {
		if m, ok := memberOf(r.Context()); ok {
			// An in-process request of an instance's member (LocalTransport,
			// which sends no credential): the member is read from the store
			// now, so that an account deleted in the Console is refused from
			// its next request on.
			p, err := svc.InstancePrincipal(r.Context(), m.Workspace, m.ServiceAccount, m.Instance)
			if err != nil {
				return nil, apierr.As(err)
			}
			return p, nil
		}
		return nil, apierr.Unauthorized()
	}
	p, err := svc.Authenticate(r.Context(), cred, orgID)
	if err != nil {
		return nil, apierr.As(err)
	}
	return p, nil
}

func (c *call) newRecord(p *service.Principal) *store.UsageRecord {
	rec := &store.UsageRecord{Workspace: p.Workspace, MemberID: p.MemberID(), MemberKind: store.MemberPerson,
		KeyID: p.KeyID, FamilyID: p.FamilyID, Format: c.route.Format.String(), Model: c.route.Model,
		Session: requestSession(c.r.Header)}
	if c.conn != nil {
		rec.Connection = c.conn.ID
	}
	if c.route.Op == formats.CountTokens {
		rec.Operation = store.OpCountTokens
	}
	if p.Kind == service.KindServiceKey {
		rec.MemberKind = store.MemberServiceAccount
	}
	if c.p.RequestID != nil {
		rec.RequestID = c.p.RequestID(c.r)
	}
	return rec
}

// admit checks what the request asks for against the connection: its
// format, its body and its model; it reads the body and the provider
// credential.
func (c *call) admit() *apierr.Error {
	conn, route := c.conn, c.route
	if !formats.Supports(conn.Kind, route.Format) {
		return apierr.NotFound("NotFound", "connection %s (%s) does not serve the %s format", conn.ID, conn.Kind, route.Format)
	}
	requested, e := c.readRequest()
	if e != nil {
		return e
	}
	model, ok := conn.Models[requested]
	if !ok || !model.Enabled {
		return apierr.New(http.StatusForbidden, "ModelNotEnabled", "model %q is not enabled on this connection", requested)
	}
	upstream := requested
	if model.UpstreamID != "" {
		upstream = model.UpstreamID
	}
	if e := route.Rewrite(&c.out, &c.fields, requested, upstream); e != nil {
		return e
	}
	c.model, c.upstream = model, upstream
	c.rec.UpstreamModel = upstream
	secret, err := c.svc.Credential(conn)
	if err != nil {
		c.p.Logger.Error("provider credential cannot be decrypted", zap.String("connection", conn.ID))
		return apierr.New(http.StatusBadGateway, "UpstreamCredentialUnavailable", "the connection's provider credential cannot be used")
	}
	c.secret = secret
	return nil
}

// readRequest reads the body and the fields the gateway uses, checks
// them, and returns the model the request asks for.
func (c *call) readRequest() (string, *apierr.Error) {
	route := c.route
	if enc := headerValue(c.r.Header, "Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return "", apierr.New(http.StatusUnsupportedMediaType, "UnsupportedMediaType", "compressed request bodies (%s) are not accepted; send plain JSON", enc)
	}
	body, pooled, e := readBody(c.w, c.r, c.p.MaxRequestBody)
	if e != nil {
		return "", e
	}
	c.body, c.pooled, c.out = body, pooled, formats.NewBody(body)
	var ok bool
	if c.fields, ok = formats.ScanBody(body, route.Format); !ok {
		return "", apierr.BadRequest("the request body must be a JSON object (UTF-8, nested at most %d levels deep)", formats.MaxDepth)
	}
	if pooled != nil {
		// The fields are read while the call holds the buffer, but the
		// usage record keeps the model after it went back.
		c.fields.KeepModel()
	}
	if e := c.fields.Refusal(); e != nil {
		return "", e
	}
	if !route.Format.ModelInPath() {
		c.rec.Model = c.fields.BodyModel()
	}
	requested, e := route.RequestedModel(&c.fields)
	if e != nil {
		return "", e
	}
	c.rec.Model = requested
	return requested, route.Check(&c.fields)
}

// budgetError is the answer to a reservation the ledger refused.
func budgetError(err error) *apierr.Error {
	var exceeded *ledger.ExceededError
	if !errors.As(err, &exceeded) {
		return apierr.As(err)
	}
	e := apierr.New(http.StatusPaymentRequired, "BudgetExceeded", "budget exceeded: %s USD remaining of %s USD; this request may cost up to %s USD",
		exceeded.Remaining, exceeded.Limit, exceeded.Needed)
	e.Fields = map[string]any{"remaining_usd": exceeded.Remaining, "limit_usd": exceeded.Limit}
	if !exceeded.ResetsAt.IsZero() {
		e.Fields["resets_at"] = exceeded.ResetsAt
	}
	return e
}

// forward sends the admitted request upstream and meters the answer.
func (c *call) forward(res *ledger.Reservation) (fe *apierr.Error) {
	route := c.route
	counting := route.Op == formats.CountTokens
	opts := formats.MeterOptions{Format: route.Format, StreamRequested: !counting && (route.Stream() || c.fields.Stream()),
		RequestBytes: int64(c.out.Len())}
	mw := &c.mw
	*mw = meterWriter{ResponseWriter: c.w, start: time.Now(), unmetered: counting}
	// Account in a deferred call: a forwarder aborts a response cut by
	// either side with a panic (http.ErrAbortHandler), and such a request
	// must be recorded and charged too.
	defer func() {
		status := mw.status
		if fe != nil {
			status = fe.Status
		}
		if status == 0 {
			status = http.StatusBadGateway
		}
		fm := c.p.Metrics.of(route.Format)
		fm.duration.Observe(time.Since(mw.start).Seconds())
		if mw.status != 0 {
			fm.firstByte.Observe(mw.firstByte.Seconds())
		}
		result, _ := mw.result()
		c.rec.Streamed = opts.StreamRequested
		c.rec.ClientDisconnected = c.r.Context().Err() != nil || mw.clientGone
		c.rec.Cost = formats.Cost(result.Tokens, c.model.Pricing)
		c.finish(res, status, result)
	}()
	c.upstreamCtx = c.r.Context()
	if !counting && !opts.StreamRequested && c.r.Context().Err() == nil {
		// The provider answers, and bills, a request it was handed even
		// when the client leaves: its answer is read and metered to the
		// end (disconnect.go). A client already gone is not forwarded
		// to: its cancelled context stops the forwarder before anything
		// is sent, as before.
		var d *detached
		c.upstreamCtx, d = c.p.detach(c.r.Context(), c.rec.RequestID, c.rec.Session)
		defer c.p.release(d) // before the accounting above
		mw.drain = true
	}
	if route.Inference {
		return c.tryTargets(mw, &opts)
	}
	if opts.StreamRequested {
		opts.DropUsageChunk = route.PrepareStream(&c.out, &c.fields)
	}
	mw.opts = opts
	return c.send(mw)
}

// send forwards the request once and maps a forwarder's failure before
// any answer to the gateway's error.
func (c *call) send(mw *meterWriter) *apierr.Error {
	route := c.route
	to, err := c.p.upstreamOf(c.conn.BaseURL)
	if err != nil {
		return apierr.New(http.StatusBadGateway, "UpstreamUnreachable", "the connection's base URL is invalid")
	}
	out := c.outgoing(c.upstreamCtx, to)
	if ce := c.p.Logger.Check(zapcore.DebugLevel, "forwarding"); ce != nil {
		ce.Write(zap.String("connection", c.conn.ID), zap.String("format", route.Format.String()), zap.String("model", c.upstream))
	}
	err = c.p.Forwarder.Forward(mw, out, to.Upstream)
	if err != nil && mw.status == 0 {
		var fwd *ForwardError
		if errors.As(err, &fwd) && fwd.Status == http.StatusGatewayTimeout {
			return apierr.New(fwd.Status, "UpstreamTimeout", "the provider did not answer in time")
		}
		status := http.StatusBadGateway
		if fwd != nil && fwd.Status != 0 {
			status = fwd.Status
		}
		return apierr.New(status, "UpstreamUnreachable", "the provider could not be reached")
	}
	return nil
}

// finish completes and records a request's usage: settled against its
// reservation in the background (so the response does not wait for the
// durable write), or appended on its own when it was never admitted.
func (c *call) finish(res *ledger.Reservation, status int, result formats.MeterResult) {
	rec, svc := c.rec, c.svc
	now := svc.Clock.Now().UTC()
	rec.ID, rec.Time, rec.Status = ledger.UsageID(now), now, status
	if len(rec.Model) > 256 {
		rec.Model = rec.Model[:256]
	}
	rec.Tokens = result.Tokens
	rec.Estimated = result.Estimated
	c.p.quotas.Settle(c.ticket, rec.Tokens.Total())
	if c.p.Annotate != nil {
		c.p.Annotate(c.r, rec)
	}
	f, p := c.route.Format, c.p
	record := func(err error) {
		if err != nil {
			p.Logger.Error("recording usage failed", zap.String("workspace", rec.Workspace), zap.String("usage_id", rec.ID), zap.Error(err))
			return
		}
		p.Metrics.observe(f, status, rec.Tokens, rec.Cost)
	}
	if res == nil {
		record(svc.Ledger.Record(c.r.Context(), rec))
		return
	}
	res.SettleAsync(rec, record)
}

// ambiguousCredential answers a request whose credential slots carry two
// different credentials, before either is resolved: valid or not, neither
// is taken over the other.
func ambiguousCredential() *apierr.Error {
	return apierr.AmbiguousCredential("the request carries two different credentials (Authorization, x-api-key, api-key, x-goog-api-key or ?key=); send one")
}

// stripClientSecrets removes every client credential, cookie and x-org-id
// from the request, and ?key= from its URL and request URI.
func stripClientSecrets(r *http.Request, q url.Values) {
	for _, h := range formats.ClientCredentialHeaders {
		delete(r.Header, h)
	}
	for _, h := range clientSecretHeaders {
		delete(r.Header, h)
	}
	if q.Has(formats.QueryKey) {
		q.Del(formats.QueryKey)
		r.URL.RawQuery = q.Encode()
		r.RequestURI = r.URL.RequestURI()
	}
}

// clientSecretHeaders are the client's headers besides its credentials
// that never go upstream.
var clientSecretHeaders = [...]string{"Cookie", "X-Org-Id", "Proxy-Authorization"}

// headerValue is h.Get(name) for a name in the canonical form the server
// receives every header name in: one map lookup, without canonicalising
// the name again on each request. The names the gateway reads and removes
// are written canonical (TestHeaderNamesCanonical), as are the formats'
// credential headers.
func headerValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// pathError answers a path that is not a gateway route.
func pathError(perr *formats.ParseError) *apierr.Error {
	tag := "InvalidRequest"
	if perr.Status == http.StatusNotFound {
		tag = "NotFound"
	}
	return apierr.New(perr.Status, tag, "%s", perr.Message)
}

func writeError(w http.ResponseWriter, f formats.Format, e *apierr.Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		// A refused credential stays refused: the provider SDKs and Claude
		// Code read this header and do not send the request again (Claude
		// Code asks its user to sign in again instead).
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.Status)
	w.Write(formats.ErrorBody(f, e.Status, e.Tag, e.Message, e.Fields))
}

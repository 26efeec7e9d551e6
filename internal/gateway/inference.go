package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// The Inference API routes a request by its model: a workspace model (the
// id a client sends) names targets, models of the workspace's connections,
// and the request goes to the first target that speaks its format. A
// target that cannot be reached, or answers 429 or 5xx before anything
// reached the client, is left for the next one, within MaxAttempts and
// Deadline; once the client has the first byte of an answer, that answer
// is the request's. Targets that failed are tried after the others for a
// cool-down. The budget is reserved once, for the dearest target, and only
// the answering attempt is metered and charged; the usage record lists the
// failed attempts.

// Fallback bounds how a request moves between a model's targets. Zero
// fields take their defaults.
type Fallback struct {
	// MaxAttempts is the most targets one request tries. Default 3.
	MaxAttempts int
	// TryTimeout bounds the wait for one target's response headers when
	// another target could still be tried. Default 30s.
	TryTimeout time.Duration
	// Deadline bounds the time from the first attempt to the answer's
	// response headers, over all attempts of a request that has more than
	// one target. Default 2m.
	Deadline time.Duration
	// Cooldown is how long a target that failed is tried only after the
	// others. Default 30s.
	Cooldown time.Duration
}

func (f Fallback) withDefaults() Fallback {
	if f.MaxAttempts <= 0 {
		f.MaxAttempts = 3
	}
	if f.TryTimeout <= 0 {
		f.TryTimeout = 30 * time.Second
	}
	if f.Deadline <= 0 {
		f.Deadline = 2 * time.Minute
	}
	if f.Cooldown <= 0 {
		f.Cooldown = 30 * time.Second
	}
	return f
}

// cooldowns remembers until when targets that failed are tried last. n
// counts the entries, so that a gateway with none pays nothing.
type cooldowns struct {
	m sync.Map // connection + "\x00" + model → time.Time
	n atomic.Int64
}

func targetKey(t service.Target) string { return t.Conn.ID + "\x00" + t.ModelID }

func (c *cooldowns) fail(t service.Target, until time.Time) {
	if _, loaded := c.m.Swap(targetKey(t), until); !loaded {
		c.n.Add(1)
	}
}

func (c *cooldowns) ok(t service.Target) {
	if c.n.Load() == 0 {
		return
	}
	if _, loaded := c.m.LoadAndDelete(targetKey(t)); loaded {
		c.n.Add(-1)
	}
}

// order moves the targets that are cooling down behind the others,
// keeping the order within each group.
// ts is not changed: the result is ts itself when nothing cools down.
func (c *cooldowns) order(ts []service.Target, now time.Time) []service.Target {
	if c.n.Load() == 0 || len(ts) < 2 {
		return ts
	}
	cooling := make([]bool, len(ts))
	found := false
	for i, t := range ts {
		if v, ok := c.m.Load(targetKey(t)); ok && now.Before(v.(time.Time)) {
			cooling[i], found = true, true
		}
	}
	if !found {
		return ts
	}
	out := make([]service.Target, 0, len(ts))
	for pass := range 2 {
		for i, t := range ts {
			if cooling[i] == (pass == 1) {
				out = append(out, t)
			}
		}
	}
	return out
}

// serveInference answers a request of the Inference API once its
// credential is known.
func (c *call) serveInference(p *service.Principal, perr *formats.ParseError) *apierr.Error {
	if perr != nil {
		return pathError(perr)
	}
	if m := c.route.HTTPMethod(); c.r.Method != m {
		c.w.Header().Set("Allow", m)
		return apierr.New(http.StatusMethodNotAllowed, "MethodNotAllowed", "this gateway route takes %s", m)
	}
	if c.route.Op == formats.ListModels || c.route.Op == formats.GetModel {
		return c.listWorkspaceModels(p)
	}
	c.rec = c.newRecord(p)
	defer func() {
		if c.pooled != nil {
			c.pooled.release()
		}
	}()
	if e := c.admitInference(p); e != nil {
		c.finish(nil, e.Status, formats.MeterResult{})
		return e
	}
	var maxOut int64
	for _, t := range c.targets {
		maxOut = max(maxOut, outputBound(t.Model, &c.fields))
	}
	if e := c.checkPolicies(p, c.requested, maxOut); e != nil {
		c.finish(nil, e.Status, formats.MeterResult{})
		return e
	}
	var worst money.Pico
	for _, t := range c.targets {
		worst = max(worst, reservation(t.Model, &c.fields, c.out.Len()))
	}
	return c.reserveAndForward(p, worst)
}

// admitInference reads the body, finds the workspace model it names and
// the targets that speak the request's format, in the order to try them.
func (c *call) admitInference(p *service.Principal) *apierr.Error {
	route := c.route
	requested, e := c.readRequest()
	if e != nil {
		return e
	}
	rt, err := c.svc.LookupModel(c.r.Context(), p, requested)
	if err != nil {
		return apierr.As(err)
	}
	if len(rt.Targets) == 0 {
		return apierr.New(http.StatusForbidden, "ModelNotEnabled", "model %q has no enabled target: its connections' models are disabled or gone", requested)
	}
	ts := rt.Serves(route.Format)
	if len(ts) == 0 {
		have := rt.Formats()
		e := apierr.BadRequest("model %q is served in the %s format(s), not %s; send the request in one of those", requested, strings.Join(have, ", "), route.Format)
		e.Fields = map[string]any{"formats": have}
		return e
	}
	ts = c.p.cool.order(ts, c.svc.Clock.Now())
	if n := c.p.Fallback.withDefaults().MaxAttempts; len(ts) > n {
		ts = ts[:n]
	}
	c.targets, c.requested = ts, requested
	return nil
}

// useTarget points the call at a target: its connection, model, body (the
// client's, edited for the target: every target's body reads the same
// buffer) and provider credential.
func (c *call) useTarget(t service.Target, opts *formats.MeterOptions) *apierr.Error {
	upstream := t.ModelID
	if t.Model.UpstreamID != "" {
		upstream = t.Model.UpstreamID
	}
	c.out = formats.NewBody(c.body)
	if e := c.route.Rewrite(&c.out, &c.fields, c.requested, upstream); e != nil {
		return e
	}
	if opts.StreamRequested {
		opts.DropUsageChunk = c.route.PrepareStream(&c.out, &c.fields)
	}
	c.conn, c.model, c.upstream = t.Conn, t.Model, upstream
	c.rec.Connection, c.rec.UpstreamModel = t.Conn.ID, upstream
	secret, err := c.svc.Credential(t.Conn)
	if err != nil {
		c.p.Logger.Error("provider credential cannot be decrypted", zap.String("connection", t.Conn.ID))
		return apierr.New(http.StatusBadGateway, "UpstreamCredentialUnavailable", "the connection's provider credential cannot be used")
	}
	c.secret = secret
	return nil
}

// tryTargets sends the request to its targets in turn. With one target it
// is a plain forward; with several, each attempt's answer reaches the
// client only if its status is not one to move on from.
func (c *call) tryTargets(mw *meterWriter, opts *formats.MeterOptions) *apierr.Error {
	if len(c.targets) == 1 {
		if e := c.useTarget(c.targets[0], opts); e != nil {
			return e
		}
		mw.opts = *opts
		e := c.send(mw)
		c.noteOutcome(c.targets[0], mw.status, e != nil)
		return e
	}
	fb := c.p.Fallback.withDefaults()
	header := c.r.Header.Clone()
	deadline := time.Now().Add(fb.Deadline)
	var attempts []store.Attempt
	for i, t := range c.targets {
		if i > 0 {
			c.r.Header = header.Clone() // no connection's headers carry over
		}
		if err := c.r.Context().Err(); err != nil {
			break // the client left
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if e := c.useTarget(t, opts); e != nil {
			attempts = append(attempts, store.Attempt{Connection: t.Conn.ID, Error: e.Tag})
			continue
		}
		mw.opts = *opts
		tw := &tryWriter{next: mw, header: http.Header{}}
		wait := min(fb.TryTimeout, left)
		status, reason := c.attempt(tw, wait)
		if reason == "" {
			c.p.cool.ok(t)
			c.rec.Attempts = attempts
			return nil
		}
		gone := c.r.Context().Err() != nil
		if gone && status == 0 {
			break // cut off with its client: not the target's failure
		}
		c.p.cool.fail(t, c.svc.Clock.Now().Add(fb.Cooldown))
		attempts = append(attempts, store.Attempt{Connection: t.Conn.ID, Status: status, Error: reason})
		if gone {
			break // the client left: no other target is started
		}
	}
	c.rec.Attempts = attempts
	c.rec.Connection, c.rec.UpstreamModel = "", ""
	c.model = store.Model{}
	e := apierr.New(http.StatusBadGateway, "AllTargetsFailed", "no target of model %q answered: %s", c.requested, describe(attempts))
	e.Fields = map[string]any{"attempts": attempts}
	return e
}

// attempt sends the request once through tw, waiting at most wait for the
// response headers. reason is "" when the answer went to the client, else
// why the next target is tried.
//
// A client that leaves during the attempt makes it the last (tryTargets
// starts no other): the wait for headers no longer applies, and a
// non-stream attempt, whose upstream context the client's departure does
// not cancel (c.upstreamCtx, see disconnect.go), is answered, read and
// metered like any non-stream request.
func (c *call) attempt(tw *tryWriter, wait time.Duration) (status int, reason string) {
	ctx, cancel := context.WithCancel(c.upstreamCtx)
	defer cancel()
	timer := time.AfterFunc(wait, func() {
		if tw.state.CompareAndSwap(tryWaiting, tryTimedOut) {
			cancel()
		}
	})
	defer context.AfterFunc(c.r.Context(), func() { timer.Stop() })()
	to, err := c.p.upstreamOf(c.conn.BaseURL)
	if err != nil {
		timer.Stop()
		return 0, "UpstreamUnreachable"
	}
	out := c.outgoing(ctx, to)
	err = c.p.Forwarder.Forward(tw, out, to.Upstream)
	timer.Stop()
	switch tw.state.Load() {
	case tryPassing:
		return tw.status, ""
	case tryRefused:
		return tw.status, "UpstreamStatus"
	case tryTimedOut:
		return 0, "UpstreamTimeout"
	}
	if err == nil {
		return 0, "UpstreamNoAnswer"
	}
	return 0, "UpstreamUnreachable"
}

// noteOutcome keeps the cool-down of a single target's model current.
func (c *call) noteOutcome(t service.Target, status int, failed bool) {
	if failed || retryable(status) {
		c.p.cool.fail(t, c.svc.Clock.Now().Add(c.p.Fallback.withDefaults().Cooldown))
		return
	}
	c.p.cool.ok(t)
}

func describe(attempts []store.Attempt) string {
	parts := make([]string, len(attempts))
	for i, a := range attempts {
		parts[i] = a.Connection + " " + a.Error
		if a.Status != 0 {
			parts[i] += " " + http.StatusText(a.Status)
		}
	}
	return strings.Join(parts, "; ")
}

// retryable reports whether an answer's status lets another target try:
// 429 and 5xx.
func retryable(status int) bool { return status == http.StatusTooManyRequests || status >= 500 }

// States of a tryWriter.
const (
	tryWaiting  int32 = iota
	tryPassing        // the answer goes to the client
	tryRefused        // the status was 429 or 5xx: the answer is dropped
	tryTimedOut       // no headers in time: the attempt was cancelled
)

// tryWriter is the writer of one attempt that another target may replace:
// it keeps the attempt's response headers to itself until the status is
// known, then either passes the answer on to the client or drops it.
type tryWriter struct {
	next   *meterWriter
	header http.Header
	state  atomic.Int32
	status int
}

func (w *tryWriter) Header() http.Header { return w.header }

func (w *tryWriter) WriteHeader(status int) {
	if status < 200 || w.state.Load() != tryWaiting {
		return // informational answers are not passed on
	}
	if retryable(status) {
		if w.state.CompareAndSwap(tryWaiting, tryRefused) {
			w.status = status
		}
		return
	}
	if !w.state.CompareAndSwap(tryWaiting, tryPassing) {
		return // timed out meanwhile
	}
	w.status = status
	dst := w.next.Header()
	for k, v := range w.header {
		dst[k] = v
	}
	w.next.WriteHeader(status)
}

func (w *tryWriter) Write(p []byte) (int, error) {
	if w.state.Load() == tryWaiting {
		w.WriteHeader(http.StatusOK)
	}
	if w.state.Load() != tryPassing {
		return len(p), nil
	}
	return w.next.Write(p)
}

// Flush flushes a passing answer; a dropped one must not send the
// client's headers.
func (w *tryWriter) Flush() {
	if w.state.Load() == tryPassing {
		_ = http.NewResponseController(w.next).Flush()
	}
}

// Unwrap reaches the client's writer only once the answer is passing.
func (w *tryWriter) Unwrap() http.ResponseWriter {
	if w.state.Load() == tryPassing {
		return w.next
	}
	return nil
}

// listWorkspaceModels answers GET /v1/models (/v1beta/models) and
// GET /v1/models/<id> from the store: the workspace's models that have an
// enabled target, in Anthropic's shape when the request carries
// anthropic-version, Google's on /v1beta, else OpenAI's.
func (c *call) listWorkspaceModels(p *service.Principal) *apierr.Error {
	f := c.route.Format
	if !f.Valid() {
		f = formats.Chat
		if c.r.Header.Get("anthropic-version") != "" {
			f = formats.Anthropic
		}
	}
	c.envelope = f
	routes, err := c.svc.InferenceModels(c.r.Context(), p)
	if err != nil {
		return apierr.As(err)
	}
	info := func(r *service.Route) formats.ModelInfo {
		_, out := r.Targets[0].Model.Limits()
		return formats.ModelInfo{ID: r.Model.ID, Name: r.Model.Name, Created: r.Model.Created, MaxOutputTokens: out}
	}
	var body []byte
	if c.route.Op == formats.GetModel {
		id := strings.TrimPrefix(c.route.Model, "models/")
		var found *service.Route
		for _, r := range routes {
			if r.Model.ID == id {
				found = r
			}
		}
		if found == nil {
			return apierr.NotFound("ModelNotFound", "model %q is not a model of this workspace", id)
		}
		body = formats.ModelObject(f, info(found), "agentgate")
	} else {
		list := make([]formats.ModelInfo, len(routes))
		for i, r := range routes {
			list[i] = info(r)
		}
		body = formats.ModelList(f, list, "agentgate")
	}
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	c.w.WriteHeader(http.StatusOK)
	c.w.Write(body)
	return nil
}

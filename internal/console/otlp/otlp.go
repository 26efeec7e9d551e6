// Package otlp is the Console's telemetry relay: it takes the
// OpenTelemetry a signed-in person's Claude Code CLI sends (OTLP over
// HTTP, protobuf or JSON, to /v1/metrics, /v1/logs and /v1/traces on the
// origin it signed in to), stamps every resource with who sent it — the
// member, their workspace and sign-in, read from their access token, never
// from what the client claims — and forwards it to the operator's OTLP
// collector, or drops it when none is configured. Only people's access
// tokens are accepted; bodies and rates are bounded; nothing of a body or a
// token is logged. It has no Caddy import; the workspace_console handler
// mounts it.
package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/quota"
	"github.com/agentgate/agentgate/internal/service"
)

// The signals' paths, on the Console's origin and on the collector's.
var signals = map[string]signal{
	"/v1/metrics": metrics,
	"/v1/logs":    logs,
	"/v1/traces":  traces,
}

// Handles reports whether the relay serves a path.
func Handles(path string) bool {
	_, ok := signals[path]
	return ok
}

// Defaults of the relay's bounds.
const (
	DefaultMaxBody           = 4 << 20
	DefaultRequestsPerMinute = 120
	DefaultTimeout           = 10 * time.Second
	DefaultInFlight          = 64
)

// The content types of OTLP over HTTP.
const (
	typeProtobuf = "application/x-protobuf"
	typeJSON     = "application/json"
)

// Options configure a relay.
type Options struct {
	// Service returns the Console service, or an error (503).
	Service func(ctx context.Context) (*service.Service, error)
	// Endpoint is the collector's OTLP/HTTP base URL: a signal goes to
	// Endpoint + /v1/<signal>. Empty: telemetry is accepted and dropped.
	Endpoint string
	// Headers are sent to the collector with every export (its own
	// credentials, say).
	Headers map[string]string
	// MaxBody bounds a request's body in bytes, after decompression
	// (413 beyond). Default DefaultMaxBody.
	MaxBody int64
	// RequestsPerMinute bounds the exports of one sign-in per minute
	// (429 beyond, with Retry-After). Default DefaultRequestsPerMinute.
	RequestsPerMinute int64
	// Timeout bounds one export to the collector. Default DefaultTimeout.
	Timeout time.Duration
	// InFlight bounds the exports on their way to the collector; past it,
	// new ones are dropped (and the drop logged). Default DefaultInFlight.
	InFlight int
	// Client sends the exports. Default: a client of its own.
	Client *http.Client
	// Clock times the rate limit. Default: the real clock.
	Clock clock.Clock
	// Logger reports failed exports (never a body or a token).
	Logger *zap.Logger
}

// Relay serves the signals' routes.
type Relay struct {
	opts     Options
	limiter  quota.Limiter
	slots    chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	lastWarn atomic.Int64 // unix nanoseconds of the last warning, to log at most one every warnEvery
	dropped  atomic.Int64
}

// warnEvery spaces the warnings about a failing collector.
const warnEvery = 30 * time.Second

// New builds a relay.
func New(opts Options) *Relay {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.RequestsPerMinute <= 0 {
		opts.RequestsPerMinute = DefaultRequestsPerMinute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.InFlight <= 0 {
		opts.InFlight = DefaultInFlight
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: opts.Timeout}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	opts.Endpoint = strings.TrimRight(opts.Endpoint, "/")
	ctx, cancel := context.WithCancel(context.Background())
	return &Relay{opts: opts, slots: make(chan struct{}, opts.InFlight), ctx: ctx, cancel: cancel}
}

// Forwards reports whether the relay has a collector to forward to.
func (rl *Relay) Forwards() bool { return rl.opts.Endpoint != "" }

// Close stops the exports under way and waits for them.
func (rl *Relay) Close() {
	rl.cancel()
	rl.wg.Wait()
}

// ClientEnv is the environment that makes a Claude Code CLI export its
// metrics, logs (events) and traces to the relay at origin, over OTLP/HTTP
// with protobuf; the CLI sends its access token with them.
func ClientEnv(origin string) map[string]string {
	return map[string]string{
		"CLAUDE_CODE_ENABLE_TELEMETRY": "1",
		"OTEL_METRICS_EXPORTER":        "otlp",
		"OTEL_LOGS_EXPORTER":           "otlp",
		"OTEL_TRACES_EXPORTER":         "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL":  "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT":  strings.TrimRight(origin, "/"),
	}
}

// ServeHTTP takes one export: POST, a person's access token, a body of at
// most MaxBody bytes (gzip allowed) in protobuf or JSON. It answers 200
// once the export is stamped and on its way to the collector (or dropped
// when there is none): the CLI's exporter should not retry what the
// collector does with it.
func (rl *Relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sig := signals[r.URL.Path]
	asJSON := false
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil {
		asJSON = mt == typeJSON
	}
	fail := func(err error) { writeError(w, asJSON, err) }
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		fail(apierr.New(http.StatusMethodNotAllowed, "MethodNotAllowed", "telemetry is sent with POST"))
		return
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != typeProtobuf && mt != typeJSON) {
		fail(apierr.New(http.StatusUnsupportedMediaType, "UnsupportedMediaType", "OTLP telemetry is application/x-protobuf or application/json"))
		return
	}
	svc, err := rl.opts.Service(r.Context())
	if err != nil {
		fail(err)
		return
	}
	cred, conflict := service.ConsoleBearer(r.Header)
	switch {
	case conflict:
		fail(apierr.AmbiguousCredential("the request carries two different bearer credentials; send one"))
		return
	case cred == "":
		fail(apierr.Unauthorized())
		return
	}
	p, err := svc.Authenticate(r.Context(), cred, r.Header.Get("x-org-id"))
	if err != nil {
		fail(err)
		return
	}
	if p.Kind != service.KindPerson {
		fail(apierr.Forbidden("telemetry is accepted from people signed in to the workspace, not from keys"))
		return
	}
	if _, refusal := rl.limiter.Admit(rl.opts.Clock.Now(), []string{p.FamilyID}, []quota.Limit{{Requests: rl.opts.RequestsPerMinute}}, 0); refusal != nil {
		secs := int(refusal.RetryAt.Sub(rl.opts.Clock.Now()).Seconds() + 0.999)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		fail(apierr.New(http.StatusTooManyRequests, "RateLimited", "at most %d telemetry exports a minute per sign-in", rl.opts.RequestsPerMinute))
		return
	}
	body, err := rl.readBody(w, r)
	if err != nil {
		fail(err)
		return
	}
	id, err := svc.TelemetryIdentity(r.Context(), p)
	if err != nil {
		fail(err)
		return
	}
	attrs := identityAttributes(id)
	var out []byte
	if asJSON {
		out, err = stampJSON(sig, body, attrs)
	} else {
		out, err = stampProtobuf(sig, body, attrs)
	}
	if err != nil {
		fail(apierr.BadRequest("the %s export is not valid OTLP %s: %v", sig, map[bool]string{true: "JSON", false: "protobuf"}[asJSON], err))
		return
	}
	if rl.Forwards() {
		rl.forward(sig, mt, out)
	}
	if asJSON {
		w.Header().Set("Content-Type", typeJSON)
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("{}"))
		return
	}
	// An empty Export*ServiceResponse.
	w.Header().Set("Content-Type", typeProtobuf)
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// readBody reads at most MaxBody bytes, gunzipped when the client
// compressed them.
func (rl *Relay) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit := rl.opts.MaxBody
	tooLarge := apierr.New(http.StatusRequestEntityTooLarge, "PayloadTooLarge", "a telemetry export holds at most %d bytes", limit)
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	var rd io.Reader = http.MaxBytesReader(w, r.Body, limit)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(rd)
		if err != nil {
			return nil, bodyError(err, tooLarge, "the gzip body")
		}
		defer gz.Close()
		rd = gz
	default:
		return nil, apierr.New(http.StatusUnsupportedMediaType, "UnsupportedMediaType", "Content-Encoding %q is not supported (gzip is)", enc)
	}
	b, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, bodyError(err, tooLarge, "the body")
	}
	if int64(len(b)) > limit {
		return nil, tooLarge
	}
	return b, nil
}

func bodyError(err error, tooLarge *apierr.Error, what string) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge
	}
	return apierr.BadRequest("reading %s: %v", what, err)
}

// forward sends a stamped export to the collector in the background, if
// a slot is free; otherwise it is dropped.
func (rl *Relay) forward(sig signal, contentType string, body []byte) {
	select {
	case rl.slots <- struct{}{}:
	default:
		rl.dropped.Add(1)
		rl.warn("telemetry export dropped: too many exports on their way to the collector", zap.String("signal", sig.String()),
			zap.Int64("dropped", rl.dropped.Load()))
		return
	}
	rl.wg.Add(1)
	go func() {
		defer func() {
			<-rl.slots
			rl.wg.Done()
		}()
		ctx, cancel := context.WithTimeout(rl.ctx, rl.opts.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rl.opts.Endpoint+sig.path(), bytes.NewReader(body))
		if err != nil {
			rl.warn("telemetry export not sent", zap.String("signal", sig.String()), zap.Error(err))
			return
		}
		for k, v := range rl.opts.Headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", contentType)
		res, err := rl.opts.Client.Do(req)
		if err != nil {
			// The error without the URL, which may carry credentials.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			rl.warn("telemetry export to the collector failed", zap.String("signal", sig.String()), zap.Error(err))
			return
		}
		io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			rl.warn("the collector refused a telemetry export", zap.String("signal", sig.String()), zap.Int("status", res.StatusCode))
		}
	}()
}

// warn logs at most one warning every warnEvery.
func (rl *Relay) warn(msg string, fields ...zap.Field) {
	now := rl.opts.Clock.Now().UnixNano()
	last := rl.lastWarn.Load()
	if last != 0 && now-last < int64(warnEvery) || !rl.lastWarn.CompareAndSwap(last, now) {
		return
	}
	rl.opts.Logger.Warn(msg, fields...)
}

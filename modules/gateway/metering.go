package gateway

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/modules/gateway/formats"
	"github.com/agentgate/agentgate/modules/gateway/usage"
	"github.com/agentgate/agentgate/modules/store"
)

// DefaultMaxOutputTokens bounds the output of a request that sets no limit
// and whose model has no max_output_tokens, for budget reservations.
const DefaultMaxOutputTokens = 131072

// outputCap is the request's own output limit, if it sets one.
func outputCap(f formats.Format, fl *fields) int64 {
	var cands []gjson.Result
	switch f {
	case formats.Chat:
		cands = []gjson.Result{fl.maxCompletionTokens, fl.maxTokens}
	case formats.Responses:
		cands = []gjson.Result{fl.maxOutput}
	case formats.Anthropic:
		cands = []gjson.Result{fl.maxTokens}
	case formats.Google:
		cands = []gjson.Result{fl.generationConfig.Get("maxOutputTokens"), fl.generationConfigSnakeCase.Get("max_output_tokens")}
	}
	for _, v := range cands {
		if v.Type == gjson.Number && v.Int() > 0 {
			return v.Int()
		}
	}
	return 0
}

// reservation is an upper bound of a request's cost: every byte of the body
// as an input token at the dearest input rate (a token is at least one
// byte), plus the output limit at the dearest output rate.
func reservation(f formats.Format, m store.Model, fl *fields, bodyLen int) money.Pico {
	p := m.Pricing
	in := p.Input
	for _, alt := range []*money.Micros{p.CacheRead, p.CacheWrite} {
		if alt != nil && *alt > in {
			in = *alt
		}
	}
	out := p.Output
	if p.Reasoning != nil && *p.Reasoning > out {
		out = *p.Reasoning
	}
	maxOut := outputCap(f, fl)
	if maxOut == 0 {
		maxOut = m.MaxOutputTokens
	}
	if maxOut == 0 {
		maxOut = DefaultMaxOutputTokens
	}
	if f == formats.Google {
		if tb := fl.generationConfig.Get("thinkingConfig.thinkingBudget"); tb.Type == gjson.Number && tb.Int() > 0 {
			maxOut += tb.Int()
		}
	}
	return usage.Cost(usage.Tokens{Input: int64(bodyLen), Output: maxOut}, store.Pricing{Input: in, Output: out})
}

// meterWriter sits between the reverse proxy and the client: it notes the
// status and time to first byte, and feeds the body through a usage Meter
// created when the response headers are known.
type meterWriter struct {
	*caddyhttp.ResponseWriterWrapper
	opts      usage.Options
	meter     *usage.Meter
	status    int
	firstByte time.Duration
	start     time.Time
}

func (w *meterWriter) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	w.firstByte = time.Since(w.start)
	if status < 300 {
		w.opts.ContentType = w.Header().Get("Content-Type")
		w.meter = usage.NewMeter(w.ResponseWriterWrapper, w.opts)
	}
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *meterWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.meter == nil {
		return w.ResponseWriterWrapper.Write(p)
	}
	return w.meter.Write(p)
}

// ReadFrom keeps io.Copy from going around Write (and the meter).
func (w *meterWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{w}, r)
}

type writerOnly struct{ io.Writer }

func (w *meterWriter) result() (usage.Result, bool) {
	if w.meter == nil {
		return usage.Result{}, false
	}
	w.meter.Close()
	return w.meter.Result(), true
}

// metrics are the gateway's Prometheus collectors on Caddy's registry.
type metrics struct {
	requests  *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	cost      *prometheus.CounterVec
	refused   *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	firstByte *prometheus.HistogramVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	const ns, sub = "caddy", "llm_gateway"
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Gateway requests by format and status class."}, []string{"format", "code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "tokens_total",
			Help: "Tokens metered, by format and kind (input, cache_read, cache_write, output, reasoning)."}, []string{"format", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cost_usd_total",
			Help: "Cost metered in USD, by format (exact amounts are in the usage records)."}, []string{"format"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "budget_refusals_total",
			Help: "Requests refused with 402 because a budget had no room."}, []string{"format"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "upstream_duration_seconds",
			Help: "Time from forwarding a request to the end of the provider's answer.", Buckets: buckets}, []string{"format"}),
		firstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "time_to_first_byte_seconds",
			Help: "Time from forwarding a request to the provider's response headers.", Buckets: buckets}, []string{"format"}),
	}
	if reg == nil {
		return m
	}
	m.requests = registerOrExisting(reg, m.requests)
	m.tokens = registerOrExisting(reg, m.tokens)
	m.cost = registerOrExisting(reg, m.cost)
	m.refused = registerOrExisting(reg, m.refused)
	m.duration = registerOrExisting(reg, m.duration)
	m.firstByte = registerOrExisting(reg, m.firstByte)
	return m
}

// registerOrExisting registers c, or returns the collector already
// registered under its name (several gateway handlers in one config).
func registerOrExisting[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

func statusClass(code int) string {
	return strconv.Itoa(code/100) + "xx"
}

func (m *metrics) observe(f formats.Format, status int, t store.Tokens, cost money.Pico) {
	fs := f.String()
	m.requests.WithLabelValues(fs, statusClass(status)).Inc()
	for _, k := range [...]struct {
		kind string
		n    int64
	}{{"input", t.Input}, {"cache_read", t.CacheRead}, {"cache_write", t.CacheWrite}, {"output", t.Output}, {"reasoning", t.Reasoning}} {
		if k.n > 0 {
			m.tokens.WithLabelValues(fs, k.kind).Add(float64(k.n))
		}
	}
	if cost > 0 {
		m.cost.WithLabelValues(fs).Add(float64(cost) / 1e12)
	}
}

// logFields adds the request's metering to Caddy's access log entry.
func logFields(r *http.Request, rec *store.UsageRecord) {
	extra, ok := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields)
	if !ok {
		return
	}
	extra.Add(zap.Object("agentgate", zapRecord{rec}))
}

type zapRecord struct{ *store.UsageRecord }

func (z zapRecord) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("workspace", z.Workspace)
	enc.AddString("member", z.MemberID)
	enc.AddString("connection", z.Connection)
	enc.AddString("model", z.Model)
	enc.AddString("upstream_model", z.UpstreamModel)
	enc.AddInt64("input_tokens", z.Tokens.Input)
	enc.AddInt64("cache_read_tokens", z.Tokens.CacheRead)
	enc.AddInt64("cache_write_tokens", z.Tokens.CacheWrite)
	enc.AddInt64("output_tokens", z.Tokens.Output)
	enc.AddInt64("reasoning_tokens", z.Tokens.Reasoning)
	enc.AddString("cost_usd", z.Cost.String())
	enc.AddBool("streamed", z.Streamed)
	enc.AddBool("estimated", z.Estimated)
	return nil
}

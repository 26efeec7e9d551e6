package gateway

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// DefaultMaxOutputTokens bounds the output of a request that sets no limit
// and whose model has no max_output_tokens, for budget reservations.
const DefaultMaxOutputTokens = 131072

// reservation is an upper bound of a request's cost: every byte of the body
// as an input token at the dearest input rate (a token is at least one
// byte), plus the output limit (the request's, else the model's, else
// DefaultMaxOutputTokens, plus any thinking budget) at the dearest output
// rate.
func reservation(m store.Model, fl *formats.Fields, bodyLen int) money.Pico {
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
	return min(formats.Cost(formats.Tokens{Input: int64(bodyLen), Output: outputBound(m, fl)}, store.Pricing{Input: in, Output: out}),
		maxReservation)
}

// maxReservation caps a reservation at just over the largest budget
// limit: a bound that costs more than that (formats.Cost saturates rather
// than wraps) is one no budget holds, and the capped amount keeps the
// ledger's sums of spend and reservations far from the int64 edge.
const maxReservation = money.MaxSpend + 1

// outputBound is the most output a request may produce: its own limit,
// else the model's, else DefaultMaxOutputTokens, plus any thinking budget.
func outputBound(m store.Model, fl *formats.Fields) int64 {
	maxOut := fl.OutputLimit()
	if maxOut == 0 {
		maxOut = m.MaxOutputTokens
	}
	if maxOut == 0 {
		maxOut = DefaultMaxOutputTokens
	}
	// Both are at least 0: the sum saturates at math.MaxInt64 (more than
	// any budget holds) instead of wrapping.
	return money.AddSat(maxOut, fl.ExtraOutput())
}

// meterWriter sits between the forwarder and the client: it notes the
// status and time to first byte, and feeds the body through a usage Meter
// created when the response headers are known.
type meterWriter struct {
	http.ResponseWriter
	opts      formats.MeterOptions
	meter     *formats.Meter
	status    int
	firstByte time.Duration
	start     time.Time
	// unmetered passes the answer through without reading usage from it
	// (a token count, which is never charged).
	unmetered bool
	// drain keeps a metered answer going when writing it to the client
	// fails (the client left): the failed write reports success, so the
	// forwarder goes on copying the provider's answer into the meter,
	// which reads it to its final usage without forwarding or keeping it.
	// Non-stream answers only (disconnect.go).
	drain bool
	// clientGone is set when a write to the client failed.
	clientGone bool
}

// Unwrap lets http.ResponseController reach the client's writer (to flush
// streamed answers).
func (w *meterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *meterWriter) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	w.firstByte = time.Since(w.start)
	if status < 300 && !w.unmetered {
		w.opts.ContentType = headerValue(w.Header(), "Content-Type")
		w.meter = formats.NewMeter(w.ResponseWriter, w.opts)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *meterWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.meter == nil {
		return w.ResponseWriter.Write(p)
	}
	n, err := w.meter.Write(p)
	if err != nil {
		w.clientGone = true
		if w.drain {
			return len(p), nil
		}
	}
	return n, err
}

// ReadFrom keeps io.Copy from going around Write (and the meter).
func (w *meterWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{w}, r)
}

type writerOnly struct{ io.Writer }

// result closes the meter and returns what it read; the meter goes back
// for reuse (the forwarder returned: nothing writes to it any more).
func (w *meterWriter) result() (formats.MeterResult, bool) {
	if w.meter == nil {
		return formats.MeterResult{}, false
	}
	res := w.meter.Result()
	w.meter.Release()
	w.meter = nil
	return res, true
}

// Metrics are the gateway's Prometheus collectors.
type Metrics struct {
	requests  *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	cost      *prometheus.CounterVec
	refused   *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	firstByte *prometheus.HistogramVec

	by []formatMetrics // by format
}

// NewMetrics registers the gateway's collectors on reg (Caddy's metrics
// registry), or shares those a handler of the same config registered
// before; with a nil reg they are not registered.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	const ns, sub = "caddy", "llm_gateway"
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m := &Metrics{
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
		return m.resolve()
	}
	m.requests = registerOrExisting(reg, m.requests)
	m.tokens = registerOrExisting(reg, m.tokens)
	m.cost = registerOrExisting(reg, m.cost)
	m.refused = registerOrExisting(reg, m.refused)
	m.duration = registerOrExisting(reg, m.duration)
	m.firstByte = registerOrExisting(reg, m.firstByte)
	return m.resolve()
}

// tokenKinds are the values of the tokens_total kind label.
var tokenKinds = [...]string{"input", "cache_read", "cache_write", "output", "reasoning"}

// formatMetrics are one format's series, resolved once so that a request
// does not hash label values.
type formatMetrics struct {
	requests            [6]prometheus.Counter // by status class (code/100)
	tokens              [len(tokenKinds)]prometheus.Counter
	cost, refused       prometheus.Counter
	duration, firstByte prometheus.Observer
}

// resolve fills m.by for every format.
func (m *Metrics) resolve() *Metrics {
	m.by = make([]formatMetrics, formats.Count()+1)
	for _, f := range formats.All() {
		fs := f.String()
		fm := &m.by[f]
		for class := 1; class < len(fm.requests); class++ {
			fm.requests[class] = m.requests.WithLabelValues(fs, strconv.Itoa(class)+"xx")
		}
		for i, k := range tokenKinds {
			fm.tokens[i] = m.tokens.WithLabelValues(fs, k)
		}
		fm.cost, fm.refused = m.cost.WithLabelValues(fs), m.refused.WithLabelValues(fs)
		fm.duration, fm.firstByte = m.duration.WithLabelValues(fs), m.firstByte.WithLabelValues(fs)
	}
	return m
}

// of returns a format's series (Chat's for no format).
func (m *Metrics) of(f formats.Format) *formatMetrics {
	if !f.Valid() {
		f = formats.Chat
	}
	return &m.by[f]
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

func (m *Metrics) observe(f formats.Format, status int, t store.Tokens, cost money.Pico) {
	fm := m.of(f)
	if class := status / 100; class >= 1 && class < len(fm.requests) {
		fm.requests[class].Inc()
	}
	for i, n := range [len(tokenKinds)]int64{t.Input, t.CacheRead, t.CacheWrite, t.Output, t.Reasoning} {
		if n > 0 {
			fm.tokens[i].Add(float64(n))
		}
	}
	if cost > 0 {
		fm.cost.Add(float64(cost) / 1e12)
	}
}

// LogObject is a usage record as the access log's "agentgate" object:
// its metering, never a key or a prompt.
func LogObject(rec *store.UsageRecord) zapcore.ObjectMarshaler { return zapRecord{rec} }

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
	if z.Session != "" {
		enc.AddString("session", z.Session)
	}
	if z.RequestID != "" {
		enc.AddString("request_id", z.RequestID)
	}
	return nil
}

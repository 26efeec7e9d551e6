package formats

// The usage tee of the gateway's response path. A Meter sits between the
// upstream response body and the client: it forwards the bytes unchanged
// as they arrive and reads the token usage of the format's answer,
// streaming and not, without holding the stream. The instance's provider
// client reads its answers through a Meter too (conversation.go), so that
// both count tokens the same way.
//
// Memory is bounded: an SSE stream keeps at most the current event (and the
// current line), a JSON-array stream the current array element, each up to
// MaxEventBytes; a non-stream JSON body is read as it passes, never kept
// (bodyscan.go), up to MaxBodyBytes.

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// Default caps.
const (
	// DefaultMaxEventBytes is the largest SSE event or JSON-array element
	// that is parsed; a bigger one passes through unparsed.
	DefaultMaxEventBytes = 1 << 20
	// DefaultMaxBodyBytes is the largest non-stream body that is parsed; the
	// usage of a bigger one is unknown (and estimated).
	DefaultMaxBodyBytes = 16 << 20
)

// ErrClosed is returned by Write after Close or Result.
var ErrClosed = errors.New("formats: write after the meter was closed")

// Tokens are normalised token counts (the usage record's own type). Every
// count is disjoint from the others, so each is priced once.
type Tokens = store.Tokens

// MeterResult is what a Meter read from a response.
type MeterResult struct {
	Tokens Tokens
	// Complete is set when the format's final usage was seen.
	Complete bool
	// Estimated is set when some counts were estimated because the final
	// usage is missing (stream cut by upstream or client, body too big or
	// without usage). It is always !Complete.
	Estimated bool
	// Model is the model the provider reported, if any.
	Model string
	// Events is the number of stream data events (SSE events with data,
	// other than [DONE] and a dropped usage chunk; JSON-array elements)
	// delivered to the client. It is 0 for non-stream bodies.
	Events int
}

// Cost is the exact cost in pico-dollars: each token count times its price
// (USD per 1M tokens = pico-dollars per token). CacheRead/CacheWrite default
// to the input price and Reasoning to the output price when not set. A cost
// that does not fit in an int64 saturates.
func Cost(t Tokens, p store.Pricing) money.Pico {
	cacheRead, cacheWrite, reasoning := p.Input, p.Input, p.Output
	if p.CacheRead != nil {
		cacheRead = *p.CacheRead
	}
	if p.CacheWrite != nil {
		cacheWrite = *p.CacheWrite
	}
	if p.Reasoning != nil {
		reasoning = *p.Reasoning
	}
	var sum int64
	for _, c := range [...]struct {
		n     int64
		price money.Micros
	}{
		{t.Input, p.Input},
		{t.CacheRead, cacheRead},
		{t.CacheWrite, cacheWrite},
		{t.Output, p.Output},
		{t.Reasoning, reasoning},
	} {
		sum = addSat(sum, mulSat(c.n, int64(c.price)))
	}
	return money.Pico(sum)
}

func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	c := a * b
	if (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) || c/b != a {
		if (a < 0) != (b < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return c
}

func addSat(a, b int64) int64 {
	c := a + b
	if a > 0 && b > 0 && c < 0 {
		return math.MaxInt64
	}
	if a < 0 && b < 0 && c >= 0 {
		return math.MinInt64
	}
	return c
}

// MeterOptions say what a Meter reads.
type MeterOptions struct {
	// Format is the request's wire format.
	Format Format
	// ContentType is the upstream response Content-Type. text/event-stream
	// is read as SSE; otherwise a stream request of a format that streams
	// JSON arrays is read element by element, and anything else as one
	// JSON body. When empty, StreamRequested decides.
	ContentType string
	// StreamRequested is set when the client asked for a stream.
	StreamRequested bool
	// DropUsageChunk removes the usage-only event (Chat's choices: [] with
	// a usage) from what the client receives, for when the gateway asked
	// for usage itself (Route.PrepareStream); SSE streams of formats that
	// have such an event only.
	DropUsageChunk bool
	// RequestBytes is the size of the request body, for the input estimate
	// when the provider reports none.
	RequestBytes int64
	// MaxEventBytes and MaxBodyBytes override the caps when > 0.
	MaxEventBytes int
	MaxBodyBytes  int
}

type mode int

const (
	modeBody mode = iota
	modeSSE
	modeArray
)

// Meter forwards a response body to its destination and reads its usage.
// It is not safe for concurrent use.
type Meter struct {
	dst      io.Writer
	opts     MeterOptions
	wire     wire
	dec      *decoder // set by the instance's client: events are decoded too
	mode     mode
	drop     bool
	maxEvent int
	maxBody  int
	err      error // sticky destination error
	closed   bool

	sse  sseState
	arr  arrayState
	scan bodyScan
	// counts are the usage object being read as it passes (counts.go).
	counts counts
	// bodyBytes counts the bytes of a non-stream body; bodyOver is set
	// when it went over the cap, and win keeps its last bytes.
	bodyBytes int64
	bodyOver  bool
	win       window

	// What was read.
	tok       Tokens
	inputSeen bool // some input count was reported
	usageSeen bool // some usage was reported
	complete  bool
	finished  bool  // a candidate finished or the prompt was blocked (formats whose usage may come before the end)
	deltas    int64 // content delta events
	textBytes int64 // bytes of delta text
	model     string
	events    int

	res MeterResult
}

// NewMeter returns a Meter forwarding to dst. Release gives it back for
// reuse once its result is read.
func NewMeter(dst io.Writer, opts MeterOptions) *Meter {
	m := meterPool.Get().(*Meter) // zero but for its kept buffers (Release)
	m.dst, m.opts, m.wire, m.maxEvent, m.maxBody = dst, opts, opts.Format.w(), opts.MaxEventBytes, opts.MaxBodyBytes
	if m.maxEvent <= 0 {
		m.maxEvent = DefaultMaxEventBytes
	}
	if m.maxBody <= 0 {
		m.maxBody = DefaultMaxBodyBytes
	}
	ct := mediaType(opts.ContentType)
	switch {
	case ct == "text/event-stream":
		m.mode = modeSSE
	case m.wire.arrayStream() && opts.StreamRequested:
		m.mode = modeArray
	case ct == "" && opts.StreamRequested:
		m.mode = modeSSE
	default:
		m.mode = modeBody
	}
	m.drop = opts.DropUsageChunk && m.wire.dropsUsageChunk() && m.mode == modeSSE
	if m.mode == modeBody {
		m.scan.reset(m.wire.bodyReader())
	}
	return m
}

// meterPool recycles meters and their buffers: the gateway meters every
// answer, and a meter's state and first buffers would otherwise be fresh
// allocations per request.
var meterPool = sync.Pool{New: func() any { return new(Meter) }}

// Release closes m and gives it back for reuse. Neither m nor anything it
// returned but its result may be used afterwards, and nothing may still
// write to it.
func (m *Meter) Release() {
	m.Close()
	kept := m.buffers()
	*m = Meter{}
	m.setBuffers(kept)
	meterPool.Put(m)
}

// meterBuffers are the buffers a recycled meter keeps (emptied; none
// that grew for a big event or value).
type meterBuffers struct {
	line, data, name, hold, capBuf []byte
	stack                          []bodyFrame
}

func (m *Meter) buffers() meterBuffers {
	small := func(b []byte) []byte {
		if cap(b) > 64<<10 {
			return nil
		}
		return b[:0]
	}
	stack := m.scan.stack[:0]
	if cap(stack) > 1024 {
		stack = nil
	}
	return meterBuffers{line: small(m.sse.line), data: small(m.sse.data), name: small(m.sse.name), hold: small(m.sse.hold),
		capBuf: small(m.scan.capBuf), stack: stack}
}

func (m *Meter) setBuffers(b meterBuffers) {
	m.sse.line, m.sse.data, m.sse.name, m.sse.hold = b.line, b.data, b.name, b.hold
	m.scan.capBuf, m.scan.stack = b.capBuf, b.stack
}

func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// Write forwards p to the destination and reads it. The bytes are written
// through at once, except with DropUsageChunk, where each SSE event is
// forwarded when it is complete (comment and blank lines between events go
// through at once). Write returns len(p) unless the destination fails; its
// error is returned and kept. Bytes written after a destination error are
// still read (so a caller may drain upstream to its final usage) but not
// forwarded.
func (m *Meter) Write(p []byte) (int, error) {
	if m.closed {
		return 0, ErrClosed
	}
	switch m.mode {
	case modeSSE:
		if m.drop {
			m.scanSSE(p)
			if m.err != nil {
				return 0, m.err
			}
			return len(p), nil
		}
		n, err := m.forward(p)
		m.scanSSE(p)
		return n, err
	case modeArray:
		n, err := m.forward(p)
		m.scanArray(p)
		return n, err
	default:
		n, err := m.forward(p)
		m.writeBody(p)
		return n, err
	}
}

// forward writes to the destination unless it already failed.
func (m *Meter) forward(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := m.dst.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		m.err = err
	}
	return n, err
}

// Flush flushes the destination when it can be flushed (http.Flusher or a
// FlushError method). The Meter itself holds nothing back but an incomplete
// SSE event when DropUsageChunk is on, which it cannot release early.
func (m *Meter) Flush() {
	if m.err != nil {
		return
	}
	switch f := m.dst.(type) {
	case interface{ FlushError() error }:
		if err := f.FlushError(); err != nil {
			m.err = err
		}
	case http.Flusher:
		f.Flush()
	}
}

// Close ends the body: a held-back incomplete SSE event is read and
// forwarded (DropUsageChunk), a non-stream body is parsed, and the result
// is fixed. It returns the destination error, if any. Close is idempotent;
// Write after Close fails with ErrClosed.
func (m *Meter) Close() error {
	if m.closed {
		return m.err
	}
	m.closed = true
	switch m.mode {
	case modeSSE:
		m.endSSE()
	case modeArray:
		m.endArray()
	default:
		m.endBody()
	}
	m.res = m.result()
	return m.err
}

// Result closes the meter (see Close) and returns what it read. Call it
// after the body ended or was cut.
func (m *Meter) Result() MeterResult {
	m.Close()
	return m.res
}

func (m *Meter) result() MeterResult {
	r := MeterResult{Tokens: m.tok, Complete: m.complete, Model: m.model, Events: m.events}
	if m.complete {
		return r
	}
	r.Estimated = true
	if !m.inputSeen {
		r.Tokens.Input = ceil4(m.opts.RequestBytes)
	}
	est := max(m.deltas, ceil4(m.textBytes))
	if r.Tokens.Output+r.Tokens.Reasoning < est {
		r.Tokens.Output = est - r.Tokens.Reasoning
	}
	return r
}

func ceil4(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return n/4 + min(n%4, 1)
}

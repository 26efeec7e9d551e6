package gateway

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
)

// Large request bodies are read into pooled buffers, so that a stream of
// multi-megabyte requests reuses a few buffers instead of leaving one
// garbage body per request for the collector (which let the heap grow to
// several times the body size). Bodies under poolMin, or of unknown
// length, use ordinary allocations.
const (
	poolMin     = 1 << 20 // 1 MiB
	poolClasses = 7       // 1, 2, 4 … 64 MiB
)

var bodyPools [poolClasses]sync.Pool

// poolClass is the class whose buffers hold n bytes, or -1.
func poolClass(n int) int {
	if n < poolMin {
		return -1
	}
	c := bits.Len(uint(n-1)) - 20 // 1 MiB → 0
	if c < 0 {
		c = 0
	}
	if c >= poolClasses {
		return -1
	}
	return c
}

// pooledBuf is a buffer of a pool class. refs counts its holders: the call
// that read the body into it, and each upstream request body made of it
// until the transport closes that body (the transport may still read it
// after the round trip returns). The last to let go returns the buffer to
// its pool.
type pooledBuf struct {
	b     []byte
	class int
	refs  atomic.Int32
}

func getPooled(n int) *pooledBuf {
	c := poolClass(n)
	if c < 0 {
		return nil
	}
	p, ok := bodyPools[c].Get().(*pooledBuf)
	if !ok {
		p = &pooledBuf{b: make([]byte, poolMin<<c), class: c}
	}
	p.refs.Store(1)
	return p
}

// hold adds a holder of the buffer.
func (p *pooledBuf) hold() { p.refs.Add(1) }

// release lets go of the buffer; the last holder returns it to its pool.
func (p *pooledBuf) release() {
	if p.refs.Add(-1) == 0 {
		bodyPools[p.class].Put(p)
	}
}

// readPooled reads a body of the announced length into a pooled buffer.
// It reports errTooLong when the body is longer than announced.
func readPooled(r io.Reader, n int) (*pooledBuf, []byte, error) {
	p := getPooled(n + 1)
	if p == nil {
		return nil, nil, nil
	}
	body := p.b[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		p.release()
		return nil, nil, err
	}
	var one [1]byte
	if m, err := r.Read(one[:]); m > 0 || (err != nil && err != io.EOF) {
		p.release()
		if err == nil {
			err = errTooLong
		}
		return nil, nil, err
	}
	return p, body, nil
}

var errTooLong = errors.New("request body longer than its Content-Length")

// upstreamBody is an upstream request body: it reads the call's outgoing
// Body, and lets go of the pooled buffer that Body is made of (when it is)
// once the transport closes it. A read after that, or during it, cannot
// reach a buffer that another request reuses: it fails.
type upstreamBody struct {
	formats.BodyReader
	p      *pooledBuf
	mu     sync.Mutex // held by reads and the close, with p only
	closed bool
}

func (b *upstreamBody) Read(dst []byte) (int, error) {
	if b.p == nil {
		return b.BodyReader.Read(dst)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.BodyReader.Read(dst)
}

// WriteTo is Read's: the pieces are read under the lock.
func (b *upstreamBody) WriteTo(w io.Writer) (int64, error) {
	if b.p == nil {
		return b.BodyReader.WriteTo(w)
	}
	return io.Copy(w, struct{ io.Reader }{b})
}

func (b *upstreamBody) Close() error {
	if b.p == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.p.release()
	}
	return nil
}

var _ io.ReadCloser = (*upstreamBody)(nil)

// readBody reads a request body of at most max bytes: large bodies of
// known length into a pooled buffer (returned with it), others into a
// buffer of their own. Whether it is JSON is formats.ScanBody's to say.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *pooledBuf, *apierr.Error) {
	tooLarge := func() ([]byte, *pooledBuf, *apierr.Error) {
		return nil, nil, apierr.New(http.StatusRequestEntityTooLarge, "PayloadTooLarge", "request body is larger than %d bytes", max)
	}
	if r.ContentLength > max {
		return tooLarge()
	}
	rd := http.MaxBytesReader(w, r.Body, max)
	readFailed := func(err error) ([]byte, *pooledBuf, *apierr.Error) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		return nil, nil, apierr.BadRequest("reading the request body failed")
	}
	if r.ContentLength >= poolMin {
		p, b, err := readPooled(rd, int(r.ContentLength))
		if err != nil {
			return readFailed(err)
		}
		if p != nil {
			return b, p, nil
		}
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		// Room for the body and for the read that sees EOF: without it
		// the buffer doubles (and copies) the whole body at its end.
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(rd); err != nil {
		return readFailed(err)
	}
	return buf.Bytes(), nil, nil
}

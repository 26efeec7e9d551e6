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

// Request bodies of known length are read into pooled buffers, so that a
// stream of requests reuses a few buffers instead of leaving one garbage
// body per request for the collector (with multi-megabyte bodies, that let
// the heap grow to several times the body size). Bodies of unknown length,
// or over the largest class, use ordinary allocations.
const (
	poolMinShift = 11 // the smallest class: 2 KiB
	poolClasses  = 16 // 2, 4, 8 KiB … 64 MiB
)

var bodyPools [poolClasses]sync.Pool

// poolClass is the class whose buffers hold n bytes, or -1.
func poolClass(n int) int {
	if n <= 0 {
		return -1
	}
	c := max(bits.Len(uint(n-1))-poolMinShift, 0)
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
		p = &pooledBuf{b: make([]byte, 1<<(poolMinShift+c)), class: c}
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
	body, err := readExactly(r, p.b[:n+1])
	if err != nil {
		p.release()
		return nil, nil, err
	}
	return p, body, nil
}

// readExactly reads len(buf)-1 bytes into buf and checks that the body
// ends there (the last byte of buf takes the read that must see EOF).
func readExactly(r io.Reader, buf []byte) ([]byte, error) {
	n := len(buf) - 1
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return nil, err
	}
	if m, err := r.Read(buf[n:]); m > 0 || (err != nil && err != io.EOF) {
		if err == nil {
			err = errTooLong
		}
		return nil, err
	}
	return buf[:n], nil
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

// readBody reads a request body of at most max bytes: a body of known
// length into a pooled buffer (returned with it), others into a buffer of
// their own. Whether it is JSON is formats.ScanBody's to say.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *pooledBuf, *apierr.Error) {
	tooLarge := func() ([]byte, *pooledBuf, *apierr.Error) {
		return nil, nil, apierr.New(http.StatusRequestEntityTooLarge, "PayloadTooLarge", "request body is larger than %d bytes", max)
	}
	if r.ContentLength > max {
		return tooLarge()
	}
	if r.Body == nil {
		return nil, nil, nil // no JSON object
	}
	readFailed := func(err error) ([]byte, *pooledBuf, *apierr.Error) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		return nil, nil, apierr.BadRequest("reading the request body failed")
	}
	if r.ContentLength > 0 {
		// A body of known length is read to that length and no further
		// (a longer one fails), so max holds without a MaxBytesReader.
		n := int(r.ContentLength)
		p, b, err := readPooled(r.Body, n)
		if p == nil && err == nil {
			b, err = readExactly(r.Body, make([]byte, n+1))
		}
		if err != nil {
			return readFailed(err)
		}
		return b, p, nil
	}
	rd := http.MaxBytesReader(w, r.Body, max)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rd); err != nil {
		return readFailed(err)
	}
	return buf.Bytes(), nil, nil
}

package gateway

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"net/http"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
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

// pooledBuf is a buffer of a pool class.
type pooledBuf struct {
	b     []byte
	class int
}

func getPooled(n int) *pooledBuf {
	c := poolClass(n)
	if c < 0 {
		return nil
	}
	if v, ok := bodyPools[c].Get().(*pooledBuf); ok {
		return v
	}
	return &pooledBuf{b: make([]byte, poolMin<<c), class: c}
}

func (p *pooledBuf) put() { bodyPools[p.class].Put(p) }

// readPooled reads a body of the announced length into a pooled buffer.
// It reports errTooLong when the body is longer than announced.
func readPooled(r io.Reader, n int) (*pooledBuf, []byte, error) {
	p := getPooled(n + 1)
	if p == nil {
		return nil, nil, nil
	}
	body := p.b[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		p.put()
		return nil, nil, err
	}
	var one [1]byte
	if m, err := r.Read(one[:]); m > 0 || (err != nil && err != io.EOF) {
		p.put()
		if err == nil {
			err = errTooLong
		}
		return nil, nil, err
	}
	return p, body, nil
}

var errTooLong = errors.New("request body longer than its Content-Length")

// releasingBody is an upstream request body that returns its pooled buffer
// when the transport closes it (the transport may still read the body
// after the round trip returns, so the buffer is only reusable then).
type releasingBody struct {
	*bytes.Reader
	once sync.Once
	p    *pooledBuf
}

func (b *releasingBody) Close() error {
	b.once.Do(b.p.put)
	return nil
}

var _ io.ReadCloser = (*releasingBody)(nil)

// readBody reads a request body of at most max bytes that must be a JSON
// object: large bodies of known length into a pooled buffer (returned with
// it), others into a buffer of their own.
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
		return nil, nil, apierr.BadRequest("the request body must be a JSON object")
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

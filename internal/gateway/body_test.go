package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentgate/agentgate/internal/formats"
)

// A body of known length is read to that length and no further; one of
// unknown length is bounded by max; one longer or shorter than it says,
// or over max, is refused.
func TestReadBody(t *testing.T) {
	const max = 64
	body := `{"model":"m"}`
	for _, c := range []struct {
		name   string
		body   io.Reader
		length int64
		status int // 0: read
	}{
		{"known length", strings.NewReader(body), int64(len(body)), 0},
		{"unknown length", strings.NewReader(body), -1, 0},
		{"longer than said", strings.NewReader(body + " "), int64(len(body)), http.StatusBadRequest},
		{"shorter than said", strings.NewReader(body), int64(len(body)) + 1, http.StatusBadRequest},
		{"over max, said", strings.NewReader(strings.Repeat(" ", max+1)), max + 1, http.StatusRequestEntityTooLarge},
		{"over max, unsaid", strings.NewReader(strings.Repeat(" ", max+1)), -1, http.StatusRequestEntityTooLarge},
		{"at max", strings.NewReader(strings.Repeat(" ", max)), max, 0},
	} {
		r := httptest.NewRequest("POST", "/", c.body)
		r.ContentLength = c.length
		got, pooled, e := readBody(httptest.NewRecorder(), r, max)
		if (pooled != nil) != (c.status == 0 && c.length > 0) {
			t.Errorf("%s: pooled buffer %v", c.name, pooled != nil)
		}
		if pooled != nil {
			pooled.release()
		}
		switch {
		case c.status == 0 && e != nil:
			t.Errorf("%s: %d %s", c.name, e.Status, e.Message)
		case c.status != 0 && (e == nil || e.Status != c.status):
			t.Errorf("%s: %v, want status %d", c.name, e, c.status)
		case c.status == 0 && c.name != "at max" && string(got) != body:
			t.Errorf("%s: read %q", c.name, got)
		}
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Body, r.ContentLength = nil, 5
	if got, _, e := readBody(httptest.NewRecorder(), r, max); e != nil || got != nil {
		t.Errorf("no body: %q, %v", got, e)
	}
}

// A pooled buffer goes back to its pool only when the call and every
// upstream body made of it let go; reading an upstream body after it was
// closed fails instead of reading a buffer another request may reuse.
func TestPooledBodyHolders(t *testing.T) {
	p := getPooled(14)
	if p == nil || p.refs.Load() != 1 {
		t.Fatal("no pooled buffer held by its reader")
	}
	body := p.b[:13]
	copy(body, `{"model":"m"}`)
	out := formats.NewBody(body)
	var ubs []*upstreamBody
	for range 2 {
		ub := &upstreamBody{p: p}
		ub.Reset(&out)
		p.hold()
		ubs = append(ubs, ub)
	}
	p.release() // the call is done
	if got, _ := io.ReadAll(struct{ io.Reader }{ubs[0]}); string(got) != `{"model":"m"}` {
		t.Fatalf("read %q", got)
	}
	ubs[0].Close()
	ubs[0].Close() // a second close lets go of nothing more
	if p.refs.Load() != 1 {
		t.Fatalf("%d holders, want 1", p.refs.Load())
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { ubs[1].Close() })
	}
	wg.Wait()
	if p.refs.Load() != 0 {
		t.Fatalf("%d holders after the last close", p.refs.Load())
	}
	if _, err := ubs[1].Read(make([]byte, 4)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after close: %v", err)
	}
	var w bytes.Buffer
	if _, err := ubs[1].WriteTo(&w); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("WriteTo after close: %v", err)
	}
}

func TestHeaderCount(t *testing.T) {
	for _, c := range []struct {
		v    []string
		n    int
		want bool
	}{
		{[]string{"1024"}, 1024, true},
		{[]string{"1024"}, 1025, false},
		{[]string{"01024"}, 1024, false},
		{[]string{"+1024"}, 1024, false},
		{[]string{"1024", "1024"}, 1024, false},
		{[]string{""}, 0, false},
		{nil, 0, false},
	} {
		if got := headerCount(c.v, c.n); got != c.want {
			t.Errorf("headerCount(%q, %d) = %v", c.v, c.n, got)
		}
	}
}

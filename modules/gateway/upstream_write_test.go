package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

type connKey struct{}

// segmentProvider is a loopback provider that records each request it
// receives and how many TCP segments with data its connection had
// received once the request was read whole.
type segmentProvider struct {
	*httptest.Server
	mu   sync.Mutex
	seen []segmentRequest
}

type segmentRequest struct {
	header   http.Header
	trailer  http.Header
	body     string
	conn     net.Conn
	dataSegs uint32 // the connection's data segments so far
}

func newSegmentProvider(t *testing.T) *segmentProvider {
	p := &segmentProvider{}
	p.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		conn := r.Context().Value(connKey{}).(net.Conn)
		var segs uint32
		raw, err := conn.(*net.TCPConn).SyscallConn()
		if err == nil {
			err = raw.Control(func(fd uintptr) {
				var info *unix.TCPInfo
				if info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
					segs = info.Data_segs_in
				}
			})
		}
		if err != nil {
			t.Errorf("TCP_INFO: %v", err)
		}
		p.mu.Lock()
		p.seen = append(p.seen, segmentRequest{header: r.Header.Clone(), trailer: r.Trailer.Clone(), body: string(b), conn: conn, dataSegs: segs})
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m-upstream","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	}))
	p.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	p.Start()
	t.Cleanup(p.Close)
	return p
}

func (p *segmentProvider) requests() []segmentRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]segmentRequest(nil), p.seen...)
}

// TestUpstreamRequestInOneWrite: the gateway hands the provider a request
// of ordinary size (its headers and its body) in one TCP segment, which
// takes one write, where Caddy's proxy alone writes the headers first and
// the body after. The body is the one admitted (the model id rewritten),
// whole, under the provider's credential; a body longer than the copy's
// bound arrives whole too; and no trailer of the client's (a workspace key
// in one) reaches the provider.
func TestUpstreamRequestInOneWrite(t *testing.T) {
	e := setup(t)
	p := newSegmentProvider(t)
	price := store.Pricing{Input: money.Micros(2_500_000), Output: money.Micros(10_000_000)}
	c, err := e.svc.CreateConnection(context.Background(), service.Operator(e.ws), service.ConnectionInput{Name: "segments", Kind: store.KindOpenAI,
		BaseURL: p.URL + "/v1", Credential: providerSecret, Models: map[string]service.ModelInput{"m": {UpstreamID: "m-upstream", Pricing: &price}}})
	if err != nil {
		t.Fatal(err)
	}
	path := "/custom/" + c.ID + "/chat/completions"
	body := func(n int) string {
		return `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`
	}
	sizes := []int{1000, 1000, 3000, 60 << 10}
	for _, n := range sizes {
		resp, got := e.post(t, path, body(n), "Authorization", "Bearer "+e.key)
		if resp.StatusCode != 200 {
			t.Fatalf("%d-byte body: %d %s", n, resp.StatusCode, got)
		}
	}
	// Chunked bodies, short and long, with the workspace key in a trailer.
	chunked := []int{500, 60 << 10}
	for _, n := range chunked {
		req, _ := http.NewRequest("POST", e.base+path, io.NopCloser(strings.NewReader(body(n))))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+e.key)
		req.Trailer = http.Header{"X-Api-Key": {e.key}}
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chunked %d-byte body with a trailer: %d %s", n, resp.StatusCode, b)
		}
	}
	sizes = append(sizes, chunked...)

	seen := p.requests()
	if len(seen) != len(sizes) {
		t.Fatalf("the provider received %d requests, want %d", len(seen), len(sizes))
	}
	last := map[net.Conn]uint32{}
	for i, r := range seen {
		n := sizes[i]
		want := strings.Replace(body(n), `"m"`, `"m-upstream"`, 1)
		if r.body != want {
			t.Errorf("request %d: the provider received a body of %d bytes, not the admitted %d", i, len(r.body), len(want))
		}
		if r.header.Get("Authorization") != "Bearer "+providerSecret {
			t.Errorf("request %d: not under the provider's credential", i)
		}
		for name := range r.trailer {
			t.Errorf("request %d: trailer %s reached the provider", i, name)
		}
		var hdr strings.Builder
		_ = r.header.Write(&hdr)
		if strings.Contains(hdr.String()+r.body, e.key) {
			t.Errorf("request %d: the workspace key reached the provider", i)
		}
		segs := r.dataSegs - last[r.conn]
		last[r.conn] = r.dataSegs
		if n < 32<<10 && segs != 1 {
			t.Errorf("request %d (%d-byte body) reached the provider in %d segments, want 1", i, n, segs)
		}
	}
}

package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/formats"
)

// upstream is a connection's base URL, parsed once: the path its routes
// go under, and where to send them.
type upstream struct {
	Upstream
	path string
}

// upstreamOf parses a base URL once per distinct URL (a handful per
// config); the map lives as long as the pipeline, which a reload replaces.
func (p *Pipeline) upstreamOf(baseURL string) (*upstream, error) {
	if v, ok := p.upstreams.Load(baseURL); ok {
		return v.(*upstream), nil
	}
	base, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	addr := base.Host
	if base.Port() == "" {
		if base.Scheme == "https" {
			addr = net.JoinHostPort(base.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(base.Hostname(), "80")
		}
	}
	u := &upstream{Upstream: Upstream{Dial: addr, HTTPS: base.Scheme == "https"}, path: strings.TrimRight(base.Path, "/")}
	v, _ := p.upstreams.LoadOrStore(baseURL, u)
	return v.(*upstream), nil
}

// outgoing is the request the forwarder sends: the route's upstream path
// under the base URL, the connection's headers, the body as admitted, and
// the provider credential in ctx, its context. The client's credentials are
// already gone from the request's headers, and nothing secret is ever set
// on them (the forwarder's transport adds the credential to its own
// copy), so the request is edited in place.
func (c *call) outgoing(ctx context.Context, to *upstream) *http.Request {
	r := c.r
	up := *r.URL
	up.Scheme, up.Host = "", ""
	up.Path = to.path + c.route.UpstreamPath(c.upstream)
	up.RawPath = ""
	up.RawQuery = c.query.Encode()

	cc := &credentialContext{Context: ctx, c: credential{kind: c.conn.Kind, secret: c.secret}}
	out := r.WithContext(cc)
	out.URL = &up
	out.RequestURI = up.RequestURI()
	out.Header = r.Header
	delete(out.Header, "Accept-Encoding") // the transport asks for gzip itself and decodes it
	for k, v := range c.conn.Headers {
		out.Header.Set(k, v)
	}
	if ct := out.Header["Content-Type"]; len(ct) != 1 || ct[0] != "application/json" {
		out.Header["Content-Type"] = []string{"application/json"}
	}
	n := c.out.Len()
	if n <= flatBodyMax {
		out.Body = io.NopCloser(bytes.NewReader(c.out.AppendTo(make([]byte, 0, n))))
		// UpstreamRequest sends this reader itself: the proxy's wrappers
		// around it are never read.
		cc.c.body, cc.c.size = out.Body, int64(n)
	} else {
		body := &upstreamBody{}
		body.Reset(&c.out)
		if p := c.pooled; p != nil {
			p.hold() // until the transport closes the body
			body.p = p
		}
		out.Body = body
	}
	out.ContentLength = int64(n)
	if !headerCount(out.Header["Content-Length"], n) {
		// The client's header holds the length but for a body that
		// edits changed (or a body of unknown length).
		out.Header["Content-Length"] = []string{strconv.Itoa(n)}
	}
	delete(out.Header, "Transfer-Encoding")
	out.TransferEncoding = nil
	return out
}

// flatBodyMax is the largest upstream body sent from a copy of its own,
// as a bytes.Reader, which net/http's transport writes together with the
// request's headers. Before any other reader (Caddy's proxy wraps every
// request body in two) it writes the headers alone: one write, and one
// wake-up of the provider's side, more per request. The transport copies
// a reader of another kind through a buffer of its length up to 32 KiB, so
// up to there the copy costs no more memory. A longer body is read from
// the client's (pooled) buffer as it is sent.
const flatBodyMax = 32 << 10

// headerCount reports whether a header's values are the one count n > 0,
// spelled as strconv.Itoa spells it.
func headerCount(v []string, n int) bool {
	if len(v) != 1 || v[0] == "" || v[0][0] < '1' || v[0][0] > '9' {
		return false
	}
	m, err := strconv.Atoi(v[0])
	return err == nil && m == n
}

type credentialKey struct{}

// credential is the provider credential of one request, carried in the
// request context under a private key (not in Caddy's vars, which
// placeholders and logs can read).
type credential struct {
	kind, secret string
	// body is the request's body as the pipeline admitted it, when it is
	// sent from a copy of its own (flatBodyMax): a bytes.Reader's, of size
	// bytes (the proxy sets a chunked request's length to -1).
	body io.ReadCloser
	size int64
}

// credentialContext is context.WithValue(ctx, credentialKey{}, &c) in one
// allocation instead of two: a request context carrying what
// UpstreamRequest adds to the request (outgoing makes it).
type credentialContext struct {
	context.Context
	c credential
}

func (ctx *credentialContext) Value(key any) any {
	if _, ok := key.(credentialKey); ok {
		return &ctx.c
	}
	return ctx.Context.Value(key)
}

// proxyHeaders are the headers Caddy's reverse proxy adds about the client
// (its address, scheme, host, and the proxy itself); none of them goes to a
// provider.
var proxyHeaders = [...]string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via", "Forwarded"}

// UpstreamRequest returns the request to send to the provider: a copy of
// req whose headers (a new map sharing the never-modified value slices)
// hold the connection's credential in the kind's slot when the context
// carries one, have none of the proxy's client headers, and whose Host is
// the provider's (the URL's); with the credential comes the admitted body
// (when outgoing made a copy of it) and no trailers. Called by a transport
// just before the round trip, so that the request the proxy and its logs
// hold never sees the credential.
func UpstreamRequest(req *http.Request) *http.Request {
	out := new(http.Request)
	*out = *req
	out.Host = ""
	out.Header = make(http.Header, len(req.Header)+2)
	for k, v := range req.Header {
		out.Header[k] = v
	}
	for _, h := range proxyHeaders {
		delete(out.Header, h)
	}
	if c, ok := req.Context().Value(credentialKey{}).(*credential); ok {
		formats.SetCredential(out.Header, c.kind, c.secret)
		// The body goes with its length (outgoing), which leaves no room
		// for trailers: none are declared to the provider.
		out.Trailer = nil
		if c.body != nil {
			// The admitted body itself, not req.Body: Caddy's proxy has
			// wrapped that in readers of its own (to pass the client's
			// trailers on at its end, and to keep it open when no
			// connection was made), which would make the transport write
			// the headers alone first.
			out.Body, out.ContentLength = c.body, c.size
		}
	}
	return out
}

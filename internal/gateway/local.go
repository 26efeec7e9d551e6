package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/agentgate/agentgate/internal/formats"
)

// In-process requests: an instance server of the same process that is a
// workspace member (agent_instance's workspace) calls the gateway without
// HTTP and without a key. Its requests carry the member in their context,
// where no client can put anything, and go through the same pipeline as a
// request over HTTP: admission, policies, rate limits, budgets, fallbacks,
// metering, usage records (with the agent session of the request's
// headers) and metrics.

// Member is who an in-process request acts as: a workspace's service
// account that is an instance's member.
type Member struct {
	Workspace      string
	ServiceAccount string
	// Instance is the instance's name.
	Instance string
}

type memberKey struct{}

// WithMember returns ctx carrying the member an in-process request acts
// as. The pipeline then takes no credential from the request: it resolves
// the member from the store (its account must still exist in its
// workspace).
func WithMember(ctx context.Context, m Member) context.Context {
	return context.WithValue(ctx, memberKey{}, m)
}

func memberOf(ctx context.Context) (Member, bool) {
	m, ok := ctx.Value(memberKey{}).(Member)
	return m, ok
}

// LocalTransport is an http.RoundTripper that serves each request with
// Serve (the gateway module's ServeLocal) in this process, as the member
// Member returns: the request's context carries the member, and its
// cancellation (an interrupted turn) is the client leaving. RoundTrip
// then returns at once. The gateway treats it as it treats a client over
// HTTP that leaves: a stream's provider request is cancelled with it; a
// non-stream request the provider already has is still answered, read
// and metered in the background, for up to the pipeline's
// DisconnectGrace, since the provider bills it. The response is returned
// once the handler has written its headers; its body streams what the
// handler writes, flush by flush. Closing the body early stops the
// handler (its writes fail) and waits for it.
type LocalTransport struct {
	Serve  func(w http.ResponseWriter, r *http.Request)
	Member func(ctx context.Context) (Member, error)
}

// errAborted is the body's error when the handler aborted the answer (a
// provider stream cut, which Caddy's proxy ends with http.ErrAbortHandler).
var errAborted = errors.New("the gateway aborted the answer")

// RoundTrip serves req in-process.
func (t *LocalTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	m, err := t.Member(req.Context())
	if err != nil {
		closeBody(req)
		return nil, err
	}
	ctx, cancel := context.WithCancel(WithMember(req.Context(), m))
	in := serverRequest(ctx, req)
	pr, pw := io.Pipe()
	// Once the request is cancelled, reading the body fails as over HTTP,
	// and so do the handler's writes.
	context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			v := recover()
			switch {
			case v == nil:
				w.WriteHeader(http.StatusOK) // a handler that wrote nothing answered 200
				// A handler that returns once the request was cancelled
				// answered in part at most: the body ends with the
				// cancellation, never cleanly.
				pw.CloseWithError(ctx.Err())
			case v == http.ErrAbortHandler:
				w.abort(errAborted)
			default:
				w.abort(fmt.Errorf("the gateway failed: %v", v))
			}
		}()
		t.Serve(w, in)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		// No headers yet: the handler sees the cancellation, and its
		// writes fail at once. It is not waited for: a non-stream answer
		// is still metered (see above), and an interrupt must not wait for
		// the provider.
		cancel()
		return nil, ctx.Err()
	}
	if w.err != nil {
		cancel()
		<-done
		return nil, w.err
	}
	resp := &http.Response{Status: strconv.Itoa(w.status) + " " + http.StatusText(w.status), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.sent, ContentLength: -1, Request: req,
		Body: &localBody{pr: pr, cancel: cancel, done: done}}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		resp.ContentLength = n
	}
	return resp, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// serverRequest is req as a server would have received it: a path-only
// URL with its request URI, the loopback as the peer (Caddy's proxy and
// its placeholders parse the address), the body and headers as sent but
// for client credentials (the request acts as its member, never as a key).
func serverRequest(ctx context.Context, req *http.Request) *http.Request {
	in := req.Clone(ctx)
	for _, h := range formats.ClientCredentialHeaders {
		in.Header.Del(h)
	}
	u := *req.URL
	if q := u.Query(); q.Has(formats.QueryKey) {
		q.Del(formats.QueryKey)
		u.RawQuery = q.Encode()
	}
	u.Scheme, u.Host, u.User = "", "", nil
	in.URL = &u
	in.RequestURI = u.RequestURI()
	in.Host = req.URL.Host
	in.RemoteAddr = "127.0.0.1:0"
	in.Proto, in.ProtoMajor, in.ProtoMinor = "HTTP/1.1", 1, 1
	if in.Body == nil {
		in.Body = http.NoBody
	}
	return in
}

// pipeWriter is the handler's ResponseWriter: headers are handed over on
// the first WriteHeader (a copy: the handler keeps its map), the body goes
// through the pipe, each Write reaching the reader before it returns.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
	sent   http.Header
	err    error // set before ready closes when the handler failed before its headers
}

func (w *pipeWriter) Header() http.Header { return w.header }

// WriteHeader hands the status and headers over; informational answers
// are not passed on.
func (w *pipeWriter) WriteHeader(status int) {
	if status < 200 {
		return
	}
	w.once.Do(func() {
		w.status, w.sent = status, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(p)
}

// Flush is a no-op: every Write has reached the reader when it returns.
// It lets the handler (Caddy's proxy) stream.
func (w *pipeWriter) Flush() {}

// abort ends the answer with err: before the headers, RoundTrip returns
// err; after, reading the body does.
func (w *pipeWriter) abort(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.ready)
	})
	w.pw.CloseWithError(err)
}

// localBody is an in-process response's body. Close stops the handler
// (its context is cancelled, its writes fail) and waits for it to end.
type localBody struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

func (b *localBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *localBody) Close() error {
	b.pr.CloseWithError(errors.New("the response body was closed"))
	b.cancel()
	<-b.done
	return nil
}

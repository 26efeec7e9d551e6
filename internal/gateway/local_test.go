package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var testMember = Member{Workspace: "wrk_x", ServiceAccount: "sa_x", Instance: "default"}

func localClient(serve http.HandlerFunc) *http.Client {
	return &http.Client{Transport: &LocalTransport{Serve: serve,
		Member: func(context.Context) (Member, error) { return testMember, nil }}}
}

// The handler gets a server-shaped request carrying the member; the
// response is returned once its headers are written, and each write
// reaches the reader before the handler goes on.
func TestLocalTransportStreams(t *testing.T) {
	next := make(chan struct{})
	var seen *http.Request
	var body string
	c := localClient(func(w http.ResponseWriter, r *http.Request) {
		seen = r
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Early", "1")
		w.WriteHeader(http.StatusEarlyHints) // not passed on
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("one\n"))
		http.NewResponseController(w).Flush()
		<-next
		w.Header().Set("X-Late", "1") // after the headers: not seen
		w.Write([]byte("two\n"))
	})
	req, _ := http.NewRequest("POST", "http://agentgate.local/v1/chat/completions?x=1", strings.NewReader(`{"a":1}`))
	req.Header.Set("X-Opencode-Session", "ses_1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Early") != "1" {
		t.Fatalf("response %d %v", resp.StatusCode, resp.Header)
	}
	if m, ok := memberOf(seen.Context()); !ok || m != testMember {
		t.Fatalf("member in the handler's context: %+v %v", m, ok)
	}
	if seen.URL.Host != "" || seen.URL.Path != "/v1/chat/completions" || seen.RequestURI != "/v1/chat/completions?x=1" ||
		seen.RemoteAddr != "127.0.0.1:0" || seen.Header.Get("X-Opencode-Session") != "ses_1" || body != `{"a":1}` {
		t.Fatalf("request %+v body %q", seen, body)
	}
	buf := make([]byte, 16)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != "one\n" {
		t.Fatalf("first write: %q %v", buf[:n], err)
	}
	close(next)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "two\n" || resp.Header.Get("X-Late") != "" {
		t.Fatalf("rest %q %v %v", rest, err, resp.Header)
	}
	resp.Body.Close()
}

// A handler that aborts (Caddy's proxy on a cut stream) ends the body
// with an error, or fails the round trip before any header; any other
// panic is an error too, never a crash.
func TestLocalTransportAbort(t *testing.T) {
	c := localClient(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("partial"))
		panic(http.ErrAbortHandler)
	})
	resp, err := c.Get("http://x/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "partial" || !errors.Is(err, errAborted) {
		t.Fatalf("aborted after headers: %q %v", b, err)
	}
	for _, v := range []any{http.ErrAbortHandler, "boom"} {
		c := localClient(func(http.ResponseWriter, *http.Request) { panic(v) })
		if _, err := c.Get("http://x/v1/models"); err == nil {
			t.Fatalf("panic %v before headers: no error", v)
		}
	}
	// A handler that writes nothing answers 200 with an empty body.
	c = localClient(func(http.ResponseWriter, *http.Request) {})
	resp, err = c.Get("http://x/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("empty handler: %v %v", resp, err)
	}
	if b, err := io.ReadAll(resp.Body); len(b) != 0 || err != nil {
		t.Fatalf("empty handler body %q %v", b, err)
	}
	resp.Body.Close()
	// The member's resolution failing fails the round trip.
	c = &http.Client{Transport: &LocalTransport{Serve: func(http.ResponseWriter, *http.Request) { t.Error("served") },
		Member: func(context.Context) (Member, error) { return Member{}, errors.New("no member") }}}
	if _, err := c.Get("http://x/v1/models"); err == nil || !strings.Contains(err.Error(), "no member") {
		t.Fatalf("member error: %v", err)
	}
}

// Cancelling the request's context cancels the handler's, before and
// after the headers; closing the body early stops the handler, whose
// writes then fail, and waits for it.
func TestLocalTransportCancelAndClose(t *testing.T) {
	stopped := make(chan error, 1)
	block := func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		stopped <- r.Context().Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/v1/models", nil)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := localClient(block).Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before headers: %v", err)
	}
	if err := <-stopped; err == nil {
		t.Fatal("the handler's context was not cancelled")
	}

	writes := make(chan error, 1)
	c := localClient(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		<-r.Context().Done()
		_, err := w.Write([]byte("late"))
		writes <- err
	})
	resp, err := c.Get("http://x/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // returns once the handler has ended
	select {
	case err := <-writes:
		if err == nil {
			t.Fatal("a write after Close succeeded")
		}
	default:
		t.Fatal("Close returned before the handler ended")
	}

	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", "http://x/v1/models", nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("cancelled after headers: the body ended cleanly")
	}
	resp.Body.Close()
}

// proxyForwarder forwards with the standard library's reverse proxy (the
// module uses Caddy's), adding the credential as the module's transport
// does.
type proxyForwarder struct{}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (proxyForwarder) Forward(w http.ResponseWriter, out *http.Request, to Upstream) error {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.Out.URL.Scheme, pr.Out.URL.Host = "http", to.Dial },
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return http.DefaultTransport.RoundTrip(UpstreamRequest(r))
		}),
		FlushInterval: -1,
	}
	rp.ServeHTTP(w, out)
	return nil
}

// memberEnv is a pipeline over a real store with a workspace whose model
// "smart" is a fake provider's gpt-4o, and an instance's member.
type memberEnv struct {
	svc    *service.Service
	fake   *fakeprovider.Provider
	member Member
	client *http.Client
}

func newMemberEnv(t *testing.T) *memberEnv {
	te := testenv.New(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fake, err := fakeprovider.Start("sk-up")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	ctx := context.Background()
	im, err := te.Service.EnsureInstanceMember(ctx, "acme", "default")
	if err != nil {
		t.Fatal(err)
	}
	op := service.Operator(im.Workspace)
	conn, err := te.Service.CreateConnection(ctx, op, service.ConnectionInput{Name: "fake", Kind: store.KindOpenAI, BaseURL: fake.URL + "/v1",
		Credential: "sk-up", Models: map[string]service.ModelInput{"gpt-4o": {Pricing: &store.Pricing{Input: 2 * money.Scale, Output: 8 * money.Scale}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.Service.CreateWorkspaceModel(ctx, op, service.WorkspaceModelInput{ID: "smart",
		Targets: []store.ModelTarget{{Connection: conn.ID, Model: "gpt-4o"}}}); err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{Service: func(context.Context) (*service.Service, error) { return te.Service, nil }, Forwarder: proxyForwarder{},
		MaxRequestBody: 1 << 20, Metrics: NewMetrics(nil), Logger: zap.NewNop()}
	e := &memberEnv{svc: te.Service, fake: fake, member: Member{Workspace: im.Workspace, ServiceAccount: im.Account.ID, Instance: "default"}}
	e.client = &http.Client{Transport: &LocalTransport{Serve: p.Serve, Member: func(context.Context) (Member, error) { return e.member, nil }}}
	return e
}

func (e *memberEnv) chat(t *testing.T, ctx context.Context, model string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://agentgate.local/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Opencode-Session", "ses_member")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// usage waits for n usage records of the workspace and returns them.
func (e *memberEnv) usage(t *testing.T, n int) []*store.UsageRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _, err := e.svc.Usage(context.Background(), service.Operator(e.member.Workspace), service.UsageQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d usage records, want %d", len(recs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An in-process request of a member goes through the pipeline without a
// key: answered, metered and recorded against the member's service
// account with the agent session; the account deleted, the next request
// is refused with the cause.
func TestMemberRequest(t *testing.T) {
	e := newMemberEnv(t)
	ctx := context.Background()
	resp, body := e.chat(t, ctx, "smart")
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}
	if got := e.fake.Last().Header.Get("Authorization"); got != "Bearer sk-up" {
		t.Fatalf("the provider got %q", got)
	}
	rec := e.usage(t, 1)[0]
	if rec.MemberID != e.member.ServiceAccount || rec.MemberKind != store.MemberServiceAccount || rec.Session != "ses_member" ||
		rec.Model != "smart" || rec.Status != 200 || rec.Cost == 0 || rec.KeyID != "" || rec.ClientDisconnected {
		t.Fatalf("record %+v", rec)
	}
	// A credential in an in-process request is not taken: the request acts
	// as its member.
	req, _ := http.NewRequest("POST", "http://agentgate.local/v1/chat/completions?key=ag_sk_forged",
		strings.NewReader(`{"model":"smart","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer ag_sk_forged")
	resp, err := e.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("with a credential: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := e.fake.Last(); got.RawQuery != "" || got.Header.Get("Authorization") != "Bearer sk-up" {
		t.Fatalf("the provider got %q %v", got.RawQuery, got.Header)
	}
	// A budget of the member applies.
	op := service.Operator(e.member.Workspace)
	limit := money.Micros(1)
	if _, err := e.svc.SetBudget(ctx, op, e.member.ServiceAccount, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodTotal}); err != nil {
		t.Fatal(err)
	}
	if resp, body := e.chat(t, ctx, "smart"); resp.StatusCode != 402 || !strings.Contains(body, "BudgetExceeded") {
		t.Fatalf("over budget: %d %s", resp.StatusCode, body)
	}
	// Deleted: refused at once, with the account named.
	if err := e.svc.DeleteServiceAccount(ctx, op, e.member.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	resp, body = e.chat(t, ctx, "smart")
	if resp.StatusCode != 401 || !strings.Contains(body, e.member.ServiceAccount) || !strings.Contains(body, "was deleted") {
		t.Fatalf("deleted account: %d %s", resp.StatusCode, body)
	}
	// Neither refusal reached the provider.
	if n := len(e.fake.Received()); n != 2 {
		t.Fatalf("the provider got %d requests", n)
	}
}

// An interrupt (the request's context cancelled mid-stream) cancels the
// provider's request, and the usage record says the client went away.
func TestMemberRequestInterrupted(t *testing.T) {
	e := newMemberEnv(t)
	e.fake.SetBehavior(fakeprovider.Behavior{Delay: 200 * time.Millisecond, Chunks: 50})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://agentgate.local/v1/chat/completions",
		strings.NewReader(`{"model":"smart","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Opencode-Session", "ses_cut")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rec := e.usage(t, 1)[0]
	if !rec.ClientDisconnected || rec.Session != "ses_cut" || rec.MemberID != e.member.ServiceAccount {
		t.Fatalf("record %+v", rec)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !e.fake.Last().Canceled {
		if time.Now().After(deadline) {
			t.Fatal("the provider's request was not cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An interrupted non-stream request returns at once, without waiting for
// the provider, which has the request and bills it: its answer is still
// read and metered in the background, the record saying the client went
// away, and the provider's request is not cancelled.
func TestMemberRequestInterruptedNonStream(t *testing.T) {
	e := newMemberEnv(t)
	hold := make(chan struct{})
	e.fake.SetBehavior(fakeprovider.Behavior{Hold: hold})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://agentgate.local/v1/chat/completions",
		strings.NewReader(`{"model":"smart","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Opencode-Session", "ses_gone")
	done := make(chan error, 1)
	go func() {
		resp, err := e.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); len(e.fake.Received()) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the provider")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted: %v", err)
		}
	case <-time.After(10 * time.Second):
		close(hold)
		t.Fatal("the interrupted round trip waited for the provider")
	}
	close(hold) // the provider answers only now
	rec := e.usage(t, 1)[0]
	want := store.Tokens{Input: fakeprovider.InputTokens - fakeprovider.CachedTokens, CacheRead: fakeprovider.CachedTokens,
		Output: fakeprovider.OutputTokens - fakeprovider.ReasoningTokens, Reasoning: fakeprovider.ReasoningTokens}
	// gpt-4o at 2 USD input (cache reads too) and 8 USD output (reasoning too) per million.
	cost := money.Pico((want.Input+want.CacheRead)*2_000_000 + (want.Output+want.Reasoning)*8_000_000)
	if rec.Tokens != want || rec.Cost != cost || rec.Estimated || rec.Status != 200 || !rec.ClientDisconnected || rec.Session != "ses_gone" {
		t.Fatalf("record %+v, want tokens %+v cost %s", rec, want, cost)
	}
	if e.fake.Last().Canceled {
		t.Fatal("the provider's request was cancelled")
	}
}

// streamHandler answers a small event stream, flushed event by event.
func streamHandler(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	for range 3 {
		w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"))
		http.NewResponseController(w).Flush()
	}
}

// The cost of a round trip in-process, against the same handler over
// loopback HTTP (BenchmarkLoopbackTransport).
func BenchmarkLocalTransport(b *testing.B) {
	benchTransport(b, localClient(streamHandler), "http://agentgate.local")
}

func BenchmarkLoopbackTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(streamHandler))
	defer srv.Close()
	benchTransport(b, srv.Client(), srv.URL)
}

func benchTransport(b *testing.B, c *http.Client, base string) {
	body := strings.Repeat("x", 4096)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

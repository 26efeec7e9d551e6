package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

// replayForwarder answers every request with one answer the fake provider
// gave, as Caddy's proxy would copy it: it reads and closes the outgoing
// body, takes the credential's copy of the request (UpstreamRequest), and
// writes the answer's headers and body. What is left of a request's cost
// is the pipeline's own.
type replayForwarder struct {
	header http.Header
	body   []byte
}

func (f *replayForwarder) Forward(w http.ResponseWriter, out *http.Request, _ Upstream) error {
	up := UpstreamRequest(out)
	io.Copy(io.Discard, up.Body)
	up.Body.Close()
	h := w.Header()
	for k, v := range f.header {
		h[k] = v
	}
	w.WriteHeader(http.StatusOK)
	w.Write(f.body)
	return nil
}

// discardWriter is a client that reads nothing back.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkPipelineCost is the pipeline's own cost per request, without
// sockets or a proxy: a 1 KB Chat Completions request of a budgeted
// service account's key, authenticated, admitted, reserved, metered and
// settled into a real store. cpu-µs/op is the process's CPU time per
// request, the settlement writer's and the store's background work
// included (the clock is the store's own, not the benchmark's).
//
//	go test ./internal/gateway -run '^$' -bench PipelineCost -benchtime 20000x
func BenchmarkPipelineCost(b *testing.B) {
	ce := newCostEnv(b)
	serve := ce.client()
	b.ReportAllocs()
	b.ResetTimer()
	before := cpuNow()
	for b.Loop() {
		serve()
	}
	ce.done(b, before)
}

// BenchmarkPipelineCostParallel is BenchmarkPipelineCost with 32 requests
// in flight (16 per P), as a server at saturation holds them: the same
// work per request, each request's objects among the others'.
func BenchmarkPipelineCostParallel(b *testing.B) {
	ce := newCostEnv(b)
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	before := cpuNow()
	b.RunParallel(func(pb *testing.PB) {
		serve := ce.client()
		for pb.Next() {
			serve()
		}
	})
	ce.done(b, before)
}

// costEnv is a pipeline over a real store, its forwarder replaying one
// real answer of the fake provider, and a budgeted key.
type costEnv struct {
	te         *testenv.Env
	op         *service.Principal
	member     string // the key's service account
	p          *Pipeline
	path, auth string
	body       []byte
}

func newCostEnv(b *testing.B) *costEnv {
	te, fake, _, op := fakeWorkspace(b, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx := context.Background()
	conn, err := te.Service.CreateConnection(ctx, op, service.ConnectionInput{Name: "openai", Kind: store.KindOpenAI, BaseURL: fake.URL + "/v1",
		Credential: "sk-up", Models: map[string]service.ModelInput{"gpt-4o-mini": {Pricing: &store.Pricing{Input: money.Scale, Output: 4 * money.Scale}}}})
	if err != nil {
		b.Fatal(err)
	}
	sa, err := te.Service.CreateServiceAccount(ctx, op, "bench")
	if err != nil {
		b.Fatal(err)
	}
	k, err := te.Service.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "bench", Permission: store.PermissionInference})
	if err != nil {
		b.Fatal(err)
	}
	limit := money.Micros(1_000_000 * money.Scale)
	if _, err := te.Service.SetBudget(ctx, op, sa.ID, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"` +
		strings.Repeat("lorem ipsum ", 78) + `"}]}`)

	// One real answer of the fake provider, replayed.
	req, _ := http.NewRequest("POST", fake.URL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-up")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("fake provider: %d %s", resp.StatusCode, answer)
	}
	fw := &replayForwarder{header: http.Header{"Content-Type": {"application/json"}, "Content-Length": {resp.Header.Get("Content-Length")}}, body: answer}

	ce := &costEnv{te: te, op: op, member: sa.ID, body: body, path: "/custom/" + conn.ID + "/chat/completions", auth: "Bearer " + k.Key,
		p: &Pipeline{Service: func(context.Context) (*service.Service, error) { return te.Service, nil }, Forwarder: fw,
			MaxRequestBody: 1 << 20, Metrics: NewMetrics(nil), Logger: zap.NewNop(), RequestID: func(*http.Request) string { return "req" }}}
	serve := ce.client()
	for range 200 { // warm the store and the pools
		serve()
	}
	te.Service.Ledger.Wait()
	return ce
}

// client returns a function that sends one request, for one goroutine.
func (ce *costEnv) client() func() {
	dw := &discardWriter{h: http.Header{}}
	rd := bytes.NewReader(ce.body)
	return func() {
		rd.Reset(ce.body)
		r, _ := http.NewRequest("POST", "http://gw"+ce.path, rd)
		r.Header.Set("Authorization", ce.auth)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("User-Agent", "OpenAI/Python 1.99.0")
		r.RequestURI = ce.path
		clear(dw.h)
		ce.p.Serve(dw, r)
	}
}

// done waits for the settlements, reports the CPU per request since
// before, and checks the requests were answered and charged.
func (ce *costEnv) done(b *testing.B, before time.Duration) {
	ce.te.Service.Ledger.Wait()
	b.StopTimer()
	b.ReportMetric(float64((cpuNow()-before).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	recs, _, err := ce.te.Service.Usage(context.Background(), ce.op, service.UsageQuery{Limit: 1})
	if err != nil || len(recs) == 0 || recs[0].Status != 200 || recs[0].Cost == 0 {
		b.Fatalf("usage %+v, %v", recs, err)
	}
	st, err := ce.te.Service.Ledger.Status(context.Background(), ce.op.Workspace, ce.member)
	if want := recs[0].Cost * money.Pico(200+b.N); err != nil || st.Budget == nil || st.Budget.Spent != want || st.Reserved != 0 {
		b.Fatalf("budget %+v (%v), want %s spent for %d requests", st, err, want, 200+b.N)
	}
}

// cpuNow is the process's user and system CPU time so far.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

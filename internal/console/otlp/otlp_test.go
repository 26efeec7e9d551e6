package otlp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/agentgate/agentgate/internal/console/otlp"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

// export is one request the fake collector received.
type export struct {
	path, contentType, auth string
	body                    []byte
}

// collector is a fake OTLP collector on loopback: it hands every export
// it receives to the test, and answers status.
type collector struct {
	*httptest.Server
	got    chan export
	status int
}

func newCollector(t *testing.T, status int) *collector {
	c := &collector{got: make(chan export, 16), status: status}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.got <- export{r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), b}
		w.WriteHeader(c.status)
	}))
	t.Cleanup(c.Close)
	return c
}

// next waits for the collector's next export.
func (c *collector) next(t *testing.T) export {
	t.Helper()
	select {
	case e := <-c.got:
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("the collector received nothing")
	}
	return export{}
}

type env struct {
	te    *testenv.Env
	relay *otlp.Relay
	srv   *httptest.Server
	logs  *observer.ObservedLogs
	ws    *store.Workspace
	// A signed-in member and their token.
	member string
	tok    *service.IssuedToken
}

func newEnv(t *testing.T, opts otlp.Options) *env {
	te := testenv.New(t, t0)
	core, logs := observer.New(zap.DebugLevel)
	opts.Service = func(context.Context) (*service.Service, error) { return te.Service, nil }
	opts.Clock = te.Clock
	opts.Logger = zap.New(core)
	e := &env{te: te, relay: otlp.New(opts), logs: logs}
	t.Cleanup(e.relay.Close)
	mux := http.NewServeMux()
	mux.Handle("/", e.relay)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	e.ws, _ = te.Service.CreateWorkspace(ctx, "Acme")
	e.member = "usr_ann"
	if err := te.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutPerson(&store.Person{ID: e.member, Email: "ann@example.com", Name: "Ann", PasswordHash: "x", Created: t0}); err != nil {
			return err
		}
		return tx.PutMember(&store.Member{Workspace: e.ws.ID, PersonID: e.member, Role: store.RoleMember, Created: t0})
	}); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.tok, err = te.Service.IssuePersonToken(ctx, e.member, e.ws.ID, "claude-code"); err != nil {
		t.Fatal(err)
	}
	return e
}

// post sends one export to the relay.
func (e *env) post(t *testing.T, path, contentType, token string, body []byte, header ...string) (int, http.Header, []byte) {
	t.Helper()
	r, _ := http.NewRequest("POST", e.srv.URL+path, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

func attrs(kvs []*commonpb.KeyValue) map[string][]string {
	out := map[string][]string{}
	for _, kv := range kvs {
		out[kv.Key] = append(out[kv.Key], kv.Value.GetStringValue())
	}
	return out
}

// wantStamped checks a resource's attributes: the relay's, once each, and
// the client's own (but not its agentgate.* ones).
func (e *env) wantStamped(t *testing.T, what string, got map[string][]string) {
	t.Helper()
	for k, v := range map[string]string{otlp.AttrWorkspace: e.ws.ID, otlp.AttrWorkspaceName: "Acme", otlp.AttrMember: e.member,
		otlp.AttrEmail: "ann@example.com", otlp.AttrRole: "member", otlp.AttrSignIn: e.tok.FamilyID, "service.name": "claude-code"} {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("%s: attribute %s = %q, want [%q] (all: %v)", what, k, got[k], v, got)
		}
	}
	if got["agentgate.claimed"] != nil {
		t.Errorf("%s: a client's agentgate.* attribute passed: %v", what, got)
	}
}

// TestRelayWithOTLPClients points the OpenTelemetry Go SDK's OTLP/HTTP
// exporters (metrics and traces, protobuf) at the relay on loopback, with
// a resource that claims to be someone else: the collector receives the
// data with the member's attributes, the relay's collector credential, and
// never the member's token.
func TestRelayWithOTLPClients(t *testing.T) {
	col := newCollector(t, http.StatusOK)
	e := newEnv(t, otlp.Options{Endpoint: col.URL + "/", Headers: map[string]string{"Authorization": "Bearer collector-SECRET"}})
	res := resource.NewSchemaless(attribute.String("service.name", "claude-code"),
		attribute.String(otlp.AttrMember, "usr_someone_else"), attribute.String(otlp.AttrWorkspace, "wrk_other"),
		attribute.String("agentgate.claimed", "yes"))
	headers := map[string]string{"Authorization": "Bearer " + e.tok.AccessToken}

	mexp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(e.srv.URL+"/v1/metrics"), otlpmetrichttp.WithHeaders(headers),
		otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))
	counter, _ := mp.Meter("claude-code").Int64Counter("claude_code.token.usage")
	counter.Add(ctx, 1234, metricAttr("type", "input"))
	var rm = collect(t, reader)
	if err := mexp.Export(ctx, rm); err != nil {
		t.Fatalf("the metric exporter: %v", err)
	}
	got := col.next(t)
	if got.path != "/v1/metrics" || got.contentType != "application/x-protobuf" || got.auth != "Bearer collector-SECRET" {
		t.Fatalf("the collector got %s %s %q", got.path, got.contentType, got.auth)
	}
	var mreq colmetrics.ExportMetricsServiceRequest
	if err := proto.Unmarshal(got.body, &mreq); err != nil {
		t.Fatal(err)
	}
	if len(mreq.ResourceMetrics) != 1 {
		t.Fatalf("resource metrics %v", mreq.ResourceMetrics)
	}
	e.wantStamped(t, "metrics", attrs(mreq.ResourceMetrics[0].Resource.Attributes))
	if m := mreq.ResourceMetrics[0].ScopeMetrics[0].Metrics[0]; m.Name != "claude_code.token.usage" || m.GetSum().DataPoints[0].GetAsInt() != 1234 {
		t.Fatalf("the metric changed on the way: %v", m)
	}
	if bytes.Contains(got.body, []byte(e.tok.AccessToken)) {
		t.Fatal("the member's token reached the collector")
	}

	texp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(e.srv.URL+"/v1/traces"), otlptracehttp.WithHeaders(headers),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSyncer(texp))
	_, span := tp.Tracer("claude-code").Start(ctx, "claude_code.tool")
	span.End()
	got = col.next(t)
	var treq coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(got.body, &treq); err != nil || got.path != "/v1/traces" {
		t.Fatalf("traces: %s %v", got.path, err)
	}
	e.wantStamped(t, "traces", attrs(treq.ResourceSpans[0].Resource.Attributes))
	if treq.ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "claude_code.tool" {
		t.Fatalf("the span changed on the way: %v", treq.ResourceSpans[0])
	}
	tp.Shutdown(ctx)

	// An API key is refused, even an All key: the exporter reports it.
	sa, _ := e.te.Service.CreateServiceAccount(ctx, service.Operator(e.ws.ID), "ci")
	key, _ := e.te.Service.CreateKey(ctx, service.Operator(e.ws.ID), sa.ID, service.NewKey{Name: "k", Permission: store.PermissionAll})
	kexp, _ := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(e.srv.URL+"/v1/metrics"),
		otlpmetrichttp.WithHeaders(map[string]string{"Authorization": "Bearer " + key.Key}), otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}))
	if err := kexp.Export(ctx, rm); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("telemetry with an API key: %v", err)
	}
	select {
	case x := <-col.got:
		t.Fatalf("the collector got a key's export: %s", x.path)
	default:
	}
}

func metricAttr(k, v string) metric.AddOption {
	return metric.WithAttributes(attribute.String(k, v))
}

func collect(t *testing.T, r *sdkmetric.ManualReader) *metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	return &rm
}

// TestRelayJSON sends OTLP JSON as an exporter would, with numbers no
// double holds, a resource claiming another member, and its attributes'
// other members kept as sent.
func TestRelayJSON(t *testing.T) {
	col := newCollector(t, http.StatusOK)
	e := newEnv(t, otlp.Options{Endpoint: col.URL})
	body := `{"resourceLogs": [{"resource": {"attributes": [
			{"key": "service.name", "value": {"stringValue": "claude-code"}},
			{"key": "agentgate.member.id", "value": {"stringValue": "usr_mallory"}},
			{"key": "agentgate.claimed", "value": {"boolValue": true}}], "droppedAttributesCount": 0},
		"scopeLogs": [{"scope": {"name": "com.anthropic.claude_code"}, "logRecords": [{"timeUnixNano": 1730000000123456789,
			"body": {"stringValue": "claude_code.tool_result <&>"}, "traceId": "5b8efff798038103d269b633813fc60c"}]}],
		"schemaUrl": "https://opentelemetry.io/schemas/1.26.0"}]}`
	status, hd, b := e.post(t, "/v1/logs", "application/json", e.tok.AccessToken, []byte(body))
	if status != 200 || hd.Get("Content-Type") != "application/json" || string(b) != "{}" {
		t.Fatalf("JSON logs: %d %s", status, b)
	}
	got := col.next(t)
	if got.path != "/v1/logs" || got.contentType != "application/json" {
		t.Fatalf("collector got %s %s", got.path, got.contentType)
	}
	var req struct {
		ResourceLogs []struct {
			Resource struct {
				Attributes []struct {
					Key   string         `json:"key"`
					Value map[string]any `json:"value"`
				} `json:"attributes"`
				Dropped *int `json:"droppedAttributesCount"`
			} `json:"resource"`
			SchemaURL string `json:"schemaUrl"`
		} `json:"resourceLogs"`
	}
	if err := json.Unmarshal(got.body, &req); err != nil || len(req.ResourceLogs) != 1 {
		t.Fatalf("the collector got %s: %v", got.body, err)
	}
	m := map[string][]string{}
	for _, a := range req.ResourceLogs[0].Resource.Attributes {
		s, _ := a.Value["stringValue"].(string)
		m[a.Key] = append(m[a.Key], s)
	}
	e.wantStamped(t, "JSON logs", m)
	if req.ResourceLogs[0].SchemaURL == "" || req.ResourceLogs[0].Resource.Dropped == nil {
		t.Errorf("the entry lost its other members: %s", got.body)
	}
	for _, kept := range []string{`"timeUnixNano": 1730000000123456789`, `"traceId": "5b8efff798038103d269b633813fc60c"`, `claude_code.tool_result <&>`} {
		if !bytes.Contains(got.body, []byte(kept)) {
			t.Errorf("the collector's body lost %s: %s", kept, got.body)
		}
	}

	// snake_case, as protobuf's JSON readers also accept it: stamped too,
	// and sent on under the OTLP name.
	status, _, b = e.post(t, "/v1/metrics", "application/json; charset=utf-8", e.tok.AccessToken,
		[]byte(`{"resource_metrics": [{"scope_metrics": []}], "extra": 1}`))
	if status != 200 {
		t.Fatalf("snake_case metrics: %d %s", status, b)
	}
	got = col.next(t)
	if !bytes.HasPrefix(got.body, []byte(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"agentgate.workspace.id"`)) ||
		bytes.Contains(got.body, []byte(`"extra"`)) {
		t.Fatalf("snake_case metrics reached the collector as %s", got.body)
	}
}

// TestRelayRefuses: each bad request gets its status, in OTLP's error
// shape, and nothing reaches the collector.
func TestRelayRefuses(t *testing.T) {
	col := newCollector(t, http.StatusOK)
	e := newEnv(t, otlp.Options{Endpoint: col.URL, MaxBody: 1024, RequestsPerMinute: 1000})
	valid, _ := proto.Marshal(&colmetrics.ExportMetricsServiceRequest{})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte{0}, 4096)) // 4 KiB once inflated, over the 1 KiB bound
	zw.Close()
	sa, _ := e.te.Service.CreateServiceAccount(ctx, service.Operator(e.ws.ID), "ci")
	key, _ := e.te.Service.CreateKey(ctx, service.Operator(e.ws.ID), sa.ID, service.NewKey{Name: "k", Permission: store.PermissionInference})
	revoked, _ := e.te.Service.IssuePersonToken(ctx, e.member, e.ws.ID, "claude-code")
	p, _ := e.te.Service.Authenticate(ctx, revoked.AccessToken, "")
	if err := e.te.Service.RevokeSignIn(ctx, p, revoked.FamilyID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, contentType, token string
		body                           []byte
		header                         []string
		status                         int
	}{
		{"oversized protobuf", "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, bytes.Repeat([]byte{0x0a}, 2048), nil, 413},
		{"oversized once inflated", "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, gz.Bytes(), []string{"Content-Encoding", "gzip"}, 413},
		{"malformed protobuf", "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, []byte{0x0a, 0xff, 0xff, 0xff}, nil, 400},
		{"malformed JSON", "/v1/logs", "application/json", e.tok.AccessToken, []byte(`{"resourceLogs": [`), nil, 400},
		{"JSON not an object", "/v1/logs", "application/json", e.tok.AccessToken, []byte(`[1]`), nil, 400},
		{"JSON with a repeated resource", "/v1/logs", "application/json", e.tok.AccessToken,
			[]byte(`{"resourceLogs": [{"resource": {"attributes": []}, "resource": {"attributes": []}}]}`), nil, 400},
		{"JSON with a repeated key in an attribute", "/v1/logs", "application/json", e.tok.AccessToken,
			[]byte(`{"resourceLogs": [{"resource": {"attributes": [{"key": "agentgate.member.id", "key": "x", "value": {}}]}}]}`), nil, 400},
		{"JSON naming its list twice", "/v1/traces", "application/json", e.tok.AccessToken,
			[]byte(`{"resourceSpans": [], "resource_spans": []}`), nil, 400},
		{"a bad gzip body", "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, []byte("not gzip"), []string{"Content-Encoding", "gzip"}, 400},
		{"another encoding", "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, valid, []string{"Content-Encoding", "br"}, 415},
		{"another content type", "/v1/metrics", "text/plain", e.tok.AccessToken, valid, nil, 415},
		{"no token", "/v1/metrics", "application/x-protobuf", "", valid, nil, 401},
		{"a revoked token", "/v1/metrics", "application/x-protobuf", revoked.AccessToken, valid, nil, 401},
		{"an API key", "/v1/metrics", "application/x-protobuf", key.Key, valid, nil, 403},
		{"an API key in JSON", "/v1/logs", "application/json", key.Key, []byte(`{}`), nil, 403},
	} {
		status, hd, b := e.post(t, tc.path, tc.contentType, tc.token, tc.body, tc.header...)
		if status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, status, b, tc.status)
			continue
		}
		if strings.HasPrefix(tc.contentType, "application/json") || tc.status == 415 {
			var v struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Tag     string `json:"_tag"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.Code == 0 || v.Message == "" || v.Tag == "" {
				t.Errorf("%s: JSON error %s", tc.name, b)
			}
		} else if hd.Get("Content-Type") != "application/x-protobuf" || len(b) == 0 {
			t.Errorf("%s: protobuf error %q %q", tc.name, hd.Get("Content-Type"), b)
		}
	}
	// The wrong method.
	r, _ := http.NewRequest("GET", e.srv.URL+"/v1/metrics", nil)
	r.Header.Set("Authorization", "Bearer "+e.tok.AccessToken)
	if res, err := http.DefaultClient.Do(r); err != nil || res.StatusCode != 405 || res.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %v %v", res, err)
	}
	// A gzip body within the bound is taken.
	gz.Reset()
	zw = gzip.NewWriter(&gz)
	zw.Write(valid)
	zw.Close()
	if status, _, b := e.post(t, "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, gz.Bytes(), "Content-Encoding", "gzip"); status != 200 {
		t.Fatalf("a gzip body: %d %s", status, b)
	}
	col.next(t)
	select {
	case x := <-col.got:
		t.Fatalf("a refused export reached the collector: %s %s", x.path, x.body)
	default:
	}
}

// TestRelayRateAndDrops: past the rate a sign-in gets 429 with
// Retry-After until the next minute; without a collector exports are
// answered 200 and dropped; a failing collector is logged without a token
// or a body.
func TestRelayRateAndDrops(t *testing.T) {
	e := newEnv(t, otlp.Options{RequestsPerMinute: 2})
	if e.relay.Forwards() {
		t.Fatal("a relay without an endpoint forwards")
	}
	valid, _ := proto.Marshal(&colmetrics.ExportMetricsServiceRequest{})
	for i := 0; i < 2; i++ {
		if status, _, b := e.post(t, "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, valid); status != 200 {
			t.Fatalf("export %d: %d %s", i, status, b)
		}
	}
	e.te.Clock.Advance(15 * time.Second)
	status, hd, _ := e.post(t, "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, valid)
	if status != 429 || hd.Get("Retry-After") != "45" {
		t.Fatalf("past the rate: %d Retry-After %q", status, hd.Get("Retry-After"))
	}
	// Another sign-in of the same person has its own count.
	other, _ := e.te.Service.IssuePersonToken(ctx, e.member, e.ws.ID, "claude-code")
	if status, _, _ := e.post(t, "/v1/logs", "application/json", other.AccessToken, []byte(`{}`)); status != 200 {
		t.Fatalf("another sign-in: %d", status)
	}
	e.te.Clock.Advance(45 * time.Second)
	if status, _, _ := e.post(t, "/v1/metrics", "application/x-protobuf", e.tok.AccessToken, valid); status != 200 {
		t.Fatalf("the next minute: %d", status)
	}

	// A collector that fails: the client still gets 200, the failure is
	// logged, with neither the token nor the body.
	col := newCollector(t, http.StatusInternalServerError)
	f := newEnv(t, otlp.Options{Endpoint: col.URL})
	body := []byte(`{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "PROMPT-TEXT-SECRET"}}]}]}]}`)
	if status, _, b := f.post(t, "/v1/logs", "application/json", f.tok.AccessToken, body); status != 200 {
		t.Fatalf("to a failing collector: %d %s", status, b)
	}
	col.next(t)
	// The export finishes after the collector answered: wait for its log.
	for deadline := time.Now().Add(30 * time.Second); f.logs.Len() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	entries := f.logs.All()
	if len(entries) != 1 || !strings.Contains(entries[0].Message, "collector refused") {
		t.Fatalf("log entries: %v", entries)
	}
	for _, en := range entries {
		line, _ := json.Marshal(en.ContextMap())
		if strings.Contains(en.Message+string(line), f.tok.AccessToken) || strings.Contains(string(line), "PROMPT-TEXT-SECRET") {
			t.Fatalf("a log entry holds the token or the body: %s %s", en.Message, line)
		}
	}
}

func TestClientEnv(t *testing.T) {
	env := otlp.ClientEnv("https://console.example.com/")
	if env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "https://console.example.com" || env["CLAUDE_CODE_ENABLE_TELEMETRY"] != "1" ||
		env["OTEL_EXPORTER_OTLP_PROTOCOL"] != "http/protobuf" || env["OTEL_METRICS_EXPORTER"] != "otlp" {
		t.Fatalf("env %v", env)
	}
	for _, p := range []string{"/v1/metrics", "/v1/logs", "/v1/traces"} {
		if !otlp.Handles(p) {
			t.Errorf("%s is not the relay's", p)
		}
	}
	for _, p := range []string{"/v1/models", "/v1/messages", "/v1/metrics/x", "/metrics"} {
		if otlp.Handles(p) {
			t.Errorf("%s is the relay's", p)
		}
	}
}

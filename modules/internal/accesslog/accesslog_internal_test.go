package accesslog

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestRedactURI(t *testing.T) {
	for in, want := range map[string]string{
		"/p":                          "/p",
		"/p?a=1":                      "/p?a=1",
		"/p?key=s":                    "/p",
		"/p?key":                      "/p",
		"/p?a=1&key=s&b=%20x&key=t":   "/p?a=1&b=%20x",
		"/p?k%65y=s&c=3":              "/p?c=3",
		"/p?keys=1&monkey=2&key=s":    "/p?keys=1&monkey=2",
		"/p?a=1&&key=s":               "/p?a=1",
		"/models/x:generateContent?a": "/models/x:generateContent?a",
		"/p?a=1&&b=2":                 "/p?a=1&&b=2",

		"/event?auth_token=b3BlbmNvZGU6cw%3D%3D":         "/event?auth_token=REDACTED",
		"/api/event?x=1&auth%5Ftoken=s&auth_token":       "/api/event?x=1&auth%5Ftoken=REDACTED&auth_token=REDACTED",
		"/auth/connect/c0de":                             "/auth/connect/REDACTED",
		"/auth/%63onnect/c0de?a=1":                       "/auth/connect/REDACTED?a=1",
		"/auth/connect/c0de/more":                        "/auth/connect/REDACTED/more",
		"/auth/connect/":                                 "/auth/connect/",
		"/device?user_code=ABCD-EFGH":                    "/device?user_code=REDACTED",
		"/signin?next=%2Fdevice%3Fuser_code%3DABCD-EFGH": "/signin?next=%2Fdevice%3Fuser_code%3DREDACTED",
		"/signin?next=%2Fw%2Fx":                          "/signin?next=%2Fw%2Fx",
		"/signin?next=%zz":                               "/signin?next=REDACTED",
		"http://h:1/device?user_code=A":                  "http://h:1/device?user_code=REDACTED",
		"https://h/auth/connect/c":                       "https://h/auth/connect/REDACTED",
		"https://h":                                      "https://h",
	} {
		if got := RedactURI(in); got != want {
			t.Errorf("RedactURI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCarries(t *testing.T) {
	for _, c := range []struct {
		slots  Slots
		header http.Header
		uri    string
		want   bool
	}{
		{Gateway, http.Header{}, "/p", false},
		{Gateway, http.Header{"Authorization": {"Bearer s"}, "Cookie": {"c"}}, "/p?keys=1&monkey=2", false},
		{Gateway, http.Header{"X-Api-Key": {"s"}}, "/p", true},
		{Gateway, http.Header{"Api-Key": {"s"}}, "/p", true},
		{Gateway, http.Header{"X-Goog-Api-Key": {"s"}}, "/p", true},
		{Gateway, http.Header{}, "/p?alt=sse&key=s", true},
		{Gateway, http.Header{}, "/p?k%65y=s", true},
		// The gateway looks for its own slots only.
		{Gateway, http.Header{}, "/p?auth_token=s&user_code=c", false},
		{Gateway, http.Header{}, "/auth/connect/c", false},

		{Instance, http.Header{}, "/event", false},
		{Instance, http.Header{}, "/event?auth_token=s", true},
		{Instance, http.Header{}, "/api/event?a=1&auth%5Ftoken=s", true},
		{Instance, http.Header{}, "/auth/connect/c", true},
		{Instance, http.Header{}, "/auth/%63onnect/c", true},
		{Instance, http.Header{}, "/auth/connect/", false},
		{Instance, http.Header{"Referer": {"http://h/event?auth_token=s"}}, "/x", true},
		{Instance, http.Header{"Referer": {"http://h/session"}}, "/x", false},
		{Instance, http.Header{"X-Api-Key": {"s"}}, "/x", false},

		{Console, http.Header{}, "/device", false},
		{Console, http.Header{}, "/device?user_code=c", true},
		{Console, http.Header{}, "/signin?next=%2Fdevice%3Fuser_code%3Dc", true},
		{Console, http.Header{}, "/signin?next=%2Fw%2Fx", false},
		{Console, http.Header{"Referer": {"https://c.test/device?user_code=c"}}, "/static/app.css", true},
		{Console, http.Header{"Referer": {"https://c.test/signin?next=%2Fdevice%3Fuser_code%3Dc"}}, "/signin", true},
		{Console, http.Header{"Referer": {"https://c.test/w/x"}}, "/w/x", false},
		{Console, http.Header{}, "/api/v2/config?key=s", true},
	} {
		if got := c.slots.Carries(c.header, c.uri); got != c.want {
			t.Errorf("Carries(%v, %q) = %v", c.header, c.uri, got)
		}
	}
	post := httptest.NewRequest("POST", "/signin", nil)
	if !Console.carries(post, post.RequestURI) || Gateway.carries(post, post.RequestURI) {
		t.Error("POST /signin: its answer's Location may name the verification page with its code")
	}
}

// TestRedactedAnswer: a Location with a secret is redacted in the entry,
// the response's own header left alone.
func TestRedactedAnswer(t *testing.T) {
	h := http.Header{"Location": {"/device?user_code=c"}, "X-A": {"1"}}
	got := redactedAnswer(h)
	if got["Location"][0] != "/device?user_code=REDACTED" || got["X-A"][0] != "1" || h["Location"][0] != "/device?user_code=c" {
		t.Errorf("redactedAnswer: %v, response %v", got, h)
	}
	plain := http.Header{"Location": {"/w/x"}}
	if got := redactedAnswer(plain); got["Location"][0] != "/w/x" {
		t.Errorf("redactedAnswer: %v", got)
	}
}

// TestServeLeavesOtherRequests: a request without a key in the slots
// Caddy does not redact is not taken (Caddy writes its own entry), nor is
// one whose server logs credentials on the operator's request.
func TestServeLeavesOtherRequests(t *testing.T) {
	l := &Log{access: zap.NewNop(), errors: zap.NewNop(), slots: Gateway}
	h := mustNotRun{t}
	srv := &caddyhttp.Server{Logs: &caddyhttp.ServerLogConfig{}}
	req := func(target string, hdr ...string) *http.Request {
		r := httptest.NewRequest("GET", target, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		ctx := context.WithValue(r.Context(), caddyhttp.ServerCtxKey, srv)
		ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
		return r.WithContext(ctx)
	}
	for _, r := range []*http.Request{req("/p?a=1", "Authorization", "Bearer s"), req("/custom/c/responses")} {
		if taken, _ := l.Serve(httptest.NewRecorder(), r, h, nil); taken {
			t.Errorf("%s %v taken", r.RequestURI, r.Header)
		}
	}
	srv.Logs.ShouldLogCredentials = true
	if taken, _ := l.Serve(httptest.NewRecorder(), req("/p?key=s"), h, nil); taken {
		t.Error("taken although the server logs credentials")
	}
	var nilLog *Log
	if taken, _ := nilLog.Serve(httptest.NewRecorder(), req("/p?key=s"), h, nil); taken {
		t.Error("a nil Log took a request")
	}
}

type mustNotRun struct{ t *testing.T }

func (m mustNotRun) ServeHTTP(http.ResponseWriter, *http.Request, caddyhttp.Handler) error {
	m.t.Fatal("the handler must not be called by Serve")
	return nil
}

// TestExtraFields reads back what handlers add with ExtraLogFields.
func TestExtraFields(t *testing.T) {
	extra := new(caddyhttp.ExtraLogFields)
	extra.Add(zap.String("a", "1"))
	extra.Set(zap.Int("b", 2))
	ctx := context.WithValue(context.Background(), caddyhttp.ExtraLogFieldsCtxKey, extra)
	got := extraFields(ctx)
	if len(got) != 2 || got[0].Key != "a" || got[0].String != "1" || got[1].Key != "b" || got[1].Type != zapcore.Int64Type {
		t.Fatalf("extra fields %v", got)
	}
	if extraFields(context.Background()) != nil {
		t.Fatal("fields without ExtraLogFields")
	}
}

func TestMatchWildcard(t *testing.T) {
	for _, c := range []struct {
		host, pattern string
		want          bool
	}{
		{"example.com", "example.com", true},
		{"Example.COM", "example.com", true},
		{"a.example.com", "*.example.com", true},
		{"a.b.example.com", "*.example.com", false},
		{"example.com", "*.example.com", false},
		{"[::1]", "::1", true},
		{"localhost", "localhost:8080", false},
	} {
		if got := matchWildcard(c.host, c.pattern); got != c.want {
			t.Errorf("matchWildcard(%q, %q) = %v", c.host, c.pattern, got)
		}
	}
}

// TestWhereEntriesGo: the same hosts are logged or skipped, and under the
// same logger names, as by Caddy's server.
func TestWhereEntriesGo(t *testing.T) {
	logs := &caddyhttp.ServerLogConfig{
		LoggerNames: map[string]caddyhttp.StringArray{"a.example.com": {"one"}, "*.example.com": {"two", ""}},
		SkipHosts:   []string{"skip.example.com", "*.skip.test"},
	}
	req := func(host string, vars map[string]any) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		return r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars))
	}
	for host, want := range map[string]bool{
		"a.example.com:8443": true, "b.example.com": true, "skip.example.com": true, // mapped wins over skipped
		"x.skip.test": false, "other.test": true, "[::1]:80": true,
	} {
		if got := shouldLog(logs, req(host, nil)); got != want {
			t.Errorf("shouldLog(%s) = %v", host, got)
		}
	}
	logs.SkipUnmappedHosts = true
	if shouldLog(logs, req("other.test", nil)) || !shouldLog(logs, req("b.example.com", nil)) {
		t.Error("skip_unmapped_hosts not honoured")
	}
	if shouldLog(nil, req("a.example.com", nil)) {
		t.Error("logged without access logs")
	}

	core, seen := observer.New(zapcore.DebugLevel)
	base := zap.New(core).Named("http.log.access")
	names := func(r *http.Request) []string {
		seen.TakeAll()
		for _, l := range loggersFor(base, logs, r) {
			l.Info("x")
		}
		var out []string
		for _, e := range seen.TakeAll() {
			out = append(out, e.LoggerName)
		}
		return out
	}
	for host, want := range map[string]string{
		"A.example.com":      "http.log.access.one",
		"b.example.com":      "http.log.access.two,http.log.access",
		"other.test:80":      "http.log.access",
		"deep.b.example.com": "http.log.access",
	} {
		if got := strings.Join(names(req(host, nil)), ","); got != want {
			t.Errorf("loggers of %s: %s, want %s", host, got, want)
		}
	}
	byVar := req("a.example.com", map[string]any{caddyhttp.AccessLoggerNameVarKey: []any{"", "three"}})
	if got := strings.Join(names(byVar), ","); got != "http.log.access,http.log.access.three" {
		t.Errorf("loggers by access_logger_names: %s", got)
	}
	if got := loggersFor(base, nil, req("a.example.com", nil)); len(got) != 1 || got[0] != base {
		t.Errorf("loggers with no server log config: %v", got)
	}
}

// BenchmarkGatewayCarries is the gateway's per-request cost of telling a
// request without a key apart.
func BenchmarkGatewayCarries(b *testing.B) {
	h := http.Header{"Authorization": {"Bearer s"}, "Content-Type": {"application/json"}}
	for b.Loop() {
		if Gateway.Carries(h, "/v1beta/models/m:streamGenerateContent?alt=sse&x=1") {
			b.Fatal("carries")
		}
	}
}

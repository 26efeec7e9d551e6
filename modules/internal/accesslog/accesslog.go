// Package accesslog keeps secrets out of Caddy's access and error logs:
// workspace keys (llm_gateway, workspace_console), the instance's
// ?auth_token= and pairing codes (agent_instance), and device sign-in
// user codes (workspace_console).
//
// Caddy copies every request for its log entries before any handler runs
// and redacts only Authorization, Cookie and Proxy-Authorization in that
// copy, so a key sent as x-api-key, api-key, x-goog-api-key or ?key=, a
// token in ?auth_token=, the code of /auth/connect/{code} or a
// ?user_code= would be written as it came, and no handler can edit the
// copy. For a request that carries a secret in one of the slots its
// handler reads (Slots), the handler therefore writes the entry itself:
// the same message, level and fields as Caddy's, to the same loggers, with
// the secrets removed from the request object (and from a Location in the
// response headers), and sets Caddy's log_skip variable so that Caddy
// writes nothing more. An error returned by a later handler is handled the
// way Caddy's server handles it (error log entry, the site's error routes
// or the error's status), for the same reason: Caddy's error log entry
// carries the same copy of the request.
//
// Requests without a secret in those slots keep Caddy's own entries;
// telling them apart costs the gateway a context lookup, three header
// lookups and a scan of the query.
package accesslog

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Headers are the request headers a workspace key can travel in that Caddy
// does not redact by itself (it redacts Authorization).
var Headers = []string{"X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// QueryParam is the query parameter a workspace key can travel in. An
// entry shows the request URI without it.
const QueryParam = "key"

// The other slots: an entry shows their values as Redacted.
const (
	// AuthTokenParam carries the instance's Basic credentials (base64 of
	// user:password or user:token) for event-stream clients.
	AuthTokenParam = "auth_token"
	// PairingPath is followed by a single-use pairing code of the instance.
	PairingPath = "/auth/connect/"
	// UserCodeParam carries a device sign-in's user code to the Console's
	// verification page.
	UserCodeParam = "user_code"
	// NextParam carries the Console page a sign-in returns to: the
	// verification page with its user code, for one.
	NextParam = "next"
	// SignInPath answers a POST with a redirect to the form's next page,
	// which may be the verification page with its user code.
	SignInPath = "/signin"
)

// Redacted stands for a secret in an entry.
const Redacted = "REDACTED"

// Slots are where a handler's requests carry secrets. A request with one
// of them is logged by this package; whoever takes it, the entry is
// redacted for every slot of every handler (the gateway, the Console and
// the instance may share a route).
type Slots struct {
	Headers []string // request headers holding a secret, dropped
	Params  []string // query parameters holding a secret
	Nested  []string // query parameters holding a URI of the site that may carry a secret
	Paths   []string // path prefixes followed by a secret segment
	Referer bool     // a Referer header with a secret in these slots counts too
	// Answers reports whether the answer to r may name a secret in its
	// Location though r carries none.
	Answers func(r *http.Request) bool
}

// The slots of each handler.
var (
	Gateway = Slots{Headers: Headers, Params: []string{QueryParam}}
	// The Console's pages are linked to from the verification page
	// (Referrer-Policy same-origin), and its sign-in returns to it.
	Console = Slots{Headers: Headers, Params: []string{QueryParam, UserCodeParam}, Nested: []string{NextParam}, Referer: true,
		Answers: func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == SignInPath }}
	Instance = Slots{Params: []string{AuthTokenParam}, Paths: []string{PairingPath}, Referer: true}
)

// redactedParams and nestedParams are the parameters of every handler's
// slots that an entry shows redacted; QueryParam is removed.
var (
	redactedParams = []string{AuthTokenParam, UserCodeParam}
	nestedParams   = []string{NextParam}
	secretPaths    = []string{PairingPath}
)

// claimedVar marks a request whose entry a handler has taken over, so that
// a second agentgate handler in the same chain does not take it again.
const claimedVar = "agentgate.access_log"

// Log writes access and error log entries under the names Caddy's HTTP
// server uses. The zero value and nil write nothing and take no request.
type Log struct {
	access *zap.Logger // "http.log.access"
	errors *zap.Logger // "http.log.error"
	slots  Slots
}

// httpAppModule stands for the http app when asking the config for a
// logger: a log's include and exclude lists select its outputs by module
// name, so the loggers must be the http app's for an entry to reach
// exactly the logs Caddy's own entry would reach.
type httpAppModule struct{}

func (httpAppModule) CaddyModule() caddy.ModuleInfo { return caddy.ModuleInfo{ID: "http"} }

// New returns the access and error loggers of ctx's config, named as the
// http app names them, for a handler whose requests carry secrets in slots.
func New(ctx caddy.Context, slots Slots) *Log {
	l := ctx.Logger(httpAppModule{})
	return &Log{access: l.Named("log.access"), errors: l.Named("log.error"), slots: slots}
}

// Serve runs h for r and writes r's log entries itself when r carries a
// secret in one of the handler's slots, and reports whether it
// did. A handler calls it first thing in its ServeHTTP and returns at once
// when it reports true; the call it makes to h finds the request claimed
// and reports false, so h serves as usual. An error h returns is handled
// here as Caddy's server would handle it, so the error is nil.
func (l *Log) Serve(w http.ResponseWriter, r *http.Request, h caddyhttp.MiddlewareHandler, next caddyhttp.Handler) (bool, error) {
	if l == nil || l.access == nil {
		return false, nil
	}
	orig, _ := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
	if orig.URL == nil {
		orig = http.Request{Method: r.Method, RemoteAddr: r.RemoteAddr, RequestURI: r.RequestURI, URL: r.URL}
	}
	if !l.slots.carries(r, orig.RequestURI) {
		return false, nil
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil || srv.Logs != nil && srv.Logs.ShouldLogCredentials {
		// Not served by a Caddy server, or the operator asked for
		// credentials in the log (should_log_credentials).
		return false, nil
	}
	if claimed, _ := caddyhttp.GetVar(r.Context(), claimedVar).(bool); claimed {
		return false, nil
	}
	caddyhttp.SetVar(r.Context(), claimedVar, true)
	return true, l.serve(srv, w, r, orig, h, next)
}

// Carries reports whether a request with these headers and request URI
// carries a secret in one of the slots.
func (s *Slots) Carries(h http.Header, requestURI string) bool {
	for _, name := range s.Headers {
		if len(h[name]) > 0 {
			return true
		}
	}
	if s.uriCarries(requestURI, true) {
		return true
	}
	if s.Referer {
		for _, ref := range h["Referer"] {
			if s.uriCarries(siteURI(ref), true) {
				return true
			}
		}
	}
	return false
}

func (s *Slots) carries(r *http.Request, requestURI string) bool {
	return s.Carries(r.Header, requestURI) || s.Answers != nil && s.Answers(r)
}

// uriCarries reports whether a request URI has a secret in the slots' paths
// or parameters, or, with nested, in a URI one of the Nested parameters
// holds.
func (s *Slots) uriCarries(requestURI string, nested bool) bool {
	path, query, _ := strings.Cut(requestURI, "?")
	if len(s.Paths) > 0 {
		path = unescapedPath(path)
		for _, p := range s.Paths {
			if len(path) > len(p) && strings.HasPrefix(path, p) {
				return true
			}
		}
	}
	for query != "" {
		var part string
		part, query, _ = strings.Cut(query, "&")
		k, v, _ := strings.Cut(part, "=")
		if slices.Contains(s.Params, k) {
			return true
		}
		if strings.Contains(k, "%") || strings.Contains(k, "+") {
			u, err := url.QueryUnescape(k)
			if err == nil && slices.Contains(s.Params, u) {
				return true
			}
			k = u
		}
		if nested && v != "" && slices.Contains(s.Nested, k) {
			if u, err := url.QueryUnescape(v); err == nil && s.uriCarries(u, false) {
				return true
			}
		}
	}
	return false
}

// siteURI is the path and query of an absolute URL (a Referer).
func siteURI(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		rest := u[i+3:]
		j := strings.IndexAny(rest, "/?")
		if j < 0 {
			return ""
		}
		return rest[j:]
	}
	return u
}

func unescapedPath(p string) string {
	if strings.Contains(p, "%") {
		if u, err := url.PathUnescape(p); err == nil {
			return u
		}
	}
	return p
}

// RedactURI returns a request URI, or an absolute URL, as an entry shows
// it: without the key parameter, with the values of the other secret
// parameters and the pairing code replaced by Redacted, and a URI held by
// a nested parameter (the Console's next) redacted the same way. The other
// parameters keep their order and encoding; a URI without secrets is
// returned as it is.
func RedactURI(uri string) string {
	origin := ""
	if i := strings.Index(uri, "://"); i >= 0 {
		j := strings.IndexAny(uri[i+3:], "/?")
		if j < 0 {
			return uri
		}
		origin, uri = uri[:i+3+j], uri[i+3+j:]
	}
	path, query, hasQuery := strings.Cut(uri, "?")
	out := origin + redactPath(path)
	if !hasQuery {
		return out
	}
	if query = redactQuery(query); query != "" {
		out += "?" + query
	}
	return out
}

// redactPath replaces the secret segment of a path under one of
// secretPaths (the path is matched unescaped, as the handlers route it).
func redactPath(path string) string {
	u := unescapedPath(path)
	for _, p := range secretPaths {
		if len(u) > len(p) && strings.HasPrefix(u, p) {
			tail := ""
			if i := strings.IndexByte(u[len(p):], '/'); i >= 0 {
				tail = (&url.URL{Path: u[len(p)+i:]}).EscapedPath()
			}
			return p + Redacted + tail
		}
	}
	return path
}

// redactQuery redacts a raw query (see RedactURI).
func redactQuery(query string) string {
	changed := false
	parts := strings.Split(query, "&")
	kept := parts[:0]
	for _, part := range parts {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		name := k
		if strings.Contains(k, "%") || strings.Contains(k, "+") {
			if u, err := url.QueryUnescape(k); err == nil {
				name = u
			}
		}
		switch {
		case name == QueryParam:
			changed = true
			continue
		case slices.Contains(redactedParams, name):
			part, changed = k+"="+Redacted, true
		case slices.Contains(nestedParams, name):
			if u, err := url.QueryUnescape(v); err == nil {
				if r := RedactURI(u); r != u {
					part, changed = k+"="+url.QueryEscape(r), true
				}
			} else {
				part, changed = k+"="+Redacted, true
			}
		}
		kept = append(kept, part)
	}
	if !changed {
		return query
	}
	return strings.Join(kept, "&")
}

// redacted is the request as Caddy's entry shows it (method, remote
// address and request URI as they arrived), without the secrets of any
// handler's slots.
func redacted(r *http.Request, orig http.Request) *http.Request {
	h := r.Header.Clone()
	for _, name := range Headers {
		delete(h, name)
	}
	if refs := h["Referer"]; len(refs) > 0 {
		red := make([]string, len(refs))
		for i, ref := range refs {
			red[i] = RedactURI(ref)
		}
		h["Referer"] = red
	}
	c := &http.Request{
		Method:           orig.Method,
		RemoteAddr:       orig.RemoteAddr,
		RequestURI:       RedactURI(orig.RequestURI),
		Proto:            r.Proto,
		Host:             r.Host,
		Header:           h,
		TransferEncoding: r.TransferEncoding,
		TLS:              r.TLS,
	}
	// The context carries the client IP that the entry shows.
	return c.WithContext(r.Context())
}

func (l *Log) serve(srv *caddyhttp.Server, w http.ResponseWriter, r *http.Request, orig http.Request,
	h caddyhttp.MiddlewareHandler, next caddyhttp.Handler) error {
	start := time.Now()
	req := zap.Object("request", caddyhttp.LoggableHTTPRequest{Request: redacted(r, orig)})
	logAccess := shouldLog(srv.Logs, r)
	var body *countingReader
	if r.Body != nil && r.Body != http.NoBody {
		body = &countingReader{ReadCloser: r.Body}
		r.Body = body
		defer func() { r.Body = body.ReadCloser }()
	}
	rec := caddyhttp.NewResponseRecorder(w, nil, nil)
	var duration time.Duration
	// Deferred, so that a response the reverse proxy aborts with a panic
	// is logged too, as Caddy logs it.
	defer func() {
		if duration == 0 {
			duration = time.Since(start)
		}
		if logAccess {
			l.writeAccess(srv, rec, r, req, duration, body)
		}
	}()
	if next != nil {
		next = passedOn{next}
	}
	err := h.ServeHTTP(rec, r, next)
	duration = time.Since(start)
	if err != nil {
		l.handleError(srv, rec, r, orig, req, duration, err)
	}
	return nil
}

// passedOn is next for a taken request: a later handler sees the request
// URI as the entries show it, so that what it logs with the request (the
// reverse proxy's "upstream roundtrip" at DEBUG) holds no secret in the
// URI either. The URL it serves, and so what an upstream gets, is the
// request's own.
type passedOn struct{ next caddyhttp.Handler }

func (p passedOn) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	if red := RedactURI(r.RequestURI); red != r.RequestURI {
		uri := r.RequestURI
		r.RequestURI = red
		defer func() { r.RequestURI = uri }()
	}
	return p.next.ServeHTTP(w, r)
}

// writeAccess writes the entry Caddy's server would write after the
// handlers, and tells Caddy's server not to write its own.
func (l *Log) writeAccess(srv *caddyhttp.Server, rec caddyhttp.ResponseRecorder, r *http.Request,
	req zap.Field, duration time.Duration, body *countingReader) {
	ctx := r.Context()
	if skip, _ := caddyhttp.GetVar(ctx, caddyhttp.LogSkipVar).(bool); skip {
		return // skipped by the operator: Caddy writes nothing either
	}
	caddyhttp.SetVar(ctx, caddyhttp.LogSkipVar, true)

	status, size := rec.Status(), rec.Size()
	message := "handled request"
	if nop, _ := caddyhttp.GetVar(ctx, "unhandled").(bool); nop {
		message = "NOP"
	}
	level := zapcore.InfoLevel
	if status >= 500 {
		level = zapcore.ErrorLevel
	}
	if name, ok := caddyhttp.GetVar(ctx, caddyhttp.LogLevelVar).(string); ok {
		if lv, err := zapcore.ParseLevel(name); err == nil && lv >= zapcore.DebugLevel && lv <= zapcore.ErrorLevel {
			level = lv
		}
	}
	var fields []zapcore.Field
	for _, lg := range loggersFor(l.access.With(req), srv.Logs, r) {
		c := lg.Check(level, message)
		if c == nil {
			continue
		}
		if fields == nil {
			var userID string
			if repl, ok := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
				userID, _ = repl.GetString("http.auth.user.id")
			}
			read := 0
			if body != nil {
				read = body.n
			}
			extra := extraFields(ctx)
			fields = make([]zapcore.Field, 0, 6+len(extra))
			fields = append(fields,
				zap.Int("bytes_read", read),
				zap.String("user_id", userID),
				zap.Duration("duration", duration),
				zap.Int("size", size),
				zap.Int("status", status),
				zap.Object("resp_headers", caddyhttp.LoggableHTTPHeader{Header: redactedAnswer(rec.Header())}),
			)
			fields = append(fields, extra...)
		}
		c.Write(fields...)
	}
}

// redactedAnswer is the response header as an entry shows it: a Location
// with a secret redacted (the Console's sign-in redirects).
func redactedAnswer(h http.Header) http.Header {
	var red []string
	for i, loc := range h["Location"] {
		if r := RedactURI(loc); r != loc {
			if red == nil {
				red = slices.Clone(h["Location"])
			}
			red[i] = r
		}
	}
	if red == nil {
		return h
	}
	h = h.Clone()
	h["Location"] = red
	return h
}

// handleError does with an error from a later handler what Caddy's server
// does with an error from its handler chain: log it with the request
// (here without the key), then run the site's error routes, or else answer
// with the error's status.
func (l *Log) handleError(srv *caddyhttp.Server, w http.ResponseWriter, r *http.Request, orig http.Request,
	req zap.Field, duration time.Duration, err error) {
	// The error routes see the request as it arrived.
	r.Method, r.RemoteAddr, r.RequestURI = orig.Method, orig.RemoteAddr, orig.RequestURI
	if orig.URL != nil && orig.URL != r.URL {
		u := *orig.URL
		r.URL = &u
	}
	errLoggers := loggersFor(l.errors.With(req, zap.Duration("duration", duration)), srv.Logs, r)
	status, msg, fields := errValues(err)
	r = srv.Errors.WithError(r, err)
	write := func(level zapcore.Level, msg string, fields []zapcore.Field) {
		for _, lg := range errLoggers {
			if c := lg.Check(level, msg); c != nil {
				c.Write(fields...)
			}
		}
	}
	if srv.Errors != nil && len(srv.Errors.Routes) > 0 {
		if err2 := srv.Errors.Routes.Compile(errorEmptyHandler).ServeHTTP(w, r); err2 == nil {
			write(zapcore.DebugLevel, msg, fields)
		} else {
			write(zapcore.ErrorLevel, "error handling handler error", append([]zapcore.Field{
				zap.String("error", err2.Error()), zap.Namespace("first_error"), zap.String("msg", msg),
			}, fields...))
			w.WriteHeader(status)
		}
		return
	}
	level := zapcore.DebugLevel
	if status >= 500 {
		level = zapcore.ErrorLevel
	}
	write(level, msg, fields)
	w.WriteHeader(status)
}

// errorEmptyHandler ends the error routes as Caddy's server ends them: an
// error no route answered gets its status.
var errorEmptyHandler = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	status := http.StatusInternalServerError
	if he, ok := r.Context().Value(caddyhttp.ErrorCtxKey).(caddyhttp.HandlerError); ok {
		status = he.StatusCode
	}
	w.WriteHeader(status)
	return nil
})

// errValues are the status, message and fields Caddy's server logs an
// error with.
func errValues(err error) (int, string, []zapcore.Field) {
	if he, ok := errors.AsType[caddyhttp.HandlerError](err); ok {
		msg := err.Error()
		if he.Err != nil {
			msg = he.Err.Error()
		}
		return he.StatusCode, msg, []zapcore.Field{
			zap.Int("status", he.StatusCode), zap.String("err_id", he.ID), zap.String("err_trace", he.Trace),
		}
	}
	return http.StatusInternalServerError, err.Error(), []zapcore.Field{zap.Error(err)}
}

// shouldLog reports whether Caddy's server writes an access log entry for
// r: access logging is on for the server and r's host is neither skipped
// nor, with skip_unmapped_hosts, unmapped.
func shouldLog(logs *caddyhttp.ServerLogConfig, r *http.Request) bool {
	if logs == nil {
		return false
	}
	host := hostOf(r)
	for name := range logs.LoggerNames {
		if matchWildcard(host, name) {
			return true
		}
	}
	for _, skip := range logs.SkipHosts {
		if matchWildcard(host, skip) {
			return false
		}
	}
	return !logs.SkipUnmappedHosts
}

// loggersFor names base after r's loggers as Caddy's server does: the
// access_logger_names variable if set, else the logger names mapped to r's
// host, else the server's default logger name ("" is base itself).
func loggersFor(base *zap.Logger, logs *caddyhttp.ServerLogConfig, r *http.Request) []*zap.Logger {
	if logs == nil {
		return []*zap.Logger{base}
	}
	var names []string
	if v, ok := caddyhttp.GetVar(r.Context(), caddyhttp.AccessLoggerNameVarKey).([]any); ok {
		for _, n := range v {
			s, _ := n.(string)
			names = append(names, s)
		}
	} else {
		names = loggerNames(logs, strings.ToLower(hostOf(r)))
	}
	loggers := make([]*zap.Logger, 0, len(names))
	for _, n := range names {
		if n == "" {
			loggers = append(loggers, base)
		} else {
			loggers = append(loggers, base.Named(n))
		}
	}
	return loggers
}

// loggerNames are the logger names mapped to host: an exact match first,
// then the most specific wildcard, else the default name.
func loggerNames(logs *caddyhttp.ServerLogConfig, host string) []string {
	if names, ok := logs.LoggerNames[host]; ok {
		return names
	}
	var names []string
	if wildcards(host, func(pattern string) bool {
		var ok bool
		names, ok = logs.LoggerNames[pattern]
		return ok
	}) {
		return names
	}
	return []string{logs.DefaultLoggerName}
}

// wildcards calls f with host's wildcard forms, most specific first (its
// labels replaced by "*" one more at a time, from the left), until f
// reports true, and reports whether it did.
func wildcards(host string, f func(pattern string) bool) bool {
	labels := strings.Split(host, ".")
	for i := range labels {
		if labels[i] == "" {
			continue
		}
		labels[i] = "*"
		if f(strings.Join(labels, ".")) {
			return true
		}
	}
	return false
}

func hostOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		return r.Host
	}
	return host
}

// matchWildcard reports whether host matches pattern, where each "*"
// label of the pattern stands for one label of the host.
func matchWildcard(host, pattern string) bool {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	pattern = strings.ToLower(pattern)
	if host == pattern {
		return true
	}
	return strings.Contains(pattern, "*") && wildcards(host, func(p string) bool { return p == pattern })
}

// countingReader counts the request body bytes the handlers read.
type countingReader struct {
	io.ReadCloser
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += n
	return n, err
}

// extraFieldsOffset locates the fields handlers add to a request's access
// log entry with caddyhttp.ExtraLogFields.Add and Set. caddyhttp offers no
// way to read them back, and the entry written here must carry them (the
// gateway's "agentgate" metering object among them). The layout is checked
// once; if it ever changes, entries go without the extra fields rather than
// read memory wrongly, and this package's tests fail.
var extraFieldsOffset = func() uintptr {
	f, ok := reflect.TypeFor[caddyhttp.ExtraLogFields]().FieldByName("fields")
	if !ok || f.Type != reflect.TypeFor[[]zapcore.Field]() {
		return ^uintptr(0)
	}
	return f.Offset
}()

func extraFields(ctx interface{ Value(any) any }) []zapcore.Field {
	e, _ := ctx.Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields)
	if e == nil || extraFieldsOffset == ^uintptr(0) {
		return nil
	}
	return *(*[]zapcore.Field)(unsafe.Add(unsafe.Pointer(e), extraFieldsOffset))
}

package formats

import (
	"net/http"
	"strings"
)

// Op is what a route does.
type Op int

// The operations.
const (
	// Generate is a format's main route: /chat/completions, /responses,
	// /messages, /models/<model>:generateContent or :streamGenerateContent.
	Generate Op = iota
	// CountTokens is Anthropic's /messages/count_tokens and Google's
	// /models/<model>:countTokens: forwarded like Generate, never charged.
	CountTokens
	// ListModels is GET /models, answered by the gateway in the list shape
	// of the connection's kind.
	ListModels
	// GetModel is GET /models/<id>, answered like ListModels.
	GetModel
)

// Route is a parsed gateway request path: /custom/<connection>/<rest> on
// the Providers API, or /v1/<rest> and /v1beta/<rest> on the Inference API
// (Connection empty, Inference set), where the model picks the connection.
type Route struct {
	Connection string
	Inference  bool
	// Format is the route's format. For ListModels and GetModel, which
	// every kind serves on the same paths, it is only what the path
	// suggests (Google under /v1beta/, otherwise 0); the connection's kind
	// decides.
	Format Format
	Op     Op
	// Model is the model id from the path (Google, and GetModel).
	Model string
	// Method is the method named in the path after the model (Google:
	// generateContent, streamGenerateContent or countTokens).
	Method string
}

// Stream reports whether the route itself asks for a stream.
func (r Route) Stream() bool { return r.Format.Valid() && r.Format.w().streamsByPath(r) }

// HTTPMethod is the HTTP method the route takes.
func (r Route) HTTPMethod() string {
	if r.Op == ListModels || r.Op == GetModel {
		return http.MethodGet
	}
	return http.MethodPost
}

// UpstreamPath is the path appended to the connection's base URL.
func (r Route) UpstreamPath(model string) string { return r.Format.w().upstreamPath(r, model) }

// Prefix is the path prefix of the Providers API's routes.
const Prefix = "/custom/"

// IsGatewayPath reports whether an escaped path belongs to the gateway:
// the Providers API (under Prefix) or the Inference API (under /v1/ or
// /v1beta/).
func IsGatewayPath(escapedPath string) bool {
	if strings.HasPrefix(escapedPath, Prefix) {
		return true
	}
	for _, v := range versionPrefixes {
		if strings.HasPrefix(escapedPath, v) && (len(escapedPath) == len(v) || escapedPath[len(v)] == '/') {
			return true
		}
	}
	return false
}

// ParseError says why a path is not a gateway route.
type ParseError struct {
	Status  int
	Message string
	Format  Format // what the path suggests, for the error envelope; 0 when it suggests nothing
}

// versionPrefixes are the API version segments the official SDKs put in
// front of their routes; a route is the same with or without one.
var versionPrefixes = []string{"/v1beta", "/v1"}

// ParseRoute parses an escaped request path. Paths with encoded slashes or
// backslashes, dot segments, or characters outside ids are refused. On an
// error the route still carries the connection id when the path has a
// valid one, and the format the path suggests, so that the error can be
// answered after the credential is checked, in the right envelope.
func ParseRoute(escapedPath string) (Route, *ParseError) {
	var rt Route
	rest, ok := strings.CutPrefix(escapedPath, Prefix)
	if !ok {
		// The Inference API: the path after the host is the tail, and
		// its version prefix is required.
		rt.Inference = true
		rest = "_" + escapedPath
		if !IsGatewayPath(escapedPath) {
			return rt, &ParseError{Status: http.StatusNotFound, Message: "not a gateway route"}
		}
	}
	if encodedSlashOrDot(rest) || strings.Contains(rest, "\\") {
		return rt, &ParseError{Status: http.StatusBadRequest, Message: "encoded slashes and dots are not allowed in gateway paths"}
	}
	// The tail is the path from the slash after the connection id on
	// (sliced, not built: ParseRoute runs on every request).
	conn, _, ok := strings.Cut(rest, "/")
	if !rt.Inference {
		if !ok || !validID(conn) {
			return rt, &ParseError{Status: http.StatusNotFound, Message: "unknown connection"}
		}
		rt.Connection = conn
	}
	tail := "/"
	if ok {
		tail = rest[len(conn):]
	}
	version := ""
	for _, v := range versionPrefixes {
		if len(tail) > len(v) && tail[len(v)] == '/' && strings.HasPrefix(tail, v) {
			tail, version = tail[len(v):], v
			break
		}
	}
	if rt.Inference && version == "" {
		return rt, &ParseError{Status: http.StatusNotFound, Message: "unknown gateway route: the Inference API is under /v1/ (and /v1beta/ for Google)"}
	}
	rt.Format = pathFormat(tail, version)
	perr := func(status int, msg string) (Route, *ParseError) {
		return rt, &ParseError{Status: status, Message: msg, Format: rt.Format}
	}
	for segs := tail[1:]; ; {
		seg, more, found := strings.Cut(segs, "/")
		if seg == "." || seg == ".." || seg == "" {
			return perr(http.StatusBadRequest, "dot or empty segments are not allowed in gateway paths")
		}
		if !found {
			break
		}
		segs = more
	}
	for _, f := range All() {
		op, model, method, e, ok := registry[f].match(tail)
		if !ok {
			continue
		}
		rt.Format = f
		if e != nil {
			e.Format = f
			return rt, e
		}
		rt.Op, rt.Model, rt.Method = op, model, method
		return rt, nil
	}
	switch {
	case tail == "/models":
		rt.Op = ListModels
		return rt, nil
	case strings.HasPrefix(tail, "/models/"):
		// GET /models/<id>: ids of OpenAI-compatible providers may have
		// slashes (org/model).
		model := strings.TrimPrefix(tail, "/models/")
		if strings.ContainsAny(model, "%:") {
			return perr(http.StatusBadRequest, "malformed model in path")
		}
		rt.Op, rt.Model = GetModel, model
		return rt, nil
	}
	return perr(http.StatusNotFound, "unknown gateway route: use /chat/completions, /responses, /messages, "+
		"/messages/count_tokens, /models/<model>:generateContent, :streamGenerateContent or :countTokens, or GET /models")
}

// encodedSlashOrDot reports whether an escaped path holds %2F, %5C or %2E
// in either case (without lowering a copy of the path).
func encodedSlashOrDot(path string) bool {
	for i := strings.IndexByte(path, '%'); i >= 0 && i+2 < len(path); {
		if hi, lo := path[i+1], path[i+2]|0x20; (hi == '2' && (lo == 'f' || lo == 'e')) || (hi == '5' && lo == 'c') {
			return true
		}
		j := strings.IndexByte(path[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// pathFormat is the format a path (after the version prefix) suggests: the
// first registered format that claims it, or 0.
func pathFormat(tail, version string) Format {
	for _, f := range All() {
		if registry[f].suggests(tail, version) {
			return f
		}
	}
	return 0
}

// under reports whether tail is route or a path below it.
func under(tail, route string) bool {
	return tail == route || strings.HasPrefix(tail, route+"/")
}

func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ModelInPath reports whether the format's requests name their model in
// the path rather than in the body.
func (f Format) ModelInPath() bool { return f.w().modelInPath() }

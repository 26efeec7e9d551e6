// Package formats knows the four wire formats the gateway forwards: how to
// recognise a route, where the model is, where each provider expects its
// credential, and how each format's SDK expects an error to look. It has no
// Caddy import.
package formats

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentgate/agentgate/modules/store"
)

// Format is a wire format.
type Format int

// The formats.
const (
	Chat      Format = iota + 1 // OpenAI Chat Completions
	Responses                   // OpenAI Responses
	Anthropic                   // Anthropic Messages
	Google                      // Google Generative AI
)

func (f Format) String() string {
	switch f {
	case Chat:
		return "chat"
	case Responses:
		return "responses"
	case Anthropic:
		return "anthropic"
	case Google:
		return "google"
	}
	return "unknown"
}

// Route is a parsed gateway request path: /custom/<connection>/<rest>.
type Route struct {
	Connection string
	Format     Format
	// Model is the model id from the path (Google only).
	Model string
	// Method is generateContent or streamGenerateContent (Google only).
	Method string
}

// Stream reports whether the route itself asks for a stream (Google).
func (r Route) Stream() bool { return r.Method == "streamGenerateContent" }

// UpstreamPath is the path appended to the connection's base URL.
func (r Route) UpstreamPath(model string) string {
	switch r.Format {
	case Chat:
		return "/chat/completions"
	case Responses:
		return "/responses"
	case Anthropic:
		return "/messages"
	}
	return "/models/" + model + ":" + r.Method
}

// Prefix is the path prefix of gateway routes.
const Prefix = "/custom/"

// ParseError says why a path is not a gateway route.
type ParseError struct {
	Status  int
	Message string
	Format  Format // best guess for the error envelope
}

// ParseRoute parses an escaped request path. Paths with encoded slashes or
// backslashes, dot segments, or characters outside ids are refused.
func ParseRoute(escapedPath string) (Route, *ParseError) {
	var rt Route
	rest, ok := strings.CutPrefix(escapedPath, Prefix)
	if !ok {
		return rt, &ParseError{Status: http.StatusNotFound, Message: "not a gateway route"}
	}
	lower := strings.ToLower(rest)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(rest, "\\") || strings.Contains(lower, "%2e") {
		return rt, &ParseError{Status: http.StatusBadRequest, Message: "encoded slashes and dots are not allowed in gateway paths"}
	}
	conn, tail, ok := strings.Cut(rest, "/")
	if !ok || !validID(conn) {
		return rt, &ParseError{Status: http.StatusNotFound, Message: "unknown connection"}
	}
	rt.Connection = conn
	for _, seg := range strings.Split(tail, "/") {
		if seg == "." || seg == ".." || seg == "" {
			return rt, &ParseError{Status: http.StatusBadRequest, Message: "dot or empty segments are not allowed in gateway paths"}
		}
	}
	tail = "/" + tail
	for _, v := range []string{"/v1beta", "/v1"} {
		if t, ok := strings.CutPrefix(tail, v+"/"); ok {
			tail = "/" + t
			break
		}
	}
	switch {
	case tail == "/chat/completions":
		rt.Format = Chat
	case tail == "/responses":
		rt.Format = Responses
	case tail == "/messages":
		rt.Format = Anthropic
	case strings.HasPrefix(tail, "/models/"):
		rt.Format = Google
		spec := strings.TrimPrefix(tail, "/models/")
		model, method, ok := strings.Cut(spec, ":")
		if !ok || (method != "generateContent" && method != "streamGenerateContent") {
			return rt, &ParseError{Status: http.StatusNotFound, Message: "unknown Google method: use :generateContent or :streamGenerateContent", Format: Google}
		}
		if model == "" || strings.ContainsAny(model, "/%") {
			return rt, &ParseError{Status: http.StatusBadRequest, Message: "malformed model in path", Format: Google}
		}
		rt.Model, rt.Method = model, method
	default:
		return rt, &ParseError{Status: http.StatusNotFound, Message: "unknown gateway route: use /chat/completions, /responses, /messages or /models/<model>:generateContent"}
	}
	return rt, nil
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

// Supports reports whether a connection kind speaks a format: OpenAI kinds
// speak Chat and Responses, the others their own.
func Supports(kind string, f Format) bool {
	switch kind {
	case store.KindOpenAI, store.KindOpenAICompatible:
		return f == Chat || f == Responses
	case store.KindAnthropic:
		return f == Anthropic
	case store.KindGoogle:
		return f == Google
	}
	return false
}

// ClientCredentialHeaders are the headers a client may carry its workspace
// key in; all are removed before forwarding.
var ClientCredentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// ClientCredential returns the workspace credential of a request: the first
// of Authorization: Bearer, x-api-key, api-key, x-goog-api-key and ?key=.
func ClientCredential(h http.Header, queryKey string) string {
	if v := h.Get("Authorization"); len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	for _, name := range ClientCredentialHeaders[1:] {
		if v := h.Get(name); v != "" {
			return strings.TrimSpace(v)
		}
	}
	return queryKey
}

// DefaultAnthropicVersion is sent when the client sends none.
const DefaultAnthropicVersion = "2023-06-01"

// SetCredential puts the provider credential in the kind's native slot.
func SetCredential(h http.Header, kind, credential string) {
	switch kind {
	case store.KindAnthropic:
		h.Set("X-Api-Key", credential)
		if h.Get("Anthropic-Version") == "" {
			h.Set("Anthropic-Version", DefaultAnthropicVersion)
		}
	case store.KindGoogle:
		h.Set("X-Goog-Api-Key", credential)
	default:
		h.Set("Authorization", "Bearer "+credential)
	}
}

// ErrorBody is a gateway-made error in the format's own envelope, with the
// _tag and message that agentgate's other surfaces use, so that each
// provider SDK raises a typed error carrying the message.
func ErrorBody(f Format, status int, tag, message string, extra map[string]any) []byte {
	m := map[string]any{"_tag": tag, "message": message}
	for k, v := range extra {
		m[k] = v
	}
	switch f {
	case Anthropic:
		m["type"] = "error"
		m["error"] = map[string]any{"type": anthropicType(status), "message": message}
	case Google:
		m["error"] = map[string]any{"code": status, "message": message, "status": googleStatus(status)}
	default:
		m["error"] = map[string]any{"message": message, "type": openAIType(status), "code": tag}
	}
	b, _ := json.Marshal(m)
	return b
}

func openAIType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 402:
		return "insufficient_quota"
	case status == 413:
		return "request_too_large"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func anthropicType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 402:
		return "billing_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

func googleStatus(status int) string {
	switch status {
	case 400, 413:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 402:
		return "RESOURCE_EXHAUSTED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 405:
		return "UNIMPLEMENTED"
	case 502, 503:
		return "UNAVAILABLE"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

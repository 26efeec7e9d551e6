// Package formats knows the four wire formats the gateway forwards: how to
// recognise a route, where the model is, where each provider expects its
// credential, and how each format's SDK expects an error to look. It has no
// Caddy import.
package formats

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/store"
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

// Route is a parsed gateway request path: /custom/<connection>/<rest>.
type Route struct {
	Connection string
	// Format is the route's format. For ListModels and GetModel, which
	// every kind serves on the same paths, it is only what the path
	// suggests (Google under /v1beta/, otherwise 0); the connection's kind
	// decides.
	Format Format
	Op     Op
	// Model is the model id from the path (Google, and GetModel).
	Model string
	// Method is generateContent, streamGenerateContent or countTokens
	// (Google only).
	Method string
}

// Stream reports whether the route itself asks for a stream (Google).
func (r Route) Stream() bool { return r.Method == "streamGenerateContent" }

// HTTPMethod is the HTTP method the route takes.
func (r Route) HTTPMethod() string {
	if r.Op == ListModels || r.Op == GetModel {
		return http.MethodGet
	}
	return http.MethodPost
}

// UpstreamPath is the path appended to the connection's base URL.
func (r Route) UpstreamPath(model string) string {
	switch r.Format {
	case Chat:
		return "/chat/completions"
	case Responses:
		return "/responses"
	case Anthropic:
		if r.Op == CountTokens {
			return "/messages/count_tokens"
		}
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
	Format  Format // what the path suggests, for the error envelope; 0 when it suggests nothing
}

// ParseRoute parses an escaped request path. Paths with encoded slashes or
// backslashes, dot segments, or characters outside ids are refused. On an
// error the route still carries the connection id when the path has a
// valid one, and the format the path suggests, so that the error can be
// answered after the credential is checked, in the right envelope.
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
	tail = "/" + tail
	version := ""
	for _, v := range []string{"/v1beta", "/v1"} {
		if t, ok := strings.CutPrefix(tail, v+"/"); ok {
			tail, version = "/"+t, v
			break
		}
	}
	rt.Format = pathFormat(tail, version)
	perr := func(status int, msg string) (Route, *ParseError) {
		return rt, &ParseError{Status: status, Message: msg, Format: rt.Format}
	}
	for _, seg := range strings.Split(tail[1:], "/") {
		if seg == "." || seg == ".." || seg == "" {
			return perr(http.StatusBadRequest, "dot or empty segments are not allowed in gateway paths")
		}
	}
	switch {
	case tail == "/chat/completions":
	case tail == "/responses":
	case tail == "/messages":
	case tail == "/messages/count_tokens":
		rt.Op = CountTokens
	case tail == "/models":
		rt.Op = ListModels
	case strings.HasPrefix(tail, "/models/"):
		spec := strings.TrimPrefix(tail, "/models/")
		model, method, hasMethod := strings.Cut(spec, ":")
		if !hasMethod {
			// GET /models/<id>: ids of OpenAI-compatible providers may
			// have slashes (org/model).
			if strings.ContainsAny(model, "%:") {
				return perr(http.StatusBadRequest, "malformed model in path")
			}
			rt.Op, rt.Model = GetModel, model
			return rt, nil
		}
		rt.Format = Google
		switch method {
		case "generateContent", "streamGenerateContent":
		case "countTokens":
			rt.Op = CountTokens
		default:
			return perr(http.StatusNotFound, "unknown Google method: use :generateContent, :streamGenerateContent or :countTokens")
		}
		if model == "" || strings.ContainsAny(model, "/%") {
			return perr(http.StatusBadRequest, "malformed model in path")
		}
		rt.Model, rt.Method = model, method
	default:
		return perr(http.StatusNotFound, "unknown gateway route: use /chat/completions, /responses, /messages, "+
			"/messages/count_tokens, /models/<model>:generateContent, :streamGenerateContent or :countTokens, or GET /models")
	}
	return rt, nil
}

// pathFormat is the format a path (after the version prefix) suggests:
// the format of its main route or of a route under it, Google for
// anything under /v1beta/, or 0.
func pathFormat(tail, version string) Format {
	switch {
	case tail == "/chat/completions" || strings.HasPrefix(tail, "/chat/"):
		return Chat
	case tail == "/responses" || strings.HasPrefix(tail, "/responses/"):
		return Responses
	case tail == "/messages" || strings.HasPrefix(tail, "/messages/"):
		return Anthropic
	case version == "/v1beta":
		return Google
	case strings.HasPrefix(tail, "/models/") && strings.Contains(tail, ":"):
		return Google
	}
	return 0
}

// OfKind is the format whose envelope a connection's errors use: f when
// the connection serves it, else the kind's own (Chat for OpenAI kinds).
func OfKind(kind string, f Format) Format {
	if Supports(kind, f) {
		return f
	}
	switch kind {
	case store.KindAnthropic:
		return Anthropic
	case store.KindGoogle:
		return Google
	}
	return Chat
}

// CredentialFormat is the format whose SDK sends a credential the way this
// request does, for errors answered before the path or the connection
// tells: x-api-key is Anthropic's slot, x-goog-api-key and ?key= are
// Google's; a bearer token, api-key or no credential is OpenAI's, unless
// the request carries anthropic-version (Anthropic clients that
// authenticate with a bearer token). Call it before the credentials are
// removed.
func CredentialFormat(h http.Header, queryKey string) Format {
	if v := h.Get("Authorization"); len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return anthropicOr(h, Chat)
	}
	switch {
	case h.Get("X-Api-Key") != "":
		return Anthropic
	case h.Get("Api-Key") != "":
		return Chat
	case h.Get("X-Goog-Api-Key") != "", queryKey != "":
		return Google
	}
	return anthropicOr(h, Chat)
}

func anthropicOr(h http.Header, f Format) Format {
	if h.Get("Anthropic-Version") != "" {
		return Anthropic
	}
	return f
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

// ModelInfo is an enabled model of a connection, as listed to clients.
type ModelInfo struct {
	ID              string // the name clients send (the connection's alias, not the upstream id)
	Name            string // display name
	Created         time.Time
	MaxOutputTokens int64 // 0: unknown
}

// GenerationMethods are the Google methods the gateway serves for a model.
var GenerationMethods = []string{"generateContent", "streamGenerateContent", "countTokens"}

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

type googleModel struct {
	Name                       string   `json:"name"`
	BaseModelID                string   `json:"baseModelId"`
	DisplayName                string   `json:"displayName"`
	OutputTokenLimit           int64    `json:"outputTokenLimit,omitempty"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
}

// modelObject is one model in f's shape; ownedBy is OpenAI's owned_by.
func modelObject(f Format, m ModelInfo, ownedBy string) any {
	name := m.Name
	if name == "" {
		name = m.ID
	}
	switch f {
	case Anthropic:
		return anthropicModel{Type: "model", ID: m.ID, DisplayName: name, CreatedAt: m.Created.UTC().Format(time.RFC3339)}
	case Google:
		return googleModel{Name: "models/" + m.ID, BaseModelID: m.ID, DisplayName: name, OutputTokenLimit: m.MaxOutputTokens,
			SupportedGenerationMethods: GenerationMethods}
	}
	return openAIModel{ID: m.ID, Object: "model", Created: m.Created.Unix(), OwnedBy: ownedBy}
}

// ModelObject is the answer to GET /models/<id> in f's shape.
func ModelObject(f Format, m ModelInfo, ownedBy string) []byte {
	b, _ := json.Marshal(modelObject(f, m, ownedBy))
	return b
}

// ModelList is the answer to GET /models in f's list shape, in the order
// given, as one page: OpenAI {"object":"list","data":[…]}, Anthropic
// {"data":[…],"has_more":false,"first_id","last_id"}, Google
// {"models":[…]}.
func ModelList(f Format, models []ModelInfo, ownedBy string) []byte {
	data := make([]any, len(models))
	for i, m := range models {
		data[i] = modelObject(f, m, ownedBy)
	}
	var v any
	switch f {
	case Anthropic:
		var first, last *string
		if len(models) > 0 {
			first, last = &models[0].ID, &models[len(models)-1].ID
		}
		v = struct {
			Data    []any   `json:"data"`
			HasMore bool    `json:"has_more"`
			FirstID *string `json:"first_id"`
			LastID  *string `json:"last_id"`
		}{data, false, first, last}
	case Google:
		v = struct {
			Models []any `json:"models"`
		}{data}
	default:
		v = struct {
			Object string `json:"object"`
			Data   []any  `json:"data"`
		}{"list", data}
	}
	b, _ := json.Marshal(v)
	return b
}

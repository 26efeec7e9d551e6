// Package oauth serves the Console's RFC 8628 device authorization and
// token endpoints (POST /auth/device/code, POST /auth/device/token), the
// RFC 7009 revocation endpoint (POST /auth/device/revoke) and their RFC
// 8414 metadata. Answers are JSON with Cache-Control: no-store; errors
// follow RFC 6749 §5.2.
//
// Configured clients name themselves with client_id. Claude Code's gateway
// sign-in names none: it starts with surface=claude_code and then polls,
// refreshes and revokes with no client id, so such a request is the
// built-in client service.ClaudeCodeClient's (when it is configured).
package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/ratelimit"
	"github.com/agentgate/agentgate/internal/service"
)

// Paths of the endpoints.
const (
	CodePath         = "/auth/device/code"
	TokenPath        = "/auth/device/token"
	RevokePath       = "/auth/device/revoke"
	VerificationPath = "/device"
	MetadataPath     = "/.well-known/oauth-authorization-server"
)

// Other names of the device authorization and token endpoints: where
// Claude Code looks when the metadata names endpoints on another origin
// than the address it was given (a gateway site whose Console is on
// another site, see console_url). They answer as CodePath and TokenPath.
const (
	AltCodePath  = "/oauth/device_authorization"
	AltTokenPath = "/oauth/token"
)

// GatewayProtocolVersion is the version of Claude Code's gateway protocol
// the metadata announces.
const GatewayProtocolVersion = 1

// GrantDeviceCode is the device-code grant type.
const GrantDeviceCode = "urn:ietf:params:oauth:grant-type:device_code"

// Guessing of device codes. Pacing of one real code is the grant's own
// slow_down; this limits a client address that polls with device codes
// naming no grant of its client (unknown, or another client's): after
// UnknownCodesPerIP of them within UnknownCodeWindow (sliding), every
// device-code poll from that address — a real, pending code included — is
// answered 429 with the error slow_down, the new interval and Retry-After,
// until the oldest counted one leaves the window. No code is looked at
// then, so refused polls neither count nor touch a grant's pacing. Clients
// switch on the error, not on the status: slow_down makes them poll more
// slowly and keep going.
const (
	UnknownCodesPerIP = 10
	UnknownCodeWindow = 15 * time.Minute
)

// Handler serves the endpoints.
type Handler struct {
	// Service returns the Console service (503 while the store opens).
	Service func(ctx context.Context) (*service.Service, error)
	// Clients are the client_ids allowed to use the device flow.
	Clients map[string]bool
	// BaseURL is the Console's public base URL; empty means the request's
	// scheme and host.
	BaseURL string
	// ClientIP returns the client address a request comes from, for the
	// limit on unknown device codes. Default: the host of RemoteAddr.
	ClientIP func(r *http.Request) string
	// Clock drives that limit. Default: the real clock.
	Clock clock.Clock

	once         sync.Once
	unknownCodes *ratelimit.Limiter
}

func (h *Handler) init() {
	h.once.Do(func() {
		h.unknownCodes = ratelimit.New(UnknownCodesPerIP, UnknownCodeWindow, h.Clock)
		if h.ClientIP == nil {
			h.ClientIP = remoteHost
		}
	})
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// pollDevice answers a device-code poll, refusing an address that guessed
// too many device codes and counting each unknown one it presents.
func (h *Handler) pollDevice(r *http.Request, svc *service.Service, clientID, deviceCode string) (*service.TokenPair, error) {
	h.init()
	key := "ip:" + h.ClientIP(r)
	if wait := h.unknownCodes.RetryAfter(key); wait > 0 {
		secs := int((wait + time.Second - 1) / time.Second)
		return nil, &service.OAuthError{Status: http.StatusTooManyRequests, Code: "slow_down",
			Description: "too many unknown device codes from this address: wait " + strconv.Itoa(secs) + " s",
			Interval:    max(secs, service.DeviceInterval+5), RetryAfter: wait}
	}
	pair, err := svc.PollDevice(r.Context(), clientID, deviceCode)
	if service.IsUnknownDeviceCode(err) {
		h.unknownCodes.Fail(key)
	}
	return pair, err
}

// Handles reports whether the handler serves the request's path.
func Handles(path string) bool {
	switch path {
	case CodePath, TokenPath, RevokePath, MetadataPath, AltCodePath, AltTokenPath:
		return true
	}
	return false
}

// endpoint is the endpoint a path names (CodePath for AltCodePath, …).
func endpoint(path string) string {
	switch path {
	case AltCodePath:
		return CodePath
	case AltTokenPath:
		return TokenPath
	}
	return path
}

func (h *Handler) base(r *http.Request) string {
	if h.BaseURL != "" {
		return strings.TrimRight(h.BaseURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// ServeHTTP serves the endpoints.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == MetadataPath {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			writeError(w, &service.OAuthError{Status: http.StatusMethodNotAllowed, Code: "invalid_request", Description: "use GET"})
			return
		}
		b := h.base(r)
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer":                                     b,
			"device_authorization_endpoint":              b + CodePath,
			"token_endpoint":                             b + TokenPath,
			"revocation_endpoint":                        b + RevokePath,
			"grant_types_supported":                      []string{GrantDeviceCode, "refresh_token"},
			"token_endpoint_auth_methods_supported":      []string{"none"},
			"revocation_endpoint_auth_methods_supported": []string{"none"},
			"response_types_supported":                   []string{},
			"gateway_protocol_version":                   GatewayProtocolVersion,
		})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, &service.OAuthError{Status: http.StatusMethodNotAllowed, Code: "invalid_request", Description: "use POST"})
		return
	}
	form, oerr := parseForm(w, r)
	if oerr != nil {
		writeError(w, oerr)
		return
	}
	path := endpoint(r.URL.Path)
	clientID, basicTried, oerr := h.clientOf(r, form, path)
	if oerr != nil {
		writeError(w, oerr)
		return
	}
	if !h.Clients[clientID] {
		e := &service.OAuthError{Status: http.StatusUnauthorized, Code: "invalid_client", Description: "unknown client_id"}
		if basicTried {
			w.Header().Set("WWW-Authenticate", `Basic realm="agentgate"`)
		}
		writeError(w, e)
		return
	}
	svc, err := h.Service(r.Context())
	if err != nil {
		writeError(w, &service.OAuthError{Status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", Description: apierr.As(err).Message})
		return
	}
	switch path {
	case CodePath:
		scope := form.Get("supports_org_scope")
		if scope != "" && scope != "true" && scope != "false" {
			writeError(w, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "supports_org_scope must be true or false"})
			return
		}
		h.init()
		start, err := svc.StartDeviceFor(r.Context(), service.DeviceRequest{ClientID: clientID, OrgScope: scope == "true",
			VerificationURI: h.base(r) + VerificationPath, RequestIP: h.ClientIP(r)})
		if err != nil {
			writeError(w, toOAuth(err))
			return
		}
		if clientID == service.ClaudeCodeClient {
			// Claude Code opens verification_uri_complete in a browser:
			// it must be a whole address.
			start.VerificationURIComplete = start.VerificationURI + "?user_code=" + url.QueryEscape(start.UserCode)
			start.LoginNotice = loginNotice
		} else {
			// verification_uri_complete is a path relative to the Console host.
			start.VerificationURIComplete = VerificationPath + "?user_code=" + url.QueryEscape(start.UserCode)
		}
		writeJSON(w, http.StatusOK, start)
	case RevokePath:
		// RFC 7009: token, and an optional token_type_hint, which is only
		// a hint (either kind of token is looked for whatever it says).
		if form.Get("token") == "" {
			writeError(w, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "token is required"})
			return
		}
		if err := svc.RevokeToken(r.Context(), clientID, form.Get("token")); err != nil {
			writeError(w, toOAuth(err))
			return
		}
		writeJSON(w, http.StatusOK, struct{}{})
	case TokenPath:
		var pair *service.TokenPair
		switch form.Get("grant_type") {
		case GrantDeviceCode:
			pair, err = h.pollDevice(r, svc, clientID, form.Get("device_code"))
		case "refresh_token":
			if form.Get("refresh_token") == "" {
				writeError(w, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "refresh_token is required"})
				return
			}
			pair, err = svc.Refresh(r.Context(), clientID, form.Get("refresh_token"))
		case "":
			writeError(w, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "grant_type is required"})
			return
		default:
			writeError(w, &service.OAuthError{Status: 400, Code: "unsupported_grant_type", Description: "use the device_code or refresh_token grant"})
			return
		}
		if err != nil {
			writeError(w, toOAuth(err))
			return
		}
		writeJSON(w, http.StatusOK, pair)
	}
}

// maxBody bounds a request body of the endpoints.
const maxBody = 64 << 10

// parseForm reads the parameters of a request: an
// application/x-www-form-urlencoded body (RFC 8628), or a JSON object of
// strings (what the released OpenCode CLI sends), at most 64 KiB. Repeated
// parameters are refused (RFC 6749 §3.1); unknown ones ignored. Another
// content type is 415; a larger body 413.
func parseForm(w http.ResponseWriter, r *http.Request) (url.Values, *service.OAuthError) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	tooLarge := func(err error) *service.OAuthError {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &service.OAuthError{Status: http.StatusRequestEntityTooLarge, Code: "invalid_request", Description: "the body is larger than 64 KiB"}
		}
		return nil
	}
	var form url.Values
	switch mt {
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			if e := tooLarge(err); e != nil {
				return nil, e
			}
			return nil, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "malformed form body"}
		}
		form = r.PostForm
	case "application/json":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			if e := tooLarge(err); e != nil {
				return nil, e
			}
			return nil, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "the body cannot be read"}
		}
		if form, err = jsonParams(b); err != nil {
			return nil, &service.OAuthError{Status: 400, Code: "invalid_request", Description: err.Error()}
		}
	default:
		return nil, &service.OAuthError{Status: http.StatusUnsupportedMediaType, Code: "invalid_request",
			Description: "the body must be application/x-www-form-urlencoded or application/json"}
	}
	for k, v := range form {
		if len(v) > 1 {
			return nil, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "parameter " + k + " is repeated"}
		}
	}
	return form, nil
}

// jsonParams reads a JSON object whose members are strings (booleans and
// numbers are taken as their text, null as absent) into parameters; a
// member given twice is kept twice, for parseForm to refuse.
func jsonParams(b []byte) (url.Values, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("the JSON body must be an object")
	}
	out := url.Values{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, errors.New("malformed JSON body")
		}
		key := t.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, errors.New("malformed JSON body")
		}
		switch x := v.(type) {
		case nil:
		case string:
			out.Add(key, x)
		case bool:
			out.Add(key, strconv.FormatBool(x))
		case json.Number:
			out.Add(key, x.String())
		default:
			return nil, fmt.Errorf("parameter %s must be a string", key)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, errors.New("malformed JSON body")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the JSON body must be one object")
	}
	return out, nil
}

// loginNotice is what Claude Code shows its user while it waits for the
// approval.
const loginNotice = "Approve this sign-in on the agentgate Console with the code shown here, and pick the workspace " +
	"whose models and settings Claude Code should use. If you did not start it, choose Deny."

// clientOf finds the client id of a request to endpoint: in the form or in
// HTTP Basic credentials (clients that try Basic first, such as
// golang.org/x/oauth2's auto-detect). On the device authorization endpoint
// a surface parameter names a built-in client instead (400 for a surface
// no client has); on the token and revocation endpoints, a request that
// names no client at all is Claude Code's, which sends none. Otherwise the
// client id is required.
func (h *Handler) clientOf(r *http.Request, form url.Values, endpoint string) (string, bool, *service.OAuthError) {
	id, basic, oerr := clientID(r, form)
	if oerr != nil {
		return "", basic, oerr
	}
	if endpoint == CodePath && form.Has("surface") {
		sc := service.SurfaceClient(form.Get("surface"))
		switch {
		case sc == "":
			return "", basic, &service.OAuthError{Status: 400, Code: "invalid_request",
				Description: fmt.Sprintf("unknown surface %q: the surface this Console knows is %s", limit(form.Get("surface"), 64), service.SurfaceClaudeCode)}
		case id != "" && id != sc:
			return "", basic, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "client_id and surface name different clients"}
		}
		id = sc
	}
	if id == "" && !basic && endpoint != CodePath && h.Clients[service.ClaudeCodeClient] {
		id = service.ClaudeCodeClient
	}
	if id == "" {
		desc := "client_id is required"
		if endpoint == CodePath && h.Clients[service.ClaudeCodeClient] {
			desc = "client_id (or surface=" + service.SurfaceClaudeCode + ") is required"
		}
		return "", basic, &service.OAuthError{Status: 400, Code: "invalid_request", Description: desc}
	}
	return id, basic, nil
}

func limit(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// clientID reads client_id from the form and HTTP Basic credentials ("" for
// none); the two must agree.
func clientID(r *http.Request, form url.Values) (string, bool, *service.OAuthError) {
	id := form.Get("client_id")
	user, _, basic := r.BasicAuth()
	if basic {
		if u, err := url.QueryUnescape(user); err == nil {
			user = u
		}
		if id != "" && id != user {
			return "", true, &service.OAuthError{Status: 400, Code: "invalid_request", Description: "client_id differs between the form and Basic credentials"}
		}
		id = user
	}
	return id, basic, nil
}

func toOAuth(err error) *service.OAuthError {
	var oe *service.OAuthError
	if errors.As(err, &oe) {
		return oe
	}
	e := apierr.As(err)
	if e.Status == http.StatusServiceUnavailable {
		return &service.OAuthError{Status: 503, Code: "temporarily_unavailable", Description: e.Message}
	}
	return &service.OAuthError{Status: 500, Code: "server_error", Description: "internal error"}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *service.OAuthError) {
	body := map[string]any{"error": e.Code, "error_description": e.Description}
	if e.Interval > 0 {
		body["interval"] = e.Interval
	}
	switch {
	case e.RetryAfter > 0:
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	case e.Status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, body)
}

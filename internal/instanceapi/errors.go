// Package instanceapi is the instance server: the coding-agent session API
// that OpenCode-style clients speak (auth and pairing, server info,
// locations, agents, plugins and the event stream). It has no Caddy import;
// the agent_instance handler mounts it.
package instanceapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
)

// Error is a tagged error of the instance API: {"_tag": Tag, "message": …,
// …Fields} with a fixed status per tag.
type Error struct {
	Status int
	Tag    string
	Fields map[string]any
	// RetryAfter, when positive, is sent as the Retry-After header (whole
	// seconds, rounded up).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Tag + ": " + fmt.Sprint(e.Fields["message"]) }

func newErr(status int, tag, msg string, fields ...any) *Error {
	f := map[string]any{"message": msg}
	for i := 0; i+1 < len(fields); i += 2 {
		f[fields[i].(string)] = fields[i+1]
	}
	return &Error{Status: status, Tag: tag, Fields: f}
}

// The errors the instance API answers with, by _tag.
func invalidRequest(kind, msg string) *Error {
	if len(msg) > 1024 {
		msg = fmt.Sprintf("%s... (%d more chars)", msg[:1024], len(msg)-1024)
	}
	return newErr(400, "InvalidRequestError", msg, "kind", kind)
}

func unauthorized(msg string) *Error { return newErr(401, "UnauthorizedError", msg) }

// tooManyRequests refuses a client address that failed authentication too
// often; wait is how long it stays refused.
func tooManyRequests(wait time.Duration) *Error {
	e := newErr(429, "TooManyRequestsError", "Too many failed authentication attempts from this address; try again later")
	e.RetryAfter = wait
	return e
}

func locationNotFound(dir, msg string) *Error {
	return newErr(404, "LocationNotFoundError", msg, "location", map[string]string{"directory": dir})
}

func locationDenied(dir, msg string) *Error {
	return newErr(403, "LocationPermissionDeniedError", msg, "location", map[string]string{"directory": dir})
}

func agentNotFound(id string) *Error {
	return newErr(404, "AgentNotFoundError", "Agent not found: "+id, "agentID", id)
}

func unavailable(service, msg string) *Error {
	return newErr(503, "ServiceUnavailableError", msg, "service", service)
}

func notFound(msg string) *Error { return newErr(404, "NotFoundError", msg) }

// writeError answers err as a tagged error; anything untagged becomes 500
// UnknownError with a correlation ref and nothing of the cause.
func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		var ae *apierr.Error
		switch {
		case errors.As(err, &ae) && ae.Status == 400:
			e = invalidRequest("payload", ae.Message)
		case errors.As(err, &ae) && ae.Status == 413:
			e = newErr(413, "InvalidRequestError", ae.Message, "kind", "payload")
		case errors.As(err, &ae) && ae.Status == 415:
			e = invalidRequest("payload", ae.Message)
		case errors.As(err, &ae) && ae.Status == 404:
			// the router's "no route"
			e = notFound(ae.Message)
		case errors.As(err, &ae) && ae.Status == 405:
			// the router's wrong method (it has set Allow)
			e = newErr(405, "MethodNotAllowedError", ae.Message)
		default:
			e = newErr(500, "UnknownError", "Unexpected server error. Check server logs for details.", "ref", "err_"+randomID(8))
		}
	}
	body := map[string]any{"_tag": e.Tag}
	for k, v := range e.Fields {
		body[k] = v
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.Status == 401 {
		h.Set("WWW-Authenticate", `Basic realm="Secure Area"`)
	}
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	w.WriteHeader(e.Status)
	json.NewEncoder(w).Encode(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Package errs is the error catalogue of the instance server: every error
// it answers is {"_tag": Tag, "message": …, …Fields} with a fixed status
// per tag. The operations return these errors; the HTTP layer writes them.
package errs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/instance/ids"
)

// Error is a tagged error of the instance API.
type Error struct {
	Status int
	Tag    string
	Fields map[string]any
	// RetryAfter, when positive, is sent as the Retry-After header (whole
	// seconds, rounded up).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Tag + ": " + fmt.Sprint(e.Fields["message"]) }

// New makes an error; fields are name, value pairs added to the body.
func New(status int, tag, msg string, fields ...any) *Error {
	f := map[string]any{"message": msg}
	for i := 0; i+1 < len(fields); i += 2 {
		f[fields[i].(string)] = fields[i+1]
	}
	return &Error{Status: status, Tag: tag, Fields: f}
}

// InvalidRequest is a 400 of a kind (payload, query, params, or a
// condition such as empty_session).
func InvalidRequest(kind, msg string) *Error {
	if len(msg) > 1024 {
		msg = fmt.Sprintf("%s... (%d more chars)", msg[:1024], len(msg)-1024)
	}
	return New(400, "InvalidRequestError", msg, "kind", kind)
}

// Field is a 400 about one field of the request body.
func Field(field, msg string) *Error {
	e := InvalidRequest("payload", msg)
	e.Fields["field"] = field
	return e
}

// Unauthorized refuses missing or wrong credentials.
func Unauthorized(msg string) *Error { return New(401, "UnauthorizedError", msg) }

// Forbidden refuses a request the instance does not answer at all, such
// as one a page of another origin made a browser send.
func Forbidden(msg string) *Error { return New(403, "ForbiddenError", msg) }

// TooManyRequests refuses a client address that failed authentication too
// often; wait is how long it stays refused.
func TooManyRequests(wait time.Duration) *Error {
	e := New(429, "TooManyRequestsError", "Too many failed authentication attempts from this address; try again later")
	e.RetryAfter = wait
	return e
}

// LocationNotFound: the directory does not exist or is no directory.
func LocationNotFound(dir, msg string) *Error {
	return New(404, "LocationNotFoundError", msg, "location", map[string]string{"directory": dir})
}

// LocationDenied: the directory is outside the allowed roots.
func LocationDenied(dir, msg string) *Error {
	return New(403, "LocationPermissionDeniedError", msg, "location", map[string]string{"directory": dir})
}

// AgentNotFound: no agent of that id in the location.
func AgentNotFound(id string) *Error {
	return New(404, "AgentNotFoundError", "Agent not found: "+id, "agentID", id)
}

// Unavailable: a service (store, location, plugin) cannot serve.
func Unavailable(service, msg string) *Error {
	return New(503, "ServiceUnavailableError", msg, "service", service)
}

// NotFound is the answer to a path no route serves.
func NotFound(msg string) *Error { return New(404, "NotFoundError", msg) }

// SessionNotFound: no session of that id in the instance.
func SessionNotFound(id string) *Error {
	return New(404, "SessionNotFoundError", "Session not found: "+id, "sessionID", id)
}

// MessageNotFound: no message of that id in the session.
func MessageNotFound(sid, mid string) *Error {
	return New(404, "MessageNotFoundError", "Message not found: "+mid, "sessionID", sid, "messageID", mid)
}

// Conflict: a record of that id exists.
func Conflict(msg, resource string) *Error {
	return New(409, "ConflictError", msg, "resource", resource)
}

// InvalidCursor: a list cursor the server did not issue.
func InvalidCursor() *Error { return New(400, "InvalidCursorError", "Invalid cursor") }

// Unknown is a 500 whose cause goes to the log under the ref it answers.
func Unknown(log *zap.Logger, what string, err error) *Error {
	ref := "err_" + ids.Random(8)
	log.Error(what, zap.Error(err), zap.String("ref", ref))
	return New(500, "UnknownError", "Unexpected server error. Check server logs for details.", "ref", ref)
}

// Is reports whether err is a tagged error of status and tag.
func Is(err error, status int, tag string) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status && e.Tag == tag
}

// Message is the message of an error without the "Tag: " or "type: "
// prefix its Error text has.
func Message(err error) string {
	if err == nil {
		return "invalid request"
	}
	msg := err.Error()
	if i := strings.Index(msg, ": "); i > 0 && !strings.Contains(msg[:i], " ") {
		return msg[i+2:]
	}
	return msg
}

// Write answers err as a tagged error; anything untagged becomes 500
// UnknownError with a correlation ref and nothing of the cause (the HTTP
// layer's own errors keep their status).
func Write(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		var ae *apierr.Error
		switch {
		case errors.As(err, &ae) && ae.Status == 400:
			e = InvalidRequest("payload", ae.Message)
		case errors.As(err, &ae) && ae.Status == 413:
			e = New(413, "InvalidRequestError", ae.Message, "kind", "payload")
		case errors.As(err, &ae) && ae.Status == 415:
			e = InvalidRequest("payload", ae.Message)
		case errors.As(err, &ae) && ae.Status == 404:
			// the router's "no route"
			e = NotFound(ae.Message)
		case errors.As(err, &ae) && ae.Status == 405:
			// the router's wrong method (it has set Allow)
			e = New(405, "MethodNotAllowedError", ae.Message)
		default:
			e = New(500, "UnknownError", "Unexpected server error. Check server logs for details.", "ref", "err_"+ids.Random(8))
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

// Package apierr is the JSON error contract of agentgate's HTTP surfaces:
// every error answers {"_tag": "<Name>", "message": "…"} with its status.
package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error is an API error with its HTTP status and _tag name.
type Error struct {
	Status  int
	Tag     string
	Message string
	// Fields are extra members of the JSON body.
	Fields map[string]any
}

func (e *Error) Error() string { return e.Tag + ": " + e.Message }

// New makes an Error.
func New(status int, tag, format string, a ...any) *Error {
	return &Error{Status: status, Tag: tag, Message: fmt.Sprintf(format, a...)}
}

// Common errors.
func BadRequest(format string, a ...any) *Error {
	return New(http.StatusBadRequest, "InvalidRequest", format, a...)
}
func Unauthorized() *Error {
	return New(http.StatusUnauthorized, "Unauthorized", "missing, invalid, expired or revoked credential")
}

// AmbiguousCredential answers a request that carries two different
// credentials: which one it means is not the server's to guess. The
// message names the slots, never a credential.
func AmbiguousCredential(format string, a ...any) *Error {
	return New(http.StatusBadRequest, "AmbiguousCredential", format, a...)
}
func Forbidden(format string, a ...any) *Error {
	return New(http.StatusForbidden, "Forbidden", format, a...)
}
func NotFound(tag, format string, a ...any) *Error {
	return New(http.StatusNotFound, tag, format, a...)
}
func Conflict(format string, a ...any) *Error {
	return New(http.StatusConflict, "Conflict", format, a...)
}
func OrgRequired() *Error {
	return New(http.StatusBadRequest, "OrgRequired", "this credential is not bound to a workspace: send the x-org-id header")
}
func WorkspaceNotFound() *Error {
	return New(http.StatusNotFound, "WorkspaceNotFound", "the workspace does not exist or was deleted")
}
func Unavailable(format string, a ...any) *Error {
	return New(http.StatusServiceUnavailable, "ServiceUnavailable", format, a...)
}

// As extracts an *Error from err. An error that reports Unavailable() true
// (a closed store, say) becomes 503; any other error becomes a 500 Internal
// error whose message reveals nothing of the cause.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var u interface{ Unavailable() bool }
	if errors.As(err, &u) && u.Unavailable() {
		return Unavailable("the store is not available; try again shortly")
	}
	return New(http.StatusInternalServerError, "InternalError", "internal error")
}

// Body returns the JSON body of e.
func (e *Error) Body() []byte {
	m := make(map[string]any, 2+len(e.Fields))
	for k, v := range e.Fields {
		m[k] = v
	}
	m["_tag"] = e.Tag
	m["message"] = e.Message
	b, _ := json.Marshal(m)
	return b
}

// Write sends err as a JSON error response.
func Write(w http.ResponseWriter, err error) {
	e := As(err)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	if e.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		h.Set("X-Should-Retry", "false") // clients that read it do not retry a refused credential
	}
	w.WriteHeader(e.Status)
	w.Write(append(e.Body(), '\n'))
}

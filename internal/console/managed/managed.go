// Package managed serves GET /managed/settings on the Console's origin:
// the managed settings a signed-in person's Claude Code CLI polls (about
// hourly) once it signed in to the workspace's gateway. What they hold is
// the service's (service.ManagedSettings: the workspace's models,
// denies, prices and the owner's Claude Code document); this package
// adds the telemetry relay's environment, the checksum as ETag, the 304
// for an If-None-Match that matches, and the errors in the Anthropic
// envelope that the CLI shows. It has no Caddy import; the
// workspace_console handler mounts it.
package managed

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/service"
)

// Path is the route.
const Path = "/managed/settings"

// Handles reports whether the handler serves a path.
func Handles(path string) bool { return path == Path }

// Handler serves the managed settings.
type Handler struct {
	// Service returns the Console service, or an error (503).
	Service func(ctx context.Context) (*service.Service, error)
	// TelemetryEnv is the environment that sends a CLI's OpenTelemetry to
	// the telemetry relay, for a request (the relay's origin is the
	// request's); nil when the relay forwards nowhere, so the CLIs are not
	// asked to send what would be dropped.
	TelemetryEnv func(r *http.Request) map[string]string
}

// ServeHTTP answers GET (and HEAD) /managed/settings with a person's
// access token: 200 {"uuid", "checksum", "settings"} with the checksum
// as ETag, 304 when If-None-Match names it, 204 when nothing applies.
// A missing, revoked or expired token is 401 with x-should-retry: false
// (the CLI asks its user to sign in again); a key is 403.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, apierr.New(http.StatusMethodNotAllowed, "MethodNotAllowed", "use GET"))
		return
	}
	svc, err := h.Service(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	cred, conflict := service.ConsoleBearer(r.Header)
	switch {
	case conflict:
		writeError(w, apierr.AmbiguousCredential("the request carries two different bearer credentials; send one"))
		return
	case cred == "":
		writeError(w, apierr.Unauthorized())
		return
	}
	p, err := svc.Authenticate(r.Context(), cred, r.Header.Get("x-org-id"))
	if err != nil {
		writeError(w, err)
		return
	}
	var opts service.ManagedOptions
	if h.TelemetryEnv != nil {
		opts.TelemetryEnv = h.TelemetryEnv(r)
	}
	m, err := svc.ManagedSettings(r.Context(), p, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	hd := w.Header()
	// Per person, and never served from a cache without asking: the CLI
	// revalidates with If-None-Match.
	hd.Set("Cache-Control", "private, no-cache")
	hd.Set("Vary", "Authorization")
	if m == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	hd.Set("ETag", strconv.Quote(m.Checksum))
	if NoneMatch(r.Header.Get("If-None-Match"), m.Checksum) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	// Written by hand so that the settings go out as the canonical bytes
	// the checksum covers (encoding/json would escape < > &).
	body := make([]byte, 0, len(m.Settings)+128)
	body = append(body, `{"uuid":`...)
	body = strconv.AppendQuote(body, m.UUID)
	body = append(body, `,"checksum":`...)
	body = strconv.AppendQuote(body, m.Checksum)
	body = append(body, `,"settings":`...)
	body = append(body, m.Settings...)
	body = append(body, "}\n"...)
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// NoneMatch reports whether an If-None-Match header names the checksum:
// one of its entity tags (weak or strong, quoted as the CLI sends it, or
// bare) is it. "*" matches nothing here: Claude Desktop sends it only to
// ask whether settings exist, to be answered as without the header.
func NoneMatch(header, checksum string) bool {
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if len(tag) >= 2 && tag[0] == '"' && tag[len(tag)-1] == '"' {
			tag = tag[1 : len(tag)-1]
		}
		if tag != "" && tag != "*" && tag == checksum {
			return true
		}
	}
	return false
}

// writeError answers in the Anthropic error envelope the CLI reads (with
// the _tag and message of agentgate's other surfaces); a 401 carries
// x-should-retry: false, so that the CLI asks for a new sign-in at once
// instead of retrying.
func writeError(w http.ResponseWriter, err error) {
	e := apierr.As(err)
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Del("Content-Length")
	if e.Status == http.StatusUnauthorized {
		hd.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		hd.Set("x-should-retry", "false")
	}
	if e.Status == http.StatusServiceUnavailable {
		hd.Set("Retry-After", "1")
	}
	w.WriteHeader(e.Status)
	w.Write(append(formats.ErrorBody(formats.Anthropic, e.Status, e.Tag, e.Message, e.Fields), '\n'))
}

package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/webapp"
)

// servePlugin serves a request of a location's plugins: it came from
// that location's plugin host over its stdio (dir is the location), never
// from the network. It must carry the location-scoped token the plugins
// were given for that location (Authorization: Bearer), and it may only
// act on that location:
//
//   - a directory it names (?directory=, ?location[directory]=, the
//     x-opencode-directory header, a body's directory or
//     location.directory) must be the location; one naming none is for
//     the location, never the instance's default;
//   - a session it names (in the path, or a body's parentID) must be of
//     the location;
//   - it cannot change the instance or its credentials (location reload,
//     plugin check and update, pairing, the web app), answer permission
//     requests or questions, set permission rules (a body with
//     "permission" or "permissions": a plugin cannot grant itself bash),
//     import or move sessions, or read what spans locations (the event
//     streams, the active sessions, the session stats).
func (s *Server) servePlugin(w http.ResponseWriter, r *http.Request, dir string) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if d, valid := scopedDir(tok, time.Now()); !ok || !valid || d != dir {
		errs.Write(w, errs.Unauthorized("Authentication required"))
		return
	}
	r.Header.Del("Authorization")
	r.Header.Del("Cookie")
	if msg := pluginRefused(r.Method, r.URL.Path); msg != "" {
		errs.Write(w, errs.New(http.StatusForbidden, "ForbiddenError", "a plugin cannot "+msg))
		return
	}
	if err := s.scopeRequest(r, dir); err != nil {
		errs.Write(w, err)
		return
	}
	s.route(w, r)
}

// pluginRefused says what a plugin's request would do that it may not,
// or "".
func pluginRefused(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	has := func(names ...string) bool {
		for _, s := range segs {
			for _, n := range names {
				if s == n {
					return true
				}
			}
		}
		return false
	}
	switch {
	case webapp.Handles(path):
		return "use the web app"
	case path == "/api/location/reload", path == "/api/plugin/check", path == "/api/plugin/update":
		return "reload the instance's locations or manage its plugins"
	case path == "/api/pair", strings.HasPrefix(path, "/auth/"):
		return "pair clients"
	case has("permission", "permissions", "question"):
		return "read or answer permission requests and questions"
	case path == "/event", path == "/api/event", path == "/global/event", strings.HasSuffix(path, "/event"):
		return "read the event streams (the event hook gets the location's events)"
	case path == "/api/session/active", strings.HasPrefix(path, "/api/experimental/session/"):
		return "read or import sessions across locations"
	case strings.HasSuffix(path, "/move"):
		return "move sessions"
	case has("integration", "credential", "pty"):
		return "manage integrations, credentials or terminals"
	}
	return ""
}

// scopeRequest confines a plugin's request to its location (see
// servePlugin).
func (s *Server) scopeRequest(r *http.Request, dir string) error {
	denied := func(d string) error {
		return errs.LocationDenied(d, "a plugin may only use its own location")
	}
	q := r.URL.Query()
	named := false
	for _, k := range []string{"directory", "location[directory]"} {
		for _, v := range q[k] {
			named = true
			if !s.sameLocation(v, dir) {
				return denied(v)
			}
		}
	}
	if h := r.Header.Values("X-Opencode-Directory"); len(h) > 0 {
		named = true
		for _, v := range h {
			if d, err := url.PathUnescape(v); err == nil {
				v = d
			}
			if !s.sameLocation(v, dir) {
				return denied(v)
			}
		}
	}
	if !named {
		r.Header.Set("X-Opencode-Directory", url.PathEscape(dir))
	}
	if r.URL.Path == "/api/session" && r.Method == http.MethodGet {
		// The list spans locations unless filtered: it is filtered to the
		// location, and a cursor (which carries its own filter) is refused.
		if q.Has("cursor") || q.Has("project") {
			return errs.InvalidRequest("query", "a plugin lists its location's sessions without cursor or project")
		}
		if !q.Has("directory") {
			q.Set("directory", dir)
			r.URL.RawQuery = q.Encode()
		}
	}
	if id := pathSessionID(r.URL.Path); id != "" {
		if err := s.sessionInLocation(r, id, dir); err != nil {
			return err
		}
	}
	if r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return errs.InvalidRequest("payload", "unreadable body")
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	var body map[string]json.RawMessage
	if json.Unmarshal(b, &body) != nil {
		return nil // not an object: the handler refuses it as it would anyone's
	}
	for _, k := range []string{"permission", "permissions"} {
		if v, ok := body[k]; ok && string(v) != "null" {
			return errs.New(http.StatusForbidden, "ForbiddenError", "a plugin cannot set permission rules")
		}
	}
	var d string
	if json.Unmarshal(body["directory"], &d) == nil && d != "" && !s.sameLocation(d, dir) {
		return denied(d)
	}
	var loc struct {
		Directory string `json:"directory"`
	}
	if json.Unmarshal(body["location"], &loc) == nil && loc.Directory != "" && !s.sameLocation(loc.Directory, dir) {
		return denied(loc.Directory)
	}
	var parent string
	if json.Unmarshal(body["parentID"], &parent) == nil && parent != "" {
		if err := s.sessionInLocation(r, parent, dir); err != nil {
			return err
		}
	}
	return nil
}

// pathSessionID is the session a path names (/api/session/{id}/…,
// /session/{id}/…), if any.
func pathSessionID(path string) string {
	for _, p := range []string{"/api/session/", "/session/"} {
		if rest, ok := strings.CutPrefix(path, p); ok {
			id, _, _ := strings.Cut(rest, "/")
			if id == "status" || id == "active" {
				return ""
			}
			return id
		}
	}
	return ""
}

// sessionInLocation refuses a session of another location; an unknown
// session is left to the handler (it answers 404 as for anyone).
func (s *Server) sessionInLocation(r *http.Request, id, dir string) error {
	info, err := s.sessions.Get(r.Context(), id)
	if err != nil || info == nil {
		return nil
	}
	if !s.sameLocation(info.Location.Directory, dir) {
		return errs.New(http.StatusForbidden, "ForbiddenError", "a plugin may only use its own location's sessions")
	}
	return nil
}

// sameLocation reports whether a directory a request names is the
// location dir (as written, or once resolved).
func (s *Server) sameLocation(d, dir string) bool {
	if d == "" {
		return false
	}
	if filepath.Clean(d) == dir {
		return true
	}
	loc, err := s.locations.Get(d)
	return err == nil && loc.Directory == dir
}

package server

import (
	"errors"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/webapp"
)

// The instance runs a coding agent for whoever may send it requests, so a
// web page the user merely visits must not be one of them. Browsers label
// what a page makes them send: Sec-Fetch-Site says whether the request
// comes from another site, Origin names the page's origin. guard refuses
// every request a browser sent on behalf of a page that is not the
// instance's own (nor an origin the operator listed in CORSOrigins), before
// anything else happens: reads have effects too (a location's first read
// loads its plugins). Clients that are not browsers (the CLI, the TUI, the
// SDK) send neither header and pass.
//
// Without a password the instance answers only this machine: a loopback
// peer, and a loopback Host. The Host rule stops DNS rebinding, where a
// page of evil.example has its name resolve to 127.0.0.1 and is then
// same-origin with itself but sends Host: evil.example.

// corsMethods and corsHeaders are what a preflight from a listed origin
// may ask for: the API's methods, and the headers the OpenCode clients send.
const (
	corsMethods = "GET, HEAD, POST, PUT, PATCH, DELETE"
	corsHeaders = "Authorization, Content-Type, X-Opencode-Directory, X-Opencode-Workspace, Last-Event-ID"
	corsMaxAge  = "600"
)

// NormalizeOrigin is the canonical form of an origin, scheme://host[:port]:
// lower case, the scheme's default port dropped. Only http and https
// origins without path, query or credentials are origins; "null" is not.
func NormalizeOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", errors.New("an origin is http:// or https:// and a host")
	}
	if u.Host == "" || u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", errors.New("an origin is scheme://host[:port], nothing more")
	}
	host := hostWithoutDefaultPort(scheme, strings.ToLower(u.Host))
	if host == "" {
		return "", errors.New("an origin needs a host")
	}
	return scheme + "://" + host, nil
}

// hostWithoutDefaultPort drops :80 from an http host and :443 from an
// https one.
func hostWithoutDefaultPort(scheme, host string) string {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		return host
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") || port == "" {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return host
}

// ownOrigin is the origin the request was addressed to: its scheme (TLS,
// or the scheme a trusted proxy forwarded) and its Host.
func (s *Server) ownOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if s.opts.TrustedProxy(r) {
		p, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
		switch p = strings.ToLower(strings.TrimSpace(p)); p {
		case "http", "https":
			scheme = p
		}
	}
	return scheme + "://" + hostWithoutDefaultPort(scheme, strings.ToLower(r.Host))
}

// listedOrigin reports whether the request's Origin is one of CORSOrigins
// (then it is that origin, normalised).
func (s *Server) listedOrigin(r *http.Request) (string, bool) {
	if len(s.cors) == 0 {
		return "", false
	}
	o, err := NormalizeOrigin(r.Header.Get("Origin"))
	if err != nil {
		return "", false
	}
	return o, s.cors[o]
}

// refuse answers a refusal: the web app's pages get its error page, the
// API the tagged error.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if webapp.Handles(r.URL.Path) {
		s.web.Refuse(w, r, err)
		return
	}
	errs.Write(w, err)
}

// guard refuses (403 ForbiddenError) what the instance must not answer,
// and answers the CORS preflights of listed origins; it reports whether
// the request goes on. It runs before rate limiting and authentication.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	if !s.opts.Auth.Enabled() {
		if !s.localPeer(r) {
			s.refuse(w, r, errs.Forbidden("Without a password this instance answers only requests from this machine (a loopback address)"))
			return false
		}
		if !LoopbackHost(r.Host) {
			s.refuse(w, r, errs.Forbidden("Without a password this instance answers only a loopback Host (localhost, 127.0.0.1, [::1]), not "+quoteHost(r.Host)))
			return false
		}
	}
	if len(s.cors) > 0 {
		w.Header().Add("Vary", "Origin")
	}
	listed, isListed := s.listedOrigin(r)
	if r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != "" {
		if !isListed {
			s.refuse(w, r, errs.Forbidden("Cross-origin requests from this origin are refused"))
			return false
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", listed)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Allow-Methods", corsMethods)
		h.Set("Access-Control-Allow-Headers", corsHeaders)
		h.Set("Access-Control-Max-Age", corsMaxAge)
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	if isListed {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", listed)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate")
		return true
	}
	switch strings.ToLower(r.Header.Get("Sec-Fetch-Site")) {
	case "cross-site", "same-site":
		s.refuse(w, r, errs.Forbidden("Requests from another site's pages are refused"))
		return false
	}
	if _, sent := r.Header["Origin"]; sent {
		o, err := NormalizeOrigin(r.Header.Get("Origin"))
		if err != nil || o != s.ownOrigin(r) {
			s.refuse(w, r, errs.Forbidden("Requests from another origin's pages are refused"))
			return false
		}
	}
	return true
}

// localPeer reports whether the request comes from this machine: a
// loopback peer (and, when the peer is a trusted proxy, a loopback client
// behind it) or a Unix socket.
func (s *Server) localPeer(r *http.Request) bool {
	if _, ok := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr); ok {
		return true
	}
	if !loopbackIP(remoteHost(r)) {
		return false
	}
	return !s.opts.TrustedProxy(r) || loopbackIP(s.opts.ClientIP(r))
}

func loopbackIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Unmap().IsLoopback()
}

// LoopbackHost reports whether a Host header names this machine's
// loopback: localhost, a name under .localhost, an address of 127.0.0.0/8
// or [::1], with any port.
func LoopbackHost(host string) bool {
	h := strings.ToLower(host)
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if h == "localhost" || (strings.HasSuffix(h, ".localhost") && len(h) > len(".localhost")) {
		return true
	}
	if strings.Contains(h, "%") {
		return false // a zone is not part of a Host
	}
	return loopbackIP(h)
}

func quoteHost(h string) string {
	if len(h) > 100 {
		h = h[:100] + "…"
	}
	return "'" + h + "'"
}

// bodyType refuses a request body without a Content-Type: the instance's
// API takes JSON, and a page can send a body without a type where it could
// not send application/json without asking first. Other types are left to
// the operation (the API's decoder refuses them; the web app takes its
// forms).
func bodyType(r *http.Request) error {
	// A length of -1 is a body of unknown length: chunked, or HTTP/2 and
	// HTTP/3 data without a Content-Length.
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if strings.TrimSpace(ct) == "" {
		return errs.InvalidRequest("payload", "a request body needs Content-Type: application/json")
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil {
		return errs.InvalidRequest("payload", "malformed Content-Type: "+err.Error())
	}
	return nil
}

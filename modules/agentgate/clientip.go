package agentgate

import (
	"net"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// ClientIP is the client address Caddy determined for a request (honouring
// the server's trusted_proxies), for the per-address limits of the Console's
// sign-in and of the instance server. Outside a Caddy server it is the host
// of RemoteAddr.
func ClientIP(r *http.Request) string {
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		return ip
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// TrustedProxy reports whether Caddy found the request's peer among the
// server's trusted_proxies (so its forwarded client address and scheme are
// believed). Outside a Caddy server no peer is.
func TrustedProxy(r *http.Request) bool {
	trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool)
	return trusted
}

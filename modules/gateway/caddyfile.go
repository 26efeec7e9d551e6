package gateway

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("llm_gateway", parseCaddyfile)
	// Before reverse_proxy: the gateway answers /custom/… itself and passes
	// everything else on, so it can share a site with other handlers.
	httpcaddyfile.RegisterDirectiveOrder("llm_gateway", httpcaddyfile.Before, "reverse_proxy")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	g := new(Gateway)
	err := g.UnmarshalCaddyfile(h.Dispenser)
	return g, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	llm_gateway {
//		max_request_body <size>
//		dial_timeout <duration>
//		response_header_timeout <duration>
//		disconnect_grace <duration>
//		max_idle_conns_per_provider <n>
//		tls_trusted_ca_certs <pem_files...>
//		max_attempts <n>
//		try_timeout <duration>
//		fallback_deadline <duration>
//		cooldown <duration>
//	}
func (g *Gateway) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "max_request_body":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(s)
			if err != nil {
				return d.Errf("max_request_body: %v", err)
			}
			g.MaxRequestBody = int64(n)
		case "dial_timeout", "response_header_timeout", "disconnect_grace", "try_timeout", "fallback_deadline", "cooldown":
			name := d.Val()
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			*map[string]*caddy.Duration{"dial_timeout": &g.DialTimeout, "response_header_timeout": &g.ResponseHeaderTimeout,
				"disconnect_grace": &g.DisconnectGrace, "try_timeout": &g.TryTimeout, "fallback_deadline": &g.FallbackDeadline, "cooldown": &g.Cooldown}[name] = caddy.Duration(dur)
		case "max_idle_conns_per_provider":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return d.Errf("max_idle_conns_per_provider must be a positive integer")
			}
			g.MaxIdleConnsPerProvider = n
		case "max_attempts":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return d.Errf("max_attempts must be a positive integer")
			}
			g.MaxAttempts = n
		case "tls_trusted_ca_certs":
			g.TLSTrustedCACerts = d.RemainingArgs()
			if len(g.TLSTrustedCACerts) == 0 {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Gateway)(nil)

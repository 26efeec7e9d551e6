package console

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("workspace_console", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("workspace_console", httpcaddyfile.Before, "file_server")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	c := new(Console)
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return c, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	workspace_console {
//		inference_url <url>
//		console_url <url>
//		device_client <client_id...>
//		max_request_body <size>
//	}
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "inference_url":
			if !d.AllArgs(&c.InferenceURL) {
				return d.ArgErr()
			}
		case "console_url":
			if !d.AllArgs(&c.ConsoleURL) {
				return d.ArgErr()
			}
		case "device_client":
			ids := d.RemainingArgs()
			if len(ids) == 0 {
				return d.ArgErr()
			}
			c.DeviceClients = append(c.DeviceClients, ids...)
		case "max_request_body":
			var s string
			if !d.AllArgs(&s) {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(s)
			if err != nil {
				return d.Errf("max_request_body: %v", err)
			}
			c.MaxRequestBody = int64(n)
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Console)(nil)

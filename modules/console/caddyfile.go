package console

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
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
//		telemetry {
//			otlp_endpoint <url>
//			header <name> <value>
//			max_body <size>
//			requests_per_minute <n>
//			timeout <duration>
//		}
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
		case "telemetry":
			if d.NextArg() {
				return d.ArgErr()
			}
			t, err := parseTelemetry(d)
			if err != nil {
				return err
			}
			c.Telemetry = t
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	return nil
}

// parseTelemetry reads a `telemetry { … }` block.
func parseTelemetry(d *caddyfile.Dispenser) (*Telemetry, error) {
	t := new(Telemetry)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch key := d.Val(); key {
		case "otlp_endpoint":
			if !d.AllArgs(&t.OTLPEndpoint) {
				return nil, d.ArgErr()
			}
		case "header":
			var name, value string
			if !d.AllArgs(&name, &value) {
				return nil, d.ArgErr()
			}
			if t.Headers == nil {
				t.Headers = map[string]string{}
			}
			t.Headers[name] = value
		case "max_body":
			var s string
			if !d.AllArgs(&s) {
				return nil, d.ArgErr()
			}
			n, err := humanize.ParseBytes(s)
			if err != nil {
				return nil, d.Errf("telemetry max_body: %v", err)
			}
			t.MaxBody = int64(n)
		case "requests_per_minute":
			var s string
			if !d.AllArgs(&s) {
				return nil, d.ArgErr()
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 1 {
				return nil, d.Errf("telemetry requests_per_minute must be a positive whole number, not '%s'", s)
			}
			t.RequestsPerMinute = n
		case "timeout":
			var s string
			if !d.AllArgs(&s) {
				return nil, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(s)
			if err != nil {
				return nil, d.Errf("telemetry timeout: %v", err)
			}
			t.Timeout = caddy.Duration(dur)
		default:
			return nil, d.Errf("unrecognized telemetry subdirective '%s'", key)
		}
	}
	return t, nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Console)(nil)

package gateway

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// The directive's durations parse into their fields; disconnect_grace
// takes a duration and nothing else.
func TestCaddyfileDurations(t *testing.T) {
	g := new(Gateway)
	err := g.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`llm_gateway {
		response_header_timeout 2m
		disconnect_grace 90s
		try_timeout 5s
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if g.ResponseHeaderTimeout != caddy.Duration(2*time.Minute) || g.DisconnectGrace != caddy.Duration(90*time.Second) ||
		g.TryTimeout != caddy.Duration(5*time.Second) {
		t.Fatalf("parsed %+v", g)
	}
	for _, bad := range []string{"llm_gateway {\n disconnect_grace\n}", "llm_gateway {\n disconnect_grace soon\n}", "llm_gateway {\n disconnect_grace 1s 2s\n}"} {
		if err := new(Gateway).UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if err := (&Gateway{DisconnectGrace: -1}).Validate(); err == nil {
		t.Error("a negative disconnect_grace is valid")
	}
}

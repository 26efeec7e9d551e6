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

// max_idle_conns_per_provider takes a positive count, and the gateway's
// transports keep that many idle connections to a provider host (1024
// unless set: reverse_proxy's own default, 32, makes a few hundred
// concurrent requests redial most of their connections).
func TestCaddyfileIdleConns(t *testing.T) {
	g := new(Gateway)
	if err := g.UnmarshalCaddyfile(caddyfile.NewTestDispenser("llm_gateway {\n max_idle_conns_per_provider 256\n}")); err != nil {
		t.Fatal(err)
	}
	if g.MaxIdleConnsPerProvider != 256 {
		t.Fatalf("parsed %d", g.MaxIdleConnsPerProvider)
	}
	for _, bad := range []string{"llm_gateway {\n max_idle_conns_per_provider\n}", "llm_gateway {\n max_idle_conns_per_provider 0\n}", "llm_gateway {\n max_idle_conns_per_provider many\n}"} {
		if err := new(Gateway).UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if err := (&Gateway{MaxIdleConnsPerProvider: -1}).Validate(); err == nil {
		t.Error("a negative max_idle_conns_per_provider is valid")
	}
	for _, set := range []int{0, 64} {
		tr := (&Gateway{MaxIdleConnsPerProvider: set}).transport(true)
		want := set
		if want == 0 {
			want = 1024
		}
		if tr.KeepAlive == nil || tr.KeepAlive.MaxIdleConnsPerHost != want || tr.KeepAlive.MaxIdleConns != want {
			t.Errorf("set %d: the transport keeps %+v idle", set, tr.KeepAlive)
		}
	}
}

package agentgate

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestCaddyfileModelLimitsAndCapabilities(t *testing.T) {
	const conf = `agentgate {
		connection conn_a {
			workspace Acme
			kind anthropic
			base_url https://api.anthropic.com/v1
			credential {env.KEY}
			model claude {
				limit context 200000 output 64000
				reasoning
				temperature false
				modalities input text image pdf
			}
		}
	}`
	a := new(App)
	if err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser(conf)); err != nil {
		t.Fatal(err)
	}
	m := a.Connections[0].Models["claude"]
	if m.Limit == nil || *m.Limit.Context != 200000 || *m.Limit.Output != 64000 || !*m.Reasoning || *m.Temperature ||
		m.ToolCall != nil || strings.Join(m.Modalities.Input, ",") != "text,image,pdf" || strings.Join(m.Modalities.Output, ",") != "text" {
		t.Fatalf("model %+v", m)
	}
	for _, bad := range []string{
		"limit context",
		"limit context -5",
		"limit width 5",
		"reasoning maybe",
		"modalities sideways text",
		"modalities input",
	} {
		c := strings.Replace(conf, "reasoning\n", bad+"\n", 1)
		if err := new(App).UnmarshalCaddyfile(caddyfile.NewTestDispenser(c)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

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

func TestCaddyfilePolicy(t *testing.T) {
	const conf = `agentgate {
		policy pol_members {
			workspace Acme
			name "Members: 30 a minute"
			effect limit
			models claude-* gpt-*
			roles member
			per member
			requests_per_minute 30
			tokens_per_minute 200000
		}
	}`
	a := new(App)
	if err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser(conf)); err != nil {
		t.Fatal(err)
	}
	p := a.Policies[0]
	if p.ID != "pol_members" || p.Workspace != "Acme" || p.Name != "Members: 30 a minute" || p.Effect != "limit" ||
		strings.Join(p.Models, ",") != "claude-*,gpt-*" || p.Roles[0] != "member" || p.Per != "member" || p.RequestsPerMinute != 30 || p.TokensPerMinute != 200000 {
		t.Fatalf("policy %+v", p)
	}
	for _, bad := range []string{"requests_per_minute -3", "requests_per_minute", "colour blue", "models"} {
		c := strings.Replace(conf, "requests_per_minute 30", bad, 1)
		if err := new(App).UnmarshalCaddyfile(caddyfile.NewTestDispenser(c)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := new(App).UnmarshalCaddyfile(caddyfile.NewTestDispenser(strings.Replace(conf, "effect limit", "", 1))); err == nil {
		t.Error("a policy without effect accepted")
	}
}

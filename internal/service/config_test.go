package service_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func TestConfig(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("A")
	b := e.fixture("B")
	admin := e.principal(f.adminTok, "")
	off := false
	on := true

	mk := func(p *service.Principal, in service.ConnectionInput) string {
		t.Helper()
		cv, err := e.svc.CreateConnection(ctx, p, in)
		noErr(t, "CreateConnection", err)
		return cv.ID
	}
	in := func(kind, name, cred string, models map[string]service.ModelInput) service.ConnectionInput {
		return service.ConnectionInput{Name: name, Kind: kind, BaseURL: "https://" + kind + ".example.com", Credential: cred, Models: models}
	}
	openai := mk(admin, in(store.KindOpenAI, "OpenAI", "sk-cred-openai-SECRET1", map[string]service.ModelInput{
		"gpt-4o":  {Name: "GPT-4o"},
		"gpt-old": {Enabled: &off},
		"o3":      {Enabled: &on, UpstreamID: "o3-2025-04-16"},
	}))
	mk(admin, in(store.KindAnthropic, "All off", "sk-cred-anthropic-SECRET2", map[string]service.ModelInput{"claude": {Enabled: &off}}))
	mk(admin, in(store.KindOpenAICompatible, "No models", "sk-cred-compat-SECRET3", nil))
	google := mk(admin, in(store.KindGoogle, "Gemini", "sk-cred-google-SECRET4", map[string]service.ModelInput{"gemini-2.5-pro": {}}))
	compat := mk(admin, in(store.KindOpenAICompatible, "Together", "sk-cred-compat-SECRET5", map[string]service.ModelInput{"meta-llama/Llama-3": {}}))
	anthropic := mk(admin, in(store.KindAnthropic, "Claude", "sk-cred-anthropic-SECRET6", map[string]service.ModelInput{"claude-sonnet-4": {}, "claude-2": {Enabled: &off}}))
	theirs := mk(e.principal(b.ownTok, ""), in(store.KindOpenAI, "B's", "sk-cred-B-SECRET7", map[string]service.ModelInput{"gpt-4o": {}}))

	want := map[string]struct {
		name, pkg string
		models    map[string]string // id → name
	}{
		openai:    {"OpenAI", "@ai-sdk/openai", map[string]string{"gpt-4o": "GPT-4o", "o3": "o3"}},
		google:    {"Gemini", "@ai-sdk/google", map[string]string{"gemini-2.5-pro": "gemini-2.5-pro"}},
		compat:    {"Together", "@ai-sdk/openai-compatible", map[string]string{"meta-llama/Llama-3": "meta-llama/Llama-3"}},
		anthropic: {"Claude", "@ai-sdk/anthropic", map[string]string{"claude-sonnet-4": "claude-sonnet-4"}},
	}
	const inferenceURL = "https://gw.example.com/"

	for _, k := range f.kinds() {
		t.Run(k.name, func(t *testing.T) {
			p := e.principal(k.cred, "")
			cfg, err := e.svc.Config(ctx, p, inferenceURL)
			noErr(t, "Config", err)
			conns := 0
			for id, pe := range cfg.Providers {
				if id == theirs {
					t.Fatalf("another workspace's connection %s is in the config", id)
				}
				w, ok := want[id]
				if !ok {
					if strings.HasPrefix(id, "conn_") {
						t.Fatalf("connection %s without enabled models is in the config: %+v", id, pe)
					}
					continue // not a connection (the workspace's own inference entry)
				}
				conns++
				if pe.Name != w.name || pe.Package != w.pkg {
					t.Fatalf("%s: name %q package %q, want %q %q", id, pe.Name, pe.Package, w.name, w.pkg)
				}
				names := map[string]string{}
				for id, m := range pe.Models {
					names[id] = m.Name
				}
				if !reflect.DeepEqual(names, w.models) {
					t.Fatalf("%s: models %v, want %v", id, pe.Models, w.models)
				}
				if pe.Settings.BaseURL != "https://gw.example.com/custom/"+id {
					t.Fatalf("%s: baseURL %q", id, pe.Settings.BaseURL)
				}
				if pe.Settings.APIKey != "{env:AGENTGATE_API_KEY}" {
					t.Fatalf("%s: apiKey %q", id, pe.Settings.APIKey)
				}
				if !contains(pe.Env, "AGENTGATE_API_KEY") {
					t.Fatalf("%s: env %v lacks the variable of apiKey", id, pe.Env)
				}
				if !reflect.DeepEqual(pe.Headers, map[string]string{"x-org-id": f.ws}) {
					t.Fatalf("%s: headers %v", id, pe.Headers)
				}
			}
			if conns != len(want) {
				t.Fatalf("%d connection providers, want %d: %+v", conns, len(want), cfg.Providers)
			}
			b, err := json.Marshal(cfg)
			noErr(t, "marshal", err)
			js := string(b)
			for _, secret := range []string{"SECRET", "sk-cred", f.inference.Key, f.all.Key, keySecret(f.all.Key), keySecret(f.inference.Key),
				f.memberTok, f.adminTok, f.ownTok, k.cred, keySecret(k.cred)} {
				if strings.Contains(js, secret) {
					t.Fatalf("config JSON contains a secret (%q): %s", secret, js)
				}
			}
			for _, field := range []string{`"providers"`, `"websearch"`, `"mcp"`, `"experimental"`, `"policies"`, `"baseURL"`, `"apiKey"`} {
				if !strings.Contains(js, field) {
					t.Fatalf("config JSON lacks %s: %s", field, js)
				}
			}
		})
	}

	// B's config has only B's connection, with B's header.
	cfg, err := e.svc.Config(ctx, e.principal(b.inference.Key, ""), "http://gw")
	noErr(t, "B config", err)
	if pe, ok := cfg.Providers[theirs]; !ok || pe.Headers["x-org-id"] != b.ws || pe.Settings.BaseURL != "http://gw/custom/"+theirs {
		t.Fatalf("B config %+v", cfg.Providers)
	}
	for id := range want {
		if _, ok := cfg.Providers[id]; ok {
			t.Fatalf("A's connection %s in B's config", id)
		}
	}

	// Disabling the last enabled model drops the provider.
	_, err = e.svc.PutModel(ctx, admin, google, "gemini-2.5-pro", service.ModelInput{Enabled: &off})
	noErr(t, "disable", err)
	cfg, err = e.svc.Config(ctx, admin, inferenceURL)
	noErr(t, "Config", err)
	if _, ok := cfg.Providers[google]; ok {
		t.Fatal("a connection whose models are all disabled is still in the config")
	}
	// A deleted workspace has no config.
	noErr(t, "DeleteWorkspace", e.svc.DeleteWorkspace(ctx, f.ws))
	_, err = e.svc.Config(ctx, admin, inferenceURL)
	wantErr(t, "config of a deleted workspace", err, 404, "WorkspaceNotFound")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// The Inference entry lists every workspace model with an enabled target at
// {inference_url}/v1, each with its first target's limits, prices and
// capabilities and, where its format is not Chat Completions', the client
// package of that format; connection entries carry the same model fields.
func TestConfigInferenceEntry(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("Acme")
	admin := e.principal(f.adminTok, "")
	cfg, err := e.svc.Config(ctx, admin, "https://gw.example.com")
	noErr(t, "Config", err)
	if _, ok := cfg.Providers[service.InferenceEntry]; ok {
		t.Fatal("an Inference entry without models")
	}
	cache := money.Micros(300_000)
	an, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindAnthropic, map[string]service.ModelInput{"claude": {
		Pricing: &store.Pricing{Input: 3 * money.Scale, Output: 15 * money.Scale, CacheRead: &cache},
		Limit:   &service.LimitInput{Context: ip(200000), Output: ip(64000)}, Reasoning: bp(true), Attachment: bp(true),
		Modalities: &service.Modalities{Input: []string{"text", "image", "pdf"}, Output: []string{"text"}}}}))
	noErr(t, "anthropic", err)
	oa, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAI, map[string]service.ModelInput{"gpt": {}, "off": {Enabled: bp(false)}}))
	noErr(t, "openai", err)
	co, err := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAICompatible, map[string]service.ModelInput{"llama": {}}))
	noErr(t, "compat", err)
	for id, target := range map[string]store.ModelTarget{"claude-x": {Connection: an.ID, Model: "claude"}, "gpt-x": {Connection: oa.ID, Model: "gpt"},
		"llama-x": {Connection: co.ID, Model: "llama"}, "off-x": {Connection: oa.ID, Model: "off"}} {
		_, err := e.svc.CreateWorkspaceModel(ctx, admin, service.WorkspaceModelInput{ID: id, Targets: []store.ModelTarget{target}})
		noErr(t, "CreateWorkspaceModel "+id, err)
	}
	cfg, err = e.svc.Config(ctx, e.principal(f.inference.Key, ""), "https://gw.example.com/")
	noErr(t, "Config", err)
	entry, ok := cfg.Providers[service.InferenceEntry]
	if !ok || entry.Settings.BaseURL != "https://gw.example.com/v1" || entry.Package != "@ai-sdk/openai-compatible" || entry.Name != "Acme" ||
		entry.Headers["x-org-id"] != f.ws || entry.Settings.APIKey != "{env:AGENTGATE_API_KEY}" {
		t.Fatalf("inference entry %+v", entry)
	}
	if len(entry.Models) != 3 || entry.Models["off-x"].Name != "" {
		t.Fatalf("inference models %+v", entry.Models)
	}
	c := entry.Models["claude-x"]
	want := service.ProviderModel{Package: "@ai-sdk/anthropic", ModelSpec: service.ModelSpec{Name: "claude-x", Limit: service.ModelLimit{Context: 200000, Output: 64000},
		Cost:     service.ModelCost{Input: 3 * money.Scale, Output: 15 * money.Scale, CacheRead: cache, CacheWrite: 3 * money.Scale},
		ToolCall: true, Reasoning: true, Attachment: true, Temperature: true,
		Modalities: service.Modalities{Input: []string{"text", "image", "pdf"}, Output: []string{"text"}}}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("claude-x\n got %+v\nwant %+v", c, want)
	}
	if m := entry.Models["gpt-x"]; m.Package != "@ai-sdk/openai" || m.Limit.Output != store.DefaultOutputLimit || m.Limit.Context != store.DefaultContextWindow {
		t.Fatalf("gpt-x %+v", m)
	}
	if m := entry.Models["llama-x"]; m.Package != "" {
		t.Fatalf("llama-x names the entry's package again: %+v", m)
	}
	// The connection's own entry carries the same fields.
	if m := cfg.Providers[an.ID].Models["claude"]; m.Limit.Output != 64000 || !m.Reasoning || m.Cost.CacheRead != cache {
		t.Fatalf("connection entry model %+v", m)
	}
	pol, err := e.svc.CreatePolicy(ctx, admin, service.PolicyInput{Name: "rpm", Effect: "limit", Models: []string{"claude-*"}, Roles: []string{"member"},
		Per: "member", RequestsPerMinute: 30})
	noErr(t, "CreatePolicy", err)
	cfg, err = e.svc.Config(ctx, e.principal(f.inference.Key, ""), "https://gw.example.com/")
	noErr(t, "Config", err)
	if ps := cfg.Experimental.Policies; len(ps) != 1 || ps[0].ID != pol.ID || ps[0].RequestsPerMinute != 30 || ps[0].Per != "member" || ps[0].Models[0] != "claude-*" {
		t.Fatalf("experimental.policies %+v", ps)
	}
	b, _ := json.Marshal(cfg)
	for _, field := range []string{`"limit":{"context":200000,"output":64000}`, `"cost":{"input":3,"output":15,"cache_read":0.3,"cache_write":3}`, `"tool_call":true`, `"modalities":{"input":["text","image","pdf"]`} {
		if !strings.Contains(string(b), field) {
			t.Fatalf("config JSON lacks %s: %s", field, b)
		}
	}
}

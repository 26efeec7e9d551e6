package service_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

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
		models    map[string]service.ProviderModel
	}{
		openai:    {"OpenAI", "@ai-sdk/openai", map[string]service.ProviderModel{"gpt-4o": {Name: "GPT-4o"}, "o3": {Name: "o3"}}},
		google:    {"Gemini", "@ai-sdk/google", map[string]service.ProviderModel{"gemini-2.5-pro": {Name: "gemini-2.5-pro"}}},
		compat:    {"Together", "@ai-sdk/openai-compatible", map[string]service.ProviderModel{"meta-llama/Llama-3": {Name: "meta-llama/Llama-3"}}},
		anthropic: {"Claude", "@ai-sdk/anthropic", map[string]service.ProviderModel{"claude-sonnet-4": {Name: "claude-sonnet-4"}}},
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
				if !reflect.DeepEqual(pe.Models, w.models) {
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

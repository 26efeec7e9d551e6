package service

import (
	"context"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/claudecode"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// KeyEnvVar is the environment variable that holds the workspace key in a
// client's configuration. Config answers name it, never a secret.
const KeyEnvVar = "AGENTGATE_API_KEY"

// Config is the V2 workspace config (GET /api/v2/config).
type Config struct {
	Providers    map[string]ProviderEntry `json:"providers"`
	Websearch    *Websearch               `json:"websearch"`
	MCP          map[string]MCPServer     `json:"mcp"`
	Experimental Experimental             `json:"experimental"`
	// Permission is the permission rules of the workspace's Claude Code
	// settings, as OpenCode's (see package claudecode); absent when the
	// settings have none.
	Permission *claudecode.Permission `json:"permission,omitempty"`
	// Model is the default model the Claude Code settings name, as
	// OpenCode names it (agentgate/<workspace model>), when it is one of
	// the Inference entry's.
	Model string `json:"model,omitempty"`
}

// ProviderEntry is one provider of the config.
type ProviderEntry struct {
	Name     string                   `json:"name"`
	Env      []string                 `json:"env"`
	Package  string                   `json:"package"`
	Settings ProviderSettings         `json:"settings"`
	Headers  map[string]string        `json:"headers"`
	Models   map[string]ProviderModel `json:"models"`
}

// ProviderSettings says where and with what a client reaches the provider.
type ProviderSettings struct {
	BaseURL string `json:"baseURL"`
	APIKey  string `json:"apiKey"`
}

// ProviderModel is a model of a provider entry, with what a client needs
// to run it: its limits (a client sends limit.output as its output bound),
// its prices in USD per million tokens, its capabilities, and, in the
// Inference entry, the client package of its format where it differs from
// the entry's.
type ProviderModel struct {
	ModelSpec
	Package string `json:"package,omitempty"`
}

// ModelSpec is what both config formats say of a model.
type ModelSpec struct {
	Name        string     `json:"name"`
	Limit       ModelLimit `json:"limit"`
	Cost        ModelCost  `json:"cost"`
	ToolCall    bool       `json:"tool_call"`
	Reasoning   bool       `json:"reasoning"`
	Attachment  bool       `json:"attachment"`
	Temperature bool       `json:"temperature"`
	Modalities  Modalities `json:"modalities"`
}

// ModelLimit is a model's context window and output limit in tokens.
type ModelLimit struct {
	Context int64 `json:"context"`
	Output  int64 `json:"output"`
}

// ModelCost is what a model costs in USD per million tokens: the rates the
// gateway charges (cache reads and writes at the input rate unless priced).
type ModelCost struct {
	Input      money.Micros `json:"input"`
	Output     money.Micros `json:"output"`
	CacheRead  money.Micros `json:"cache_read"`
	CacheWrite money.Micros `json:"cache_write"`
}

// providerModel is a connection's model as the config shows it.
func providerModel(m store.Model) ProviderModel {
	ctx, out := m.Limits()
	caps := m.Caps()
	cost := ModelCost{Input: m.Pricing.Input, Output: m.Pricing.Output, CacheRead: m.Pricing.Input, CacheWrite: m.Pricing.Input}
	if m.Pricing.CacheRead != nil {
		cost.CacheRead = *m.Pricing.CacheRead
	}
	if m.Pricing.CacheWrite != nil {
		cost.CacheWrite = *m.Pricing.CacheWrite
	}
	return ProviderModel{ModelSpec: ModelSpec{Name: m.Name, Limit: ModelLimit{Context: ctx, Output: out}, Cost: cost,
		ToolCall: caps.ToolCall, Reasoning: caps.Reasoning, Attachment: caps.Attachment, Temperature: caps.Temperature,
		Modalities: Modalities{Input: caps.Input, Output: caps.Output}}}
}

// InferenceEntry is the key of the workspace's Inference API entry in the
// config's providers; connection ids (conn_…) never take it.
const InferenceEntry = "agentgate"

// inferencePackage is the Inference entry's client package: every
// workspace model whose targets speak Chat Completions runs with it; the
// others name their own.
const inferencePackage = "@ai-sdk/openai-compatible"

// MCPServer is a remote MCP server of the config, in the form OpenCode
// adds one: its URL and the headers that carry the credential.
type MCPServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Enabled bool              `json:"enabled"`
}

// MCPEntry is the key of the Console's MCP server in the config's mcp.
const MCPEntry = "agentgate"

// ConsoleMCP is the Console's MCP server at consoleURL as the config
// names it for a workspace, with the credential from keyEnv.
func ConsoleMCP(consoleURL, workspace, keyEnv string) MCPServer {
	return MCPServer{Type: "remote", URL: strings.TrimRight(consoleURL, "/") + "/mcp", Enabled: true,
		Headers: map[string]string{"Authorization": "Bearer {env:" + keyEnv + "}", "x-org-id": workspace}}
}

// Websearch is the hosted web search setting.
type Websearch struct {
	Enabled bool `json:"enabled"`
}

// Experimental holds workspace policy statements.
type Experimental struct {
	Policies []PolicyStatement `json:"policies"`
}

// PolicyStatement is a workspace policy as the config shows it.
type PolicyStatement struct {
	ID string `json:"id"`
	store.PolicyRule
}

// packages maps connection kinds to the client package that speaks their format.
var packages = map[string]string{
	store.KindOpenAI:           "@ai-sdk/openai",
	store.KindAnthropic:        "@ai-sdk/anthropic",
	store.KindGoogle:           "@ai-sdk/google",
	store.KindOpenAICompatible: "@ai-sdk/openai-compatible",
}

// Config builds the workspace config: the Inference API's entry (every
// workspace model with an enabled target, at {inferenceURL}/v1, each with
// its first target's limits, prices and capabilities and the client package
// of that target's kind) and one provider per connection of the workspace
// that has enabled models, with only those models. Models the workspace's
// policies refuse the principal are left out, and the permission rules and
// default model of the workspace's Claude Code settings come along, so one
// policy governs both CLIs. inferenceURL is the gateway's base URL. No
// secret ever appears in it.
func (s *Service) Config(ctx context.Context, p *Principal, inferenceURL string) (*Config, error) {
	if err := Require(p, OpReadConfig); err != nil {
		return nil, err
	}
	inferenceURL = strings.TrimRight(inferenceURL, "/")
	cfg := &Config{
		Providers:    map[string]ProviderEntry{},
		Websearch:    &Websearch{Enabled: false},
		MCP:          map[string]MCPServer{},
		Experimental: Experimental{Policies: []PolicyStatement{}},
	}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		ws, err := workspace(tx, p.Workspace)
		if err != nil {
			return err
		}
		cfg.Websearch.Enabled = ws.Websearch != nil
		conns, err := tx.Connections(p.Workspace)
		if err != nil {
			return err
		}
		byID := make(map[string]*store.Connection, len(conns))
		for _, c := range conns {
			byID[c.ID] = c
		}
		wms, err := tx.WorkspaceModels(p.Workspace)
		if err != nil {
			return err
		}
		pols, err := tx.Policies(p.Workspace)
		if err != nil {
			return err
		}
		for _, pol := range pols {
			cfg.Experimental.Policies = append(cfg.Experimental.Policies, PolicyStatement{ID: pol.ID, PolicyRule: pol.PolicyRule})
		}
		inference := map[string]ProviderModel{}
		for _, wm := range wms {
			r := buildRoute(wm, byID)
			if len(r.Targets) == 0 {
				continue
			}
			first := r.Targets[0]
			pm := providerModel(first.Model)
			pm.Name = wm.Name
			if pkg := packages[first.Conn.Kind]; pkg != inferencePackage {
				pm.Package = pkg
			}
			inference[wm.ID] = pm
		}
		modelsAllowed(pols, p, inference)
		if len(inference) > 0 {
			cfg.Providers[InferenceEntry] = ProviderEntry{
				Name:    ws.Name,
				Env:     []string{KeyEnvVar},
				Package: inferencePackage,
				Settings: ProviderSettings{
					BaseURL: inferenceURL + "/v1",
					APIKey:  "{env:" + KeyEnvVar + "}",
				},
				Headers: map[string]string{"x-org-id": p.Workspace},
				Models:  inference,
			}
		}
		for _, c := range conns {
			models := map[string]ProviderModel{}
			ids := make([]string, 0, len(c.Models))
			for id := range c.Models {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				if m := c.Models[id]; m.Enabled {
					models[id] = providerModel(m)
				}
			}
			modelsAllowed(pols, p, models)
			if len(models) == 0 {
				continue
			}
			cfg.Providers[c.ID] = ProviderEntry{
				Name:    c.Name,
				Env:     []string{KeyEnvVar},
				Package: packages[c.Kind],
				Settings: ProviderSettings{
					BaseURL: inferenceURL + "/custom/" + c.ID,
					APIKey:  "{env:" + KeyEnvVar + "}",
				},
				Headers: map[string]string{"x-org-id": p.Workspace},
				Models:  models,
			}
		}
		perm, model, err := openCodePolicy(tx, p.Workspace)
		if err != nil {
			return err
		}
		if !perm.Empty() {
			cfg.Permission = &perm
		}
		if _, ok := inference[model]; ok && model != "" {
			cfg.Model = InferenceEntry + "/" + model
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// V1Config is the workspace config in the format the released OpenCode CLI
// reads (its opencode.json): the same providers and models as Config,
// encoded differently. It is answered at /api/config inside {"config": …}.
type V1Config struct {
	Schema   string                `json:"$schema"`
	Provider map[string]V1Provider `json:"provider"`
	MCP      map[string]MCPServer  `json:"mcp,omitempty"`
	// Permission and Model are the Config's (OpenCode's own keys).
	Permission *claudecode.Permission `json:"permission,omitempty"`
	Model      string                 `json:"model,omitempty"`
}

// V1Provider is a provider of the V1 config.
type V1Provider struct {
	Name    string             `json:"name"`
	NPM     string             `json:"npm"`
	Env     []string           `json:"env"`
	Options V1Options          `json:"options"`
	Models  map[string]V1Model `json:"models"`
}

// V1Options say where and with what the client reaches a provider.
type V1Options struct {
	BaseURL string            `json:"baseURL"`
	APIKey  string            `json:"apiKey"`
	Headers map[string]string `json:"headers"`
}

// V1Model is a model of a V1 provider; Provider names its client package
// where it differs from the provider's.
type V1Model struct {
	ModelSpec
	Provider *V1ModelProvider `json:"provider,omitempty"`
}

// V1ModelProvider is a model's own client package.
type V1ModelProvider struct {
	NPM string `json:"npm"`
}

// V1 encodes cfg in the V1 format, with the workspace credential read from
// the environment variable keyEnv.
func V1(cfg *Config, keyEnv string) *V1Config {
	out := &V1Config{Schema: "https://opencode.ai/config.json", Provider: map[string]V1Provider{}, Permission: cfg.Permission, Model: cfg.Model}
	for id, pe := range cfg.Providers {
		p := V1Provider{Name: pe.Name, NPM: pe.Package, Env: []string{keyEnv},
			Options: V1Options{BaseURL: pe.Settings.BaseURL, APIKey: "{env:" + keyEnv + "}", Headers: pe.Headers},
			Models:  make(map[string]V1Model, len(pe.Models))}
		for mid, m := range pe.Models {
			vm := V1Model{ModelSpec: m.ModelSpec}
			if m.Package != "" {
				vm.Provider = &V1ModelProvider{NPM: m.Package}
			}
			p.Models[mid] = vm
		}
		out.Provider[id] = p
	}
	for id, m := range cfg.MCP {
		if out.MCP == nil {
			out.MCP = map[string]MCPServer{}
		}
		h := make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			h[k] = v
		}
		if _, ok := h["Authorization"]; ok {
			h["Authorization"] = "Bearer {env:" + keyEnv + "}"
		}
		m.Headers = h
		out.MCP[id] = m
	}
	return out
}

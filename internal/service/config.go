package service

import (
	"context"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/store"
)

// KeyEnvVar is the environment variable that holds the workspace key in a
// client's configuration. Config answers name it, never a secret.
const KeyEnvVar = "AGENTGATE_API_KEY"

// Config is the V2 workspace config (GET /api/v2/config).
type Config struct {
	Providers    map[string]ProviderEntry `json:"providers"`
	Websearch    *Websearch               `json:"websearch"`
	MCP          map[string]any           `json:"mcp"`
	Experimental Experimental             `json:"experimental"`
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

// ProviderModel is a model of a provider entry.
type ProviderModel struct {
	Name string `json:"name"`
}

// Websearch is the hosted web search setting.
type Websearch struct {
	Enabled bool `json:"enabled"`
}

// Experimental holds workspace policy statements.
type Experimental struct {
	Policies []any `json:"policies"`
}

// packages maps connection kinds to the client package that speaks their format.
var packages = map[string]string{
	store.KindOpenAI:           "@ai-sdk/openai",
	store.KindAnthropic:        "@ai-sdk/anthropic",
	store.KindGoogle:           "@ai-sdk/google",
	store.KindOpenAICompatible: "@ai-sdk/openai-compatible",
}

// Config builds the workspace config: one provider per connection of the
// workspace that has enabled models, with only those models. inferenceURL is
// the gateway's base URL. No secret ever appears in it.
func (s *Service) Config(ctx context.Context, p *Principal, inferenceURL string) (*Config, error) {
	if err := Require(p, OpReadConfig); err != nil {
		return nil, err
	}
	inferenceURL = strings.TrimRight(inferenceURL, "/")
	cfg := &Config{
		Providers:    map[string]ProviderEntry{},
		Websearch:    &Websearch{Enabled: false},
		MCP:          map[string]any{},
		Experimental: Experimental{Policies: []any{}},
	}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		conns, err := tx.Connections(p.Workspace)
		if err != nil {
			return err
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
					models[id] = ProviderModel{Name: m.Name}
				}
			}
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
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

package loop

import (
	"sort"

	"github.com/agentgate/agentgate/internal/money"
)

// ProviderID is the provider id of the instance's configured provider:
// the id models of the provider block carry in a session's model.
const ProviderID = "agentgate"

// ProviderInfo is ProviderV2Info: the instance's configured provider.
// Its endpoint and key are not shown.
type ProviderInfo struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	API     map[string]any `json:"api"`
	Request requestInfo    `json:"request"`
}

type requestInfo struct {
	Headers map[string]string `json:"headers"`
	Body    map[string]any    `json:"body"`
}

// ModelInfo is ModelV2Info: a model of the configured provider (its
// default model and those with configured limits), or of the workspace.
type ModelInfo struct {
	ID           string         `json:"id"`
	ProviderID   string         `json:"providerID"`
	Name         string         `json:"name"`
	API          map[string]any `json:"api"`
	Capabilities struct {
		Tools  bool     `json:"tools"`
		Input  []string `json:"input"`
		Output []string `json:"output"`
	} `json:"capabilities"`
	Request  requestInfo `json:"request"`
	Variants []any       `json:"variants"`
	Time     struct {
		Released int64 `json:"released"`
	} `json:"time"`
	Cost    []modelCost `json:"cost"`
	Status  string      `json:"status"`
	Enabled bool        `json:"enabled"`
	Limit   struct {
		Context int64 `json:"context"`
		Output  int64 `json:"output"`
	} `json:"limit"`
	// Reasoning, Attachment and Temperature are the capabilities the v1
	// records show (this record has no field for them).
	Reasoning, Attachment, Temperature bool `json:"-"`
}

// modelCost is USD per million tokens, exact decimals.
type modelCost struct {
	Input  money.Micros `json:"input"`
	Output money.Micros `json:"output"`
	Cache  struct {
		Read  money.Micros `json:"read"`
		Write money.Micros `json:"write"`
	} `json:"cache"`
}

// Catalog lists the configured provider and its models, by id; both are
// empty when the instance has no provider. An instance that is a
// workspace member lists the workspace's models it may use, read now.
func (r *Runner) Catalog() ([]ProviderInfo, []ModelInfo) {
	p := r.Provider()
	if p.Workspace != nil {
		return r.workspaceCatalog(p.Workspace)
	}
	if p.BaseURL == "" && p.Connection == "" {
		return []ProviderInfo{}, []ModelInfo{}
	}
	format := p.Format
	if format == "" {
		format = "chat"
	}
	ids := map[string]bool{}
	if p.Model != "" {
		ids[p.Model] = true
	}
	for id := range p.Limits {
		ids[id] = true
	}
	models := make([]ModelInfo, 0, len(ids))
	for id := range ids {
		m := newModelInfo(id, format)
		m.Capabilities.Tools, m.Capabilities.Input, m.Capabilities.Output = true, []string{"text"}, []string{"text"}
		m.Temperature = true
		m.Cost = []modelCost{{Input: p.InputPrice, Output: p.OutputPrice}}
		m.Limit.Context, m.Limit.Output = p.Limits[id].Context, p.Limits[id].Output
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool { return models[i].ID < models[j].ID })
	return []ProviderInfo{providerInfo(format)}, models
}

// providerInfo is the instance's provider record; format is its wire
// format ("workspace" for a workspace's models, each with its own).
func providerInfo(format string) ProviderInfo {
	return ProviderInfo{ID: ProviderID, Name: "agentgate", API: map[string]any{"type": "native", "settings": map[string]any{"format": format}},
		Request: requestInfo{Headers: map[string]string{}, Body: map[string]any{}}}
}

// newModelInfo is a model record of the instance's provider, active and
// enabled, spoken to in format.
func newModelInfo(id, format string) ModelInfo {
	return ModelInfo{ID: id, ProviderID: ProviderID, Name: id, API: map[string]any{"id": id, "type": "native", "settings": map[string]any{"format": format}},
		Request: requestInfo{Headers: map[string]string{}, Body: map[string]any{}}, Variants: []any{}, Status: "active", Enabled: true}
}

package loop

import (
	"context"
	"maps"
	"net/http"
	"time"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/store"
)

// An instance that is a workspace member (ProviderConfig.Workspace) runs
// its turns on the workspace's models: each step goes to the Inference
// API of the gateway of the same process, in-process, as the instance's
// service account, in the wire format of the model's first enabled
// target. The models offered, their limits, prices and capabilities, and
// the default model are read from the workspace on every use, so that a
// model an owner adds, removes or denies in the Console is seen by the
// next list and the next step.

// Workspace is the workspace an instance is a member of.
type Workspace interface {
	// Models lists the workspace's models that have an enabled target, by
	// id; a model a policy refuses to the instance carries Denied.
	Models(ctx context.Context) ([]WorkspaceModel, error)
	// Client sends requests to the gateway in-process, as the instance's
	// member.
	Client() *http.Client
}

// WorkspaceModel is a workspace model as the instance uses it: what its
// first enabled target says of it.
type WorkspaceModel struct {
	ID   string
	Name string
	// Format is the wire format of the first enabled target's connection:
	// chat, anthropic or google.
	Format string
	Limits ModelLimits
	// Pricing is the first target's: what the gateway charges when that
	// target answers.
	Pricing                               store.Pricing
	ToolCall, Reasoning, Attachment, Temp bool
	InputModalities, OutputModalities     []string
	// Denied, when set, is why a workspace policy refuses the model to
	// the instance: it is not offered.
	Denied string
}

// SessionHeader names the agent session on every provider request, so
// that the gateway's usage record of the request carries it (the header
// OpenCode sends).
const SessionHeader = "X-Opencode-Session"

// withSession is a request's headers (a copy) naming the session.
func withSession(h map[string]string, sid string) map[string]string {
	out := maps.Clone(h)
	if out == nil {
		out = map[string]string{}
	}
	out[SessionHeader] = sid
	return out
}

// localBase is the base URL of in-process requests; it is never dialled.
const localBase = "http://agentgate.local"

// NoWorkspaceModelMessage is the error of a turn on an instance whose
// workspace has no model it may use.
const NoWorkspaceModelMessage = "The workspace has no model this instance may use: an owner adds a connection and a model in the Console " +
	"(Connections, then Models), or changes the policies that deny the models to the instance's service account; then prompt again"

// catalogTimeout bounds a read of the workspace's models for a list.
const catalogTimeout = 5 * time.Second

// defaultOf is the default model: the configured one, else the first
// model by id the instance may use.
func defaultOf(configured string, models []WorkspaceModel) string {
	if configured != "" {
		return configured
	}
	for _, m := range models {
		if m.Denied == "" {
			return m.ID
		}
	}
	return ""
}

// resolveProvider is the configuration of a session's next request: prov
// itself outside a workspace; in one, the Inference API in-process, with
// the format, prices and limits of the model the session uses (a model
// the workspace does not list goes as Chat Completions: the gateway's
// refusal then says why). What cannot be resolved is kept as the error
// providerStep reports.
func (s svc) resolveProvider(ctx context.Context, prov ProviderConfig, info *session.Info) ProviderConfig {
	if prov.Workspace == nil {
		return prov
	}
	models, err := prov.Workspace.Models(ctx)
	if err != nil {
		prov.fail = &StructuredError{Type: "ProviderConfigError", Message: "Cannot read the workspace's models: " + err.Error()}
		return prov
	}
	prov.Model = defaultOf(prov.Model, models)
	model := modelOf(prov, info, s.resolveAgent(info))
	if model.ID == "" {
		prov.fail = &StructuredError{Type: "ProviderConfigError", Message: NoWorkspaceModelMessage}
		return prov
	}
	prov.Format, prov.Limits, prov.Pricing = formats.Chat.String(), nil, nil
	for _, m := range models {
		if m.ID == model.ID {
			if _, ok := formats.Named(m.Format); ok {
				prov.Format = m.Format
			}
			p := m.Pricing
			prov.Pricing = &p
			prov.Limits = map[string]ModelLimits{m.ID: m.Limits}
		}
	}
	prov.BaseURL = localBase
	if prov.Format == formats.Chat.String() || prov.Format == formats.Responses.String() {
		prov.BaseURL += "/v1" // the OpenAI SDKs' base URL has the version; Anthropic's and Google's do not
	}
	prov.APIKey, prov.Client = "", prov.Workspace.Client()
	return prov
}

// workspaceCatalog lists the workspace's models the instance may use
// under the instance's provider; none (and no provider) when there are
// none or they cannot be read.
func (r *Runner) workspaceCatalog(w Workspace) ([]ProviderInfo, []ModelInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	list, err := w.Models(ctx)
	if err != nil {
		return []ProviderInfo{}, []ModelInfo{}
	}
	models := make([]ModelInfo, 0, len(list))
	for _, wm := range list {
		if wm.Denied != "" {
			continue
		}
		m := newModelInfo(wm.ID, wm.Format)
		m.Name = wm.Name
		m.Capabilities.Tools, m.Capabilities.Input, m.Capabilities.Output = wm.ToolCall, wm.InputModalities, wm.OutputModalities
		m.Reasoning, m.Attachment, m.Temperature = wm.Reasoning, wm.Attachment, wm.Temp
		c := modelCost{Input: wm.Pricing.Input, Output: wm.Pricing.Output}
		c.Cache.Read, c.Cache.Write = wm.Pricing.Input, wm.Pricing.Input
		if wm.Pricing.CacheRead != nil {
			c.Cache.Read = *wm.Pricing.CacheRead
		}
		if wm.Pricing.CacheWrite != nil {
			c.Cache.Write = *wm.Pricing.CacheWrite
		}
		m.Cost = []modelCost{c}
		m.Limit.Context, m.Limit.Output = wm.Limits.Context, wm.Limits.Output
		models = append(models, m)
	}
	if len(models) == 0 {
		return []ProviderInfo{}, []ModelInfo{}
	}
	return []ProviderInfo{providerInfo("workspace")}, models
}

// DefaultModel is the model a session uses when neither it nor its agent
// names one: the provider block's model; in a workspace, the configured
// model, else the first workspace model by id the instance may use ("" when
// there is none).
func (r *Runner) DefaultModel() string {
	p := r.Provider()
	if p.Workspace == nil || p.Model != "" {
		return p.Model
	}
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	list, err := p.Workspace.Models(ctx)
	if err != nil {
		return ""
	}
	return defaultOf("", list)
}

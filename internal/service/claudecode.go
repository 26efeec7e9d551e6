package service

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/claudecode"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// A workspace serves its members' Claude Code CLIs managed settings
// (GET /managed/settings): what the workspace already decides — the
// models a member may use, the models denied to them, the prices, the
// telemetry relay — and the owner's Claude Code settings document
// (permission rules, a few environment variables and switches, see
// package claudecode). Only an owner signed in as a person, the operator,
// or the Caddyfile writes the document; every accepted change is kept in
// its history with who made it.

// ClaudeCodeSettingsView is a workspace's Claude Code settings document as
// the APIs show it, with what OpenCode gets of it.
type ClaudeCodeSettingsView struct {
	// Settings is the document ({} when the workspace has none).
	Settings json.RawMessage `json:"settings"`
	// Checksum is the document's own (the managed settings a member gets
	// add the workspace's models and telemetry, so theirs differs).
	Checksum string `json:"checksum"`
	// Version counts the accepted changes (0: never set).
	Version  int        `json:"version"`
	Declared bool       `json:"declared"`
	Updated  *time.Time `json:"updated"`
	// UpdatedBy is who made the last change: a person's id, "operator" or
	// "caddyfile"; empty when never set. UpdatedByEmail is the person's
	// email.
	UpdatedBy      string `json:"updated_by,omitempty"`
	UpdatedByEmail string `json:"updated_by_email,omitempty"`
	// OpenCode is what the document's permission rules are in the
	// OpenCode config, and the rules and settings that do not carry over.
	OpenCode OpenCodePolicy `json:"opencode"`
}

// OpenCodePolicy is the document as the OpenCode config reads it.
type OpenCodePolicy struct {
	Permission claudecode.Permission `json:"permission"`
	Unmapped   []claudecode.Unmapped `json:"unmapped"`
}

// ClaudeCodeChangeView is one entry of the history.
type ClaudeCodeChangeView struct {
	Version    int             `json:"version"`
	Time       time.Time       `json:"time"`
	ActorKind  string          `json:"actor_kind"`
	ActorID    string          `json:"actor_id,omitempty"`
	ActorEmail string          `json:"actor_email,omitempty"` // a person's, while they exist
	Checksum   string          `json:"checksum"`
	Declared   bool            `json:"declared"`
	Settings   json.RawMessage `json:"settings"`
}

// personEmail is a person's email, or "" when they are gone.
func personEmail(tx store.Tx, id string) string {
	if id == "" {
		return ""
	}
	p, err := tx.Person(id)
	if err != nil {
		return ""
	}
	return p.Email
}

// emptyDocument is the document of a workspace that never had one.
const emptyDocument = "{}"

// ClaudeCodeSettings reads the workspace's Claude Code settings document
// (every credential that reads the config may: its members get it anyway).
func (s *Service) ClaudeCodeSettings(ctx context.Context, p *Principal) (*ClaudeCodeSettingsView, error) {
	if err := Require(p, OpReadConfig); err != nil {
		return nil, err
	}
	var v *ClaudeCodeSettingsView
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		var err error
		v, err = claudeCodeView(tx, p.Workspace)
		return err
	})
	return v, err
}

func claudeCodeView(tx store.Tx, ws string) (*ClaudeCodeSettingsView, error) {
	cur, err := tx.ClaudeCodeSettings(ws)
	if errors.Is(err, store.ErrNotFound) {
		cur, err = &store.ClaudeCodeSettings{Workspace: ws, Settings: emptyDocument, Checksum: claudecode.ChecksumOf([]byte(emptyDocument))}, nil
	}
	if err != nil {
		return nil, err
	}
	v := &ClaudeCodeSettingsView{Settings: json.RawMessage(cur.Settings), Checksum: cur.Checksum, Version: cur.Version,
		Declared: cur.Declared}
	if cur.Version > 0 {
		updated := cur.Updated
		v.Updated = &updated
		hist, err := tx.ClaudeCodeSettingsChanges(ws)
		if err != nil {
			return nil, err
		}
		if n := len(hist); n > 0 {
			v.UpdatedBy = actorName(hist[n-1].ActorKind, hist[n-1].ActorID)
			v.UpdatedByEmail = personEmail(tx, hist[n-1].ActorID)
		}
	}
	doc, err := storedDocument(cur)
	if err != nil {
		return nil, err
	}
	v.OpenCode.Permission, v.OpenCode.Unmapped = claudecode.OpenCodePermission(doc)
	if v.OpenCode.Unmapped == nil {
		v.OpenCode.Unmapped = []claudecode.Unmapped{}
	}
	return v, nil
}

func actorName(kind, id string) string {
	if kind == "member" {
		return id
	}
	return kind
}

// storedDocument reads a stored document back.
func storedDocument(c *store.ClaudeCodeSettings) (map[string]any, error) {
	if c == nil || c.Settings == "" {
		return map[string]any{}, nil
	}
	v, err := claudecode.Parse([]byte(c.Settings))
	if err != nil {
		return nil, fmt.Errorf("the stored Claude Code settings of %s: %v", c.Workspace, err)
	}
	doc, _ := v.(map[string]any)
	if doc == nil {
		return nil, fmt.Errorf("the stored Claude Code settings of %s are not an object", c.Workspace)
	}
	return doc, nil
}

// SetClaudeCodeSettings replaces the workspace's Claude Code settings
// document: owners signed in as a person, and the operator (never a key).
// The document is checked first (400 naming every refused, unknown or
// malformed key); a document the Caddyfile declares is read-only (409).
// An unchanged document is no change: its history gains nothing.
func (s *Service) SetClaudeCodeSettings(ctx context.Context, p *Principal, raw []byte) (*ClaudeCodeSettingsView, error) {
	if err := Require(p, OpManageClaudeCode); err != nil {
		return nil, err
	}
	_, canon, err := claudecode.CheckDocument(raw)
	if err != nil {
		return nil, err
	}
	kind, id, _ := actorOf(p)
	var v *ClaudeCodeSettingsView
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		cur, err := tx.ClaudeCodeSettings(p.Workspace)
		switch {
		case errors.Is(err, store.ErrNotFound):
			cur = nil
		case err != nil:
			return err
		case cur.Declared:
			return apierr.Conflict("the Claude Code settings of this workspace are declared in the Caddyfile; change them there")
		}
		if err := s.writeClaudeCode(tx, p.Workspace, cur, string(canon), false, kind, id); err != nil {
			return err
		}
		v, err = claudeCodeView(tx, p.Workspace)
		return err
	})
	return v, err
}

// writeClaudeCode stores a document and its history entry, unless it
// changes nothing.
func (s *Service) writeClaudeCode(tx store.Tx, ws string, cur *store.ClaudeCodeSettings, canon string, declared bool, actorKind, actorID string) error {
	if cur != nil && cur.Settings == canon && cur.Declared == declared {
		return nil
	}
	version := 1
	if cur != nil {
		version = cur.Version + 1
	}
	now := s.now()
	sum := claudecode.ChecksumOf([]byte(canon))
	if err := tx.PutClaudeCodeSettings(&store.ClaudeCodeSettings{Workspace: ws, Settings: canon, Checksum: sum, Version: version,
		Declared: declared, Updated: now}); err != nil {
		return err
	}
	return tx.PutClaudeCodeSettingsChange(&store.ClaudeCodeSettingsChange{Workspace: ws, Version: version, Time: now,
		ActorKind: actorKind, ActorID: actorID, Checksum: sum, Settings: canon, Declared: declared})
}

// ClaudeCodeSettingsHistory lists the accepted changes of the workspace's
// Claude Code settings, oldest first (owners).
func (s *Service) ClaudeCodeSettingsHistory(ctx context.Context, p *Principal) ([]*ClaudeCodeChangeView, error) {
	if err := Require(p, OpManageClaudeCode); err != nil {
		return nil, err
	}
	out := []*ClaudeCodeChangeView{}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		list, err := tx.ClaudeCodeSettingsChanges(p.Workspace)
		for _, c := range list {
			out = append(out, &ClaudeCodeChangeView{Version: c.Version, Time: c.Time, ActorKind: c.ActorKind, ActorID: c.ActorID,
				ActorEmail: personEmail(tx, c.ActorID), Checksum: c.Checksum, Declared: c.Declared, Settings: json.RawMessage(c.Settings)})
		}
		return err
	})
	return out, err
}

// DeclaredClaudeCode is a workspace's Claude Code settings document
// declared in the Caddyfile.
type DeclaredClaudeCode struct {
	Workspace string // an id, which must exist, or a name (created when missing)
	Settings  []byte
}

// CheckDeclaredClaudeCode checks a declared document without a store.
func CheckDeclaredClaudeCode(settings []byte) error {
	_, _, err := claudecode.CheckDocument(settings)
	return err
}

// ReconcileClaudeCodeSettings writes the documents the Caddyfile declares
// (read-only elsewhere) and makes editable again the documents of the
// workspaces it no longer declares, keeping their content. It answers the
// workspaces whose settings changed.
func (s *Service) ReconcileClaudeCodeSettings(ctx context.Context, decls []DeclaredClaudeCode) ([]string, error) {
	canon := make([]string, len(decls))
	for i, d := range decls {
		_, c, err := claudecode.CheckDocument(d.Settings)
		if err != nil {
			return nil, fmt.Errorf("workspace %s: %s", d.Workspace, apierr.As(err).Message)
		}
		canon[i] = string(c)
	}
	var changed []string
	now := s.now()
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		changed = nil
		declared := map[string]bool{}
		for i, d := range decls {
			ws, err := s.resolveWorkspaceRef(tx, d.Workspace, now)
			if err != nil {
				return fmt.Errorf("workspace %s: %s", d.Workspace, apierr.As(err).Message)
			}
			if declared[ws] {
				return fmt.Errorf("workspace %s: its Claude Code settings are declared twice", d.Workspace)
			}
			declared[ws] = true
			cur, err := claudeCodeOf(tx, ws)
			if err != nil {
				return err
			}
			if cur == nil || cur.Settings != canon[i] || !cur.Declared {
				changed = append(changed, ws)
			}
			if err := s.writeClaudeCode(tx, ws, cur, canon[i], true, "caddyfile", ""); err != nil {
				return err
			}
		}
		all, err := tx.Workspaces()
		if err != nil {
			return err
		}
		for _, w := range all {
			if declared[w.ID] {
				continue
			}
			cur, err := claudeCodeOf(tx, w.ID)
			if err != nil {
				return err
			}
			if cur != nil && cur.Declared {
				changed = append(changed, w.ID)
				if err := s.writeClaudeCode(tx, w.ID, cur, cur.Settings, false, "caddyfile", ""); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return changed, err
}

func claudeCodeOf(tx store.Tx, ws string) (*store.ClaudeCodeSettings, error) {
	c, err := tx.ClaudeCodeSettings(ws)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return c, err
}

// ManagedOptions are what the managed settings carry beyond the workspace.
type ManagedOptions struct {
	// TelemetryEnv is the environment that sends the CLI's OpenTelemetry
	// to the telemetry relay; nil when the relay forwards nowhere.
	TelemetryEnv map[string]string
}

// Managed is the answer of GET /managed/settings.
type Managed struct {
	UUID     string          `json:"uuid"`
	Checksum string          `json:"checksum"`
	Settings json.RawMessage `json:"settings"`
}

// The environment variable that makes the CLI list the gateway's models
// (GET /v1/models) in its model picker.
const gatewayModelDiscovery = "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY"

// ManagedSettings builds the managed settings of a person's Claude Code
// CLI in their workspace, or nil when nothing applies:
//
//   - availableModels: the workspace models with an enabled target that
//     speaks Anthropic's Messages format, that the policies let this
//     member use (set, possibly empty, once the workspace has any such
//     model), by id with the document's default model first, with
//     enforceAvailableModels so that the CLI's default is one of them, their prices (modelPricing, from the first such
//     target, so the CLI's cost figures are the workspace's), and the
//     model discovery variable so that its model picker lists them;
//   - deniedModels: the workspace models the policies refuse this member,
//     and the literal model ids of the deny policies that apply to them;
//   - env: the telemetry relay's variables, then the document's;
//   - the rest of the owner's document.
//
// A service-account key gets 403: the settings are for people.
func (s *Service) ManagedSettings(ctx context.Context, p *Principal, opts ManagedOptions) (*Managed, error) {
	if p.Kind != KindPerson {
		return nil, apierr.Forbidden("managed settings are for people signed in to the workspace, not for keys")
	}
	if err := Require(p, OpInference); err != nil {
		return nil, err
	}
	settings := map[string]any{}
	env := map[string]any{}
	for k, v := range opts.TelemetryEnv {
		env[k] = v
	}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		conns, err := connectionsByID(tx, p.Workspace)
		if err != nil {
			return err
		}
		wms, err := tx.WorkspaceModels(p.Workspace)
		if err != nil {
			return err
		}
		pols, err := tx.Policies(p.Workspace)
		if err != nil {
			return err
		}
		cur, err := claudeCodeOf(tx, p.Workspace)
		if err != nil {
			return err
		}
		doc, err := storedDocument(cur)
		if err != nil {
			return err
		}
		anthropic, available := 0, []string{}
		denied := map[string]bool{}
		pricing := map[string]any{}
		for _, wm := range wms {
			if !modelAllowed(pols, p, wm.ID) {
				denied[wm.ID] = true
			}
			ts := buildRoute(wm, conns).Serves(formats.Anthropic)
			if len(ts) == 0 {
				continue
			}
			anthropic++
			if denied[wm.ID] {
				continue
			}
			available = append(available, wm.ID)
			if row := priceRow(ts[0].Model.Pricing); row != nil {
				pricing[wm.ID] = row
			}
		}
		for _, pol := range pols {
			if pol.Effect != store.EffectDeny || !appliesTo(pol, p) {
				continue
			}
			for _, g := range pol.Models {
				if !strings.ContainsAny(g, "*?") {
					denied[g] = true
				}
			}
		}
		if model, _ := doc["model"].(string); model != "" {
			// The document's default model first: the CLI's default
			// falls back to the first available model.
			if i := slices.Index(available, model); i > 0 {
				available = append(append([]string{model}, available[:i]...), available[i+1:]...)
			}
		}
		if anthropic > 0 {
			settings["availableModels"] = available
			if len(available) > 0 {
				settings["enforceAvailableModels"] = true
				env[gatewayModelDiscovery] = "1"
			}
			if len(pricing) > 0 {
				settings["modelPricing"] = map[string]any{"multiplier": 1, "overrides": pricing}
			}
		}
		if len(denied) > 0 {
			list := make([]string, 0, len(denied))
			for id := range denied {
				list = append(list, id)
			}
			sort.Strings(list)
			settings["deniedModels"] = list
		}
		for k, v := range doc {
			if k == "env" {
				m, _ := v.(map[string]any)
				for ek, ev := range m {
					env[ek] = ev
				}
				continue
			}
			settings[k] = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(env) > 0 {
		settings["env"] = env
	}
	if len(settings) == 0 {
		return nil, nil
	}
	canon, err := claudecode.Canonical(settings)
	if err != nil {
		return nil, err
	}
	return &Managed{UUID: managedUUID(p.Workspace), Checksum: claudecode.ChecksumOf(canon), Settings: canon}, nil
}

// modelAllowed reports whether the policies let the principal use a
// model: no deny statement of theirs matches it, and it is among the
// models of their allow statements when any applies (as CheckPolicies
// decides a request).
func modelAllowed(pols []*store.Policy, p *Principal, model string) bool {
	anyAllow, allowed := false, false
	for _, pol := range pols {
		if !appliesTo(pol, p) {
			continue
		}
		switch pol.Effect {
		case store.EffectDeny:
			if matchesModel(pol, model) {
				return false
			}
		case store.EffectAllow:
			anyAllow = true
			allowed = allowed || matchesModel(pol, model)
		}
	}
	return !anyAllow || allowed
}

// priceRow is a model's price as the CLI's modelPricing overrides take it
// (USD per million tokens, all four rates, each from 0 to 10000), or nil
// when a rate is out of that range.
func priceRow(pr store.Pricing) map[string]any {
	usd := func(m money.Micros) float64 { return float64(m) / money.Scale }
	cacheRead, cacheWrite := pr.Input, pr.Input
	if pr.CacheRead != nil {
		cacheRead = *pr.CacheRead
	}
	if pr.CacheWrite != nil {
		cacheWrite = *pr.CacheWrite
	}
	row := map[string]any{}
	for name, m := range map[string]money.Micros{"input": pr.Input, "output": pr.Output, "cacheRead": cacheRead, "cacheWrite": cacheWrite} {
		if m < 0 || m > 10_000*money.Scale {
			return nil
		}
		row[name] = usd(m)
	}
	return row
}

// managedUUID is the uuid of a workspace's managed settings: the same for
// every member and every version, derived from the workspace's id.
func managedUUID(ws string) string {
	sum := sha256.Sum256([]byte("agentgate managed settings\x00" + ws))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8: a name-based id of our own
	b[8] = b[8]&0x3f | 0x80 // the RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// openCodePolicy is the owner's document as the OpenCode config carries
// it: its permission rules and its default model (a workspace model of
// the Inference entry).
func openCodePolicy(tx store.Tx, ws string) (claudecode.Permission, string, error) {
	cur, err := claudeCodeOf(tx, ws)
	if err != nil || cur == nil {
		return claudecode.Permission{}, "", err
	}
	doc, err := storedDocument(cur)
	if err != nil {
		return claudecode.Permission{}, "", err
	}
	perm, _ := claudecode.OpenCodePermission(doc)
	model, _ := doc["model"].(string)
	return perm, model, nil
}

// modelsAllowed filters a provider entry's models by the policies.
func modelsAllowed[V any](pols []*store.Policy, p *Principal, models map[string]V) {
	for id := range models {
		if !modelAllowed(pols, p, id) {
			delete(models, id)
		}
	}
}

// TelemetryIdentity is who a telemetry export comes from, as the telemetry
// relay stamps it on every resource.
type TelemetryIdentity struct {
	Workspace, WorkspaceName string
	Member, Email, Role      string
	SignIn                   string // the sign-in (token family) the export came with
}

// TelemetryIdentity reads the identity of a person's telemetry: their
// workspace, email and role, from the store (never from the export).
func (s *Service) TelemetryIdentity(ctx context.Context, p *Principal) (*TelemetryIdentity, error) {
	if p.Kind != KindPerson {
		return nil, apierr.Forbidden("telemetry is accepted from people signed in to the workspace, not from keys")
	}
	id := &TelemetryIdentity{Workspace: p.Workspace, Member: p.PersonID, Role: p.Role, SignIn: p.FamilyID}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		w, err := workspace(tx, p.Workspace)
		if err != nil {
			return err
		}
		person, err := tx.Person(p.PersonID)
		if err != nil {
			return storeErr(err, "PersonNotFound", "person")
		}
		id.WorkspaceName, id.Email = w.Name, person.Email
		return nil
	})
	return id, err
}

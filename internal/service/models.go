package service

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/store"
)

// Workspace models are the ids of the Inference API: a client sends one as
// its model, and the gateway sends the request to a target, a model of one
// of the workspace's connections. An id is chosen by whoever creates the
// model: 1 to 128 characters of lowercase letters, digits, '.', '_' and
// '-', starting with a letter or digit, so that it travels unchanged in a
// body, in a URL path and in Google's "models/<id>:method". It is unique in
// its workspace; creating a taken id answers 409.

var workspaceModelIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ValidWorkspaceModelID reports whether id may name a workspace model.
func ValidWorkspaceModelID(id string) bool { return workspaceModelIDRe.MatchString(id) }

// maxTargets bounds the targets of one workspace model.
const maxTargets = 16

// WorkspaceModelInput creates or replaces a workspace model. ID is taken
// from the path on a replace.
type WorkspaceModelInput struct {
	ID      string              `json:"id"`
	Name    string              `json:"name,omitempty"`
	Targets []store.ModelTarget `json:"targets"`
}

// WorkspaceModelView is a workspace model on the wire: its targets, each
// with whether it can serve now (its connection exists and enables the
// model), and the formats the enabled targets speak.
type WorkspaceModelView struct {
	ID      string       `json:"id"`
	Name    string       `json:"name"`
	Targets []TargetView `json:"targets"`
	Formats []string     `json:"formats"`
	Created string       `json:"created"`
	Updated string       `json:"updated"`
}

// TargetView is a target with its state.
type TargetView struct {
	store.ModelTarget
	Kind    string `json:"kind,omitempty"`
	Enabled bool   `json:"enabled"`
}

// checkTargets validates targets against the workspace's connections: each
// names a connection of the workspace and a model of it, at most once; the
// targets are all ordered or all weighted.
func checkTargets(tx store.Tx, ws string, targets []store.ModelTarget) error {
	if len(targets) == 0 || len(targets) > maxTargets {
		return apierr.BadRequest("a model needs 1 to %d targets", maxTargets)
	}
	weighted := 0
	seen := map[[2]string]bool{}
	for i, t := range targets {
		if t.Order < 0 || t.Order > 1000 || t.Weight < 0 || t.Weight > 1000 {
			return apierr.BadRequest("targets[%d]: order and weight must be from 0 to 1000", i)
		}
		if t.Weight > 0 {
			weighted++
		}
		key := [2]string{t.Connection, t.Model}
		if seen[key] {
			return apierr.BadRequest("targets[%d]: %s/%s is listed twice", i, t.Connection, t.Model)
		}
		seen[key] = true
		c, err := tx.Connection(t.Connection)
		if errors.Is(err, store.ErrNotFound) || (err == nil && c.Workspace != ws) {
			return apierr.BadRequest("targets[%d]: connection %q is not a connection of this workspace", i, t.Connection)
		}
		if err != nil {
			return err
		}
		if _, ok := c.Models[t.Model]; !ok {
			return apierr.BadRequest("targets[%d]: connection %s has no model %q", i, t.Connection, t.Model)
		}
	}
	if weighted != 0 && weighted != len(targets) {
		return apierr.BadRequest("targets are either all weighted (weight > 0) or all ordered (order)")
	}
	return nil
}

// WorkspaceModels lists the workspace's models.
func (s *Service) WorkspaceModels(ctx context.Context, p *Principal) ([]*WorkspaceModelView, error) {
	if err := Require(p, OpManageModels); err != nil {
		return nil, err
	}
	var out []*WorkspaceModelView
	err := s.eachModel(ctx, p.Workspace, func(m *store.WorkspaceModel, conns map[string]*store.Connection) {
		out = append(out, modelView(m, conns))
	})
	return out, err
}

// eachModel calls fn with every model of a live workspace and the
// workspace's connections by id, in one read.
func (s *Service) eachModel(ctx context.Context, ws string, fn func(*store.WorkspaceModel, map[string]*store.Connection)) error {
	return s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, ws); err != nil {
			return err
		}
		ms, err := tx.WorkspaceModels(ws)
		if err != nil {
			return err
		}
		conns, err := connectionsByID(tx, ws)
		if err != nil {
			return err
		}
		for _, m := range ms {
			fn(m, conns)
		}
		return nil
	})
}

// WorkspaceModel returns one workspace model.
func (s *Service) WorkspaceModel(ctx context.Context, p *Principal, id string) (*WorkspaceModelView, error) {
	if err := Require(p, OpManageModels); err != nil {
		return nil, err
	}
	var out *WorkspaceModelView
	err := s.Store.View(ctx, func(tx store.Tx) error {
		m, err := workspaceModel(tx, p.Workspace, id)
		if err != nil {
			return err
		}
		conns, err := connectionsByID(tx, p.Workspace)
		out = modelView(m, conns)
		return err
	})
	return out, err
}

// CreateWorkspaceModel adds a workspace model; 409 when its id is taken.
func (s *Service) CreateWorkspaceModel(ctx context.Context, p *Principal, in WorkspaceModelInput) (*WorkspaceModelView, error) {
	return s.writeWorkspaceModel(ctx, p, in, true)
}

// ReplaceWorkspaceModel replaces the name and targets of a workspace model.
func (s *Service) ReplaceWorkspaceModel(ctx context.Context, p *Principal, id string, in WorkspaceModelInput) (*WorkspaceModelView, error) {
	if in.ID != "" && in.ID != id {
		return nil, apierr.BadRequest("a model's id cannot be changed; create a new model")
	}
	in.ID = id
	return s.writeWorkspaceModel(ctx, p, in, false)
}

func (s *Service) writeWorkspaceModel(ctx context.Context, p *Principal, in WorkspaceModelInput, create bool) (*WorkspaceModelView, error) {
	if err := Require(p, OpManageModels); err != nil {
		return nil, err
	}
	if !ValidWorkspaceModelID(in.ID) {
		return nil, apierr.BadRequest("id must be 1 to 128 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
	}
	if in.Name == "" {
		in.Name = in.ID
	}
	if err := checkName("name", in.Name); err != nil {
		return nil, err
	}
	now := s.now()
	m := &store.WorkspaceModel{ID: in.ID, Workspace: p.Workspace, Name: strings.TrimSpace(in.Name),
		Targets: slices.Clone(in.Targets), Created: now, Updated: now}
	var out *WorkspaceModelView
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		if !create {
			old, err := workspaceModel(tx, p.Workspace, in.ID)
			if err != nil {
				return err
			}
			m.Created = old.Created
		}
		if err := checkTargets(tx, p.Workspace, m.Targets); err != nil {
			return err
		}
		if err := tx.PutWorkspaceModel(m, create); err != nil {
			return storeErr(err, "ModelNotFound", "model "+m.ID)
		}
		conns, err := connectionsByID(tx, p.Workspace)
		out = modelView(m, conns)
		return err
	})
	return out, err
}

// DeleteWorkspaceModel removes a workspace model.
func (s *Service) DeleteWorkspaceModel(ctx context.Context, p *Principal, id string) error {
	if err := Require(p, OpManageModels); err != nil {
		return err
	}
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		return storeErr(tx.DeleteWorkspaceModel(p.Workspace, id), "ModelNotFound", "model "+id)
	})
}

func workspaceModel(tx store.Tx, ws, id string) (*store.WorkspaceModel, error) {
	if _, err := workspace(tx, ws); err != nil {
		return nil, err
	}
	m, err := tx.WorkspaceModel(ws, id)
	return m, storeErr(err, "ModelNotFound", "model "+id)
}

func connectionsByID(tx store.Tx, ws string) (map[string]*store.Connection, error) {
	cs, err := tx.Connections(ws)
	out := make(map[string]*store.Connection, len(cs))
	for _, c := range cs {
		out[c.ID] = c
	}
	return out, err
}

func modelView(m *store.WorkspaceModel, conns map[string]*store.Connection) *WorkspaceModelView {
	v := &WorkspaceModelView{ID: m.ID, Name: m.Name, Targets: []TargetView{}, Formats: buildRoute(m, conns).Formats(),
		Created: m.Created.Format(timeLayout), Updated: m.Updated.Format(timeLayout)}
	for _, t := range m.Targets {
		tv := TargetView{ModelTarget: t}
		if c := conns[t.Connection]; c != nil {
			tv.Kind = c.Kind
			cm, ok := c.Models[t.Model]
			tv.Enabled = ok && cm.Enabled
		}
		v.Targets = append(v.Targets, tv)
	}
	return v
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Route is what the Inference API needs of a workspace model: its enabled
// targets in the order they are tried (weighted ones drawn per request by
// Order), shared between requests and never changed.
type Route struct {
	Model    *store.WorkspaceModel
	Targets  []Target // enabled targets, in order
	Weighted bool
	// Disabled is the number of targets that cannot serve (connection
	// gone, model removed or disabled).
	Disabled int

	byFormat [][]Target // by format: the enabled targets that speak it, in order
}

// Target is one enabled target: the connection and its model.
type Target struct {
	Conn    *store.Connection
	ModelID string
	Model   store.Model
	Weight  int
}

// Serves lists the targets that speak format f, in the order to try them:
// by order, or with one drawn by weight first and the rest by weight. The
// slice may be shared with other requests: callers must not change it.
func (r *Route) Serves(f formats.Format) []Target {
	if !f.Valid() || int(f) >= len(r.byFormat) {
		return nil
	}
	ts := r.byFormat[f]
	if !r.Weighted || len(ts) < 2 {
		return ts
	}
	out := slices.Clone(ts)
	total := 0
	for _, t := range out {
		total += t.Weight
	}
	n := rand.IntN(total)
	for i, t := range out {
		if n < t.Weight {
			out[0], out[i] = out[i], out[0]
			break
		}
		n -= t.Weight
	}
	rest := out[1:]
	sort.SliceStable(rest, func(i, j int) bool { return rest[i].Weight > rest[j].Weight })
	return out
}

// Formats lists the formats the enabled targets speak.
func (r *Route) Formats() []string {
	out := []string{}
	for _, f := range formats.All() {
		if len(r.byFormat[f]) > 0 {
			out = append(out, f.String())
		}
	}
	return out
}

// LookupModel returns the route of a workspace model for the Inference API
// (any principal allowed to use inference): 404 ModelNotFound for an id
// the workspace does not have. Cached like connections (hotCache).
func (s *Service) LookupModel(ctx context.Context, p *Principal, id string) (*Route, error) {
	if err := Require(p, OpInference); err != nil {
		return nil, err
	}
	if e := s.cachedRoute(p.Workspace, id); e != nil {
		return e, nil
	}
	gen, cacheable := s.gen()
	var r *Route
	err := s.Store.View(ctx, func(tx store.Tx) error {
		m, err := workspaceModel(tx, p.Workspace, id)
		if err != nil {
			return err
		}
		conns, err := connectionsByID(tx, p.Workspace)
		if err != nil {
			return err
		}
		r = buildRoute(m, conns)
		return nil
	})
	if err == nil && cacheable {
		s.shareConns(gen, p.Workspace, r)
		s.hot.routes.Store(p.Workspace+"\x00"+id, &routeEntry{gen: gen, route: r})
	}
	return r, err
}

// buildRoute orders a model's enabled targets.
func buildRoute(m *store.WorkspaceModel, conns map[string]*store.Connection) *Route {
	r := &Route{Model: m, Weighted: len(m.Targets) > 0}
	type ordered struct {
		Target
		order int
	}
	var ts []ordered
	for _, t := range m.Targets {
		c := conns[t.Connection]
		var cm store.Model
		ok := c != nil
		if ok {
			cm, ok = c.Models[t.Model]
		}
		if !ok || !cm.Enabled {
			r.Disabled++
			continue
		}
		if t.Weight == 0 {
			r.Weighted = false
		}
		ts = append(ts, ordered{Target{Conn: c, ModelID: t.Model, Model: cm, Weight: t.Weight}, t.Order})
	}
	if !r.Weighted {
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].order < ts[j].order })
	}
	for _, t := range ts {
		r.Targets = append(r.Targets, t.Target)
	}
	r.byFormat = make([][]Target, formats.Count()+1)
	for _, f := range formats.All() {
		for _, t := range r.Targets {
			if formats.Supports(t.Conn.Kind, f) {
				r.byFormat[f] = append(r.byFormat[f], t)
			}
		}
	}
	return r
}

// InferenceModels lists the routes of the workspace's models that have an
// enabled target, in id order, for the Inference API's model list (any
// principal allowed to use inference).
func (s *Service) InferenceModels(ctx context.Context, p *Principal) ([]*Route, error) {
	if err := Require(p, OpInference); err != nil {
		return nil, err
	}
	var out []*Route
	err := s.eachModel(ctx, p.Workspace, func(m *store.WorkspaceModel, conns map[string]*store.Connection) {
		if r := buildRoute(m, conns); len(r.Targets) > 0 {
			out = append(out, r)
		}
	})
	return out, err
}

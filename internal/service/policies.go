package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/quota"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// Workspace policies are statements over the models a request names
// (globs: '*' any run of characters, '/' included; '?' one character),
// for subjects (roles, service accounts, keys; none means everyone):
//
//   - deny: a request by a subject for a matching model is refused (403
//     PolicyDenied, naming the policy);
//   - allow: once any allow statement applies to a caller, the caller may
//     use only the models some allow statement of theirs matches;
//   - limit: requests and tokens per minute, counted per key (a person's
//     sign-in counts as their key), per member or per workspace, on both
//     gateway APIs (429 RateLimited).
//
// On the Providers API the model is the connection's model id; on the
// Inference API, the workspace model's id.

// PolicyInput creates or replaces a policy.
type PolicyInput = store.PolicyRule

// Bounds of policies.
const (
	maxPolicies     = 100
	maxPolicyModels = 64
	maxPerMinute    = 1_000_000_000
)

// checkPolicy validates a policy against the workspace.
func checkPolicy(tx store.Tx, ws string, in PolicyInput) error {
	if err := checkName("name", in.Name); err != nil {
		return err
	}
	switch in.Effect {
	case store.EffectAllow, store.EffectDeny:
		if in.Per != "" || in.RequestsPerMinute != 0 || in.TokensPerMinute != 0 {
			return apierr.BadRequest("per, requests_per_minute and tokens_per_minute belong to limit policies")
		}
	case store.EffectLimit:
		if !slices.Contains([]string{store.PerKey, store.PerMember, store.PerWorkspace}, in.Per) {
			return apierr.BadRequest("a limit policy needs per: key, member or workspace")
		}
		if in.RequestsPerMinute < 0 || in.TokensPerMinute < 0 || in.RequestsPerMinute > maxPerMinute || in.TokensPerMinute > maxPerMinute {
			return apierr.BadRequest("requests_per_minute and tokens_per_minute must be from 0 to %d", maxPerMinute)
		}
		if in.RequestsPerMinute == 0 && in.TokensPerMinute == 0 {
			return apierr.BadRequest("a limit policy needs requests_per_minute or tokens_per_minute")
		}
	default:
		return apierr.BadRequest("effect must be allow, deny or limit")
	}
	if len(in.Models) == 0 || len(in.Models) > maxPolicyModels {
		return apierr.BadRequest("models needs 1 to %d globs (\"*\" for every model)", maxPolicyModels)
	}
	for _, g := range in.Models {
		if g == "" || len(g) > 256 || strings.ContainsAny(g, "\x00\r\n") {
			return apierr.BadRequest("model glob %q is not allowed", g)
		}
	}
	for _, r := range in.Roles {
		if !slices.Contains([]string{store.RoleOwner, store.RoleAdmin, store.RoleMember}, r) {
			return apierr.BadRequest("unknown role %q (owner, admin, member)", r)
		}
	}
	for _, id := range in.ServiceAccounts {
		sa, err := tx.ServiceAccount(id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && sa.Workspace != ws) {
			return apierr.BadRequest("service account %q is not one of this workspace", id)
		}
		if err != nil {
			return err
		}
	}
	for _, id := range in.Keys {
		k, err := tx.APIKey(id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && k.Workspace != ws) {
			return apierr.BadRequest("key %q is not one of this workspace", id)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Policies lists the workspace's policies.
func (s *Service) Policies(ctx context.Context, p *Principal) ([]*store.Policy, error) {
	if err := Require(p, OpManageModels); err != nil {
		return nil, err
	}
	var out []*store.Policy
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		out, err = tx.Policies(p.Workspace)
		return err
	})
	return out, err
}

// Policy returns one policy.
func (s *Service) Policy(ctx context.Context, p *Principal, id string) (*store.Policy, error) {
	list, err := s.Policies(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, pol := range list {
		if pol.ID == id {
			return pol, nil
		}
	}
	return nil, apierr.NotFound("PolicyNotFound", "policy %s not found", id)
}

// CreatePolicy adds a policy.
func (s *Service) CreatePolicy(ctx context.Context, p *Principal, in PolicyInput) (*store.Policy, error) {
	return s.writePolicy(ctx, p, "", in)
}

// ReplacePolicy replaces a policy.
func (s *Service) ReplacePolicy(ctx context.Context, p *Principal, id string, in PolicyInput) (*store.Policy, error) {
	return s.writePolicy(ctx, p, id, in)
}

func (s *Service) writePolicy(ctx context.Context, p *Principal, id string, in PolicyInput) (*store.Policy, error) {
	if err := Require(p, OpManageModels); err != nil {
		return nil, err
	}
	now := s.now()
	pol := &store.Policy{ID: id, Workspace: p.Workspace, PolicyRule: ruleOf(in), Created: now, Updated: now}
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		list, err := tx.Policies(p.Workspace)
		if err != nil {
			return err
		}
		if id == "" {
			if len(list) >= maxPolicies {
				return apierr.Conflict("a workspace has at most %d policies", maxPolicies)
			}
			pol.ID = secrets.NewID("pol_")
		} else {
			i := slices.IndexFunc(list, func(x *store.Policy) bool { return x.ID == id })
			if i < 0 {
				return apierr.NotFound("PolicyNotFound", "policy %s not found", id)
			}
			if list[i].Declared {
				return declaredPolicy(id)
			}
			pol.Created = list[i].Created
		}
		if err := checkPolicy(tx, p.Workspace, in); err != nil {
			return err
		}
		return tx.PutPolicy(pol)
	})
	if err != nil {
		return nil, err
	}
	return pol, nil
}

// ruleOf is the rule to store: its name trimmed, its lists its own.
func ruleOf(in PolicyInput) store.PolicyRule {
	r := in
	r.Name = strings.TrimSpace(in.Name)
	r.Models, r.Roles, r.ServiceAccounts, r.Keys = slices.Clone(in.Models), slices.Clone(in.Roles), slices.Clone(in.ServiceAccounts), slices.Clone(in.Keys)
	return r
}

// DeletePolicy removes a policy.
func (s *Service) DeletePolicy(ctx context.Context, p *Principal, id string) error {
	if err := Require(p, OpManageModels); err != nil {
		return err
	}
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		list, err := tx.Policies(p.Workspace)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(list, func(x *store.Policy) bool { return x.ID == id }); i >= 0 && list[i].Declared {
			return declaredPolicy(id)
		}
		return storeErr(tx.DeletePolicy(p.Workspace, id), "PolicyNotFound", "policy "+id)
	})
}

func declaredPolicy(id string) error {
	return apierr.Conflict("policy %s is declared in the Caddyfile; change it there", id)
}

var declaredPolicyIDRe = regexp.MustCompile(`^pol_[A-Za-z0-9_-]{1,48}$`)

// ValidPolicyID reports whether id may name a declared policy.
func ValidPolicyID(id string) bool { return declaredPolicyIDRe.MatchString(id) }

// ReconcilePolicy writes a policy declared in the Caddyfile into its
// workspace (an id, which must exist, or a name, created when missing),
// leaving an unchanged one alone. Its service accounts and keys must exist.
func (s *Service) ReconcilePolicy(ctx context.Context, workspaceRef, id string, in PolicyInput) (changed bool, err error) {
	if !ValidPolicyID(id) {
		return false, apierr.BadRequest("policy id must match pol_[A-Za-z0-9_-]{1,48}")
	}
	now := s.now()
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		changed = false
		ws, err := s.resolveWorkspaceRef(tx, workspaceRef, now)
		if err != nil {
			return err
		}
		if err := checkPolicy(tx, ws, in); err != nil {
			return err
		}
		pol := &store.Policy{ID: id, Workspace: ws, PolicyRule: ruleOf(in), Declared: true, Created: now, Updated: now}
		list, err := tx.Policies(ws)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(list, func(x *store.Policy) bool { return x.ID == id }); i >= 0 {
			old := list[i]
			pol.Created, pol.Updated = old.Created, old.Updated
			a, _ := json.Marshal(old)
			b, _ := json.Marshal(pol)
			if string(a) == string(b) {
				return nil
			}
			pol.Updated = now
		}
		changed = true
		return tx.PutPolicy(pol)
	})
	return changed, err
}

// Glob reports whether s matches pattern: '*' matches any run of
// characters (slashes too), '?' any one character.
func Glob(pattern, s string) bool {
	px, sx := 0, 0
	star, mark := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && (pattern[px] == '?' || pattern[px] == s[sx]):
			px++
			sx++
		case px < len(pattern) && pattern[px] == '*':
			star, mark = px, sx
			px++
		case star >= 0:
			px, mark = star+1, mark+1
			sx = mark
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// appliesTo reports whether a policy's subjects include the principal.
func appliesTo(pol *store.Policy, p *Principal) bool {
	if len(pol.Roles) == 0 && len(pol.ServiceAccounts) == 0 && len(pol.Keys) == 0 {
		return true
	}
	switch p.Kind {
	case KindPerson:
		return slices.Contains(pol.Roles, p.Role)
	case KindServiceKey:
		return slices.Contains(pol.ServiceAccounts, p.ServiceAccount) || slices.Contains(pol.Keys, p.KeyID)
	}
	return false
}

func matchesModel(pol *store.Policy, model string) bool {
	for _, g := range pol.Models {
		if Glob(g, model) {
			return true
		}
	}
	return false
}

// Quota is one limit a request counts against: the counter's key and its
// bounds, and the policy that sets them.
type Quota struct {
	Key    string
	Limit  quota.Limit // this node's share of the policy's limits
	Policy *store.Policy
	Nodes  int // the live nodes sharing the limits
}

// liveNodes is the number of nodes of the fleet that share the store (1
// for a store of one process).
func (s *Service) liveNodes() int {
	if f, ok := s.Store.(interface{ LiveNodes() int }); ok {
		return max(f.LiveNodes(), 1)
	}
	return 1
}

// nodeShare is one node's share of a policy's per-minute limits when n
// live nodes enforce them, each in its own memory (no round trip per
// request): the limit divided by n, rounded down so that the fleet never
// admits more than the limit, and at least 1.
func nodeShare(l quota.Limit, n int) quota.Limit {
	if n <= 1 {
		return l
	}
	div := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(v/int64(n), 1)
	}
	return quota.Limit{Requests: div(l.Requests), Tokens: div(l.Tokens)}
}

// CheckPolicies decides a gateway request of the principal for a model:
// 403 PolicyDenied naming the policy when a deny statement, or the lack of
// an allow statement, refuses it; otherwise the limits it counts against.
func (s *Service) CheckPolicies(ctx context.Context, p *Principal, model string) ([]Quota, error) {
	pols, err := s.workspacePolicies(ctx, p.Workspace)
	if err != nil || len(pols) == 0 {
		return nil, err
	}
	var allows []*store.Policy
	allowed := false
	var quotas []Quota
	nodes := s.liveNodes()
	for _, pol := range pols {
		if !appliesTo(pol, p) {
			continue
		}
		switch pol.Effect {
		case store.EffectDeny:
			if matchesModel(pol, model) {
				return nil, policyDenied(pol, "policy %q (%s) denies model %q", pol.Name, pol.ID, model)
			}
		case store.EffectAllow:
			allows = append(allows, pol)
			allowed = allowed || matchesModel(pol, model)
		case store.EffectLimit:
			if !matchesModel(pol, model) {
				continue
			}
			var scope string
			switch pol.Per {
			case store.PerKey:
				scope = p.KeyID
				switch {
				case p.Kind == KindPerson:
					scope = p.FamilyID
				case p.Instance != "":
					// An instance has no key: its member is its one credential.
					scope = "instance:" + p.Instance
				}
			case store.PerMember:
				scope = p.MemberID()
			default:
				scope = p.Workspace
			}
			quotas = append(quotas, Quota{Key: pol.ID + "\x00" + scope,
				Limit: nodeShare(quota.Limit{Requests: pol.RequestsPerMinute, Tokens: pol.TokensPerMinute}, nodes), Policy: pol, Nodes: nodes})
		}
	}
	if len(allows) > 0 && !allowed {
		names := make([]string, len(allows))
		for i, a := range allows {
			names[i] = fmt.Sprintf("%q (%s: %s)", a.Name, a.ID, strings.Join(a.Models, ", "))
		}
		return nil, policyDenied(allows[0], "model %q is not among the models your allow policies permit: %s", model, strings.Join(names, "; "))
	}
	return quotas, nil
}

func policyDenied(pol *store.Policy, format string, args ...any) error {
	e := apierr.New(403, "PolicyDenied", format, args...)
	e.Fields = map[string]any{"policy": pol.ID}
	return e
}

// workspacePolicies reads the workspace's policies, cached while the store
// is unchanged (hotCache).
func (s *Service) workspacePolicies(ctx context.Context, ws string) ([]*store.Policy, error) {
	gen, cacheable := s.gen()
	if cacheable {
		if v, ok := s.hot.policies.Load(ws); ok {
			if e := v.(*policyEntry); e.gen == gen {
				return e.list, nil
			}
		}
	}
	var list []*store.Policy
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		list, err = tx.Policies(ws)
		return err
	})
	if err == nil && cacheable {
		s.hot.policies.Store(ws, &policyEntry{gen: gen, list: list})
	}
	return list, err
}

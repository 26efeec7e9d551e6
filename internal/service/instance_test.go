package service_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// An instance's member: a workspace named but missing is created, an id
// must exist, and the account is found again (not duplicated) by later
// starts, in the workspace the instance names.
func TestEnsureInstanceMember(t *testing.T) {
	e := newEnv(t)
	m, err := e.svc.EnsureInstanceMember(ctx, "default", "default")
	noErr(t, "first start", err)
	if !m.WorkspaceCreated || !m.AccountCreated || m.Account.Instance != "default" || m.Account.Name != "instance default" ||
		m.Account.Workspace != m.Workspace || m.Account.CreatedBy != "config" {
		t.Fatalf("first start: %+v %+v", m, m.Account)
	}
	again, err := e.svc.EnsureInstanceMember(ctx, "default", "default")
	noErr(t, "second start", err)
	if again.WorkspaceCreated || again.AccountCreated || again.Workspace != m.Workspace || again.Account.ID != m.Account.ID {
		t.Fatalf("second start: %+v %+v", again, again.Account)
	}
	// By id: the same workspace, the same account.
	byID, err := e.svc.EnsureInstanceMember(ctx, m.Workspace, "default")
	noErr(t, "by id", err)
	if byID.Account.ID != m.Account.ID {
		t.Fatalf("by id: %+v", byID.Account)
	}
	// Another instance of the workspace has its own account.
	other, err := e.svc.EnsureInstanceMember(ctx, "default", "review")
	noErr(t, "another instance", err)
	if !other.AccountCreated || other.Account.ID == m.Account.ID || other.Account.Instance != "review" {
		t.Fatalf("another instance: %+v", other.Account)
	}
	// An id no workspace has is an error naming it, and creates nothing.
	_, err = e.svc.EnsureInstanceMember(ctx, "wrk_doesnotexist", "default")
	if err == nil || !strings.Contains(err.Error(), "wrk_doesnotexist") {
		t.Fatalf("missing id: %v", err)
	}
	// A name that is not a valid workspace name is refused.
	_, err = e.svc.EnsureInstanceMember(ctx, "   ", "default")
	wantErr(t, "blank name", err, http.StatusBadRequest, "InvalidRequest")
	_, err = e.svc.EnsureInstanceMember(ctx, "default", "")
	wantErr(t, "no instance name", err, http.StatusBadRequest, "InvalidRequest")

	// Deleted in the Console: the principal is refused at once with the
	// cause; the next start creates a new account.
	op := service.Operator(m.Workspace)
	if _, err := e.svc.InstancePrincipal(ctx, m.Workspace, m.Account.ID, "default"); err != nil {
		t.Fatal(err)
	}
	noErr(t, "delete", e.svc.DeleteServiceAccount(ctx, op, m.Account.ID))
	_, err = e.svc.InstancePrincipal(ctx, m.Workspace, m.Account.ID, "default")
	wantErr(t, "deleted account", err, http.StatusUnauthorized, "Unauthorized")
	if !strings.Contains(err.Error(), m.Account.ID) || !strings.Contains(err.Error(), "was deleted") {
		t.Fatalf("deleted account: %v", err)
	}
	// Another workspace's account is not the instance's member here.
	_, err = e.svc.InstancePrincipal(ctx, m.Workspace, other.Account.ID+"x", "default")
	wantErr(t, "unknown account", err, http.StatusUnauthorized, "Unauthorized")
	renewed, err := e.svc.EnsureInstanceMember(ctx, "default", "default")
	noErr(t, "restart after the deletion", err)
	if !renewed.AccountCreated || renewed.Account.ID == m.Account.ID {
		t.Fatalf("restart after the deletion: %+v", renewed.Account)
	}
	p, err := e.svc.InstancePrincipal(ctx, renewed.Workspace, renewed.Account.ID, "default")
	noErr(t, "renewed principal", err)
	if p.Kind != service.KindServiceKey || p.MemberID() != renewed.Account.ID || p.Instance != "default" || p.KeyID != "" {
		t.Fatalf("principal %+v", p)
	}
	// A deleted workspace: refused too.
	noErr(t, "delete workspace", e.svc.DeleteWorkspace(ctx, renewed.Workspace))
	_, err = e.svc.InstancePrincipal(ctx, renewed.Workspace, renewed.Account.ID, "default")
	wantErr(t, "deleted workspace", err, http.StatusUnauthorized, "Unauthorized")
}

// The instance's models: the workspace's models with an enabled target,
// by id, with the first target's limits, prices and capabilities and the
// format its kind speaks; a model a policy refuses to the instance's
// account carries the refusal.
func TestInstanceModels(t *testing.T) {
	e := newEnv(t)
	m, err := e.svc.EnsureInstanceMember(ctx, "acme", "default")
	noErr(t, "member", err)
	op := service.Operator(m.Workspace)
	list, err := e.svc.InstanceModels(ctx, m.Workspace, m.Account.ID, "default")
	if err != nil || len(list) != 0 {
		t.Fatalf("no models: %v %v", list, err)
	}
	cacheRead := money.Micros(250_000)
	oa, err := e.svc.CreateConnection(ctx, op, connInput(store.KindOpenAI, map[string]service.ModelInput{
		"gpt-4o": {Pricing: &store.Pricing{Input: 2_500_000, Output: 10_000_000, CacheRead: &cacheRead}, Limit: &service.LimitInput{Context: ip(200_000), Output: ip(16_000)}},
		"off":    {Enabled: bp(false)}}))
	noErr(t, "openai", err)
	an, err := e.svc.CreateConnection(ctx, op, connInput(store.KindAnthropic, map[string]service.ModelInput{"claude": {Pricing: price(3, 15)}}))
	noErr(t, "anthropic", err)
	for _, wm := range []service.WorkspaceModelInput{
		{ID: "smart", Name: "Smart", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "gpt-4o"})},
		{ID: "claude", Targets: targets(store.ModelTarget{Connection: an.ID, Model: "claude"}, store.ModelTarget{Connection: oa.ID, Model: "gpt-4o", Order: 1})},
		{ID: "dark", Targets: targets(store.ModelTarget{Connection: oa.ID, Model: "off"})},
	} {
		_, err := e.svc.CreateWorkspaceModel(ctx, op, wm)
		noErr(t, "model "+wm.ID, err)
	}
	_, err = e.svc.CreatePolicy(ctx, op, service.PolicyInput{Name: "no claude for the agent", Effect: "deny", Models: []string{"claude*"},
		ServiceAccounts: []string{m.Account.ID}})
	noErr(t, "policy", err)
	list, err = e.svc.InstanceModels(ctx, m.Workspace, m.Account.ID, "default")
	noErr(t, "models", err)
	if len(list) != 2 || list[0].ID != "claude" || list[1].ID != "smart" {
		t.Fatalf("models %+v", list)
	}
	c, s := list[0], list[1]
	if c.Format != "anthropic" || !strings.Contains(c.Denied, "no claude for the agent") || c.Cost.Input != 3*money.Scale {
		t.Fatalf("claude %+v", c)
	}
	if s.Format != "chat" || s.Denied != "" || s.Name != "Smart" || s.Limit.Context != 200_000 || s.Limit.Output != 16_000 ||
		s.Cost.Input != 2_500_000 || s.Cost.Output != 10_000_000 || s.Cost.CacheRead != cacheRead || s.Cost.CacheWrite != 2_500_000 || !s.ToolCall ||
		s.Pricing.CacheRead == nil || *s.Pricing.CacheRead != cacheRead || s.Pricing.CacheWrite != nil {
		t.Fatalf("smart %+v", s)
	}
	// The policy applies to the instance's account only: another
	// instance of the workspace may use claude.
	o, err := e.svc.EnsureInstanceMember(ctx, "acme", "other")
	noErr(t, "other member", err)
	list, err = e.svc.InstanceModels(ctx, o.Workspace, o.Account.ID, "other")
	if err != nil || len(list) != 2 || list[0].Denied != "" {
		t.Fatalf("other instance: %+v %v", list, err)
	}
	// A removed model is gone from the next list.
	noErr(t, "remove", e.svc.DeleteWorkspaceModel(ctx, op, "smart"))
	list, err = e.svc.InstanceModels(ctx, m.Workspace, m.Account.ID, "default")
	if err != nil || len(list) != 1 || list[0].ID != "claude" {
		t.Fatalf("after the removal: %+v %v", list, err)
	}
}

package service_test

import (
	"net/http"
	"testing"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "anything/at-all", true}, {"claude-*", "claude-opus-4", true}, {"claude-*", "gpt-4o", false},
		{"*-mini", "gpt-4o-mini", true}, {"gpt-?o", "gpt-4o", true}, {"gpt-?o", "gpt-40o", false},
		{"meta-llama/*", "meta-llama/Llama-3", true}, {"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false},
		{"exact", "exact", true}, {"exact", "exactly", false}, {"", "", true}, {"**", "x", true},
	} {
		if got := service.Glob(c.pattern, c.s); got != c.want {
			t.Errorf("Glob(%q, %q) = %v", c.pattern, c.s, got)
		}
	}
}

func TestPolicies(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other")
	admin := e.principal(f.adminTok, "")
	mk := func(in service.PolicyInput) *store.Policy {
		t.Helper()
		p, err := e.svc.CreatePolicy(ctx, admin, in)
		noErr(t, "CreatePolicy "+in.Name, err)
		return p
	}
	// Bad input, each refused.
	for _, c := range []struct {
		what string
		in   service.PolicyInput
	}{
		{"no effect", service.PolicyInput{Name: "x", Models: []string{"*"}}},
		{"unknown effect", service.PolicyInput{Name: "x", Effect: "maybe", Models: []string{"*"}}},
		{"no models", service.PolicyInput{Name: "x", Effect: "deny"}},
		{"no name", service.PolicyInput{Effect: "deny", Models: []string{"*"}}},
		{"unknown role", service.PolicyInput{Name: "x", Effect: "deny", Models: []string{"*"}, Roles: []string{"god"}}},
		{"another workspace's service account", service.PolicyInput{Name: "x", Effect: "deny", Models: []string{"*"}, ServiceAccounts: []string{other.sa}}},
		{"another workspace's key", service.PolicyInput{Name: "x", Effect: "deny", Models: []string{"*"}, Keys: []string{other.inference.ID}}},
		{"limit without per", service.PolicyInput{Name: "x", Effect: "limit", Models: []string{"*"}, RequestsPerMinute: 5}},
		{"limit without bounds", service.PolicyInput{Name: "x", Effect: "limit", Models: []string{"*"}, Per: "key"}},
		{"negative limit", service.PolicyInput{Name: "x", Effect: "limit", Models: []string{"*"}, Per: "key", RequestsPerMinute: -1}},
		{"absurd limit", service.PolicyInput{Name: "x", Effect: "limit", Models: []string{"*"}, Per: "key", TokensPerMinute: 1 << 40}},
		{"deny with a limit", service.PolicyInput{Name: "x", Effect: "deny", Models: []string{"*"}, RequestsPerMinute: 5}},
	} {
		_, err := e.svc.CreatePolicy(ctx, admin, c.in)
		wantErr(t, c.what, err, http.StatusBadRequest, "InvalidRequest")
	}
	_, err := e.svc.CreatePolicy(ctx, e.principal(f.memberTok, ""), service.PolicyInput{Name: "x", Effect: "deny", Models: []string{"*"}})
	wantErr(t, "member creates", err, http.StatusForbidden, "Forbidden")

	member, key := e.principal(f.memberTok, ""), e.principal(f.inference.Key, "")
	// Nothing set: everything allowed, no quota.
	if q, err := e.svc.CheckPolicies(ctx, member, "claude-opus"); err != nil || len(q) != 0 {
		t.Fatalf("no policies: %v %v", q, err)
	}
	deny := mk(service.PolicyInput{Name: "no opus for members", Effect: "deny", Models: []string{"claude-opus*"}, Roles: []string{"member"}})
	_, err = e.svc.CheckPolicies(ctx, member, "claude-opus-4")
	wantErr(t, "member asks for opus", err, http.StatusForbidden, "PolicyDenied")
	if _, err := e.svc.CheckPolicies(ctx, e.principal(f.adminTok, ""), "claude-opus-4"); err != nil {
		t.Fatalf("the deny applies to members only: %v", err)
	}
	if _, err := e.svc.CheckPolicies(ctx, key, "claude-opus-4"); err != nil {
		t.Fatalf("a key is not a member: %v", err)
	}
	// An allow statement for the service account narrows it to its models.
	mk(service.PolicyInput{Name: "ci uses mini", Effect: "allow", Models: []string{"*-mini"}, ServiceAccounts: []string{f.sa}})
	if _, err := e.svc.CheckPolicies(ctx, key, "gpt-4o-mini"); err != nil {
		t.Fatalf("allowed model: %v", err)
	}
	_, err = e.svc.CheckPolicies(ctx, key, "gpt-4o")
	wantErr(t, "model outside the allow list", err, http.StatusForbidden, "PolicyDenied")
	// Limits: per key, member or workspace, only for matching models.
	lim := mk(service.PolicyInput{Name: "rpm", Effect: "limit", Models: []string{"gpt-*"}, Per: "member", RequestsPerMinute: 10, TokensPerMinute: 5000})
	q, err := e.svc.CheckPolicies(ctx, key, "gpt-4o-mini")
	noErr(t, "quota", err)
	if len(q) != 1 || q[0].Policy.ID != lim.ID || q[0].Limit.Requests != 10 || q[0].Limit.Tokens != 5000 || q[0].Key != lim.ID+"\x00"+f.sa {
		t.Fatalf("quotas %+v", q)
	}
	// Replace and delete take effect at once (the cached list is dropped).
	_, err = e.svc.ReplacePolicy(ctx, admin, deny.ID, service.PolicyInput{Name: "no opus", Effect: "deny", Models: []string{"claude-opus*"}, Roles: []string{"admin"}})
	noErr(t, "ReplacePolicy", err)
	if _, err := e.svc.CheckPolicies(ctx, member, "claude-opus-4"); err != nil {
		t.Fatalf("after replace, the member may: %v", err)
	}
	noErr(t, "DeletePolicy", e.svc.DeletePolicy(ctx, admin, lim.ID))
	wantErr(t, "delete twice", e.svc.DeletePolicy(ctx, admin, lim.ID), http.StatusNotFound, "PolicyNotFound")
	if q, _ := e.svc.CheckPolicies(ctx, key, "gpt-4o-mini"); len(q) != 0 {
		t.Fatalf("deleted limit still counts: %+v", q)
	}
	list, err := e.svc.Policies(ctx, admin)
	noErr(t, "Policies", err)
	if len(list) != 2 {
		t.Fatalf("%d policies", len(list))
	}
}

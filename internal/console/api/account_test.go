package api_test

import (
	"encoding/json"
	"testing"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// The account routes the released OpenCode CLI calls after its console
// login: who signed in and their workspaces (no x-org-id needed), then the
// V1 config of the workspace it picked.
func TestAccountRoutes(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("beta")
	// The owner of acme is also a member of beta.
	if _, err := e.svc.AddMember(ctx, service.Operator(other.ws), service.NewMember{PersonID: f.owner, Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	r := e.do(req{method: "GET", path: "/api/user", cred: f.unbTok})
	if r.status != 200 || r.json["id"] != f.owner || r.json["email"] == "" {
		t.Fatalf("/api/user: %d %s", r.status, r.raw)
	}
	r = e.do(req{method: "GET", path: "/api/orgs", cred: f.unbTok})
	var orgs []service.OrgView
	if r.status != 200 || json.Unmarshal([]byte(r.raw), &orgs) != nil || len(orgs) != 2 {
		t.Fatalf("/api/orgs unbound: %d %s", r.status, r.raw)
	}
	// A sign-in bound to one workspace sees only it.
	r = e.do(req{method: "GET", path: "/api/orgs", cred: f.ownTok})
	if json.Unmarshal([]byte(r.raw), &orgs) != nil || len(orgs) != 1 || orgs[0].ID != f.ws || orgs[0].Name != "acme" {
		t.Fatalf("/api/orgs bound: %d %s", r.status, r.raw)
	}
	// Keys have no account; a bad token is 401.
	if r := e.do(req{method: "GET", path: "/api/user", cred: f.all}); r.status != 403 {
		t.Fatalf("/api/user with a key: %d %s", r.status, r.raw)
	}
	if r := e.do(req{method: "GET", path: "/api/orgs", cred: "ag_at_nope"}); r.status != 401 {
		t.Fatalf("/api/orgs with a bad token: %d %s", r.status, r.raw)
	}

	// The V1 config: the workspace's providers with the Console token as
	// their credential.
	conn := e.connection(f.ws, store.KindAnthropic, map[string]service.ModelInput{"claude": {Limit: &service.LimitInput{Output: ptr(int64(4000))}}})
	if r := e.do(req{method: "GET", path: "/api/config", cred: f.unbTok}); r.status != 400 || r.json["_tag"] != "OrgRequired" {
		t.Fatalf("/api/config without x-org-id: %d %s", r.status, r.raw)
	}
	r = e.do(req{method: "GET", path: "/api/config", cred: f.unbTok, org: f.ws})
	var v1 struct {
		Config service.V1Config `json:"config"`
	}
	if r.status != 200 || json.Unmarshal([]byte(r.raw), &v1) != nil {
		t.Fatalf("/api/config: %d %s", r.status, r.raw)
	}
	p, ok := v1.Config.Provider[conn]
	if !ok || p.NPM != "@ai-sdk/anthropic" || p.Options.APIKey != "{env:OPENCODE_CONSOLE_TOKEN}" || p.Options.Headers["x-org-id"] != f.ws ||
		p.Models["claude"].Limit.Output != 4000 || p.Options.BaseURL == "" {
		t.Fatalf("V1 provider %+v", p)
	}
}

func ptr[T any](v T) *T { return &v }

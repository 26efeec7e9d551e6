package api_test

import (
	"fmt"
	"net/url"
	"slices"
	"testing"

	"github.com/agentgate/agentgate/internal/console/api"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// TestHTTPPermissionMatrix calls one representative route per implemented
// row of the permission matrix with every credential kind and checks 2xx
// against 403, and that the refused calls changed nothing.
func TestHTTPPermissionMatrix(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	conn := e.connection(f.ws, store.KindOpenAICompatible, nil)

	type route struct {
		row    string
		method string
		path   func(i int) string
		body   func(i int) string
		ok     int
		allow  [5]bool // inference key, all key, member, admin, owner
	}
	routes := []route{
		{"read config", "GET", func(int) string { return "/api/v2/config" }, nil, 200,
			[5]bool{true, true, true, true, true}},
		{"manage connections", "POST", func(int) string { return "/api/v1/connections" },
			func(i int) string {
				return fmt.Sprintf(`{"name": "c%d", "kind": "openai", "base_url": "https://api.openai.com/v1", "credential": "sk-%d"}`, i, i)
			}, 201,
			[5]bool{false, true, false, true, true}},
		{"manage models", "PUT", func(i int) string {
			return "/api/v1/connections/" + conn + "/models/" + url.PathEscape(fmt.Sprintf("org/model-%d", i))
		}, func(int) string { return `{"enabled": true}` }, 200,
			[5]bool{false, false, false, true, true}},
		{"manage service accounts", "POST", func(int) string { return "/api/v1/service-accounts" },
			func(i int) string { return fmt.Sprintf(`{"name": "sa %d"}`, i) }, 201,
			[5]bool{false, false, false, true, true}},
		{"create keys", "POST", func(int) string { return "/api/v1/service-accounts/" + f.sa + "/keys" },
			func(int) string { return `{"name": "k", "permission": "inference"}` }, 201,
			[5]bool{false, false, false, true, true}},
		{"manage members", "POST", func(int) string { return "/api/v1/members" },
			func(int) string { return fmt.Sprintf(`{"person_id": %q, "role": "member"}`, e.person()) }, 201,
			[5]bool{false, false, false, true, true}},
	}
	for _, rt := range routes {
		for i, k := range f.kinds() {
			body := ""
			if rt.body != nil {
				body = rt.body(i)
			}
			r := e.do(req{method: rt.method, path: rt.path(i), cred: k.cred, body: body})
			what := rt.row + " (" + rt.method + " " + rt.path(i) + ") by " + k.name
			if rt.allow[i] {
				wantStatus(t, what, r, rt.ok, "")
			} else {
				wantStatus(t, what, r, 403, "Forbidden")
			}
		}
	}

	// The refused calls changed nothing: count what the allowed ones made.
	op := service.Operator(f.ws)
	cs, _ := e.svc.Connections(ctx, op)
	sas, _ := e.svc.ServiceAccounts(ctx, op)
	keys, _ := e.svc.Keys(ctx, op, f.sa)
	ms, _ := e.svc.Members(ctx, op)
	cv, _ := e.svc.Connection(ctx, op, conn)
	for what, c := range map[string][2]int{
		"connections":      {len(cs), 1 + 3},
		"service accounts": {len(sas), 1 + 2},
		"keys":             {len(keys), 2 + 2},
		"members":          {len(ms), 3 + 2},
		"models":           {len(cv.Models), 2},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: %d, want %d", what, c[0], c[1])
		}
	}
}

// TestHTTPAdminsAndOwners: admins manage members but not owners.
func TestHTTPAdminsAndOwners(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	r := e.do(req{method: "PATCH", path: "/api/v1/members/" + f.owner, cred: f.adminTok, body: `{"role": "member"}`})
	wantStatus(t, "admin demotes the owner", r, 403, "Forbidden")
	r = e.do(req{method: "DELETE", path: "/api/v1/members/" + f.owner, cred: f.adminTok})
	wantStatus(t, "admin removes the owner", r, 403, "Forbidden")
	r = e.do(req{method: "PATCH", path: "/api/v1/members/" + f.member, cred: f.adminTok, body: `{"role": "owner"}`})
	wantStatus(t, "admin makes an owner", r, 403, "Forbidden")
	r = e.do(req{method: "PATCH", path: "/api/v1/members/" + f.owner, cred: f.ownTok, body: `{"role": "admin"}`})
	wantStatus(t, "last owner demotes themself", r, 409, "Conflict")
	r = e.do(req{method: "DELETE", path: "/api/v1/members/" + f.owner, cred: f.ownTok})
	wantStatus(t, "last owner leaves", r, 409, "Conflict")
	r = e.do(req{method: "PATCH", path: "/api/v1/members/" + f.member, cred: f.adminTok, body: `{"role": "admin"}`})
	wantStatus(t, "admin promotes a member to admin", r, 200, "")
	if r.data()["role"] != "admin" || r.data()["member_id"] != f.member {
		t.Fatalf("PATCH answer %s", r.raw)
	}
	r = e.do(req{method: "POST", path: "/api/v1/members", cred: f.ownTok, body: fmt.Sprintf(`{"person_id": %q, "role": "owner"}`, f.member)})
	wantStatus(t, "adding an existing member", r, 409, "Conflict")
	r = e.do(req{method: "DELETE", path: "/api/v1/members/" + f.member, cred: f.ownTok})
	wantStatus(t, "owner removes a member", r, 204, "")
	r = e.do(req{method: "GET", path: "/api/v2/config", cred: f.memberTok})
	wantStatus(t, "removed member's bound token", r, 401, "Unauthorized")
	r = e.do(req{method: "GET", path: "/api/v1/members", cred: f.ownTok})
	wantStatus(t, "list members", r, 200, "")
	if n := len(r.list()); n != 2 {
		t.Fatalf("%d members after removal: %s", n, r.raw)
	}
}

// TestHTTPPermissionsEveryRoute walks the route table: every route
// declares a row of the permission matrix, has a case below (a route
// without one fails), and answers 403 exactly to the credentials the
// matrix refuses for that row, whatever the body.
func TestHTTPPermissionsEveryRoute(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	conn := e.connection(f.ws, store.KindOpenAICompatible, nil)
	on := true
	withModel := func() string {
		return e.connection(f.ws, store.KindOpenAICompatible, map[string]service.ModelInput{"m": {Enabled: &on}})
	}
	newKey := func() string {
		k, err := e.svc.CreateKey(ctx, service.Operator(f.ws), f.sa, service.NewKey{Name: "k", Permission: store.PermissionInference})
		if err != nil {
			t.Fatal(err)
		}
		return k.ID
	}
	fixed := func(s string) func(int) string { return func(int) string { return s } }
	const wmodel = "routed"
	pol, err := e.svc.CreatePolicy(ctx, service.Operator(f.ws), service.PolicyInput{Name: "kept", Effect: "deny", Models: []string{"nothing-*"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateWorkspaceModel(ctx, service.Operator(f.ws), service.WorkspaceModelInput{ID: wmodel,
		Targets: []store.ModelTarget{{Connection: withModel(), Model: "m"}}}); err != nil {
		t.Fatal(err)
	}

	// Who may: inference key, all key, member, admin, owner.
	var (
		everyone   = [5]bool{true, true, true, true, true}
		spend      = [5]bool{false, true, true, true, true}
		allKey     = [5]bool{false, true, false, true, true}
		people     = [5]bool{false, false, false, true, true}
		ownSignIns = [5]bool{false, false, true, true, true}
		owners     = [5]bool{false, false, false, false, true}
	)
	type tcase struct {
		path  func(i int) string
		body  func(i int) string
		ok    int
		allow [5]bool
	}
	cases := map[string]tcase{
		"GET /api/v2/config":                     {fixed("/api/v2/config"), nil, 200, everyone},
		"GET /api/config":                        {fixed("/api/config"), nil, 200, everyone},
		"GET /api/user":                          {fixed("/api/user"), nil, 200, ownSignIns},
		"GET /api/orgs":                          {fixed("/api/orgs"), nil, 200, ownSignIns},
		"GET /api/v1/workspace":                  {fixed("/api/v1/workspace"), nil, 200, everyone},
		"GET /api/v1/service-accounts":           {fixed("/api/v1/service-accounts"), nil, 200, people},
		"POST /api/v1/service-accounts":          {fixed("/api/v1/service-accounts"), fixed(`{"name": "sa"}`), 201, people},
		"GET /api/v1/service-accounts/{sa}":      {fixed("/api/v1/service-accounts/" + f.sa), nil, 200, people},
		"DELETE /api/v1/service-accounts/{sa}":   {func(int) string { return "/api/v1/service-accounts/" + e.serviceAccount(f.ws) }, nil, 204, people},
		"GET /api/v1/service-accounts/{sa}/keys": {fixed("/api/v1/service-accounts/" + f.sa + "/keys"), nil, 200, people},
		"POST /api/v1/service-accounts/{sa}/keys": {fixed("/api/v1/service-accounts/" + f.sa + "/keys"),
			fixed(`{"name": "k", "permission": "inference"}`), 201, people},
		"DELETE /api/v1/service-accounts/{sa}/keys/{key}": {func(int) string { return "/api/v1/service-accounts/" + f.sa + "/keys/" + newKey() }, nil, 204, people},
		"GET /api/v1/members":                             {fixed("/api/v1/members"), nil, 200, people},
		"POST /api/v1/members": {fixed("/api/v1/members"),
			func(int) string { return fmt.Sprintf(`{"person_id": %q, "role": "member"}`, e.person()) }, 201, people},
		"PATCH /api/v1/members/{member}": {func(int) string { return "/api/v1/members/" + e.person(f.ws, store.RoleMember) },
			fixed(`{"role": "admin"}`), 200, people},
		"DELETE /api/v1/members/{member}": {func(int) string { return "/api/v1/members/" + e.person(f.ws, store.RoleMember) }, nil, 204, people},
		"GET /api/v1/connections":         {fixed("/api/v1/connections"), nil, 200, allKey},
		"POST /api/v1/connections": {fixed("/api/v1/connections"),
			fixed(`{"name": "c", "kind": "openai", "base_url": "https://api.openai.com/v1", "credential": "sk-x"}`), 201, allKey},
		"GET /api/v1/connections/{conn}":       {fixed("/api/v1/connections/" + conn), nil, 200, allKey},
		"PATCH /api/v1/connections/{conn}":     {fixed("/api/v1/connections/" + conn), fixed(`{"name": "renamed"}`), 200, allKey},
		"GET /api/v1/connections/{conn}/audit": {fixed("/api/v1/connections/" + conn + "/audit"), nil, 200, owners},
		"DELETE /api/v1/connections/{conn}":    {func(int) string { return "/api/v1/connections/" + e.connection(f.ws, store.KindOpenAICompatible, nil) }, nil, 204, allKey},
		"PUT /api/v1/connections/{conn}/models/{model}": {func(i int) string { return fmt.Sprintf("/api/v1/connections/%s/models/m%d", conn, i) },
			fixed(`{"enabled": true}`), 200, people},
		"DELETE /api/v1/connections/{conn}/models/{model}": {func(int) string { return "/api/v1/connections/" + withModel() + "/models/m" }, nil, 200, people},
		"PUT /api/v1/connections/{conn}/models/{model}/pricing": {func(int) string { return "/api/v1/connections/" + withModel() + "/models/m/pricing" },
			fixed(`{"input": 0.5, "output": 1.25}`), 200, allKey},
		"GET /api/v1/models": {fixed("/api/v1/models"), nil, 200, people},
		"POST /api/v1/models": {fixed("/api/v1/models"),
			func(i int) string {
				return fmt.Sprintf(`{"id": "new-%d", "targets": [{"connection": %q, "model": "m"}]}`, i, withModel())
			}, 201, people},
		"GET /api/v1/models/{wmodel}": {fixed("/api/v1/models/" + wmodel), nil, 200, people},
		"PUT /api/v1/models/{wmodel}": {fixed("/api/v1/models/" + wmodel),
			func(int) string {
				return fmt.Sprintf(`{"name": "Renamed", "targets": [{"connection": %q, "model": "m"}]}`, withModel())
			}, 200, people},
		"DELETE /api/v1/models/{wmodel}": {func(i int) string {
			id := fmt.Sprintf("gone-%d", i)
			if _, err := e.svc.CreateWorkspaceModel(ctx, service.Operator(f.ws), service.WorkspaceModelInput{ID: id,
				Targets: []store.ModelTarget{{Connection: withModel(), Model: "m"}}}); err != nil {
				t.Fatal(err)
			}
			return "/api/v1/models/" + id
		}, nil, 204, people},
		"GET /api/v1/policies":          {fixed("/api/v1/policies"), nil, 200, people},
		"POST /api/v1/policies":         {fixed("/api/v1/policies"), fixed(`{"name": "p", "effect": "deny", "models": ["x-*"]}`), 201, people},
		"GET /api/v1/policies/{policy}": {fixed("/api/v1/policies/" + pol.ID), nil, 200, people},
		"PUT /api/v1/policies/{policy}": {fixed("/api/v1/policies/" + pol.ID), fixed(`{"name": "p2", "effect": "deny", "models": ["y-*"]}`), 200, people},
		"DELETE /api/v1/policies/{policy}": {func(i int) string {
			p, err := e.svc.CreatePolicy(ctx, service.Operator(f.ws), service.PolicyInput{Name: "gone", Effect: "deny", Models: []string{"z"}})
			if err != nil {
				t.Fatal(err)
			}
			return "/api/v1/policies/" + p.ID
		}, nil, 204, people},
		"GET /api/v1/websearch":            {fixed("/api/v1/websearch"), nil, 200, everyone},
		"PUT /api/v1/websearch":            {fixed("/api/v1/websearch"), fixed(`{"connection": ""}`), 200, allKey},
		"GET /api/v1/claude-code/settings": {fixed("/api/v1/claude-code/settings"), nil, 200, everyone},
		"PUT /api/v1/claude-code/settings": {fixed("/api/v1/claude-code/settings"),
			func(i int) string { return fmt.Sprintf(`{"permissions": {"deny": ["Bash(rm -rf /%d)"]}}`, i) }, 200, owners},
		"GET /api/v1/claude-code/settings/history": {fixed("/api/v1/claude-code/settings/history"), nil, 200, owners},
		"GET /api/v1/sign-ins":                     {fixed("/api/v1/sign-ins"), nil, 200, ownSignIns},
		"DELETE /api/v1/sign-ins/{signin}": {func(i int) string {
			// Each person revokes a sign-in of their own, not the one in use.
			persons := map[int]string{2: f.member, 3: f.admin, 4: f.owner}
			pid := persons[i]
			if pid == "" {
				pid = f.member
			}
			tok, err := e.svc.IssuePersonToken(ctx, pid, f.ws, "spare")
			if err != nil {
				t.Fatal(err)
			}
			return "/api/v1/sign-ins/" + tok.FamilyID
		}, nil, 204, ownSignIns},
		"GET /api/v1/budgets/members": {fixed("/api/v1/budgets/members"), nil, 200, spend},
		"PUT /api/v1/budgets/members/{member}": {fixed("/api/v1/budgets/members/" + f.member),
			fixed(`{"limit_usd": 10, "period": "monthly"}`), 200, allKey},
		"GET /api/v1/usage":    {fixed("/api/v1/usage"), nil, 200, spend},
		"GET /api/oauth/usage": {fixed("/api/oauth/usage"), nil, 200, spend},
	}

	var principals []*service.Principal
	for _, k := range f.kinds() {
		p, err := e.svc.Authenticate(ctx, k.cred, "")
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		principals = append(principals, p)
	}
	routes := api.New(api.Options{}).Routes()
	walked := map[string]bool{}
	for _, rt := range routes {
		name := rt.Method + " " + rt.Path
		walked[name] = true
		if !slices.Contains(service.Ops, rt.Op) {
			t.Errorf("%s: permission %d is not a row of the matrix", name, rt.Op)
			continue
		}
		c, ok := cases[name]
		if !ok {
			t.Errorf("%s (%s): no case in the permission walk", name, rt.Op)
			continue
		}
		for i, k := range f.kinds() {
			if want := service.Check(principals[i], rt.Op) != service.Deny; want != c.allow[i] {
				t.Errorf("%s by %s: the route's permission (%s) allows: %v, the case: %v", name, k.name, rt.Op, want, c.allow[i])
			}
			body := ""
			if c.body != nil {
				body = c.body(i)
			}
			path := c.path(i)
			r := e.do(req{method: rt.Method, path: path, cred: k.cred, body: body})
			what := name + " (" + path + ") by " + k.name
			if c.allow[i] {
				wantStatus(t, what, r, c.ok, "")
			} else {
				wantStatus(t, what, r, 403, "Forbidden")
				// Refused before the body is read: a bad body is still 403.
				if body != "" {
					wantStatus(t, what+" with a bad body", e.do(req{method: rt.Method, path: path, cred: k.cred, body: `{"nope": 1}`}), 403, "Forbidden")
				}
			}
		}
	}
	for name := range cases {
		if !walked[name] {
			t.Errorf("case %s is not a route of the table", name)
		}
	}
}

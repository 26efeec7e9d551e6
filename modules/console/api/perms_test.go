package api_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/modules/store"
)

// TestHTTPPermissionMatrix calls one representative route per implemented
// row of the §3 matrix with every credential kind and checks 2xx against 403.
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

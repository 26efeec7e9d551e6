package service_test

import (
	"net/http"
	"testing"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// TestPermissionMatrix walks every row of the matrix for every credential
// kind, with principals made by Authenticate from real credentials, and
// compares Check with the expected answer.
func TestPermissionMatrix(t *testing.T) {
	const (
		A = service.Allow
		D = service.Deny
		O = service.OwnOnly
	)
	// Columns: inference key, all key, person member, person admin, person owner.
	matrix := map[service.Op][5]service.Access{
		service.OpInference:             {A, A, A, A, A},
		service.OpReadConfig:            {A, A, A, A, A},
		service.OpReadSpend:             {D, A, O, A, A},
		service.OpManageConnections:     {D, A, D, A, A},
		service.OpManageModels:          {D, D, D, A, A},
		service.OpManageServiceAccounts: {D, D, D, A, A},
		service.OpManageMembers:         {D, D, D, A, A},
		service.OpOwnAccount:            {D, D, A, A, A},
		service.OpReadAudit:             {D, D, D, D, A},
		service.OpManageClaudeCode:      {D, D, D, D, A},
	}
	if len(service.Ops) != len(matrix) {
		t.Fatalf("service.Ops has %d rows, the matrix has %d", len(service.Ops), len(matrix))
	}
	seen := map[service.Op]bool{}
	for _, op := range service.Ops {
		if _, ok := matrix[op]; !ok {
			t.Fatalf("row %v of service.Ops is not in the §3 matrix", op)
		}
		if seen[op] {
			t.Fatalf("row %v listed twice in service.Ops", op)
		}
		seen[op] = true
	}

	e := newEnv(t)
	f := e.fixture("matrix")
	kinds := f.kinds()
	principals := make([]*service.Principal, len(kinds))
	for i, k := range kinds {
		principals[i] = e.principal(k.cred, "")
	}
	// The principals are what the matrix columns say they are.
	wantKind := []struct {
		kind       service.Kind
		permission string
		role       string
	}{
		{service.KindServiceKey, store.PermissionInference, ""},
		{service.KindServiceKey, store.PermissionAll, ""},
		{service.KindPerson, "", store.RoleMember},
		{service.KindPerson, "", store.RoleAdmin},
		{service.KindPerson, "", store.RoleOwner},
	}
	for i, p := range principals {
		w := wantKind[i]
		if p.Kind != w.kind || p.Permission != w.permission || p.Role != w.role || p.Workspace != f.ws {
			t.Fatalf("%s: principal %+v, want kind %v permission %q role %q in %s", kinds[i].name, p, w.kind, w.permission, w.role, f.ws)
		}
	}

	for _, op := range service.Ops {
		for i, p := range principals {
			want := matrix[op][i]
			t.Run(op.String()+"/"+kinds[i].name, func(t *testing.T) {
				if got := service.Check(p, op); got != want {
					t.Fatalf("Check = %v, want %v", got, want)
				}
				err := service.Require(p, op)
				if want == D {
					wantErr(t, "Require", err, http.StatusForbidden, "Forbidden")
				} else if err != nil {
					t.Fatalf("Require: %v, want nil (Check says %v)", err, want)
				}
			})
		}
		t.Run(op.String()+"/operator", func(t *testing.T) {
			if got := service.Check(service.Operator(f.ws), op); got != A {
				t.Fatalf("operator: Check = %v, want Allow", got)
			}
			if err := service.Require(service.Operator(f.ws), op); err != nil {
				t.Fatalf("operator: Require: %v", err)
			}
		})
	}

	// A principal of no known kind, or a person without a known role, gets
	// nothing beyond what every person has.
	for _, op := range service.Ops {
		if got := service.Check(&service.Principal{Workspace: f.ws}, op); got != D {
			t.Fatalf("zero principal, %v: Check = %v, want Deny", op, got)
		}
		if op == service.OpInference || op == service.OpReadConfig || op == service.OpOwnAccount {
			continue
		}
		if got := service.Check(&service.Principal{Kind: service.KindPerson, Workspace: f.ws, Role: "superuser"}, op); got == A {
			t.Fatalf("person with unknown role, %v: Check = Allow", op)
		}
		if got := service.Check(&service.Principal{Kind: service.KindServiceKey, Workspace: f.ws, Permission: "admin"}, op); got != D {
			t.Fatalf("key with unknown permission, %v: Check = %v, want Deny", op, got)
		}
	}
}

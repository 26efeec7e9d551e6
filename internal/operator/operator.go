// Package operator is the operator's admin API (served on Caddy's admin
// listener under /agentgate/): bootstrap and automation above workspace
// roles. JSON in, {"data": …} out, _tag errors. Inside a workspace
// ({wrk}) it runs the operations the Console API runs (internal/endpoint)
// as service.Operator(workspace), with its own, shorter answers.
package operator

import (
	"context"
	"net/http"
	"time"

	"github.com/agentgate/agentgate/internal/endpoint"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// API serves the operator routes.
type API struct {
	router *router.Router
}

// New builds the operator API on top of a service getter.
func New(svc func(ctx context.Context) (*service.Service, error)) *API {
	const ws = "/agentgate/workspaces/{wrk}"
	routes := []endpoint.Route{
		endpoint.Shaped("GET", "/agentgate/workspaces", listWorkspaces, http.StatusOK, workspaceViews),
		endpoint.Shaped("POST", "/agentgate/workspaces", createWorkspace, http.StatusCreated, idName(func(w *store.Workspace) (string, string) { return w.ID, w.Name })),
		endpoint.Data("DELETE", ws, deleteWorkspace, http.StatusNoContent),
		endpoint.Shaped("POST", "/agentgate/people", createPerson, http.StatusCreated, func(p *store.Person) map[string]any {
			return map[string]any{"id": p.ID, "email": p.Email, "name": p.Name}
		}),
		endpoint.Data("POST", "/agentgate/people/{usr}/tokens", issueToken, http.StatusCreated),
		endpoint.Shaped("GET", ws+"/members", endpoint.Members, http.StatusOK, orEmpty[service.MemberView]),
		endpoint.Shaped("POST", ws+"/members", endpoint.AddMember, http.StatusCreated, func(m *service.MemberView) map[string]any {
			return map[string]any{"member_id": m.MemberID, "role": m.Role}
		}),
		endpoint.Shaped("GET", ws+"/service-accounts", endpoint.ServiceAccounts, http.StatusOK, func(sas []*store.ServiceAccount) []map[string]any {
			out := make([]map[string]any, 0, len(sas))
			for _, sa := range sas {
				out = append(out, map[string]any{"id": sa.ID, "name": sa.Name})
			}
			return out
		}),
		endpoint.Shaped("POST", ws+"/service-accounts", endpoint.CreateServiceAccount, http.StatusCreated, idName(func(sa *store.ServiceAccount) (string, string) { return sa.ID, sa.Name })),
		endpoint.Shaped("POST", ws+"/service-accounts/{sa}/keys", endpoint.CreateKey, http.StatusCreated, createdKey),
		endpoint.Data("DELETE", ws+"/service-accounts/{sa}/keys/{key}", endpoint.RevokeKey, http.StatusNoContent),
		endpoint.Shaped("GET", ws+"/connections", endpoint.Connections, http.StatusOK, orEmpty[*service.ConnectionView]),
		endpoint.Data("POST", ws+"/connections", endpoint.CreateConnection, http.StatusCreated),
		endpoint.Data("PATCH", ws+"/connections/{conn}", endpoint.UpdateConnection, http.StatusOK),
		endpoint.Shaped("GET", ws+"/connections/{conn}/audit", endpoint.ConnectionAudit, http.StatusOK, orEmpty[*service.ConnectionChangeView]),
		endpoint.Data("PUT", ws+"/connections/{conn}/models/{model}", endpoint.PutModel, http.StatusOK),
		endpoint.Shaped("GET", ws+"/models", endpoint.WorkspaceModels, http.StatusOK, orEmpty[*service.WorkspaceModelView]),
		endpoint.Data("POST", ws+"/models", endpoint.CreateWorkspaceModel, http.StatusCreated),
		endpoint.Data("GET", ws+"/models/{wmodel}", endpoint.WorkspaceModel, http.StatusOK),
		endpoint.Data("PUT", ws+"/models/{wmodel}", endpoint.ReplaceWorkspaceModel, http.StatusOK),
		endpoint.Data("DELETE", ws+"/models/{wmodel}", endpoint.DeleteWorkspaceModel, http.StatusNoContent),
		endpoint.Shaped("GET", ws+"/policies", endpoint.Policies, http.StatusOK, orEmpty[*store.Policy]),
		endpoint.Data("POST", ws+"/policies", endpoint.CreatePolicy, http.StatusCreated),
		endpoint.Data("GET", ws+"/policies/{policy}", endpoint.Policy, http.StatusOK),
		endpoint.Data("PUT", ws+"/policies/{policy}", endpoint.ReplacePolicy, http.StatusOK),
		endpoint.Data("DELETE", ws+"/policies/{policy}", endpoint.DeletePolicy, http.StatusNoContent),
		endpoint.Data("GET", ws+"/claude-code/settings", endpoint.ClaudeCodeSettings, http.StatusOK),
		endpoint.Data("PUT", ws+"/claude-code/settings", endpoint.SetClaudeCodeSettings, http.StatusOK),
		endpoint.Shaped("GET", ws+"/claude-code/settings/history", endpoint.ClaudeCodeSettingsHistory, http.StatusOK, orEmpty[*service.ClaudeCodeChangeView]),
		endpoint.Data("GET", ws+"/budgets", endpoint.Budgets, http.StatusOK),
		endpoint.Data("PUT", ws+"/budgets/{member}", endpoint.SetBudget, http.StatusOK),
	}
	return &API{router: endpoint.Surface{Service: svc, Principal: operatorOf}.Router(routes)}
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

// operatorOf is the principal of a route inside a workspace; the routes
// outside one run the operator's own operations, with no principal.
func operatorOf(_ *http.Request, _ *service.Service, ps router.Params) (*service.Principal, error) {
	if ws, ok := ps["wrk"]; ok {
		return service.Operator(ws), nil
	}
	return nil, nil
}

// The operator's own operations: above every workspace, so no row of the
// permission matrix.
var (
	listWorkspaces = endpoint.Operation[endpoint.NoBody, []*store.Workspace]{Call: func(c *endpoint.Call, _ endpoint.NoBody) ([]*store.Workspace, error) {
		return c.Svc.Workspaces(c.Ctx())
	}}
	createWorkspace = endpoint.Operation[endpoint.NameInput, *store.Workspace]{Call: func(c *endpoint.Call, in endpoint.NameInput) (*store.Workspace, error) {
		return c.Svc.CreateWorkspace(c.Ctx(), in.Name)
	}}
	deleteWorkspace = endpoint.Operation[endpoint.NoBody, endpoint.NoBody]{Call: func(c *endpoint.Call, _ endpoint.NoBody) (endpoint.NoBody, error) {
		return endpoint.NoBody{}, c.Svc.DeleteWorkspace(c.Ctx(), c.Params["wrk"])
	}}
	createPerson = endpoint.Operation[service.NewPerson, *store.Person]{Call: func(c *endpoint.Call, in service.NewPerson) (*store.Person, error) {
		return c.Svc.CreatePerson(c.Ctx(), in)
	}}
	// issueToken mints an access token for a person: how an operator hands
	// a person a Console credential (for the CLI) without web sign-in.
	issueToken = endpoint.Operation[tokenInput, *service.IssuedToken]{Call: func(c *endpoint.Call, in tokenInput) (*service.IssuedToken, error) {
		return c.Svc.IssuePersonToken(c.Ctx(), c.Params["usr"], in.Workspace, "operator")
	}}
)

type tokenInput struct {
	Workspace string `json:"workspace,omitempty"`
}

func workspaceViews(ws []*store.Workspace) []map[string]any {
	out := make([]map[string]any, 0, len(ws))
	for _, x := range ws {
		out = append(out, map[string]any{"id": x.ID, "name": x.Name, "created": x.Created})
	}
	return out
}

// idName answers {"id", "name"}.
func idName[T any](of func(T) (string, string)) func(T) map[string]any {
	return func(v T) map[string]any {
		id, name := of(v)
		return map[string]any{"id": id, "name": name}
	}
}

// orEmpty answers an empty list as [] rather than null.
func orEmpty[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

// createdKey is a new key with its value, as the CLI reads it.
func createdKey(k *service.CreatedKey) any {
	return struct {
		ID         string     `json:"id"`
		Key        string     `json:"key"`
		Name       string     `json:"name"`
		Permission string     `json:"permission"`
		ExpiresAt  *time.Time `json:"expires_at"`
	}{k.ID, k.Key, k.Name, k.Permission, k.ExpiresAt}
}

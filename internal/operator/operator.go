// Package operator is the operator's admin API (served on Caddy's admin
// listener under /agentgate/): bootstrap and automation above workspace
// roles. JSON in, {"data": …} out, _tag errors.
package operator

import (
	"context"
	"net/http"
	"time"

	"github.com/agentgate/agentgate/internal/jsonio"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/service"
)

// API serves the operator routes.
type API struct {
	svc    func(ctx context.Context) (*service.Service, error)
	router *router.Router
}

// New builds the operator API on top of a service getter.
func New(svc func(ctx context.Context) (*service.Service, error)) *API {
	a := &API{svc: svc, router: &router.Router{}}
	rt := a.router
	rt.Handle("GET", "/agentgate/workspaces", a.listWorkspaces)
	rt.Handle("POST", "/agentgate/workspaces", a.createWorkspace)
	rt.Handle("DELETE", "/agentgate/workspaces/{wrk}", a.deleteWorkspace)
	rt.Handle("POST", "/agentgate/people", a.createPerson)
	rt.Handle("POST", "/agentgate/people/{usr}/tokens", a.issueToken)
	rt.Handle("GET", "/agentgate/workspaces/{wrk}/members", a.listMembers)
	rt.Handle("POST", "/agentgate/workspaces/{wrk}/members", a.addMember)
	rt.Handle("GET", "/agentgate/workspaces/{wrk}/service-accounts", a.listServiceAccounts)
	rt.Handle("POST", "/agentgate/workspaces/{wrk}/service-accounts", a.createServiceAccount)
	rt.Handle("POST", "/agentgate/workspaces/{wrk}/service-accounts/{sa}/keys", a.createKey)
	rt.Handle("DELETE", "/agentgate/workspaces/{wrk}/service-accounts/{sa}/keys/{key}", a.revokeKey)
	rt.Handle("GET", "/agentgate/workspaces/{wrk}/connections", a.listConnections)
	rt.Handle("POST", "/agentgate/workspaces/{wrk}/connections", a.createConnection)
	rt.Handle("GET", "/agentgate/workspaces/{wrk}/budgets", a.listBudgets)
	rt.Handle("PUT", "/agentgate/workspaces/{wrk}/budgets/{member}", a.setBudget)
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return jsonio.Decode(w, r, jsonio.DefaultLimit, v)
}

func (a *API) listWorkspaces(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	ws, err := svc.Workspaces(r.Context())
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(ws))
	for _, x := range ws {
		out = append(out, map[string]any{"id": x.ID, "name": x.Name, "created": x.Created})
	}
	jsonio.Write(w, http.StatusOK, out)
	return nil
}

func (a *API) createWorkspace(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &in); err != nil {
		return err
	}
	ws, err := svc.CreateWorkspace(r.Context(), in.Name)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, map[string]any{"id": ws.ID, "name": ws.Name})
	return nil
}

func (a *API) deleteWorkspace(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	if err := svc.DeleteWorkspace(r.Context(), p["wrk"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) createPerson(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in service.NewPerson
	if err := decode(w, r, &in); err != nil {
		return err
	}
	p, err := svc.CreatePerson(r.Context(), in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, map[string]any{"id": p.ID, "email": p.Email, "name": p.Name})
	return nil
}

// issueToken mints an access token for a person: how an operator hands a
// person a Console credential (for the CLI) without web sign-in.
func (a *API) issueToken(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in struct {
		Workspace string `json:"workspace,omitempty"`
	}
	if err := decode(w, r, &in); err != nil {
		return err
	}
	tok, err := svc.IssuePersonToken(r.Context(), p["usr"], in.Workspace, "operator")
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, tok)
	return nil
}

func (a *API) listMembers(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	ms, err := svc.Members(r.Context(), service.Operator(p["wrk"]))
	if err != nil {
		return err
	}
	if ms == nil {
		ms = []service.MemberView{}
	}
	jsonio.Write(w, http.StatusOK, ms)
	return nil
}

func (a *API) addMember(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in service.NewMember
	if err := decode(w, r, &in); err != nil {
		return err
	}
	m, err := svc.AddMember(r.Context(), service.Operator(p["wrk"]), in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, map[string]any{"member_id": m.MemberID, "role": m.Role})
	return nil
}

func (a *API) listServiceAccounts(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	sas, err := svc.ServiceAccounts(r.Context(), service.Operator(p["wrk"]))
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(sas))
	for _, sa := range sas {
		out = append(out, map[string]any{"id": sa.ID, "name": sa.Name})
	}
	jsonio.Write(w, http.StatusOK, out)
	return nil
}

func (a *API) createServiceAccount(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &in); err != nil {
		return err
	}
	sa, err := svc.CreateServiceAccount(r.Context(), service.Operator(p["wrk"]), in.Name)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, map[string]any{"id": sa.ID, "name": sa.Name})
	return nil
}

func (a *API) createKey(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in service.NewKey
	if err := decode(w, r, &in); err != nil {
		return err
	}
	k, err := svc.CreateKey(r.Context(), service.Operator(p["wrk"]), p["sa"], in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, struct {
		ID         string     `json:"id"`
		Key        string     `json:"key"`
		Name       string     `json:"name"`
		Permission string     `json:"permission"`
		ExpiresAt  *time.Time `json:"expires_at"`
	}{k.ID, k.Key, k.Name, k.Permission, k.ExpiresAt})
	return nil
}

func (a *API) revokeKey(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	if err := svc.RevokeKey(r.Context(), service.Operator(p["wrk"]), p["sa"], p["key"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) listConnections(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	cs, err := svc.Connections(r.Context(), service.Operator(p["wrk"]))
	if err != nil {
		return err
	}
	if cs == nil {
		cs = []*service.ConnectionView{}
	}
	jsonio.Write(w, http.StatusOK, cs)
	return nil
}

func (a *API) createConnection(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in service.ConnectionInput
	if err := decode(w, r, &in); err != nil {
		return err
	}
	c, err := svc.CreateConnection(r.Context(), service.Operator(p["wrk"]), in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, c)
	return nil
}

func (a *API) listBudgets(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	bs, err := svc.Budgets(r.Context(), service.Operator(p["wrk"]))
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, bs)
	return nil
}

func (a *API) setBudget(w http.ResponseWriter, r *http.Request, p router.Params) error {
	svc, err := a.svc(r.Context())
	if err != nil {
		return err
	}
	var in service.BudgetInput
	if err := decode(w, r, &in); err != nil {
		return err
	}
	b, err := svc.SetBudget(r.Context(), service.Operator(p["wrk"]), p["member"], in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, b)
	return nil
}

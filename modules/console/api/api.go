// Package api is the Console's JSON API over HTTP: GET /api/v2/config and
// the management routes under /api/v1. It has no Caddy import; the
// workspace_console handler mounts it.
package api

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/jsonio"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/modules/store"
)

// Options configure the API.
type Options struct {
	// Service returns the Console service once the store is open, or an error
	// (503) when it does not open in time.
	Service func(ctx context.Context) (*service.Service, error)
	// InferenceURL is the gateway's base URL used in the config. Empty means
	// the scheme and host of the request.
	InferenceURL string
	// MaxBody is the largest accepted request body (default 1 MiB).
	MaxBody int64
}

// API serves the Console JSON routes.
type API struct {
	opts   Options
	router *router.Router
}

// New builds the API.
func New(opts Options) *API {
	if opts.MaxBody <= 0 {
		opts.MaxBody = jsonio.DefaultLimit
	}
	a := &API{opts: opts, router: &router.Router{}}
	rt := a.router
	rt.Handle("GET", "/api/v2/config", a.config)
	rt.Handle("GET", "/api/v1/workspace", a.workspace)
	rt.Handle("GET", "/api/v1/service-accounts", a.listServiceAccounts)
	rt.Handle("POST", "/api/v1/service-accounts", a.createServiceAccount)
	rt.Handle("GET", "/api/v1/service-accounts/{sa}", a.getServiceAccount)
	rt.Handle("DELETE", "/api/v1/service-accounts/{sa}", a.deleteServiceAccount)
	rt.Handle("GET", "/api/v1/service-accounts/{sa}/keys", a.listKeys)
	rt.Handle("POST", "/api/v1/service-accounts/{sa}/keys", a.createKey)
	rt.Handle("DELETE", "/api/v1/service-accounts/{sa}/keys/{key}", a.revokeKey)
	rt.Handle("GET", "/api/v1/members", a.listMembers)
	rt.Handle("POST", "/api/v1/members", a.addMember)
	rt.Handle("PATCH", "/api/v1/members/{member}", a.setRole)
	rt.Handle("DELETE", "/api/v1/members/{member}", a.removeMember)
	rt.Handle("GET", "/api/v1/connections", a.listConnections)
	rt.Handle("POST", "/api/v1/connections", a.createConnection)
	rt.Handle("GET", "/api/v1/connections/{conn}", a.getConnection)
	rt.Handle("PATCH", "/api/v1/connections/{conn}", a.updateConnection)
	rt.Handle("DELETE", "/api/v1/connections/{conn}", a.deleteConnection)
	rt.Handle("PUT", "/api/v1/connections/{conn}/models/{model}", a.putModel)
	rt.Handle("DELETE", "/api/v1/connections/{conn}/models/{model}", a.deleteModel)
	rt.Handle("PUT", "/api/v1/connections/{conn}/models/{model}/pricing", a.setPricing)
	rt.Handle("GET", "/api/v1/budgets/members", a.listBudgets)
	rt.Handle("PUT", "/api/v1/budgets/members/{member}", a.setBudget)
	rt.Handle("GET", "/api/v1/usage", a.listUsage)
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

// auth resolves the request's credential: Authorization: Bearer, with x-org-id.
func (a *API) auth(r *http.Request) (*service.Service, *service.Principal, error) {
	svc, err := a.opts.Service(r.Context())
	if err != nil {
		return nil, nil, err
	}
	cred := service.BearerToken(r.Header)
	if cred == "" {
		return nil, nil, apierr.Unauthorized()
	}
	p, err := svc.Authenticate(r.Context(), cred, r.Header.Get("x-org-id"))
	return svc, p, err
}

func (a *API) config(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	base := a.opts.InferenceURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	cfg, err := svc.Config(r.Context(), p, base)
	if err != nil {
		return err
	}
	jsonio.WriteRaw(w, http.StatusOK, cfg)
	return nil
}

func (a *API) workspace(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	ws, err := svc.Workspace(r.Context(), p)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, map[string]any{"id": ws.ID, "name": ws.Name, "created": ws.Created,
		"you": map[string]any{"kind": p.Kind.String(), "member_id": p.MemberID(), "role": nilIfEmpty(p.Role), "permission": nilIfEmpty(p.Permission)}})
	return nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ServiceAccountView is a service account on the wire.
type ServiceAccountView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedBy string    `json:"created_by"`
	Created   time.Time `json:"created"`
}

func saView(sa *store.ServiceAccount) ServiceAccountView {
	return ServiceAccountView{ID: sa.ID, Name: sa.Name, CreatedBy: sa.CreatedBy, Created: sa.Created}
}

func (a *API) listServiceAccounts(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	sas, err := svc.ServiceAccounts(r.Context(), p)
	if err != nil {
		return err
	}
	out := make([]ServiceAccountView, len(sas))
	for i, sa := range sas {
		out[i] = saView(sa)
	}
	return WritePage(w, r, svc.Secrets, scopeOf("service-accounts", p.Workspace), out, func(v ServiceAccountView) string { return v.ID })
}

func (a *API) createServiceAccount(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	sa, err := svc.CreateServiceAccount(r.Context(), p, in.Name)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, saView(sa))
	return nil
}

func (a *API) getServiceAccount(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	sa, err := svc.ServiceAccount(r.Context(), p, ps["sa"])
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, saView(sa))
	return nil
}

func (a *API) deleteServiceAccount(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	if err := svc.DeleteServiceAccount(r.Context(), p, ps["sa"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// KeyView is an API key on the wire. Key is set only in the create answer.
type KeyView struct {
	ID             string     `json:"id"`
	Name           string     `json:"name"`
	Permission     string     `json:"permission"`
	ServiceAccount string     `json:"service_account"`
	Display        string     `json:"display"`
	Created        time.Time  `json:"created"`
	CreatedBy      string     `json:"created_by"`
	ExpiresAt      *time.Time `json:"expires_at"`
	RevokedAt      *time.Time `json:"revoked_at"`
	LastUsedAt     *time.Time `json:"last_used_at"`
	Key            string     `json:"key,omitempty"`
}

// KeyViewOf returns the wire view of a key (without its value).
func KeyViewOf(k *store.APIKey) KeyView {
	return KeyView{ID: k.ID, Name: k.Name, Permission: k.Permission, ServiceAccount: k.ServiceAccount,
		Display: secrets.PrefixServiceKey + k.ID + "_…", Created: k.Created, CreatedBy: k.CreatedBy,
		ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt, LastUsedAt: k.LastUsedAt}
}

func (a *API) listKeys(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	keys, err := svc.Keys(r.Context(), p, ps["sa"])
	if err != nil {
		return err
	}
	out := make([]KeyView, len(keys))
	for i, k := range keys {
		out[i] = KeyViewOf(k)
	}
	return WritePage(w, r, svc.Secrets, scopeOf("keys", p.Workspace, ps["sa"]), out, func(v KeyView) string { return v.ID })
}

func (a *API) createKey(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in service.NewKey
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	k, err := svc.CreateKey(r.Context(), p, ps["sa"], in)
	if err != nil {
		return err
	}
	v := KeyViewOf(k.APIKey)
	v.Key = k.Key
	jsonio.Write(w, http.StatusCreated, v)
	return nil
}

func (a *API) revokeKey(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	if err := svc.RevokeKey(r.Context(), p, ps["sa"], ps["key"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) listMembers(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	ms, err := svc.Members(r.Context(), p)
	if err != nil {
		return err
	}
	return WritePage(w, r, svc.Secrets, scopeOf("members", p.Workspace), ms, func(v service.MemberView) string { return v.MemberID })
}

func (a *API) addMember(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in service.NewMember
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	m, err := svc.AddMember(r.Context(), p, in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, m)
	return nil
}

func (a *API) setRole(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in struct {
		Role string `json:"role"`
	}
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	m, err := svc.SetRole(r.Context(), p, ps["member"], in.Role)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, m)
	return nil
}

func (a *API) removeMember(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	if err := svc.RemoveMember(r.Context(), p, ps["member"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) listConnections(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	cs, err := svc.Connections(r.Context(), p)
	if err != nil {
		return err
	}
	return WritePage(w, r, svc.Secrets, scopeOf("connections", p.Workspace), cs, func(v *service.ConnectionView) string { return v.ID })
}

func (a *API) createConnection(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in service.ConnectionInput
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	c, err := svc.CreateConnection(r.Context(), p, in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusCreated, c)
	return nil
}

func (a *API) getConnection(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	c, err := svc.Connection(r.Context(), p, ps["conn"])
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, c)
	return nil
}

func (a *API) updateConnection(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in service.ConnectionPatch
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	c, err := svc.UpdateConnection(r.Context(), p, ps["conn"], in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, c)
	return nil
}

func (a *API) deleteConnection(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	if err := svc.DeleteConnection(r.Context(), p, ps["conn"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) putModel(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in service.ModelInput
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	c, err := svc.PutModel(r.Context(), p, ps["conn"], ps["model"], in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, c)
	return nil
}

func (a *API) deleteModel(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	c, err := svc.DeleteModel(r.Context(), p, ps["conn"], ps["model"])
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, c)
	return nil
}

func (a *API) setPricing(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in store.Pricing
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	c, err := svc.SetPricing(r.Context(), p, ps["conn"], ps["model"], in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, c)
	return nil
}

func (a *API) listBudgets(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	bs, err := svc.Budgets(r.Context(), p)
	if err != nil {
		return err
	}
	return WritePage(w, r, svc.Secrets, scopeOf("budgets", p.Workspace), bs, func(v service.BudgetView) string { return v.MemberID })
}

func (a *API) setBudget(w http.ResponseWriter, r *http.Request, ps router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	var in service.BudgetInput
	if err := jsonio.Decode(w, r, a.opts.MaxBody, &in); err != nil {
		return err
	}
	b, err := svc.SetBudget(r.Context(), p, ps["member"], in)
	if err != nil {
		return err
	}
	jsonio.Write(w, http.StatusOK, b)
	return nil
}

// listUsage answers GET /api/v1/usage?member=&model=&connection=&session=&from=&to=&limit=&cursor=
// (session is the agent session, exact match; from and to in RFC 3339,
// from inclusive, to exclusive), oldest first.
func (a *API) listUsage(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	svc, p, err := a.auth(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	scope := scopeOf("usage", p.Workspace)
	uq := service.UsageQuery{Member: q.Get("member"), Model: q.Get("model"), Connection: q.Get("connection"), Session: q.Get("session"), Limit: DefaultPageSize}
	if c := q.Get("cursor"); c != "" {
		if uq.Cursor, err = decodeCursor(svc.Secrets, scope, c); err != nil {
			return err
		}
	}
	for name, dst := range map[string]*time.Time{"from": &uq.From, "to": &uq.To} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return apierr.BadRequest("%s must be an RFC 3339 time", name)
			}
			*dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			return apierr.BadRequest("limit must be a whole number from 1 to %d", MaxPageSize)
		}
		uq.Limit = n
	}
	recs, next, err := svc.Usage(r.Context(), p, uq)
	if err != nil {
		return err
	}
	var nc any
	if next != "" {
		nc = encodeCursor(svc.Secrets, scope, next)
	}
	jsonio.WriteRaw(w, http.StatusOK, map[string]any{"data": recs, "next_cursor": nc})
	return nil
}

// Page limits.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// WritePage answers {"data": [...], "next_cursor": …} with items ordered by
// id, starting after ?cursor= and at most ?limit= long. Cursors are issued
// for, and only honoured by, the list named by scope (see encodeCursor).
func WritePage[T any](w http.ResponseWriter, r *http.Request, keys *secrets.Keys, scope string, items []T, id func(T) string) error {
	q := r.URL.Query()
	limit := DefaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return apierr.BadRequest("limit must be a whole number from 1 to %d", MaxPageSize)
		}
		limit = n
	}
	sort.Slice(items, func(i, j int) bool { return id(items[i]) < id(items[j]) })
	if c := q.Get("cursor"); c != "" {
		after, err := decodeCursor(keys, scope, c)
		if err != nil {
			return err
		}
		i := sort.Search(len(items), func(i int) bool { return id(items[i]) > after })
		items = items[i:]
	}
	var next any
	if len(items) > limit {
		items = items[:limit]
		next = encodeCursor(keys, scope, id(items[limit-1]))
	}
	if items == nil {
		items = []T{}
	}
	jsonio.WriteRaw(w, http.StatusOK, map[string]any{"data": items, "next_cursor": next})
	return nil
}

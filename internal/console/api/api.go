// Package api is the Console's JSON API over HTTP: GET /api/v2/config and
// the management routes under /api/v1. It has no Caddy import; the
// workspace_console handler mounts it.
package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/endpoint"
	"github.com/agentgate/agentgate/internal/jsonio"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// Options configure the API.
type Options struct {
	// Service returns the Console service once the store is open, or an error
	// (503) when it does not open in time.
	Service func(ctx context.Context) (*service.Service, error)
	// InferenceURL is the gateway's base URL used in the config. Empty means
	// the scheme and host of the request.
	InferenceURL string
	// ConsoleURL is the Console's public base URL, for the config's MCP
	// server. Empty means the scheme and host of the request.
	ConsoleURL string
	// MaxBody is the largest accepted request body (default 1 MiB).
	MaxBody int64
}

// API serves the Console JSON routes.
type API struct {
	routes []endpoint.Route
	router *router.Router
}

// New builds the API.
func New(opts Options) *API {
	if opts.MaxBody <= 0 {
		opts.MaxBody = jsonio.DefaultLimit
	}
	const sa, conn, model = "/api/v1/service-accounts/{sa}", "/api/v1/connections/{conn}", "/api/v1/connections/{conn}/models/{model}"
	a := &API{routes: []endpoint.Route{
		endpoint.Custom("GET", "/api/v2/config", readConfig(opts), writeRaw[*service.Config]),
		endpoint.Custom("GET", "/api/config", readConfig(opts), writeV1Config),
		endpoint.Custom("GET", "/api/user", readAccount, writeRaw[*service.Account]),
		endpoint.Custom("GET", "/api/orgs", readOrgs, writeRaw[[]service.OrgView]),
		endpoint.Custom("GET", "/api/v1/workspace", readWorkspace, writeWorkspace),
		endpoint.Custom("GET", "/api/v1/service-accounts", endpoint.ServiceAccounts, page("service-accounts", "", saView, ServiceAccountView.id)),
		endpoint.Shaped("POST", "/api/v1/service-accounts", endpoint.CreateServiceAccount, http.StatusCreated, saView),
		endpoint.Shaped("GET", sa, endpoint.ServiceAccount, http.StatusOK, saView),
		endpoint.Data("DELETE", sa, endpoint.DeleteServiceAccount, http.StatusNoContent),
		endpoint.Custom("GET", sa+"/keys", endpoint.Keys, page("keys", "sa", KeyViewOf, KeyView.id)),
		endpoint.Shaped("POST", sa+"/keys", endpoint.CreateKey, http.StatusCreated, createdKeyView),
		endpoint.Data("DELETE", sa+"/keys/{key}", endpoint.RevokeKey, http.StatusNoContent),
		endpoint.Custom("GET", "/api/v1/members", endpoint.Members, page("members", "", same, func(v service.MemberView) string { return v.MemberID })),
		endpoint.Data("POST", "/api/v1/members", endpoint.AddMember, http.StatusCreated),
		endpoint.Data("PATCH", "/api/v1/members/{member}", endpoint.SetRole, http.StatusOK),
		endpoint.Data("DELETE", "/api/v1/members/{member}", endpoint.RemoveMember, http.StatusNoContent),
		endpoint.Custom("GET", "/api/v1/connections", endpoint.Connections, page("connections", "", same, func(v *service.ConnectionView) string { return v.ID })),
		endpoint.Data("POST", "/api/v1/connections", endpoint.CreateConnection, http.StatusCreated),
		endpoint.Data("GET", conn, endpoint.Connection, http.StatusOK),
		endpoint.Data("PATCH", conn, endpoint.UpdateConnection, http.StatusOK),
		endpoint.Data("DELETE", conn, endpoint.DeleteConnection, http.StatusNoContent),
		endpoint.Custom("GET", conn+"/audit", endpoint.ConnectionAudit, page("connection-audit", "conn", same, func(v *service.ConnectionChangeView) string { return v.ID })),
		endpoint.Data("PUT", model, endpoint.PutModel, http.StatusOK),
		endpoint.Data("DELETE", model, endpoint.DeleteModel, http.StatusOK),
		endpoint.Data("PUT", model+"/pricing", endpoint.SetPricing, http.StatusOK),
		endpoint.Custom("GET", "/api/v1/models", endpoint.WorkspaceModels, page("models", "", same, func(v *service.WorkspaceModelView) string { return v.ID })),
		endpoint.Data("POST", "/api/v1/models", endpoint.CreateWorkspaceModel, http.StatusCreated),
		endpoint.Data("GET", "/api/v1/models/{wmodel}", endpoint.WorkspaceModel, http.StatusOK),
		endpoint.Data("PUT", "/api/v1/models/{wmodel}", endpoint.ReplaceWorkspaceModel, http.StatusOK),
		endpoint.Data("DELETE", "/api/v1/models/{wmodel}", endpoint.DeleteWorkspaceModel, http.StatusNoContent),
		endpoint.Custom("GET", "/api/v1/policies", endpoint.Policies, page("policies", "", same, func(v *store.Policy) string { return v.ID })),
		endpoint.Data("POST", "/api/v1/policies", endpoint.CreatePolicy, http.StatusCreated),
		endpoint.Data("GET", "/api/v1/policies/{policy}", endpoint.Policy, http.StatusOK),
		endpoint.Data("PUT", "/api/v1/policies/{policy}", endpoint.ReplacePolicy, http.StatusOK),
		endpoint.Data("DELETE", "/api/v1/policies/{policy}", endpoint.DeletePolicy, http.StatusNoContent),
		endpoint.Data("GET", "/api/v1/websearch", endpoint.Websearch, http.StatusOK),
		endpoint.Data("PUT", "/api/v1/websearch", endpoint.SetWebsearch, http.StatusOK),
		endpoint.Data("GET", "/api/v1/claude-code/settings", endpoint.ClaudeCodeSettings, http.StatusOK),
		endpoint.Data("PUT", "/api/v1/claude-code/settings", endpoint.SetClaudeCodeSettings, http.StatusOK),
		endpoint.Custom("GET", "/api/v1/claude-code/settings/history", endpoint.ClaudeCodeSettingsHistory,
			page("claude-code-history", "", same, func(v *service.ClaudeCodeChangeView) string { return fmt.Sprintf("%010d", v.Version) })),
		endpoint.Custom("GET", "/api/v1/sign-ins", endpoint.SignIns, page("sign-ins", "", same, func(v service.SignInView) string { return v.ID })),
		endpoint.Data("DELETE", "/api/v1/sign-ins/{signin}", endpoint.RevokeSignIn, http.StatusNoContent),
		endpoint.Custom("GET", "/api/v1/budgets/members", endpoint.Budgets, page("budgets", "", same, func(v service.BudgetView) string { return v.MemberID })),
		endpoint.Data("PUT", "/api/v1/budgets/members/{member}", endpoint.SetBudget, http.StatusOK),
		endpoint.Custom("GET", "/api/v1/usage", readUsage, writeUsage),
		endpoint.Custom("GET", CLIUsagePath, readCLIUsage, writeRaw[*service.CLIUsage]),
	}}
	a.router = endpoint.Surface{Service: opts.Service, Principal: authenticate, MaxBody: opts.MaxBody}.Router(a.routes)
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

// Routes returns the route table.
func (a *API) Routes() []endpoint.Route { return a.routes }

// authenticate resolves the request's credential: Authorization: Bearer,
// with x-org-id; on the account routes, which name no workspace, without.
// Two different bearer tokens, or a Console session cookie sent along (a
// browser's) of someone else, make the request ambiguous: 400.
func authenticate(r *http.Request, svc *service.Service, _ router.Params) (*service.Principal, error) {
	cred, conflict := service.ConsoleBearer(r.Header)
	if conflict {
		return nil, apierr.AmbiguousCredential("the request carries two different bearer credentials; send one")
	}
	if cred == "" {
		return nil, apierr.Unauthorized()
	}
	var p *service.Principal
	var err error
	if accountRoutes[r.URL.Path] {
		p, err = svc.AuthenticateAccount(r.Context(), cred)
	} else {
		p, err = svc.Authenticate(r.Context(), cred, r.Header.Get("x-org-id"))
	}
	if err != nil {
		return nil, err
	}
	if err := svc.CheckSessionCookies(r.Context(), p, r); err != nil {
		return nil, err
	}
	return p, nil
}

// accountRoutes are about the caller's own account: who signed in and the
// workspaces they may use (what the released OpenCode CLI asks right after
// its console login).
var accountRoutes = map[string]bool{"/api/user": true, "/api/orgs": true}

var (
	readAccount = endpoint.Operation[endpoint.NoBody, *service.Account]{Op: service.OpOwnAccount,
		Call: func(c *endpoint.Call, _ endpoint.NoBody) (*service.Account, error) {
			return c.Svc.AccountOf(c.Ctx(), c.P)
		}}
	readOrgs = endpoint.Operation[endpoint.NoBody, []service.OrgView]{Op: service.OpOwnAccount,
		Call: func(c *endpoint.Call, _ endpoint.NoBody) ([]service.OrgView, error) {
			return c.Svc.OrgsOf(c.Ctx(), c.P)
		}}
)

// CLIUsagePath is where Claude Code reads the signed-in person's spend
// and budget, for its usage display.
const CLIUsagePath = "/api/oauth/usage"

// readCLIUsage answers the caller's own budget, with no {"data": …}
// envelope (the shape Claude Code reads). Claude Code sends no x-org-id:
// its sign-in is bound to a workspace.
var readCLIUsage = endpoint.Operation[endpoint.NoBody, *service.CLIUsage]{Op: service.OpReadSpend,
	Call: func(c *endpoint.Call, _ endpoint.NoBody) (*service.CLIUsage, error) {
		return c.Svc.CLIUsageOf(c.Ctx(), c.P)
	}}

// ConsoleTokenEnv is the environment variable the released OpenCode CLI
// puts its Console access token in once signed in; the V1 config's
// providers read their credential from it.
const ConsoleTokenEnv = "OPENCODE_CONSOLE_TOKEN"

// writeV1Config answers the config in the V1 format, as {"config": …}: the
// credential read from OPENCODE_CONSOLE_TOKEN for a person's token (a
// signed-in OpenCode), from AGENTGATE_API_KEY for a key (an OpenCode that
// ran `opencode auth login`, see WellKnown).
func writeV1Config(w http.ResponseWriter, c *endpoint.Call, cfg *service.Config) error {
	env := ConsoleTokenEnv
	if c.P.Kind == service.KindServiceKey {
		env = service.KeyEnvVar
	}
	jsonio.WriteRaw(w, http.StatusOK, map[string]any{"config": service.V1(cfg, env)})
	return nil
}

// WellKnownPath is where `opencode auth login <console_url>` looks.
const WellKnownPath = "/.well-known/opencode"

// WellKnown answers GET /.well-known/opencode for `opencode auth login
// <console_url>`: the CLI runs auth.command and keeps what it prints as
// the variable auth.env — here the workspace key the member already has
// in AGENTGATE_API_KEY — then loads remote_config (this Console's
// /api/config with that key) whenever it starts. No credential is needed
// and none is answered.
func WellKnown(consoleURL string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			jsonio.WriteRaw(w, http.StatusMethodNotAllowed, map[string]any{"_tag": "MethodNotAllowed", "message": "use GET"})
			return
		}
		base := strings.TrimRight(consoleURL, "/")
		if base == "" {
			base = "http://" + r.Host
			if r.TLS != nil {
				base = "https://" + r.Host
			}
		}
		jsonio.WriteRaw(w, http.StatusOK, map[string]any{
			"auth": map[string]any{"command": []string{"sh", "-c", `printf %s "$` + service.KeyEnvVar + `"`}, "env": service.KeyEnvVar},
			"remote_config": map[string]any{"url": base + "/api/config",
				"headers": map[string]string{"Authorization": "Bearer {env:" + service.KeyEnvVar + "}"}},
		})
	}
}

func same[T any](v T) T { return v }

// writeRaw answers out itself, without the {"data": …} envelope.
func writeRaw[T any](w http.ResponseWriter, _ *endpoint.Call, out T) error {
	jsonio.WriteRaw(w, http.StatusOK, out)
	return nil
}

// readConfig builds the workspace config for the gateway at the inference
// URL and names the Console's MCP server at the Console URL (each, when not
// configured, at the scheme and host of the request).
func readConfig(opts Options) endpoint.Operation[endpoint.NoBody, *service.Config] {
	return endpoint.Operation[endpoint.NoBody, *service.Config]{Op: service.OpReadConfig, Call: func(c *endpoint.Call, _ endpoint.NoBody) (*service.Config, error) {
		here := "http://" + c.R.Host
		if c.R.TLS != nil {
			here = "https://" + c.R.Host
		}
		inference, console := opts.InferenceURL, opts.ConsoleURL
		if inference == "" {
			inference = here
		}
		if console == "" {
			console = here
		}
		cfg, err := c.Svc.Config(c.Ctx(), c.P, inference)
		if err != nil {
			return nil, err
		}
		cfg.MCP[service.MCPEntry] = service.ConsoleMCP(console, c.P.Workspace, service.KeyEnvVar)
		return cfg, nil
	}}
}

// readWorkspace reads the caller's workspace: every credential that may
// read the config may read it.
var readWorkspace = endpoint.Operation[endpoint.NoBody, *store.Workspace]{Op: service.OpReadConfig,
	Call: func(c *endpoint.Call, _ endpoint.NoBody) (*store.Workspace, error) {
		return c.Svc.Workspace(c.Ctx(), c.P)
	}}

func writeWorkspace(w http.ResponseWriter, c *endpoint.Call, ws *store.Workspace) error {
	p := c.P
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

// ServiceAccountView is a service account on the wire. Instance names the
// agent_instance whose member the account is (created by the config; the
// instance calls the gateway as it, without a key), absent for others.
type ServiceAccountView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedBy string    `json:"created_by"`
	Created   time.Time `json:"created"`
	Instance  string    `json:"instance,omitempty"`
}

func (v ServiceAccountView) id() string { return v.ID }

func saView(sa *store.ServiceAccount) ServiceAccountView {
	return ServiceAccountView{ID: sa.ID, Name: sa.Name, CreatedBy: sa.CreatedBy, Created: sa.Created, Instance: sa.Instance}
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

func (v KeyView) id() string { return v.ID }

// KeyViewOf returns the wire view of a key (without its value).
func KeyViewOf(k *store.APIKey) KeyView {
	return KeyView{ID: k.ID, Name: k.Name, Permission: k.Permission, ServiceAccount: k.ServiceAccount,
		Display: secrets.PrefixServiceKey + k.ID + "_…", Created: k.Created, CreatedBy: k.CreatedBy,
		ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt, LastUsedAt: k.LastUsedAt}
}

// createdKeyView is the view of a new key, with its value.
func createdKeyView(k *service.CreatedKey) KeyView {
	v := KeyViewOf(k.APIKey)
	v.Key = k.Key
	return v
}

// page answers a list as pages (WritePage) of view(item), the list named by
// list, the workspace and, when param is set, that path parameter.
func page[T, V any](list, param string, view func(T) V, id func(V) string) func(http.ResponseWriter, *endpoint.Call, []T) error {
	return func(w http.ResponseWriter, c *endpoint.Call, items []T) error {
		owners := []string{c.P.Workspace}
		if param != "" {
			owners = append(owners, c.Params[param])
		}
		out := make([]V, len(items))
		for i, it := range items {
			out[i] = view(it)
		}
		return WritePage(w, c.R, c.Svc.Secrets, scopeOf(list, owners...), out, id)
	}
}

// readUsage answers GET /api/v1/usage?member=&model=&connection=&session=&from=&to=&limit=&cursor=
// (session is the agent session, exact match; from and to in RFC 3339,
// from inclusive, to exclusive), oldest first.
var readUsage = endpoint.Operation[endpoint.NoBody, usagePage]{Op: service.OpReadSpend, Call: func(c *endpoint.Call, _ endpoint.NoBody) (usagePage, error) {
	q := c.R.URL.Query()
	scope := scopeOf("usage", c.P.Workspace)
	uq := service.UsageQuery{Member: q.Get("member"), Model: q.Get("model"), Connection: q.Get("connection"), Session: q.Get("session"), Limit: DefaultPageSize}
	if cur := q.Get("cursor"); cur != "" {
		var err error
		if uq.Cursor, err = decodeCursor(c.Svc.Secrets, scope, cur); err != nil {
			return usagePage{}, err
		}
	}
	for name, dst := range map[string]*time.Time{"from": &uq.From, "to": &uq.To} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return usagePage{}, apierr.BadRequest("%s must be an RFC 3339 time", name)
			}
			*dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			return usagePage{}, apierr.BadRequest("limit must be a whole number from 1 to %d", MaxPageSize)
		}
		uq.Limit = n
	}
	recs, next, err := c.Svc.Usage(c.Ctx(), c.P, uq)
	return usagePage{recs, scope, next}, err
}}

// usagePage is one page of usage records and the position after it.
type usagePage struct {
	records     []*store.UsageRecord
	scope, next string
}

func writeUsage(w http.ResponseWriter, c *endpoint.Call, pg usagePage) error {
	var nc any
	if pg.next != "" {
		nc = encodeCursor(c.Svc.Secrets, pg.scope, pg.next)
	}
	jsonio.WriteRaw(w, http.StatusOK, map[string]any{"data": pg.records, "next_cursor": nc})
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

package agentgate

import (
	"context"
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/operator"
	"github.com/agentgate/agentgate/internal/service"
)

func init() {
	caddy.RegisterModule(new(AdminAPI))
}

// AdminAPI serves the operator's routes under /agentgate/ on Caddy's admin
// listener: create workspaces, people, members, service accounts, keys and
// connections, and mint a person's access token. It is reachable only where
// Caddy's admin endpoint is (localhost:2019 by default) and is above
// workspace roles. The `caddy agentgate` subcommands are its clients.
type AdminAPI struct {
	api *operator.API
}

// CaddyModule returns the Caddy module information.
func (*AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.agentgate", New: func() caddy.Module { return new(AdminAPI) }}
}

// Provision builds the routes. The app is looked up per request in the
// running config, so that a config without agentgate opens no store.
func (a *AdminAPI) Provision(caddy.Context) error {
	a.api = operator.New(runningService)
	return nil
}

// runningService returns the service of the running config's agentgate app.
func runningService(ctx context.Context) (*service.Service, error) {
	v, err := caddy.ActiveContext().AppIfConfigured("agentgate")
	if errors.Is(err, caddy.ErrNotConfigured) {
		return nil, apierr.Unavailable("the running config does not use agentgate")
	}
	if err != nil {
		return nil, err
	}
	app, ok := v.(*App)
	if !ok {
		return nil, apierr.Unavailable("unexpected agentgate app type %T", v)
	}
	return app.Service(ctx)
}

// Routes returns the admin routes.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{
		Pattern: "/agentgate/",
		Handler: caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			a.api.ServeHTTP(w, r)
			return nil
		}),
	}}
}

// Interface guards
var (
	_ caddy.AdminRouter = (*AdminAPI)(nil)
	_ caddy.Provisioner = (*AdminAPI)(nil)
)

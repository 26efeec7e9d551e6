// Package instance is the instance server handler
// (http.handlers.agent_instance): the coding-agent session API that
// OpenCode-style clients speak, over the plain package instanceapi.
package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instanceapi"
	"github.com/agentgate/agentgate/modules/agentgate"
	"github.com/agentgate/agentgate/modules/store"
)

func init() {
	caddy.RegisterModule(new(Instance))
}

// shared keeps what must survive a config reload (pairing codes, event
// subscribers) per instance name.
var shared = caddy.NewUsagePool()

type sharedState struct {
	pairing *instanceapi.Pairing
	bus     *instanceapi.Bus
}

func (sharedState) Destruct() error { return nil }

// Instance serves the instance API: `/api/…` and `/auth/connect/{code}`.
// Requests for other paths go to the next handler.
//
// Authentication is HTTP Basic with the username (default `opencode`) and
// the password or a pairing token; `?auth_token=` carries the same for
// event-stream clients, and a paired browser's cookie is honoured for
// same-origin requests. Without a password, authentication is off (a
// warning is logged).
type Instance struct {
	// Name identifies the instance; pairing codes and event subscribers are
	// kept across config reloads per name. Default: "default".
	Name string `json:"name,omitempty"`

	// Password is the instance password; use a placeholder such as
	// `{env.AGENT_INSTANCE_PASSWORD}`. Empty turns authentication off.
	Password string `json:"password,omitempty"`

	// Username of HTTP Basic. Default: opencode.
	Username string `json:"username,omitempty"`

	// Directory is the default location. Default: the working directory.
	Directory string `json:"directory,omitempty"`

	// AllowedRoots restrict locations to these directories and their
	// descendants (after symlinks resolve). Default: the default location
	// only when it is set; otherwise any directory.
	AllowedRoots []string `json:"allowed_roots,omitempty"`

	// Agents are agent definitions by id, in the shape of an opencode.json
	// "agent" entry (description, mode, model "provider/model", prompt,
	// color, steps, hidden, permission…).
	Agents map[string]json.RawMessage `json:"agents,omitempty"`

	// Plugins are package plugins, as `name@version` targets.
	Plugins []string `json:"plugins,omitempty"`

	// Registry is the npm registry URL that plugin check and update ask.
	Registry string `json:"registry,omitempty"`

	// Heartbeat is the event-stream heartbeat interval. Default: 15s.
	Heartbeat caddy.Duration `json:"heartbeat,omitempty"`

	server *instanceapi.Server
	logger *zap.Logger
	key    string
}

// CaddyModule returns the Caddy module information.
func (*Instance) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.agent_instance", New: func() caddy.Module { return new(Instance) }}
}

// Provision resolves placeholders and builds the server.
func (in *Instance) Provision(ctx caddy.Context) error {
	in.logger = ctx.Logger()
	app, err := agentgate.FromContext(ctx)
	if err != nil {
		return fmt.Errorf("loading agentgate app: %v", err)
	}
	repl := caddy.NewReplacer()
	if in.Name == "" {
		in.Name = "default"
	}
	if in.Username == "" {
		in.Username = "opencode"
	}
	password := repl.ReplaceAll(in.Password, "")
	if in.Password != "" && password == "" {
		return errors.New("password is set but empty (is its environment variable or file there?)")
	}
	if password == "" {
		in.logger.Warn("agent_instance has no password: authentication is off")
	}
	dir := repl.ReplaceAll(in.Directory, "")
	if dir != "" && !filepath.IsAbs(dir) {
		return fmt.Errorf("directory must be an absolute path, got %q", dir)
	}
	roots := make([]string, 0, len(in.AllowedRoots))
	for _, r := range in.AllowedRoots {
		r = repl.ReplaceAll(r, "")
		if !filepath.IsAbs(r) {
			return fmt.Errorf("allowed root %q must be an absolute path", r)
		}
		if c, err := filepath.EvalSymlinks(r); err == nil {
			r = c
		}
		roots = append(roots, filepath.Clean(r))
	}
	if len(roots) == 0 && dir != "" {
		// A default directory that does not resolve (yet) still confines
		// locations to itself rather than lifting the restriction.
		c, err := filepath.EvalSymlinks(dir)
		if err != nil {
			c = filepath.Clean(dir)
		}
		roots = append(roots, c)
	}
	// Malformed agent definitions are a config error now, not a 503 on
	// every location later.
	if _, err := instanceapi.LoadAgents("", "", in.Agents); err != nil {
		return fmt.Errorf("agents: %v", err)
	}
	in.key = in.Name
	val, _, err := shared.LoadOrNew(in.key, func() (caddy.Destructor, error) {
		return sharedState{pairing: instanceapi.NewPairing(clock.Real{}), bus: instanceapi.NewBus(0, clock.Real{})}, nil
	})
	if err != nil {
		return err
	}
	st := val.(sharedState)
	plugins, err := instanceapi.NewPluginManager(instanceapi.PluginOptions{
		Targets: in.Plugins, Registry: repl.ReplaceAll(in.Registry, ""),
		Dir: filepath.Join(app.DataDir(), "plugins", in.Name), Logger: in.logger.Named("plugins"),
	})
	if err != nil {
		shared.Delete(in.key)
		in.key = ""
		return err
	}
	in.server = instanceapi.New(instanceapi.Options{
		Auth:    &instanceapi.Auth{Username: in.Username, Password: password, Clock: clock.Real{}},
		Pairing: st.pairing, Bus: st.bus, DefaultDirectory: dir, AllowedRoots: roots, Agents: in.Agents,
		Plugins: plugins, Version: caddy.CustomVersion, Heartbeat: time.Duration(in.Heartbeat), Logger: in.logger,
		Instance: in.Name,
		Store: func(ctx context.Context) (store.Store, error) {
			svc, err := app.Service(ctx)
			if err != nil {
				return nil, err
			}
			return svc.Store, nil
		},
	})
	return nil
}

// Validate checks the configuration.
func (in *Instance) Validate() error {
	if in.Directory != "" && !strings.Contains(in.Directory, "{") && !filepath.IsAbs(in.Directory) {
		return fmt.Errorf("directory must be an absolute path, got %q", in.Directory)
	}
	return nil
}

// ServeHTTP serves the instance routes and passes other paths on.
func (in *Instance) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !instanceapi.Handles(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	in.server.ServeHTTP(w, r)
	return nil
}

// Cleanup releases the shared state of this config.
func (in *Instance) Cleanup() error {
	if in.key != "" {
		_, err := shared.Delete(in.key)
		in.key = ""
		return err
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Instance)(nil)
	_ caddy.Validator             = (*Instance)(nil)
	_ caddy.CleanerUpper          = (*Instance)(nil)
	_ caddyhttp.MiddlewareHandler = (*Instance)(nil)
)

package server

import (
	"net/http"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/router"
)

// unsupportedRoutes answer the released SDK's operations for features
// this server does not have, truthfully rather than with 404 "no route":
// provider integrations and credentials (the instance's provider is the
// operator's `provider` block) and terminals (pty).
func (s *Server) unsupportedRoutes(rt *router.Router) {
	noIntegrations := errs.InvalidRequest("payload", "this server has no provider integrations: its provider is configured by the operator")
	fail := func(err error) router.Handler {
		return func(http.ResponseWriter, *http.Request, router.Params) error { return err }
	}
	rt.Handle("GET", "/api/integration/{integrationID}", func(w http.ResponseWriter, r *http.Request, _ router.Params) error {
		return s.inLocation(w, r, func(string, string) (any, error) { return nil, nil })
	})
	rt.Handle("POST", "/api/integration/{integrationID}/connect/key", fail(noIntegrations))
	rt.Handle("POST", "/api/integration/{integrationID}/connect/oauth", fail(noIntegrations))
	rt.Handle("GET", "/api/integration/attempt/{attemptID}", fail(noIntegrations))
	rt.Handle("DELETE", "/api/integration/attempt/{attemptID}", fail(noIntegrations))
	rt.Handle("POST", "/api/integration/attempt/{attemptID}/complete", fail(noIntegrations))
	rt.Handle("DELETE", "/api/credential/{credentialID}", func(w http.ResponseWriter, _ *http.Request, _ router.Params) error {
		w.WriteHeader(http.StatusNoContent) // there is none to remove
		return nil
	})
	rt.Handle("PATCH", "/api/credential/{credentialID}", fail(noIntegrations))

	noPty := errs.Unavailable("pty", "terminals are not available on this server")
	rt.Handle("GET", "/api/pty", s.emptyInLocation)
	rt.Handle("POST", "/api/pty", fail(noPty))
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		rt.Handle(m, "/api/pty/{ptyID}", fail(noPty))
	}
	rt.Handle("POST", "/api/pty/{ptyID}/connect-token", fail(noPty))
	rt.Handle("GET", "/api/pty/{ptyID}/connect", fail(noPty))
}

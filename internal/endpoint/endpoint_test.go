package endpoint_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/endpoint"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/service"
)

func serve(t *testing.T, s endpoint.Surface, route endpoint.Route, method, body string) *httptest.ResponseRecorder {
	t.Helper()
	if s.Service == nil {
		s.Service = func(context.Context) (*service.Service, error) { return &service.Service{}, nil }
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, route.Path, strings.NewReader(body))
	s.Router([]endpoint.Route{route}).ServeHTTP(w, r)
	return w
}

func noPrincipal(*http.Request, *service.Service, router.Params) (*service.Principal, error) {
	return nil, nil
}

// A route that needs a permission is never run without a principal.
func TestPermissionNeedsAPrincipal(t *testing.T) {
	ran := false
	op := endpoint.Operation[endpoint.NoBody, string]{Op: service.OpReadConfig, Call: func(*endpoint.Call, endpoint.NoBody) (string, error) {
		ran = true
		return "x", nil
	}}
	w := serve(t, endpoint.Surface{Principal: noPrincipal}, endpoint.Data("GET", "/x", op, 200), "GET", "")
	if w.Code != 500 || ran {
		t.Fatalf("status %d, ran %v", w.Code, ran)
	}
}

// Routes of NoBody operations leave the body unread; the others decode it
// strictly, and answer with their status.
func TestBodies(t *testing.T) {
	none := endpoint.Operation[endpoint.NoBody, endpoint.NoBody]{Call: func(*endpoint.Call, endpoint.NoBody) (endpoint.NoBody, error) {
		return endpoint.NoBody{}, nil
	}}
	if w := serve(t, endpoint.Surface{Principal: noPrincipal}, endpoint.Data("DELETE", "/x", none, 204), "DELETE", "not JSON"); w.Code != 204 || w.Body.Len() != 0 {
		t.Fatalf("NoBody route: %d %q", w.Code, w.Body)
	}
	named := endpoint.Operation[endpoint.NameInput, string]{Call: func(_ *endpoint.Call, in endpoint.NameInput) (string, error) { return in.Name, nil }}
	route := endpoint.Shaped("POST", "/x", named, 201, strings.ToUpper)
	if w := serve(t, endpoint.Surface{Principal: noPrincipal}, route, "POST", `{"name": "a"}`); w.Code != 201 || strings.TrimSpace(w.Body.String()) != `{"data":"A"}` {
		t.Fatalf("named: %d %q", w.Code, w.Body)
	}
	if w := serve(t, endpoint.Surface{Principal: noPrincipal}, route, "POST", `{"name": "a", "x": 1}`); w.Code != 400 || !strings.Contains(w.Body.String(), "InvalidRequest") {
		t.Fatalf("unknown field: %d %q", w.Code, w.Body)
	}
	if w := serve(t, endpoint.Surface{Principal: noPrincipal, MaxBody: 4}, route, "POST", `{"name": "a"}`); w.Code != 413 {
		t.Fatalf("over MaxBody: %d %q", w.Code, w.Body)
	}
}

// Package endpoint serves the route tables of the JSON APIs over the
// Console service (internal/service): the Console API and the operator's
// admin API. A route says which permission of the matrix it needs and which
// operation it runs; one handler does the rest for every route: find the
// service, resolve the principal, check the permission, decode the body
// strictly, run the operation and write its answer.
package endpoint

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentgate/agentgate/internal/jsonio"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/service"
)

// Call is one request being served: what an operation runs with.
type Call struct {
	R      *http.Request
	Svc    *service.Service
	P      *service.Principal // nil for the operator's routes outside a workspace
	Params router.Params
}

// Ctx is the request's context.
func (c *Call) Ctx() context.Context { return c.R.Context() }

// NoBody is the input of an operation that reads no request body: its
// routes leave the body unread, whatever it holds.
type NoBody struct{}

// Operation is one operation as the APIs offer it: the row of the
// permission matrix it needs, the JSON body it decodes (In) and the
// service call it makes. Its path parameters are read by name from
// Call.Params, so every route running it names them alike.
type Operation[In, Out any] struct {
	// Op is the row of the permission matrix; zero for the operator's own
	// operations (workspaces, people), which no workspace credential may run.
	Op   service.Op
	Call func(c *Call, in In) (Out, error)
}

// Route is one route of an API surface.
type Route struct {
	Method, Path string
	// Op is the permission the route needs (the operation's row).
	Op    service.Op
	serve func(w http.ResponseWriter, c *Call, maxBody int64) error
}

// Custom is a route that runs op and answers with write.
func Custom[In, Out any](method, path string, op Operation[In, Out], write func(w http.ResponseWriter, c *Call, out Out) error) Route {
	return Route{Method: method, Path: path, Op: op.Op, serve: func(w http.ResponseWriter, c *Call, maxBody int64) error {
		var in In
		if _, none := any(&in).(*NoBody); !none {
			if err := jsonio.Decode(w, c.R, maxBody, &in); err != nil {
				return err
			}
		}
		out, err := op.Call(c, in)
		if err != nil {
			return err
		}
		return write(w, c, out)
	}}
}

// Shaped is a route that runs op and answers {"data": shape(out)} with
// status.
func Shaped[In, Out, V any](method, path string, op Operation[In, Out], status int, shape func(Out) V) Route {
	return Custom(method, path, op, func(w http.ResponseWriter, _ *Call, out Out) error {
		jsonio.Write(w, status, shape(out))
		return nil
	})
}

// Data is a route that runs op and answers {"data": out} with status, or
// nothing at all when status is 204.
func Data[In, Out any](method, path string, op Operation[In, Out], status int) Route {
	return Custom(method, path, op, func(w http.ResponseWriter, _ *Call, out Out) error {
		if status == http.StatusNoContent {
			w.WriteHeader(status)
			return nil
		}
		jsonio.Write(w, status, out)
		return nil
	})
}

// Surface is one API over the service: how its requests find the service
// and their principal.
type Surface struct {
	// Service returns the service, or an error (such as 503 while the store
	// opens) answered as it is.
	Service func(ctx context.Context) (*service.Service, error)
	// Principal resolves who calls: an error answers the request (401 for a
	// missing or bad credential). A nil principal is allowed only on routes
	// without a permission row.
	Principal func(r *http.Request, svc *service.Service, ps router.Params) (*service.Principal, error)
	// MaxBody is the largest accepted request body (jsonio.DefaultLimit when
	// zero).
	MaxBody int64
}

// Router builds the router serving routes.
func (s Surface) Router(routes []Route) *router.Router {
	rt := &router.Router{}
	for _, route := range routes {
		rt.Handle(route.Method, route.Path, s.handler(route))
	}
	return rt
}

func (s Surface) handler(route Route) router.Handler {
	return func(w http.ResponseWriter, r *http.Request, ps router.Params) error {
		svc, err := s.Service(r.Context())
		if err != nil {
			return err
		}
		c := &Call{R: r, Svc: svc, Params: ps}
		if c.P, err = s.Principal(r, svc, ps); err != nil {
			return err
		}
		if route.Op != 0 {
			if c.P == nil {
				return fmt.Errorf("route %s %s needs a principal for %q", route.Method, route.Path, route.Op)
			}
			if err := service.Require(c.P, route.Op); err != nil {
				return err
			}
		}
		return route.serve(w, c, s.MaxBody)
	}
}

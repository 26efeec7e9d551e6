// Package router is a small method-and-path router for JSON APIs: unknown
// paths answer 404 and wrong methods 405 (with Allow), both as JSON errors.
package router

import (
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/apierr"
)

// Handler serves one route; params holds the values of {name} segments.
type Handler func(w http.ResponseWriter, r *http.Request, p Params) error

// Params are the path parameters of a matched route.
type Params map[string]string

type route struct {
	method string
	parts  []string
	h      Handler
}

// Router matches routes in the order they were added.
type Router struct {
	routes []route
	// OnError writes an error returned by a handler or by routing.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

// Handle adds a route. pattern is a path such as "/api/v1/keys/{id}";
// {name} matches one non-empty segment.
func (rt *Router) Handle(method, pattern string, h Handler) {
	rt.routes = append(rt.routes, route{method: method, parts: split(pattern), h: h})
}

func split(p string) []string { return strings.Split(strings.Trim(p, "/"), "/") }

// segments splits the escaped path, so that an encoded slash (%2F) stays
// inside its segment; each segment is then unescaped.
func segments(r *http.Request) ([]string, bool) {
	segs := split(r.URL.EscapedPath())
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		segs[i] = u
	}
	return segs, true
}

func match(parts, segs []string) (Params, bool) {
	if len(parts) != len(segs) {
		return nil, false
	}
	var p Params
	for i, part := range parts {
		if strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}") {
			if segs[i] == "" {
				return nil, false
			}
			if p == nil {
				p = Params{}
			}
			p[part[1:len(part)-1]] = segs[i]
			continue
		}
		if part != segs[i] {
			return nil, false
		}
	}
	return p, true
}

// ServeHTTP dispatches the request.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segs, ok := segments(r)
	if !ok {
		rt.fail(w, r, apierr.BadRequest("malformed path escape"))
		return
	}
	var allowed []string
	for _, route := range rt.routes {
		p, ok := match(route.parts, segs)
		if !ok {
			continue
		}
		if route.method != r.Method && !(route.method == http.MethodGet && r.Method == http.MethodHead) {
			allowed = append(allowed, route.method)
			continue
		}
		if err := route.h(w, r, p); err != nil {
			rt.fail(w, r, err)
		}
		return
	}
	if len(allowed) > 0 {
		sort.Strings(allowed)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		rt.fail(w, r, apierr.New(http.StatusMethodNotAllowed, "MethodNotAllowed", "%s is not allowed here; allowed: %s", r.Method, strings.Join(allowed, ", ")))
		return
	}
	rt.fail(w, r, apierr.NotFound("NotFound", "no route for %s %s", r.Method, r.URL.Path))
}

func (rt *Router) fail(w http.ResponseWriter, r *http.Request, err error) {
	if rt.OnError != nil {
		rt.OnError(w, r, err)
		return
	}
	apierr.Write(w, err)
}

package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/apierr"
)

type hit struct {
	route  string
	params Params
}

func newRouter(got *hit) *Router {
	rt := &Router{}
	h := func(name string) Handler {
		return func(w http.ResponseWriter, r *http.Request, p Params) error {
			*got = hit{name, p}
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	rt.Handle("GET", "/a", h("get a"))
	rt.Handle("POST", "/a", h("post a"))
	rt.Handle("GET", "/a/{id}", h("get a id"))
	rt.Handle("DELETE", "/a/{id}", h("delete a id"))
	rt.Handle("PUT", "/a/{id}/m/{model}", h("put model"))
	rt.Handle("PUT", "/a/{id}/m/{model}/pricing", h("put pricing"))
	rt.Handle("GET", "/a/fixed", h("never: the {id} route comes first"))
	rt.Handle("POST", "/b/fixed", h("post b fixed"))
	rt.Handle("GET", "/b/{x}", h("get b x"))
	rt.Handle("GET", "/fail", func(http.ResponseWriter, *http.Request, Params) error {
		return apierr.Conflict("nope")
	})
	rt.Handle("GET", "/plain-error", func(http.ResponseWriter, *http.Request, Params) error {
		return errors.New("secret detail")
	})
	return rt
}

func serve(rt *Router, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

func errBody(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("error body is not JSON: %q", w.Body.String())
	}
	if m["_tag"] == nil || m["message"] == nil {
		t.Fatalf("error body without _tag or message: %v", m)
	}
	return m
}

func TestDispatch(t *testing.T) {
	for _, c := range []struct {
		method, target string
		route          string
		params         Params
	}{
		{"GET", "/a", "get a", nil},
		{"GET", "/a/", "get a", nil},
		{"HEAD", "/a", "get a", nil},
		{"POST", "/a", "post a", nil},
		{"GET", "/a/x1", "get a id", Params{"id": "x1"}},
		{"GET", "/a/fixed", "get a id", Params{"id": "fixed"}},
		{"DELETE", "/a/x1", "delete a id", Params{"id": "x1"}},
		{"PUT", "/a/c1/m/gpt-4o", "put model", Params{"id": "c1", "model": "gpt-4o"}},
		{"PUT", "/a/c1/m/meta-llama%2FLlama-3", "put model", Params{"id": "c1", "model": "meta-llama/Llama-3"}},
		{"PUT", "/a/c1/m/meta-llama%2fLlama-3", "put model", Params{"id": "c1", "model": "meta-llama/Llama-3"}},
		{"PUT", "/a/c1/m/a%20b%3Fc", "put model", Params{"id": "c1", "model": "a b?c"}},
		{"PUT", "/a/c1/m/%2E%2E", "put model", Params{"id": "c1", "model": ".."}},
		{"PUT", "/a/c1/m/x%2F..%2Fy/pricing", "put pricing", Params{"id": "c1", "model": "x/../y"}},
		{"PUT", "/a/c1/m/pricing", "put model", Params{"id": "c1", "model": "pricing"}},
		{"POST", "/b/fixed", "post b fixed", nil},
		{"GET", "/b/fixed", "get b x", Params{"x": "fixed"}},
	} {
		var got hit
		w := serve(newRouter(&got), c.method, c.target)
		if w.Code != http.StatusNoContent || got.route != c.route || !reflect.DeepEqual(got.params, c.params) {
			t.Fatalf("%s %s: %d %q %v, want %q %v (%s)", c.method, c.target, w.Code, got.route, got.params, c.route, c.params, w.Body)
		}
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	var got hit
	rt := newRouter(&got)
	for _, target := range []string{"/", "/nope", "/a/x/y", "/a/c1/m/a/b", "/a/c1/m/x/other", "/a//m/x", "/a/x/m/"} {
		w := serve(rt, "PUT", target)
		if w.Code != http.StatusNotFound && w.Code != http.StatusMethodNotAllowed {
			t.Fatalf("PUT %s: %d", target, w.Code)
		}
		if w.Code == http.StatusNotFound && errBody(t, w)["_tag"] != "NotFound" {
			t.Fatalf("PUT %s: %s", target, w.Body)
		}
	}
	for _, target := range []string{"/nope", "/a/c1/m/a/b", "/a//m/x"} {
		w := serve(rt, "PUT", target)
		if w.Code != http.StatusNotFound {
			t.Fatalf("PUT %s: %d, want 404", target, w.Code)
		}
	}
	if got.route != "" {
		t.Fatalf("a handler ran: %v", got)
	}
	for _, c := range []struct{ method, target, allow string }{
		{"DELETE", "/a", "GET, POST"},
		{"PATCH", "/a/x", "DELETE, GET"},
		{"GET", "/a/x/m/y", "PUT"},
		{"DELETE", "/b/fixed", "GET, POST"},
	} {
		w := serve(rt, c.method, c.target)
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != c.allow {
			t.Fatalf("%s %s: %d Allow %q, want 405 %q", c.method, c.target, w.Code, w.Header().Get("Allow"), c.allow)
		}
		if errBody(t, w)["_tag"] != "MethodNotAllowed" {
			t.Fatalf("%s %s: %s", c.method, c.target, w.Body)
		}
	}
}

func TestHandlerErrors(t *testing.T) {
	var got hit
	rt := newRouter(&got)
	w := serve(rt, "GET", "/fail")
	if w.Code != http.StatusConflict || errBody(t, w)["_tag"] != "Conflict" {
		t.Fatalf("apierr from a handler: %d %s", w.Code, w.Body)
	}
	w = serve(rt, "GET", "/plain-error")
	if w.Code != http.StatusInternalServerError || errBody(t, w)["_tag"] != "InternalError" || strings.Contains(w.Body.String(), "secret detail") {
		t.Fatalf("plain error from a handler: %d %s", w.Code, w.Body)
	}

	// OnError receives routing and handler errors alike.
	var seen []int
	rt.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
		seen = append(seen, apierr.As(err).Status)
		w.WriteHeader(599)
	}
	for _, c := range [][2]string{{"GET", "/nope"}, {"DELETE", "/a"}, {"GET", "/fail"}} {
		if w := serve(rt, c[0], c[1]); w.Code != 599 {
			t.Fatalf("%s %s with OnError: %d", c[0], c[1], w.Code)
		}
	}
	if !reflect.DeepEqual(seen, []int{404, 405, 409}) {
		t.Fatalf("OnError saw %v", seen)
	}
}

func TestMalformedEscape(t *testing.T) {
	var got hit
	rt := newRouter(&got)
	r := httptest.NewRequest("GET", "/a/x", nil)
	// A raw path whose escapes are malformed cannot come from net/http's
	// parser; set it by hand. EscapedPath falls back to the clean path.
	r.URL.RawPath = "/a/%zz"
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, r)
	if w.Code != http.StatusNoContent || got.params["id"] != "x" {
		t.Fatalf("malformed RawPath: %d %v", w.Code, got)
	}
}

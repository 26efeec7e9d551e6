package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/console/api"
	"github.com/agentgate/agentgate/internal/service"
)

// onlyReader hides the length of a body, so that the client sends it chunked
// without a Content-Length.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestRequestBodies(t *testing.T) {
	const maxBody = 256
	e := newEnv(t, func(o *api.Options) { o.MaxBody = maxBody })
	f := e.fixture("acme")
	post := func(body, ct string) resp {
		return e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, body: body, contentType: ct})
	}

	for name, c := range map[string]struct {
		body    string
		mention string
	}{
		"malformed JSON":          {`{"name":`, ""},
		"unquoted key":            {`{name: "x"}`, ""},
		"single quotes":           {`{'name': 'x'}`, ""},
		"wrong type number":       {`{"name": 5}`, "name"},
		"wrong type object":       {`{"name": {"a": 1}}`, "name"},
		"array body":              {`["x"]`, ""},
		"string body":             {`"x"`, ""},
		"unknown field":           {`{"name": "x", "colour": "red"}`, "colour"},
		"unknown field only":      {`{"nmae": "x"}`, "nmae"},
		"trailing garbage":        {`{"name": "x"} garbage`, ""},
		"two objects":             {`{"name": "x"}{"name": "y"}`, ""},
		"trailing brace":          {`{"name": "x"}}`, ""},
		"whitespace only":         {"  \n\t ", ""},
		"null body, name missing": {`null`, ""},
		"blank name":              {`{"name": "   "}`, ""},
	} {
		r := post(c.body, "")
		wantStatus(t, name, r, 400, "InvalidRequest")
		if c.mention != "" && !strings.Contains(r.json["message"].(string), c.mention) {
			t.Fatalf("%s: message %q does not mention %q", name, r.json["message"], c.mention)
		}
	}
	// No body at all.
	r := e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, contentType: "application/json"})
	wantStatus(t, "empty body", r, 400, "InvalidRequest")

	// Content types.
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", "not a media type;;"} {
		wantStatus(t, "Content-Type "+ct, post(`{"name": "x"}`, ct), 415, "UnsupportedMediaType")
	}

	// Bodies over MaxBody: with a Content-Length, and chunked without one.
	big := `{"name": "` + strings.Repeat("a", maxBody) + `"}`
	wantStatus(t, "too large with Content-Length", post(big, ""), 413, "PayloadTooLarge")
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, reader: onlyReader{strings.NewReader(big)}})
	wantStatus(t, "too large, chunked", r, 413, "PayloadTooLarge")
	huge := onlyReader{io.LimitReader(zeros{}, 8<<20)}
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, reader: huge})
	wantStatus(t, "8 MiB chunked", r, 413, "PayloadTooLarge")

	// Nothing was created by the refused requests.
	list := e.do(req{method: "GET", path: "/api/v1/service-accounts", cred: f.ownTok})
	wantStatus(t, "list", list, 200, "")
	if n := len(list.list()); n != 1 {
		t.Fatalf("%d service accounts after refused requests, want the fixture's 1: %s", n, list.raw)
	}

	// What is accepted: exactly MaxBody bytes, JSON media types with
	// parameters, no Content-Type at all, chunked bodies.
	exact := `{"name": "exact"}`
	exact += strings.Repeat(" ", maxBody-len(exact))
	if len(exact) != maxBody {
		t.Fatalf("exact body is %d bytes", len(exact))
	}
	wantStatus(t, "MaxBody+1", post(exact+" ", ""), 413, "PayloadTooLarge")
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, reader: onlyReader{strings.NewReader(exact + " ")}})
	wantStatus(t, "MaxBody+1, chunked", r, 413, "PayloadTooLarge")
	wantStatus(t, "exactly MaxBody", post(exact, ""), 201, "")
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, reader: onlyReader{strings.NewReader(exact)}})
	wantStatus(t, "exactly MaxBody, chunked", r, 201, "")
	wantStatus(t, "charset parameter", post(`{"name": "x"}`, "application/json; charset=utf-8"), 201, "")
	wantStatus(t, "+json suffix", post(`{"name": "x"}`, "application/vnd.agentgate+json"), 201, "")
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, body: `{"name": "no ct"}`, header: http.Header{"Content-Type": nil}})
	wantStatus(t, "no Content-Type", r, 201, "")
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: f.ownTok, reader: onlyReader{strings.NewReader(` {"name": "chunked"} ` + "\n")}})
	wantStatus(t, "small chunked body", r, 201, "")
	if r.data()["name"] != "chunked" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("create answer %s", r.raw)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

func TestRouting(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	for _, path := range []string{"/", "/api", "/api/v1", "/api/v1/nope", "/api/v3/config", "/api/v1/service-accounts/x/y/z/w", "/api/v1/connections/c/models/a/b"} {
		r := e.do(req{method: "GET", path: path, cred: f.ownTok})
		wantStatus(t, "GET "+path, r, 404, "NotFound")
	}
	// Unknown routes answer 404 even without a credential and without a service.
	r := e.do(req{method: "GET", path: "/api/v1/nope"})
	wantStatus(t, "unauthenticated unknown route", r, 404, "NotFound")

	for _, c := range []struct {
		method, path, allow string
	}{
		{"DELETE", "/api/v1/members", "GET, POST"},
		{"PUT", "/api/v1/service-accounts", "GET, POST"},
		{"POST", "/api/v2/config", "GET"},
		{"PATCH", "/api/v1/service-accounts/sa_x", "DELETE, GET"},
		{"GET", "/api/v1/connections/c/models/m", "DELETE, PUT"},
		{"POST", "/api/v1/connections/c/models/m/pricing", "PUT"},
		{"GET", "/api/v1/service-accounts/sa/keys/k", "DELETE"},
	} {
		r := e.do(req{method: c.method, path: c.path, cred: f.ownTok})
		wantStatus(t, c.method+" "+c.path, r, 405, "MethodNotAllowed")
		if got := r.header.Get("Allow"); got != c.allow {
			t.Fatalf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	// HEAD is served by GET routes.
	hr, _ := http.NewRequest("HEAD", e.srv.URL+"/api/v2/config", nil)
	hr.Header.Set("Authorization", "Bearer "+f.ownTok)
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("HEAD /api/v2/config: %d", res.StatusCode)
	}
}

func TestAuthErrors(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	for name, h := range map[string]http.Header{
		"no Authorization":   nil,
		"Basic":              {"Authorization": {"Basic dXNlcjpwYXNz"}},
		"Bearer without key": {"Authorization": {"Bearer "}},
		"Bearer garbage":     {"Authorization": {"Bearer garbage"}},
		"x-api-key only":     {"X-Api-Key": {f.all}},
	} {
		r := e.do(req{method: "GET", path: "/api/v2/config", header: h})
		wantStatus(t, name, r, 401, "Unauthorized")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%s: 401 without WWW-Authenticate", name)
		}
	}
	// Lower-case scheme is fine.
	r := e.do(req{method: "GET", path: "/api/v2/config", header: http.Header{"Authorization": {"bearer " + f.all}}})
	wantStatus(t, "lower-case bearer", r, 200, "")
}

func TestServiceUnavailable(t *testing.T) {
	e := newEnv(t, func(o *api.Options) {
		o.Service = func(context.Context) (*service.Service, error) {
			return nil, apierr.Unavailable("agentgate is starting; try again shortly")
		}
	})
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v2/config", ""},
		{"GET", "/api/v1/service-accounts", ""},
		{"POST", "/api/v1/connections", `{"name": "x"}`},
		{"DELETE", "/api/v1/members/usr_x", ""},
	} {
		r := e.do(req{method: c.method, path: c.path, body: c.body, cred: "ag_sk_whatever"})
		wantStatus(t, c.method+" "+c.path, r, 503, "ServiceUnavailable")
		if !strings.Contains(r.json["message"].(string), "starting") {
			t.Fatalf("message %q", r.json["message"])
		}
	}
	// An error that is not an API error answers a bare 500.
	e2 := newEnv(t, func(o *api.Options) {
		o.Service = func(context.Context) (*service.Service, error) { return nil, io.ErrUnexpectedEOF }
	})
	r := e2.do(req{method: "GET", path: "/api/v2/config"})
	wantStatus(t, "non-API error", r, 500, "InternalError")
	if strings.Contains(r.raw, "EOF") {
		t.Fatalf("500 leaks the cause: %s", r.raw)
	}
}

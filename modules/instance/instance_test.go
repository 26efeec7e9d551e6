package instance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/server"
)

// provisionCtx makes a config context holding the agentgate app (its data
// in a temporary directory), as a loaded config would.
func provisionCtx(t *testing.T) caddy.Context {
	t.Helper()
	appJSON, _ := json.Marshal(map[string]any{"storage": map[string]any{"path": t.TempDir()}})
	ctx, err := caddy.ProvisionContext(&caddy.Config{
		Admin:   &caddy.AdminConfig{Disabled: true},
		AppsRaw: caddy.ModuleMap{"agentgate": appJSON},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// provision provisions and validates a handler, cleaning it up at the end
// of the test (unless the test already did).
func provision(t *testing.T, in *Instance) *Instance {
	t.Helper()
	if err := in.Provision(provisionCtx(t)); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := in.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	t.Cleanup(func() { in.Cleanup() })
	return in
}

type result struct {
	status   int
	body     string
	header   http.Header
	nextUsed bool
}

func serve(t *testing.T, in *Instance, method, target string, headers ...string) result {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	// From this machine to its loopback name: without a password the
	// instance answers nothing else (httptest's defaults, 192.0.2.1 and
	// example.com, are refused).
	req.RemoteAddr, req.Host = "127.0.0.1:41234", "localhost:4096"
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	var res result
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		res.nextUsed = true
		w.WriteHeader(299)
		return nil
	})
	if err := in.ServeHTTP(rec, req, next); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	res.status, res.body, res.header = rec.Code, rec.Body.String(), rec.Header()
	return res
}

func basic(pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:"+pw))
}

func pair(t *testing.T, in *Instance, pw string) string {
	t.Helper()
	r := serve(t, in, "POST", "/api/pair", "Authorization", basic(pw))
	if r.status != 200 {
		t.Fatalf("pair: %d %s", r.status, r.body)
	}
	var pc struct{ Code string }
	json.Unmarshal([]byte(r.body), &pc)
	return pc.Code
}

func connect(t *testing.T, in *Instance, code string) (int, string) {
	t.Helper()
	r := serve(t, in, "GET", "/auth/connect/"+code, "Accept", "application/json")
	var ps struct{ Token string }
	json.Unmarshal([]byte(r.body), &ps)
	return r.status, ps.Token
}

func TestCaddyModule(t *testing.T) {
	info := new(Instance).CaddyModule()
	if info.ID != "http.handlers.agent_instance" {
		t.Fatalf("ID %s", info.ID)
	}
	if _, ok := info.New().(*Instance); !ok {
		t.Fatal("New does not make an *Instance")
	}
}

// A config reload provisions the new handler before the old one is
// cleaned up: codes issued by the old one are redeemable by the new one.
func TestPairingSurvivesReload(t *testing.T) {
	name := "reload-" + t.Name()
	old := provision(t, &Instance{Name: name, Password: "pw"})
	code := pair(t, old, "pw")
	spare := pair(t, old, "pw")

	fresh := provision(t, &Instance{Name: name, Password: "pw"})
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	status, tok := connect(t, fresh, code)
	if status != 200 || tok == "" {
		t.Fatalf("redeeming an old code on the new handler: %d", status)
	}
	if r := serve(t, fresh, "GET", "/api/info", "Authorization", basic(tok)); r.status != 200 {
		t.Fatalf("token on the new handler: %d", r.status)
	}
	if status, _ := connect(t, fresh, code); status != 401 {
		t.Fatalf("code redeemed twice across the reload: %d", status)
	}

	// Another instance name has its own codes.
	other := provision(t, &Instance{Name: "other-" + t.Name(), Password: "pw"})
	if status, _ := connect(t, other, spare); status != 401 {
		t.Fatalf("code of another instance accepted: %d", status)
	}

	// Once every config of the name is gone, its codes go too.
	code2 := pair(t, fresh, "pw")
	if err := fresh.Cleanup(); err != nil {
		t.Fatal(err)
	}
	later := provision(t, &Instance{Name: name, Password: "pw"})
	if status, _ := connect(t, later, code2); status != 401 {
		t.Fatalf("code outlived every config of its instance: %d", status)
	}
}

// serveFrom serves a request whose client address, as Caddy determined it
// (the client_ip variable), is ip; RemoteAddr is the same for every call.
func serveFrom(t *testing.T, in *Instance, ip, target string, headers ...string) result {
	t.Helper()
	req := httptest.NewRequest("GET", target, nil)
	req = req.WithContext(context.WithValue(req.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: ip}))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })
	if err := in.ServeHTTP(rec, req, next); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	return result{status: rec.Code, body: rec.Body.String(), header: rec.Header()}
}

// Failed authentications count per client address as Caddy determined it,
// and a config reload does not forgive them.
func TestAuthLimitPerClientIPAcrossReload(t *testing.T) {
	name := "limit-" + t.Name()
	old := provision(t, &Instance{Name: name, Password: "pw"})
	for i := 0; i < server.AuthFailuresPerAddress; i++ {
		if r := serveFrom(t, old, "203.0.113.9", "/api/info", "Authorization", basic("guess")); r.status != 401 {
			t.Fatalf("wrong password %d: %d", i+1, r.status)
		}
	}
	r := serveFrom(t, old, "203.0.113.9", "/api/info", "Authorization", basic("pw"))
	if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, `"TooManyRequestsError"`) {
		t.Fatalf("limited address: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	// Same RemoteAddr, another client_ip: not limited.
	if r := serveFrom(t, old, "198.51.100.2", "/api/info", "Authorization", basic("pw")); r.status != 200 {
		t.Fatalf("another client address: %d", r.status)
	}

	fresh := provision(t, &Instance{Name: name, Password: "pw"})
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if r := serveFrom(t, fresh, "203.0.113.9", "/api/info", "Authorization", basic("pw")); r.status != 429 {
		t.Fatalf("the limit was reset by a reload: %d", r.status)
	}
}

func TestPasswordPlaceholder(t *testing.T) {
	t.Setenv("AGENT_INSTANCE_TEST_PASSWORD", "from-env")
	in := provision(t, &Instance{Name: t.Name(), Password: "{env.AGENT_INSTANCE_TEST_PASSWORD}"})
	if r := serve(t, in, "GET", "/api/info", "Authorization", basic("from-env")); r.status != 200 {
		t.Fatalf("resolved password: %d %s", r.status, r.body)
	}
	for _, pw := range []string{"{env.AGENT_INSTANCE_TEST_PASSWORD}", ""} {
		r := serve(t, in, "GET", "/api/info", "Authorization", basic(pw))
		if r.status != 401 || r.header.Get("WWW-Authenticate") != `Basic realm="Secure Area"` {
			t.Fatalf("password %q: %d", pw, r.status)
		}
	}
	if r := serve(t, in, "GET", "/api/info"); r.status != 401 {
		t.Fatalf("no credentials: %d", r.status)
	}

	// A file placeholder works the same way.
	f := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(f, []byte("from-file"), 0o600)
	in = provision(t, &Instance{Name: t.Name() + "-file", Password: "{file." + f + "}", Username: "admin"})
	r := serve(t, in, "GET", "/api/info", "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("admin:from-file")))
	if r.status != 200 {
		t.Fatalf("file password with username admin: %d", r.status)
	}
	if r := serve(t, in, "GET", "/api/info", "Authorization", basic("from-file")); r.status != 401 {
		t.Fatalf("the default username must not work when another is set: %d", r.status)
	}
}

func TestProvisionErrors(t *testing.T) {
	t.Setenv("AGENT_INSTANCE_TEST_EMPTY", "")
	t.Setenv("AGENT_INSTANCE_TEST_RELATIVE", "relative/dir")
	for _, tc := range []struct {
		name string
		in   Instance
		want string
	}{
		{"empty password placeholder", Instance{Password: "{env.AGENT_INSTANCE_TEST_EMPTY}"}, "password is set but empty"},
		{"missing password variable", Instance{Password: "{env.AGENT_INSTANCE_TEST_UNSET_XYZ}"}, "password is set but empty"},
		{"relative allowed root", Instance{AllowedRoots: []string{"rel"}}, "must be an absolute path"},
		{"directory placeholder resolving to a relative path", Instance{Directory: "{env.AGENT_INSTANCE_TEST_RELATIVE}"}, "absolute path"},
		{"bad agent mode", Instance{Agents: map[string]json.RawMessage{"a": json.RawMessage(`{"mode":"boss"}`)}}, "mode must be"},
		{"bad agent model", Instance{Agents: map[string]json.RawMessage{"a": json.RawMessage(`{"model":"nope"}`)}}, "providerID/modelID"},
		{"bad plugin target", Instance{Plugins: []string{""}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Name = "err-" + t.Name()
			err := in.Provision(provisionCtx(t))
			if err == nil {
				in.Cleanup()
				t.Fatal("provisioned")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if in.Cleanup() != nil {
				t.Fatal("cleanup after a failed provision")
			}
			// Nothing of the name is left in the shared pool.
			if _, loaded := shared.References(in.Name); loaded {
				t.Fatal("a failed provision left shared state behind")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"", true},
		{"/srv/project", true},
		{"{env.PROJECT_DIR}", true},
		{"relative/dir", false},
		{"./dir", false},
	} {
		err := (&Instance{Directory: tc.dir}).Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(directory %q) = %v", tc.dir, err)
		}
	}
}

func TestServeHTTPRouting(t *testing.T) {
	in := provision(t, &Instance{Name: t.Name()}) // no password: auth off
	for _, p := range []string{"/index.html", "/apix", "/auth/other", "/authconnect/x", "/v1/chat/completions", "/uix", "/static/app.css"} {
		if r := serve(t, in, "GET", p); !r.nextUsed || r.status != 299 {
			t.Errorf("%s: next used %v, status %d", p, r.nextUsed, r.status)
		}
	}
	for _, p := range []string{"/api/info", "/api", "/api/nope", "/auth/connect/abc", "/", "/ui/stats", "/ui/nope"} {
		if r := serve(t, in, "GET", p); r.nextUsed {
			t.Errorf("%s went to the next handler", p)
		}
	}
	if r := serve(t, in, "GET", "/api/info"); r.status != 200 {
		t.Fatalf("auth off: %d %s", r.status, r.body)
	}
}

func TestDirectoryAndAgents(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	project := filepath.Join(base, "project")
	outside := filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(project, "sub"), 0o755)
	os.MkdirAll(outside, 0o755)
	in := provision(t, &Instance{Name: t.Name(), Directory: project,
		Agents: map[string]json.RawMessage{"reviewer": json.RawMessage(`{"mode":"subagent","model":"openai/gpt-5"}`)}})

	r := serve(t, in, "GET", "/api/location")
	var li struct{ Directory string }
	json.Unmarshal([]byte(r.body), &li)
	if r.status != 200 || li.Directory != project {
		t.Fatalf("default location: %d %s", r.status, r.body)
	}
	q := func(dir string) string { return "?" + url.Values{"location[directory]": {dir}}.Encode() }
	if r := serve(t, in, "GET", "/api/location"+q(filepath.Join(project, "sub"))); r.status != 200 {
		t.Fatalf("inside the default directory: %d %s", r.status, r.body)
	}
	// The default directory is the only allowed root when none is given.
	if r := serve(t, in, "GET", "/api/location"+q(outside)); r.status != 403 || !strings.Contains(r.body, "LocationPermissionDeniedError") {
		t.Fatalf("outside the default directory: %d %s", r.status, r.body)
	}
	r = serve(t, in, "GET", "/api/agent/reviewer")
	if r.status != 200 || !strings.Contains(r.body, `"mode":"subagent"`) || !strings.Contains(r.body, `"providerID":"openai"`) {
		t.Fatalf("configured agent: %d %s", r.status, r.body)
	}

	// Explicit roots replace the default.
	in2 := provision(t, &Instance{Name: t.Name() + "-roots", Directory: project, AllowedRoots: []string{base}})
	if r := serve(t, in2, "GET", "/api/location"+q(outside)); r.status != 200 {
		t.Fatalf("inside an explicit root: %d %s", r.status, r.body)
	}

	// A default directory that does not exist still confines locations.
	in3 := provision(t, &Instance{Name: t.Name() + "-missing", Directory: filepath.Join(base, "not-yet")})
	if r := serve(t, in3, "GET", "/api/location"+q(outside)); r.status != 403 {
		t.Fatalf("missing default directory lifted the restriction: %d %s", r.status, r.body)
	}
	if r := serve(t, in3, "GET", "/api/location"); r.status != 404 {
		t.Fatalf("missing default directory: %d %s", r.status, r.body)
	}

	// No directory and no roots: any absolute directory.
	in4 := provision(t, &Instance{Name: t.Name() + "-any"})
	if r := serve(t, in4, "GET", "/api/location"+q(outside)); r.status != 200 {
		t.Fatalf("unrestricted: %d %s", r.status, r.body)
	}
}

func TestProviderCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`agent_instance {
		provider {
			connection conn_1
			api_key {env.AGENTGATE_API_KEY}
			format chat
			model gpt-test
			input_price 2.5
			output_price 10
			context_limit 200000
			output_limit gpt-test 8000
			context_limit other-model 32000
		}
	}`)
	var in Instance
	if err := in.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := Provider{Connection: "conn_1", APIKey: "{env.AGENTGATE_API_KEY}", Format: "chat", Model: "gpt-test", InputPrice: "2.5", OutputPrice: "10",
		Limits: map[string]ModelLimits{"gpt-test": {Context: 200000, Output: 8000}, "other-model": {Context: 32000}}}
	if in.Provider == nil || !reflect.DeepEqual(*in.Provider, want) {
		t.Fatalf("provider %+v", in.Provider)
	}
	for _, bad := range []string{
		"agent_instance {\n provider {\n format bogus\n }\n}",
		"agent_instance {\n provider {\n nope x\n }\n}",
		"agent_instance {\n provider {\n }\n provider {\n }\n}",
	} {
		var in Instance
		if err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Fatalf("accepted %q", bad)
		}
	}
	t.Setenv("AGENT_INSTANCE_TEST_KEY", "sk-test")
	t.Setenv("AGENT_INSTANCE_TEST_EMPTY", "")
	repl := caddy.NewReplacer()
	pc, err := (&Provider{BaseURL: "http://127.0.0.1:1/custom/c", APIKey: "{env.AGENT_INSTANCE_TEST_KEY}", InputPrice: "2.5"}).config(repl)
	if err != nil || pc.APIKey != "sk-test" || pc.InputPrice != 2_500_000 || pc.Format != "chat" {
		t.Fatalf("config %+v %v", pc, err)
	}
	for _, p := range []Provider{{}, {BaseURL: "ftp://x"}, {BaseURL: "http://x", APIKey: "{env.AGENT_INSTANCE_TEST_EMPTY}"},
		{BaseURL: "http://x", InputPrice: "-1"}, {BaseURL: "http://x", Format: "gemini"}} {
		if _, err := p.config(repl); err == nil {
			t.Fatalf("accepted %+v", p)
		}
	}
	// A provisioned instance with a provider drains through a runner that
	// learns its own address from the requests it serves.
	in2 := provision(t, &Instance{Name: t.Name(), Provider: &Provider{Connection: "conn_1"}})
	if in2.runner == nil {
		t.Fatal("no runner")
	}
	req := httptest.NewRequest("GET", "/api/session/active", nil)
	req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4zero, Port: 8123}))
	in2.ServeHTTP(httptest.NewRecorder(), req, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	if got := in2.runner.ProviderBaseURL(); got != "http://127.0.0.1:8123/custom/conn_1" {
		t.Fatalf("base URL %q", got)
	}
}

func TestToolSettingsCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`agent_instance {
		permission bash "go test *" allow
		permission edit secrets/* deny
		webfetch_private
		bash_timeout 30s
		max_steps 20
	}`)
	var in Instance
	if err := in.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := []agents.PermissionRule{{Action: "bash", Resource: "go test *", Effect: "allow"}, {Action: "edit", Resource: "secrets/*", Effect: "deny"}}
	if !reflect.DeepEqual(in.Permissions, want) || !in.WebfetchPrivate || time.Duration(in.BashTimeout) != 30*time.Second || in.MaxSteps != 20 {
		t.Fatalf("parsed %+v", in)
	}
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"agent_instance {\n permission bash x maybe\n}",
		"agent_instance {\n permission bash\n}",
		"agent_instance {\n bash_timeout -1s\n}",
		"agent_instance {\n bash_timeout soon\n}",
		"agent_instance {\n max_steps 0\n}",
		"agent_instance {\n webfetch_private yes\n}",
		"agent_instance {\n provider {\n context_limit 1000\n }\n}",
		"agent_instance {\n provider {\n output_limit m abc\n }\n}",
		"agent_instance {\n provider {\n context_limit m 10 20\n }\n}",
	} {
		var in Instance
		if err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, in := range []Instance{
		{Permissions: []agents.PermissionRule{{Action: "bash", Resource: "*", Effect: "maybe"}}},
		{Permissions: []agents.PermissionRule{{Action: "", Resource: "*", Effect: "allow"}}},
		{MaxSteps: -1},
		{BashTimeout: caddy.Duration(time.Hour)},
	} {
		if err := in.Validate(); err == nil {
			t.Errorf("%+v validated", in)
		}
	}
	p := Provider{BaseURL: "http://127.0.0.1:1/v1", Limits: map[string]ModelLimits{"m": {Context: 100, Output: 100}}}
	if _, err := p.config(caddy.NewReplacer()); err == nil {
		t.Error("an output limit not below the context limit was accepted")
	}
}

func TestTrustProjectPermissionsCaddyfile(t *testing.T) {
	var in Instance
	if err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser("agent_instance {\n trust_project_permissions\n}")); err != nil {
		t.Fatal(err)
	}
	if !in.TrustProjectPermissions {
		t.Fatal("trust_project_permissions not set")
	}
	var off Instance
	if err := off.UnmarshalCaddyfile(caddyfile.NewTestDispenser("agent_instance {\n permission bash * allow\n}")); err != nil || off.TrustProjectPermissions {
		t.Fatalf("trusted without the subdirective: %v %+v", err, off)
	}
	if err := new(Instance).UnmarshalCaddyfile(caddyfile.NewTestDispenser("agent_instance {\n trust_project_permissions yes\n}")); err == nil {
		t.Error("trust_project_permissions took an argument")
	}
}

// cors_origins: parsed from the Caddyfile, checked by Validate, and given
// to the server, which answers a listed origin with CORS headers and
// refuses any other; Caddy's trusted-proxy verdict decides whose
// forwarded client address counts for the no-password loopback rule.
func TestCORSOriginsAndTrustedProxy(t *testing.T) {
	var parsed Instance
	if err := parsed.UnmarshalCaddyfile(caddyfile.NewTestDispenser("agent_instance {\n cors_origins https://app.example http://localhost:3000\n}")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(parsed.CORSOrigins, []string{"https://app.example", "http://localhost:3000"}) {
		t.Fatalf("parsed %q", parsed.CORSOrigins)
	}
	for _, bad := range []string{"agent_instance {\n cors_origins\n}", "agent_instance {\n cors_origins null\n}",
		"agent_instance {\n cors_origins app.example\n}", "agent_instance {\n cors_origins https://app.example/ui\n}"} {
		var in Instance
		if err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if err := (&Instance{CORSOrigins: []string{"*"}}).Validate(); err == nil {
		t.Error("cors_origins * validated")
	}

	in := provision(t, &Instance{Name: t.Name(), CORSOrigins: parsed.CORSOrigins})
	r := serve(t, in, "GET", "/api/info", "Origin", "https://app.example", "Sec-Fetch-Site", "cross-site")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("listed origin: %d %v %s", r.status, r.header, r.body)
	}
	r = serve(t, in, "OPTIONS", "/api/session", "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("preflight: %d %v %s", r.status, r.header, r.body)
	}
	if r := serve(t, in, "GET", "/api/info", "Origin", "https://other.example"); r.status != 403 {
		t.Fatalf("other origin: %d %s", r.status, r.body)
	}

	// A loopback peer Caddy trusts as a proxy, forwarding a remote client:
	// refused without a password; the same client address from a peer
	// Caddy does not trust is not believed.
	from := func(trusted bool) result {
		req := httptest.NewRequest("GET", "/api/info", nil)
		req.RemoteAddr, req.Host = "127.0.0.1:41234", "localhost:4096"
		vars := map[string]any{caddyhttp.ClientIPVarKey: "203.0.113.9", caddyhttp.TrustedProxyVarKey: trusted}
		req = req.WithContext(context.WithValue(req.Context(), caddyhttp.VarsCtxKey, vars))
		rec := httptest.NewRecorder()
		if err := in.ServeHTTP(rec, req, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })); err != nil {
			t.Fatal(err)
		}
		return result{status: rec.Code, body: rec.Body.String()}
	}
	if r := from(true); r.status != 403 {
		t.Fatalf("trusted proxy forwarding a remote client: %d %s", r.status, r.body)
	}
	if r := from(false); r.status != 200 {
		t.Fatalf("untrusted peer: %d %s", r.status, r.body)
	}
}

// sendJSON serves a request with a JSON body from the loopback.
func sendJSON(t *testing.T, in *Instance, method, target, body string) result {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.RemoteAddr, req.Host = "127.0.0.1:41234", "localhost:4096"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })
	if err := in.ServeHTTP(rec, req, next); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	return result{status: rec.Code, body: rec.Body.String(), header: rec.Header()}
}

// Without a provider block a prompt is admitted and its turn fails at
// once with an error message that says how to configure one; the session
// goes idle and answers the next prompt the same way.
func TestNoProviderSaysWhy(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	ctx := provisionCtx(t)
	app, err := ctx.App("agentgate")
	if err != nil {
		t.Fatal(err)
	}
	if err := app.(caddy.App).Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.(caddy.App).Stop() })
	in := &Instance{Name: t.Name(), Directory: dir}
	if err := in.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Cleanup() })
	if r := sendJSON(t, in, "POST", "/api/session", `{"id":"ses_np"}`); r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for n := 1; n <= 2; n++ {
		if r := sendJSON(t, in, "POST", "/api/session/ses_np/prompt", `{"text":"hello"}`); r.status != 200 {
			t.Fatalf("prompt %d: %d %s", n, r.status, r.body)
		}
		var errs []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := serve(t, in, "GET", "/api/session/ses_np/message")
			var out struct {
				Data []struct {
					Type    string `json:"type"`
					Outcome string `json:"outcome"`
					Error   *struct{ Type, Message string }
				}
			}
			json.Unmarshal([]byte(r.body), &out)
			errs = nil
			idles := 0
			for _, m := range out.Data {
				if m.Type == "assistant" && m.Error != nil {
					errs = append(errs, m.Error.Message)
				}
				if m.Type == "idle" && m.Outcome == "failed" {
					idles++
				}
			}
			if len(errs) == n && idles == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("prompt %d: no error message and idle marker: %d %s", n, r.status, r.body)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !strings.Contains(errs[n-1], "no model to answer with") || !strings.Contains(errs[n-1], "`provider` block") {
			t.Fatalf("prompt %d: error %q", n, errs[n-1])
		}
	}
}

// workspace, model and title_model: parsed; workspace and a provider
// block, a model without a workspace, or a title model with neither are
// refused naming them.
func TestWorkspaceCaddyfile(t *testing.T) {
	var in Instance
	if err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser("agent_instance {\n workspace default\n model smart\n title_model small\n}")); err != nil {
		t.Fatal(err)
	}
	if in.Workspace != "default" || in.Model != "smart" || in.TitleModel != "small" || in.Provider != nil {
		t.Fatalf("parsed %+v", in)
	}
	in = Instance{}
	if err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser("agent_instance {\n title_model small\n provider {\n base_url http://127.0.0.1:1/v1\n model big\n }\n}")); err != nil {
		t.Fatal(err)
	}
	if in.TitleModel != "small" || in.Provider == nil || in.Provider.Model != "big" {
		t.Fatalf("parsed %+v", in)
	}
	for bad, want := range map[string]string{
		"agent_instance {\n workspace default\n provider {\n base_url http://127.0.0.1:1/v1\n }\n}": "`workspace` or a `provider` block, not both",
		"agent_instance {\n model smart\n}":       "needs `workspace`",
		"agent_instance {\n title_model small\n}": "needs `workspace` or a `provider` block",
		"agent_instance {\n title_model a b\n}":   "wrong argument count",
		"agent_instance {\n workspace\n}":         "wrong argument count",
		"agent_instance {\n workspace a b\n}":     "wrong argument count",
	} {
		var in Instance
		err := in.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", bad, err, want)
		}
	}
	if err := (&Instance{Workspace: "w", Provider: &Provider{BaseURL: "http://x"}}).Validate(); err == nil {
		t.Error("workspace and provider validated")
	}
}

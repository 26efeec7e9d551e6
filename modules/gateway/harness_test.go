package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/agentgate/agentgate"
	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
	"github.com/agentgate/agentgate/modules/agentgate"
)

// env is one running Caddy (in this process) with the gateway and the
// Console on one loopback site, a fake provider per kind, and a workspace
// with a key for each permission.
type env struct {
	base string // http://127.0.0.1:port
	// tight is a second site whose gateway gives a request's attempts
	// 300 ms in all (fallback_deadline), no cool-down to speak of, and a
	// provider 300 ms to answer once the client left (disconnect_grace).
	tight string
	// patient is a third site whose gateway has the defaults: a target
	// has 30 s to answer (try_timeout), where the first site gives 500 ms.
	patient   string
	svc       *service.Service
	ws        string
	otherWS   string
	key       string // inference key
	allKey    string
	otherKey  string // key of another workspace
	providers map[string]*fakeprovider.Provider
	conns     map[string]string // kind → connection id
	logPath   string
}

const providerSecret = "sk-provider-SECRET-0123456789"

var theEnv *env

// harnessDir holds everything the in-process Caddy of this package writes:
// the agentgate store, the log, Caddy's storage and its config and data
// directories. It is removed when the tests end.
var harnessDir string

func TestMain(m *testing.M) {
	var err error
	if harnessDir, err = testenv.IsolateCaddy("agentgate-gateway-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	caddy.Stop()
	os.RemoveAll(harnessDir)
	os.Exit(code)
}

func freePort(t testing.TB) int { return freePorts(t, 1)[0] }

// freePorts returns n different free loopback ports: their listeners are
// all open while they are chosen, so the kernel cannot hand out one twice.
func freePorts(t testing.TB, n int) []int {
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// setup starts the shared environment once per test binary.
func setup(t testing.TB) *env {
	t.Helper()
	if theEnv != nil {
		for _, p := range theEnv.providers {
			p.Reset()
		}
		return theEnv
	}
	dir := harnessDir
	ports := freePorts(t, 3)
	port, tightPort, patientPort := ports[0], ports[1], ports[2]
	logPath := dir + "/caddy.log"
	tlsProvider, certPEM, err := fakeprovider.StartTLS(providerSecret)
	if err != nil {
		t.Fatal(err)
	}
	caFile := dir + "/provider-ca.pem"
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{
		"admin": {"disabled": true, "config": {"persist": false}},
		"storage": {"module": "file_system", "root": %q},
		"logging": {"logs": {"default": {"writer": {"output": "file", "filename": %q}, "level": "DEBUG",
			"encoder": {"format": "json"}}}},
		"apps": {
			"agentgate": {"storage": {"path": %q}},
			"http": {"servers": {"gw": {
				"listen": ["127.0.0.1:%d"],
				"logs": {},
				"expected_underscore_headers": ["session_id"],
				"routes": [{"handle": [
					{"handler": "llm_gateway", "max_request_body": 12582912, "tls_trusted_ca_certs": [%q], "try_timeout": "500ms"},
					{"handler": "workspace_console"}
				]}]
			}, "tight": {
				"listen": ["127.0.0.1:%d"],
				"routes": [{"handle": [{"handler": "llm_gateway", "try_timeout": "10s", "fallback_deadline": "300ms", "cooldown": "1ms",
					"disconnect_grace": "300ms"}]}]
			}, "patient": {
				"listen": ["127.0.0.1:%d"],
				"routes": [{"handle": [{"handler": "llm_gateway"}]}]
			}}}
		}
	}`, dir+"/caddy-storage", logPath, dir+"/data", port, caFile, tightPort, patientPort)
	if err := caddy.Load([]byte(cfg), true); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	v, err := caddy.ActiveContext().App("agentgate")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := v.(*agentgate.App).Service(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{base: fmt.Sprintf("http://127.0.0.1:%d", port), tight: fmt.Sprintf("http://127.0.0.1:%d", tightPort),
		patient: fmt.Sprintf("http://127.0.0.1:%d", patientPort), svc: svc, providers: map[string]*fakeprovider.Provider{},
		conns: map[string]string{}, logPath: logPath}
	ctx := context.Background()
	w, _ := svc.CreateWorkspace(ctx, "Acme")
	other, _ := svc.CreateWorkspace(ctx, "Other")
	e.ws, e.otherWS = w.ID, other.ID
	op := service.Operator(w.ID)
	sa, _ := svc.CreateServiceAccount(ctx, op, "ci")
	k, _ := svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "inf", Permission: store.PermissionInference})
	ka, _ := svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "all", Permission: store.PermissionAll})
	e.key, e.allKey = k.Key, ka.Key
	osa, _ := svc.CreateServiceAccount(ctx, service.Operator(other.ID), "x")
	ok, _ := svc.CreateKey(ctx, service.Operator(other.ID), osa.ID, service.NewKey{Name: "x", Permission: store.PermissionAll})
	e.otherKey = ok.Key

	no := false
	price := store.Pricing{Input: money.Micros(2_500_000), Output: money.Micros(10_000_000)}
	models := map[string]map[string]service.ModelInput{
		store.KindOpenAI:    {"gpt-4o": {UpstreamID: "gpt-4o-2024-08-06", Pricing: &price}, "gpt-4o-mini": {Pricing: &price}, "o1": {Enabled: &no}},
		store.KindAnthropic: {"claude-sonnet": {UpstreamID: "claude-sonnet-4-5-20250929", Pricing: &price}, "claude-off": {Enabled: &no}},
		store.KindGoogle:    {"gemini-pro": {UpstreamID: "gemini-2.5-pro", Pricing: &price}, "gemini-flash": {}},
	}
	for kind, ms := range models {
		p, err := fakeprovider.Start(providerSecret)
		if err != nil {
			t.Fatal(err)
		}
		e.providers[kind] = p
		basePath := "/v1"
		if kind == store.KindGoogle {
			basePath = "/v1beta"
		}
		c, err := svc.CreateConnection(ctx, op, service.ConnectionInput{Name: kind, Kind: kind, BaseURL: p.URL + basePath,
			Credential: providerSecret, Models: ms, Headers: map[string]string{"X-Team": "agents"}})
		if err != nil {
			t.Fatal(err)
		}
		e.conns[kind] = c.ID
	}
	tc, err := svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "tls", Kind: store.KindOpenAI, BaseURL: tlsProvider.URL + "/v1",
		Credential: providerSecret, Models: map[string]service.ModelInput{"gpt-4o": {}}})
	if err != nil {
		t.Fatal(err)
	}
	e.providers["tls"], e.conns["tls"] = tlsProvider, tc.ID
	theEnv = e
	return e
}

// post sends a gateway request; headers are name, value pairs.
func (e *env) post(t *testing.T, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	return e.do(t, "POST", path, body, append([]string{"Content-Type", "application/json"}, hdr...)...)
}

// do sends a gateway request with any method; headers are name, value pairs.
func (e *env) do(t *testing.T, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func jsonField(t *testing.T, body, path string) any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, body)
	}
	var cur any = v
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// TestHarnessWritesOnlyItsTempDir runs gateway tests (Caddy in this
// process, the store, the log, a streamed and a metered request) with an
// empty home and empty XDG and temporary directories: afterwards all stay
// empty.
func TestHarnessWritesOnlyItsTempDir(t *testing.T) {
	testenv.RunIsolated(t, "^(TestChatForwardedWithSwapAndRewrite|TestUsageOfEveryFormat|TestHTTPSUpstream)$")
}

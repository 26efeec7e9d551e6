package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	_ "github.com/agentgate/agentgate"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
	"github.com/agentgate/agentgate/modules/agentgate"
)

var harnessDir string

func TestMain(m *testing.M) {
	var err error
	if harnessDir, err = testenv.IsolateCaddy("agentgate-console-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	caddy.Stop()
	os.RemoveAll(harnessDir)
	os.Exit(code)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// load runs Caddy in this process with the gateway and the Console on one
// loopback site; telemetry is the console's "telemetry" JSON, or "".
func load(t *testing.T, port int, telemetry string) *service.Service {
	t.Helper()
	console := `{"handler": "workspace_console"}`
	if telemetry != "" {
		console = `{"handler": "workspace_console", "console_url": "https://console.example.com", "telemetry": ` + telemetry + `}`
	}
	cfg := fmt.Sprintf(`{
		"admin": {"disabled": true, "config": {"persist": false}},
		"storage": {"module": "file_system", "root": %q},
		"logging": {"logs": {"default": {"writer": {"output": "discard"}}}},
		"apps": {
			"agentgate": {"storage": {"path": %q}},
			"http": {"servers": {"site": {"listen": ["127.0.0.1:%d"], "routes": [{"handle": [{"handler": "llm_gateway"}, %s]}]}}}
		}
	}`, harnessDir+"/caddy-storage", harnessDir+"/data", port, console)
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
	return svc
}

func get(t *testing.T, url, token string) (int, map[string]any) {
	t.Helper()
	r, _ := http.NewRequest("GET", url, nil)
	r.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v map[string]any
	b, _ := io.ReadAll(res.Body)
	json.Unmarshal(b, &v)
	return res.StatusCode, v
}

// TestTelemetryThroughTheSite: with a collector configured, the managed
// settings point members' CLIs at the Console's origin (console_url), and
// an export sent there reaches the collector stamped, with the header the
// Caddyfile resolved from a placeholder; without one, they do not ask for
// telemetry.
func TestTelemetryThroughTheSite(t *testing.T) {
	got := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer col.Close()
	t.Setenv("AGENTGATE_TEST_COLLECTOR_TOKEN", "collector-SECRET")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	svc := load(t, port, `{"otlp_endpoint": "`+col.URL+`", "headers": {"Authorization": "Bearer {env.AGENTGATE_TEST_COLLECTOR_TOKEN}"}}`)

	ctx := context.Background()
	ws, _ := svc.CreateWorkspace(ctx, "Acme")
	if err := svc.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutPerson(&store.Person{ID: "usr_bo", Email: "bo@example.com", Name: "Bo", PasswordHash: "x"}); err != nil {
			return err
		}
		return tx.PutMember(&store.Member{Workspace: ws.ID, PersonID: "usr_bo", Role: store.RoleMember})
	}); err != nil {
		t.Fatal(err)
	}
	tok, err := svc.IssuePersonToken(ctx, "usr_bo", ws.ID, "claude-code")
	if err != nil {
		t.Fatal(err)
	}

	status, v := get(t, base+"/managed/settings", tok.AccessToken)
	env, _ := v["settings"].(map[string]any)["env"].(map[string]any)
	if status != 200 || env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "https://console.example.com" || env["CLAUDE_CODE_ENABLE_TELEMETRY"] != "1" ||
		env["OTEL_EXPORTER_OTLP_PROTOCOL"] != "http/protobuf" {
		t.Fatalf("managed settings with a collector: %d %v", status, v)
	}

	body, _ := proto.Marshal(&colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{}}})
	r, _ := http.NewRequest("POST", base+"/v1/metrics", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/x-protobuf")
	r.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	res, err := http.DefaultClient.Do(r)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %v %v", res, err)
	}
	res.Body.Close()
	select {
	case req := <-got:
		if req.URL.Path != "/v1/metrics" || req.Header.Get("Authorization") != "Bearer collector-SECRET" {
			t.Fatalf("the collector got %s with Authorization %q", req.URL.Path, req.Header.Get("Authorization"))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the collector received nothing")
	}
	var m colmetrics.ExportMetricsServiceRequest
	if err := proto.Unmarshal(<-bodies, &m); err != nil {
		t.Fatal(err)
	}
	stamped := map[string]string{}
	for _, kv := range m.ResourceMetrics[0].GetResource().GetAttributes() {
		stamped[kv.Key] = kv.Value.GetStringValue()
	}
	if stamped["agentgate.member.id"] != "usr_bo" || stamped["agentgate.workspace.id"] != ws.ID || stamped["agentgate.member.email"] != "bo@example.com" {
		t.Fatalf("the collector's resource: %v", stamped)
	}

	// Without a collector: exports are taken and dropped, and the CLIs are
	// not asked to send any.
	svc = load(t, port, "")
	tok, _ = svc.IssuePersonToken(ctx, "usr_bo", ws.ID, "claude-code")
	status, v = get(t, base+"/managed/settings", tok.AccessToken)
	if status != 204 {
		t.Fatalf("managed settings without a collector or anything else: %d %v", status, v)
	}
	r, _ = http.NewRequest("POST", base+"/v1/metrics", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/x-protobuf")
	r.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	if res, err := http.DefaultClient.Do(r); err != nil || res.StatusCode != 200 {
		t.Fatalf("export without a collector: %v %v", res, err)
	}
	select {
	case req := <-got:
		t.Fatalf("the collector got %s after its removal", req.URL.Path)
	default:
	}
}

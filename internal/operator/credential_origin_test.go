package operator_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/operator"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/testenv"
)

// TestCredentialFollowsOrigin: the operator too needs a new credential to
// move a connection's credential to another origin or header, and reads
// the audit trail of the accepted changes.
func TestCredentialFollowsOrigin(t *testing.T) {
	te := testenv.New(t, time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(operator.New(func(context.Context) (*service.Service, error) { return te.Service, nil }))
	t.Cleanup(srv.Close)

	ws := do(t, srv, "POST", "/agentgate/workspaces", `{"name": "acme"}`).body["data"].(map[string]any)["id"].(string)
	wp := "/agentgate/workspaces/" + ws
	c := do(t, srv, "POST", wp+"/connections", `{"name": "up", "kind": "openai", "base_url": "https://api.openai.com/v1", "credential": "sk-operator-SECRET"}`)
	id := c.body["data"].(map[string]any)["id"].(string)
	cp := wp + "/connections/" + id

	baseURL := func() string {
		t.Helper()
		for _, it := range do(t, srv, "GET", wp+"/connections", "").body["data"].([]any) {
			if m := it.(map[string]any); m["id"] == id {
				return m["base_url"].(string)
			}
		}
		t.Fatal("the connection is gone")
		return ""
	}

	a := do(t, srv, "PATCH", cp, `{"base_url": "http://attacker.example/v1"}`)
	if a.status != 400 || a.body["_tag"] != "InvalidRequest" || !strings.Contains(a.raw, "needs a new credential: the stored one is bound to https://api.openai.com") {
		t.Fatalf("origin change without a credential: %d %s", a.status, a.raw)
	}
	if got := baseURL(); got != "https://api.openai.com/v1" {
		t.Fatalf("a refused change moved the base URL to %s", got)
	}
	if a := do(t, srv, "PATCH", cp, `{"kind": "google"}`); a.status != 400 || !strings.Contains(a.raw, "needs a new credential") {
		t.Fatalf("kind change without a credential: %d %s", a.status, a.raw)
	}
	if a := do(t, srv, "PATCH", cp, `{"base_url": "https://api.openai.com/v2"}`); a.status != 200 || baseURL() != "https://api.openai.com/v2" {
		t.Fatalf("same-origin path change: %d %s", a.status, a.raw)
	}
	if a := do(t, srv, "GET", cp+"/audit", ""); a.status != 200 || strings.TrimSpace(a.raw) != `{"data":[]}` {
		t.Fatalf("empty audit trail: %d %s", a.status, a.raw)
	}
	if a := do(t, srv, "PATCH", cp, `{"base_url": "https://gateway.internal:8443/openai", "credential": "sk-new"}`); a.status != 200 || strings.Contains(a.raw, "sk-new") {
		t.Fatalf("origin change with a credential: %d %s", a.status, a.raw)
	}
	a = do(t, srv, "GET", cp+"/audit", "")
	list, _ := a.body["data"].([]any)
	if a.status != 200 || len(list) != 1 || strings.Contains(a.raw, "sk-") {
		t.Fatalf("audit trail: %d %s", a.status, a.raw)
	}
	e := list[0].(map[string]any)
	if e["actor_kind"] != "operator" || e["old_origin"] != "https://api.openai.com" || e["new_origin"] != "https://gateway.internal:8443" || e["time"] == nil {
		t.Fatalf("audit entry %v", e)
	}
	if a := do(t, srv, "GET", wp+"/connections/conn_nope/audit", ""); a.status != 404 {
		t.Fatalf("audit of an unknown connection: %d %s", a.status, a.raw)
	}
}

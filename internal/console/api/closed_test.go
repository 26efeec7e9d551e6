package api_test

import (
	"testing"

	"github.com/agentgate/agentgate/internal/store"
)

// A store closed under a request (shutdown) answers 503, never a 500.
func TestClosedStoreAnswers503(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("Acme")
	key := e.key(ws, e.serviceAccount(ws), store.PermissionAll)
	if r := e.do(req{method: "GET", path: "/api/v2/config", cred: key}); r.status != 200 {
		t.Fatalf("before close: %d %s", r.status, r.raw)
	}
	e.st.Close()
	r := e.do(req{method: "GET", path: "/api/v2/config", cred: key})
	if r.status != 503 || r.json["_tag"] != "ServiceUnavailable" {
		t.Fatalf("after close: %d %s", r.status, r.raw)
	}
}

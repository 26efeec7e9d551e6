package gateway_test

import (
	"context"
	"testing"

	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// TestClaudeCodeRoutesOnTheSharedSite: with the gateway and the Console
// on one site, /v1/metrics, /v1/logs and /v1/traces reach the Console's
// telemetry relay (a signed-in person's export is taken, a key's is
// refused by the relay, not answered by the Inference API), while the
// Inference API keeps /v1/models; /managed/settings is the Console's.
func TestClaudeCodeRoutesOnTheSharedSite(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	id := secrets.NewID("usr_")
	if err := e.svc.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutPerson(&store.Person{ID: id, Email: id + "@example.com", Name: "Telemetry", PasswordHash: "x"}); err != nil {
			return err
		}
		return tx.PutMember(&store.Member{Workspace: e.ws, PersonID: id, Role: store.RoleMember})
	}); err != nil {
		t.Fatal(err)
	}
	tok, err := e.svc.IssuePersonToken(ctx, id, e.ws, "claude-code")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/metrics", "/v1/logs", "/v1/traces"} {
		resp, body := e.post(t, path, `{}`, "Authorization", "Bearer "+tok.AccessToken)
		if resp.StatusCode != 200 || body != "{}" {
			t.Errorf("%s with a person's token: %d %s", path, resp.StatusCode, body)
		}
		resp, body = e.post(t, path, `{}`, "Authorization", "Bearer "+e.allKey)
		if resp.StatusCode != 403 || jsonField(t, body, "_tag") != "Forbidden" || jsonField(t, body, "code") != 7.0 {
			t.Errorf("%s with a key: %d %s", path, resp.StatusCode, body)
		}
	}
	resp, body := e.do(t, "GET", "/v1/models", "", "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 || jsonField(t, body, "object") != "list" {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, body)
	}
	resp, body = e.do(t, "GET", "/managed/settings", "", "Authorization", "Bearer "+tok.AccessToken)
	if resp.StatusCode != 200 && resp.StatusCode != 204 {
		t.Fatalf("/managed/settings: %d %s", resp.StatusCode, body)
	}
	resp, _ = e.do(t, "GET", "/managed/settings", "", "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 403 {
		t.Fatalf("/managed/settings with a key: %d", resp.StatusCode)
	}
}

package web_test

import (
	"net/http"
	"testing"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// TestConnectionEditFollowsOrigin: the connection edit form refuses to move
// the stored credential to another origin or header (the refusal shows on
// the form, the connection unchanged) and accepts the move with a new key;
// owners see the change in the connection's audit list.
func TestConnectionEditFollowsOrigin(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("W")
	_, ownerEmail := e.person(ws, store.RoleOwner)
	_, adminEmail := e.person(ws, store.RoleAdmin)
	conn, err := e.svc.CreateConnection(ctx, service.Operator(ws), service.ConnectionInput{Name: "OpenAI prod", Kind: store.KindOpenAI,
		BaseURL: "https://api.openai.com/v1", Credential: "sk-SECRET-credential"})
	if err != nil {
		t.Fatal(err)
	}
	stored := func() *service.ConnectionView {
		t.Helper()
		cv, err := e.svc.Connection(ctx, service.Operator(ws), conn.ID)
		if err != nil {
			t.Fatal(err)
		}
		return cv
	}
	b, tok := e.signedIn(adminEmail)
	w := "/w/" + ws + "/connections"
	p := b.get(w)
	wantStatus(t, "connections", p, 200)
	wantContains(t, "connections", p, `action="`+w+"/"+conn.ID+`"`, `name="base_url" type="url" required value="https://api.openai.com/v1"`)
	wantNotContains(t, "connections (admin)", p, "Where the provider API key went")

	p = b.post(w+"/"+conn.ID, form(tok, "name", "OpenAI prod", "kind", "openai", "base_url", "http://attacker.example/v1"))
	wantStatus(t, "origin change without a key", p, http.StatusBadRequest)
	wantContains(t, "origin change without a key", p, `role="alert"`,
		"changing the base URL&#39;s origin needs a new credential: the stored one is bound to https://api.openai.com",
		`value="http://attacker.example/v1"`, "<details open>")
	wantNotContains(t, "origin change without a key", p, "sk-SECRET")
	if cv := stored(); cv.BaseURL != "https://api.openai.com/v1" {
		t.Fatalf("a refused edit moved the base URL to %s", cv.BaseURL)
	}

	p = b.post(w+"/"+conn.ID, form(tok, "name", "OpenAI prod", "kind", "anthropic", "base_url", "https://api.openai.com/v1"))
	wantStatus(t, "kind change without a key", p, http.StatusBadRequest)
	wantContains(t, "kind change without a key", p, "needs a new credential")
	if cv := stored(); cv.Kind != store.KindOpenAI {
		t.Fatalf("a refused edit changed the kind to %s", cv.Kind)
	}

	p = b.post(w+"/"+conn.ID, form(tok, "name", "OpenAI prod", "kind", "openai", "base_url", "https://api.openai.com/v2"))
	wantStatus(t, "same-origin path change", p, http.StatusSeeOther)
	if cv := stored(); cv.BaseURL != "https://api.openai.com/v2" {
		t.Fatalf("base URL %s", cv.BaseURL)
	}

	p = b.post(w+"/"+conn.ID, form(tok, "name", "Via proxy", "kind", "openai", "base_url", "https://proxy.example:8443/v1", "credential", "sk-proxy-NEW"))
	wantStatus(t, "origin change with a key", p, http.StatusSeeOther)
	wantContains(t, "after the change", b.get(p.location()), "Connection saved.", "Via proxy", "https://proxy.example:8443/v1")
	if cv := stored(); cv.BaseURL != "https://proxy.example:8443/v1" || cv.Name != "Via proxy" {
		t.Fatalf("after the accepted edit: %+v", cv)
	}

	ob, _ := e.signedIn(ownerEmail)
	p = ob.get(w)
	wantContains(t, "connections (owner)", p, "Where the provider API key went: 1 change", "https://api.openai.com</code> → <code>https://proxy.example:8443", "member <code>usr_")
	wantNotContains(t, "connections (owner)", p, "sk-SECRET", "sk-proxy-NEW")
}

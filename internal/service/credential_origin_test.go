package service_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func TestOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://api.openai.com/v1":          "https://api.openai.com",
		"HTTPS://API.OpenAI.com:443/v1/x":    "https://api.openai.com",
		"http://localhost:80":                "http://localhost",
		"http://127.0.0.1:8080/v1":           "http://127.0.0.1:8080",
		"https://api.example.com:80/v1":      "https://api.example.com:80",
		"http://[::1]:9000/v1":               "http://[::1]:9000",
		"http://[::1]/v1":                    "http://[::1]",
		"https://generativelanguage.google/": "https://generativelanguage.google",
	} {
		got, err := service.Origin(in)
		if err != nil || got != want {
			t.Errorf("Origin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x", "/v1", "https://", "::"} {
		if got, err := service.Origin(bad); err == nil {
			t.Errorf("Origin(%q) = %q, want an error", bad, got)
		}
	}
}

// storedConn reads a connection's record and opens its credential.
func (e *env) storedConn(t *testing.T, id string) (*store.Connection, string) {
	t.Helper()
	var rec *store.Connection
	e.view(func(tx store.Tx) (err error) { rec, err = tx.Connection(id); return err })
	cred, err := e.svc.Credential(rec)
	noErr(t, "Credential", err)
	return rec, cred
}

func TestCredentialFollowsOrigin(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	all := e.principal(f.all.Key, "")
	owner := e.principal(f.ownTok, "")
	cv, err := e.svc.CreateConnection(ctx, all, connInput(store.KindOpenAI, nil))
	noErr(t, "CreateConnection", err)

	// Another origin without a credential: refused, nothing changes.
	for _, base := range []string{"http://attacker.example/v1", "https://api.example.com:8443/v1", "http://api.example.com/v1", "https://api.example.com.evil/v1"} {
		_, err = e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{BaseURL: ptr(base), Name: ptr("moved")})
		wantErr(t, "origin change to "+base, err, 400, "InvalidRequest")
		if msg := err.Error(); !strings.Contains(msg, "needs a new credential") || !strings.Contains(msg, "https://api.example.com") {
			t.Fatalf("the refusal does not name the rule: %s", msg)
		}
		rec, cred := e.storedConn(t, cv.ID)
		if rec.BaseURL != "https://api.example.com/v1" || rec.Name != "Upstream" || cred != credential {
			t.Fatalf("a refused change changed the connection: %s %s", rec.BaseURL, rec.Name)
		}
	}
	// The same origin, another path (and the default port spelled out): no credential needed, no audit entry.
	after, err := e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{BaseURL: ptr("https://API.example.com:443/v2")})
	noErr(t, "same-origin path change", err)
	if _, cred := e.storedConn(t, cv.ID); cred != credential {
		t.Fatal("a path change changed the credential")
	}
	trail, err := e.svc.ConnectionAudit(ctx, owner, cv.ID)
	noErr(t, "ConnectionAudit", err)
	if len(trail) != 0 {
		t.Fatalf("a same-origin change was audited: %+v", trail)
	}

	// With a new credential: accepted and audited.
	fresh := "sk-proxy-NEW-CREDENTIAL-for-the-proxy"
	after, err = e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{BaseURL: ptr("https://proxy.example:8443/openai/v1"), Credential: &fresh})
	noErr(t, "origin change with a new credential", err)
	if after.BaseURL != "https://proxy.example:8443/openai/v1" {
		t.Fatalf("base URL %s", after.BaseURL)
	}
	if _, cred := e.storedConn(t, cv.ID); cred != fresh {
		t.Fatal("the new credential was not stored")
	}
	trail, err = e.svc.ConnectionAudit(ctx, owner, cv.ID)
	noErr(t, "ConnectionAudit", err)
	if len(trail) != 1 {
		t.Fatalf("audit trail %+v, want one entry", trail)
	}
	c := trail[0]
	if c.ActorKind != "key" || c.ActorID != f.all.ID || c.ActorServiceAccount != f.sa || c.Connection != cv.ID ||
		c.OldOrigin != "https://api.example.com" || c.NewOrigin != "https://proxy.example:8443" ||
		c.OldKind != store.KindOpenAI || c.NewKind != store.KindOpenAI || c.Time.IsZero() || !strings.HasPrefix(c.ID, "cch_") {
		t.Fatalf("audit entry %+v", c)
	}
	raw, _ := json.Marshal(trail)
	for _, secret := range []string{credential, fresh} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Fatal("the credential appears in the audit trail")
		}
	}

	// Only owners read the trail.
	for name, p := range map[string]*service.Principal{"all key": all, "inference key": e.principal(f.inference.Key, ""),
		"member": e.principal(f.memberTok, ""), "admin": e.principal(f.adminTok, "")} {
		_, err := e.svc.ConnectionAudit(ctx, p, cv.ID)
		wantErr(t, name+" reads the audit trail", err, 403, "Forbidden")
	}
	_, err = e.svc.ConnectionAudit(ctx, owner, "conn_nope")
	wantErr(t, "audit trail of an unknown connection", err, 404, "ConnectionNotFound")
	other := e.fixture("other")
	_, err = e.svc.ConnectionAudit(ctx, e.principal(other.ownTok, ""), cv.ID)
	wantErr(t, "audit trail of another workspace's connection", err, 404, "ConnectionNotFound")

	// A person's change names the person; the operator's, the operator.
	admin := e.principal(f.adminTok, "")
	_, err = e.svc.UpdateConnection(ctx, admin, cv.ID, service.ConnectionPatch{BaseURL: ptr("https://api.example.com/v1"), Credential: ptr(credential)})
	noErr(t, "admin moves it back with a credential", err)
	_, err = e.svc.UpdateConnection(ctx, service.Operator(f.ws), cv.ID, service.ConnectionPatch{BaseURL: ptr("http://127.0.0.1:9/v1")})
	wantErr(t, "the operator moves it without a credential", err, 400, "InvalidRequest")
	_, err = e.svc.UpdateConnection(ctx, service.Operator(f.ws), cv.ID, service.ConnectionPatch{BaseURL: ptr("http://127.0.0.1:9/v1"), Credential: ptr("sk-local")})
	noErr(t, "the operator moves it with a credential", err)
	trail, _ = e.svc.ConnectionAudit(ctx, owner, cv.ID)
	if len(trail) != 3 || trail[1].ActorKind != "member" || trail[1].ActorID != f.admin || trail[2].ActorKind != "operator" ||
		trail[2].OldOrigin != "https://api.example.com" || trail[2].NewOrigin != "http://127.0.0.1:9" {
		t.Fatalf("audit trail %+v", trail)
	}
	// The store holds the trail but no credential in clear.
	rawStore := e.rawStore()
	if !bytes.Contains(rawStore, []byte("proxy.example:8443")) {
		t.Fatal("the raw scan does not find the audit trail: the scan is broken")
	}
	for _, secret := range []string{credential, fresh, "sk-local"} {
		if bytes.Contains(rawStore, []byte(secret)) {
			t.Fatalf("the store holds the credential %q in clear", secret)
		}
	}
}

func TestCredentialFollowsKindSlot(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	all := e.principal(f.all.Key, "")
	owner := e.principal(f.ownTok, "")
	cv, err := e.svc.CreateConnection(ctx, all, connInput(store.KindOpenAI, nil))
	noErr(t, "CreateConnection", err)

	for _, kind := range []string{store.KindAnthropic, store.KindGoogle} {
		_, err = e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{Kind: ptr(kind)})
		wantErr(t, "kind change to "+kind, err, 400, "InvalidRequest")
		if !strings.Contains(err.Error(), "needs a new credential") {
			t.Fatalf("the refusal does not name the rule: %v", err)
		}
		if rec, _ := e.storedConn(t, cv.ID); rec.Kind != store.KindOpenAI {
			t.Fatalf("a refused kind change changed the kind to %s", rec.Kind)
		}
	}
	_, err = e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{Kind: ptr("cobol")})
	wantErr(t, "unknown kind", err, 400, "InvalidRequest")

	// Same slot (Authorization: Bearer): accepted without a credential, audited.
	after, err := e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{Kind: ptr(store.KindOpenAICompatible)})
	noErr(t, "openai to openai-compatible", err)
	if after.Kind != store.KindOpenAICompatible {
		t.Fatalf("kind %s", after.Kind)
	}
	// Another slot with a new credential: accepted, audited.
	_, err = e.svc.UpdateConnection(ctx, all, cv.ID, service.ConnectionPatch{Kind: ptr(store.KindAnthropic), Credential: ptr("sk-ant-NEW")})
	noErr(t, "kind change with a credential", err)
	trail, err := e.svc.ConnectionAudit(ctx, owner, cv.ID)
	noErr(t, "ConnectionAudit", err)
	if len(trail) != 2 || trail[0].OldKind != store.KindOpenAI || trail[0].NewKind != store.KindOpenAICompatible ||
		trail[1].OldKind != store.KindOpenAICompatible || trail[1].NewKind != store.KindAnthropic ||
		trail[1].OldOrigin != trail[1].NewOrigin {
		t.Fatalf("audit trail %+v", trail)
	}

	// A kind whose model ids cannot carry the connection's models is refused.
	admin := e.principal(f.adminTok, "")
	_, err = e.svc.PutModel(ctx, admin, cv.ID, "org/model", service.ModelInput{})
	noErr(t, "PutModel", err)
	_, err = e.svc.UpdateConnection(ctx, admin, cv.ID, service.ConnectionPatch{Kind: ptr(store.KindGoogle), Credential: ptr("g-key")})
	wantErr(t, "google kind with a model id it cannot carry", err, 400, "InvalidRequest")
}

// Declared connections follow the Caddyfile: reconciliation may move their
// origin (the file brings the credential) and keeps working.
func TestReconcileMovesDeclaredOrigin(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	in := connInput(store.KindOpenAI, nil)
	in.ID = "conn_declared"
	_, err := e.svc.Reconcile(ctx, f.ws, in)
	noErr(t, "Reconcile", err)
	in.BaseURL, in.Credential = "https://other.example/v1", "sk-other"
	changed, err := e.svc.Reconcile(ctx, f.ws, in)
	noErr(t, "Reconcile moved", err)
	rec, cred := e.storedConn(t, in.ID)
	if !changed || rec.BaseURL != "https://other.example/v1" || cred != "sk-other" {
		t.Fatalf("reconcile: changed %v, %s", changed, rec.BaseURL)
	}
	_, err = e.svc.UpdateConnection(ctx, e.principal(f.all.Key, ""), in.ID, service.ConnectionPatch{BaseURL: ptr("http://attacker.example/v1")})
	wantErr(t, "a declared connection in the Console", err, 409, "Conflict")
}

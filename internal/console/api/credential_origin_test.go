package api_test

import (
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/store"
)

// TestHTTPCredentialFollowsOrigin: through PATCH /api/v1/connections/{id},
// a change of the base URL's origin or of the kind's credential slot needs
// a new credential; an accepted one is in GET …/audit, which owners read.
func TestHTTPCredentialFollowsOrigin(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	conn := e.connection(f.ws, store.KindOpenAI, nil)
	path := "/api/v1/connections/" + conn
	unchanged := func(what string) {
		t.Helper()
		r := e.do(req{method: "GET", path: path, cred: f.all})
		wantStatus(t, what+": GET", r, 200, "")
		if d := r.data(); d["base_url"] != "https://api.example.com" || d["kind"] != store.KindOpenAI || d["name"] != "Upstream" {
			t.Fatalf("%s: the connection changed: %s", what, r.raw)
		}
	}

	r := e.do(req{method: "PATCH", path: path, cred: f.all, body: `{"base_url": "http://attacker.example/v1", "name": "x"}`})
	wantStatus(t, "origin change without a credential", r, 400, "InvalidRequest")
	if msg, _ := r.json["message"].(string); msg != "changing the base URL's origin needs a new credential: the stored one is bound to https://api.example.com" {
		t.Fatalf("message %q", msg)
	}
	if strings.Contains(r.raw, "sk-upstream-SECRET") {
		t.Fatal("the refusal shows the credential")
	}
	unchanged("refused origin change")

	r = e.do(req{method: "PATCH", path: path, cred: f.all, body: `{"kind": "anthropic"}`})
	wantStatus(t, "kind change without a credential", r, 400, "InvalidRequest")
	if msg, _ := r.json["message"].(string); !strings.Contains(msg, "needs a new credential") {
		t.Fatalf("message %q", msg)
	}
	unchanged("refused kind change")

	r = e.do(req{method: "PATCH", path: path, cred: f.all, body: `{"base_url": "https://api.example.com:443/v1/"}`})
	wantStatus(t, "same-origin path change", r, 200, "")
	if d := r.data(); d["base_url"] != "https://api.example.com:443/v1" {
		t.Fatalf("after a path change: %s", r.raw)
	}

	r = e.do(req{method: "PATCH", path: path, cred: f.all, body: `{"base_url": "https://proxy.example:8443/v1", "credential": "sk-proxy-NEW"}`})
	wantStatus(t, "origin change with a credential", r, 200, "")
	if strings.Contains(r.raw, "sk-proxy-NEW") || r.data()["base_url"] != "https://proxy.example:8443/v1" {
		t.Fatalf("answer %s", r.raw)
	}

	r = e.do(req{method: "GET", path: path + "/audit", cred: f.ownTok})
	wantStatus(t, "owner reads the audit trail", r, 200, "")
	list := r.list()
	if len(list) != 1 || strings.Contains(r.raw, "sk-") {
		t.Fatalf("audit trail %s", r.raw)
	}
	a := list[0]
	if a["actor_kind"] != "key" || a["actor_id"] != f.all[6:18] || a["actor_service_account"] != f.sa || a["connection"] != conn ||
		a["old_origin"] != "https://api.example.com" || a["new_origin"] != "https://proxy.example:8443" ||
		a["old_kind"] != "openai" || a["new_kind"] != "openai" || a["time"] == nil {
		t.Fatalf("audit entry %s", r.raw)
	}
	for _, k := range []credKind{{"inference key", f.inference}, {"all key", f.all}, {"member", f.memberTok}, {"admin", f.adminTok}} {
		wantStatus(t, k.name+" reads the audit trail", e.do(req{method: "GET", path: path + "/audit", cred: k.cred}), 403, "Forbidden")
	}
	wantStatus(t, "audit of an unknown connection", e.do(req{method: "GET", path: "/api/v1/connections/conn_nope/audit", cred: f.ownTok}), 404, "ConnectionNotFound")

	// Malformed input is a clear 400.
	for _, body := range []string{`{"base_url": "ftp://x"}`, `{"kind": 7}`, `{"kind": "cobol", "credential": "k"}`, `{"base_url": "https://a:b@x/"}`} {
		wantStatus(t, "malformed "+body, e.do(req{method: "PATCH", path: path, cred: f.all, body: body}), 400, "")
	}
}

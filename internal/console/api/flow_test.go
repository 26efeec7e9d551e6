package api_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// TestDoneWhen: an owner creates a service account and an Inference only key
// through the API; the key value is shown once; the key reads the config but
// nothing of management; after its deletion it is refused.
func TestDoneWhen(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("acme")
	owner := e.person(ws, store.RoleOwner)
	tok := e.token(owner, ws)
	e.connection(ws, store.KindOpenAI, map[string]service.ModelInput{"gpt-4o": {}})

	r := e.do(req{method: "POST", path: "/api/v1/service-accounts", cred: tok, body: `{"name": "ci"}`})
	wantStatus(t, "create service account", r, 201, "")
	sa, _ := r.data()["id"].(string)
	if !strings.HasPrefix(sa, "sa_") || r.data()["name"] != "ci" || r.data()["created_by"] != owner {
		t.Fatalf("service account answer %s", r.raw)
	}

	r = e.do(req{method: "POST", path: "/api/v1/service-accounts/" + sa + "/keys", cred: tok, body: `{"name": "deploy", "permission": "inference"}`})
	wantStatus(t, "create key", r, 201, "")
	key, _ := r.data()["key"].(string)
	keyID, _ := r.data()["id"].(string)
	parsed, ok := secrets.ParseToken(key)
	if !ok || parsed.ID != keyID || r.data()["permission"] != "inference" || r.data()["service_account"] != sa {
		t.Fatalf("create key answer %s", r.raw)
	}
	secret := key[len("ag_sk_")+secrets.IDLen+1:]

	// The value never appears again.
	for _, path := range []string{"/api/v1/service-accounts/" + sa + "/keys", "/api/v1/service-accounts/" + sa, "/api/v1/service-accounts"} {
		r = e.do(req{method: "GET", path: path, cred: tok})
		wantStatus(t, "GET "+path, r, 200, "")
		if strings.Contains(r.raw, secret[:16]) || strings.Contains(r.raw, secret[16:]) || strings.Contains(r.raw, `"key"`) {
			t.Fatalf("GET %s shows the key value: %s", path, r.raw)
		}
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts/" + sa + "/keys", cred: tok})
	if l := r.list(); len(l) != 1 || l[0]["id"] != keyID || l[0]["display"] != "ag_sk_"+keyID+"_…" {
		t.Fatalf("key list %s", r.raw)
	}

	// The key reads the config, and nothing of management.
	r = e.do(req{method: "GET", path: "/api/v2/config", cred: key})
	wantStatus(t, "key reads config", r, 200, "")
	if strings.Contains(r.raw, secret) || strings.Contains(r.raw, "sk-upstream-SECRET") {
		t.Fatalf("config shows a secret: %s", r.raw)
	}
	providers, _ := r.json["providers"].(map[string]any)
	if len(providers) == 0 {
		t.Fatalf("config without providers: %s", r.raw)
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts", cred: key})
	wantStatus(t, "key lists service accounts", r, 403, "Forbidden")
	r = e.do(req{method: "POST", path: "/api/v1/connections", cred: key, body: `{"name": "x", "kind": "openai", "base_url": "https://x.example", "credential": "c"}`})
	wantStatus(t, "key creates a connection", r, 403, "Forbidden")
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts/" + sa + "/keys", cred: key, body: `{"name": "more", "permission": "all"}`})
	wantStatus(t, "key mints a key", r, 403, "Forbidden")

	// Revoked: 401 at once.
	r = e.do(req{method: "DELETE", path: "/api/v1/service-accounts/" + sa + "/keys/" + keyID, cred: tok})
	wantStatus(t, "delete key", r, 204, "")
	r = e.do(req{method: "GET", path: "/api/v2/config", cred: key})
	wantStatus(t, "revoked key reads config", r, 401, "Unauthorized")
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts/" + sa + "/keys", cred: tok})
	if l := r.list(); len(l) != 1 || l[0]["revoked_at"] == nil {
		t.Fatalf("revoked key in the list: %s", r.raw)
	}
	r = e.do(req{method: "DELETE", path: "/api/v1/service-accounts/" + sa + "/keys/nope", cred: tok})
	wantStatus(t, "delete unknown key", r, 404, "KeyNotFound")

	// Deleting the service account revokes the rest.
	r = e.do(req{method: "POST", path: "/api/v1/service-accounts/" + sa + "/keys", cred: tok, body: `{"name": "second", "permission": "all"}`})
	wantStatus(t, "second key", r, 201, "")
	second, _ := r.data()["key"].(string)
	wantStatus(t, "second key works", e.do(req{method: "GET", path: "/api/v2/config", cred: second}), 200, "")
	wantStatus(t, "delete service account", e.do(req{method: "DELETE", path: "/api/v1/service-accounts/" + sa, cred: tok}), 204, "")
	wantStatus(t, "key of deleted service account", e.do(req{method: "GET", path: "/api/v2/config", cred: second}), 401, "Unauthorized")
	wantStatus(t, "deleted service account", e.do(req{method: "GET", path: "/api/v1/service-accounts/" + sa, cred: tok}), 404, "ServiceAccountNotFound")
}

func TestConfigOverHTTP(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	conn := e.connection(f.ws, store.KindAnthropic, map[string]service.ModelInput{"claude-sonnet-4": {}})
	for _, k := range f.kinds() {
		r := e.do(req{method: "GET", path: "/api/v2/config", cred: k.cred})
		wantStatus(t, "config by "+k.name, r, 200, "")
		if r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("config headers %v", r.header)
		}
		if _, ok := r.json["data"]; ok {
			t.Fatalf("config is wrapped in data: %s", r.raw)
		}
		p, _ := r.json["providers"].(map[string]any)
		entry, _ := p[conn].(map[string]any)
		settings, _ := entry["settings"].(map[string]any)
		headers, _ := entry["headers"].(map[string]any)
		if settings["baseURL"] != "https://gw.example.com/custom/"+conn || settings["apiKey"] != "{env:AGENTGATE_API_KEY}" ||
			headers["x-org-id"] != f.ws || entry["package"] != "@ai-sdk/anthropic" {
			t.Fatalf("config entry %v", entry)
		}
		if strings.Contains(r.raw, k.cred) || strings.Contains(r.raw, "sk-upstream-SECRET") {
			t.Fatalf("config shows a secret: %s", r.raw)
		}
	}
	// Without InferenceURL, the request's scheme and host are used.
	e2 := newEnvWithService(t, e)
	r := e2.do(req{method: "GET", path: "/api/v2/config", cred: f.all})
	wantStatus(t, "config without InferenceURL", r, 200, "")
	want := e2.srv.URL + "/custom/" + conn
	if !strings.Contains(r.raw, `"baseURL":"`+want+`"`) {
		t.Fatalf("baseURL is not %s: %s", want, r.raw)
	}
}

func TestPaging(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	for i := 0; i < 3; i++ {
		e.serviceAccount(f.ws)
	}
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		path := "/api/v1/service-accounts?limit=1"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.do(req{method: "GET", path: path, cred: f.ownTok})
		wantStatus(t, "page", r, 200, "")
		l := r.list()
		if len(l) != 1 {
			t.Fatalf("page %d has %d items: %s", page, len(l), r.raw)
		}
		id := l[0]["id"].(string)
		if len(seen) > 0 && id <= seen[len(seen)-1] {
			t.Fatalf("page %d: %s does not follow %s", page, id, seen[len(seen)-1])
		}
		seen = append(seen, id)
		next, present := r.json["next_cursor"]
		if !present {
			t.Fatalf("no next_cursor member: %s", r.raw)
		}
		if next == nil {
			break
		}
		cursor = next.(string)
		if page > 5 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 4 {
		t.Fatalf("paged through %d service accounts, want 4: %v", len(seen), seen)
	}
	r := e.do(req{method: "GET", path: "/api/v1/service-accounts?limit=3", cred: f.ownTok})
	after3, _ := r.json["next_cursor"].(string)
	if len(r.list()) != 3 || after3 == "" || strings.Contains(after3, seen[2]) {
		t.Fatalf("limit=3 (the cursor is opaque): %s", r.raw)
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts?limit=4", cred: f.ownTok})
	if len(r.list()) != 4 || r.json["next_cursor"] != nil {
		t.Fatalf("limit=4 (all): %s", r.raw)
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts", cred: f.ownTok})
	if len(r.list()) != 4 || r.json["next_cursor"] != nil {
		t.Fatalf("default limit: %s", r.raw)
	}
	// A bare id is not a cursor.
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts?cursor=" + url.QueryEscape(seen[3]), cred: f.ownTok})
	wantStatus(t, "an id as cursor", r, 400, "InvalidCursor")
	// A cursor whose remaining items are gone leads to an empty last page.
	if err := e.svc.DeleteServiceAccount(ctx, service.Operator(f.ws), seen[3]); err != nil {
		t.Fatal(err)
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts?cursor=" + url.QueryEscape(after3), cred: f.ownTok})
	if l := r.list(); len(l) != 0 || r.json["next_cursor"] != nil || !strings.Contains(r.raw, `"data":[]`) {
		t.Fatalf("past the end: %s", r.raw)
	}
	for _, limit := range []string{"0", "abc", "-1", "1001", "1.5", ""} {
		if limit == "" {
			continue
		}
		r := e.do(req{method: "GET", path: "/api/v1/service-accounts?limit=" + limit, cred: f.ownTok})
		wantStatus(t, "limit="+limit, r, 400, "InvalidRequest")
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts?limit=1000", cred: f.ownTok})
	wantStatus(t, "limit=1000", r, 200, "")
}

func TestOrgHeaderOverHTTP(t *testing.T) {
	e := newEnv(t)
	a := e.fixture("A")
	b := e.fixture("B")
	get := func(cred, org string) resp {
		return e.do(req{method: "GET", path: "/api/v1/workspace", cred: cred, org: org})
	}
	wantStatus(t, "unbound token without x-org-id", get(a.unbTok, ""), 400, "OrgRequired")
	wantStatus(t, "unbound token, not a member", get(a.unbTok, b.ws), 403, "Forbidden")
	wantStatus(t, "unbound token, unknown workspace", get(a.unbTok, "wrk_doesnotexist"), 404, "WorkspaceNotFound")
	r := get(a.unbTok, a.ws)
	wantStatus(t, "unbound token with x-org-id", r, 200, "")
	you, _ := r.data()["you"].(map[string]any)
	if r.data()["id"] != a.ws || you["kind"] != "person" || you["role"] != "owner" || you["member_id"] != a.owner {
		t.Fatalf("workspace answer %s", r.raw)
	}
	wantStatus(t, "bound token, other x-org-id", get(a.ownTok, b.ws), 403, "Forbidden")
	wantStatus(t, "bound token, own x-org-id", get(a.ownTok, a.ws), 200, "")
	wantStatus(t, "key, other x-org-id", get(a.all, b.ws), 403, "Forbidden")
	r = get(a.all, a.ws)
	wantStatus(t, "key, own x-org-id", r, 200, "")
	you, _ = r.data()["you"].(map[string]any)
	if you["kind"] != "service_key" || you["permission"] != "all" || you["member_id"] != a.sa || you["role"] != nil {
		t.Fatalf("workspace answer for a key %s", r.raw)
	}
	noErr(t, e.svc.DeleteWorkspace(ctx, b.ws))
	wantStatus(t, "key of a deleted workspace", get(b.all, ""), 404, "WorkspaceNotFound")
	wantStatus(t, "config of a deleted workspace", e.do(req{method: "GET", path: "/api/v2/config", cred: b.inference}), 404, "WorkspaceNotFound")
}

func TestEncodedSlashInModelID(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	compat := e.connection(f.ws, store.KindOpenAICompatible, nil)
	google := e.connection(f.ws, store.KindGoogle, nil)

	r := e.do(req{method: "PUT", path: "/api/v1/connections/" + compat + "/models/meta-llama%2FLlama-3", cred: f.adminTok, body: `{"name": "Llama 3"}`})
	wantStatus(t, "PUT model with %2F", r, 200, "")
	models, _ := r.data()["models"].(map[string]any)
	if m, ok := models["meta-llama/Llama-3"].(map[string]any); !ok || m["name"] != "Llama 3" || m["enabled"] != true || len(models) != 1 {
		t.Fatalf("models %s", r.raw)
	}
	r = e.do(req{method: "PUT", path: "/api/v1/connections/" + compat + "/models/meta-llama%2FLlama-3/pricing", cred: f.all, body: `{"input": 0.5, "output": 1.25}`})
	wantStatus(t, "pricing of a model with %2F", r, 200, "")
	models, _ = r.data()["models"].(map[string]any)
	m, _ := models["meta-llama/Llama-3"].(map[string]any)
	if p, _ := m["pricing"].(map[string]any); p["input"] != 0.5 || p["output"] != 1.25 {
		t.Fatalf("pricing %s", r.raw)
	}
	// The raw slash is a different path: no route.
	r = e.do(req{method: "PUT", path: "/api/v1/connections/" + compat + "/models/meta-llama/Llama-3", cred: f.adminTok, body: `{}`})
	wantStatus(t, "PUT model with a raw /", r, 404, "NotFound")
	// Google model ids cannot hold a slash.
	r = e.do(req{method: "PUT", path: "/api/v1/connections/" + google + "/models/models%2Fgemini", cred: f.adminTok, body: `{}`})
	wantStatus(t, "google model with %2F", r, 400, "InvalidRequest")
	// Dot segments, encoded, are refused as model ids.
	r = e.do(req{method: "PUT", path: "/api/v1/connections/" + compat + "/models/%2E%2E", cred: f.adminTok, body: `{}`})
	wantStatus(t, "model id ..", r, 400, "InvalidRequest")
	r = e.do(req{method: "DELETE", path: "/api/v1/connections/" + compat + "/models/meta-llama%2FLlama-3", cred: f.adminTok})
	wantStatus(t, "DELETE model with %2F", r, 200, "")
	if models, _ := r.data()["models"].(map[string]any); len(models) != 0 {
		t.Fatalf("after delete: %s", r.raw)
	}
	// Another workspace's connection is not found.
	other := e.fixture("other")
	theirs := e.connection(other.ws, store.KindOpenAI, nil)
	r = e.do(req{method: "GET", path: "/api/v1/connections/" + theirs, cred: f.adminTok})
	wantStatus(t, "another workspace's connection", r, 404, "ConnectionNotFound")
	r = e.do(req{method: "PUT", path: "/api/v1/connections/" + theirs + "/models/x", cred: f.adminTok, body: `{}`})
	wantStatus(t, "model of another workspace's connection", r, 404, "ConnectionNotFound")
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

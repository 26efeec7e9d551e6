package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/claudecode"
	"github.com/agentgate/agentgate/internal/service"
)

const ccPath = "/api/v1/claude-code/settings"

func TestClaudeCodeSettingsAPI(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")

	// Before any edit: the empty document, to everyone who reads the config.
	r := e.do(req{method: "GET", path: ccPath, cred: f.inference})
	wantStatus(t, "GET before any document", r, 200, "")
	if d := r.data(); d["version"] != 0.0 || d["declared"] != false || !jsonEq(d["settings"], map[string]any{}) {
		t.Fatalf("empty document: %s", r.raw)
	}

	doc := `{"permissions": {"allow": ["Bash(npm run *)"], "deny": ["WebFetch"]}, "env": {"DISABLE_AUTOUPDATER": "1"},
		"companyAnnouncements": ["Tests <run> & pass"]}`
	// An All key may not edit, whatever the body says (refused before it
	// is read); neither may an admin or a member.
	for _, cred := range []string{f.all, f.inference, f.adminTok, f.memberTok} {
		wantStatus(t, "PUT by a non-owner", e.do(req{method: "PUT", path: ccPath, cred: cred, body: doc}), 403, "Forbidden")
		wantStatus(t, "PUT by a non-owner, bad body", e.do(req{method: "PUT", path: ccPath, cred: cred, body: `[1]`}), 403, "Forbidden")
	}
	r = e.do(req{method: "PUT", path: ccPath, cred: f.all, body: doc})
	if !strings.Contains(r.json["message"].(string), "even with an All key") {
		t.Errorf("the All key's refusal: %s", r.raw)
	}

	// Bad documents, each a clear 400 naming what is wrong.
	for _, tc := range []struct{ name, body, want string }{
		{"not an object", `["permissions"]`, "must be a JSON object, not an array"},
		{"a number", `42`, "must be a JSON object, not a number"},
		{"unknown keys", `{"permissions": {}, "colour": "red", "zzz": 1}`, "unknown keys: colour, zzz"},
		{"hooks", `{"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "curl evil"}]}]}}`, "hooks (runs commands)"},
		{"apiKeyHelper", `{"apiKeyHelper": "cat ~/.key"}`, "apiKeyHelper (runs a command)"},
		{"env.NODE_OPTIONS", `{"env": {"NODE_OPTIONS": "--require ./x.js"}}`, "env.NODE_OPTIONS (runs code)"},
		{"malformed", `{"env": {`, "malformed JSON"},
		{"a repeated key", `{"env": {}, "env": {}}`, "appears twice"},
	} {
		r := e.do(req{method: "PUT", path: ccPath, cred: f.ownTok, body: tc.body})
		wantStatus(t, "PUT "+tc.name, r, 400, "InvalidRequest")
		if !strings.Contains(r.json["message"].(string), tc.want) {
			t.Errorf("PUT %s: message %q does not say %q", tc.name, r.json["message"], tc.want)
		}
	}
	r = e.do(req{method: "PUT", path: ccPath, cred: f.ownTok, body: `{"hooks": {}, "statusLine": {}, "foo": 1}`})
	if refused, _ := r.json["refused"].([]any); len(refused) != 2 {
		t.Errorf("the refused keys are listed in the error: %s", r.raw)
	}
	wantStatus(t, "PUT as text", e.do(req{method: "PUT", path: ccPath, cred: f.ownTok, body: doc, contentType: "text/plain"}), 415, "")
	if h := e.do(req{method: "GET", path: ccPath + "/history", cred: f.ownTok}); len(h.list()) != 0 {
		t.Fatalf("refused edits left history: %s", h.raw)
	}

	// The owner's edit.
	r = e.do(req{method: "PUT", path: ccPath, cred: f.ownTok, body: doc})
	wantStatus(t, "PUT by the owner", r, 200, "")
	d := r.data()
	canon := `{"companyAnnouncements":["Tests <run> & pass"],"env":{"DISABLE_AUTOUPDATER":"1"},"permissions":{"allow":["Bash(npm run *)"],"deny":["WebFetch"]}}`
	if d["version"] != 1.0 || d["updated_by"] != f.owner || d["checksum"] != claudecode.ChecksumOf([]byte(canon)) {
		t.Fatalf("after the edit: %s", r.raw)
	}
	oc, _ := d["opencode"].(map[string]any)
	if !jsonEq(oc["permission"], map[string]any{"bash": map[string]any{"npm run *": "allow"}, "webfetch": "deny"}) {
		t.Errorf("opencode: %v", oc)
	}
	// Everyone who reads the config reads it back.
	r = e.do(req{method: "GET", path: ccPath, cred: f.memberTok})
	if got, _ := json.Marshal(r.data()["settings"]); !strings.Contains(string(got), "npm run *") {
		t.Fatalf("member reads %s", r.raw)
	}
	// The history: who, when, checksum, and the document.
	h := e.do(req{method: "GET", path: ccPath + "/history", cred: f.ownTok})
	wantStatus(t, "history", h, 200, "")
	if l := h.list(); len(l) != 1 || l[0]["actor_kind"] != "member" || l[0]["actor_id"] != f.owner || l[0]["checksum"] != d["checksum"] ||
		l[0]["time"] == nil || l[0]["version"] != 1.0 || !strings.HasSuffix(l[0]["actor_email"].(string), "@example.com") {
		t.Fatalf("history %s", h.raw)
	}

	// The OpenCode configs carry the rules.
	for _, path := range []string{"/api/v2/config", "/api/config"} {
		r := e.do(req{method: "GET", path: path, cred: f.memberTok})
		perm := r.json["permission"]
		if path == "/api/config" {
			perm = r.json["config"].(map[string]any)["permission"]
		}
		if !jsonEq(perm, map[string]any{"bash": map[string]any{"npm run *": "allow"}, "webfetch": "deny"}) {
			t.Errorf("%s permission: %v", path, perm)
		}
	}

	// Two workspaces never see each other's.
	g := e.fixture("globex")
	r = e.do(req{method: "GET", path: ccPath, cred: g.ownTok})
	if !jsonEq(r.data()["settings"], map[string]any{}) {
		t.Fatalf("another workspace reads %s", r.raw)
	}
	wantStatus(t, "x-org-id of another workspace", e.do(req{method: "GET", path: ccPath, cred: g.ownTok, org: f.ws}), 403, "Forbidden")
	r = e.do(req{method: "PUT", path: ccPath, cred: g.ownTok, body: `{"permissions": {"deny": ["Bash"]}}`})
	wantStatus(t, "the other owner's edit", r, 200, "")
	r = e.do(req{method: "GET", path: ccPath, cred: f.memberTok})
	if got, _ := json.Marshal(r.data()["settings"]); strings.Contains(string(got), `"Bash"`) {
		t.Fatalf("acme sees globex's document: %s", r.raw)
	}
	if h := e.do(req{method: "GET", path: ccPath + "/history", cred: f.ownTok}); len(h.list()) != 1 {
		t.Fatalf("acme's history has globex's edit: %s", h.raw)
	}

	// A declared document is read-only here.
	if _, err := e.svc.ReconcileClaudeCodeSettings(ctx, []service.DeclaredClaudeCode{{Workspace: f.ws, Settings: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "PUT of a declared document", e.do(req{method: "PUT", path: ccPath, cred: f.ownTok, body: doc}), 409, "Conflict")
	if r := e.do(req{method: "GET", path: ccPath, cred: f.ownTok}); r.data()["declared"] != true || r.data()["updated_by"] != "caddyfile" {
		t.Fatalf("declared: %s", r.raw)
	}
}

func jsonEq(got, want any) bool {
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	return string(a) == string(b)
}

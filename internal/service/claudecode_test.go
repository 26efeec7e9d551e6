package service_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/claudecode"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// ccWorkspace is a workspace with an anthropic and an openai connection,
// workspace models routed to them, a deny policy for members, and an
// owner, an admin, a member and an All key.
type ccWorkspace struct {
	ws, owner, admin, member string
	ownerP, adminP, memberP  *service.Principal
	allKey                   *service.Principal
}

func (e *env) ccWorkspace(name string) *ccWorkspace {
	e.t.Helper()
	w := &ccWorkspace{ws: e.workspace(name)}
	w.owner, w.admin, w.member = e.person(w.ws, store.RoleOwner), e.person(w.ws, store.RoleAdmin), e.person(w.ws, store.RoleMember)
	w.ownerP, w.adminP, w.memberP = e.principal(e.token(w.owner, w.ws), ""), e.principal(e.token(w.admin, w.ws), ""), e.principal(e.token(w.member, w.ws), "")
	w.allKey = e.principal(e.key(w.ws, e.serviceAccount(w.ws), store.PermissionAll).Key, "")
	op := service.Operator(w.ws)
	on := true
	price := func(in, out string) *store.Pricing {
		i, err1 := money.Parse(in)
		o, err2 := money.Parse(out)
		if err1 != nil || err2 != nil {
			e.t.Fatal(err1, err2)
		}
		return &store.Pricing{Input: i, Output: o}
	}
	ant, err := e.svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "Anthropic", Kind: store.KindAnthropic,
		BaseURL: "https://api.anthropic.example/v1", Credential: "sk-ant-SECRET", Models: map[string]service.ModelInput{
			"sonnet": {Enabled: &on, Pricing: price("3", "15")}, "opus": {Enabled: &on, Pricing: price("15", "75")}}})
	if err != nil {
		e.t.Fatal(err)
	}
	oai, err := e.svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "OpenAI", Kind: store.KindOpenAI,
		BaseURL: "https://api.openai.example/v1", Credential: "sk-SECRET", Models: map[string]service.ModelInput{
			"gpt": {Enabled: &on, Pricing: price("0.15", "0.6")}}})
	if err != nil {
		e.t.Fatal(err)
	}
	for id, t := range map[string]store.ModelTarget{"claude-sonnet-4-5": {Connection: ant.ID, Model: "sonnet"},
		"claude-opus-4-1": {Connection: ant.ID, Model: "opus"}, "gpt-mini": {Connection: oai.ID, Model: "gpt"}} {
		if _, err := e.svc.CreateWorkspaceModel(ctx, op, service.WorkspaceModelInput{ID: id, Targets: []store.ModelTarget{t}}); err != nil {
			e.t.Fatal(err)
		}
	}
	if _, err := e.svc.CreatePolicy(ctx, op, service.PolicyInput{Name: "no opus for members", Effect: store.EffectDeny,
		Models: []string{"claude-opus-*", "claude-3-opus-20240229"}, Roles: []string{store.RoleMember}}); err != nil {
		e.t.Fatal(err)
	}
	return w
}

func settingsOf(t *testing.T, m *service.Managed) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(m.Settings, &out); err != nil {
		t.Fatalf("settings %s: %v", m.Settings, err)
	}
	return out
}

func TestManagedSettings(t *testing.T) {
	e := newEnv(t)
	w := e.ccWorkspace("acme")
	tel := service.ManagedOptions{TelemetryEnv: map[string]string{"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://console.example"}}
	if _, err := e.svc.SetClaudeCodeSettings(ctx, w.ownerP, []byte(`{"permissions": {"deny": ["WebFetch"], "allow": ["Bash(npm run *)"]},
		"env": {"DISABLE_AUTOUPDATER": "1"}, "companyAnnouncements": ["<b>Welcome</b> & enjoy"]}`)); err != nil {
		t.Fatal(err)
	}

	// The member: opus is denied by policy, gpt speaks no Anthropic format.
	m, err := e.svc.ManagedSettings(ctx, w.memberP, tel)
	if err != nil {
		t.Fatal(err)
	}
	s := settingsOf(t, m)
	if got := s["availableModels"]; !equalJSON(got, []any{"claude-sonnet-4-5"}) {
		t.Errorf("member availableModels %v", got)
	}
	if got := s["deniedModels"]; !equalJSON(got, []any{"claude-3-opus-20240229", "claude-opus-4-1"}) {
		t.Errorf("member deniedModels %v", got)
	}
	if s["enforceAvailableModels"] != true {
		t.Errorf("enforceAvailableModels %v", s["enforceAvailableModels"])
	}
	if got := s["modelPricing"]; !equalJSON(got, map[string]any{"multiplier": 1.0, "overrides": map[string]any{
		"claude-sonnet-4-5": map[string]any{"input": 3.0, "output": 15.0, "cacheRead": 3.0, "cacheWrite": 3.0}}}) {
		t.Errorf("modelPricing %v", got)
	}
	if got := s["env"]; !equalJSON(got, map[string]any{"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://console.example",
		"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "1"}) {
		t.Errorf("env %v", got)
	}
	if got := s["permissions"]; !equalJSON(got, map[string]any{"deny": []any{"WebFetch"}, "allow": []any{"Bash(npm run *)"}}) {
		t.Errorf("permissions %v", got)
	}
	// The bytes are canonical (no HTML escaping), and the checksum theirs.
	if !strings.Contains(string(m.Settings), `"<b>Welcome</b> & enjoy"`) || claudecode.ChecksumOf(m.Settings) != m.Checksum {
		t.Errorf("settings %s, checksum %s", m.Settings, m.Checksum)
	}
	if len(m.UUID) != 36 || m.UUID[14] != '8' {
		t.Errorf("uuid %q", m.UUID)
	}

	// The owner may use opus; the same workspace, the same uuid.
	o, err := e.svc.ManagedSettings(ctx, w.ownerP, tel)
	if err != nil {
		t.Fatal(err)
	}
	if got := settingsOf(t, o)["availableModels"]; !equalJSON(got, []any{"claude-opus-4-1", "claude-sonnet-4-5"}) {
		t.Errorf("owner availableModels %v", got)
	}
	if _, ok := settingsOf(t, o)["deniedModels"]; ok || o.UUID != m.UUID || o.Checksum == m.Checksum {
		t.Errorf("owner: %s (uuid %s, member's %s)", o.Settings, o.UUID, m.UUID)
	}
	// The document's default model comes first (the CLI falls back to the
	// first available model).
	if _, err := e.svc.SetClaudeCodeSettings(ctx, w.ownerP, []byte(`{"model": "claude-sonnet-4-5"}`)); err != nil {
		t.Fatal(err)
	}
	o, _ = e.svc.ManagedSettings(ctx, w.ownerP, tel)
	if got := settingsOf(t, o)["availableModels"]; !equalJSON(got, []any{"claude-sonnet-4-5", "claude-opus-4-1"}) {
		t.Errorf("owner availableModels with a default model %v", got)
	}

	// An allow policy for members narrows them to nothing: the list is
	// there, empty, and the model discovery is not asked for.
	if _, err := e.svc.CreatePolicy(ctx, service.Operator(w.ws), service.PolicyInput{Name: "only gpt", Effect: store.EffectAllow,
		Models: []string{"gpt-*"}, Roles: []string{store.RoleMember}}); err != nil {
		t.Fatal(err)
	}
	m, err = e.svc.ManagedSettings(ctx, w.memberP, service.ManagedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s = settingsOf(t, m)
	if got, ok := s["availableModels"]; !ok || !equalJSON(got, []any{}) || s["enforceAvailableModels"] != nil {
		t.Errorf("member allowed only gpt: availableModels %v, enforce %v", got, s["enforceAvailableModels"])
	}
	if env, _ := s["env"].(map[string]any); env["CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY"] != nil || env["CLAUDE_CODE_ENABLE_TELEMETRY"] != nil {
		t.Errorf("env %v", env)
	}
	if got := s["deniedModels"]; !equalJSON(got, []any{"claude-3-opus-20240229", "claude-opus-4-1", "claude-sonnet-4-5"}) {
		t.Errorf("deniedModels %v", got)
	}

	// A key gets none.
	if _, err := e.svc.ManagedSettings(ctx, w.allKey, tel); err == nil {
		t.Fatal("a key got managed settings")
	} else {
		wantErr(t, "ManagedSettings by a key", err, http.StatusForbidden, "Forbidden")
	}

	// A workspace with nothing: no settings at all.
	ws2 := e.workspace("empty")
	p2 := e.principal(e.token(e.person(ws2, store.RoleMember), ws2), "")
	if m, err := e.svc.ManagedSettings(ctx, p2, service.ManagedOptions{}); err != nil || m != nil {
		t.Fatalf("empty workspace: %+v, %v", m, err)
	}
	if m, err := e.svc.ManagedSettings(ctx, p2, tel); err != nil || m == nil || !strings.Contains(string(m.Settings), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Fatalf("empty workspace with telemetry: %+v, %v", m, err)
	}
	// Isolation: the other workspace's document and models are not in it.
	if m, _ := e.svc.ManagedSettings(ctx, p2, tel); strings.Contains(string(m.Settings), "WebFetch") || strings.Contains(string(m.Settings), "claude-") {
		t.Fatalf("another workspace's settings leaked: %s", m.Settings)
	}
}

func equalJSON(got, want any) bool {
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	return string(a) == string(b)
}

func TestClaudeCodeSettingsEdits(t *testing.T) {
	e := newEnv(t)
	w := e.ccWorkspace("acme")
	doc := []byte(`{"permissions": {"ask": ["Bash(git push *)"]}}`)
	for name, p := range map[string]*service.Principal{"an All key": w.allKey, "an admin": w.adminP, "a member": w.memberP} {
		_, err := e.svc.SetClaudeCodeSettings(ctx, p, doc)
		wantErr(t, "SetClaudeCodeSettings by "+name, err, http.StatusForbidden, "Forbidden")
		_, err = e.svc.ClaudeCodeSettingsHistory(ctx, p)
		wantErr(t, "ClaudeCodeSettingsHistory by "+name, err, http.StatusForbidden, "Forbidden")
	}
	// A refused document changes nothing, and says why.
	_, err := e.svc.SetClaudeCodeSettings(ctx, w.ownerP, []byte(`{"hooks": {}, "env": {"NODE_OPTIONS": "x"}}`))
	wantErr(t, "a refused document", err, http.StatusBadRequest, "InvalidRequest")

	v, err := e.svc.ClaudeCodeSettings(ctx, w.memberP)
	if err != nil || string(v.Settings) != "{}" || v.Version != 0 || v.Updated != nil {
		t.Fatalf("before any document: %+v %v", v, err)
	}
	e.clk.Advance(time.Minute)
	v, err = e.svc.SetClaudeCodeSettings(ctx, w.ownerP, doc)
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != 1 || v.UpdatedBy != w.owner || v.Checksum != claudecode.ChecksumOf([]byte(`{"permissions":{"ask":["Bash(git push *)"]}}`)) {
		t.Fatalf("after the owner's edit: %+v", v)
	}
	if b, _ := json.Marshal(v.OpenCode.Permission); string(b) != `{"bash":{"git push *":"ask"}}` {
		t.Fatalf("OpenCode permission %s", b)
	}
	// The same document again is no change; the operator's is one.
	if v, _ = e.svc.SetClaudeCodeSettings(ctx, w.ownerP, doc); v.Version != 1 {
		t.Fatalf("unchanged document: version %d", v.Version)
	}
	if v, err = e.svc.SetClaudeCodeSettings(ctx, service.Operator(w.ws), []byte(`{}`)); err != nil || v.Version != 2 || v.UpdatedBy != "operator" {
		t.Fatalf("operator: %+v %v", v, err)
	}
	hist, err := e.svc.ClaudeCodeSettingsHistory(ctx, w.ownerP)
	if err != nil || len(hist) != 2 {
		t.Fatalf("history %v %v", hist, err)
	}
	if h := hist[0]; h.Version != 1 || h.ActorKind != "member" || h.ActorID != w.owner || !h.Time.Equal(t0.Add(time.Minute)) ||
		string(h.Settings) != `{"permissions":{"ask":["Bash(git push *)"]}}` {
		t.Fatalf("history[0] %+v", h)
	}
	if h := hist[1]; h.ActorKind != "operator" || h.Checksum != claudecode.ChecksumOf([]byte("{}")) {
		t.Fatalf("history[1] %+v", h)
	}
}

func TestClaudeCodeSettingsDeclared(t *testing.T) {
	e := newEnv(t)
	w := e.ccWorkspace("acme")
	decl := []service.DeclaredClaudeCode{{Workspace: "acme", Settings: []byte(`{"permissions": {"deny": ["WebFetch"]}}`)},
		{Workspace: "made-by-the-caddyfile", Settings: []byte(`{}`)}}
	changed, err := e.svc.ReconcileClaudeCodeSettings(ctx, decl)
	if err != nil || len(changed) != 2 {
		t.Fatalf("first reconcile: %v %v", changed, err)
	}
	if changed, err = e.svc.ReconcileClaudeCodeSettings(ctx, decl); err != nil || len(changed) != 0 {
		t.Fatalf("the same again: %v %v", changed, err)
	}
	for name, p := range map[string]*service.Principal{"the owner": w.ownerP, "the operator": service.Operator(w.ws)} {
		_, err := e.svc.SetClaudeCodeSettings(ctx, p, []byte(`{}`))
		wantErr(t, "editing a declared document as "+name, err, http.StatusConflict, "Conflict")
	}
	v, _ := e.svc.ClaudeCodeSettings(ctx, w.memberP)
	if !v.Declared || v.UpdatedBy != "caddyfile" || !strings.Contains(string(v.Settings), "WebFetch") {
		t.Fatalf("declared view %+v", v)
	}
	// A bad declared document is refused as a whole.
	if _, err := e.svc.ReconcileClaudeCodeSettings(ctx, []service.DeclaredClaudeCode{{Workspace: "acme", Settings: []byte(`{"apiKeyHelper": "x"}`)}}); err == nil ||
		!strings.Contains(err.Error(), "apiKeyHelper") {
		t.Fatalf("a refused declared document: %v", err)
	}
	// No longer declared: the document stays, editable again.
	if changed, err = e.svc.ReconcileClaudeCodeSettings(ctx, nil); err != nil || len(changed) != 2 {
		t.Fatalf("released: %v %v", changed, err)
	}
	v, err = e.svc.SetClaudeCodeSettings(ctx, w.ownerP, []byte(`{"model": "claude-sonnet-4-5"}`))
	if err != nil || v.Declared || v.Version != 3 {
		t.Fatalf("after the release: %+v %v", v, err)
	}
}

// TestOpenCodeConfigFollowsClaudeCodeSettings: the owner's Claude Code
// permission rules reach both OpenCode configs, and OpenCode's own
// permission reader (the instance server's) decides a command as Claude
// Code would; denied models are left out; the default model is named.
func TestOpenCodeConfigFollowsClaudeCodeSettings(t *testing.T) {
	e := newEnv(t)
	w := e.ccWorkspace("acme")
	if _, err := e.svc.SetClaudeCodeSettings(ctx, w.ownerP, []byte(`{"model": "claude-sonnet-4-5", "permissions": {
		"allow": ["Bash(npm run *)", "Bash(rm *)", "Bash(rm -rf node_modules)", "WebFetch(domain:docs.example.com)", "Read(./src/**)"],
		"ask": ["Bash(git push:*)"],
		"deny": ["Bash(rm *)", "Edit(.env)", "WebFetch"]}}`)); err != nil {
		t.Fatal(err)
	}
	cfg, err := e.svc.Config(ctx, w.memberP, "https://gw.example")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model != "agentgate/claude-sonnet-4-5" || cfg.Permission == nil {
		t.Fatalf("model %q, permission %v", cfg.Model, cfg.Permission)
	}
	inf := cfg.Providers[service.InferenceEntry].Models
	if _, ok := inf["claude-opus-4-1"]; ok {
		t.Errorf("the member's config lists a model a policy denies them")
	}
	if _, ok := inf["claude-sonnet-4-5"]; !ok || len(inf) != 2 {
		t.Errorf("inference models %v", slices.Sorted(mapKeys(inf)))
	}
	// On the Providers API the policy's patterns match the connection's
	// model ids ("opus"), which "claude-opus-*" does not: it stays.
	opus := false
	for _, pe := range cfg.Providers {
		_, ok := pe.Models["opus"]
		opus = opus || ok
	}
	if !opus {
		t.Errorf("the anthropic connection's opus is gone from the member's config")
	}
	owner, _ := e.svc.Config(ctx, w.ownerP, "https://gw.example")
	if _, ok := owner.Providers[service.InferenceEntry].Models["claude-opus-4-1"]; !ok {
		t.Errorf("the owner's config lacks opus")
	}

	// The V1 config, as OpenCode reads its permission.
	b, err := json.Marshal(service.V1(cfg, "OPENCODE_CONSOLE_TOKEN"))
	if err != nil {
		t.Fatal(err)
	}
	var v1 map[string]json.RawMessage
	json.Unmarshal(b, &v1)
	if string(v1["model"]) != `"agentgate/claude-sonnet-4-5"` {
		t.Errorf("V1 model %s", v1["model"])
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "opencode.json"), []byte(`{"permission": `+string(v1["permission"])+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := agents.ProjectPermissions(dir)
	if err != nil {
		t.Fatalf("OpenCode's reader refuses the permission %s: %v", v1["permission"], err)
	}
	for _, tc := range []struct{ action, resource, want string }{
		{"bash", "npm run test", permission.Allow},
		{"bash", "rm -rf build", permission.Deny},        // deny wins over allow, as in Claude Code
		{"bash", "rm -rf node_modules", permission.Deny}, // even over a more specific allow
		{"read", "src/main.go", permission.Allow},
		{"bash", "git push origin main", permission.Ask},
		{"bash", "git push", permission.Ask},
		{"edit", ".env", permission.Deny},
		{"webfetch", "https://docs.example.com/guide", permission.Deny}, // a bare WebFetch deny wins over the domain allow
		{"bash", "make", permission.Ask},                                // no rule: OpenCode's own default asks
	} {
		if got := permission.Evaluate(tc.action, tc.resource, permission.Defaults, rules).Effect; got != tc.want {
			t.Errorf("%s %q: %s, want %s (rules %s)", tc.action, tc.resource, got, tc.want, v1["permission"])
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

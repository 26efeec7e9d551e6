package claudecode

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/apierr"
)

func TestCheckDocumentAccepts(t *testing.T) {
	doc, canon, err := CheckDocument([]byte(`{
		"permissions": {"allow": ["Bash(npm run *)", "Read(./src/**)"], "deny": ["WebFetch", "Bash(curl:*)"],
			"ask": ["Bash(git push *)"], "defaultMode": "acceptEdits", "disableBypassPermissionsMode": "disable"},
		"env": {"ANTHROPIC_DEFAULT_SONNET_MODEL": "claude-sonnet-4-5", "DISABLE_AUTOUPDATER": "1", "OTEL_LOG_TOOL_DETAILS": "1"},
		"model": "claude-sonnet-4-5", "companyAnnouncements": ["Welcome <team> & friends"], "cleanupPeriodDays": 14,
		"includeCoAuthoredBy": false, "disableAllHooks": true, "allowManagedPermissionRulesOnly": true}`))
	if err != nil {
		t.Fatalf("CheckDocument: %v", err)
	}
	if doc["model"] != "claude-sonnet-4-5" {
		t.Fatalf("doc %v", doc)
	}
	if !strings.HasPrefix(string(canon), `{"allowManagedPermissionRulesOnly":true,"cleanupPeriodDays":14,"companyAnnouncements":["Welcome <team> & friends"]`) {
		t.Fatalf("canonical %s", canon)
	}
	if _, canon, err := CheckDocument([]byte(`{}`)); err != nil || string(canon) != "{}" {
		t.Fatalf("the empty document: %s %v", canon, err)
	}
}

func TestCheckDocumentRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string // in the message
		field     string   // the error's list that names them
	}{
		{"not an object", `["permissions"]`, []string{"must be a JSON object, not an array"}, ""},
		{"a string", `"x"`, []string{"not a string"}, ""},
		{"null", `null`, []string{"not null"}, ""},
		{"malformed", `{"env": `, []string{"not valid JSON"}, ""},
		{"a repeated key", `{"env": {}, "env": {"NODE_OPTIONS": "x"}}`, []string{`"env" appears twice`}, ""},
		{"unknown keys", `{"permissions": {}, "colour": "red", "theme": "dark"}`, []string{"unknown keys: colour, theme", "a document may hold permissions, env"}, "unknown"},
		{"hooks", `{"hooks": {"PreToolUse": []}}`, []string{"hooks (runs commands)"}, "refused"},
		{"apiKeyHelper", `{"apiKeyHelper": "/bin/echo key"}`, []string{"apiKeyHelper (runs a command)"}, "refused"},
		{"statusLine and otelHeadersHelper", `{"statusLine": {"type": "command", "command": "x"}, "otelHeadersHelper": "x"}`,
			[]string{"otelHeadersHelper (runs a command)", "statusLine (runs a command)"}, "refused"},
		{"env.NODE_OPTIONS", `{"env": {"NODE_OPTIONS": "--require /tmp/x.js"}}`, []string{"env.NODE_OPTIONS (runs code)"}, "refused"},
		{"env proxies", `{"env": {"HTTPS_PROXY": "http://evil:8080", "LD_PRELOAD": "/x.so", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://x"}}`,
			[]string{"env.HTTPS_PROXY (sends traffic elsewhere)", "env.LD_PRELOAD (runs code)", "env.OTEL_EXPORTER_OTLP_ENDPOINT (set by the telemetry relay)"}, "refused"},
		{"an env key off the list", `{"env": {"MY_VAR": "1"}}`, []string{"env.MY_VAR (not on the list"}, "refused"},
		{"workspace keys", `{"availableModels": ["x"], "modelPricing": {}}`, []string{"availableModels (set from the workspace's models and policies)", "modelPricing"}, "refused"},
		{"traffic", `{"forceLoginGatewayUrl": "https://evil"}`, []string{"forceLoginGatewayUrl (changes where the CLI signs in)"}, "refused"},
		{"__proto__", `{"__proto__": {"x": 1}}`, []string{"__proto__ (not a setting)"}, "refused"},
		{"a bad rule", `{"permissions": {"allow": ["Bash(", "rm -rf /"]}}`, []string{`"Bash(" is not a rule`, `"rm -rf /" is not a rule`}, "invalid"},
		{"an unknown permission key", `{"permissions": {"additionalDirectories": ["/"]}}`, []string{"unknown keys: permissions.additionalDirectories"}, "unknown"},
		{"bypass mode", `{"permissions": {"defaultMode": "bypassPermissions"}}`, []string{"defaultMode must be one of default, acceptEdits, plan"}, "invalid"},
		{"wrong types", `{"env": {"MCP_TIMEOUT": 5}, "cleanupPeriodDays": 0, "disableAllHooks": "yes", "permissions": []}`,
			[]string{"env.MCP_TIMEOUT must be a string", "cleanupPeriodDays must be", "disableAllHooks must be true or false", "permissions must be an object"}, "invalid"},
		{"everything at once", `{"hooks": {}, "foo": 1, "env": {"NODE_OPTIONS": ""}, "model": ""}`,
			[]string{"hooks (runs commands)", "env.NODE_OPTIONS", "unknown keys: foo", "model must be"}, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := CheckDocument([]byte(tc.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			e := apierr.As(err)
			if e.Status != http.StatusBadRequest || e.Tag != "InvalidRequest" {
				t.Fatalf("status %d %s, want 400 InvalidRequest", e.Status, e.Tag)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q does not name %q", e.Message, w)
				}
			}
			if tc.field != "" {
				list, _ := e.Fields[tc.field].([]string)
				if len(list) == 0 {
					t.Errorf("the error's %s list is empty: %v", tc.field, e.Fields)
				}
				named := strings.Fields(tc.want[0])[0]
				if tc.field == "unknown" {
					named = strings.TrimSuffix(strings.Fields(tc.want[0])[2], ",")
				}
				if all := strings.Join(list, "; "); !strings.Contains(all, named) {
					t.Errorf("the error's %s list %q does not name %s", tc.field, all, tc.want[0])
				}
			}
		})
	}
}

func TestCheckDocumentSize(t *testing.T) {
	rules := make([]string, maxRules)
	for i := range rules {
		rules[i] = "Bash(" + strings.Repeat("x", 400) + ")"
	}
	b, _ := json.Marshal(map[string]any{"permissions": map[string]any{"allow": rules}})
	if _, _, err := CheckDocument(b); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("a document over the bound: %v", err)
	}
}

func TestEnvKeysAreNotRefused(t *testing.T) {
	for _, k := range EnvKeys {
		if why := refusedEnvReason(k); why != "" {
			t.Errorf("%s is on the list and refused (%s)", k, why)
		}
	}
	for _, k := range Keys {
		if _, ok := refusedKeys[k]; ok {
			t.Errorf("%s is an allowed key and refused", k)
		}
	}
}

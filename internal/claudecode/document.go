package claudecode

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentgate/agentgate/internal/apierr"
)

// A workspace's Claude Code settings document is what its owner adds to
// the managed settings every member's CLI receives: permission rules, a
// few environment variables and switches. It may not hold anything that
// makes a member's machine run a command or send its traffic elsewhere,
// nor what the workspace itself decides (the models, their prices, the
// telemetry's destination): those keys are refused, by name, and so is any
// key this list does not know.

// MaxDocument bounds the document's canonical size in bytes.
const MaxDocument = 64 << 10

// Keys are the top-level keys a document may hold.
var Keys = []string{
	"permissions", "env", "model", "companyAnnouncements", "cleanupPeriodDays", "includeCoAuthoredBy",
	"includeGitInstructions", "disableAllHooks", "allowManagedHooksOnly", "allowManagedPermissionRulesOnly",
	"allowManagedMcpServersOnly",
}

// refusedKeys are top-level settings the CLI honours that a workspace's
// document may not set, and why.
var refusedKeys = map[string]string{
	// They run commands on members' machines.
	"hooks":                      "runs commands",
	"statusLine":                 "runs a command",
	"subagentStatusLine":         "runs a command",
	"apiKeyHelper":               "runs a command",
	"otelHeadersHelper":          "runs a command",
	"awsCredentialExport":        "runs a command",
	"awsAuthRefresh":             "runs a command",
	"gcpAuthRefresh":             "runs a command",
	"proxyAuthHelper":            "runs a command",
	"processWrapper":             "runs commands",
	"policyHelper":               "runs a command",
	"policyHelpers":              "runs commands",
	"fileSuggestion":             "runs a command",
	"sshHostCommands":            "runs commands",
	"sshConfigs":                 "runs commands",
	"managedMcpServers":          "runs MCP servers",
	"enableAllProjectMcpServers": "runs MCP servers",
	"enabledPlugins":             "installs and runs plugins",
	"extraKnownMarketplaces":     "installs plugins",
	"additionalMarketplaces":     "installs plugins",
	"pluginConfigs":              "configures plugins",
	"defaultShell":               "changes the shell commands run in",
	"sandbox":                    "changes the sandbox commands run in",
	// They send traffic elsewhere.
	"forceLoginMethod":        "changes where the CLI signs in",
	"forceLoginGatewayUrl":    "changes where the CLI signs in",
	"forceLoginOrgUUID":       "changes where the CLI signs in",
	"gatewayInternalNetworks": "changes which gateways the CLI trusts",
	"allowedHttpHookUrls":     "sends hook traffic elsewhere",
	"modelOverrides":          "sends requests to other model ids",
	"skipWebFetchPreflight":   "changes what WebFetch may reach",
	// The workspace decides them.
	"availableModels":        "set from the workspace's models and policies",
	"deniedModels":           "set from the workspace's deny policies",
	"enforceAvailableModels": "set from the workspace's models",
	"availableModelsMatch":   "set from the workspace's models",
	"modelPricing":           "set from the workspace's prices",
}

// EnvKeys are the environment variables the document may set.
var EnvKeys = []string{
	"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
	"ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL",
	"CLAUDE_CODE_MAX_OUTPUT_TOKENS", "MAX_THINKING_TOKENS", "MAX_MCP_OUTPUT_TOKENS", "MCP_TIMEOUT", "MCP_TOOL_TIMEOUT",
	"BASH_DEFAULT_TIMEOUT_MS", "BASH_MAX_TIMEOUT_MS", "BASH_MAX_OUTPUT_LENGTH", "CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER", "DISABLE_BUG_COMMAND", "DISABLE_ERROR_REPORTING",
	"DISABLE_TELEMETRY", "DISABLE_COST_WARNINGS", "DISABLE_PROMPT_CACHING", "CLAUDE_CODE_DISABLE_TERMINAL_TITLE",
	"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY",
	"CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY", "CLAUDE_CODE_GATEWAY_HINT_HEADERS",
	"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_LOGS_EXPORT_INTERVAL", "OTEL_LOG_USER_PROMPTS", "OTEL_LOG_TOOL_DETAILS",
	"OTEL_METRICS_INCLUDE_SESSION_ID", "OTEL_METRICS_INCLUDE_VERSION", "OTEL_METRICS_INCLUDE_ACCOUNT_UUID",
	"OTEL_RESOURCE_ATTRIBUTES",
}

// refusedEnv are variables refused by name, and why; any other variable
// not in EnvKeys is refused as not on the list.
var refusedEnv = map[string]string{
	"NODE_OPTIONS": "runs code", "LD_PRELOAD": "runs code", "LD_LIBRARY_PATH": "runs code",
	"DYLD_INSERT_LIBRARIES": "runs code", "DYLD_LIBRARY_PATH": "runs code", "BASH_ENV": "runs code", "ENV": "runs code",
	"PATH": "changes which programs run", "SHELL": "changes the shell commands run in",
	"CLAUDE_CODE_SHELL_PREFIX": "runs commands", "CLAUDE_ENV_FILE": "runs code", "NODE_PATH": "runs code",
	"HTTP_PROXY": "sends traffic elsewhere", "HTTPS_PROXY": "sends traffic elsewhere", "ALL_PROXY": "sends traffic elsewhere",
	"NO_PROXY": "sends traffic elsewhere", "http_proxy": "sends traffic elsewhere", "https_proxy": "sends traffic elsewhere",
	"all_proxy": "sends traffic elsewhere", "no_proxy": "sends traffic elsewhere",
	"NODE_EXTRA_CA_CERTS": "changes which servers are trusted", "NODE_TLS_REJECT_UNAUTHORIZED": "turns TLS checks off",
	"SSL_CERT_FILE": "changes which servers are trusted", "SSL_CERT_DIR": "changes which servers are trusted",
	"ANTHROPIC_BASE_URL": "sends traffic elsewhere", "ANTHROPIC_AUTH_TOKEN": "replaces the sign-in",
	"ANTHROPIC_API_KEY": "replaces the sign-in", "ANTHROPIC_CUSTOM_HEADERS": "changes every request",
	"CLAUDE_CODE_USE_BEDROCK": "sends traffic elsewhere", "CLAUDE_CODE_USE_VERTEX": "sends traffic elsewhere",
	"CLAUDE_CODE_USE_FOUNDRY":      "sends traffic elsewhere",
	"CLAUDE_CODE_ENABLE_TELEMETRY": "set by the telemetry relay", "OTEL_METRICS_EXPORTER": "set by the telemetry relay",
	"OTEL_LOGS_EXPORTER": "set by the telemetry relay", "OTEL_TRACES_EXPORTER": "set by the telemetry relay",
}

// refusedEnvPrefixes refuse whole families of variables.
var refusedEnvPrefixes = map[string]string{
	"OTEL_EXPORTER_": "set by the telemetry relay",
	"LD_":            "runs code",
	"DYLD_":          "runs code",
	"NPM_CONFIG_":    "changes where packages come from",
	"npm_config_":    "changes where packages come from",
}

// permissionKeys are what "permissions" may hold.
var permissionKeys = []string{"allow", "deny", "ask", "defaultMode", "disableBypassPermissionsMode", "blockReadsOutsideWorkingDirectories"}

// permissionModes are the default modes a document may choose: not one
// that skips the questions.
var permissionModes = []string{"default", "acceptEdits", "plan"}

// Bounds of a document.
const (
	maxRules         = 256  // rules per list
	maxRule          = 1024 // bytes of one rule
	maxEnvValue      = 4096
	maxAnnouncements = 20
	maxAnnouncement  = 1000
	maxModelID       = 256
)

// ruleRe is a permission rule: a tool name, then a specifier in
// parentheses ("Bash(npm run *)", "WebFetch(domain:example.com)").
var ruleRe = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_-]{0,127})(?:\((.*)\))?$`)

// problems collects what is wrong with a document, for one 400 answer
// naming everything at once.
type problems struct {
	unknown, refused, invalid []string
}

func (p *problems) err() error {
	if len(p.unknown)+len(p.refused)+len(p.invalid) == 0 {
		return nil
	}
	var parts []string
	fields := map[string]any{}
	if len(p.refused) > 0 {
		parts = append(parts, "refused (they would make members' machines run commands, send traffic elsewhere, or override what the workspace sets): "+strings.Join(p.refused, "; "))
		fields["refused"] = p.refused
	}
	if len(p.unknown) > 0 {
		parts = append(parts, "unknown keys: "+strings.Join(p.unknown, ", ")+" (a document may hold "+strings.Join(Keys, ", ")+")")
		fields["unknown"] = p.unknown
	}
	if len(p.invalid) > 0 {
		parts = append(parts, strings.Join(p.invalid, "; "))
		fields["invalid"] = p.invalid
	}
	e := apierr.BadRequest("the Claude Code settings are not accepted: %s", strings.Join(parts, ". "))
	e.Fields = fields
	return e
}

// CheckDocument reads and checks an owner's settings document: a JSON
// object of the allowed keys. It answers the document as Parse reads it
// and its canonical form, or a 400 naming every refused, unknown and
// malformed key. An empty object is a valid document (no settings).
func CheckDocument(raw []byte) (map[string]any, []byte, error) {
	v, err := Parse(raw)
	if err != nil {
		return nil, nil, apierr.BadRequest("the Claude Code settings are not valid JSON: %v", err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, nil, apierr.BadRequest("the Claude Code settings must be a JSON object, not %s", typeOf(v))
	}
	var p problems
	for _, k := range sortedKeys(doc) {
		val := doc[k]
		if why, ok := refusedKeys[k]; ok {
			p.refused = append(p.refused, k+" ("+why+")")
			continue
		}
		switch k {
		case "permissions":
			checkPermissions(&p, val)
		case "env":
			checkEnv(&p, val)
		case "model":
			if s, ok := val.(string); !ok || s == "" || len(s) > maxModelID || hasControl(s) {
				p.invalid = append(p.invalid, fmt.Sprintf("model must be a model id of 1 to %d characters", maxModelID))
			}
		case "companyAnnouncements":
			list, ok := stringList(val)
			if !ok || len(list) > maxAnnouncements {
				p.invalid = append(p.invalid, fmt.Sprintf("companyAnnouncements must be a list of at most %d strings", maxAnnouncements))
				break
			}
			for _, a := range list {
				if a == "" || utf8.RuneCountInString(a) > maxAnnouncement {
					p.invalid = append(p.invalid, fmt.Sprintf("an announcement must have 1 to %d characters", maxAnnouncement))
					break
				}
			}
		case "cleanupPeriodDays":
			if n, ok := val.(json.Number); !ok || !positiveInt(n, 36500) {
				p.invalid = append(p.invalid, "cleanupPeriodDays must be a whole number of days from 1 to 36500")
			}
		case "includeCoAuthoredBy", "includeGitInstructions", "disableAllHooks", "allowManagedHooksOnly",
			"allowManagedPermissionRulesOnly", "allowManagedMcpServersOnly":
			if _, ok := val.(bool); !ok {
				p.invalid = append(p.invalid, k+" must be true or false")
			}
		default:
			if k == "__proto__" {
				p.refused = append(p.refused, k+" (not a setting)")
				continue
			}
			p.unknown = append(p.unknown, k)
		}
	}
	if err := p.err(); err != nil {
		return nil, nil, err
	}
	canon, err := Canonical(doc)
	if err != nil {
		return nil, nil, apierr.BadRequest("the Claude Code settings: %v", err)
	}
	if len(canon) > MaxDocument {
		return nil, nil, apierr.BadRequest("the Claude Code settings are %d bytes; at most %d are kept", len(canon), MaxDocument)
	}
	return doc, canon, nil
}

func checkPermissions(p *problems, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		p.invalid = append(p.invalid, "permissions must be an object")
		return
	}
	for _, k := range sortedKeys(m) {
		val := m[k]
		switch k {
		case "allow", "deny", "ask":
			rules, ok := stringList(val)
			if !ok || len(rules) > maxRules {
				p.invalid = append(p.invalid, fmt.Sprintf("permissions.%s must be a list of at most %d rules", k, maxRules))
				continue
			}
			for _, r := range rules {
				if _, _, ok := ParseRule(r); !ok {
					p.invalid = append(p.invalid, fmt.Sprintf("permissions.%s: %q is not a rule like Bash(npm run *), WebFetch or Read(./src/**)", k, r))
				}
			}
		case "defaultMode":
			if s, ok := val.(string); !ok || !contains(permissionModes, s) {
				p.invalid = append(p.invalid, "permissions.defaultMode must be one of "+strings.Join(permissionModes, ", "))
			}
		case "disableBypassPermissionsMode":
			if val != "disable" {
				p.invalid = append(p.invalid, `permissions.disableBypassPermissionsMode must be "disable"`)
			}
		case "blockReadsOutsideWorkingDirectories":
			if _, ok := val.(bool); !ok {
				p.invalid = append(p.invalid, "permissions."+k+" must be true or false")
			}
		default:
			p.unknown = append(p.unknown, "permissions."+k)
		}
	}
}

// ParseRule splits a permission rule into its tool and its specifier
// (empty when the rule names the whole tool).
func ParseRule(rule string) (tool, spec string, ok bool) {
	if rule == "" || len(rule) > maxRule || hasControl(rule) {
		return "", "", false
	}
	m := ruleRe.FindStringSubmatch(rule)
	if m == nil {
		return "", "", false
	}
	if strings.Contains(rule, "(") && strings.TrimSpace(m[2]) == "" {
		return "", "", false
	}
	return m[1], m[2], true
}

func checkEnv(p *problems, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		p.invalid = append(p.invalid, "env must be an object of strings")
		return
	}
	for _, k := range sortedKeys(m) {
		if why := refusedEnvReason(k); why != "" {
			p.refused = append(p.refused, "env."+k+" ("+why+")")
			continue
		}
		if !contains(EnvKeys, k) {
			p.refused = append(p.refused, "env."+k+" (not on the list of variables a workspace may set)")
			continue
		}
		if s, ok := m[k].(string); !ok || len(s) > maxEnvValue || strings.ContainsRune(s, 0) {
			p.invalid = append(p.invalid, fmt.Sprintf("env.%s must be a string of at most %d bytes", k, maxEnvValue))
		}
	}
}

func refusedEnvReason(k string) string {
	if why, ok := refusedEnv[k]; ok {
		return why
	}
	for prefix, why := range refusedEnvPrefixes {
		if strings.HasPrefix(k, prefix) {
			return why
		}
	}
	return ""
}

func stringList(v any) ([]string, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func positiveInt(n json.Number, max int64) bool {
	i, err := strconv.ParseInt(string(n), 10, 64)
	return err == nil && i >= 1 && i <= max
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := keysOf(m)
	sort.Strings(out)
	return out
}

func typeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "something else"
}

package claudecode

import (
	"bytes"
	"encoding/json"
	"strings"
)

// One workspace policy governs both CLIs: the Claude Code permission rules
// of the owner's document also reach OpenCode, as the "permission" of the
// config the Console serves it. The two read rules differently:
//
//   - Claude Code: deny wins over ask, which wins over allow, whatever
//     the order; a rule names a tool and, in parentheses, what it covers.
//   - OpenCode: per permission (bash, edit, webfetch, …), patterns
//     ordered from the least specific to the most (fewer characters
//     other than * and ?; ties in the order written), and the last one
//     that matches wins: a specific pattern beats a broad one whatever
//     their effects.
//
// So the rules are written allow first, then ask, then deny (a pattern
// met again moves to the end with its later, stronger or equal, effect),
// and a pattern that a stronger rule's pattern covers is left out: with a
// bare deny of WebFetch there is nothing but webfetch "deny", and under
// deny "rm *" an allow "rm -rf *" is dropped, as Claude Code would deny
// it. See toolActions for the tools that map, and Unmapped for what does
// not.

// Effects of a rule.
const (
	Allow = "allow"
	Ask   = "ask"
	Deny  = "deny"
)

// Permission is an OpenCode "permission" object: for each permission in
// the order first met, its patterns in order. It encodes as JSON with the
// order kept (OpenCode reads an object's keys in order); a permission
// whose only pattern is "*" encodes as its bare effect.
type Permission struct {
	Actions []ActionRules
}

// ActionRules are one permission's patterns.
type ActionRules struct {
	Action   string
	Patterns []Pattern
}

// Pattern is one pattern and its effect.
type Pattern struct {
	Pattern, Effect string
}

// Empty reports whether p has no rule.
func (p Permission) Empty() bool { return len(p.Actions) == 0 }

// MarshalJSON writes p with its order kept.
func (p Permission) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, a := range p.Actions {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, a.Action)
		b.WriteByte(':')
		if len(a.Patterns) == 1 && a.Patterns[0].Pattern == "*" {
			writeJSONString(&b, a.Patterns[0].Effect)
			continue
		}
		b.WriteByte('{')
		for j, pt := range a.Patterns {
			if j > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, pt.Pattern)
			b.WriteByte(':')
			writeJSONString(&b, pt.Effect)
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}

// add appends a pattern of an action, or moves a pattern already there to
// the end with the new effect.
func (p *Permission) add(action, pattern, effect string) {
	for i := range p.Actions {
		a := &p.Actions[i]
		if a.Action != action {
			continue
		}
		for j, pt := range a.Patterns {
			if pt.Pattern == pattern {
				a.Patterns = append(a.Patterns[:j], a.Patterns[j+1:]...)
				break
			}
		}
		a.Patterns = append(a.Patterns, Pattern{pattern, effect})
		return
	}
	p.Actions = append(p.Actions, ActionRules{Action: action, Patterns: []Pattern{{pattern, effect}}})
}

// strength orders the effects: a stronger one wins in Claude Code.
var strength = map[string]int{Allow: 0, Ask: 1, Deny: 2}

// prune drops each pattern that a pattern of a stronger effect covers
// (matches as text), which OpenCode would otherwise let win by being more
// specific.
func (p *Permission) prune() {
	for i := range p.Actions {
		a := &p.Actions[i]
		kept := a.Patterns[:0:0]
		for _, pt := range a.Patterns {
			covered := false
			for _, q := range a.Patterns {
				if strength[q.Effect] > strength[pt.Effect] && globMatch(q.Pattern, pt.Pattern) {
					covered = true
					break
				}
			}
			if !covered {
				kept = append(kept, pt)
			}
		}
		a.Patterns = kept
	}
}

// globMatch reports whether pattern matches s as OpenCode's rules match:
// '*' any run of characters, '?' one, and a pattern ending in " *" also
// matches what precedes it ("git push *" matches "git push").
func globMatch(pattern, s string) bool {
	if glob(pattern, s) {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, " *"); ok {
		return glob(base, s)
	}
	return false
}

func glob(pattern, s string) bool {
	px, sx := 0, 0
	star, mark := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && pattern[px] == '*':
			star, mark = px, sx
			px++
		case px < len(pattern) && (pattern[px] == '?' || pattern[px] == s[sx]):
			px++
			sx++
		case star >= 0:
			px, mark = star+1, mark+1
			sx = mark
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// Unmapped is a rule or setting of the document that OpenCode has no
// counterpart for, and why.
type Unmapped struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// toolActions maps Claude Code tools to OpenCode permissions.
var toolActions = map[string]string{
	"Bash":         "bash",
	"Read":         "read",
	"Edit":         "edit",
	"Write":        "edit",
	"MultiEdit":    "edit",
	"NotebookEdit": "edit",
	"WebFetch":     "webfetch",
	"WebSearch":    "websearch",
	"Glob":         "glob",
	"Grep":         "grep",
	"LS":           "list",
	"Task":         "task",
	"Agent":        "task",
	"TodoWrite":    "todowrite",
}

// OpenCodePermission reads the document's "permissions" (as CheckDocument
// accepted it) as OpenCode permission rules, and lists what does not map.
func OpenCodePermission(doc map[string]any) (Permission, []Unmapped) {
	var out Permission
	var unmapped []Unmapped
	perms, _ := doc["permissions"].(map[string]any)
	for _, effect := range []string{Allow, Ask, Deny} {
		rules, _ := stringList(perms[effect])
		for _, rule := range rules {
			action, patterns, why := mapRule(rule)
			if why != "" {
				unmapped = append(unmapped, Unmapped{Rule: effect + " " + rule, Reason: why})
				continue
			}
			for _, pt := range patterns {
				out.add(action, pt, effect)
			}
		}
	}
	out.prune()
	if mode, ok := perms["defaultMode"].(string); ok {
		unmapped = append(unmapped, Unmapped{Rule: "defaultMode " + mode, Reason: "OpenCode has no permission mode; its rules alone decide"})
	}
	if perms["disableBypassPermissionsMode"] != nil {
		unmapped = append(unmapped, Unmapped{Rule: "disableBypassPermissionsMode", Reason: "OpenCode has no mode that bypasses its rules"})
	}
	if perms["blockReadsOutsideWorkingDirectories"] == true {
		unmapped = append(unmapped, Unmapped{Rule: "blockReadsOutsideWorkingDirectories",
			Reason: "OpenCode asks external_directory for paths outside the project; add that rule on the OpenCode side"})
	}
	return out, unmapped
}

// mapRule maps one rule to an OpenCode permission and its patterns, or
// says why it does not map.
func mapRule(rule string) (action string, patterns []string, why string) {
	tool, spec, ok := ParseRule(rule)
	if !ok {
		return "", nil, "not a rule"
	}
	if strings.HasPrefix(tool, "mcp__") {
		return "", nil, "MCP tools have no OpenCode permission rule (OpenCode turns MCP tools on and off in its tools setting)"
	}
	action, ok = toolActions[tool]
	if !ok {
		return "", nil, "OpenCode has no counterpart of the tool " + tool
	}
	if spec == "" {
		return action, []string{"*"}, ""
	}
	switch action {
	case "bash":
		// The older prefix form "npm run test:*" is the command and any
		// arguments: OpenCode's "npm run test *" (which also matches the
		// command alone).
		if p, ok := strings.CutSuffix(spec, ":*"); ok {
			spec = strings.TrimSpace(p) + " *"
		}
		return action, []string{spec}, ""
	case "read", "edit":
		switch {
		case strings.HasPrefix(spec, "//"):
			return action, []string{spec[1:]}, "" // an absolute path
		case strings.HasPrefix(spec, "~"):
			return "", nil, "a path in the home directory is the member's own machine's; OpenCode's rules match paths in the project"
		case strings.HasPrefix(spec, "./"):
			return action, []string{spec[2:]}, ""
		case strings.HasPrefix(spec, "/"):
			// Relative to where the settings apply: for managed
			// settings, the project.
			return action, []string{spec[1:]}, ""
		}
		return action, []string{spec}, ""
	case "webfetch":
		host, ok := strings.CutPrefix(spec, "domain:")
		if !ok || host == "" || strings.ContainsAny(host, "/ ") {
			return "", nil, "OpenCode's webfetch rules match URLs; only domain:<host> maps"
		}
		return action, []string{"*://" + host, "*://" + host + "/*"}, ""
	case "task":
		return action, []string{spec}, ""
	}
	return "", nil, "OpenCode's " + action + " rules take no pattern for " + tool + "(…)"
}

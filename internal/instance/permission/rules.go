// Package permission decides whether an agent's tool call may run: rule
// sets evaluated in order (last match wins), and the pending requests and
// forms a tool waits on until a person answers them through the API.
package permission

import (
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/sensitive"
)

// Rule is one Permission.Rule: an action (a tool's permission name, e.g.
// "bash", "edit", "external_directory"), a resource pattern and an effect.
type Rule = agents.PermissionRule

// The effects.
const (
	Allow = "allow"
	Deny  = "deny"
	Ask   = "ask"
)

// Defaults are the rules every evaluation starts from: everything is
// allowed except running commands, fetching from the web, touching files
// outside the session's project, reading .env files, and reading or
// editing any file that holds secrets (see package sensitive), which ask.
var Defaults = append([]Rule{
	{Action: "*", Resource: "*", Effect: Allow},
	{Action: "bash", Resource: "*", Effect: Ask},
	{Action: "webfetch", Resource: "*", Effect: Ask},
	{Action: "external_directory", Resource: "*", Effect: Ask},
	{Action: "read", Resource: "*.env", Effect: Ask},
	{Action: "read", Resource: "*.env.*", Effect: Ask},
	{Action: "read", Resource: "*.env.example", Effect: Allow},
}, SensitiveRules()...)

// SensitiveRules are the rules that make read and edit ask for the files
// package sensitive names, at any depth: its file names ask, its
// templates (.env.example, *.pub) are allowed, and anything in one of its
// directories asks, templates included. They come after a broad allow in
// the defaults. Rules match text, case-sensitively: the tools name a
// sensitive path in lower case too when they ask, so that a .ENV asks as
// a .env does.
func SensitiveRules() []Rule {
	var out []Rule
	add := func(pattern, effect string) {
		for _, action := range []string{"read", "edit"} {
			out = append(out, Rule{Action: action, Resource: pattern, Effect: effect})
			if !strings.HasPrefix(pattern, "*") {
				out = append(out, Rule{Action: action, Resource: "*/" + pattern, Effect: effect})
			}
		}
	}
	for _, n := range sensitive.Names {
		add(n, Ask)
	}
	for _, n := range sensitive.Excepted {
		add(n, Allow)
	}
	for _, d := range sensitive.DirNames {
		add(d, Ask)
		add(d+"/*", Ask)
	}
	return out
}

// Decision is an evaluation's effect and the rule that decided it (nil
// when no rule matched and the answer is Ask).
type Decision struct {
	Effect string
	Rule   *Rule
}

// Evaluate returns the effect of the last rule, over the sets in order,
// whose action matches action and whose resource matches resource; Ask
// when none does.
func Evaluate(action, resource string, sets ...[]Rule) Decision {
	var last *Rule
	for _, set := range sets {
		for i := range set {
			r := &set[i]
			if Match(action, r.Action) && Match(resource, r.Resource) {
				last = r
			}
		}
	}
	if last == nil {
		return Decision{Effect: Ask}
	}
	return Decision{Effect: last.Effect, Rule: last}
}

// EvaluateAll evaluates every resource of a request: deny when any is
// denied, else ask when any asks, else allow. The deciding rule is the
// first denying (or asking) one.
func EvaluateAll(action string, resources []string, sets ...[]Rule) Decision {
	out := Decision{Effect: Allow}
	for _, res := range resources {
		d := Evaluate(action, res, sets...)
		switch {
		case d.Effect == Deny:
			return d
		case d.Effect == Ask && out.Effect == Allow:
			out = d
		case out.Rule == nil && d.Effect == Allow:
			out.Rule = d.Rule
		}
	}
	return out
}

// Match reports whether input matches a wildcard pattern: "*" is any run
// of characters (slashes and spaces included), "?" one character, and the
// whole input must match. A pattern ending in " *" also matches the input
// without that tail ("git status *" matches "git status"). Backslashes
// count as slashes on both sides.
func Match(input, pattern string) bool {
	if pattern == "*" {
		return true
	}
	if !strings.ContainsAny(pattern, "*?") {
		return strings.ReplaceAll(input, `\`, "/") == strings.ReplaceAll(pattern, `\`, "/")
	}
	return compiled(pattern).MatchString(strings.ReplaceAll(input, `\`, "/"))
}

// patterns caches compiled patterns; rules come from configuration and
// sessions, so the cache is bounded and a pattern past the bound is
// compiled each time.
var (
	patterns     sync.Map // pattern → *regexp.Regexp
	patternCount atomic.Int32
)

const maxCachedPatterns = 4096

func compiled(pattern string) *regexp.Regexp {
	if re, ok := patterns.Load(pattern); ok {
		return re.(*regexp.Regexp)
	}
	var b strings.Builder
	b.WriteString(`(?s)^`)
	p := strings.ReplaceAll(pattern, `\`, "/")
	tail := strings.HasSuffix(p, " *")
	if tail {
		p = p[:len(p)-2]
	}
	for _, r := range p {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	if tail {
		b.WriteString(`( .*)?`)
	}
	b.WriteString(`$`)
	re := regexp.MustCompile(b.String())
	if patternCount.Add(1) <= maxCachedPatterns {
		patterns.Store(pattern, re)
	}
	return re
}

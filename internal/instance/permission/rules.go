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
// outside the session's project and reading .env files, which ask.
var Defaults = []Rule{
	{Action: "*", Resource: "*", Effect: Allow},
	{Action: "bash", Resource: "*", Effect: Ask},
	{Action: "webfetch", Resource: "*", Effect: Ask},
	{Action: "external_directory", Resource: "*", Effect: Ask},
	{Action: "read", Resource: "*.env", Effect: Ask},
	{Action: "read", Resource: "*.env.*", Effect: Ask},
	{Action: "read", Resource: "*.env.example", Effect: Allow},
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

// EvaluateAny is the decision for a resource not known before the call
// runs (a command whose name is computed when it runs, eval's code): the
// effect any resource could get. It is Allow only when every resource is
// allowed (the last rule matching everything allows and no rule after it
// restricts anything), Deny when every resource is denied, else Ask.
func EvaluateAny(action string, sets ...[]Rule) Decision {
	var deciders []*Rule
	everything := false
	for _, set := range sets {
		for i := range set {
			r := &set[i]
			if !Match(action, r.Action) {
				continue
			}
			if matchesAll(r.Resource) {
				deciders, everything = deciders[:0], true
			}
			deciders = append(deciders, r)
		}
	}
	if !everything {
		return Decision{Effect: Ask}
	}
	allow, deny := true, true
	var first *Rule
	for _, r := range deciders {
		if r.Effect != Allow {
			allow = false
			if first == nil {
				first = r
			}
		}
		if r.Effect != Deny {
			deny = false
		}
	}
	switch {
	case allow:
		return Decision{Effect: Allow, Rule: deciders[0]}
	case deny:
		return Decision{Effect: Deny, Rule: deciders[0]}
	}
	return Decision{Effect: Ask, Rule: first}
}

// EvaluateRequest decides a request: EvaluateAll over its resources and,
// when some of them are unknown (see EvaluateAny), at least as strict as
// EvaluateAny.
func EvaluateRequest(action string, resources []string, unknown bool, sets ...[]Rule) Decision {
	d := EvaluateAll(action, resources, sets...)
	if !unknown || d.Effect == Deny {
		return d
	}
	switch u := EvaluateAny(action, sets...); {
	case u.Effect == Deny, u.Effect == Ask && d.Effect == Allow:
		return u
	}
	return d
}

// matchesAll reports whether a rule's resource pattern matches every
// input ("*", "**", "* *").
func matchesAll(pattern string) bool {
	p := strings.TrimSuffix(pattern, " *")
	return p != "" && strings.Trim(p, "*") == ""
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

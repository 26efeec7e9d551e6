// Package permission decides whether an agent's tool call may run: rule
// sets evaluated in order (last match wins), with two limits on the sets
// that come from outside the operator (see Policy), and the pending
// requests and forms a tool waits on until a person answers them through
// the API.
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
	{Action: "edit", Resource: "*.env", Effect: Ask},
	{Action: "edit", Resource: "*.env.*", Effect: Ask},
	{Action: "edit", Resource: "*.env.example", Effect: Allow},
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
	return combine(resources, func(res string) Decision { return Evaluate(action, res, sets...) })
}

// combine decides a request from the decision of each of its resources,
// as EvaluateAll describes.
func combine(resources []string, decide func(string) Decision) Decision {
	out := Decision{Effect: Allow}
	for _, res := range resources {
		d := decide(res)
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

// Source is where a rule set comes from.
type Source int

const (
	// Trusted sets are the defaults, the rules of the built-in agents and
	// of the agents the instance's config defines, and the session's own
	// rules (those the client set through the API and those "always"
	// replies added): the user's and the operator's choices.
	Trusted Source = iota
	// Operator is the instance's permission rules: when they deny a call
	// (their own last matching rule denies), nothing else can allow it
	// or ask for it.
	Operator
	// Project sets come with the project a session works in: the
	// top-level "permission" of its opencode.json(c) and the rules of the
	// agents its files define. They may make a guarded call stricter but
	// not looser (see Guarded), unless the operator trusts them.
	Project
)

// Set is one rule set of an evaluation and where it comes from.
type Set struct {
	Source Source
	Rules  []Rule
}

// Policy is the rule sets of an evaluation, in order, and whether the
// operator trusts the project's sets like its own.
type Policy struct {
	Sets []Set
	// TrustProject lets the project's sets loosen guarded calls too.
	TrustProject bool
}

// With returns the policy with a set appended (the policy's own list is
// not changed).
func (p Policy) With(s Set) Policy {
	p.Sets = append(p.Sets[:len(p.Sets):len(p.Sets)], s)
	return p
}

// Decide decides a request (an action and its resources) as EvaluateAll
// does, over the policy's sets, each resource decided so:
//
//  1. the last matching rule over all the sets, in order, decides;
//  2. when the operator does not trust the project and the call is
//     guarded (Guarded), the decision without the Project sets is taken
//     instead if it is stricter (deny over ask over allow): the project's
//     rules can turn an allow into an ask or a deny and an ask into a
//     deny, never the other way;
//  3. when the last rule of the Operator sets that matches denies, the
//     answer is deny with that rule, whatever the other sets say.
func (p Policy) Decide(action string, resources []string) Decision {
	return combine(resources, func(res string) Decision { return p.decide(action, res) })
}

func (p Policy) decide(action, resource string) Decision {
	d := Evaluate(action, resource, p.rules(func(Source) bool { return true })...)
	if !p.TrustProject && Guarded(action, resource) {
		base := Evaluate(action, resource, p.rules(func(s Source) bool { return s != Project })...)
		if strictness(base.Effect) > strictness(d.Effect) {
			d = base
		}
	}
	if op := Evaluate(action, resource, p.rules(func(s Source) bool { return s == Operator })...); op.Rule != nil && op.Effect == Deny {
		d = op
	}
	return d
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

// DecideRequest decides a request as Decide does and, when some of its
// resources are unknown before the call runs (see EvaluateAny), at least
// as strictly as EvaluateAny over the same sets (and, for a guarded action
// of an untrusted project, over the sets without the project's).
func (p Policy) DecideRequest(action string, resources []string, unknown bool) Decision {
	d := p.Decide(action, resources)
	if !unknown || d.Effect == Deny {
		return d
	}
	u := EvaluateAny(action, p.rules(func(Source) bool { return true })...)
	if !p.TrustProject && guardedActions[action] {
		if base := EvaluateAny(action, p.rules(func(s Source) bool { return s != Project })...); strictness(base.Effect) > strictness(u.Effect) {
			u = base
		}
	}
	if strictness(u.Effect) > strictness(d.Effect) {
		return u
	}
	return d
}

// Hidden reports whether calls of a permission are denied outright, so
// that the tools asking for it are not offered to the model: the last
// rule for the action, over all the sets, denies every resource ("*");
// or the Operator sets' last rule for it does; or, for a guarded action
// whose resources are all guarded (bash, webfetch, external_directory)
// when the project is not trusted, the sets without the project's do. A
// project's rules can so hide a tool but not offer one the operator's or
// the trusted sets deny.
func (p Policy) Hidden(action string) bool {
	if deniesAll(action, p.rules(func(Source) bool { return true })) ||
		deniesAll(action, p.rules(func(s Source) bool { return s == Operator })) {
		return true
	}
	return !p.TrustProject && guardedActions[action] &&
		deniesAll(action, p.rules(func(s Source) bool { return s != Project }))
}

// deniesAll reports whether the last rule whose action matches action
// denies resource "*".
func deniesAll(action string, sets [][]Rule) bool {
	var last *Rule
	for _, set := range sets {
		for i := range set {
			if Match(action, set[i].Action) {
				last = &set[i]
			}
		}
	}
	return last != nil && last.Effect == Deny && last.Resource == "*"
}

// rules are the policy's sets whose source keep accepts.
func (p Policy) rules(keep func(Source) bool) [][]Rule {
	out := make([][]Rule, 0, len(p.Sets))
	for _, s := range p.Sets {
		if keep(s.Source) {
			out = append(out, s.Rules)
		}
	}
	return out
}

// guardedActions are the actions whose every call is guarded.
var guardedActions = map[string]bool{"bash": true, "webfetch": true, "external_directory": true}

// Guarded reports whether a call is one the project's rules may not
// loosen: running a command, fetching from the web, touching a path
// outside the project, or reading or editing a file that holds secrets
// (sensitive.Path of the resource, a path relative to the project).
func Guarded(action, resource string) bool {
	if guardedActions[action] {
		return true
	}
	if action == "read" || action == "edit" {
		return sensitive.Path(strings.ReplaceAll(resource, `\`, "/"))
	}
	return false
}

// strictness orders the effects: allow, then ask (and any effect not
// known), then deny.
func strictness(effect string) int {
	switch effect {
	case Allow:
		return 0
	case Deny:
		return 2
	}
	return 1
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

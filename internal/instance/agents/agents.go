// Package agents reads the agent definitions of a location: the built-in
// agents, the server config's, and a project's opencode.json(c) and
// .opencode/agent(s)/*.md files.
package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tailscale/hujson"
	"github.com/tidwall/gjson"
	yaml "go.yaml.in/yaml/v3"
)

// Agent is Agent.Info's wire record.
type Agent struct {
	ID          string           `json:"id"`
	Name        string           `json:"name"`
	Model       *ModelRef        `json:"model,omitempty"`
	Request     Request          `json:"request"`
	System      string           `json:"system,omitempty"`
	Description string           `json:"description,omitempty"`
	Mode        string           `json:"mode"`
	Hidden      bool             `json:"hidden"`
	Color       string           `json:"color,omitempty"`
	Steps       int              `json:"steps,omitempty"`
	Permissions []PermissionRule `json:"permissions"`
	// TrustedPermissions and ProjectPermissions split Permissions by where
	// the rules come from: the built-in definition and the server config
	// (trusted), or the location's own files, its opencode.json(c) "agent"
	// map and .opencode/agent(s)/*.md (project). Evaluating the trusted
	// rules then the project's decides as Permissions does. Both nil (an
	// agent not made by Load) means every rule is trusted; see RuleSources.
	TrustedPermissions []PermissionRule `json:"-"`
	ProjectPermissions []PermissionRule `json:"-"`
}

// RuleSources returns the agent's rules by where they come from (see
// TrustedPermissions).
func (a *Agent) RuleSources() (trusted, project []PermissionRule) {
	if a.TrustedPermissions == nil && a.ProjectPermissions == nil {
		return a.Permissions, nil
	}
	return a.TrustedPermissions, a.ProjectPermissions
}

// ModelRef is Model.Ref.
type ModelRef struct {
	ID         string `json:"id"`
	ProviderID string `json:"providerID"`
	Variant    string `json:"variant,omitempty"`
}

// Request holds per-agent request settings.
type Request struct {
	Settings map[string]any    `json:"settings"`
	Headers  map[string]string `json:"headers"`
	Body     map[string]any    `json:"body"`
}

// PermissionRule is one Permission.Rule.
type PermissionRule struct {
	Action   string `json:"action"`
	Resource string `json:"resource"`
	Effect   string `json:"effect"`
}

// Load returns the agents of a location. Sources, each overriding
// the earlier ones by id:
//
//  1. the built-in agents (Builtin);
//  2. configured, the agent definitions of the server config;
//  3. the project directory's opencode.jsonc then opencode.json ("agent"
//     map; both are read as JSONC: comments and trailing commas allowed),
//     then its .opencode/agent/*.md and .opencode/agents/*.md files;
//  4. the same files in directory, when it is not the project directory.
//
// A definition for an id that already exists changes only the fields it
// sets (settings and headers are merged key by key, permission rules are
// appended, replacing an earlier rule for the same action and resource);
// "disable": true removes the agent. Definition keys: name, description,
// mode (primary|subagent|all; default all), model ("providerID/modelID",
// optionally "#variant", or a Model.Ref object), variant, prompt (the system
// prompt), color, steps (and its older name maxSteps; a whole number > 0),
// hidden, headers (request headers), options (merged into the request
// settings), permission, disable. Any other key (temperature, top_p, …) is
// a request setting. JSON null means "not set".
//
// permission is an effect for everything ("ask"), or a map from action to
// an effect or to a map from resource pattern to effect:
// {"edit": "deny", "bash": {"git *": "allow", "*": "ask"}}. Rulesets are
// evaluated last-match-wins, so the rules of one map are ordered from the
// least to the most specific pattern (by the number of characters other
// than * and ?; ties keep the file's order): the most specific rule wins
// whatever order the file lists them in.
//
// A markdown agent file may start with YAML front matter between two "---"
// lines: one mapping of the definition keys, read by the YAML library
// (quoted strings, lists, nested maps, | and > blocks, flow values; a
// number only in JSON's syntax, other YAML number forms stay text; see
// parseFrontMatter for the two leniencies kept for hand-written files).
// The body, when not empty, is the system prompt; the file name without
// .md is the id.
//
// The result lists the built-in agents in their fixed order, then the
// others by id. Any malformed source (unreadable file, bad JSON or front
// matter, unknown mode, steps ≤ 0, a bad model or permission) is an error
// naming the file and agent: the server then refuses to build the location
// and answers 503 ServiceUnavailableError (service "location") until the
// config is fixed, rather than serving a partial agent list. Empty
// projectDir and directory read no files (used to check a server config).
func Load(projectDir, directory string, configured map[string]json.RawMessage) ([]Agent, error) {
	set := newAgentSet()
	ids := make([]string, 0, len(configured))
	for id := range configured {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		raw := configured[id]
		if err := checkJSON(raw); err != nil {
			return nil, fmt.Errorf("server config: agent %q: %v", id, err)
		}
		if err := set.apply("server config", id, gjson.ParseBytes(raw), false); err != nil {
			return nil, err
		}
	}
	dirs := locationDirs(projectDir, directory)
	for _, dir := range dirs {
		if err := set.loadConfigFiles(dir); err != nil {
			return nil, err
		}
		if err := set.loadMarkdown(dir); err != nil {
			return nil, err
		}
	}
	return set.list(), nil
}

// Builtin are the agents every location has.
func Builtin() []Agent {
	req := func() Request {
		return Request{Settings: map[string]any{}, Headers: map[string]string{}, Body: map[string]any{}}
	}
	return []Agent{
		{ID: "build", Name: "build", Description: "The default agent: reads, writes and runs what the task needs.", Mode: "primary", Request: req(), Permissions: []PermissionRule{}},
		{ID: "plan", Name: "plan", Description: "Plans without changing files.", Mode: "primary", Request: req(),
			Permissions: []PermissionRule{{Action: "edit", Resource: "*", Effect: "deny"}, {Action: "bash", Resource: "*", Effect: "ask"}}},
		{ID: "general", Name: "general", Description: "A general-purpose subagent for research and multi-step tasks.", Mode: "subagent", Request: req(), Permissions: []PermissionRule{}},
		{ID: "explore", Name: "explore", Description: "A fast subagent that searches and reads the codebase without changing it.", Mode: "subagent", Request: req(),
			Permissions: []PermissionRule{{Action: "*", Resource: "*", Effect: "deny"}, {Action: "read", Resource: "*", Effect: "allow"},
				{Action: "grep", Resource: "*", Effect: "allow"}, {Action: "glob", Resource: "*", Effect: "allow"}, {Action: "list", Resource: "*", Effect: "allow"},
				{Action: "webfetch", Resource: "*", Effect: "allow"}}},
		// The server's own tasks: summarising a conversation, titling and
		// summarising a session. They run no tools.
		{ID: "compaction", Name: "compaction", Mode: "primary", Hidden: true, Request: req(), Permissions: denyAll()},
		{ID: "title", Name: "title", Mode: "primary", Hidden: true, System: TitlePrompt, Request: req(), Permissions: denyAll()},
		{ID: "summary", Name: "summary", Mode: "primary", Hidden: true, Request: req(), Permissions: denyAll()},
	}
}

// TitlePrompt is the title agent's system prompt: the server asks it for
// a session's title after the session's first prompt. A definition of
// the title agent with a prompt of its own replaces it.
const TitlePrompt = `You name conversations. Answer with a title for the conversation you are given, and nothing else.

The title:
- is one line of at most 50 characters, with no quotes, no markdown and no final period;
- is in the language the user writes in;
- says what the user wants done or asked about, in plain words (keep technical terms, file names, numbers and error codes exactly);
- never answers the user's message, never names a tool, never says you cannot make a title.

A greeting or a message with little in it still gets a short title that says what it is (for example: Greeting).`

func denyAll() []PermissionRule {
	return []PermissionRule{{Action: "*", Resource: "*", Effect: "deny"}}
}

// agentSet accumulates agent definitions by id.
type agentSet struct {
	builtin []string // ids of the built-ins, in order
	byID    map[string]*Agent
}

func newAgentSet() *agentSet {
	s := &agentSet{byID: map[string]*Agent{}}
	for _, a := range Builtin() {
		a := a
		s.builtin = append(s.builtin, a.ID)
		s.byID[a.ID] = &a
	}
	return s
}

func (s *agentSet) list() []Agent {
	out := make([]Agent, 0, len(s.byID))
	isBuiltin := map[string]bool{}
	for _, id := range s.builtin {
		isBuiltin[id] = true
		if a, ok := s.byID[id]; ok {
			out = append(out, *a)
		}
	}
	rest := make([]string, 0, len(s.byID))
	for id := range s.byID {
		if !isBuiltin[id] {
			rest = append(rest, id)
		}
	}
	sort.Strings(rest)
	for _, id := range rest {
		out = append(out, *s.byID[id])
	}
	return out
}

// configDoc is one parsed opencode.json(c) of a directory.
type configDoc struct {
	path string
	doc  gjson.Result
}

// configDocs reads dir's opencode.jsonc and opencode.json (in that
// order; missing ones are skipped) as JSONC objects.
func configDocs(dir string) ([]configDoc, error) {
	var out []configDoc
	for _, name := range []string{"opencode.jsonc", "opencode.json"} {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		clean, err := StripJSONC(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if err := checkJSON(clean); err != nil {
			return nil, fmt.Errorf("%s: %s", path, describeJSONError(clean, err))
		}
		doc := gjson.ParseBytes(clean)
		if !doc.IsObject() {
			return nil, fmt.Errorf("%s: the config must be a JSON object", path)
		}
		out = append(out, configDoc{path, doc})
	}
	return out, nil
}

// loadConfigFiles applies the "agent" map of dir's opencode.jsonc and
// opencode.json, in that order.
func (s *agentSet) loadConfigFiles(dir string) error {
	docs, err := configDocs(dir)
	if err != nil {
		return err
	}
	for _, d := range docs {
		path := d.path
		agents := d.doc.Get("agent")
		if !agents.Exists() || agents.Type == gjson.Null {
			continue
		}
		if !agents.IsObject() {
			return fmt.Errorf("%s: \"agent\" must be an object of agent definitions by id", path)
		}
		var ferr error
		agents.ForEach(func(k, v gjson.Result) bool {
			ferr = s.apply(path, k.String(), v, true)
			return ferr == nil
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

// ProjectPermissions are the rules of the top-level "permission" of dir's
// opencode.jsonc then opencode.json (the same forms as an agent's).
func ProjectPermissions(dir string) ([]PermissionRule, error) {
	docs, err := configDocs(dir)
	if err != nil {
		return nil, err
	}
	var out []PermissionRule
	for _, d := range docs {
		v := d.doc.Get("permission")
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		rules, err := parsePermission(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", d.path, err)
		}
		out = mergeRules(out, rules)
	}
	return out, nil
}

// loadMarkdown applies dir's .opencode/agent/*.md then .opencode/agents/*.md.
func (s *agentSet) loadMarkdown(dir string) error {
	return eachMarkdown(dir, []string{"agent", "agents"}, func(path, id string, def []byte) error {
		return s.apply(path, id, gjson.ParseBytes(def), true)
	})
}

var agentModes = map[string]bool{"primary": true, "subagent": true, "all": true}

// apply merges one definition into the set; project tells whether it
// comes from the location's files (its permission rules are then the
// agent's ProjectPermissions) or from the server config.
func (s *agentSet) apply(src, id string, def gjson.Result, project bool) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%s: agent %q: %s", src, id, fmt.Sprintf(format, a...))
	}
	if id == "" {
		return fmt.Errorf("%s: an agent id is empty", src)
	}
	if def.Type == gjson.Null {
		return nil
	}
	if !def.IsObject() {
		return fail("the definition must be an object")
	}
	if d := def.Get(gjson.Escape("disable")); d.Exists() && d.Type != gjson.Null {
		if !isBool(d) {
			return fail("disable must be true or false")
		}
		if d.Bool() {
			delete(s.byID, id)
			return nil
		}
	}
	a := cloneAgent(s.byID[id], id)
	var err error
	def.ForEach(func(k, v gjson.Result) bool {
		key := k.String()
		if v.Type == gjson.Null {
			return true
		}
		str := func(dst *string) bool {
			if v.Type != gjson.String {
				err = fail("%s must be a string", key)
				return false
			}
			*dst = v.String()
			return true
		}
		switch key {
		case "disable":
		case "name":
			return str(&a.Name)
		case "description":
			return str(&a.Description)
		case "prompt":
			return str(&a.System)
		case "color":
			return str(&a.Color)
		case "mode":
			var m string
			if !str(&m) {
				return false
			}
			if !agentModes[m] {
				err = fail("mode must be primary, subagent or all, not %q", m)
				return false
			}
			a.Mode = m
		case "model":
			m, perr := parseModel(v)
			if perr != nil {
				err = fail("%v", perr)
				return false
			}
			a.Model = m
		case "variant":
			var vr string
			if !str(&vr) {
				return false
			}
			if a.Model == nil && def.Get("model").Type != gjson.String && !def.Get("model").IsObject() {
				err = fail("variant needs a model")
				return false
			}
			if a.Model != nil {
				a.Model.Variant = vr
			} // else the model comes later in this definition: see below
		case "steps", "maxSteps":
			n, ok := positiveInt(v)
			if !ok {
				err = fail("%s must be a whole number greater than 0, not %s", key, strings.TrimSpace(v.Raw))
				return false
			}
			a.Steps = n
		case "hidden":
			if !isBool(v) {
				err = fail("hidden must be true or false")
				return false
			}
			a.Hidden = v.Bool()
		case "headers":
			if !v.IsObject() {
				err = fail("headers must be an object of strings")
				return false
			}
			v.ForEach(func(hk, hv gjson.Result) bool {
				if hv.Type != gjson.String {
					err = fail("header %q must be a string", hk.String())
					return false
				}
				a.Request.Headers[hk.String()] = hv.String()
				return true
			})
			return err == nil
		case "options":
			if !v.IsObject() {
				err = fail("options must be an object")
				return false
			}
			v.ForEach(func(ok, ov gjson.Result) bool {
				if ov.Type != gjson.Null {
					a.Request.Settings[ok.String()] = jsonValue(ov)
				}
				return true
			})
		case "permission":
			rules, perr := parsePermission(v)
			if perr != nil {
				err = fail("%v", perr)
				return false
			}
			a.Permissions = mergeRules(a.Permissions, rules)
			if project {
				a.ProjectPermissions = mergeRules(a.ProjectPermissions, rules)
			} else {
				a.TrustedPermissions = mergeRules(a.TrustedPermissions, rules)
			}
		default:
			a.Request.Settings[key] = jsonValue(v)
		}
		return true
	})
	if err != nil {
		return err
	}
	// "variant" wins over a "#variant" of the model in the same definition,
	// whatever their order.
	if vr := def.Get("variant"); vr.Type == gjson.String && a.Model != nil {
		a.Model.Variant = vr.String()
	}
	s.byID[id] = a
	return nil
}

// cloneAgent copies an agent (so that a failed definition changes
// nothing), or makes a new one with the defaults.
func cloneAgent(a *Agent, id string) *Agent {
	if a == nil {
		return &Agent{ID: id, Name: id, Mode: "all", Permissions: []PermissionRule{}, TrustedPermissions: []PermissionRule{},
			Request: Request{Settings: map[string]any{}, Headers: map[string]string{}, Body: map[string]any{}}}
	}
	c := *a
	if a.Model != nil {
		m := *a.Model
		c.Model = &m
	}
	c.Request = Request{Settings: map[string]any{}, Headers: map[string]string{}, Body: map[string]any{}}
	for k, v := range a.Request.Settings {
		c.Request.Settings[k] = v
	}
	for k, v := range a.Request.Headers {
		c.Request.Headers[k] = v
	}
	for k, v := range a.Request.Body {
		c.Request.Body[k] = v
	}
	c.Permissions = append([]PermissionRule{}, a.Permissions...)
	c.TrustedPermissions, c.ProjectPermissions = a.RuleSources()
	c.TrustedPermissions = append([]PermissionRule{}, c.TrustedPermissions...)
	if c.ProjectPermissions != nil {
		c.ProjectPermissions = append([]PermissionRule{}, c.ProjectPermissions...)
	}
	return &c
}

func isBool(v gjson.Result) bool { return v.Type == gjson.True || v.Type == gjson.False }

func positiveInt(v gjson.Result) (int, bool) {
	if v.Type != gjson.Number {
		return 0, false
	}
	f := v.Float()
	if f < 1 || f != math.Trunc(f) || f > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

func jsonValue(v gjson.Result) any {
	var out any
	if err := json.Unmarshal([]byte(v.Raw), &out); err != nil {
		return v.Value()
	}
	return out
}

// ParseModelRef parses "providerID/modelID" with an optional "#variant";
// the model id may itself contain slashes.
func ParseModelRef(s string) (*ModelRef, error) {
	ref, variant, hasVariant := strings.Cut(s, "#")
	provider, id, ok := strings.Cut(ref, "/")
	if !ok || strings.TrimSpace(provider) == "" || strings.TrimSpace(id) == "" || (hasVariant && variant == "") {
		return nil, fmt.Errorf("model must be \"providerID/modelID\" (optionally \"#variant\"), not %q", s)
	}
	return &ModelRef{ProviderID: provider, ID: id, Variant: variant}, nil
}

func parseModel(v gjson.Result) (*ModelRef, error) {
	switch {
	case v.Type == gjson.String:
		return ParseModelRef(v.String())
	case v.IsObject():
		var m ModelRef
		dec := json.NewDecoder(strings.NewReader(v.Raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil || m.ID == "" || m.ProviderID == "" {
			return nil, errors.New("model must be \"providerID/modelID\" or an object {providerID, id, variant?}")
		}
		return &m, nil
	}
	return nil, errors.New("model must be \"providerID/modelID\" or an object {providerID, id, variant?}")
}

var permissionEffects = map[string]bool{"allow": true, "deny": true, "ask": true}

func effect(v gjson.Result, where string) (string, error) {
	if v.Type != gjson.String || !permissionEffects[v.String()] {
		return "", fmt.Errorf("permission %s must be allow, deny or ask, not %s", where, strings.TrimSpace(v.Raw))
	}
	return v.String(), nil
}

// parsePermission converts the opencode permission forms to a ruleset.
func parsePermission(v gjson.Result) ([]PermissionRule, error) {
	if v.Type == gjson.String {
		e, err := effect(v, "(for everything)")
		if err != nil {
			return nil, err
		}
		return []PermissionRule{{Action: "*", Resource: "*", Effect: e}}, nil
	}
	if !v.IsObject() {
		return nil, errors.New("permission must be an effect or an object by action")
	}
	type group struct {
		action string
		rules  []PermissionRule
	}
	var groups []group
	var err error
	v.ForEach(func(k, av gjson.Result) bool {
		action := k.String()
		switch {
		case av.Type == gjson.Null:
		case av.Type == gjson.String:
			var e string
			if e, err = effect(av, "of "+strconv.Quote(action)); err != nil {
				return false
			}
			groups = append(groups, group{action, []PermissionRule{{Action: action, Resource: "*", Effect: e}}})
		case av.IsObject():
			g := group{action: action}
			av.ForEach(func(pk, pv gjson.Result) bool {
				if pv.Type == gjson.Null {
					return true
				}
				var e string
				if e, err = effect(pv, "of "+strconv.Quote(action)+" "+strconv.Quote(pk.String())); err != nil {
					return false
				}
				g.rules = append(g.rules, PermissionRule{Action: action, Resource: pk.String(), Effect: e})
				return true
			})
			if err != nil {
				return false
			}
			sort.SliceStable(g.rules, func(i, j int) bool {
				return specificity(g.rules[i].Resource) < specificity(g.rules[j].Resource)
			})
			groups = append(groups, g)
		default:
			err = fmt.Errorf("permission of %q must be an effect or an object by pattern", action)
			return false
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(groups, func(i, j int) bool { return specificity(groups[i].action) < specificity(groups[j].action) })
	out := []PermissionRule{}
	for _, g := range groups {
		out = append(out, g.rules...)
	}
	return out, nil
}

// specificity is the number of characters of a pattern other than the
// wildcards * and ?.
func specificity(pattern string) int {
	return len(pattern) - strings.Count(pattern, "*") - strings.Count(pattern, "?")
}

// mergeRules appends rules, dropping earlier rules for the same action and
// resource.
func mergeRules(old, add []PermissionRule) []PermissionRule {
	out := make([]PermissionRule, 0, len(old)+len(add))
	for _, r := range old {
		replaced := false
		for _, n := range add {
			if n.Action == r.Action && n.Resource == r.Resource {
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, r)
		}
	}
	return append(out, add...)
}

func checkJSON(b []byte) error {
	var v any
	return json.Unmarshal(b, &v)
}

// describeJSONError adds the line and column of a syntax error.
func describeJSONError(b []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off := int(se.Offset)
		if off > len(b) {
			off = len(b)
		}
		line := 1 + bytes.Count(b[:off], []byte("\n"))
		col := off - bytes.LastIndexByte(b[:off], '\n')
		return fmt.Sprintf("line %d, column %d: %v", line, col, err)
	}
	return err.Error()
}

// StripJSONC turns JSONC into JSON with hujson: // and /* */ comments and
// trailing commas become spaces (line breaks are kept, so that error
// offsets still point into the original text). Anything else must already
// be JSON; an error names the line and column.
func StripJSONC(in []byte) ([]byte, error) {
	// hujson edits the buffer it parses, and wants a // comment to end with
	// a line break, which the last line of a file may lack: it gets a copy
	// with one more line break, dropped again below.
	src := make([]byte, len(in), len(in)+1)
	copy(src, in)
	src = append(src, '\n')
	out, err := hujson.Standardize(src)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "hujson: ")
		return nil, errors.New(strings.Replace(msg, "parsing comment: unexpected EOF", "unterminated /* comment", 1))
	}
	return out[:len(out)-1], nil
}

// ParseMarkdown turns an agent markdown file into a JSON definition:
// the front matter's keys, and the body as "prompt" when it is not empty.
func ParseMarkdown(data []byte) ([]byte, error) {
	text := strings.TrimPrefix(string(data), "\ufeff")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	var fm []string
	body := text
	lines := strings.Split(text, "\n")
	if len(lines) > 0 && strings.TrimRight(lines[0], " \t") == "---" {
		end := -1
		for i := 1; i < len(lines); i++ {
			if strings.TrimRight(lines[i], " \t") == "---" {
				end = i
				break
			}
		}
		if end < 0 {
			return nil, errors.New("the front matter has no closing --- line")
		}
		fm = lines[1:end]
		body = strings.Join(lines[end+1:], "\n")
	}
	m, err := parseFrontMatter(fm)
	if err != nil {
		return nil, err
	}
	if b := strings.TrimSpace(body); b != "" {
		m = m.set("prompt", mustJSON(b))
	}
	return m.json(), nil
}

// orderedMap is a JSON object that keeps its key order.
type orderedMap []struct {
	key   string
	value json.RawMessage
}

func (m orderedMap) set(k string, v json.RawMessage) orderedMap {
	for i := range m {
		if m[i].key == k {
			m[i].value = v
			return m
		}
	}
	return append(m, struct {
		key   string
		value json.RawMessage
	}{k, v})
}

func (m orderedMap) has(k string) bool {
	for _, e := range m {
		if e.key == k {
			return true
		}
	}
	return false
}

func (m orderedMap) json() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(mustJSON(e.key))
		b.WriteByte(':')
		b.Write(e.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// parseFrontMatter reads the front matter lines (the file's lines 2, 3, …)
// with the YAML library into a definition that keeps the file's key order
// (permission rules of equal specificity keep it). Agent files are often
// written by hand for opencode and carry two habits that strict YAML reads
// otherwise; both keep the meaning they have always had here:
//
//   - a value that YAML refuses but reads as text (description: Use when:
//     …, or [WIP] …) is that text: when the front matter does not parse,
//     such values are quoted and it is read once more;
//   - a value starting with # (color: #38bdf8) is text, not a comment that
//     leaves the key null.
func parseFrontMatter(lines []string) (orderedMap, error) {
	doc, err := decodeFrontMatter(lines)
	if err != nil {
		if quoted, ok := quoteTextValues(lines); ok {
			if retry, rerr := decodeFrontMatter(quoted); rerr == nil {
				doc, err = retry, nil
			}
		}
	}
	if err != nil {
		return nil, frontMatterError(lines, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 { // empty, or only comments
		return orderedMap{}, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("front matter line %d: expected \"key: value\" lines", root.Line+1)
	}
	c := &frontMatterReader{budget: frontMatterMaxValues}
	return c.mapping(root)
}

// decodeFrontMatter parses the lines as one YAML document. A second one
// (after a "..." line) is refused rather than dropped.
func decodeFrontMatter(lines []string) (*yaml.Node, error) {
	// The last line ends with a line break too: a | block ending there keeps it.
	dec := yaml.NewDecoder(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case errors.Is(err, io.EOF):
		return &doc, nil
	case err != nil:
		return nil, err
	}
	return nil, fmt.Errorf("line %d: only one YAML document is allowed", more.Line)
}

// frontMatterMaxValues bounds the values a front matter may expand to
// (aliases can repeat a value many times over).
const frontMatterMaxValues = 10000

// frontMatterReader converts YAML nodes to JSON values.
type frontMatterReader struct {
	budget int
}

func (r *frontMatterReader) mapping(n *yaml.Node) (orderedMap, error) {
	m := orderedMap{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		line := k.Line + 1 // line number in the file (after the opening ---)
		switch {
		case k.Kind != yaml.ScalarNode:
			return nil, fmt.Errorf("front matter line %d: a key must be text", line)
		case k.ShortTag() == "!!merge":
			return nil, fmt.Errorf("front matter line %d: merge keys (<<) are not supported", line)
		case k.ShortTag() == "!!null" && k.Value == "":
			return nil, fmt.Errorf("front matter line %d: empty key", line)
		case m.has(k.Value):
			return nil, fmt.Errorf("front matter line %d: %q is set twice", line, k.Value)
		}
		var value json.RawMessage
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" && v.Value == "" && k.LineComment != "" {
			// key: #text — the "comment" is the value (see parseFrontMatter).
			text := k.LineComment
			if j := strings.Index(text, " #"); j >= 0 {
				text = strings.TrimSpace(text[:j])
			}
			value = mustJSON(text)
		} else {
			var err error
			if value, err = r.value(v); err != nil {
				return nil, err
			}
		}
		m = m.set(k.Value, value)
	}
	return m, nil
}

// jsonNumberText is the JSON number syntax.
var jsonNumberText = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func (r *frontMatterReader) value(n *yaml.Node) (json.RawMessage, error) {
	if r.budget--; r.budget < 0 {
		return nil, errors.New("front matter: too many values (aliases expand too far)")
	}
	switch n.Kind {
	case yaml.AliasNode:
		return r.value(n.Alias)
	case yaml.MappingNode:
		m, err := r.mapping(n)
		if err != nil {
			return nil, err
		}
		return m.json(), nil
	case yaml.SequenceNode:
		items := make([]json.RawMessage, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := r.value(c)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		return mustJSON(items), nil
	}
	switch n.ShortTag() {
	case "!!null":
		return json.RawMessage("null"), nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("front matter line %d: %v", n.Line+1, err)
		}
		return mustJSON(b), nil
	case "!!int", "!!float":
		// A number is a JSON number, as in opencode.json; YAML's other
		// number forms (0x1F, 0o17, 017, +5, 1_000, .5, .inf, .nan), which
		// JSON cannot write or agent files do not mean as numbers, stay text.
		if jsonNumberText.MatchString(n.Value) {
			return json.RawMessage(n.Value), nil
		}
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		// A local tag means nothing to an agent definition: "!x y" is the
		// text it always was here, not "y".
		return mustJSON(strings.TrimSpace(n.Tag + " " + n.Value)), nil
	}
	// Strings, and the other scalar types (timestamps, binary): the text as
	// written.
	return mustJSON(n.Value), nil
}

// yamlKeyValue matches a "key: value" line with a plain or quoted key and
// a value that is neither quoted, nor a comment, nor a | or > block.
var yamlKeyValue = regexp.MustCompile(`^( *)("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s"'#{}\[\]&*!|>%@?,-][^:]*?)[ \t]*:[ \t]+([^\s"'#|>].*)$`)

// quoteTextValues quotes the "key: value" lines whose value YAML refuses
// on its own line but which read as text (Use when: …, [WIP] …, `code`,
// *bold*); a " #" ends the text, as a comment. Lines of | and > blocks are
// left alone. It reports whether it changed a line.
func quoteTextValues(lines []string) ([]string, bool) {
	out := slices.Clone(lines)
	changed := false
	inBlock := blockScalarLines(lines)
	for i, line := range lines {
		m := yamlKeyValue.FindStringSubmatch(line)
		if m == nil || inBlock[i] {
			continue
		}
		var probe yaml.Node
		if yaml.Unmarshal([]byte("k: "+m[3]), &probe) == nil {
			continue
		}
		value := m[3]
		if j := strings.Index(value, " #"); j >= 0 {
			value = value[:j]
		}
		out[i] = m[1] + m[2] + ": " + strconv.Quote(strings.TrimSpace(value))
		changed = true
	}
	return out, changed
}

// blockScalarLines marks the lines of | and > blocks (not their key line).
func blockScalarLines(lines []string) []bool {
	in := make([]bool, len(lines))
	block := -1 // indentation of the key line of the block
	for i, line := range lines {
		ind := indentOf(line)
		if block >= 0 && (strings.TrimSpace(line) == "" || ind > block) {
			in[i] = true
			continue
		}
		block = -1
		if _, v, ok := strings.Cut(line, ": "); ok {
			if v = strings.TrimSpace(v); strings.HasPrefix(v, "|") || strings.HasPrefix(v, ">") {
				block = ind
			}
		}
	}
	return in
}

func indentOf(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// yamlErrorLine is the "line N: " the YAML library puts before most of its
// messages (N counts the front matter's lines).
var yamlErrorLine = regexp.MustCompile(`^line ([0-9]+): `)

// frontMatterError words a front matter the YAML library refused: the two
// mistakes hand-written front matter most often has are named as such,
// anything else is the library's message with the file's line number.
func frontMatterError(lines []string, err error) error {
	prev, prevScalar := -1, false // the previous line's indentation, and whether it set a scalar
	inBlock := blockScalarLines(lines)
	for i, line := range lines {
		n := i + 2 // line number in the file (after the opening ---)
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") || inBlock[i] {
			continue
		}
		if strings.Contains(line[:len(line)-len(strings.TrimLeft(line, " \t"))], "\t") {
			return fmt.Errorf("front matter line %d: indent with spaces, not tabs", n)
		}
		ind := indentOf(line)
		if ind > prev && prevScalar && strings.Contains(t, ": ") {
			return fmt.Errorf("front matter line %d: unexpected indentation", n)
		}
		_, v, ok := strings.Cut(t, ": ")
		v = strings.TrimSpace(v)
		prev, prevScalar = ind, ok && v != "" && !strings.HasPrefix(v, "#") && !strings.ContainsAny(v[:1], "|>[{\"'&*!")
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	// The library's only "end of stream" error is an open quote.
	msg = strings.Replace(msg, "found unexpected end of stream", "unterminated quoted string", 1)
	if m := yamlErrorLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		// The library's line numbers can be one short: "near".
		return fmt.Errorf("front matter, near line %d: %s", n+1, msg[len(m[0]):])
	}
	return fmt.Errorf("front matter: %s", msg)
}

package agents

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func putFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func agentIDs(agents []Agent) []string {
	ids := make([]string, len(agents))
	for i, a := range agents {
		ids[i] = a.ID
	}
	return ids
}

func findAgent(t *testing.T, agents []Agent, id string) Agent {
	t.Helper()
	for _, a := range agents {
		if a.ID == id {
			return a
		}
	}
	t.Fatalf("agent %q not in %v", id, agentIDs(agents))
	return Agent{}
}

func mustLoad(t *testing.T, project, dir string, configured map[string]json.RawMessage) []Agent {
	t.Helper()
	agents, err := Load(project, dir, configured)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return agents
}

func TestLoadAgentsBuiltinsOnly(t *testing.T) {
	dir := t.TempDir()
	got := mustLoad(t, dir, dir, nil)
	if !reflect.DeepEqual(got, Builtin()) {
		t.Fatalf("got %+v, want the built-ins", got)
	}
	// The JSON shape: the required members are there even when empty.
	b, _ := json.Marshal(got[0])
	for _, want := range []string{`"id":"build"`, `"name":"build"`, `"mode":"primary"`, `"hidden":false`,
		`"request":{"settings":{},"headers":{},"body":{}}`, `"permissions":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), `"model"`) || strings.Contains(string(b), `"steps"`) {
		t.Errorf("%s has unset optional members", b)
	}
}

func TestLoadAgentsEverySourceAndOrder(t *testing.T) {
	project := t.TempDir()
	sub := filepath.Join(project, "pkg", "api")
	configured := map[string]json.RawMessage{
		"zeta":   json.RawMessage(`{"description":"from server config"}`),
		"shared": json.RawMessage(`{"description":"server","mode":"subagent","color":"red","steps":3}`),
		"plan":   json.RawMessage(`{"description":"server plan"}`),
	}
	putFile(t, filepath.Join(project, "opencode.jsonc"), `{
		// project JSONC
		"agent": {
			"shared": {"description": "project jsonc", "hidden": true},
			"jsonc-only": {"prompt": "jsonc"},
		},
	}`)
	putFile(t, filepath.Join(project, "opencode.json"), `{"agent": {"shared": {"description": "project json"}, "alpha": {}}}`)
	putFile(t, filepath.Join(project, ".opencode", "agent", "shared.md"), "---\ncolor: blue\n---\nproject md prompt\n")
	putFile(t, filepath.Join(project, ".opencode", "agents", "beta.md"), "beta prompt")
	putFile(t, filepath.Join(sub, "opencode.json"), `{"agent": {"shared": {"steps": 9}}}`)
	putFile(t, filepath.Join(sub, ".opencode", "agent", "shared.md"), "---\nmode: primary\n---\n")

	got := mustLoad(t, project, sub, configured)
	if want := []string{"build", "plan", "general", "explore", "compaction", "title", "summary", "alpha", "beta", "jsonc-only", "shared", "zeta"}; !reflect.DeepEqual(agentIDs(got), want) {
		t.Fatalf("ids %v, want %v (built-ins first, then by id)", agentIDs(got), want)
	}
	s := findAgent(t, got, "shared")
	want := Agent{ID: "shared", Name: "shared", Description: "project json", Mode: "primary", Hidden: true,
		Color: "blue", Steps: 9, System: "project md prompt", Permissions: []PermissionRule{}, TrustedPermissions: []PermissionRule{},
		Request: Request{Settings: map[string]any{}, Headers: map[string]string{}, Body: map[string]any{}}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("shared =\n%+v\nwant\n%+v", s, want)
	}
	if p := findAgent(t, got, "plan"); p.Description != "server plan" || p.Mode != "primary" || len(p.Permissions) != 2 {
		t.Fatalf("plan override lost the built-in fields: %+v", p)
	}
	if a := findAgent(t, got, "alpha"); a.Mode != "all" || a.Name != "alpha" || a.Permissions == nil || a.Request.Settings == nil {
		t.Fatalf("alpha defaults: %+v", a)
	}
	if b := findAgent(t, got, "beta"); b.System != "beta prompt" {
		t.Fatalf("beta (no front matter) system = %q", b.System)
	}
	if j := findAgent(t, got, "jsonc-only"); j.System != "jsonc" {
		t.Fatalf("jsonc-only system = %q", j.System)
	}

	// Only the project: the location's files are not read.
	got = mustLoad(t, project, project, configured)
	if s := findAgent(t, got, "shared"); s.Steps != 3 || s.Mode != "subagent" {
		t.Fatalf("project-only shared = %+v", s)
	}
	// No files at all: only built-ins and the server config.
	got = mustLoad(t, "", "", configured)
	if want := []string{"build", "plan", "general", "explore", "compaction", "title", "summary", "shared", "zeta"}; !reflect.DeepEqual(agentIDs(got), want) {
		t.Fatalf("ids %v, want %v", agentIDs(got), want)
	}
}

func TestLoadAgentsAllFields(t *testing.T) {
	dir := t.TempDir()
	putFile(t, filepath.Join(dir, "opencode.json"), `{
  "$schema": "https://opencode.ai/config.json",
  "model": "ignored/top-level",
  "agent": {
    "review": {
      "name": "Reviewer",
      "description": "Reviews code",
      "mode": "subagent",
      "model": "anthropic/claude-sonnet-4#high",
      "prompt": "You review.",
      "color": "#ff0000",
      "steps": 12,
      "hidden": true,
      "temperature": 0.2,
      "top_p": 0.9,
      "reasoningEffort": "high",
      "options": {"store": false},
      "headers": {"X-Team": "core"},
      "permission": {"edit": "deny", "bash": {"git *": "allow", "*": "ask"}, "webfetch": "allow"},
      "unset": null
    }
  }
}`)
	got := findAgent(t, mustLoad(t, dir, dir, nil), "review")
	want := Agent{
		ID: "review", Name: "Reviewer", Description: "Reviews code", Mode: "subagent",
		Model:  &ModelRef{ProviderID: "anthropic", ID: "claude-sonnet-4", Variant: "high"},
		System: "You review.", Color: "#ff0000", Steps: 12, Hidden: true,
		Request: Request{
			Settings: map[string]any{"temperature": 0.2, "top_p": 0.9, "reasoningEffort": "high", "store": false},
			Headers:  map[string]string{"X-Team": "core"},
			Body:     map[string]any{},
		},
		Permissions: []PermissionRule{
			{Action: "edit", Resource: "*", Effect: "deny"},
			{Action: "bash", Resource: "*", Effect: "ask"},
			{Action: "bash", Resource: "git *", Effect: "allow"},
			{Action: "webfetch", Resource: "*", Effect: "allow"},
		},
		TrustedPermissions: []PermissionRule{},
	}
	// The rules come from the project's file: they are its agent's
	// project rules.
	want.ProjectPermissions = want.Permissions
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
}

func TestLoadAgentsMergeAndDisable(t *testing.T) {
	dir := t.TempDir()
	configured := map[string]json.RawMessage{
		"helper": json.RawMessage(`{"description":"d","model":"openai/gpt-5","temperature":0.5,"headers":{"A":"1"},
			"permission":{"edit":"deny","bash":"ask"}}`),
		"general": json.RawMessage(`{"disable": true}`),
		"gone":    json.RawMessage(`{"description":"x"}`),
	}
	putFile(t, filepath.Join(dir, "opencode.json"), `{"agent": {
		"helper": {"top_p": 1, "headers": {"B": "2"}, "permission": {"edit": "allow"}, "variant": "low"},
		"gone": {"disable": true, "mode": "not-even-checked"},
		"plan": {"disable": false, "color": "green"}
	}}`)
	// Re-added after its removal by a later source.
	putFile(t, filepath.Join(dir, ".opencode", "agent", "general.md"), "---\nmode: subagent\n---\nback")
	got := mustLoad(t, dir, dir, configured)
	if want := []string{"build", "plan", "general", "explore", "compaction", "title", "summary", "helper"}; !reflect.DeepEqual(agentIDs(got), want) {
		t.Fatalf("ids %v, want %v", agentIDs(got), want)
	}
	h := findAgent(t, got, "helper")
	if h.Description != "d" || !reflect.DeepEqual(h.Model, &ModelRef{ProviderID: "openai", ID: "gpt-5", Variant: "low"}) {
		t.Fatalf("helper kept fields: %+v model %+v", h, h.Model)
	}
	if !reflect.DeepEqual(h.Request.Settings, map[string]any{"temperature": 0.5, "top_p": 1.0}) {
		t.Fatalf("settings not merged: %v", h.Request.Settings)
	}
	if !reflect.DeepEqual(h.Request.Headers, map[string]string{"A": "1", "B": "2"}) {
		t.Fatalf("headers not merged: %v", h.Request.Headers)
	}
	wantRules := []PermissionRule{{Action: "bash", Resource: "*", Effect: "ask"}, {Action: "edit", Resource: "*", Effect: "allow"}}
	if !reflect.DeepEqual(h.Permissions, wantRules) {
		t.Fatalf("rules %+v, want %+v", h.Permissions, wantRules)
	}
	if p := findAgent(t, got, "plan"); p.Color != "green" {
		t.Fatalf("disable:false removed or ignored plan: %+v", p)
	}
	if g := findAgent(t, got, "general"); g.System != "back" || g.Description != "" {
		t.Fatalf("re-added general should start afresh: %+v", g)
	}
	// The built-in slice is not shared with the result.
	if Builtin()[1].Color != "" {
		t.Fatal("an override changed the built-ins")
	}
}

func TestLoadAgentsJSONC(t *testing.T) {
	dir := t.TempDir()
	putFile(t, filepath.Join(dir, "opencode.jsonc"), `// leading comment
{
  /* block
     comment, with a comma, */
  "agent": {
    "c": {
      "description": "has // slashes and /* stars */ and ,} inside", // trailing
      "prompt": "url: http://example.com/a,b", /* after */
      "color": "\"quoted, // \\",
      "steps": 2, // trailing comma below
    },
    "d": {"permission": {"bash": {"*": "ask", /* c */ }, }, },
  },
}
`)
	got := mustLoad(t, dir, dir, nil)
	c := findAgent(t, got, "c")
	if c.Description != "has // slashes and /* stars */ and ,} inside" || c.System != "url: http://example.com/a,b" ||
		c.Color != `"quoted, // \` || c.Steps != 2 {
		t.Fatalf("c = %+v", c)
	}
	if d := findAgent(t, got, "d"); !reflect.DeepEqual(d.Permissions, []PermissionRule{{Action: "bash", Resource: "*", Effect: "ask"}}) {
		t.Fatalf("d = %+v", d.Permissions)
	}
}

func TestStripJSONC(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,}`, `{"a":1 }`},
		{`[1,2,]`, `[1,2 ]`},
		{"[1, // c\n]", "[1      \n]"},
		{`[1 /* , */ ]`, `[1         ]`},
		{`["a,]", "b//c", "d/*e*/"]`, `["a,]", "b//c", "d/*e*/"]`},
		{`["\"", 1,]`, `["\"", 1 ]`},
		{`["\\", 1,]`, `["\\", 1 ]`},
		{`{"a":[1,],"b":2}`, `{"a":[1 ],"b":2}`},
		{`{"a":1,"b":2}`, `{"a":1,"b":2}`},
		// A // comment may end the file without a line break.
		{"{\"a\":1} // end", "{\"a\":1}       "},
		{"{\"a\":1,} // end", "{\"a\":1 }       "},
		// Comment starts inside comments, and CRLF line ends.
		{"{/* // */\"a\":1}", "{        \"a\":1}"},
		{"{// /* \r\n\"a\":1}", "{      \r\n\"a\":1}"},
		{"[1, // c\r\n]", "[1      \r\n]"},
		{"{\"a\":1 // x\r\n,}", "{\"a\":1     \r\n }"},
		// Comment-like and comma-like text inside strings stays.
		{`{"u":"http://x/*y*/", "e":"\\", "q":"\"//", "c":",}"}`, `{"u":"http://x/*y*/", "e":"\\", "q":"\"//", "c":",}"}`},
		{`{"k//":"/*",}`, `{"k//":"/*" }`},
		// A comma after a comment, and comments in empty containers.
		{`[1,/*x*/]`, `[1      ]`},
		{`{/* none */}`, `{          }`},
		{"{\"a\":\"caf\xe9\"} // caf\u00e9", "{\"a\":\"caf\xe9\"}         "},
		{"[\n  1,\n  2, /* two */\n]\n", "[\n  1,\n  2           \n]\n"},
	} {
		got, err := StripJSONC([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("StripJSONC(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if len(got) != len(tc.in) {
			t.Errorf("StripJSONC(%q) changed the length", tc.in)
		}
	}
	if _, err := StripJSONC([]byte("{ /* open")); err == nil || !strings.Contains(err.Error(), "unterminated") {
		t.Fatalf("unterminated comment: %v", err)
	}
	// The input is not changed.
	in := []byte(`{"a":1, /* c */}`)
	if _, err := StripJSONC(in); err != nil || string(in) != `{"a":1, /* c */}` {
		t.Fatalf("input changed to %q (%v)", in, err)
	}
	// Errors name the line and column.
	if _, err := StripJSONC([]byte("{\n  \"a\": ,\n}")); err == nil || !strings.Contains(err.Error(), "line 2, column 8") {
		t.Fatalf("error %v does not name line 2, column 8", err)
	}
	// A comma with no value before it is not a trailing comma: an error,
	// as any JSON parser says (the hand-written stripper blanked it).
	// hujson also refuses a comment that is not UTF-8 (the hand-written
	// stripper blanked its bytes); bytes in strings are left to the JSON
	// decoder as before.
	for _, bad := range []string{`{,}`, `[,]`, `[1,,]`, `{"a":1,,}`, "{} // caf\xe9", "{} /* caf\xe9 */"} {
		if out, err := StripJSONC([]byte(bad)); err == nil {
			t.Errorf("StripJSONC(%q) = %q, want an error", bad, out)
		}
	}
}

func TestParseModelRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *ModelRef
	}{
		{"openai/gpt-5", &ModelRef{ProviderID: "openai", ID: "gpt-5"}},
		{"openrouter/anthropic/claude-3.5#fast", &ModelRef{ProviderID: "openrouter", ID: "anthropic/claude-3.5", Variant: "fast"}},
		{"gpt-5", nil},
		{"/gpt-5", nil},
		{"openai/", nil},
		{"openai/gpt-5#", nil},
		{"", nil},
	} {
		got, err := ParseModelRef(tc.in)
		if tc.want == nil {
			if err == nil {
				t.Errorf("ParseModelRef(%q) = %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseModelRef(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	// The object form is accepted too.
	dir := t.TempDir()
	putFile(t, filepath.Join(dir, "opencode.json"), `{"agent":{"o":{"model":{"providerID":"p","id":"m","variant":"v"}}}}`)
	if o := findAgent(t, mustLoad(t, dir, dir, nil), "o"); !reflect.DeepEqual(o.Model, &ModelRef{ProviderID: "p", ID: "m", Variant: "v"}) {
		t.Fatalf("object model = %+v", o.Model)
	}
}

func TestPermissionForms(t *testing.T) {
	for _, tc := range []struct {
		name, perm string
		want       []PermissionRule
	}{
		{"one effect for everything", `"ask"`, []PermissionRule{{"*", "*", "ask"}}},
		{"by action", `{"edit": "deny", "read": "allow"}`, []PermissionRule{{"edit", "*", "deny"}, {"read", "*", "allow"}}},
		{"patterns, specific first in the file", `{"bash": {"git status": "allow", "git *": "ask", "*": "deny"}}`,
			[]PermissionRule{{"bash", "*", "deny"}, {"bash", "git *", "ask"}, {"bash", "git status", "allow"}}},
		{"patterns, documented order kept", `{"bash": {"*": "ask", "git *": "allow", "git push *": "deny"}}`,
			[]PermissionRule{{"bash", "*", "ask"}, {"bash", "git *", "allow"}, {"bash", "git push *", "deny"}}},
		{"equal specificity keeps the file order", `{"bash": {"ls *": "deny", "cd *": "allow"}}`,
			[]PermissionRule{{"bash", "ls *", "deny"}, {"bash", "cd *", "allow"}}},
		{"catch-all action first", `{"edit": "allow", "*": "deny"}`, []PermissionRule{{"*", "*", "deny"}, {"edit", "*", "allow"}}},
		{"null skipped", `{"edit": null, "bash": {"*": null, "ls": "allow"}}`, []PermissionRule{{"bash", "ls", "allow"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			putFile(t, filepath.Join(dir, "opencode.json"), `{"agent":{"p":{"permission":`+tc.perm+`}}}`)
			if got := findAgent(t, mustLoad(t, dir, dir, nil), "p").Permissions; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// Front matter gives the same rules as the JSON form.
	dir := t.TempDir()
	putFile(t, filepath.Join(dir, ".opencode", "agent", "p.md"), `---
permission:
  edit: deny
  bash:
    "git *": allow
    '*': ask
  webfetch: allow
---
`)
	want := []PermissionRule{{"edit", "*", "deny"}, {"bash", "*", "ask"}, {"bash", "git *", "allow"}, {"webfetch", "*", "allow"}}
	if got := findAgent(t, mustLoad(t, dir, dir, nil), "p").Permissions; !reflect.DeepEqual(got, want) {
		t.Fatalf("front matter rules %+v, want %+v", got, want)
	}
}

func TestFrontMatter(t *testing.T) {
	dir := t.TempDir()
	putFile(t, filepath.Join(dir, ".opencode", "agent", "docs-writer.md"), "\ufeff---\r\n"+
		"# a comment\r\n"+
		"description: \"Writes docs: clearly\" # trailing comment\r\n"+
		"mode: subagent\r\n"+
		"model: anthropic/claude-haiku-4-5\r\n"+
		"temperature: 0.3\r\n"+
		"max_tokens: 4096\r\n"+
		"hidden: TRUE\r\n"+
		"color: 'it''s #blue'\r\n"+
		"steps: 5\r\n"+
		"stop: [\"END\"]\r\n"+
		"note: plain text: with colon\r\n"+
		"empty:\r\n"+
		"prompt: ignored because the body wins\r\n"+
		"permission:\r\n"+
		"  edit: ask\r\n"+
		"\r\n"+
		"  bash: deny\r\n"+
		"---\r\n"+
		"\r\n"+
		"You write documentation.\r\n"+
		"---\r\n"+
		"Keep it short.\r\n")
	got := findAgent(t, mustLoad(t, dir, dir, nil), "docs-writer")
	want := Agent{ID: "docs-writer", Name: "docs-writer", Description: "Writes docs: clearly", Mode: "subagent",
		Model: &ModelRef{ProviderID: "anthropic", ID: "claude-haiku-4-5"}, Hidden: true, Color: "it's #blue", Steps: 5,
		System: "You write documentation.\n---\nKeep it short.",
		Request: Request{Settings: map[string]any{"temperature": 0.3, "max_tokens": 4096.0, "stop": []any{"END"},
			"note": "plain text: with colon"}, Headers: map[string]string{}, Body: map[string]any{}},
		Permissions: []PermissionRule{{"edit", "*", "ask"}, {"bash", "*", "deny"}}, TrustedPermissions: []PermissionRule{},
		ProjectPermissions: []PermissionRule{{"edit", "*", "ask"}, {"bash", "*", "deny"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}

	for _, tc := range []struct{ name, md, wantSystem, wantDesc string }{
		{"prompt from front matter when the body is empty", "---\nprompt: \"Be brief.\"\n---\n\n", "Be brief.", ""},
		{"literal block", "---\ndescription: |\n  line one\n  line two\nmode: all\n---\n", "", "line one\nline two\n"},
		{"folded block", "---\ndescription: >-\n  one\n  two\n---\nbody", "body", "one two"},
		{"no front matter", "Just a prompt.\n", "Just a prompt.", ""},
		{"empty front matter", "---\n---\nP", "P", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def, err := ParseMarkdown([]byte(tc.md))
			if err != nil {
				t.Fatal(err)
			}
			set := newAgentSet()
			if err := set.apply("test", "x", gjson.ParseBytes(def), true); err != nil {
				t.Fatal(err)
			}
			a := set.byID["x"]
			if a.System != tc.wantSystem || a.Description != tc.wantDesc {
				t.Fatalf("system %q description %q, want %q %q (def %s)", a.System, a.Description, tc.wantSystem, tc.wantDesc, def)
			}
		})
	}
}

// TestFrontMatterYAML pins how front matter values become JSON: YAML
// quoting, lists, nested maps and block scalars; numbers only in JSON's
// syntax; the two leniencies for hand-written files (": " inside a plain
// value, a value starting with #); and the file's key order.
func TestFrontMatterYAML(t *testing.T) {
	for _, tc := range []struct{ name, fm, want string }{
		{"quoted strings", `a: "say \"hi\": now"` + "\n" + `b: 'it''s: #1'` + "\n" + `c: "tab\there \u00e9 \x41"` + "\n" + `d: ''`,
			`{"a":"say \"hi\": now","b":"it's: #1","c":"tab\there é A","d":""}`},
		{"numbers and strings", "temperature: 0.3\nmax_tokens: 4096\nsteps: 5.0\nneg: -1\nexp: 1e3\ntext: \"4096\"\nversion: 1.2.3\n" +
			"hex: 0x1F\noctal: 017\nplus: +5\nunder: 1_000\nhalf: .5\ninf: .inf\nnan: .NaN",
			`{"temperature":0.3,"max_tokens":4096,"steps":5.0,"neg":-1,"exp":1e3,"text":"4096","version":"1.2.3",` +
				`"hex":"0x1F","octal":"017","plus":"+5","under":"1_000","half":".5","inf":".inf","nan":".NaN"}`},
		// Mixed case (tRuE, nUlL) is text in YAML; the hand-written reader
		// took it for a boolean or null.
		{"booleans and nulls", "a: true\nb: False\nc: TRUE\nd: yes\ne: off\nf: null\ng: ~\nh: Null\ni:\nj: \"true\"\nk: tRuE\nl: nUlL",
			`{"a":true,"b":false,"c":true,"d":"yes","e":"off","f":null,"g":null,"h":null,"i":null,"j":"true","k":"tRuE","l":"nUlL"}`},
		{"lists", "stop:\n  - END\n  - \"---\"\n  -   spaced out  \nflow: [a, \"b c\", 1]\njson: [\"x\", 2.5, null]\nnested:\n- {k: v}\n- - 1\n  - 2\nempty: []",
			`{"stop":["END","---","spaced out"],"flow":["a","b c",1],"json":["x",2.5,null],"nested":[{"k":"v"},[1,2]],"empty":[]}`},
		{"nested maps keep their order", "options:\n  reasoning:\n    effort: high\n  top_p: 0.9\nheaders: {X-B: \"2\", X-A: \"1\"}\n" +
			"permission:\n  # comment line\n  bash:\n    \"git *\": allow\n    '*': ask\n  edit: deny",
			`{"options":{"reasoning":{"effort":"high"},"top_p":0.9},"headers":{"X-B":"2","X-A":"1"},"permission":{"bash":{"git *":"allow","*":"ask"},"edit":"deny"}}`},
		{"block scalars", "a: |\n  one\n    two\n\n  three\nb: >\n  folded\n  line\n\n  para\nc: |-\n  kept: colon\n  ---\nd: |+\n  keep\n\ne: x",
			`{"a":"one\n  two\n\nthree\n","b":"folded line\npara\n","c":"kept: colon\n---","d":"keep\n\n","e":"x"}`},
		{"block ending the front matter", "a: x\nb: |\n  last line", `{"a":"x","b":"last line\n"}`},
		{"--- inside values", "a: x --- y\nb: \"---\"\nc: ---x\nd: '--- '", `{"a":"x --- y","b":"---","c":"---x","d":"--- "}`},
		{"multi-line plain value", "description: first\n  second\nmode: all", `{"description":"first second","mode":"all"}`},
		{"anchors and aliases", "base: &b {effort: high}\noptions: *b\nlist: [*b, *b]",
			`{"base":{"effort":"high"},"options":{"effort":"high"},"list":[{"effort":"high"},{"effort":"high"}]}`},
		{"keys", "\"quoted key\": 1\n'single': 2\n3: three\ntrue: t\nnull: n\nkey with spaces: s",
			`{"quoted key":1,"single":2,"3":"three","true":"t","null":"n","key with spaces":"s"}`},
		{"tags and timestamps", "a: !!str 42\nb: !!int \"7\"\nc: 2024-01-02\nd: !custom text", `{"a":"42","b":7,"c":"2024-01-02","d":"!custom text"}`},
		{"comments", "# head\na: b # trailing\nc: d#not-a-comment\n# foot", `{"a":"b","c":"d#not-a-comment"}`},
		// Leniencies for hand-written files.
		{"colon in a plain value", "description: Use this agent when: you need docs. Example: x\nmode: subagent",
			`{"description":"Use this agent when: you need docs. Example: x","mode":"subagent"}`},
		{"colon value with a comment, and ending with a colon", "a: one: two # note\nb: ends with:\nc: \"quoted: fine\"",
			`{"a":"one: two","b":"ends with:","c":"quoted: fine"}`},
		{"colon values leave blocks alone", "description: |\n  Note: see: this\n  when: x: y\nprompt: Be: brief",
			`{"description":"Note: see: this\nwhen: x: y\n","prompt":"Be: brief"}`},
		{"nested colon value", "permission:\n  bash: ask\nnote:\n  why: because: reasons",
			`{"permission":{"bash":"ask"},"note":{"why":"because: reasons"}}`},
		{"text YAML refuses on its line", "a: [WIP] docs\nb: [a, b\nc: *bold*\nd: `code` here\ne: @mention # c\nf: %x\ng: {\"json\": 1} trailing",
			`{"a":"[WIP] docs","b":"[a, b","c":"*bold*","d":"` + "`code` here" + `","e":"@mention","f":"%x","g":"{\"json\": 1} trailing"}`},
		{"quoted keys with text values", "\"q k\": a: b\n'it''s': [WIP] x\n\"a\\\"b\": ends:", `{"q k":"a: b","it's":"[WIP] x","a\"b":"ends:"}`},
		{"value starting with #", "color: #38bdf8\naccent: #fff # white\nmode: all",
			`{"color":"#38bdf8","accent":"#fff","mode":"all"}`},
		{"comment before a nested map", "permission: # rules below\n  edit: deny", `{"permission":{"edit":"deny"}}`},
		{"document end line", "a: b\n...", `{"a":"b"}`},
		{"empty", "", `{}`},
		{"only comments", "# nothing\n\n# here", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMarkdown([]byte("---\n" + tc.fm + "\n---\n"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			// The same file with CRLF line ends and a BOM reads the same.
			crlf := "\ufeff---\r\n" + strings.ReplaceAll(tc.fm, "\n", "\r\n") + "\r\n---\r\n"
			if got, err := ParseMarkdown([]byte(crlf)); err != nil || string(got) != tc.want {
				t.Fatalf("with CRLF and BOM: %s, %v", got, err)
			}
		})
	}

	// Through Load: numbers are request settings, lists too.
	dir := t.TempDir()
	putFile(t, filepath.Join(dir, ".opencode", "agent", "n.md"), "---\ntemperature: 0.3\nmax_tokens: 4096\nseed: \"42\"\n"+
		"stop:\n  - END\ndescription: Reviews code: carefully\ncolor: #38bdf8\n---\nPrompt --- with dashes\n---\nand a rule above.\n")
	n := findAgent(t, mustLoad(t, dir, dir, nil), "n")
	wantSettings := map[string]any{"temperature": 0.3, "max_tokens": 4096.0, "seed": "42", "stop": []any{"END"}}
	if !reflect.DeepEqual(n.Request.Settings, wantSettings) || n.Description != "Reviews code: carefully" || n.Color != "#38bdf8" ||
		n.System != "Prompt --- with dashes\n---\nand a rule above." {
		t.Fatalf("n = %+v", n)
	}
}

func TestLoadAgentsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		configured          map[string]json.RawMessage
		want                string
	}{
		{name: "bad JSON", file: "opencode.json", content: "{\n  \"agent\": {\n    \"a\": {\"mode\": }\n  }\n}", want: "line 3"},
		{name: "bad JSONC", file: "opencode.jsonc", content: `{"agent": {"a": {"mode": "all" "x": 1}}}`, want: "opencode.jsonc"},
		{name: "unterminated comment", file: "opencode.jsonc", content: `{"agent": {} /* open`, want: "unterminated"},
		{name: "not an object", file: "opencode.json", content: `[1]`, want: "must be a JSON object"},
		{name: "agent not a map", file: "opencode.json", content: `{"agent": "build"}`, want: `"agent" must be an object`},
		{name: "definition not an object", file: "opencode.json", content: `{"agent": {"a": true}}`, want: "must be an object"},
		{name: "bad mode", file: "opencode.json", content: `{"agent": {"a": {"mode": "boss"}}}`, want: `mode must be primary, subagent or all, not "boss"`},
		{name: "steps zero", file: "opencode.json", content: `{"agent": {"a": {"steps": 0}}}`, want: "steps must be a whole number greater than 0"},
		{name: "steps negative", file: "opencode.json", content: `{"agent": {"a": {"steps": -2}}}`, want: "steps must be"},
		{name: "steps fraction", file: "opencode.json", content: `{"agent": {"a": {"steps": 1.5}}}`, want: "steps must be"},
		{name: "steps string", file: "opencode.json", content: `{"agent": {"a": {"steps": "3"}}}`, want: "steps must be"},
		{name: "hidden string", file: "opencode.json", content: `{"agent": {"a": {"hidden": "yes"}}}`, want: "hidden must be true or false"},
		{name: "description number", file: "opencode.json", content: `{"agent": {"a": {"description": 3}}}`, want: "description must be a string"},
		{name: "bad model", file: "opencode.json", content: `{"agent": {"a": {"model": "gpt-5"}}}`, want: "providerID/modelID"},
		{name: "variant without model", file: "opencode.json", content: `{"agent": {"a": {"variant": "high"}}}`, want: "variant needs a model"},
		{name: "bad effect", file: "opencode.json", content: `{"agent": {"a": {"permission": {"edit": "maybe"}}}}`, want: "allow, deny or ask"},
		{name: "bad pattern effect", file: "opencode.json", content: `{"agent": {"a": {"permission": {"bash": {"*": 1}}}}}`, want: "allow, deny or ask"},
		{name: "bad permission type", file: "opencode.json", content: `{"agent": {"a": {"permission": [1]}}}`, want: "permission must be"},
		{name: "bad header", file: "opencode.json", content: `{"agent": {"a": {"headers": {"X": 1}}}}`, want: `header "X" must be a string`},
		{name: "bad disable", file: "opencode.json", content: `{"agent": {"a": {"disable": "yes"}}}`, want: "disable must be"},
		{name: "front matter unclosed", file: ".opencode/agent/a.md", content: "---\nmode: all\n", want: "no closing ---"},
		{name: "front matter bad mode", file: ".opencode/agents/a.md", content: "---\nmode: boss\n---\n", want: "mode must be"},
		{name: "front matter steps zero", file: ".opencode/agent/a.md", content: "---\nsteps: 0\n---\n", want: "steps must be"},
		{name: "front matter bad line", file: ".opencode/agent/a.md", content: "---\njust words\n---\n", want: "line 2"},
		{name: "front matter bad indent", file: ".opencode/agent/a.md", content: "---\nmode: all\n  hidden: true\n---\n", want: "unexpected indentation"},
		{name: "front matter tab", file: ".opencode/agent/a.md", content: "---\npermission:\n\tedit: deny\n---\n", want: "tabs"},
		{name: "front matter is a list", file: ".opencode/agent/a.md", content: "---\n- read\n---\n", want: `line 2: expected "key: value" lines`},
		{name: "front matter is text", file: ".opencode/agent/a.md", content: "---\n\njust words\n---\n", want: "line 3"},
		{name: "front matter nested twice", file: ".opencode/agent/a.md", content: "---\npermission:\n  edit: deny\n  edit: ask\n---\n", want: `line 4: "edit" is set twice`},
		{name: "front matter bad flow", file: ".opencode/agent/a.md", content: "---\nstop: [a,\n  b\n---\n", want: "front matter, near line"},
		{name: "front matter document end", file: ".opencode/agent/a.md", content: "---\nmode: all\n...\nhidden: true\n---\n", want: "document start"},
		{name: "front matter second document", file: ".opencode/agent/a.md", content: "---\nmode: all\n--- {hidden: true}\n---\n", want: "line 3: only one YAML document is allowed"},
		{name: "front matter merge key", file: ".opencode/agent/a.md", content: "---\n<<: {mode: all}\n---\n", want: "merge keys"},
		{name: "front matter alias loop", file: ".opencode/agent/a.md", content: "---\na: &x [*x]\n---\n", want: "too many values"},
		{name: "front matter twice", file: ".opencode/agent/a.md", content: "---\nmode: all\nmode: primary\n---\n", want: "set twice"},
		{name: "front matter unterminated quote", file: ".opencode/agent/a.md", content: "---\ncolor: \"red\n---\n", want: "unterminated"},
		{name: "server config bad JSON", configured: map[string]json.RawMessage{"s": json.RawMessage(`{"mode":`)}, want: `server config: agent "s"`},
		{name: "server config bad mode", configured: map[string]json.RawMessage{"s": json.RawMessage(`{"mode":"x"}`)}, want: "mode must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				putFile(t, filepath.Join(dir, tc.file), tc.content)
			}
			agents, err := Load(dir, dir, tc.configured)
			if err == nil {
				t.Fatalf("no error; agents %v", agentIDs(agents))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if tc.file != "" && !strings.Contains(err.Error(), filepath.Join(dir, tc.file)) {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

func TestLoadAgentsOddDirectories(t *testing.T) {
	// Glob metacharacters in the project path are not patterns.
	dir := filepath.Join(t.TempDir(), "proj[1]*")
	putFile(t, filepath.Join(dir, ".opencode", "agent", "odd.md"), "odd prompt")
	putFile(t, filepath.Join(dir, ".opencode", "agent", "notes.txt"), "not an agent")
	putFile(t, filepath.Join(dir, ".opencode", "agent", "sub.md", "x.md"), "a directory named like an agent")
	putFile(t, filepath.Join(dir, ".opencode", "agents"), "a file where a directory may be")
	got := mustLoad(t, dir, dir, nil)
	if want := []string{"build", "plan", "general", "explore", "compaction", "title", "summary", "odd"}; !reflect.DeepEqual(agentIDs(got), want) {
		t.Fatalf("ids %v, want %v", agentIDs(got), want)
	}
	if odd := findAgent(t, got, "odd"); odd.System != "odd prompt" {
		t.Fatalf("odd = %+v", odd)
	}
}

// An agent's rules are split by where they come from: the built-in
// definition's and the server config's are trusted, the location's files'
// are the project's.
func TestAgentRuleSources(t *testing.T) {
	dir := t.TempDir()
	configured := map[string]json.RawMessage{"ops": json.RawMessage(`{"permission": {"bash": {"make *": "allow"}}}`)}
	putFile(t, filepath.Join(dir, "opencode.json"), `{"agent": {"plan": {"permission": {"edit": "allow"}}}}`)
	putFile(t, filepath.Join(dir, ".opencode", "agent", "ops.md"), "---\npermission:\n  bash: allow\n---\n")
	putFile(t, filepath.Join(dir, ".opencode", "agents", "x.md"), "---\npermission:\n  webfetch: allow\n---\n")
	got := mustLoad(t, dir, dir, configured)
	for _, c := range []struct {
		id               string
		trusted, project []PermissionRule
	}{
		{"build", []PermissionRule{}, nil},
		{"plan", []PermissionRule{{"edit", "*", "deny"}, {"bash", "*", "ask"}}, []PermissionRule{{"edit", "*", "allow"}}},
		{"ops", []PermissionRule{{"bash", "make *", "allow"}}, []PermissionRule{{"bash", "*", "allow"}}},
		{"x", []PermissionRule{}, []PermissionRule{{"webfetch", "*", "allow"}}},
	} {
		a := findAgent(t, got, c.id)
		trusted, project := a.RuleSources()
		if !reflect.DeepEqual(trusted, c.trusted) || !reflect.DeepEqual(project, c.project) {
			t.Errorf("%s: trusted %v project %v, want %v %v", c.id, trusted, project, c.trusted, c.project)
		}
	}
	if p := findAgent(t, got, "plan"); len(p.Permissions) != 2 || p.Permissions[1] != (PermissionRule{"edit", "*", "allow"}) {
		t.Errorf("plan's merged rules: %v", p.Permissions)
	}
}

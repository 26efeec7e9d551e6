package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// compatRow is a row of the compatibility table in docs/plugins.md.
type compatRow struct {
	plugin, version string
	loads           string   // "active", or "failed: <part of the error>"
	hooks, tools    []string // as the plugin's status lists them
	calls           map[string]string
	line            int
}

// compatCall is how the scripted provider calls a tool: in which step
// (1 unless later), with which arguments, and, for a tool that works on
// what another made, the argument taken from an earlier tool result.
type compatCall struct {
	step      int
	args      map[string]any
	field, re string // args[field] = the first submatch of re in an earlier result
}

// compatCalls are the calls of each tool of the table's plugins: valid
// arguments, as a model following the tool's description and schema
// would send them. A tool missing here fails the test.
var compatCalls = map[string]compatCall{
	// @tarquinen/opencode-dcp: its message ids are its own, m0001 on.
	"compress": {args: map[string]any{"topic": "the greeting", "content": []any{map[string]any{"startId": "m0001", "endId": "m0001", "summary": "The user asked the agent to use its tools."}}}},
	// opencode-skills: one tool per SKILL.md of the project.
	"skills_hello": {args: map[string]any{}},
	// opencode-swarm
	"detect_domains":      {args: map[string]any{"text": "Build a React web app with a Postgres database and deploy it to Kubernetes."}},
	"extract_code_blocks": {args: map[string]any{"content": "Here:\n```go\npackage main\n```\n", "output_dir": "extracted"}},
	"gitingest":           {args: map[string]any{"url": "https://github.com/octocat/Hello-World"}},
	// opencode-pty: a cat in a terminal, written to, read, killed.
	"pty_spawn": {args: map[string]any{"command": "cat", "description": "echo what it is sent"}},
	"pty_list":  {args: map[string]any{}},
	"pty_write": {step: 2, args: map[string]any{"data": "hello-pty\n"}, field: "id", re: `ID: (pty_[0-9a-f]+)`},
	"pty_read":  {step: 3, args: map[string]any{}, field: "id", re: `ID: (pty_[0-9a-f]+)`},
	"pty_kill":  {step: 4, args: map[string]any{"cleanup": true}, field: "id", re: `ID: (pty_[0-9a-f]+)`},
	// opencode-orchestrator
	"slashcommand":     {args: map[string]any{"command": "agents"}},
	"grep_search":      {args: map[string]any{"pattern": "hello", "dir": "."}},
	"glob_search":      {args: map[string]any{"pattern": "*.md", "dir": "."}},
	"mgrep":            {args: map[string]any{"patterns": []any{"hello", "console"}, "dir": "."}},
	"sed_replace":      {args: map[string]any{"pattern": "Hello", "replacement": "Hello", "file": "README.md", "dry_run": true}},
	"diff":             {args: map[string]any{"file1": "README.md", "file2": "app.js"}},
	"jq":               {args: map[string]any{"json_input": `{"a":1}`, "expression": ".a"}},
	"http":             {args: map[string]any{"url": "http://127.0.0.1:9/", "method": "GET"}},
	"file_stats":       {args: map[string]any{"dir": "."}},
	"git_diff":         {args: map[string]any{"dir": "."}},
	"git_status":       {args: map[string]any{"dir": "."}},
	"run_background":   {args: map[string]any{"command": "echo bg-ok", "label": "say ok"}},
	"list_background":  {args: map[string]any{}},
	"check_background": {step: 2, args: map[string]any{}, field: "taskId", re: `(job_[0-9a-f]+)`},
	"kill_background":  {step: 3, args: map[string]any{}, field: "taskId", re: `(job_[0-9a-f]+)`},
	"ast_search":       {args: map[string]any{"pattern": "console.log($A)", "lang": "javascript"}},
	"ast_replace":      {args: map[string]any{"pattern": "console.log($A)", "rewrite": "console.info($A)", "lang": "javascript"}},
	"lsp_diagnostics":  {args: map[string]any{"file": "app.js"}},
	"delegate_task":    {args: map[string]any{"agent": "worker", "description": "say hello", "prompt": "Say hello.", "background": false}},
	"list_tasks":       {args: map[string]any{}},
	"get_task_result":  {step: 2, args: map[string]any{}, field: "taskId", re: `(task_[0-9a-f]+)`},
	"cancel_task":      {step: 2, args: map[string]any{}, field: "taskId", re: `(task_[0-9a-f]+)`},
	"list_agents":      {args: map[string]any{}},
	"show_metrics":     {args: map[string]any{}},
	"update_todo":      {args: map[string]any{"action": "add", "task": "check the plugins", "subtask": "read the table"}},
}

// compatPrompt is the prompt that starts a plugin's run.
var compatPrompt = regexp.MustCompile(`COMPAT (\S+)`)

// compatFixtures are files each plugin's project starts with.
var compatFixtures = map[string]map[string]string{
	"opencode-skills": {".opencode/skills/hello/SKILL.md": "---\nname: hello\ndescription: Says hello the project's way\n---\nSay \"Howdy!\"\n"},
}

// readCompatTable reads the table between the compat markers of
// docs/plugins.md.
func readCompatTable(t *testing.T, path string) []compatRow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`([^`]+)`")
	names := func(cell string) []string {
		var out []string
		for _, m := range code.FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
		return out
	}
	var rows []compatRow
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(line, "<!-- compat:begin -->"):
			in = true
			continue
		case strings.Contains(line, "<!-- compat:end -->"):
			in = false
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 7 {
			t.Fatalf("docs/plugins.md:%d: a row has %d cells, want 7", i+1, len(cells))
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		r := compatRow{plugin: names(cells[0])[0], version: strings.Trim(cells[1], "`"), loads: strings.Trim(cells[2], "`"),
			hooks: names(cells[3]), tools: names(cells[4]), calls: map[string]string{}, line: i + 1}
		// "`tool` ok", "`tool` ok: `part of the output`" or "`tool` error:
		// `part of the error`", one per <br>.
		for _, c := range strings.Split(cells[5], "<br>") {
			ns := names(c)
			if len(ns) == 0 {
				continue
			}
			switch {
			case strings.Contains(c, "` ok:") && len(ns) == 2:
				r.calls[ns[0]] = "ok: " + ns[1]
			case strings.Contains(c, "` ok"):
				r.calls[ns[0]] = "ok"
			case strings.Contains(c, "` error:") && len(ns) == 2:
				r.calls[ns[0]] = "error: " + ns[1]
			default:
				t.Fatalf("docs/plugins.md:%d: cannot read the call %q", i+1, c)
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("docs/plugins.md has no compatibility rows")
	}
	return rows
}

// TestPluginCompatibilityTable: every row of the compatibility table in
// docs/plugins.md holds: the plugin, at the version examples/plugins pins
// (package.json and its lockfile), is installed by the server from the
// registry npm is configured with — the very tarball the lockfile names —
// loads (or fails as the row says), declares the hooks and tools the row
// lists, and each of its tools, called once by a scripted provider with
// valid arguments, ends in the transcript as the row says. Set
// AGENTGATE_COMPAT_PRINT=1 to print the rows as they are.
func TestPluginCompatibilityTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and installs plugins from the npm registry")
	}
	ctx := testContext(t, 8*time.Minute)
	root := testenv.RepoRoot(t)
	rows := readCompatTable(t, filepath.Join(root, "docs", "plugins.md"))
	var pj struct{ Dependencies map[string]string }
	if b, err := os.ReadFile(filepath.Join(root, "examples", "plugins", "package.json")); err != nil || json.Unmarshal(b, &pj) != nil {
		t.Fatalf("examples/plugins/package.json: %v", err)
	}
	lock := gjson.Parse(mustRead(t, filepath.Join(root, "examples", "plugins", "package-lock.json")))
	var listed []string
	for _, r := range rows {
		listed = append(listed, r.plugin)
		if v := pj.Dependencies[r.plugin]; v != r.version {
			t.Errorf("docs/plugins.md:%d: %s at %s, examples/plugins/package.json pins %q", r.line, r.plugin, r.version, v)
		}
		if v := lock.Get(`packages.node_modules/` + gjsonEscape(r.plugin) + `.version`).String(); v != r.version {
			t.Errorf("docs/plugins.md:%d: %s at %s, the lockfile has %q", r.line, r.plugin, r.version, v)
		}
	}
	for name := range pj.Dependencies {
		if !slices.Contains(listed, name) {
			t.Errorf("examples/plugins pins %s, which the table does not list", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	const secret = "sk-provider-compat-SECRET"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// The provider calls every tool the request offers that the plugin
	// under test defines, once, when the prompt names a plugin; every
	// other request (a title, a subagent's turn) gets a short answer.
	var mu sync.Mutex
	offered := map[string]json.RawMessage{}
	toolsOf := map[string][]string{} // by plugin, as its status lists them
	p.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		req := gjson.ParseBytes(body)
		mu.Lock()
		for _, tl := range req.Get("tools").Array() {
			offered[tl.Get("function.name").String()] = json.RawMessage(tl.Get("function.parameters").Raw)
		}
		mu.Unlock()
		// The prompt "COMPAT <plugin>" starts a run; each step after it
		// calls that step's tools, with what earlier results named.
		msgs := req.Get("messages").Array()
		plugin, step, results := "", 0, ""
		for _, m := range msgs {
			text := m.Get("content").String()
			if m.Get("content").IsArray() {
				text = m.Get("content.0.text").String()
			}
			switch role := m.Get("role").String(); {
			case role == "user" && compatPrompt.MatchString(text):
				// (a plugin's transform may have added to the text)
				plugin, step, results = compatPrompt.FindStringSubmatch(text)[1], 1, ""
			case role == "assistant" && plugin != "":
				step++
			case role == "tool":
				results += text + "\n"
			}
		}
		if plugin == "" {
			return fakeprovider.Step{Text: "done"}
		}
		var calls []fakeprovider.Call
		mu.Lock()
		for i, tool := range toolsOf[plugin] {
			c := compatCalls[tool]
			if max(c.step, 1) != step {
				continue
			}
			args := map[string]any{}
			for k, v := range c.args {
				args[k] = v
			}
			if c.re != "" {
				if m := regexp.MustCompile(c.re).FindStringSubmatch(results); m != nil {
					args[c.field] = m[1]
				} else {
					args[c.field] = "not-found-in-earlier-results"
				}
			}
			b, _ := json.Marshal(args)
			calls = append(calls, fakeprovider.Call{ID: fmt.Sprintf("call_%d_%d", step, i), Name: tool, Args: string(b)})
		}
		mu.Unlock()
		if len(calls) == 0 {
			return fakeprovider.Step{Text: "done"}
		}
		return fakeprovider.Step{Text: fmt.Sprintf("Step %d.", step), Calls: calls}
	}})

	projects := t.TempDir()
	s := newServer(t, caddyBinary(t), config{})
	cfg := fmt.Sprintf(`{
	admin %s
	agentgate {
		storage badger %q
	}
}

http://%s {
	bind 127.0.0.1
	agent_instance {
		password pw-compat
		directory %q
		allow_root %q
		registry %s
		plugin_host {
			bun %q
			tool_timeout 45s
		}
		provider {
			base_url %s/v1
			api_key %s
			model gpt-4o
		}
	}
}
`, s.adminAddr, filepath.Join(s.dir, "data"), s.httpAddr, projects, projects, testenv.NPMRegistry(t), bunBinary(t, ctx), p.URL, secret)
	os.WriteFile(s.cfgPath, []byte(cfg), 0o600)
	s.start()
	base := "http://" + s.httpAddr
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:pw-compat"))
	waitFor(t, ctx, "instance answers", func() bool {
		st, _, err := call(ctx, httpClient, "GET", base+"/api/info", http.Header{"Authorization": {auth}}, nil)
		return err == nil && st == 200
	})

	var printed []string
	for _, r := range rows {
		t.Run(r.plugin, func(t *testing.T) {
			project := filepath.Join(projects, strings.NewReplacer("@", "", "/", "-").Replace(r.plugin))
			files := map[string]string{
				"opencode.json": fmt.Sprintf(`{"plugin": [%q]}`, r.plugin+"@"+r.version),
				"README.md":     "# Hello\n\nconsole.log(\"hello\")\n",
				"app.js":        "console.log(\"hello\");\n",
			}
			for k, v := range compatFixtures[r.plugin] {
				files[k] = v
			}
			for name, body := range files {
				f := filepath.Join(project, filepath.FromSlash(name))
				os.MkdirAll(filepath.Dir(f), 0o755)
				if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			git := exec.CommandContext(ctx, "git", "init", "-q", project)
			git.Env = testenv.ToolEnv(t)
			if out, err := git.CombinedOutput(); err != nil {
				t.Fatalf("git init: %v %s", err, out)
			}
			hdr := http.Header{"Authorization": {auth}, "X-Opencode-Directory": {project}}

			st, b, err := call(ctx, httpClient, "GET", base+"/api/plugin", hdr, nil)
			if err != nil || st != 200 {
				t.Fatalf("plugin list: %d %v %s", st, err, b)
			}
			info := gjson.GetBytes(b, `data.#(id==`+jsonString(r.plugin)+`)`)
			if !info.Exists() {
				t.Fatalf("%s is not listed: %s", r.plugin, b)
			}
			// The very tarball the lockfile names was installed.
			installed := filepath.Join(s.dir, "data", "plugins", "default", filepath.FromSlash(r.plugin), r.version)
			want := lock.Get(`packages.node_modules/` + gjsonEscape(r.plugin) + `.integrity`).String()
			if got := gjson.Get(mustRead(t, filepath.Join(installed, "node_modules", ".agentgate-lock.json")), `packages..integrity`).String(); got != want {
				t.Errorf("installed %s has integrity %s, the lockfile %s", r.plugin, got, want)
			}
			loads := info.Get("state.status").String()
			if loads == "failed" {
				loads += ": " + info.Get("state.error").String()
			}
			hooks, tools := resultStrings(info.Get("features.hooks")), resultStrings(info.Get("features.tools"))

			calls := map[string]string{}
			mu.Lock()
			toolsOf[r.plugin] = tools
			mu.Unlock()
			{
				for _, tool := range tools {
					if _, ok := compatCalls[tool]; !ok {
						t.Errorf("no arguments for %s's tool %s in compatCalls", r.plugin, tool)
					}
				}
				st, b, _ := call(ctx, httpClient, "POST", base+"/api/session", hdr, map[string]any{"title": "compat " + r.plugin,
					"permissions": []any{map[string]any{"action": "*", "resource": "*", "effect": "allow"}}})
				id := gjson.GetBytes(b, "data.id").String()
				if st != 200 || id == "" {
					t.Fatalf("create: %d %s", st, b)
				}
				if st, b, _ := call(ctx, httpClient, "POST", base+"/api/session/"+id+"/prompt", hdr, map[string]any{"text": "COMPAT " + r.plugin}); st != 200 {
					t.Fatalf("prompt: %d %s", st, b)
				}
				var ex []byte
				waitFor(t, ctx, r.plugin+"'s run settles", func() bool {
					_, ex, _ = call(ctx, httpClient, "GET", base+"/api/experimental/session/"+id+"/export", hdr, nil)
					return gjson.GetBytes(ex, `data.messages.#(type=="idle")#|#`).Int() >= 1
				})
				for _, part := range gjson.GetBytes(ex, `data.messages.#(type=="assistant")#.content.#(type=="tool")#|@flatten`).Array() {
					name := part.Get("name").String()
					switch part.Get("state.status").String() {
					case "completed":
						calls[name] = "ok: " + oneLine(part.Get("state.content.0.text").String())
					default:
						calls[name] = "error: " + oneLine(part.Get("state.error.message").String())
					}
				}
			}

			row := fmt.Sprintf("| `%s` | %s | `%s` | %s | %s | %s |", r.plugin, r.version, loads, codeList(hooks), codeList(tools), callList(tools, calls))
			printed = append(printed, row)
			if loads != r.loads && !(strings.HasPrefix(r.loads, "failed: ") && strings.HasPrefix(loads, "failed: ") && strings.Contains(loads, strings.TrimPrefix(r.loads, "failed: "))) {
				t.Errorf("docs/plugins.md:%d: %s loads %q, the table says %q", r.line, r.plugin, loads, r.loads)
			}
			if !slices.Equal(hooks, r.hooks) {
				t.Errorf("docs/plugins.md:%d: %s's hooks are %v, the table says %v", r.line, r.plugin, hooks, r.hooks)
			}
			if !slices.Equal(tools, r.tools) {
				t.Errorf("docs/plugins.md:%d: %s's tools are %v, the table says %v", r.line, r.plugin, tools, r.tools)
			}
			for _, tool := range tools {
				got, want := calls[tool], r.calls[tool]
				kind := func(s string) string { k, _, _ := strings.Cut(s, ":"); return k }
				_, part, _ := strings.Cut(want, ": ")
				switch {
				case got == "":
					t.Errorf("docs/plugins.md:%d: %s's tool %s was not called", r.line, r.plugin, tool)
				case kind(got) != kind(want) || !strings.Contains(got, part):
					t.Errorf("docs/plugins.md:%d: %s's tool %s: %q, the table says %q", r.line, r.plugin, tool, got, want)
				}
			}
		})
	}
	if os.Getenv("AGENTGATE_COMPAT_PRINT") != "" || t.Failed() {
		mu.Lock()
		var schemas []string
		for name, s := range offered {
			schemas = append(schemas, name+": "+string(s))
		}
		mu.Unlock()
		sort.Strings(schemas)
		t.Logf("the rows as they are (the Calls cell holds the whole error; the table keeps a telling part of it):\n%s\n\ntool schemas:\n%s",
			strings.Join(printed, "\n"), strings.Join(schemas, "\n"))
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gjsonEscape escapes a package name for a gjson path.
func gjsonEscape(s string) string {
	return strings.NewReplacer(".", `\.`, "@", `\@`, "*", `\*`, "?", `\?`).Replace(s)
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

func resultStrings(r gjson.Result) []string {
	out := []string{}
	for _, v := range r.Array() {
		out = append(out, v.String())
	}
	return out
}

func codeList(list []string) string {
	if len(list) == 0 {
		return "—"
	}
	var out []string
	for _, s := range list {
		out = append(out, "`"+s+"`")
	}
	return strings.Join(out, ", ")
}

func callList(tools []string, calls map[string]string) string {
	if len(tools) == 0 {
		return "—"
	}
	var out []string
	for _, tool := range tools {
		k, rest, _ := strings.Cut(calls[tool], ": ")
		out = append(out, "`"+tool+"` "+k+": `"+rest+"`")
	}
	return strings.Join(out, "<br>")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ReplaceAll(s, "`", "'")
}

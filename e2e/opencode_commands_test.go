package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// commandsScript is the agent's side of TestOpenCodeTUICommands: the first
// prompt edits add.go, then NOTES.md (two steps), then answers with some
// reasoning; the init prompt writes AGENTS.md; the editor's prompt and
// others get a short answer. Requests that offer no tools (a compaction's
// summary, a title) get plain text.
func commandsScript() func(body []byte) fakeprovider.Step {
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	return func(body []byte) fakeprovider.Step {
		b := string(body)
		if !gjson.GetBytes(body, "tools").Exists() {
			if strings.Contains(b, "Provide a detailed summary") {
				return fakeprovider.Step{Text: "SUMMARY: add.go adds, NOTES.md says Monday."}
			}
			return fakeprovider.Step{Text: "Two edits"}
		}
		var user string
		for _, m := range gjson.GetBytes(body, "messages").Array() {
			if m.Get("role").String() == "user" {
				user = m.Get("content").String()
				if c := m.Get("content"); c.IsArray() {
					user = c.Get("0.text").String()
				}
			}
		}
		switch {
		case strings.Contains(user, "Create or update AGENTS.md"):
			if !strings.Contains(b, "call_init") {
				return fakeprovider.Step{Text: "Writing AGENTS.md.", Calls: []fakeprovider.Call{{ID: "call_init", Name: "write",
					Args: args(map[string]any{"filePath": "AGENTS.md", "content": "# calc\n\nRun `go test ./...`.\n"})}}}
			}
			return fakeprovider.Step{Text: "AGENTS.md is written."}
		case user == "fix the code and the notes":
			switch {
			case !strings.Contains(b, "call_add"):
				return fakeprovider.Step{Text: "Fixing add.go.", Calls: []fakeprovider.Call{{ID: "call_add", Name: "edit",
					Args: args(map[string]any{"filePath": "add.go", "oldString": "return a - b", "newString": "return a + b"})}}}
			case !strings.Contains(b, "call_notes"):
				return fakeprovider.Step{Text: "Updating the notes.", Calls: []fakeprovider.Call{{ID: "call_notes", Name: "write",
					Args: args(map[string]any{"filePath": "NOTES.md", "content": "ship on Monday\n"})}}}
			}
			return fakeprovider.Step{Reasoning: "Both edits are in place.", Text: "Both files are edited."}
		case user == "written by the editor":
			return fakeprovider.Step{Text: "The editor's prompt arrived."}
		}
		return fakeprovider.Step{Text: "Noted."}
	}
}

// badToast matches what the TUI shows when a route it calls fails: an
// error toast, a JavaScript error from an answer it could not read, a
// model it calls not valid.
var badToast = regexp.MustCompile(`(?i)error|undefined is not|is not valid|failed to|not found`)

// startTUI runs the released TUI (`opencode attach`) in the project under
// its own tmux server, with extra environment variables; a watcher
// samples the screen until the test ends and records every screen that
// matches badToast (toasts last seconds: a check after each step could
// miss one).
func startTUI(t *testing.T, ctx context.Context, oc, project, base string, extra ...string) (*tmuxScreen, func() []string) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "tui.sh")
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, kv := range append(opencodeEnv(t), extra...) {
		k, v, _ := strings.Cut(kv, "=")
		if k == "NO_COLOR" || k == "OPENCODE_DISABLE_SHARE" {
			continue // colours on; sharing enabled in the client
		}
		b.WriteString("export " + k + "='" + strings.ReplaceAll(v, "'", `'\''`) + "'\n")
	}
	b.WriteString("cd '" + project + "'\nexec '" + oc + "' attach '" + base + "' -p pw-e2e\n")
	if err := os.WriteFile(script, []byte(b.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	m := &tmuxScreen{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock"), env: testenv.ToolEnv(t)}
	m.run(ctx, "new-session", "-d", "-s", "tui", "-x", "160", "-y", "45", script)
	watch, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var bad []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for watch.Err() == nil {
			cmd := exec.CommandContext(watch, "tmux", "-S", m.socket, "-f", "/dev/null", "capture-pane", "-p", "-t", "tui")
			cmd.Env = m.env
			if out, err := cmd.Output(); err == nil && badToast.Match(out) {
				mu.Lock()
				if len(bad) < 5 {
					bad = append(bad, string(out))
				}
				mu.Unlock()
			}
			select {
			case <-watch.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		<-done
		kill := exec.Command("tmux", "-S", m.socket, "kill-server")
		kill.Env = m.env
		kill.Run()
	})
	return m, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bad...)
	}
}

// slash types a slash command, waits until the TUI's completion offers it
// (its description shown) and runs it.
func (m *tmuxScreen) slash(ctx context.Context, name, description string) {
	m.t.Helper()
	m.run(ctx, "send-keys", "-t", "tui", "-l", name)
	m.waitFor(ctx, name+" offered", name+" ", description)
	m.run(ctx, "send-keys", "-t", "tui", "Enter")
}

// keys sends tmux key names (Enter, Escape, C-c, Down, …).
func (m *tmuxScreen) keys(ctx context.Context, keys ...string) {
	m.t.Helper()
	m.run(ctx, append([]string{"send-keys", "-t", "tui"}, keys...)...)
}

// typeText types text literally.
func (m *tmuxScreen) typeText(ctx context.Context, text string) {
	m.t.Helper()
	m.run(ctx, "send-keys", "-t", "tui", "-l", text)
}

// waitGone waits until the screen no longer holds text.
func (m *tmuxScreen) waitGone(ctx context.Context, what, text string) string {
	m.t.Helper()
	for {
		s := m.screen(ctx)
		if !strings.Contains(s, text) {
			return s
		}
		select {
		case <-ctx.Done():
			m.t.Fatalf("%s: the screen still shows %q:\n%s", what, text, s)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestOpenCodeTUICommands drives every slash command of the released TUI
// against the instance server in one TUI session: a prompt whose agent
// edits two files over two steps, then /timestamps, /thinking,
// /timeline, /copy (no clipboard here), /export (the scripted EDITOR
// keeps the transcript), /rename, /compact, /share and /unshare, /init,
// /fork, /sessions, /models, /agents, /editor (a scripted EDITOR writes
// the prompt), /help and /new — checking what the screen shows and, where
// the command changes it, the server's state; no screen ever shows an
// error toast but the one that names the file /undo left because it was
// edited by hand.
func TestOpenCodeTUICommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		msg := "tmux is not installed: the TUI commands cannot run (.ci/run installs it)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx := testContext(t, 4*time.Minute)
	oc := opencodeBinary(t, ctx)
	const secret = "sk-provider-commands-SECRET"
	s, tn, p := fakeWorkspace(t, ctx, "Commands", secret)
	p.SetBehavior(fakeprovider.Behavior{Script: commandsScript()})
	project := calcProject(t)
	gi := s.gatewayInstance(t, ctx, tn, p, secret, project, "")
	editor := filepath.Join(t.TempDir(), "editor.sh")
	// The editor writes the prompt into an empty file (/editor) and leaves
	// a file with text as it is (/export opens the transcript in it).
	if err := os.WriteFile(editor, []byte("#!/bin/sh\n[ -s \"$1\" ] || printf 'written by the editor' > \"$1\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	m, badScreens := startTUI(t, ctx, oc, project, gi.base, "EDITOR="+editor)
	api := func(path string) gjson.Result {
		t.Helper()
		st, b, err := call(ctx, httpClient, "GET", gi.base+path, gi.auth, nil)
		if err != nil || st != 200 {
			t.Fatalf("GET %s: %d %v %s", path, st, err, b)
		}
		return gjson.ParseBytes(b)
	}

	m.waitFor(ctx, "the TUI opens", "Ask anything", "gpt-4o")
	m.typeText(ctx, "fix the code and the notes")
	time.Sleep(300 * time.Millisecond)
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "the answer", "Fixing add.go.", "Edit add.go", "Updating the notes.", "Write NOTES.md", "Both files are edited.")
	if b, _ := os.ReadFile(filepath.Join(project, "add.go")); !strings.Contains(string(b), "return a + b") {
		t.Fatalf("add.go was not edited: %s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "NOTES.md")); string(b) != "ship on Monday\n" {
		t.Fatalf("NOTES.md was not written: %s", b)
	}
	sid := api("/session").Get("0.id").String()

	// /undo and /redo: a hand edit to NOTES.md since the agent's step is
	// kept and reported; add.go goes back, and /redo reapplies it.
	if err := os.WriteFile(filepath.Join(project, "NOTES.md"), []byte("ship on Tuesday\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.slash(ctx, "/undo", "Undo previous message")
	m.waitFor(ctx, "/undo", "1 message reverted", "/redo to restore", "add.go +1 -1") // the files put back
	m.waitFor(ctx, "/undo's report of the file it left", "not reverted", "NOTES.md")
	if b, _ := os.ReadFile(filepath.Join(project, "add.go")); !strings.Contains(string(b), "return a - b") {
		t.Fatalf("/undo did not restore add.go: %s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "NOTES.md")); string(b) != "ship on Tuesday\n" {
		t.Fatalf("/undo overwrote the hand edit of NOTES.md: %s", b)
	}
	m.keys(ctx, "C-c") // the undone prompt is back in the input
	m.slash(ctx, "/redo", "Redo")
	m.waitGone(ctx, "/redo", "message reverted")
	if b, _ := os.ReadFile(filepath.Join(project, "add.go")); !strings.Contains(string(b), "return a + b") {
		t.Fatalf("/redo did not reapply add.go: %s", b)
	}

	// /timestamps shows each message's time; again hides it.
	clock := regexp.MustCompile(`fix the code and the notes[^\n]*\n\s*┃\s+\d{1,2}:\d{2}\b`)
	if clock.MatchString(m.screen(ctx)) {
		t.Fatalf("a timestamp before /timestamps:\n%s", m.screen(ctx))
	}
	m.slash(ctx, "/timestamps", "Show timestamps")
	waitMatch(t, ctx, m, "/timestamps shows times", clock)
	m.slash(ctx, "/timestamps", "Hide timestamps")
	waitNoMatch(t, ctx, m, "/timestamps hides them", clock)

	// /thinking expands the step's reasoning; again collapses it.
	m.waitFor(ctx, "collapsed reasoning", "Thought")
	if strings.Contains(m.screen(ctx), "Both edits are in place.") {
		t.Fatalf("the reasoning shows before /thinking:\n%s", m.screen(ctx))
	}
	m.slash(ctx, "/thinking", "Expand thinking")
	m.waitFor(ctx, "/thinking expands", "Both edits are in place.")
	m.slash(ctx, "/thinking", "Collapse thinking")
	m.waitGone(ctx, "/thinking collapses", "Both edits are in place.")

	// /timeline lists the prompts; one opens its actions.
	m.slash(ctx, "/timeline", "Jump to message")
	m.waitFor(ctx, "/timeline", "Timeline", "fix the code and the notes")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "a message's actions", "Message Actions", "Revert", "Copy", "Fork")
	m.keys(ctx, "Escape")
	m.waitGone(ctx, "actions closed", "Message Actions")

	// /copy: no clipboard program here; the TUI copies through the
	// terminal and goes on.
	m.slash(ctx, "/copy", "Copy session transcript")
	m.waitFor(ctx, "/copy", "Session transcript copied to clipboard!")

	// /export writes the transcript into the project (the TUI does it
	// from the messages it read) and opens it in EDITOR.
	m.slash(ctx, "/export", "Export session transcript")
	m.waitFor(ctx, "/export options", "Export Options", "session-ses_")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "/export", "Session exported to session-ses_")
	exports, _ := filepath.Glob(filepath.Join(project, "session-ses_*.md"))
	if len(exports) != 1 {
		t.Fatalf("exported files: %v", exports)
	}
	if b, _ := os.ReadFile(exports[0]); !strings.Contains(string(b), "fix the code and the notes") || !strings.Contains(string(b), "Both files are edited.") {
		t.Fatalf("the export:\n%s", b)
	}

	// /rename: PATCH /session/{id}.
	m.slash(ctx, "/rename", "Rename session")
	m.waitFor(ctx, "/rename dialog", "Rename Session")
	m.keys(ctx, "C-a", "C-k")
	m.typeText(ctx, "Two edits")
	m.waitFor(ctx, "the new title typed", "Two edits")
	m.keys(ctx, "Enter")
	m.waitGone(ctx, "/rename closes", "Rename Session")
	waitFor(t, ctx, "the title changed", func() bool { return api("/api/session/"+sid).Get("data.title").String() == "Two edits" })

	// /compact: POST /session/{id}/summarize runs our compaction.
	m.slash(ctx, "/compact", "Compact session")
	m.waitFor(ctx, "/compact", "Compaction", "SUMMARY: add.go adds, NOTES.md says Monday.")
	if c := api("/api/session/" + sid + "/message?order=asc&limit=200").Get(`data.#(type=="compaction")`); c.Get("status").String() != "completed" ||
		c.Get("reason").String() != "manual" {
		t.Fatalf("no completed compaction: %s", c.Raw)
	}

	// /share: the consent, then the session's link in this instance's web
	// app (no vendor share service); /unshare removes it.
	m.slash(ctx, "/share", "Share session")
	m.waitFor(ctx, "share consent", "Share Session", "Are you sure you want to share it?")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "/share", "Share URL copied to clipboard!")
	if u := api("/api/session/" + sid).Get("data.share.url").String(); u != gi.base+"/ui/session/"+sid {
		t.Fatalf("share url %q", u)
	}
	m.waitGone(ctx, "the share toast ends", "Share URL copied")
	m.slash(ctx, "/unshare", "Unshare session")
	m.waitFor(ctx, "/unshare", "Session unshared successfully")
	if api("/api/session/" + sid).Get("data.share").Exists() {
		t.Fatal("/unshare left the share link")
	}

	// /init: the server's built-in command; the agent writes AGENTS.md.
	m.slash(ctx, "/init", "create or update AGENTS.md for this project")
	m.waitGone(ctx, "/init chosen", "create or update AGENTS.md for this project")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "/init", "AGENTS.md is written.")
	if b, _ := os.ReadFile(filepath.Join(project, "AGENTS.md")); !strings.Contains(string(b), "go test ./...") {
		t.Fatalf("AGENTS.md: %q", b)
	}

	// /fork at the init prompt: a new session with the messages before it,
	// the prompt's text put back in the input.
	m.slash(ctx, "/fork", "Fork session")
	m.waitFor(ctx, "/fork dialog", "Fork session", "Full session", "fix the code and the notes")
	m.typeText(ctx, "Create or update")
	m.waitGone(ctx, "the fork dialog filtered", "Full session")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "the fork opens", "Two edits (fork #1)")
	var fork gjson.Result
	waitFor(t, ctx, "the fork is listed", func() bool {
		fork = api("/session").Get(`#(title=="Two edits (fork #1)")`)
		return fork.Exists()
	})
	fmsgs := api("/session/" + fork.Get("id").String() + "/message")
	if fork.Get("parentID").Exists() || fmsgs.Get("0.parts.0.text").String() != "fix the code and the notes" ||
		strings.Contains(fmsgs.Raw, "Create or update AGENTS.md") || !strings.Contains(fmsgs.Raw, "SUMMARY: add.go adds") {
		t.Fatalf("the fork %s has messages %s", fork.Raw, fmsgs.Raw)
	}
	m.keys(ctx, "C-c") // the fork's prompt held the init prompt's text
	m.waitGone(ctx, "the prompt cleared", "Create or update AGENTS.md")

	// /sessions lists both; the original opens again.
	m.slash(ctx, "/sessions", "Switch session")
	m.waitFor(ctx, "/sessions", "Sessions", "Two edits (fork #1)", "Two edits")
	m.keys(ctx, "Down")
	time.Sleep(200 * time.Millisecond)
	m.keys(ctx, "Enter")
	m.waitGone(ctx, "the original session opens", "(fork #1)")
	m.waitFor(ctx, "the original session", "Two edits", "AGENTS.md is written.")

	// /models and /agents: the instance's models and agents.
	m.slash(ctx, "/models", "Switch model")
	m.waitFor(ctx, "/models", "Select model", "agentgate", "gpt-4o")
	m.keys(ctx, "Enter")
	m.waitGone(ctx, "/models closes", "Select model")
	m.slash(ctx, "/agents", "Switch agent")
	m.waitFor(ctx, "/agents", "Select agent", "build native", "plan native")
	m.typeText(ctx, "plan")
	m.waitGone(ctx, "the agents filtered", "build native")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "the plan agent", "Plan · gpt-4o")
	m.slash(ctx, "/agents", "Switch agent")
	m.waitFor(ctx, "/agents again", "Select agent", "build native", "plan native")
	m.typeText(ctx, "build")
	m.waitGone(ctx, "the agents filtered again", "plan native")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "the build agent", "Build · gpt-4o")

	// /editor: EDITOR writes the prompt, which is then sent.
	m.slash(ctx, "/editor", "Open editor")
	m.waitFor(ctx, "the editor's text in the prompt", "written by the editor")
	m.keys(ctx, "Enter")
	m.waitFor(ctx, "the editor's prompt answered", "The editor's prompt arrived.")
	if !strings.Contains(api("/session/"+sid+"/message").Raw, `"text":"written by the editor"`) {
		t.Fatal("the editor's prompt is not in the session")
	}

	// /help, then /new.
	m.slash(ctx, "/help", "Help")
	m.waitFor(ctx, "/help", "Press ctrl+p to see all available actions")
	m.keys(ctx, "Enter")
	m.waitGone(ctx, "/help closes", "Press ctrl+p to see all")
	m.slash(ctx, "/new", "New session")
	final := m.waitFor(ctx, "/new", "Ask anything")

	if bad := badScreens(); len(bad) > 0 {
		t.Fatalf("%d screens showed an error:\n%s", len(bad), strings.Join(bad, "\n----\n"))
	}
	t.Logf("the TUI ends on:\n%s", final)
}

func waitMatch(t *testing.T, ctx context.Context, m *tmuxScreen, what string, re *regexp.Regexp) {
	t.Helper()
	waitFor(t, ctx, what, func() bool { return re.MatchString(m.screen(ctx)) })
}

func waitNoMatch(t *testing.T, ctx context.Context, m *tmuxScreen, what string, re *regexp.Regexp) {
	t.Helper()
	waitFor(t, ctx, what, func() bool { return !re.MatchString(m.screen(ctx)) })
}

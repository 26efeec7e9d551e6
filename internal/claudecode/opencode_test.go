package claudecode

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOpenCodePermission(t *testing.T) {
	doc, _, err := CheckDocument([]byte(`{"permissions": {
		"allow": ["Bash(npm run *)", "Bash(git status:*)", "Read(./src/**)", "Edit(/docs/**)", "Read(//etc/hosts)", "WebFetch(domain:docs.example.com)",
			"Bash(rm *)", "Bash(rm -rf build)", "Bash(git push origin feature)", "Glob", "Task(explore)", "mcp__github__create_issue",
			"Read(~/.ssh/**)", "WebFetch(https://x.example/*)", "NotebookRead", "Grep"],
		"ask": ["Bash(git push *)", "Bash(rm *)", "Grep"],
		"deny": ["WebFetch", "Bash(curl *)", "Edit(.env)", "Bash(rm *)"],
		"defaultMode": "plan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	perm, unmapped := OpenCodePermission(doc)
	b, err := json.Marshal(perm)
	if err != nil {
		t.Fatal(err)
	}
	// Allow first, then ask, then deny; "rm *" moved to the end each time
	// it came again. Patterns a stronger one covers are gone: the allows
	// under deny "rm *" and ask "git push *", the webfetch allows under a
	// bare WebFetch deny, the grep allow under a bare ask.
	want := `{"bash":{"npm run *":"allow","git status *":"allow","git push *":"ask","curl *":"deny","rm *":"deny"},` +
		`"read":{"src/**":"allow","/etc/hosts":"allow"},"edit":{"docs/**":"allow",".env":"deny"},` +
		`"webfetch":"deny","glob":"allow","task":{"explore":"allow"},"grep":"ask"}`
	if string(b) != want {
		t.Fatalf("permission\n got %s\nwant %s", b, want)
	}
	var reasons []string
	for _, u := range unmapped {
		reasons = append(reasons, u.Rule+": "+u.Reason)
	}
	all := strings.Join(reasons, "\n")
	for _, w := range []string{"allow mcp__github__create_issue: MCP tools", "allow Read(~/.ssh/**): a path in the home directory",
		"allow WebFetch(https://x.example/*): OpenCode's webfetch rules match URLs", "allow NotebookRead: OpenCode has no counterpart",
		"defaultMode plan: OpenCode has no permission mode"} {
		if !strings.Contains(all, w) {
			t.Errorf("unmapped does not say %q:\n%s", w, all)
		}
	}
	if len(unmapped) != 5 {
		t.Errorf("%d unmapped, want 5:\n%s", len(unmapped), all)
	}

	// No permissions: nothing, and an empty object.
	perm, unmapped = OpenCodePermission(map[string]any{})
	if !perm.Empty() || len(unmapped) != 0 {
		t.Fatalf("empty document: %+v %v", perm, unmapped)
	}
	if b, _ := json.Marshal(perm); string(b) != "{}" {
		t.Fatalf("empty permission encodes as %s", b)
	}
}

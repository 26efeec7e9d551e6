package agents

import (
	"strings"
	"testing"
)

// A command's template takes the arguments typed after it: $ARGUMENTS as
// typed, $1… one by one with quotes removed (the highest placeholder
// taking the rest, a missing one empty), or appended when the template
// has no placeholder.
func TestExpandCommand(t *testing.T) {
	for _, c := range []struct{ template, args, want string }{
		{"Review $ARGUMENTS", "the diff", "Review the diff"},
		{"Review $ARGUMENTS", "", "Review "},
		{"Move $1 to $2", `a.go "new dir/b.go"`, "Move a.go to new dir/b.go"},
		{"Move $1 to $2", "a.go b.go c.go", "Move a.go to b.go c.go"},
		{"Move $1 to $2", "a.go", "Move a.go to "},
		{"$2 then $1, all: $ARGUMENTS", "x y", "y then x, all: x y"},
		{"Say hello", "to Ann", "Say hello\n\nto Ann"},
		{"Say hello", "  ", "Say hello"},
		{"Cost $0", "x", "Cost "},
	} {
		if got := ExpandCommand(c.template, c.args); got != c.want {
			t.Errorf("ExpandCommand(%q, %q) = %q, want %q", c.template, c.args, got, c.want)
		}
	}
}

// The built-in init asks for AGENTS.md at the project's root and takes the
// user's focus.
func TestBuiltinInit(t *testing.T) {
	cmds := BuiltinCommands("/srv/app")
	if len(cmds) != 1 || cmds[0].Name != InitCommand || cmds[0].Description == "" {
		t.Fatalf("built-in commands: %+v", cmds)
	}
	p := ExpandCommand(cmds[0].Template, "mention the Makefile")
	if !strings.Contains(p, "AGENTS.md at the root of this project (/srv/app)") || !strings.Contains(p, "mention the Makefile") ||
		strings.Contains(p, "$PROJECT") || strings.Contains(p, "$ARGUMENTS") {
		t.Fatalf("init prompt:\n%s", p)
	}
}

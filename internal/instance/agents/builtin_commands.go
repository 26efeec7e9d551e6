package agents

import (
	"regexp"
	"strconv"
	"strings"
)

// InitCommand is the name of the built-in command that writes the
// project's AGENTS.md (the released OpenCode TUI's /init).
const InitCommand = "init"

// initTemplate asks the agent to write or improve AGENTS.md at the project
// root ($PROJECT) from what the project itself shows; $ARGUMENTS is the
// user's focus.
const initTemplate = `Create or update AGENTS.md at the root of this project ($PROJECT): a short instruction file for coding agents that work here. Every line should tell an agent something it would likely get wrong without it.

Focus or constraints from the user (honour them):
$ARGUMENTS

First find out, by reading the project:
- README files, manifests and lockfiles, workspace configuration;
- build, test, lint, format, type-check and code-generation configuration, CI workflows, task runners and pre-commit hooks;
- existing instruction files (AGENTS.md, CLAUDE.md, .cursor/rules/, .cursorrules, .github/copilot-instructions.md) and opencode.json.
Read a few representative source files only where the layout is still unclear. Where prose and scripts disagree, trust the scripts and configuration, and keep only what you can verify.

Then write down:
- the exact commands to build, test (one test, one package), lint and format, and their order when it matters;
- the layout: packages or apps, their entry points, generated code and build output;
- conventions that differ from the language's or framework's defaults;
- setup needs, environment quirks, and the services or fixtures tests require.

Leave out generic advice, long file trees and anything you could not verify. Prefer short sections and bullets; a simple project gets a short file. If AGENTS.md exists, improve it in place: keep what is still true, drop what is stale.`

// BuiltinCommands are the commands every location has besides its
// project's (a project's command of the same name replaces one): init,
// which writes the project's AGENTS.md. projectDir is the project root
// the template names.
func BuiltinCommands(projectDir string) []Command {
	return []Command{{Name: InitCommand, Description: "create or update AGENTS.md for this project",
		Template: strings.ReplaceAll(initTemplate, "$PROJECT", projectDir)}}
}

var (
	// commandArg is one argument of a command: a quoted string or a run
	// of characters without spaces or quotes.
	commandArg = regexp.MustCompile(`"[^"]*"|'[^']*'|[^\s"']+`)
	// placeholder is a positional placeholder of a template: $1, $2, …
	placeholder = regexp.MustCompile(`\$(\d+)`)
)

// ExpandCommand is the prompt a command's template makes with the
// arguments the user typed after it: $ARGUMENTS is every argument as
// typed; $1, $2, … are the arguments one by one (quotes removed), the
// highest placeholder taking the rest; a template with no placeholder
// gets the arguments appended after a blank line.
func ExpandCommand(template, arguments string) string {
	var args []string
	for _, a := range commandArg.FindAllString(arguments, -1) {
		if len(a) >= 2 && (a[0] == '"' || a[0] == '\'') && a[len(a)-1] == a[0] {
			a = a[1 : len(a)-1]
		}
		args = append(args, a)
	}
	last := 0
	found := placeholder.FindAllStringSubmatch(template, -1)
	for _, m := range found {
		if n, err := strconv.Atoi(m[1]); err == nil && n > last {
			last = n
		}
	}
	out := placeholder.ReplaceAllStringFunc(template, func(m string) string {
		n, err := strconv.Atoi(m[1:])
		if err != nil || n < 1 || n > len(args) {
			return ""
		}
		if n == last {
			return strings.Join(args[n-1:], " ")
		}
		return args[n-1]
	})
	uses := strings.Contains(template, "$ARGUMENTS")
	out = strings.ReplaceAll(out, "$ARGUMENTS", arguments)
	if len(found) == 0 && !uses && strings.TrimSpace(arguments) != "" {
		out += "\n\n" + arguments
	}
	return out
}

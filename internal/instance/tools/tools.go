// Package tools holds the coding agent's tools: what the model is offered
// (names, descriptions, argument schemas) and how each runs in a
// session's project directory, confined to the instance's allowed roots,
// asking permission through the Env before it acts.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/sandbox"
)

// Tool is one tool: its name, what the model is told about it, the JSON
// Schema of its arguments, and how it runs.
type Tool struct {
	Name        string
	Description string
	Schema      json.RawMessage
	// Required are the argument names that must be present.
	Required []string
	// Exclusive tools change the project or talk to the user; a step's
	// exclusive calls run one at a time, in order, after the others.
	Exclusive bool
	Run       func(ctx context.Context, env *Env, args json.RawMessage) (Result, error)
}

// Result is a completed call: its title, the text the model reads, and
// metadata for clients.
type Result struct {
	Title    string
	Output   string
	Metadata map[string]any
}

// Ask is a permission a call needs before it acts: the permission name
// (a rule's action), the resources it touches, and the patterns an
// "always" reply would allow for the rest of the session.
type Ask struct {
	Permission string
	Patterns   []string
	Always     []string
	Metadata   map[string]any
	// Unknown are those of Patterns whose text does not show what the
	// call does (a command whose name is computed when it runs, eval's
	// code, a redirection to a computed path): the rules allow them only
	// when they would allow anything (permission.EvaluateAny), and Always
	// never covers them.
	Unknown []string
}

// Env is what a call runs with.
type Env struct {
	// Dir is the directory calls run in: the session's location and
	// subpath (absolute, symlinks resolved).
	Dir string
	// Project is the session's project directory; paths outside it ask for
	// external_directory (default Dir).
	Project string
	// Roots are the directories any path must stay in (absolute, symlinks
	// resolved); when empty, Dir is the only root.
	Roots []string
	// SessionID is the calling session.
	SessionID string
	// Agent is the calling agent's id.
	Agent string
	// Permit asks for a permission; nil means allowed. Its error is what
	// the model is told (a rule denied it, the user rejected it).
	Permit func(ctx context.Context, a Ask) error
	// Progress publishes a running call's metadata (a command's output so
	// far).
	Progress func(metadata map[string]any)
	// Secrets are values that must never reach a child process's
	// environment.
	Secrets []string
	// Todos reads the session's todo list (for todoread).
	Todos func(ctx context.Context) ([]Todo, error)
	// Task runs a subagent: a child session of agent, prompted with
	// prompt; it returns the child's id and final text.
	Task func(ctx context.Context, agent, description, prompt string) (childID, text string, err error)
	// Subagents lists the agents Task may run, for the task tool's
	// description and its argument check: id → description.
	Subagents map[string]string
	// Question asks the user a form and waits for the answers.
	Question func(ctx context.Context, qs []Question) ([][]string, error)
	// Fetch is how webfetch reaches the web.
	Fetch FetchPolicy
	// BashTimeout is a command's default time limit (default 2 minutes);
	// MaxBashTimeout its largest (default 10 minutes).
	BashTimeout, MaxBashTimeout time.Duration
	// Shell runs commands (default /bin/bash, else /bin/sh).
	Shell string
	// Sandbox confines commands (default: sandbox.Default()).
	Sandbox *sandbox.Sandbox
	// ShellEnv, when set, adds variables to a command's environment (after
	// it is scrubbed): the plugins' shell.env hook.
	ShellEnv func(ctx context.Context, cwd string) map[string]string
}

// FetchPolicy bounds webfetch.
type FetchPolicy struct {
	// AllowPrivate lets webfetch reach loopback, private and link-local
	// addresses (refused by default).
	AllowPrivate bool
	// Client sends the requests (default: one whose dialer enforces
	// AllowPrivate).
	Client *http.Client
}

// ArgumentError is a call whose arguments do not fit the tool's schema.
type ArgumentError struct {
	Tool, Reason string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("The %s tool was called with invalid arguments: %s.\nPlease rewrite the input so it satisfies the expected schema.", e.Tool, e.Reason)
}

// UnknownToolError is a call of a tool that does not exist.
type UnknownToolError struct{ Name string }

func (e *UnknownToolError) Error() string {
	return fmt.Sprintf("Model tried to call unavailable tool '%s'. Available tools: %s.", e.Name, strings.Join(Names(), ", "))
}

// Set is the tools by name.
var set = map[string]*Tool{}

func register(t *Tool) *Tool {
	if !json.Valid(t.Schema) {
		panic("tools: the schema of " + t.Name + " is not JSON")
	}
	set[t.Name] = t
	return t
}

// Lookup returns the named tool.
func Lookup(name string) (*Tool, bool) {
	t, ok := set[name]
	return t, ok
}

// Names lists every tool, sorted.
func Names() []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Call runs a tool with the model's arguments: it checks them against the
// tool's required arguments and types (an *ArgumentError when they do not
// fit) and runs it.
func Call(ctx context.Context, env *Env, name string, args json.RawMessage) (Result, error) {
	t, ok := set[name]
	if !ok {
		return Result{}, &UnknownToolError{Name: name}
	}
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) || !gjson.ParseBytes(args).IsObject() {
		return Result{}, &ArgumentError{Tool: name, Reason: "the arguments are not a JSON object"}
	}
	for _, r := range t.Required {
		if !gjson.GetBytes(args, gjson.Escape(r)).Exists() {
			return Result{}, &ArgumentError{Tool: name, Reason: r + " is required"}
		}
	}
	return t.Run(ctx, env, args)
}

// decode reads a call's arguments into v; a type mismatch is an
// *ArgumentError naming the field.
func decode(tool string, args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &ArgumentError{Tool: tool, Reason: fmt.Sprintf("%s must be %s, not %s", te.Field, kindName(te.Type.Kind().String()), te.Value)}
		}
		return &ArgumentError{Tool: tool, Reason: err.Error()}
	}
	return nil
}

func kindName(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "float"), strings.HasPrefix(k, "uint"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "a boolean"
	case k == "slice":
		return "an array"
	}
	return "an object"
}

// Definition is a tool as the model is offered it.
type Definition struct {
	Name, Description string
	Schema            json.RawMessage
}

// Definitions are the tools offered to a session's agent, minus those its
// rules deny outright (hidden reports that).
func Definitions(env *Env, hidden func(name string) bool) []Definition {
	out := make([]Definition, 0, len(set))
	for _, n := range Names() {
		if hidden != nil && hidden(n) {
			continue
		}
		t := set[n]
		d := Definition{Name: n, Description: t.Description, Schema: t.Schema}
		if n == "task" && env != nil {
			d.Description = taskDescription(env.Subagents)
		}
		out = append(out, d)
	}
	return out
}

// Permission is the permission name a tool's calls are checked under.
func Permission(tool string) string {
	switch tool {
	case "write", "edit":
		return "edit"
	}
	return tool
}

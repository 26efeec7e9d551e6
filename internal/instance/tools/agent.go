package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Todo is one item of a session's todo list.
type Todo struct {
	Content  string `json:"content"`
	Status   string `json:"status"`
	Priority string `json:"priority"`
	ID       string `json:"id,omitempty"`
}

var todoStatuses = map[string]bool{"pending": true, "in_progress": true, "completed": true, "cancelled": true}
var todoPriorities = map[string]bool{"high": true, "medium": true, "low": true}

var _ = register(&Tool{
	Name: "todowrite",
	Description: "Replace the session's todo list: use it to plan multi-step work and to mark progress " +
		"(pending, in_progress, completed, cancelled). Keep one item in_progress at a time.",
	Schema: json.RawMessage(`{"type":"object","properties":{"todos":{"type":"array","description":"The updated todo list","items":{"type":"object","properties":{` +
		`"content":{"type":"string","description":"Brief description of the task"},` +
		`"status":{"type":"string","description":"Current status of the task: pending, in_progress, completed, cancelled"},` +
		`"priority":{"type":"string","description":"Priority level of the task: high, medium, low"},` +
		`"id":{"type":"string","description":"Unique identifier for the todo item"}},` +
		`"required":["content","status","priority"]}}},"required":["todos"]}`),
	Required:  []string{"todos"},
	Exclusive: true,
	Run:       runTodoWrite,
})

func runTodoWrite(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Todos []Todo `json:"todos"`
	}
	if err := decode("todowrite", args, &in); err != nil {
		return Result{}, err
	}
	open := 0
	for i, t := range in.Todos {
		if strings.TrimSpace(t.Content) == "" || !todoStatuses[t.Status] || !todoPriorities[t.Priority] {
			return Result{}, &ArgumentError{Tool: "todowrite", Reason: fmt.Sprintf("todos[%d] needs content, a status (pending, in_progress, completed, cancelled) and a priority (high, medium, low)", i)}
		}
		if t.Status != "completed" && t.Status != "cancelled" {
			open++
		}
	}
	if in.Todos == nil {
		in.Todos = []Todo{}
	}
	if err := env.permit(ctx, Ask{Permission: "todowrite", Patterns: []string{"*"}, Always: []string{"*"}}); err != nil {
		return Result{}, err
	}
	out, _ := json.MarshalIndent(in.Todos, "", "  ")
	// The completed call's metadata is the list: the session's todos are
	// those of its latest completed todowrite.
	return Result{Title: fmt.Sprintf("%d todos", open), Output: string(out), Metadata: map[string]any{"todos": in.Todos}}, nil
}

var _ = register(&Tool{
	Name:        "todoread",
	Description: "Read the session's todo list.",
	Schema:      json.RawMessage(`{"type":"object","properties":{}}`),
	Run: func(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
		if err := env.permit(ctx, Ask{Permission: "todoread", Patterns: []string{"*"}, Always: []string{"*"}}); err != nil {
			return Result{}, err
		}
		todos := []Todo{}
		if env.Todos != nil {
			t, err := env.Todos(ctx)
			if err != nil {
				return Result{}, err
			}
			if t != nil {
				todos = t
			}
		}
		open := 0
		for _, t := range todos {
			if t.Status != "completed" && t.Status != "cancelled" {
				open++
			}
		}
		out, _ := json.MarshalIndent(todos, "", "  ")
		return Result{Title: fmt.Sprintf("%d todos", open), Output: string(out), Metadata: map[string]any{"todos": todos}}, nil
	},
})

var _ = register(&Tool{
	Name:        "task",
	Description: taskDescription(nil),
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"description":{"type":"string","description":"A short (3-5 words) description of the task"},` +
		`"prompt":{"type":"string","description":"The task for the agent to perform"},` +
		`"subagent_type":{"type":"string","description":"The type of specialized agent to use for this task"}},` +
		`"required":["description","prompt","subagent_type"]}`),
	Required:  []string{"description", "prompt", "subagent_type"},
	Exclusive: true,
	Run:       runTask,
})

// taskDescription tells the model which subagents it may run.
func taskDescription(agents map[string]string) string {
	var b strings.Builder
	b.WriteString("Run a subagent on a task of its own: it works in a child session with its own tools and returns its final answer. Available agent types:\n")
	names := make([]string, 0, len(agents))
	for n := range agents {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "- %s: %s\n", n, agents[n])
	}
	if len(names) == 0 {
		b.WriteString("- general: A general-purpose agent for research and multi-step tasks.\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func runTask(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Description  string `json:"description"`
		Prompt       string `json:"prompt"`
		SubagentType string `json:"subagent_type"`
	}
	if err := decode("task", args, &in); err != nil {
		return Result{}, err
	}
	if env.Subagents != nil {
		if _, ok := env.Subagents[in.SubagentType]; !ok {
			return Result{}, fmt.Errorf("Unknown agent type: %s is not a valid agent type", in.SubagentType)
		}
	}
	if err := env.permit(ctx, Ask{Permission: "task", Patterns: []string{in.SubagentType}, Always: []string{"*"},
		Metadata: map[string]any{"description": in.Description, "subagent_type": in.SubagentType}}); err != nil {
		return Result{}, err
	}
	if env.Task == nil {
		return Result{}, errors.New("subagents are not available here")
	}
	child, text, err := env.Task(ctx, in.SubagentType, in.Description, in.Prompt)
	if err != nil {
		return Result{}, err
	}
	out := fmt.Sprintf("task_id: %s (for resuming to continue this task if needed)\n\n<task_result>\n%s\n</task_result>", child, text)
	return Result{Title: in.Description, Output: out, Metadata: map[string]any{"sessionId": child}}, nil
}

// Question is one question of the question tool.
type Question struct {
	Question string           `json:"question"`
	Header   string           `json:"header"`
	Options  []QuestionOption `json:"options"`
	Multiple bool             `json:"multiple,omitempty"`
}

// QuestionOption is a choice of a question.
type QuestionOption struct {
	Label       string `json:"label"`
	Description string `json:"description"`
}

// ErrDismissed is a question the user dismissed.
var ErrDismissed = errors.New("The user dismissed this question")

var _ = register(&Tool{
	Name: "question",
	Description: "Ask the user questions and wait for the answers: each question has a short header and options " +
		"(label and description); the user may also type an answer of their own. Answers are lists of the chosen labels.",
	Schema: json.RawMessage(`{"type":"object","properties":{"questions":{"type":"array","description":"Questions to ask","items":{"type":"object","properties":{` +
		`"question":{"type":"string","description":"Complete question"},` +
		`"header":{"type":"string","description":"Very short label (max 30 chars)"},` +
		`"options":{"type":"array","description":"Available choices","items":{"type":"object","properties":{` +
		`"label":{"type":"string","description":"Display text (1-5 words, concise)"},` +
		`"description":{"type":"string","description":"Explanation of choice"}},"required":["label","description"]}},` +
		`"multiple":{"type":"boolean","description":"Allow selecting multiple choices"}},` +
		`"required":["question","header","options"]}}},"required":["questions"]}`),
	Required:  []string{"questions"},
	Exclusive: true,
	Run:       runQuestion,
})

func runQuestion(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Questions []Question `json:"questions"`
	}
	if err := decode("question", args, &in); err != nil {
		return Result{}, err
	}
	if len(in.Questions) == 0 {
		return Result{}, &ArgumentError{Tool: "question", Reason: "questions must not be empty"}
	}
	for i, q := range in.Questions {
		if strings.TrimSpace(q.Question) == "" {
			return Result{}, &ArgumentError{Tool: "question", Reason: fmt.Sprintf("questions[%d].question must not be empty", i)}
		}
	}
	if err := env.permit(ctx, Ask{Permission: "question", Patterns: []string{"*"}, Always: []string{"*"}}); err != nil {
		return Result{}, err
	}
	if env.Question == nil {
		return Result{}, errors.New("questions cannot be asked here")
	}
	answers, err := env.Question(ctx, in.Questions)
	if err != nil {
		return Result{}, err
	}
	parts := make([]string, len(in.Questions))
	for i, q := range in.Questions {
		a := "Unanswered"
		if i < len(answers) && len(answers[i]) > 0 {
			a = strings.Join(answers[i], ", ")
		}
		parts[i] = fmt.Sprintf("%q=%q", q.Question, a)
	}
	out := "User has answered your questions: " + strings.Join(parts, ", ") + ". You can now continue with the user's answers in mind."
	return Result{Title: fmt.Sprintf("Asked %d question(s)", len(in.Questions)), Output: out, Metadata: map[string]any{"answers": answers}}, nil
}

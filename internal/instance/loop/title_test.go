package loop

import (
	"strings"
	"testing"
)

// The title in a title agent's answer: one line, trimmed, without inline
// reasoning, markdown, a label or quotes, bounded as the released server
// bounds it (100 characters, a longer one cut to 97 and "...").
func TestCleanTitle(t *testing.T) {
	long := strings.Repeat("word ", 30)
	for _, c := range []struct{ in, want string }{
		{"Debugging production 500 errors", "Debugging production 500 errors"},
		{"  \n\n  Fix login bug  \nsecond line", "Fix login bug"},
		{`"Refactor user service"`, "Refactor user service"},
		{"“Quoted title”", "Quoted title"},
		{"'single'", "single"},
		{"# Heading title", "Heading title"},
		{"## **Bold heading**", "Bold heading"},
		{"- *Bullet* title", "*Bullet* title"},
		{"`code title`", "code title"},
		{"Title: Add tests for parser", "Add tests for parser"},
		{"**Title:** \"Add caching\"", "Add caching"},
		{"<think>the user wants a title\nabout x</think>\nCaching layer", "Caching layer"},
		{"<think>cut by the output bound", ""},
		{"tabs\tand   spaces\u0007here", "tabs and spaces here"},
		{"", ""},
		{"\"\"", `""`},
		{"   \n  ", ""},
		{strings.Repeat("é", 100), strings.Repeat("é", 100)},
		{strings.Repeat("é", 101), strings.Repeat("é", 97) + "..."},
		{long, strings.TrimSpace(long[:97]) + "..."},
	} {
		if got := cleanTitle(c.in); got != c.want {
			t.Errorf("cleanTitle(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The output bound: the title agent's own when its definition sets one,
// else titleOutputTokens; the agent's settings are not changed.
func TestTitleSettings(t *testing.T) {
	agent := map[string]any{"temperature": 0.5}
	got := titleSettings(agent)
	if got["maxTokens"] != titleOutputTokens || got["temperature"] != 0.5 || len(agent) != 1 {
		t.Fatalf("settings %v (agent's %v)", got, agent)
	}
	if got := titleSettings(map[string]any{"max_tokens": 20}); got["max_tokens"] != 20 || got["maxTokens"] != nil {
		t.Fatalf("settings %v", got)
	}
	if got := titleSettings(nil); got["maxTokens"] != titleOutputTokens {
		t.Fatalf("settings %v", got)
	}
}

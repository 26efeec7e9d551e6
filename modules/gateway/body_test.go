package gateway_test

import (
	"strings"
	"testing"
)

// A body that is not one JSON object of valid UTF-8, or that nests deeper
// than the gateway reads, is a 400 that names what a body must be, and
// never reaches the provider: the deepest one (12 million open brackets,
// within the size limit) is refused at the depth limit, not read level by
// level on the call stack.
func TestMalformedBodies(t *testing.T) {
	e := setup(t)
	path := "/custom/" + e.conns["openai"] + "/chat/completions"
	e.providers["openai"].Reset()
	for name, body := range map[string]string{
		"invalid UTF-8":     "{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		"an array":          `[{"model":"gpt-4o-mini"}]`,
		"trailing bytes":    `{"model":"gpt-4o-mini","messages":[]} {}`,
		"a trailing comma":  `{"model":"gpt-4o-mini","messages":[],}`,
		"nested too deep":   `{"model":"gpt-4o-mini","messages":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
		"12M open brackets": `{"model":"gpt-4o-mini","messages":` + strings.Repeat("[", 12_000_000),
	} {
		resp, got := e.post(t, path, body, "Authorization", "Bearer "+e.key)
		if resp.StatusCode != 400 || !strings.Contains(got, "must be a JSON object (UTF-8, nested at most 10000 levels deep)") {
			t.Errorf("%s: %d %.200s", name, resp.StatusCode, got)
		}
	}
	if n := len(e.providers["openai"].Received()); n != 0 {
		t.Fatalf("%d malformed bodies reached the provider", n)
	}
	// 9,999 levels inside the top-level object are read.
	body := `{"model":"gpt-4o-mini","messages":[],"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`
	if resp, got := e.post(t, path, body, "Authorization", "Bearer "+e.key); resp.StatusCode != 200 {
		t.Fatalf("deep but within the limit: %d %.200s", resp.StatusCode, got)
	}
}

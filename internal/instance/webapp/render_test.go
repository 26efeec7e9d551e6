package webapp

import (
	"encoding/json"
	"testing"
)

// One money format: "$0.00" for none, "<$0.0001" for a cost too small
// for four decimals, up to four decimals (at least two) below a dollar,
// cents with thousands separators from a dollar up.
func TestFormatUSD(t *testing.T) {
	for v, want := range map[float64]string{
		0:          "$0.00",
		0.00001:    "<$0.0001",
		0.0000999:  "<$0.0001",
		0.0001:     "$0.0001",
		0.000138:   "$0.0001",
		0.00016:    "$0.0002",
		0.0123:     "$0.0123",
		0.012:      "$0.012",
		0.5:        "$0.50",
		0.1:        "$0.10",
		0.99995:    "$1.00",
		1:          "$1.00",
		12.3456:    "$12.35",
		1234.5:     "$1,234.50",
		-0.25:      "-$0.25",
		-0.0000001: "-<$0.0001",
	} {
		if got := formatUSD(v); got != want {
			t.Errorf("formatUSD(%v) = %q, want %q", v, got, want)
		}
	}
}

// Counts take the singular for one only.
func TestPlural(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 steps"}, {1, "1 step"}, {2, "2 steps"}, {1234, "1,234 steps"}} {
		if got := plural(c.n, "step", "steps"); got != c.want {
			t.Errorf("plural(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if integer(3) != 3 || integer(int64(4)) != 4 || integer("x") != 0 {
		t.Error("integer")
	}
}

// A run in which a permission was rejected (or a question dismissed) is
// named "rejected", saying whether it stopped there; a deny rule's
// refusal, a failed or interrupted run keep their names.
func TestRunOutcomes(t *testing.T) {
	tool := func(status, errType string) string {
		if errType == "" {
			return `{"type":"tool","name":"bash","state":{"status":"` + status + `"}}`
		}
		return `{"type":"tool","name":"bash","state":{"status":"` + status + `","error":{"type":"` + errType + `","message":"m"}}}`
	}
	assistant := func(parts ...string) json.RawMessage {
		c := "["
		for i, p := range parts {
			if i > 0 {
				c += ","
			}
			c += p
		}
		return json.RawMessage(`{"id":"msg_a","type":"assistant","content":` + c + `]}`)
	}
	idle := func(outcome string) json.RawMessage {
		return json.RawMessage(`{"id":"msg_i","type":"idle","outcome":"` + outcome + `"}`)
	}
	user := json.RawMessage(`{"id":"msg_u","type":"user","text":"go"}`)
	msgs := decodeMessages([]json.RawMessage{
		user, assistant(tool("completed", "")), idle("succeeded"),
		user, assistant(tool("error", "PermissionRejectedError")), idle("succeeded"),
		user, assistant(tool("error", "PermissionCorrectedError")), assistant(), idle("succeeded"),
		user, assistant(tool("error", "QuestionRejectedError")), idle("succeeded"),
		user, assistant(tool("error", "PermissionDeniedError")), idle("succeeded"),
		user, assistant(tool("error", "PermissionRejectedError")), idle("interrupted"),
		user, assistant(tool("error", "ToolExecutionError")), idle("failed"),
	})
	var got []string
	for _, m := range msgs {
		if m.Type == "idle" {
			got = append(got, m.Run.String())
		}
	}
	want := []string{
		"succeeded",
		"rejected (a permission was rejected: the run stopped there)",
		"rejected (a permission was rejected: the agent went on with the feedback)",
		"rejected (a question was dismissed: the run stopped there)",
		"succeeded",
		"interrupted",
		"failed",
	}
	if len(got) != len(want) {
		t.Fatalf("runs %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("run %d: %q, want %q", i, got[i], want[i])
		}
	}
}

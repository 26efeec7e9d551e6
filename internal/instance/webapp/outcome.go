package webapp

import (
	"context"
	"encoding/json"

	"github.com/agentgate/agentgate/internal/instance/session"
)

// A run's outcome, as the session records it, is "succeeded" whenever no
// step failed and nothing interrupted it, even when the person rejected
// a permission (or dismissed a question) in it: the call is settled as a
// tool error (PermissionRejectedError and the like) and the run either
// stops there or goes on with the person's feedback. The pages name such
// a run "rejected", saying which, rather than "succeeded".

// runOutcome is how the pages name the outcome of a run.
type runOutcome struct {
	// Label is succeeded, failed, interrupted or rejected ("" for no run).
	Label string
	// Why says what the label hides: what was rejected, and whether the
	// run stopped there.
	Why string
}

// String is the label with its reason, for running text.
func (o runOutcome) String() string {
	if o.Why == "" {
		return o.Label
	}
	return o.Label + " (" + o.Why + ")"
}

// rejections are what a person refused in a run.
type rejections struct {
	permission, question bool // a permission rejected, a question dismissed
	stopped              bool // the run stopped at one
	corrected            bool // a permission rejected with feedback: the agent went on
}

// note adds the rejections among an assistant message's tool calls.
func (r *rejections) note(m *message) {
	if m.Type != "assistant" {
		return
	}
	for _, c := range m.Content {
		if c.Type != "tool" || c.State.Status != "error" || c.State.Error == nil {
			continue
		}
		switch c.State.Error.Type {
		case "PermissionRejectedError":
			r.permission, r.stopped = true, true
		case "PermissionCorrectedError":
			r.permission, r.corrected = true, true
		case "QuestionRejectedError":
			r.question, r.stopped = true, true
		}
	}
}

// outcome names a run whose recorded outcome is recorded.
func (r rejections) outcome(recorded string) runOutcome {
	if recorded != "succeeded" || (!r.permission && !r.question) {
		return runOutcome{Label: recorded}
	}
	what := "a permission was rejected"
	switch {
	case r.question && !r.permission:
		what = "a question was dismissed"
	case r.question:
		what = "a permission was rejected and a question dismissed"
	}
	if r.stopped {
		return runOutcome{Label: "rejected", Why: what + ": the run stopped there"}
	}
	return runOutcome{Label: "rejected", Why: what + ": the agent went on with the feedback"}
}

// markRuns names the outcome of each idle marker of a transcript (oldest
// first) from the messages of its run on the page.
func markRuns(msgs []message) {
	var seen rejections
	for i := range msgs {
		m := &msgs[i]
		if m.Type == "idle" {
			m.Run = seen.outcome(m.Outcome)
			seen = rejections{}
			continue
		}
		seen.note(m)
	}
}

// lastRunPage and lastRunScan bound the messages read to name a
// session's last run: pages of lastRunPage, newest first, at most
// lastRunScan in all (most runs end on the first page).
const (
	lastRunPage = 25
	lastRunScan = 200
)

// lastRun names the outcome of a session's last run from its messages
// back to the run before.
func lastRun(ctx context.Context, s *session.Service, info *session.Info) runOutcome {
	if info.Outcome != "succeeded" {
		return runOutcome{Label: info.Outcome}
	}
	var seen rejections
	cursor, read := "", 0
	for read < lastRunScan {
		page, err := s.ListMessages(ctx, info.ID, "desc", cursor, lastRunPage)
		if err != nil {
			return runOutcome{Label: info.Outcome}
		}
		for _, raw := range page.Data {
			read++
			var m message
			if json.Unmarshal(raw, &m) != nil {
				continue
			}
			if m.Type == "idle" {
				if read > 1 {
					return seen.outcome(info.Outcome) // the run before
				}
				continue
			}
			seen.note(&m)
		}
		if len(page.Data) < lastRunPage {
			break
		}
		cursor = page.Cursor.Next
	}
	return seen.outcome(info.Outcome)
}

package loop

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/tools"
	"github.com/agentgate/agentgate/internal/store"
)

// childRules keep a subagent from starting subagents of its own or
// rewriting its parent's todo list.
var childRules = []permission.Rule{
	{Action: "task", Resource: "*", Effect: permission.Deny},
	{Action: "todowrite", Resource: "*", Effect: permission.Deny},
	{Action: "todoread", Resource: "*", Effect: permission.Deny},
}

// runChild runs a task: a child session of parent with the agent,
// prompted with prompt, drained like any session; it waits for the
// child's drain to end and returns the child's id and final text. An
// interrupt of the parent interrupts the child.
func (r *Runner) runChild(ctx context.Context, parent *session.Info, agent, description, prompt string) (string, string, error) {
	s := r.server()
	title := description + " (@" + agent + " subagent)"
	rules := append(append([]permission.Rule{}, parent.Permissions...), childRules...)
	child, err := s.Create(ctx, session.CreateInput{ParentID: &parent.ID, Agent: &agent, Title: &title, Permissions: rules, Model: parent.Model})
	if err != nil {
		return "", "", err
	}
	done := make(chan struct{})
	r.mu.Lock()
	r.waiters[child.ID] = append(r.waiters[child.ID], done)
	r.mu.Unlock()
	if _, err := s.Prompt(ctx, child.ID, session.PromptInput{PromptFields: session.PromptFields{Text: &prompt}}); err != nil {
		return child.ID, "", err
	}
	select {
	case <-done:
	case <-ctx.Done():
		r.Interrupt(child.ID)
		<-done
		return child.ID, "", errors.New("Tool execution aborted: the session was interrupted")
	}
	var text, failure string
	err = s.ReadTx(context.WithoutCancel(ctx), func(tx store.Tx) error {
		return tx.SessionItems(s.InstanceName(), child.ID, store.ItemMessage, func(raw []byte) (bool, error) {
			var m struct {
				Type    string `json:"type"`
				Outcome string `json:"outcome"`
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
				Error *StructuredError `json:"error"`
			}
			if json.Unmarshal(raw, &m) != nil {
				return true, nil
			}
			switch m.Type {
			case "assistant":
				var b strings.Builder
				for _, c := range m.Content {
					if c.Type == "text" {
						b.WriteString(c.Text)
					}
				}
				if b.Len() > 0 {
					text = b.String()
				}
				if m.Error != nil {
					failure = m.Error.Message
				}
			case "idle":
				if m.Outcome != "succeeded" && failure == "" {
					failure = "the subagent's run ended " + m.Outcome
				}
			}
			return true, nil
		})
	})
	if err != nil {
		return child.ID, "", err
	}
	if text == "" && failure != "" {
		return child.ID, "", errors.New("The subagent failed: " + failure)
	}
	return child.ID, text, nil
}

// Todos is a session's todo list: that of its latest completed todowrite
// call.
func (s svc) Todos(ctx context.Context, sid string) ([]tools.Todo, error) {
	var out []tools.Todo
	err := s.ReadTx(ctx, func(tx store.Tx) error {
		return tx.SessionItems(s.InstanceName(), sid, store.ItemMessage, func(raw []byte) (bool, error) {
			if !strings.Contains(string(raw), `"todowrite"`) {
				return true, nil
			}
			msg, err := decodeAssistant(raw)
			if err != nil {
				return true, nil
			}
			for i := 0; i < len(msg.content); i++ {
				p := msg.tools[i]
				if p == nil || p.Name != "todowrite" || p.State.Status != "completed" {
					continue
				}
				var list []tools.Todo
				if b, err := json.Marshal(p.State.Metadata["todos"]); err == nil && json.Unmarshal(b, &list) == nil {
					out = list
				}
			}
			return true, nil
		})
	})
	return out, err
}

// SessionTodos is a session's todo list, for the todo route.
func (r *Runner) SessionTodos(req *http.Request, sid string) (any, error) {
	list, err := r.server().Todos(req.Context(), sid)
	if list == nil {
		list = []tools.Todo{}
	}
	return list, err
}

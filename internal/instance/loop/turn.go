package loop

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/store"
)

// StructuredError is the error of an assistant message.
type StructuredError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Status  int    `json:"status,omitempty"`
}

// resolveAgent finds the session's agent in its location (fresh services:
// the location as loaded now).
func (s svc) resolveAgent(info *session.Info) *agents.Agent {
	id := info.Agent
	if id == "" {
		id = "build"
	}
	list := s.Locations.AgentsOf(info.Location.Directory)
	if list == nil {
		list = agents.Builtin()
	}
	for i := range list {
		if list[i].ID == id {
			return &list[i]
		}
	}
	a := agents.Builtin()[0]
	a.ID, a.Name = id, id
	return &a
}

// conversation is the stored conversation as one provider request of
// the agent: user text with its text attachments, system updates, and the
// assistant's text.
func conversation(agent *agents.Agent, model string, msgs []session.Message) *formats.Conversation {
	c := &formats.Conversation{Model: model, System: agent.System, Settings: agent.Request.Settings,
		Body: agent.Request.Body, Headers: agent.Request.Headers}
	for _, m := range msgs {
		var v struct {
			Text    string `json:"text"`
			Files   []session.FileAttachment
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(m.Raw, &v) != nil {
			continue
		}
		switch m.Header.Type {
		case "user", "synthetic":
			text := v.Text
			for _, f := range v.Files {
				if strings.HasPrefix(f.Mime, "text/") || f.Mime == "application/json" {
					if b, err := base64.StdEncoding.DecodeString(f.Data); err == nil {
						text += fmt.Sprintf("\n\n<file name=%q>\n%s\n</file>", f.Name, b)
					}
				} else {
					text += fmt.Sprintf("\n\n[attached file %q (%s) not sent: only text attachments are]", f.Name, f.Mime)
				}
			}
			c.Messages = append(c.Messages, formats.Text(formats.RoleUser, text))
		case "system":
			c.Messages = append(c.Messages, formats.Text(formats.RoleSystem, v.Text))
		case "assistant":
			var b strings.Builder
			for _, p := range v.Content {
				if p.Type == "text" {
					b.WriteString(p.Text)
				}
			}
			if b.Len() > 0 {
				c.Messages = append(c.Messages, formats.Text(formats.RoleAssistant, b.String()))
			}
		}
	}
	return c
}

// callProvider sends one step to the provider and reads its stream; it
// returns the structured error of a failed step (nil when interrupted: the
// caller sees ctx).
func callProvider(ctx context.Context, prov ProviderConfig, f formats.Format, conv *formats.Conversation, delta func(formats.Delta)) (*formats.Step, *StructuredError) {
	req, err := f.NewRequest(ctx, prov.BaseURL, prov.APIKey, conv)
	if err != nil {
		return nil, &StructuredError{Type: "ProviderConfigError", Message: "Cannot build the provider request: bad base URL or settings"}
	}
	client := prov.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		// The error text carries the URL only, never the key.
		return nil, &StructuredError{Type: "ProviderConnectionError", Message: "Cannot reach the provider: " + err.Error()}
	}
	defer resp.Body.Close()
	step, cerr := f.ReadResponse(resp, delta)
	if ctx.Err() != nil || cerr == nil {
		return step, nil
	}
	switch cerr.Kind {
	case formats.CallRefused:
		return step, &StructuredError{Type: "APIError", Message: cerr.Message, Status: cerr.Status}
	case formats.CallStreamError:
		return step, &StructuredError{Type: "APIError", Message: cerr.Message}
	case formats.CallNotStream:
		return step, &StructuredError{Type: "ProviderStreamError", Message: cerr.Message +
			": check the provider's base_url (a `connection` needs llm_gateway on the instance's own site)"}
	}
	return step, &StructuredError{Type: "ProviderStreamError", Message: cerr.Message}
}

// turn runs one provider step for the session and stores the settled
// assistant message. It returns "succeeded", "failed" or "interrupted";
// an error only when the result cannot be stored.
func (s svc) turn(ctx context.Context, prov ProviderConfig, sid, msgID string) (string, error) {
	var info *session.Info
	var msgs []session.Message
	if err := s.ReadTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		msgs, err = s.Messages(tx, sid)
		return err
	}); err != nil {
		return "", err
	}
	agent := s.resolveAgent(info)
	model := agents.ModelRef{ID: prov.Model, ProviderID: "agentgate"}
	switch {
	case info.Model != nil:
		model = *info.Model
	case agent.Model != nil:
		model = *agent.Model
	}
	created := s.NowMS()
	s.Publish("session.message.started", info, map[string]any{"messageID": msgID, "type": "assistant"})
	format, known := formats.Named(prov.Format)
	if prov.Format == "" {
		format, known = formats.Chat, true
	}
	var serr *StructuredError
	var step *formats.Step
	switch {
	case model.ID == "":
		serr = &StructuredError{Type: "ProviderConfigError", Message: "No model: the session, its agent and the instance's provider name none"}
	case prov.BaseURL == "":
		serr = &StructuredError{Type: "ProviderConfigError", Message: "No provider endpoint is configured for this instance"}
	case !known:
		serr = &StructuredError{Type: "ProviderConfigError", Message: "Provider format " + prov.Format + " is not supported"}
	default:
		step, serr = callProvider(ctx, prov, format, conversation(agent, model.ID, msgs), func(d formats.Delta) {
			s.Publish("session.message.delta", info, map[string]any{"messageID": msgID, "field": d.Field, "delta": d.Text})
		})
	}
	if step == nil {
		step = &formats.Step{}
	}
	now := s.NowMS()
	result := "succeeded"
	msg := map[string]any{"id": msgID, "type": "assistant", "agent": agent.ID, "model": model}
	content := []any{}
	if step.Reasoning != "" {
		content = append(content, map[string]any{"type": "reasoning", "text": step.Reasoning})
	}
	if step.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": step.Text})
	}
	for _, tc := range step.ToolCalls {
		var input any = map[string]any{}
		if json.Unmarshal([]byte(tc.Arguments), &input) != nil {
			input = map[string]any{"raw": tc.Arguments}
		}
		content = append(content, map[string]any{"type": "tool", "id": tc.ID, "name": tc.Name, "executed": false,
			"state": map[string]any{"status": "error", "input": input,
				"error": StructuredError{Type: "ToolNotExecutedError", Message: "This server does not execute tools"}},
			"time": map[string]any{"created": now, "completed": now}})
	}
	msg["content"] = content
	switch {
	case ctx.Err() != nil:
		result = "interrupted"
		msg["finish"], msg["rawFinish"] = "other", "interrupted"
		msg["error"] = StructuredError{Type: "MessageAbortedError", Message: "The turn was interrupted"}
	case serr != nil:
		result = "failed"
		msg["finish"] = "error"
		msg["error"] = serr
	default:
		msg["finish"], msg["rawFinish"] = finishName[step.Finish], step.RawFinish
	}
	var cost float64
	var usage *session.TokenUsage
	if step.Usage != nil {
		t := *step.Usage
		usage = &session.TokenUsage{Input: float64(t.Input), Output: float64(t.Output), Reasoning: float64(t.Reasoning)}
		usage.Cache.Read, usage.Cache.Write = float64(t.CacheRead), float64(t.CacheWrite)
		msg["tokens"] = usage
		// Exact in pico-dollars; the record's cost is a number of USD.
		cost = float64(formats.Cost(t, store.Pricing{Input: prov.InputPrice, Output: prov.OutputPrice})) / 1e12
		msg["cost"] = cost
	}
	msg["time"] = map[string]any{"created": created, "completed": now}
	if step.Text != "" || step.Reasoning != "" {
		msg["time"].(map[string]any)["streamed"] = now
	}
	// Store with the process context: an interrupt cancels the turn, not
	// the recording of what it produced.
	storeCtx := context.WithoutCancel(ctx)
	if result == "interrupted" && errors.Is(context.Cause(ctx), errShutdown) {
		return result, nil
	}
	err := s.WriteTx(storeCtx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		raw, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		// The assistant message takes the place of the step's marker.
		err = tx.MoveSessionItem(s.InstanceName(), sid, msgID, store.ItemMessage, raw)
		if errors.Is(err, store.ErrNotFound) {
			err = tx.AppendSessionItem(s.InstanceName(), sid, store.ItemMessage, msgID, raw)
		}
		if err != nil {
			return err
		}
		info.Cost += cost
		if usage != nil {
			info.Tokens.Add(*usage)
		}
		steps := int64(1)
		if info.Steps != nil {
			steps += *info.Steps
		}
		info.Steps = &steps
		info.Time.Updated = max(now, info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return "", err
	}
	s.Publish("session.message.created", info, map[string]any{"message": msg})
	s.Publish("session.updated", info, map[string]any{"info": info})
	return result, nil
}

var errShutdown = errors.New("instance is shutting down")

// finishName is the message record's name of a step's finish.
var finishName = map[formats.Finish]string{formats.FinishUnknown: "unknown", formats.FinishStop: "stop", formats.FinishLength: "length",
	formats.FinishToolCalls: "tool-calls", formats.FinishContentFilter: "content-filter", formats.FinishOther: "other"}

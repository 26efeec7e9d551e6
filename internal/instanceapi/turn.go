package instanceapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/store"
)

// StructuredError is the error of an assistant message.
type StructuredError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Status  int    `json:"status,omitempty"`
}

// turnState is an assistant message being built from a stream.
type turnState struct {
	text, reasoning strings.Builder
	tools           map[int]*toolCall
	finish, raw     string
	usage           *TokenUsage
}

type toolCall struct {
	id, name string
	args     strings.Builder
}

// resolveAgent finds the session's agent in its location (fresh services:
// the location as loaded now).
func (s *Server) resolveAgent(info *SessionInfo) *AgentInfo {
	id := info.Agent
	if id == "" {
		id = "build"
	}
	var agents []AgentInfo
	if clean, canonical, err := s.checkDirectory(info.Location.Directory); err == nil {
		s.mu.Lock()
		loc, ok := s.locations[canonical]
		s.mu.Unlock()
		if !ok || loc.Directory != clean {
			if l, err := s.build(clean, canonical); err == nil {
				loc = l
			}
		}
		if loc != nil {
			agents = loc.Agents
		}
	}
	if agents == nil {
		agents = BuiltinAgents()
	}
	for i := range agents {
		if agents[i].ID == id {
			return &agents[i]
		}
	}
	a := BuiltinAgents()[0]
	a.ID, a.Name = id, id
	return &a
}

// chatMessages renders the stored conversation as Chat Completions messages.
func chatMessages(system string, msgs []storedMessage) []map[string]any {
	var out []map[string]any
	if system != "" {
		out = append(out, map[string]any{"role": "system", "content": system})
	}
	for _, m := range msgs {
		var v struct {
			Text    string `json:"text"`
			Files   []FileAttachment
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(m.raw, &v) != nil {
			continue
		}
		switch m.h.Type {
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
			out = append(out, map[string]any{"role": "user", "content": text})
		case "system":
			out = append(out, map[string]any{"role": "system", "content": v.Text})
		case "assistant":
			var b strings.Builder
			for _, c := range v.Content {
				if c.Type == "text" {
					b.WriteString(c.Text)
				}
			}
			if b.Len() > 0 {
				out = append(out, map[string]any{"role": "assistant", "content": b.String()})
			}
		}
	}
	return out
}

// turn runs one provider step for the session and stores the settled
// assistant message. It returns "succeeded", "failed" or "interrupted";
// an error only when the result cannot be stored.
func (s *Server) turn(ctx context.Context, prov ProviderConfig, sid, msgID string) (string, error) {
	var info *SessionInfo
	var msgs []storedMessage
	if err := s.view(ctx, func(tx store.Tx) (err error) {
		if info, err = s.getInfo(tx, sid); err != nil {
			return err
		}
		msgs, err = s.messages(tx, sid)
		return err
	}); err != nil {
		return "", err
	}
	agent := s.resolveAgent(info)
	model := ModelRef{ID: prov.Model, ProviderID: "agentgate"}
	switch {
	case info.Model != nil:
		model = *info.Model
	case agent.Model != nil:
		model = *agent.Model
	}
	created := s.nowMS()
	st := &turnState{tools: map[int]*toolCall{}}
	s.publishSession("session.message.started", info, map[string]any{"messageID": msgID, "type": "assistant"})
	var serr *StructuredError
	switch {
	case model.ID == "":
		serr = &StructuredError{Type: "ProviderConfigError", Message: "No model: the session, its agent and the instance's provider name none"}
	case prov.BaseURL == "":
		serr = &StructuredError{Type: "ProviderConfigError", Message: "No provider endpoint is configured for this instance"}
	case !knownFormat(prov.Format):
		serr = &StructuredError{Type: "ProviderConfigError", Message: "Provider format " + prov.Format + " is not supported"}
	default:
		serr = streamTurn(ctx, prov, agent, model.ID, msgs, st, func(field, delta string) {
			s.publishSession("session.message.delta", info, map[string]any{"messageID": msgID, "field": field, "delta": delta})
		})
	}
	now := s.nowMS()
	result := "succeeded"
	msg := map[string]any{"id": msgID, "type": "assistant", "agent": agent.ID, "model": model}
	content := []any{}
	if st.reasoning.Len() > 0 {
		content = append(content, map[string]any{"type": "reasoning", "text": st.reasoning.String()})
	}
	if st.text.Len() > 0 {
		content = append(content, map[string]any{"type": "text", "text": st.text.String()})
	}
	idx := make([]int, 0, len(st.tools))
	for i := range st.tools {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		tc := st.tools[i]
		var input any = map[string]any{}
		if json.Unmarshal([]byte(tc.args.String()), &input) != nil {
			input = map[string]any{"raw": tc.args.String()}
		}
		content = append(content, map[string]any{"type": "tool", "id": tc.id, "name": tc.name, "executed": false,
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
		msg["finish"], msg["rawFinish"] = finishReason(st.finish), st.finish
	}
	var cost float64
	if st.usage != nil {
		msg["tokens"] = st.usage
		in := st.usage.Input + st.usage.Cache.Read + st.usage.Cache.Write
		out := st.usage.Output + st.usage.Reasoning
		cost = (in*float64(prov.InputPrice) + out*float64(prov.OutputPrice)) / 1e12
		msg["cost"] = cost
	}
	msg["time"] = map[string]any{"created": created, "completed": now}
	if st.text.Len() > 0 || st.reasoning.Len() > 0 {
		msg["time"].(map[string]any)["streamed"] = now
	}
	// Store with the process context: an interrupt cancels the turn, not
	// the recording of what it produced.
	storeCtx := context.WithoutCancel(ctx)
	if result == "interrupted" && errors.Is(context.Cause(ctx), errShutdown) {
		return result, nil
	}
	err := s.update(storeCtx, func(tx store.Tx) (err error) {
		if info, err = s.getInfo(tx, sid); err != nil {
			return err
		}
		raw, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		// The assistant message takes the place of the step's marker.
		err = tx.MoveSessionItem(s.instanceName(), sid, msgID, store.ItemMessage, raw)
		if errors.Is(err, store.ErrNotFound) {
			err = tx.AppendSessionItem(s.instanceName(), sid, store.ItemMessage, msgID, raw)
		}
		if err != nil {
			return err
		}
		info.Cost += cost
		if st.usage != nil {
			addTokens(&info.Tokens, *st.usage)
		}
		steps := int64(1)
		if info.Steps != nil {
			steps += *info.Steps
		}
		info.Steps = &steps
		info.Time.Updated = max(now, info.Time.Updated)
		return s.putInfo(tx, info, false)
	})
	if err != nil {
		return "", err
	}
	s.publishSession("session.message.created", info, map[string]any{"message": msg})
	s.publishSession("session.updated", info, map[string]any{"info": info})
	return result, nil
}

var errShutdown = errors.New("instance is shutting down")

func finishReason(raw string) string {
	switch raw {
	case "stop", "end_turn":
		return "stop"
	case "length", "max_tokens":
		return "length"
	case "content_filter":
		return "content-filter"
	case "tool_calls", "function_call", "tool_use":
		return "tool-calls"
	case "":
		return "unknown"
	}
	return "other"
}

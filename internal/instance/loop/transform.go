package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/session"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
)

// experimental.chat.messages.transform sees the conversation a step sends
// as the released server's messages, {info, parts}, oldest first:
//
//   - a user message (and a compaction's summary, a system update) as a
//     user message with one text part: the text the model reads, with its
//     text attachments inlined (a summary and a system update marked
//     synthetic);
//   - an assistant step as an assistant message with its text, reasoning
//     and tool parts (state.output is what the model reads of a call).
//
// What a plugin changes is what the model is sent, never what is stored:
//
//   - removing a message or a part removes it (a tool part takes its call
//     and its result with it);
//   - a text part's text, a tool part's state.output (or state.error) and
//     state.input are sent as the plugin left them; a part marked ignored
//     is not sent;
//   - a message it adds is sent by its role: a user message's text parts,
//     an assistant message's text and tool parts;
//   - reasoning, and parts of other types, are not sent either way;
//   - a message it does not change is sent as it was, exactly.
//
// An output that breaks this shape (messages not an array of {info,
// parts}, a role other than user or assistant, a text that is not a
// string, a tool part without callID or tool, one call id twice, or no
// message left) is garbage: the step is sent unchanged and the plugins
// that have the hook show the failure in their status.

// transformView is the released form of a conversation's units.
func transformView(info *session.Info, units []convUnit, model agents.ModelRef) []map[string]any {
	out := make([]map[string]any, 0, len(units))
	lastUser := ""
	for _, u := range units {
		id, sid := u.msg.Header.ID, info.ID
		raw := gjson.ParseBytes(u.msg.Raw)
		created := raw.Get("time.created").Int()
		if u.msg.Header.Type == "assistant" {
			a := map[string]any{"id": id, "sessionID": sid, "role": "assistant", "parentID": lastUser, "agent": raw.Get("agent").String(),
				"mode": raw.Get("agent").String(), "modelID": raw.Get("model.id").String(), "providerID": raw.Get("model.providerID").String(),
				"time": map[string]any{"created": created, "completed": raw.Get("time.completed").Int()},
				"path": map[string]any{"cwd": info.Location.Directory, "root": info.Location.Directory}, "cost": raw.Get("cost").Float(),
				"tokens": map[string]any{"input": raw.Get("tokens.input").Float(), "output": raw.Get("tokens.output").Float(),
					"reasoning": raw.Get("tokens.reasoning").Float(), "cache": map[string]any{"read": raw.Get("tokens.cache.read").Float(),
						"write": raw.Get("tokens.cache.write").Float()}}}
			if f := raw.Get("finish"); f.Exists() {
				a["finish"] = f.String()
			}
			parts := []map[string]any{}
			for i, c := range raw.Get("content").Array() {
				switch c.Get("type").String() {
				case "text", "reasoning":
					parts = append(parts, map[string]any{"id": v1.PartID(id, fmt.Sprintf("%s%d", c.Get("type").String()[:1], i)), "sessionID": sid,
						"messageID": id, "type": c.Get("type").String(), "text": c.Get("text").String()})
				case "tool":
					tp := v1.ToolPart(sid, id, c)
					if st, ok := tp["state"].(map[string]any); ok && st["status"] == "error" {
						var p toolPart
						if json.Unmarshal([]byte(c.Raw), &p) == nil {
							st["error"] = toolResult(&p).Output
						}
					}
					parts = append(parts, tp)
				}
			}
			out = append(out, map[string]any{"info": a, "parts": parts})
			continue
		}
		// Users, summaries and system updates: the text the model reads.
		if u.msg.Header.Type == "user" {
			lastUser = id
		}
		text := ""
		for _, p := range u.sent[0].Parts {
			text += p.Text
		}
		part := map[string]any{"id": v1.PartID(id, "u0"), "sessionID": sid, "messageID": id, "type": "text", "text": text}
		if u.msg.Header.Type != "user" {
			part["synthetic"] = true
		}
		out = append(out, map[string]any{"info": map[string]any{"id": id, "sessionID": sid, "role": "user",
			"time": map[string]any{"created": created}, "agent": info.Agent,
			"model": map[string]any{"providerID": model.ProviderID, "modelID": model.ID}}, "parts": []map[string]any{part}})
	}
	return out
}

// transformedMessages maps the messages a transform left back onto the
// provider messages (see above); an error says why they are garbage.
func transformedMessages(units []convUnit, view []map[string]any, edited json.RawMessage) ([]formats.Message, error) {
	byID := map[string]int{}
	original := make([]string, len(view))
	for i, v := range view {
		b, _ := json.Marshal(v)
		original[i] = string(b)
		byID[units[i].msg.Header.ID] = i
	}
	var msgs []json.RawMessage
	if json.Unmarshal(edited, &msgs) != nil {
		return nil, errors.New("messages is not an array")
	}
	var out []formats.Message
	calls := map[string]bool{}
	for n, raw := range msgs {
		m := gjson.ParseBytes(raw)
		info, parts := m.Get("info"), m.Get("parts")
		if !info.IsObject() || !parts.IsArray() {
			return nil, fmt.Errorf("message %d is not {info, parts}", n)
		}
		id, role := info.Get("id"), info.Get("role").String()
		if id.Exists() && id.Type != gjson.String {
			return nil, fmt.Errorf("message %d: info.id is not a string", n)
		}
		if i, ok := byID[id.String()]; ok && id.String() != "" {
			if compactEqual(raw, original[i]) {
				for _, fm := range units[i].sent {
					for _, p := range fm.Parts {
						if p.Kind == formats.ToolCallPart {
							if calls[p.CallID] {
								return nil, fmt.Errorf("message %d: call %s is there twice", n, p.CallID)
							}
							calls[p.CallID] = true
						}
					}
				}
				out = append(out, units[i].sent...)
				continue
			}
			if t := units[i].msg.Header.Type; t == "system" && role == "user" {
				role = "system"
			}
		}
		switch role {
		case "user", "system":
			r := formats.RoleUser
			if role == "system" {
				r = formats.RoleSystem
			}
			var fp []formats.Part
			for k, p := range parts.Array() {
				if !p.IsObject() || p.Get("type").Type != gjson.String {
					return nil, fmt.Errorf("message %d part %d has no type", n, k)
				}
				if p.Get("type").String() != "text" {
					continue
				}
				if p.Get("text").Type != gjson.String {
					return nil, fmt.Errorf("message %d part %d: text is not a string", n, k)
				}
				if p.Get("ignored").Bool() || p.Get("text").String() == "" {
					continue
				}
				fp = append(fp, formats.Part{Kind: formats.TextPart, Text: p.Get("text").String()})
			}
			if len(fp) > 0 {
				out = append(out, formats.Message{Role: r, Parts: fp})
			}
		case "assistant":
			var said, results []formats.Part
			for k, p := range parts.Array() {
				if !p.IsObject() || p.Get("type").Type != gjson.String {
					return nil, fmt.Errorf("message %d part %d has no type", n, k)
				}
				switch p.Get("type").String() {
				case "text":
					if p.Get("text").Type != gjson.String {
						return nil, fmt.Errorf("message %d part %d: text is not a string", n, k)
					}
					if t := p.Get("text").String(); t != "" && !p.Get("ignored").Bool() {
						said = append(said, formats.Part{Kind: formats.TextPart, Text: t})
					}
				case "tool":
					call, result, err := transformedCall(p)
					if err != nil {
						return nil, fmt.Errorf("message %d part %d: %v", n, k, err)
					}
					if calls[call.CallID] {
						return nil, fmt.Errorf("message %d: call %s is there twice", n, call.CallID)
					}
					calls[call.CallID] = true
					said = append(said, call)
					results = append(results, result)
				}
			}
			if len(said) > 0 {
				out = append(out, formats.Message{Role: formats.RoleAssistant, Parts: said})
			}
			if len(results) > 0 {
				out = append(out, formats.Message{Role: formats.RoleUser, Parts: results})
			}
		default:
			return nil, fmt.Errorf("message %d: role %q is neither user nor assistant", n, role)
		}
	}
	if len(out) == 0 && len(units) > 0 {
		return nil, errors.New("no message is left to send")
	}
	return out, nil
}

// transformedCall is a tool part as the call the model made and the
// result it reads.
func transformedCall(p gjson.Result) (formats.Part, formats.Part, error) {
	id, name, state := p.Get("callID"), p.Get("tool"), p.Get("state")
	if id.Type != gjson.String || id.String() == "" || name.Type != gjson.String || name.String() == "" {
		return formats.Part{}, formats.Part{}, errors.New("a tool part needs callID and tool")
	}
	if !state.IsObject() {
		return formats.Part{}, formats.Part{}, errors.New("a tool part's state is not an object")
	}
	input := json.RawMessage(`{}`)
	if in := state.Get("input"); in.IsObject() {
		input = json.RawMessage(in.Raw)
	}
	call := formats.Part{Kind: formats.ToolCallPart, CallID: id.String(), Name: name.String(), Input: input}
	res := formats.Part{Kind: formats.ToolResultPart, CallID: id.String(), Name: name.String()}
	switch state.Get("status").String() {
	case "completed":
		if o := state.Get("output"); o.Exists() && o.Type != gjson.String {
			return formats.Part{}, formats.Part{}, errors.New("a tool part's state.output is not a string")
		}
		res.Output = state.Get("output").String()
	case "error":
		res.IsError = true
		res.Output = state.Get("error").String()
		if res.Output == "" {
			res.Output = "Error: the tool call failed"
		}
	default:
		res.IsError = true
		res.Output = "Error: the tool call did not finish"
	}
	return call, res, nil
}

// compactEqual reports whether a message a plugin left is the one it was
// given (JSON compared without spacing, members in any order).
func compactEqual(raw json.RawMessage, original string) bool {
	var a, b any
	if json.Unmarshal(raw, &a) != nil || json.Unmarshal([]byte(original), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// transformMessages lets experimental.chat.messages.transform change the
// messages a request sends (conv.Messages, built from units). A failure
// or garbage leaves them as they were.
func (sp *sessionPlugins) transformMessages(ctx context.Context, info *session.Info, units []convUnit, model agents.ModelRef, conv *formats.Conversation) {
	const hook = "experimental.chat.messages.transform"
	if sp == nil || !sp.m.HasHook(ctx, sp.loc, hook) {
		return
	}
	view := transformView(info, units, model)
	out := sp.trigger(ctx, hook, map[string]any{}, map[string]any{"messages": view})
	edited, err := json.Marshal(out["messages"])
	if err != nil {
		sp.m.HookFailed(ctx, sp.loc, hook, "returned garbage: "+err.Error())
		return
	}
	msgs, err := transformedMessages(units, view, edited)
	if err != nil {
		sp.m.HookFailed(ctx, sp.loc, hook, "returned garbage: "+err.Error())
		return
	}
	conv.Messages = msgs
}

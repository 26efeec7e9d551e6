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
// the agent: user text with its text attachments, system updates, the
// assistant's text and tool calls with their results. A completed
// compaction stands for everything before it.
func conversation(agent *agents.Agent, model string, msgs []session.Message) *formats.Conversation {
	c, _ := conversationUnits(agent, model, msgs)
	return c
}

// convUnit is one stored message as the conversation sends it: the
// provider messages it became (none for a record the model does not
// read).
type convUnit struct {
	msg  session.Message
	sent []formats.Message
}

// conversationUnits is conversation with the stored message each part of
// it comes from (what experimental.chat.messages.transform sees and
// changes, see transform.go).
func conversationUnits(agent *agents.Agent, model string, msgs []session.Message) (*formats.Conversation, []convUnit) {
	c := &formats.Conversation{Model: model, System: agent.System, Settings: agent.Request.Settings,
		Body: agent.Request.Body, Headers: agent.Request.Headers}
	start := 0
	for i, m := range msgs {
		if m.Header.Type == "compaction" && m.Header.Status == "completed" {
			start = i
		}
	}
	var units []convUnit
	for _, m := range msgs[start:] {
		var v struct {
			Text     string `json:"text"`
			Summary  string `json:"summary"`
			Continue *bool  `json:"continue"`
			Files    []session.FileAttachment
			Content  []json.RawMessage          `json:"content"`
			Metadata map[string]json.RawMessage `json:"metadata"`
		}
		if json.Unmarshal(m.Raw, &v) != nil {
			continue
		}
		var sent []formats.Message
		switch m.Header.Type {
		case "compaction":
			if m.Header.Status == "completed" {
				text := "Summary of the conversation so far:\n\n" + v.Summary
				if v.Continue == nil || *v.Continue {
					text += "\n\n" + continuePrompt
				}
				sent = append(sent, formats.Text(formats.RoleUser, text))
			}
		case "user", "synthetic":
			if string(v.Metadata["ignored"]) == "true" {
				break // shown to the user only (a plugin's notice)
			}
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
			sent = append(sent, formats.Text(formats.RoleUser, text))
		case "system":
			sent = append(sent, formats.Text(formats.RoleSystem, v.Text))
		case "assistant":
			sent = append(sent, assistantTurn(v.Content)...)
		}
		if len(sent) > 0 {
			units = append(units, convUnit{msg: m, sent: sent})
			c.Messages = append(c.Messages, sent...)
		}
	}
	return c, units
}

// continuePrompt follows a compaction's summary.
const continuePrompt = "Continue if you have next steps, or stop and ask for clarification if you are unsure how to proceed."

// assistantTurn is a stored assistant message as conversation messages:
// its text and tool calls, then (as the user's) the calls' results.
func assistantTurn(content []json.RawMessage) []formats.Message {
	var parts, results []formats.Part
	for _, raw := range content {
		var e struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		switch e.Type {
		case "text":
			if e.Text != "" {
				parts = append(parts, formats.Part{Kind: formats.TextPart, Text: e.Text})
			}
		case "tool":
			var p toolPart
			if json.Unmarshal(raw, &p) != nil {
				continue
			}
			input := p.State.Input
			if len(input) == 0 || input[0] != '{' {
				input = json.RawMessage(`{}`)
			}
			parts = append(parts, formats.Part{Kind: formats.ToolCallPart, CallID: p.ID, Name: p.Name, Input: input})
			results = append(results, toolResult(&p))
		}
	}
	var out []formats.Message
	if len(parts) > 0 {
		out = append(out, formats.Message{Role: formats.RoleAssistant, Parts: parts})
	}
	if len(results) > 0 {
		out = append(out, formats.Message{Role: formats.RoleUser, Parts: results})
	}
	return out
}

// toolResult is what the model reads of a call.
func toolResult(p *toolPart) formats.Part {
	r := formats.Part{Kind: formats.ToolResultPart, CallID: p.ID, Name: p.Name}
	switch p.State.Status {
	case "completed":
		var b strings.Builder
		for _, c := range p.State.Content {
			b.WriteString(c.Text)
		}
		r.Output = b.String()
	case "error":
		r.IsError = true
		r.Output = "Error: the tool call failed"
		if p.State.Error != nil {
			r.Output = "Error: " + p.State.Error.Message
		}
	default:
		r.IsError = true
		r.Output = "Error: the tool call did not finish"
	}
	return r
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
		if prov.Workspace != nil {
			return nil, &StructuredError{Type: "ProviderConnectionError", Message: "The workspace gateway could not take this turn: " + err.Error()}
		}
		// The error text carries the URL only, never the key.
		return nil, &StructuredError{Type: "ProviderConnectionError", Message: "Cannot reach the provider: " + err.Error() +
			"; check the `provider` block's address and that the provider is up"}
	}
	defer resp.Body.Close()
	step, cerr := f.ReadResponse(resp, delta)
	if ctx.Err() != nil || cerr == nil {
		return step, nil
	}
	switch cerr.Kind {
	case formats.CallRefused:
		return step, &StructuredError{Type: "APIError", Message: refusal(prov, conv.Model, cerr), Status: cerr.Status}
	case formats.CallStreamError:
		return step, &StructuredError{Type: "APIError", Message: cerr.Message}
	case formats.CallNotStream:
		return step, &StructuredError{Type: "ProviderStreamError", Message: cerr.Message +
			": check the provider's base_url (a `connection` needs llm_gateway on the instance's own site)"}
	}
	return step, &StructuredError{Type: "ProviderStreamError", Message: cerr.Message}
}

// refusal is the message of a refused step: for the refusals of the
// workspace gateway (its budget, its policies, the key) the cause in plain
// words, the gateway's own message and what to do; for any other status
// the provider's answer as it is.
func refusal(prov ProviderConfig, model string, cerr *formats.CallError) string {
	if prov.Workspace != nil {
		if msg := memberRefusal(model, cerr); msg != "" {
			return msg
		}
	}
	switch cerr.Status {
	case http.StatusPaymentRequired:
		return "The workspace budget refused this turn: " + cerr.Detail + "; an owner can raise the budget in the Console"
	case http.StatusForbidden:
		return "A workspace policy refused this turn: " + cerr.Detail + "; an owner can change the policies or enable the model in the Console"
	case http.StatusUnauthorized:
		return "The provider refused this instance's key: " + cerr.Detail +
			"; the key may be revoked or mistyped: give a valid key as `api_key` in the instance's `provider` block"
	}
	return cerr.Message
}

// memberRefusal words the refusals the gateway answers an instance that
// is a workspace member ("" for one it has no words for).
func memberRefusal(model string, cerr *formats.CallError) string {
	switch cerr.Status {
	case http.StatusUnauthorized:
		return "This instance's service account can no longer use the workspace: " + cerr.Detail +
			"; it was deleted in the Console (or its workspace was): reload the server's config (caddy reload) or restart it " +
			"to create the account again, then set its budget and policies in the Console if it had any"
	case http.StatusPaymentRequired:
		return "The workspace budget refused this turn: " + cerr.Detail +
			"; an owner can raise the budget of the instance's service account (or the workspace's) in the Console"
	case http.StatusForbidden:
		return "A workspace policy refused this turn: " + cerr.Detail +
			"; pick another model (the TUI's /models lists those this instance may use), or an owner changes the policies in the Console"
	case http.StatusNotFound:
		return fmt.Sprintf("Model %q is not a model of the workspace (it was removed, or never added): %s; "+
			"pick one of the workspace's models (the TUI's /models lists them), or an owner adds it in the Console (Models)", model, cerr.Detail)
	case http.StatusTooManyRequests:
		return "A workspace policy's rate limit refused this turn: " + cerr.Detail + "; prompt again once it allows"
	}
	return ""
}

// NoProviderMessage is the error of a turn on an instance that has no
// provider configured.
const NoProviderMessage = "This instance has no model to answer with: add `workspace <name>` (the workspace's models, through this " +
	"server's gateway) or a `provider` block to `agent_instance` (see the README)"

// stepOptions shape one provider step.
type stepOptions struct {
	// last: the agent's step limit is reached; no tools are offered and
	// the model is told to sum up.
	last bool
	// tools are the tools offered (none when nil).
	tools []formats.Tool
	// prepare, when set, adjusts the request before it is sent (the
	// plugins' system transform, chat.params and chat.headers).
	prepare func(conv *formats.Conversation, model agents.ModelRef)
	// transform, when set, may change the messages sent (the plugins'
	// experimental.chat.messages.transform).
	transform func(units []convUnit, model agents.ModelRef, conv *formats.Conversation)
	// textComplete, when set, may change the step's text once complete
	// (experimental.text.complete).
	textComplete func(msgID, text string) string
}

// stepResult is a settled step.
type stepResult struct {
	// outcome is "succeeded", "failed" or "interrupted".
	outcome string
	// toolsMarker, when set, is the inbox marker of the step's tool calls:
	// stored as running with the message, they are to be run now.
	toolsMarker string
	// msg is the stored assistant message, when there are calls to run.
	msg *assistantMsg
}

// stepState is a session as read at a step's start.
type stepState struct {
	info *session.Info
	msgs []session.Message
}

func (s svc) readStep(ctx context.Context, sid string) (*stepState, error) {
	st := &stepState{}
	err := s.ReadTx(ctx, func(tx store.Tx) (err error) {
		if st.info, err = s.Info(tx, sid); err != nil {
			return err
		}
		if st.msgs, err = s.Messages(tx, sid); err == nil {
			st.msgs = session.Visible(st.info, st.msgs) // a staged revert's hidden messages are not the conversation's
		}
		return err
	})
	return st, err
}

// maxStepsPrompt tells the model on the last step of a run that it may
// call no more tools.
const maxStepsPrompt = "MAXIMUM STEPS REACHED. The maximum number of steps allowed for this task has been reached; tools are disabled until the next user input. " +
	"Respond with text only: say that the step limit was reached, summarise what has been done, list what remains, and recommend what to do next."

// modelOf is the model a session's turn uses.
func modelOf(prov ProviderConfig, info *session.Info, agent *agents.Agent) agents.ModelRef {
	switch {
	case info.Model != nil:
		return *info.Model
	case agent.Model != nil:
		return *agent.Model
	}
	return agents.ModelRef{ID: prov.Model, ProviderID: ProviderID}
}

// providerStep sends one request and decodes its stream, or says why it
// cannot be sent.
func providerStep(ctx context.Context, prov ProviderConfig, conv *formats.Conversation, delta func(formats.Delta)) (*formats.Step, *StructuredError) {
	format, known := formats.Named(prov.Format)
	if prov.Format == "" {
		format, known = formats.Chat, true
	}
	switch {
	case prov.fail != nil:
		return nil, prov.fail
	case prov.BaseURL == "" && prov.Connection == "":
		return nil, &StructuredError{Type: "ProviderConfigError", Message: NoProviderMessage}
	case conv.Model == "":
		return nil, &StructuredError{Type: "ProviderConfigError", Message: "No model: the session, its agent and the instance's provider name none"}
	case prov.BaseURL == "":
		return nil, &StructuredError{Type: "ProviderConfigError", Message: "No provider endpoint is configured for this instance"}
	case !known:
		return nil, &StructuredError{Type: "ProviderConfigError", Message: "Provider format " + prov.Format + " is not supported"}
	}
	return callProvider(ctx, prov, format, conv, delta)
}

// tokensOf converts a step's metered usage to the record's, with its cost
// in USD (exact in pico-dollars before the conversion).
func tokensOf(prov ProviderConfig, u *formats.Tokens) (*session.TokenUsage, float64) {
	if u == nil {
		return nil, 0
	}
	t := *u
	usage := &session.TokenUsage{Input: float64(t.Input), Output: float64(t.Output), Reasoning: float64(t.Reasoning)}
	usage.Cache.Read, usage.Cache.Write = float64(t.CacheRead), float64(t.CacheWrite)
	pricing := store.Pricing{Input: prov.InputPrice, Output: prov.OutputPrice}
	if prov.Pricing != nil {
		pricing = *prov.Pricing
	}
	return usage, float64(formats.Cost(t, pricing)) / 1e12
}

// turn runs one provider step for the session and stores the settled
// assistant message. Tool calls it makes are stored as running parts
// with a "tools" inbox marker in the same write, so that each call runs
// at most once: a restart finds the marker and settles the calls that
// were running as interrupted instead of running them again.
func (s svc) turn(ctx context.Context, prov ProviderConfig, sid, msgID string, opts stepOptions, st *stepState) (stepResult, error) {
	if st == nil {
		var err error
		if st, err = s.readStep(ctx, sid); err != nil {
			return stepResult{}, err
		}
	}
	info, msgs := st.info, st.msgs
	agent := s.resolveAgent(info)
	model := modelOf(prov, info, agent)
	created := s.NowMS()
	s.Publish("session.next.step.started", info, map[string]any{"assistantMessageID": msgID, "agent": agent.ID, "model": model})
	conv, units := conversationUnits(agent, model.ID, msgs)
	if opts.transform != nil {
		opts.transform(units, model, conv)
	}
	conv.Headers = withSession(conv.Headers, sid)
	conv.Tools = opts.tools
	if opts.last {
		conv.Tools = nil
		conv.Messages = append(conv.Messages, formats.Text(formats.RoleSystem, maxStepsPrompt))
	}
	if lim, ok := prov.Limits[model.ID]; ok && lim.Output > 0 {
		if conv.Settings == nil {
			conv.Settings = map[string]any{}
		}
		if _, set := conv.Settings["maxTokens"]; !set {
			conv.Settings["maxTokens"] = lim.Output
		}
	}
	if opts.prepare != nil {
		opts.prepare(conv, model)
	}
	parts := partEvents{msgID: msgID}
	step, serr := providerStep(ctx, prov, conv, func(d formats.Delta) { parts.delta(s, info, d) })
	if step == nil {
		step = &formats.Step{}
	}
	if opts.textComplete != nil && serr == nil && ctx.Err() == nil {
		step.Text = opts.textComplete(msgID, step.Text)
	}
	ended := parts.ended(step)
	for _, tc := range step.ToolCalls {
		ended = append(ended,
			session.Ev{Type: "session.next.tool.input.started", Data: map[string]any{"assistantMessageID": msgID, "callID": tc.ID, "name": tc.Name}},
			session.Ev{Type: "session.next.tool.input.ended", Data: map[string]any{"assistantMessageID": msgID, "callID": tc.ID, "text": tc.Arguments}})
	}
	now := s.NowMS()
	result := stepResult{outcome: "succeeded"}
	msg := map[string]any{"id": msgID, "type": "assistant", "agent": agent.ID, "model": model}
	content := []any{}
	if step.Reasoning != "" {
		content = append(content, map[string]any{"type": "reasoning", "text": step.Reasoning})
	}
	if step.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": step.Text})
	}
	running := false
	for _, tc := range step.ToolCalls {
		p := newToolPart(tc, now)
		switch {
		case p.settled():
		case ctx.Err() != nil || serr != nil:
			p.fail("MessageAbortedError", "The step ended before this tool call could run", now)
		case opts.last:
			p.fail("ToolsDisabledError", "Tool calls are disabled: the agent's step limit was reached", now)
		default:
			running = true
		}
		content = append(content, p)
	}
	msg["content"] = content
	switch {
	case ctx.Err() != nil:
		result.outcome = "interrupted"
		msg["finish"], msg["rawFinish"] = "other", "interrupted"
		msg["error"] = StructuredError{Type: "MessageAbortedError", Message: "The turn was interrupted"}
	case serr != nil:
		result.outcome = "failed"
		msg["finish"] = "error"
		msg["error"] = serr
	default:
		msg["finish"], msg["rawFinish"] = finishName[step.Finish], step.RawFinish
	}
	usage, cost := tokensOf(prov, step.Usage)
	if usage != nil {
		msg["tokens"], msg["cost"] = usage, cost
	}
	msg["time"] = map[string]any{"created": created, "completed": now}
	if step.Text != "" || step.Reasoning != "" {
		msg["time"].(map[string]any)["streamed"] = now
	}
	// Store with the process context: an interrupt cancels the turn, not
	// the recording of what it produced.
	storeCtx := context.WithoutCancel(ctx)
	if result.outcome == "interrupted" && errors.Is(context.Cause(ctx), errShutdown) {
		return result, nil
	}
	var marker, stored []byte
	if running && result.outcome == "succeeded" {
		result.toolsMarker = s.NewID("msg")
		var err error
		if marker, err = json.Marshal(map[string]any{"id": result.toolsMarker, "sessionID": sid, "type": "tools", "message": msgID,
			"time": map[string]any{"created": now}}); err != nil {
			return stepResult{}, err
		}
	}
	err := s.WriteTx(storeCtx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		raw, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		stored = raw
		// The assistant message takes the place of the step's marker.
		err = tx.MoveSessionItem(s.InstanceName(), sid, msgID, store.ItemMessage, raw)
		if errors.Is(err, store.ErrNotFound) {
			err = tx.AppendSessionItem(s.InstanceName(), sid, store.ItemMessage, msgID, raw)
		}
		if err != nil {
			return err
		}
		if marker != nil {
			if err := tx.AppendSessionItem(s.InstanceName(), sid, store.ItemInbox, result.toolsMarker, marker); err != nil {
				return err
			}
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
		return stepResult{}, err
	}
	if result.outcome == "succeeded" {
		tokens := usage
		if tokens == nil {
			tokens = &session.TokenUsage{}
		}
		ended = append(ended, session.Ev{Type: "session.next.step.ended", Data: map[string]any{"assistantMessageID": msgID,
			"finish": msg["finish"], "cost": cost, "tokens": tokens}})
	} else {
		ended = append(ended, session.Ev{Type: "session.next.step.failed", Data: map[string]any{"assistantMessageID": msgID, "error": msg["error"]}})
	}
	// The step's closing events go out in one batch (one journal write)
	// once its message is stored.
	s.PublishEvents(info, append(ended, session.Ev{Type: "session.updated", Data: map[string]any{"info": info}})...)
	if result.toolsMarker != "" {
		if result.msg, err = decodeAssistant(stored); err != nil {
			return stepResult{}, err
		}
	}
	return result, nil
}

var errShutdown = errors.New("instance is shutting down")

// finishName is the message record's name of a step's finish.
var finishName = map[formats.Finish]string{formats.FinishUnknown: "unknown", formats.FinishStop: "stop", formats.FinishLength: "length",
	formats.FinishToolCalls: "tool-calls", formats.FinishContentFilter: "content-filter", formats.FinishOther: "other"}

// partEvents announces a step's streamed text and reasoning: the first
// piece of each opens it (text.started, reasoning.started), every piece
// is a delta, and ended closes the opened ones with their whole text.
type partEvents struct {
	msgID           string
	text, reasoning bool
}

func (p *partEvents) delta(s svc, info *session.Info, d formats.Delta) {
	kind, opened := "text", &p.text
	if d.Field == "reasoning" {
		kind, opened = "reasoning", &p.reasoning
	}
	id := kind + "-0"
	delta := session.Ev{Type: "session.next." + kind + ".delta", Data: map[string]any{"assistantMessageID": p.msgID, kind + "ID": id, "delta": d.Text}}
	if !*opened {
		*opened = true
		s.PublishEvents(info, session.Ev{Type: "session.next." + kind + ".started", Data: map[string]any{"assistantMessageID": p.msgID, kind + "ID": id}}, delta)
		return
	}
	s.PublishEvents(info, delta)
}

// ended is the events that close the opened parts: each carries the
// part's whole text, and a part that streamed nothing but has text in
// the step is opened and closed here.
func (p *partEvents) ended(step *formats.Step) []session.Ev {
	var out []session.Ev
	for _, k := range []struct {
		kind   string
		opened bool
		text   string
	}{{"reasoning", p.reasoning, step.Reasoning}, {"text", p.text, step.Text}} {
		if !k.opened && k.text == "" {
			continue
		}
		id := k.kind + "-0"
		if !k.opened {
			out = append(out, session.Ev{Type: "session.next." + k.kind + ".started", Data: map[string]any{"assistantMessageID": p.msgID, k.kind + "ID": id}})
		}
		out = append(out, session.Ev{Type: "session.next." + k.kind + ".ended", Data: map[string]any{"assistantMessageID": p.msgID, k.kind + "ID": id, "text": k.text}})
	}
	return out
}

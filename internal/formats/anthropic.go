package formats

import (
	"net/http"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/store"
)

// anthropicWire is Anthropic Messages: POST /messages (and
// /messages/count_tokens), the model in the body, max_tokens required,
// usage in message_start and message_delta.
type anthropicWire struct{}

func (anthropicWire) name() string { return "anthropic" }

func (anthropicWire) match(tail string) (Op, string, string, *ParseError, bool) {
	switch tail {
	case "/messages":
		return Generate, "", "", nil, true
	case "/messages/count_tokens":
		return CountTokens, "", "", nil, true
	}
	return 0, "", "", nil, false
}

func (anthropicWire) suggests(tail, _ string) bool { return under(tail, "/messages") }

func (anthropicWire) upstreamPath(r Route, _ string) string {
	if r.Op == CountTokens {
		return "/messages/count_tokens"
	}
	return "/messages"
}

func (anthropicWire) streamsByPath(Route) bool { return false }

func (anthropicWire) serves(kind string) bool   { return kind == store.KindAnthropic }
func (anthropicWire) nativeTo(kind string) bool { return kind == store.KindAnthropic }

// DefaultAnthropicVersion is sent when the client sends none.
const DefaultAnthropicVersion = "2023-06-01"

func (anthropicWire) setCredential(h http.Header, secret string) {
	h.Set("X-Api-Key", secret)
	if h.Get("Anthropic-Version") == "" {
		h.Set("Anthropic-Version", DefaultAnthropicVersion)
	}
}

func (anthropicWire) keySlots() (string, bool) { return "X-Api-Key", false }

// claims: Anthropic clients that authenticate with a bearer token still
// send anthropic-version.
func (anthropicWire) claims(h http.Header) bool { return h.Get("Anthropic-Version") != "" }

func (anthropicWire) foldsKeys() bool   { return false }
func (anthropicWire) modelInPath() bool { return false }

// check: Messages requires max_tokens, a whole count from 1 to MaxCount
// (a token count does not).
func (anthropicWire) check(r Route, f *Fields) *apierr.Error {
	if r.Op != Generate {
		return nil
	}
	mt := f.maxTokens
	if !mt.Exists() {
		return apierr.BadRequest("max_tokens is required for Anthropic Messages")
	}
	if n, bad := countOf(mt, false); mt.Type != gjson.Number || bad || n < 1 {
		return apierr.BadRequest("max_tokens must be a whole number from 1 to %d", MaxCount)
	}
	return nil
}

func (anthropicWire) outputLimit(f *Fields) int64 { return count(f.maxTokens, false) }

// extraOutput: a thinking budget (thinking.budget_tokens) is part of
// max_tokens, not beyond it.
func (anthropicWire) extraOutput(*Fields) int64 { return 0 }

func (anthropicWire) rewrite(_ Route, b *Body, f *Fields, requested, upstream string) *apierr.Error {
	return rewriteBodyModel(b, f, requested, upstream)
}

// prepareStream: a Messages stream always reports its usage.
func (anthropicWire) prepareStream(*Body, *Fields) bool { return false }

func (anthropicWire) errorBody(m map[string]any, status int, _, message string) {
	m["type"] = "error"
	m["error"] = map[string]any{"type": anthropicType(status), "message": message}
}

func anthropicType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 402:
		return "billing_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func (anthropicWire) modelObject(m ModelInfo, _ string) any {
	return anthropicModel{Type: "model", ID: m.ID, DisplayName: m.DisplayName(), CreatedAt: m.Created.UTC().Format(time.RFC3339)}
}

// modelList is {"data":[…],"has_more":false,"first_id","last_id"}.
func (anthropicWire) modelList(objects []any, models []ModelInfo) any {
	var first, last *string
	if len(models) > 0 {
		first, last = &models[0].ID, &models[len(models)-1].ID
	}
	return struct {
		Data    []any   `json:"data"`
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}{objects, false, first, last}
}

// Usage.

func (anthropicWire) arrayStream() bool     { return false }
func (anthropicWire) dropsUsageChunk() bool { return false }

func (anthropicWire) event(m *Meter, name []byte, v gjson.Result) bool {
	switch eventType(v, name) {
	case "message_start":
		msg := v.Get("message")
		m.setModel(msg.Get("model"))
		if u := msg.Get("usage"); u.IsObject() {
			anthropicUsage(m, u, false)
		}
	case "message_delta":
		if u := v.Get("usage"); u.IsObject() {
			anthropicUsage(m, u, true)
		}
	case "content_block_delta":
		var n int64
		v.Get("delta").ForEach(func(k, val gjson.Result) bool {
			switch k.Str {
			case "text", "thinking", "partial_json":
				n += textLen(val)
			}
			return true
		})
		m.addText(n)
	}
	return false
}

// anthropicUsage reads an Anthropic usage object. Each count present
// replaces the one known (output_tokens in message_delta is cumulative);
// input_tokens does not include the cache counts. final is set for the
// message_delta usage and the non-stream body.
func anthropicUsage(m *Meter, u gjson.Result, final bool) {
	u.ForEach(func(k, val gjson.Result) bool {
		if val.Type != gjson.Number {
			return true
		}
		switch k.Str {
		case "input_tokens":
			m.tok.Input, m.inputSeen = num(val), true
		case "cache_creation_input_tokens":
			m.tok.CacheWrite, m.inputSeen = num(val), true
		case "cache_read_input_tokens":
			m.tok.CacheRead, m.inputSeen = num(val), true
		case "output_tokens":
			m.tok.Output = num(val)
			if final {
				m.complete = true
			}
		}
		return true
	})
	m.usageSeen = true
}

// The slots of a Messages usage object read as it passes: what
// anthropicUsage reads of a final usage.
const (
	antInput = iota
	antCacheWrite
	antCacheRead
	antOutput
)

var anthropicUsageNode = countsNode(func(m *Meter, c *counts) {
	if c.got(antInput) {
		m.tok.Input, m.inputSeen = c.v[antInput], true
	}
	if c.got(antCacheWrite) {
		m.tok.CacheWrite, m.inputSeen = c.v[antCacheWrite], true
	}
	if c.got(antCacheRead) {
		m.tok.CacheRead, m.inputSeen = c.v[antCacheRead], true
	}
	if c.got(antOutput) {
		m.tok.Output, m.complete = c.v[antOutput], true
	}
	m.usageSeen = true
},
	countMember{key: "input_tokens", slot: antInput, numbers: true},
	countMember{key: "cache_creation_input_tokens", slot: antCacheWrite, numbers: true},
	countMember{key: "cache_read_input_tokens", slot: antCacheRead, numbers: true},
	countMember{key: "output_tokens", slot: antOutput, numbers: true},
)

// bodyReader: a Messages answer's model, its usage (final), and for the
// estimate each content block's text and thinking, and the JSON text of a
// tool call's input.
func (anthropicWire) bodyReader() *bodyNode { return anthropicBody }

var anthropicBody = newBodyNode(&bodyNode{fields: []bodyField{
	{key: "model", node: modelNode},
	{key: "usage", node: anthropicUsageNode},
	{key: "content", node: &bodyNode{each: &bodyNode{fields: []bodyField{
		{key: "text", node: textNode},
		{key: "thinking", node: textNode},
		{key: "input", node: &bodyNode{raw: true}},
	}}}},
}})

func (anthropicWire) salvage(m *Meter, name []byte, w *window, body bool) {
	typ := headType(w, name)
	if body || typ == "message_start" || typ == "message_delta" {
		if u, ok := lastObject(w.last(), `"usage":`); ok {
			anthropicUsage(m, u, body || typ == "message_delta")
		}
	}
}

// Client.

// clientPath: the Anthropic SDK's base URL has no version segment.
func (anthropicWire) clientPath(string) string { return "/v1/messages" }

// anthropicDefaultMaxTokens is sent when the agent sets no output limit
// (Messages requires one).
const anthropicDefaultMaxTokens = 8192

var anthropicSettings = settings{"temperature": "temperature", "top_p": "top_p", "topP": "top_p", "top_k": "top_k",
	"topK": "top_k"}.withOutput("max_tokens")

func (anthropicWire) encode(c *Conversation) map[string]any {
	body := map[string]any{}
	anthropicSettings.apply(body, c.Settings)
	msgs := []map[string]any{}
	for _, m := range alternating(systemAsUser(c.Messages)) {
		msgs = append(msgs, map[string]any{"role": string(m.Role), "content": anthropicContent(m.Parts)})
	}
	body["model"] = c.Model
	if c.System != "" {
		body["system"] = c.System
	}
	body["messages"] = msgs
	body["stream"] = true
	if _, ok := body["max_tokens"]; !ok {
		body["max_tokens"] = anthropicDefaultMaxTokens
	}
	if len(c.Tools) > 0 {
		tools := make([]map[string]any, len(c.Tools))
		for i, t := range c.Tools {
			tools[i] = map[string]any{"name": t.Name, "description": t.Description, "input_schema": schemaOf(t)}
		}
		body["tools"] = tools
	}
	return body
}

// anthropicContent is a message's content: a string when it is text only,
// else blocks (reasoning only when signed, as Messages verifies it).
func anthropicContent(parts []Part) any {
	if onlyText(parts) {
		return joinText(parts)
	}
	blocks := []map[string]any{}
	for _, p := range parts {
		switch p.Kind {
		case TextPart:
			if p.Text != "" {
				blocks = append(blocks, map[string]any{"type": "text", "text": p.Text})
			}
		case ReasoningPart:
			if p.Signature != "" {
				blocks = append(blocks, map[string]any{"type": "thinking", "thinking": p.Text, "signature": p.Signature})
			}
		case ToolCallPart:
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": p.CallID, "name": p.Name, "input": argsObject(p.Input)})
		case ToolResultPart:
			b := map[string]any{"type": "tool_result", "tool_use_id": p.CallID, "content": p.Output}
			if p.IsError {
				b["is_error"] = true
			}
			blocks = append(blocks, b)
		}
	}
	return blocks
}

var anthropicFinishes = finishTable{"end_turn": FinishStop, "max_tokens": FinishLength, "tool_use": FinishToolCalls}

func (anthropicWire) decode(d *decoder, name string, ev gjson.Result) {
	typ := ev.Get("type").String()
	if typ == "" {
		typ = name
	}
	switch typ {
	case "content_block_start":
		if b := ev.Get("content_block"); b.Get("type").String() == "tool_use" {
			c := d.call(int(ev.Get("index").Int()))
			c.ID, c.Name = keep(b.Get("id").String()), keep(b.Get("name").String())
		}
	case "content_block_delta":
		delta := ev.Get("delta")
		switch delta.Get("type").String() {
		case "text_delta":
			d.addText(delta.Get("text").String())
		case "thinking_delta":
			d.addReasoning(delta.Get("thinking").String())
		case "signature_delta":
			d.signature.WriteString(delta.Get("signature").String())
		case "input_json_delta":
			d.addArgs(int(ev.Get("index").Int()), delta.Get("partial_json").String())
		}
	case "message_delta":
		if f := ev.Get("delta.stop_reason").String(); f != "" {
			d.setFinish(f, anthropicFinishes.of(f))
		}
	case "message_stop":
		d.done = true
	case "error":
		d.fail(ev.Get("error.message").String())
	}
}

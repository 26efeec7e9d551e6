package formats

import (
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
)

// responsesWire is OpenAI Responses: POST /responses, the model in the
// body, usage in the final response event. OpenAI connections serve it
// beside Chat; it is no kind's own format.
type responsesWire struct{}

func (responsesWire) name() string { return "responses" }

func (responsesWire) match(tail string) (Op, string, string, *ParseError, bool) {
	return Generate, "", "", nil, tail == "/responses"
}

func (responsesWire) suggests(tail, _ string) bool      { return under(tail, "/responses") }
func (responsesWire) upstreamPath(Route, string) string { return "/responses" }
func (responsesWire) streamsByPath(Route) bool          { return false }

func (responsesWire) serves(kind string) bool                    { return openAIKind(kind) }
func (responsesWire) nativeTo(string) bool                       { return false }
func (responsesWire) setCredential(h http.Header, secret string) { setBearer(h, secret) }
func (responsesWire) keySlots() (string, bool)                   { return "", false }
func (responsesWire) claims(http.Header) bool                    { return false }

func (responsesWire) foldsKeys() bool             { return false }
func (responsesWire) modelInPath() bool           { return false }
func (responsesWire) outputLimit(f *Fields) int64 { return count(f.maxOutput, false) }
func (responsesWire) extraOutput(*Fields) int64   { return 0 }

// check: max_output_tokens must be a whole count.
func (responsesWire) check(_ Route, f *Fields) *apierr.Error {
	return checkCount(f.maxOutput, "max_output_tokens", false)
}

func (responsesWire) rewrite(_ Route, b *Body, f *Fields, requested, upstream string) *apierr.Error {
	return rewriteBodyModel(b, f, requested, upstream)
}

// prepareStream: a Responses stream always ends with its usage.
func (responsesWire) prepareStream(*Body, *Fields) bool { return false }

func (responsesWire) errorBody(m map[string]any, status int, tag, message string) {
	openAIError(m, status, tag, message)
}

func (responsesWire) modelObject(m ModelInfo, ownedBy string) any {
	return openAIModelObject(m, ownedBy)
}
func (responsesWire) modelList(objects []any, _ []ModelInfo) any { return openAIModelList(objects) }

// Usage.

func (responsesWire) arrayStream() bool     { return false }
func (responsesWire) dropsUsageChunk() bool { return false }

func isResponsesFinal(typ string) bool {
	return typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed"
}

func (responsesWire) event(m *Meter, name []byte, v gjson.Result) bool {
	switch typ := eventType(v, name); {
	case isResponsesFinal(typ):
		r := v.Get("response")
		m.setModel(r.Get("model"))
		if u := r.Get("usage"); u.IsObject() {
			responsesUsage(m, u)
		}
	case typ == "response.created" || typ == "response.in_progress" || typ == "response.queued":
		m.setModel(v.Get("response.model"))
	case typ == "response.audio.delta": // base64 audio, not text
	case strings.HasSuffix(typ, ".delta"):
		m.addText(textLen(v.Get("delta")))
	}
	return false
}

// responsesUsage reads a Responses usage object: input_tokens includes the
// cached tokens, output_tokens the reasoning tokens.
func responsesUsage(m *Meter, u gjson.Result) {
	var input, cached, output, reasoning int64
	u.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "input_tokens":
			input = num(val)
		case "output_tokens":
			output = num(val)
		case "input_tokens_details":
			cached = num(val.Get("cached_tokens"))
		case "output_tokens_details":
			reasoning = num(val.Get("reasoning_tokens"))
		}
		return true
	})
	responsesTokens(m, input, cached, output, reasoning)
}

// responsesTokens sets a Responses usage's counts.
func responsesTokens(m *Meter, input, cached, output, reasoning int64) {
	var t Tokens
	t.Input, t.CacheRead = split(input, cached)
	t.Output, t.Reasoning = split(output, reasoning)
	m.tok = t
	m.inputSeen, m.usageSeen, m.complete = true, true, true
}

// The slots of a Responses usage object read as it passes: what
// responsesUsage reads.
const (
	respInput = iota
	respOutput
	respCached
	respReasoning
)

var responsesUsageNode = countsNode(func(m *Meter, c *counts) {
	responsesTokens(m, c.v[respInput], c.v[respCached], c.v[respOutput], c.v[respReasoning])
},
	countMember{key: "input_tokens", slot: respInput},
	countMember{key: "output_tokens", slot: respOutput},
	countMember{key: "input_tokens_details", slot: respCached, inner: "cached_tokens", zero: true},
	countMember{key: "output_tokens_details", slot: respReasoning, inner: "reasoning_tokens", zero: true},
)

// bodyReader: a Responses answer's model, its usage, and for the estimate
// the text of each output item (its arguments, and the text of each part
// of its content and its summary).
func (responsesWire) bodyReader() *bodyNode { return responsesBody }

var responsesBody = newBodyNode(&bodyNode{fields: []bodyField{
	{key: "model", node: modelNode},
	{key: "usage", node: responsesUsageNode},
	{key: "output", node: &bodyNode{each: &bodyNode{fields: []bodyField{
		{key: "arguments", node: textNode},
		{key: "content", node: &bodyNode{each: &bodyNode{fields: []bodyField{{key: "text", node: textNode}}}}},
		{key: "summary", node: &bodyNode{each: &bodyNode{fields: []bodyField{{key: "text", node: textNode}}}}},
	}}}},
}})

func (responsesWire) salvage(m *Meter, name []byte, w *window, body bool) {
	if body || isResponsesFinal(headType(w, name)) {
		if u, ok := lastObject(w.last(), `"usage":`); ok {
			responsesUsage(m, u)
		}
	}
}

// Client.

func (responsesWire) clientPath(string) string { return "/responses" }

var responsesSettings = settings{"temperature": "temperature", "top_p": "top_p", "topP": "top_p"}.withOutput("max_output_tokens")

func (responsesWire) encode(c *Conversation) map[string]any {
	body := map[string]any{}
	responsesSettings.apply(body, c.Settings)
	input := []map[string]any{}
	for _, m := range systemAsUser(c.Messages) {
		if text := joinText(m.Parts); onlyText(m.Parts) || text != "" {
			input = append(input, map[string]any{"role": string(m.Role), "content": text})
		}
		for _, p := range m.Parts {
			switch p.Kind {
			case ToolCallPart:
				input = append(input, map[string]any{"type": "function_call", "call_id": p.CallID, "name": p.Name,
					"arguments": string(argsObject(p.Input))})
			case ToolResultPart:
				input = append(input, map[string]any{"type": "function_call_output", "call_id": p.CallID, "output": p.Output})
			}
		}
	}
	body["model"] = c.Model
	if c.System != "" {
		body["instructions"] = c.System
	}
	body["input"] = input
	body["stream"] = true
	body["store"] = false
	if len(c.Tools) > 0 {
		tools := make([]map[string]any, len(c.Tools))
		for i, t := range c.Tools {
			tools[i] = map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": schemaOf(t)}
		}
		body["tools"] = tools
	}
	return body
}

var responsesFinishes = finishTable{"stop": FinishStop, "length": FinishLength, "content_filter": FinishContentFilter,
	"tool_calls": FinishToolCalls}

func (responsesWire) decode(d *decoder, name string, ev gjson.Result) {
	typ := ev.Get("type").String()
	if typ == "" {
		typ = name
	}
	switch typ {
	case "response.output_text.delta":
		d.addText(ev.Get("delta").String())
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		d.addReasoning(ev.Get("delta").String())
	case "response.output_item.done":
		if it := ev.Get("item"); it.Get("type").String() == "function_call" {
			c := d.nextCall()
			c.ID, c.Name, c.Arguments = keep(it.Get("call_id").String()), keep(it.Get("name").String()), keep(it.Get("arguments").String())
		}
	case "response.completed", "response.incomplete":
		raw := "stop"
		if typ == "response.incomplete" {
			raw = ev.Get("response.incomplete_details.reason").String()
			if raw == "max_output_tokens" {
				raw = "length"
			}
		}
		if len(d.order) > 0 && raw == "stop" {
			raw = "tool_calls"
		}
		d.setFinish(raw, responsesFinishes.of(raw))
		d.done = true
	case "response.failed":
		d.fail(ev.Get("response.error.message").String())
	case "error":
		d.fail(ev.Get("message").String())
	}
}

package formats

import (
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/store"
)

// chatWire is OpenAI Chat Completions: POST /chat/completions, the model
// in the body, usage in a last chunk that a stream sends only when asked
// (stream_options.include_usage).
type chatWire struct{}

func (chatWire) name() string { return "chat" }

func (chatWire) match(tail string) (Op, string, string, *ParseError, bool) {
	return Generate, "", "", nil, tail == "/chat/completions"
}

func (chatWire) suggests(tail, _ string) bool {
	return tail == "/chat/completions" || strings.HasPrefix(tail, "/chat/")
}
func (chatWire) upstreamPath(Route, string) string { return "/chat/completions" }
func (chatWire) streamsByPath(Route) bool          { return false }

func (chatWire) serves(kind string) bool   { return openAIKind(kind) }
func (chatWire) nativeTo(kind string) bool { return openAIKind(kind) }

func (chatWire) setCredential(h http.Header, secret string) { setBearer(h, secret) }

// keySlots: Azure OpenAI's SDK sends its key in api-key.
func (chatWire) keySlots() (string, bool) { return "Api-Key", false }
func (chatWire) claims(http.Header) bool  { return false }

// openAIKind reports the kinds that speak OpenAI's formats.
func openAIKind(kind string) bool {
	return kind == store.KindOpenAI || kind == store.KindOpenAICompatible
}

func setBearer(h http.Header, secret string) { h.Set("Authorization", "Bearer "+secret) }

func (chatWire) foldsKeys() bool           { return false }
func (chatWire) modelInPath() bool         { return false }
func (chatWire) extraOutput(*Fields) int64 { return 0 }

// check: both output bounds must be whole counts, the one the gateway
// reads (outputLimit) and the one a provider might read instead.
func (chatWire) check(_ Route, f *Fields) *apierr.Error {
	if e := checkCount(f.maxCompletionTokens, "max_completion_tokens", false); e != nil {
		return e
	}
	return checkCount(f.maxTokens, "max_tokens", false)
}

// outputLimit: max_completion_tokens, or the older max_tokens.
func (chatWire) outputLimit(f *Fields) int64 {
	if n := count(f.maxCompletionTokens, false); n > 0 {
		return n
	}
	return count(f.maxTokens, false)
}

func (chatWire) rewrite(_ Route, b *Body, f *Fields, requested, upstream string) *apierr.Error {
	return rewriteBodyModel(b, f, requested, upstream)
}

// prepareStream asks a stream for its usage chunk when the client did not,
// and says to hide that chunk from it.
func (chatWire) prepareStream(b *Body, f *Fields) bool {
	if f.streamOptions.Get("include_usage").Bool() {
		return false
	}
	return setIncludeUsage(b, f)
}

// setIncludeUsage sets stream_options.include_usage to true, with the
// bytes sjson.SetBytes(body, "stream_options.include_usage", true) made:
// the member's value replaced by true; else the member added at the end
// of stream_options; else stream_options added at the end of the
// top-level object, which is then sent from its opening brace to its
// closing one (sjson drops the whitespace around it). A stream_options
// that is not an object is replaced by one, except an array, which sjson
// refused to edit: that body is sent as it is (false).
func setIncludeUsage(b *Body, f *Fields) bool {
	so := f.streamOptions
	if !so.Exists() {
		member := `,"stream_options":{"include_usage":true}`
		if emptyObject(b.base[f.open : f.close+1]) {
			member = member[1:]
		}
		lo, hi := b.lo, b.hi
		b.lo, b.hi = f.open, f.close+1
		if !b.replace(f.close, f.close, member, "", "") {
			b.lo, b.hi = lo, hi
			return false
		}
		return true
	}
	start, end, ok := b.span(so)
	if !ok {
		return false
	}
	if v := so.Get("include_usage"); v.Exists() { // its Index is in the body
		start, end, ok := b.span(v)
		return ok && b.replace(start, end, "true", "", "")
	}
	switch {
	case so.IsObject():
		end-- // its closing brace
		member := `,"include_usage":true`
		if emptyObject(so.Raw) {
			member = member[1:]
		}
		return b.replace(end, end, member, "", "")
	case so.IsArray():
		return false
	}
	return b.replace(start, end, `{"include_usage":true}`, "", "")
}

// emptyObject reports whether an object's text (from its opening brace)
// has no member.
func emptyObject[T string | []byte](obj T) bool {
	for i := 1; i < len(obj); i++ {
		switch obj[i] {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return obj[i] == '}'
	}
	return true
}

func (chatWire) errorBody(m map[string]any, status int, tag, message string) {
	openAIError(m, status, tag, message)
}

func (chatWire) modelObject(m ModelInfo, ownedBy string) any { return openAIModelObject(m, ownedBy) }
func (chatWire) modelList(objects []any, _ []ModelInfo) any  { return openAIModelList(objects) }

// openAIError is OpenAI's error envelope: error {message, type, code}.
func openAIError(m map[string]any, status int, tag, message string) {
	m["error"] = map[string]any{"message": message, "type": openAIType(status), "code": tag}
}

func openAIType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 402:
		return "insufficient_quota"
	case status == 413:
		return "request_too_large"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func openAIModelObject(m ModelInfo, ownedBy string) any {
	return openAIModel{ID: m.ID, Object: "model", Created: m.Created.Unix(), OwnedBy: ownedBy}
}

// openAIModelList is {"object":"list","data":[…]}.
func openAIModelList(objects []any) any {
	return struct {
		Object string `json:"object"`
		Data   []any  `json:"data"`
	}{"list", objects}
}

// Usage.

func (chatWire) arrayStream() bool     { return false }
func (chatWire) dropsUsageChunk() bool { return true }

// event reads a chunk; a chunk with a usage and no choices is the usage
// chunk.
func (chatWire) event(m *Meter, _ []byte, v gjson.Result) (usageOnly bool) {
	choices := -1
	hasUsage := false
	var text int64
	v.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "model":
			m.setModel(val)
		case "usage":
			if val.IsObject() {
				chatUsage(m, val)
				hasUsage = true
			}
		case "choices":
			if val.IsArray() {
				choices = 0
				val.ForEach(func(_, ch gjson.Result) bool {
					choices++
					text += chatDeltaText(ch.Get("delta"))
					return true
				})
			}
		}
		return true
	})
	m.addText(text)
	return hasUsage && choices == 0
}

func chatDeltaText(d gjson.Result) int64 {
	var n int64
	d.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "content", "refusal", "reasoning_content", "reasoning":
			n += textLen(val)
		case "tool_calls":
			val.ForEach(func(_, tc gjson.Result) bool {
				n += textLen(tc.Get("function.arguments"))
				return true
			})
		}
		return true
	})
	return n
}

// chatUsage reads a Chat usage object: prompt_tokens includes the cached
// tokens, completion_tokens the reasoning tokens.
func chatUsage(m *Meter, u gjson.Result) {
	var prompt, cached, hit, completion, reasoning int64
	cachedSet := false
	u.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens":
			prompt = num(val)
		case "completion_tokens":
			completion = num(val)
		case "prompt_tokens_details":
			if c := val.Get("cached_tokens"); c.Exists() {
				cached, cachedSet = num(c), true
			}
		case "completion_tokens_details":
			reasoning = num(val.Get("reasoning_tokens"))
		case "prompt_cache_hit_tokens": // DeepSeek
			hit = num(val)
		}
		return true
	})
	if !cachedSet {
		cached = hit
	}
	chatTokens(m, prompt, cached, completion, reasoning)
}

// chatTokens sets a Chat usage's counts.
func chatTokens(m *Meter, prompt, cached, completion, reasoning int64) {
	var t Tokens
	t.Input, t.CacheRead = split(prompt, cached)
	t.Output, t.Reasoning = split(completion, reasoning)
	m.tok = t
	m.inputSeen, m.usageSeen, m.complete = true, true, true
}

// The slots of a Chat usage object read as it passes: what chatUsage
// reads.
const (
	chatPrompt = iota
	chatCompletion
	chatCached
	chatReasoning
	chatHit
)

var chatUsageNode = countsNode(func(m *Meter, c *counts) {
	cached := c.v[chatCached]
	if !c.got(chatCached) {
		cached = c.v[chatHit]
	}
	chatTokens(m, c.v[chatPrompt], cached, c.v[chatCompletion], c.v[chatReasoning])
},
	countMember{key: "prompt_tokens", slot: chatPrompt},
	countMember{key: "completion_tokens", slot: chatCompletion},
	countMember{key: "prompt_tokens_details", slot: chatCached, inner: "cached_tokens"},
	countMember{key: "completion_tokens_details", slot: chatReasoning, inner: "reasoning_tokens", zero: true},
	countMember{key: "prompt_cache_hit_tokens", slot: chatHit}, // DeepSeek
)

// bodyReader: a Chat answer's model, its usage, and for the estimate the
// text of each choice's message (content, refusal, reasoning_content,
// reasoning, and each tool call's function.arguments); the first of a
// repeated top-level member counts.
func (chatWire) bodyReader() *bodyNode { return chatBody }

var chatBody = newBodyNode(&bodyNode{fields: []bodyField{
	{key: "model", node: modelNode},
	{key: "usage", node: chatUsageNode},
	{key: "choices", node: &bodyNode{each: &bodyNode{fields: []bodyField{
		{key: "message", node: &bodyNode{fields: []bodyField{
			{key: "content", all: true, node: textNode},
			{key: "refusal", all: true, node: textNode},
			{key: "reasoning_content", all: true, node: textNode},
			{key: "reasoning", all: true, node: textNode},
			{key: "tool_calls", all: true, node: &bodyNode{each: &bodyNode{fields: []bodyField{
				{key: "function", inner: "arguments", node: textNode}}}}},
		}}},
	}}}},
}})

func (chatWire) salvage(m *Meter, _ []byte, w *window, _ bool) {
	if u, ok := lastObject(w.last(), `"usage":`); ok {
		chatUsage(m, u)
	}
}

// Client.

func (chatWire) clientPath(string) string { return "/chat/completions" }

var chatSettings = settings{"temperature": "temperature", "top_p": "top_p", "topP": "top_p", "seed": "seed", "stop": "stop",
	"presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
	"reasoningEffort": "reasoning_effort", "reasoning_effort": "reasoning_effort"}.withOutput("max_tokens")

func (chatWire) encode(c *Conversation) map[string]any {
	body := map[string]any{}
	chatSettings.apply(body, c.Settings)
	var msgs []map[string]any
	if c.System != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": c.System})
	}
	for _, m := range c.Messages {
		msgs = append(msgs, chatMessages(m)...)
	}
	body["model"] = c.Model
	body["messages"] = msgs
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	if len(c.Tools) > 0 {
		tools := make([]map[string]any, len(c.Tools))
		for i, t := range c.Tools {
			tools[i] = map[string]any{"type": "function", "function": map[string]any{"name": t.Name, "description": t.Description, "parameters": schemaOf(t)}}
		}
		body["tools"] = tools
	}
	return body
}

// chatMessages is one conversation message as Chat messages: tool results
// are messages of their own (role tool), after the message's text.
func chatMessages(m Message) []map[string]any {
	if onlyText(m.Parts) {
		return []map[string]any{{"role": string(m.Role), "content": joinText(m.Parts)}}
	}
	var out []map[string]any
	var calls []map[string]any
	var results []map[string]any
	for _, p := range m.Parts {
		switch p.Kind {
		case ToolCallPart:
			calls = append(calls, map[string]any{"id": p.CallID, "type": "function",
				"function": map[string]any{"name": p.Name, "arguments": string(argsObject(p.Input))}})
		case ToolResultPart:
			results = append(results, map[string]any{"role": "tool", "tool_call_id": p.CallID, "content": p.Output})
		}
	}
	if text := joinText(m.Parts); text != "" || len(calls) > 0 {
		msg := map[string]any{"role": string(m.Role), "content": text}
		if text == "" {
			msg["content"] = nil
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		out = append(out, msg)
	}
	return append(out, results...)
}

var chatFinishes = finishTable{"stop": FinishStop, "length": FinishLength, "content_filter": FinishContentFilter,
	"tool_calls": FinishToolCalls, "function_call": FinishToolCalls}

func (chatWire) decode(d *decoder, _ string, ev gjson.Result) {
	if e := ev.Get("error"); e.Exists() {
		d.fail(e.Get("message").String())
		return
	}
	ch := ev.Get("choices.0")
	d.addText(ch.Get("delta.content").String())
	for _, key := range []string{"delta.reasoning_content", "delta.reasoning"} {
		if r := ch.Get(key); r.Type == gjson.String {
			d.addReasoning(r.Str)
		}
	}
	for _, tc := range ch.Get("delta.tool_calls").Array() {
		i := int(tc.Get("index").Int())
		c := d.call(i)
		if v := tc.Get("id").String(); v != "" {
			c.ID = keep(v)
		}
		if v := tc.Get("function.name").String(); v != "" {
			c.Name = keep(v)
		}
		d.addArgs(i, tc.Get("function.arguments").String())
	}
	if f := ch.Get("finish_reason").String(); f != "" {
		d.setFinish(f, chatFinishes.of(f))
	}
}

package formats

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/store"
)

// googleWire is Google Generative AI: POST /models/<model>:<method>, the
// model in the path, field names in either lowerCamelCase or snake_case,
// usage in usageMetadata, streams as SSE (alt=sse) or as one JSON array.
type googleWire struct{}

func (googleWire) name() string { return "google" }

// googleMethods are the methods the gateway serves for a model, and the
// operation of each.
var googleMethods = map[string]Op{"generateContent": Generate, "streamGenerateContent": Generate, "countTokens": CountTokens}

// GenerationMethods are the Google methods listed for a model.
var GenerationMethods = []string{"generateContent", "streamGenerateContent", "countTokens"}

func (googleWire) match(tail string) (Op, string, string, *ParseError, bool) {
	spec, ok := strings.CutPrefix(tail, "/models/")
	if !ok {
		return 0, "", "", nil, false
	}
	model, method, hasMethod := strings.Cut(spec, ":")
	if !hasMethod {
		return 0, "", "", nil, false // GET /models/<id>: every kind's
	}
	op, known := googleMethods[method]
	if !known {
		return 0, "", "", &ParseError{Status: http.StatusNotFound,
			Message: "unknown Google method: use :generateContent, :streamGenerateContent or :countTokens"}, true
	}
	if model == "" || strings.ContainsAny(model, "/%") {
		return 0, "", "", &ParseError{Status: http.StatusBadRequest, Message: "malformed model in path"}, true
	}
	return op, model, method, nil, true
}

// suggests: anything under /v1beta/, and any /models/<x>:<method>.
func (googleWire) suggests(tail, version string) bool {
	return version == "/v1beta" || (strings.HasPrefix(tail, "/models/") && strings.Contains(tail, ":"))
}

func (googleWire) upstreamPath(r Route, model string) string {
	return "/models/" + model + ":" + r.Method
}
func (googleWire) streamsByPath(r Route) bool { return r.Method == "streamGenerateContent" }

func (googleWire) serves(kind string) bool                    { return kind == store.KindGoogle }
func (googleWire) nativeTo(kind string) bool                  { return kind == store.KindGoogle }
func (googleWire) setCredential(h http.Header, secret string) { h.Set("X-Goog-Api-Key", secret) }
func (googleWire) keySlots() (string, bool)                   { return "X-Goog-Api-Key", true }
func (googleWire) claims(http.Header) bool                    { return false }

func (googleWire) foldsKeys() bool   { return true }
func (googleWire) modelInPath() bool { return true }

// config is a request's generation config, under either spelling of its
// name (a body with both is refused).
func googleConfig(f *Fields) gjson.Result {
	if f.generationConfig.Exists() {
		return f.generationConfig
	}
	return f.generationConfigSnakeCase
}

// googleGet reads a member of an object under either spelling of its
// name, as Google's parser does.
func googleGet(obj gjson.Result, camel, snake string) gjson.Result {
	if v := obj.Get(camel); v.Exists() {
		return v
	}
	return obj.Get(snake)
}

func (googleWire) outputLimit(f *Fields) int64 {
	return count(googleGet(googleConfig(f), "maxOutputTokens", "max_output_tokens"), false)
}

// extraOutput is the thinking budget, which Google does not count in
// maxOutputTokens; -1 (the model decides) adds nothing.
func (googleWire) extraOutput(f *Fields) int64 {
	return count(googleThinkingBudget(f), true)
}

func googleThinkingBudget(f *Fields) gjson.Result {
	tc := googleGet(googleConfig(f), "thinkingConfig", "thinking_config")
	return googleGet(tc, "thinkingBudget", "thinking_budget")
}

// check: maxOutputTokens must be a whole count, and the thinking budget
// one too or -1 (a token count is not reserved, so not checked).
func (googleWire) check(r Route, f *Fields) *apierr.Error {
	if r.Op == CountTokens {
		return nil
	}
	cfg := googleConfig(f)
	if e := checkCount(googleGet(cfg, "maxOutputTokens", "max_output_tokens"), "generationConfig.maxOutputTokens", false); e != nil {
		return e
	}
	return checkCount(googleThinkingBudget(f), "generationConfig.thinkingConfig.thinkingBudget", true)
}

// rewrite: the path carries the model; a model the body names as well must
// be the path's and is rewritten with it, so that the body cannot ask for a
// model the path check did not see. A token count may wrap a whole
// generate request, with its own model.
func (googleWire) rewrite(r Route, b *Body, f *Fields, requested, upstream string) *apierr.Error {
	if e := googleBodyModel(b, f.model, "model", requested, upstream); e != nil || r.Op != CountTokens {
		return e
	}
	return googleCountRequest(b, f, requested, upstream)
}

// googleBodyModel checks a model that a body names at path: it must be
// the path's model, with or without "models/", and is rewritten to the
// upstream id.
func googleBodyModel(b *Body, m gjson.Result, path, requested, upstream string) *apierr.Error {
	if !m.Exists() {
		return nil
	}
	named, prefixed := strings.CutPrefix(m.Str, "models/")
	if m.Type != gjson.String || (m.Str != requested && (!prefixed || named != requested)) {
		return apierr.BadRequest("%s must be the model of the path (%s)", path, requested)
	}
	if upstream == requested {
		return nil
	}
	prefix := ""
	if prefixed {
		prefix = "models/"
	}
	if !b.setString(m, prefix, upstream) {
		return apierr.BadRequest("the model cannot be rewritten")
	}
	return nil
}

// googleCountRequest checks the model that a token count may name in the
// request it wraps (generateContentRequest.model, either spelling of the
// outer name; both at once are a repeated key, refused before).
func googleCountRequest(b *Body, f *Fields, requested, upstream string) *apierr.Error {
	gcr := f.countRequest
	if !gcr.Exists() {
		return nil
	}
	outer := f.countKey
	if d := f.countDuplicate; d != "" {
		return apierr.BadRequest("the request body repeats the key %q; send each key once", outer+"."+d)
	}
	// Get gives the member's Index in the body.
	return googleBodyModel(b, gcr.Get("model"), outer+".model", requested, upstream)
}

// prepareStream: Google streams always report usage.
func (googleWire) prepareStream(*Body, *Fields) bool { return false }

func (googleWire) errorBody(m map[string]any, status int, _, message string) {
	m["error"] = map[string]any{"code": status, "message": message, "status": googleStatus(status)}
}

func googleStatus(status int) string {
	switch status {
	case 400, 413:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 402:
		return "RESOURCE_EXHAUSTED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 405:
		return "UNIMPLEMENTED"
	case 502, 503:
		return "UNAVAILABLE"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

type googleModel struct {
	Name                       string   `json:"name"`
	BaseModelID                string   `json:"baseModelId"`
	DisplayName                string   `json:"displayName"`
	OutputTokenLimit           int64    `json:"outputTokenLimit,omitempty"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
}

func (googleWire) modelObject(m ModelInfo, _ string) any {
	return googleModel{Name: "models/" + m.ID, BaseModelID: m.ID, DisplayName: m.DisplayName(), OutputTokenLimit: m.MaxOutputTokens,
		SupportedGenerationMethods: GenerationMethods}
}

// modelList is {"models":[…]}.
func (googleWire) modelList(objects []any, _ []ModelInfo) any {
	return struct {
		Models []any `json:"models"`
	}{objects}
}

// Usage.

func (googleWire) arrayStream() bool     { return true }
func (googleWire) dropsUsageChunk() bool { return false }

func (googleWire) event(m *Meter, _ []byte, v gjson.Result) bool {
	googleChunk(m, v, false)
	return false
}

// googleChunk reads one GenerateContentResponse. On streams the usage is
// complete once a candidate finished (or the prompt was blocked) and a
// usageMetadata came with or after it; a body's usage is complete as is.
func googleChunk(m *Meter, v gjson.Result, body bool) {
	hasUsage := false
	var text int64
	v.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "usageMetadata":
			if val.IsObject() {
				googleUsage(m, val)
				hasUsage = true
			}
		case "modelVersion":
			m.setModel(val)
		case "promptFeedback":
			if r := val.Get("blockReason"); r.Type == gjson.String && r.Str != "" {
				m.finished = true
			}
		case "candidates":
			val.ForEach(func(_, c gjson.Result) bool {
				if r := c.Get("finishReason"); r.Type == gjson.String && r.Str != "" {
					m.finished = true
				}
				c.Get("content.parts").ForEach(func(_, part gjson.Result) bool {
					text += textLen(part.Get("text"))
					return true
				})
				return true
			})
		}
		return true
	})
	if body {
		m.textBytes += text
	} else {
		m.addText(text)
	}
	if hasUsage && (body || m.finished) {
		m.complete = true
	}
}

// googleUsage reads a usageMetadata (the last one wins): promptTokenCount
// includes cachedContentTokenCount; candidatesTokenCount excludes
// thoughtsTokenCount; toolUsePromptTokenCount is input.
func googleUsage(m *Meter, u gjson.Result) {
	var prompt, cached, candidates, thoughts, toolUse int64
	u.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "promptTokenCount":
			prompt = num(val)
			m.inputSeen = true
		case "cachedContentTokenCount":
			cached = num(val)
		case "candidatesTokenCount":
			candidates = num(val)
		case "thoughtsTokenCount":
			thoughts = num(val)
		case "toolUsePromptTokenCount":
			toolUse = num(val)
			m.inputSeen = true
		}
		return true
	})
	googleTokens(m, prompt, cached, candidates, thoughts, toolUse)
}

// googleTokens sets a Gemini usage's counts.
func googleTokens(m *Meter, prompt, cached, candidates, thoughts, toolUse int64) {
	var t Tokens
	t.Input, t.CacheRead = split(prompt, cached)
	t.Input += toolUse
	t.Output, t.Reasoning = candidates, thoughts
	m.tok = t
	m.usageSeen = true
}

// The slots of a usageMetadata object read as it passes: what googleUsage
// reads.
const (
	gPrompt = iota
	gCached
	gCandidates
	gThoughts
	gToolUse
)

var googleUsageNode = countsNode(func(m *Meter, c *counts) {
	if c.got(gPrompt) || c.got(gToolUse) {
		m.inputSeen = true
	}
	googleTokens(m, c.v[gPrompt], c.v[gCached], c.v[gCandidates], c.v[gThoughts], c.v[gToolUse])
	m.complete = true
},
	countMember{key: "promptTokenCount", slot: gPrompt},
	countMember{key: "cachedContentTokenCount", slot: gCached},
	countMember{key: "candidatesTokenCount", slot: gCandidates},
	countMember{key: "thoughtsTokenCount", slot: gThoughts},
	countMember{key: "toolUsePromptTokenCount", slot: gToolUse},
)

// bodyReader: a whole answer, one response or a streamed array read
// whole, each response as googleChunk reads it: every usageMetadata (the
// last one wins; the usage of a body is complete as is), every
// modelVersion, and for the estimate the text of each candidate's
// content.parts. What says a candidate finished does not change a body's
// result and is not read.
func (googleWire) bodyReader() *bodyNode { return googleBody }

var googleResponse = []bodyField{
	{key: "usageMetadata", all: true, node: googleUsageNode},
	{key: "modelVersion", all: true, node: modelNode},
	{key: "candidates", all: true, node: &bodyNode{each: &bodyNode{fields: []bodyField{
		{key: "content", inner: "parts", node: &bodyNode{each: &bodyNode{fields: []bodyField{{key: "text", node: textNode}}}}},
	}}}},
}

var googleBody = newBodyNode(&bodyNode{fields: googleResponse, elems: &bodyNode{fields: googleResponse}})

func (googleWire) salvage(m *Meter, _ []byte, w *window, body bool) {
	tail := w.last()
	if hasFinishReason(tail) {
		m.finished = true
	}
	if u, ok := lastObject(tail, `"usageMetadata":`); ok {
		googleUsage(m, u)
		if body || m.finished {
			m.complete = true
		}
	}
}

// Client.

// clientPath: the Google SDK's base URL has no version segment; alt=sse
// asks for SSE instead of a JSON array.
func (googleWire) clientPath(model string) string {
	return "/v1beta/models/" + url.PathEscape(model) + ":streamGenerateContent?alt=sse"
}

var googleSettings = settings{"temperature": "temperature", "top_p": "topP", "topP": "topP", "top_k": "topK",
	"topK": "topK"}.withOutput("maxOutputTokens")

func (googleWire) encode(c *Conversation) map[string]any {
	body := map[string]any{}
	gen := map[string]any{}
	googleSettings.apply(gen, c.Settings)
	names := map[string]string{} // call id → tool name, for results
	var contents []map[string]any
	for _, m := range alternating(systemAsUser(c.Messages)) {
		role := "user"
		if m.Role == RoleAssistant {
			role = "model"
		}
		parts := []map[string]any{}
		for _, p := range m.Parts {
			switch p.Kind {
			case TextPart:
				parts = append(parts, map[string]any{"text": p.Text})
			case ToolCallPart:
				names[p.CallID] = p.Name
				parts = append(parts, map[string]any{"functionCall": map[string]any{"name": p.Name, "args": argsObject(p.Input)}})
			case ToolResultPart:
				name := p.Name
				if name == "" {
					name = names[p.CallID]
				}
				key := "content"
				if p.IsError {
					key = "error"
				}
				parts = append(parts, map[string]any{"functionResponse": map[string]any{"name": name, "response": map[string]any{key: p.Output}}})
			}
		}
		if len(parts) > 0 {
			contents = append(contents, map[string]any{"role": role, "parts": parts})
		}
	}
	body["contents"] = contents
	if c.System != "" {
		body["systemInstruction"] = map[string]any{"parts": []map[string]any{{"text": c.System}}}
	}
	if len(gen) > 0 {
		body["generationConfig"] = gen
	}
	if len(c.Tools) > 0 {
		decls := make([]map[string]any, len(c.Tools))
		for i, t := range c.Tools {
			decls[i] = map[string]any{"name": t.Name, "description": t.Description, "parameters": schemaOf(t)}
		}
		body["tools"] = []map[string]any{{"functionDeclarations": decls}}
	}
	return body
}

var googleFinishes = finishTable{"STOP": FinishStop, "MAX_TOKENS": FinishLength, "SAFETY": FinishContentFilter,
	"RECITATION": FinishContentFilter, "BLOCKLIST": FinishContentFilter, "PROHIBITED_CONTENT": FinishContentFilter,
	"SPII": FinishContentFilter}

// decode: a Google stream has no terminal event; it is whole once a
// candidate finished.
func (googleWire) decode(d *decoder, _ string, ev gjson.Result) {
	if e := ev.Get("error"); e.Exists() {
		d.fail(e.Get("message").String())
		return
	}
	cand := ev.Get("candidates.0")
	for _, part := range cand.Get("content.parts").Array() {
		switch {
		case part.Get("functionCall").Exists():
			c := d.nextCall()
			c.Name = keep(part.Get("functionCall.name").String())
			c.ID = keep(part.Get("functionCall.id").String())
			if c.ID == "" {
				c.ID = "call_" + c.Name
			}
			c.Arguments = keep(part.Get("functionCall.args").Raw)
		case part.Get("thought").Bool():
			d.addReasoning(part.Get("text").String())
		case part.Get("text").Exists():
			d.addText(part.Get("text").String())
		}
	}
	if f := cand.Get("finishReason").String(); f != "" {
		fin := googleFinishes.of(f)
		if fin == FinishStop && len(d.order) > 0 {
			fin = FinishToolCalls
		}
		d.setFinish(googleRawFinish(f, fin), fin)
		d.done = true
	}
}

// googleRawFinish is the finish word recorded for a Google finishReason:
// the common word for the common reasons, else the reason in lower case.
func googleRawFinish(reason string, f Finish) string {
	switch f {
	case FinishStop:
		return "stop"
	case FinishToolCalls:
		return "tool_calls"
	case FinishLength:
		return "length"
	case FinishContentFilter:
		return "content_filter"
	}
	return strings.ToLower(reason)
}

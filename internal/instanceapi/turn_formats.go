package instanceapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"
)

// Provider wire formats a turn can be made in.
const (
	FormatChat      = "chat"      // OpenAI Chat Completions: <base>/chat/completions
	FormatResponses = "responses" // OpenAI Responses: <base>/responses
	FormatAnthropic = "anthropic" // Anthropic Messages: <base>/v1/messages
	FormatGoogle    = "google"    // Google Generative AI: <base>/v1beta/models/<m>:streamGenerateContent
)

func knownFormat(f string) bool {
	switch f {
	case "", FormatChat, FormatResponses, FormatAnthropic, FormatGoogle:
		return true
	}
	return false
}

// KnownProviderFormat reports whether turns can be made in format f.
func KnownProviderFormat(f string) bool { return f != "" && knownFormat(f) }

// Agent option names and their field in each format.
var settingKeys = map[string]map[string]string{
	FormatChat: {"temperature": "temperature", "top_p": "top_p", "topP": "top_p", "maxTokens": "max_tokens",
		"max_tokens": "max_tokens", "maxOutputTokens": "max_tokens", "seed": "seed", "stop": "stop",
		"presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
		"reasoningEffort": "reasoning_effort", "reasoning_effort": "reasoning_effort"},
	FormatResponses: {"temperature": "temperature", "top_p": "top_p", "topP": "top_p", "maxTokens": "max_output_tokens",
		"max_tokens": "max_output_tokens", "maxOutputTokens": "max_output_tokens"},
	FormatAnthropic: {"temperature": "temperature", "top_p": "top_p", "topP": "top_p", "top_k": "top_k", "topK": "top_k",
		"maxTokens": "max_tokens", "max_tokens": "max_tokens", "maxOutputTokens": "max_tokens"},
	FormatGoogle: {"temperature": "temperature", "top_p": "topP", "topP": "topP", "top_k": "topK", "topK": "topK",
		"maxTokens": "maxOutputTokens", "max_tokens": "maxOutputTokens", "maxOutputTokens": "maxOutputTokens"},
}

// anthropicDefaultMaxTokens is sent when the agent sets no output limit
// (the Messages API requires one).
const anthropicDefaultMaxTokens = 8192

// convo is the conversation in a neutral form: the system text and
// alternating-or-not user/assistant turns.
type convo struct {
	system string
	turns  []map[string]any // role, content (string)
}

func neutral(system string, msgs []storedMessage) convo {
	c := convo{system: system}
	for _, m := range chatMessages("", msgs) {
		if m["role"] == "system" {
			// Model-facing updates mid-conversation travel as user text in
			// the formats without mid-conversation system messages.
			c.turns = append(c.turns, map[string]any{"role": "user", "content": "[system] " + m["content"].(string), "system": true})
			continue
		}
		c.turns = append(c.turns, m)
	}
	return c
}

// merged joins consecutive turns of the same role (Anthropic and Google
// want alternation).
func (c convo) merged() []map[string]any {
	var out []map[string]any
	for _, t := range c.turns {
		if n := len(out); n > 0 && out[n-1]["role"] == t["role"] {
			out[n-1] = map[string]any{"role": t["role"], "content": out[n-1]["content"].(string) + "\n\n" + t["content"].(string)}
			continue
		}
		out = append(out, map[string]any{"role": t["role"], "content": t["content"]})
	}
	return out
}

// buildRequest makes the streaming request of a turn in prov's format.
func buildRequest(ctx context.Context, prov ProviderConfig, agent *AgentInfo, model string, msgs []storedMessage) (*http.Request, error) {
	format := prov.Format
	if format == "" {
		format = FormatChat
	}
	body := map[string]any{}
	gen := map[string]any{} // Google's generationConfig
	for k, v := range agent.Request.Settings {
		if f, ok := settingKeys[format][k]; ok {
			if format == FormatGoogle {
				gen[f] = v
			} else {
				body[f] = v
			}
		}
	}
	base := strings.TrimRight(prov.BaseURL, "/")
	var target string
	hdr := http.Header{}
	switch format {
	case FormatChat:
		body["model"] = model
		body["messages"] = chatMessages(agent.System, msgs)
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
		target = base + "/chat/completions"
		hdr.Set("Authorization", "Bearer "+prov.APIKey)
	case FormatResponses:
		c := neutral("", msgs)
		input := make([]map[string]any, 0, len(c.turns))
		for _, t := range c.turns {
			input = append(input, map[string]any{"role": t["role"], "content": t["content"]})
		}
		body["model"] = model
		if agent.System != "" {
			body["instructions"] = agent.System
		}
		body["input"] = input
		body["stream"] = true
		body["store"] = false
		target = base + "/responses"
		hdr.Set("Authorization", "Bearer "+prov.APIKey)
	case FormatAnthropic:
		c := neutral(agent.System, msgs)
		body["model"] = model
		if c.system != "" {
			body["system"] = c.system
		}
		body["messages"] = c.merged()
		body["stream"] = true
		if _, ok := body["max_tokens"]; !ok {
			body["max_tokens"] = anthropicDefaultMaxTokens
		}
		target = base + "/v1/messages"
		hdr.Set("x-api-key", prov.APIKey)
		hdr.Set("anthropic-version", "2023-06-01")
	case FormatGoogle:
		c := neutral(agent.System, msgs)
		var contents []map[string]any
		for _, t := range c.merged() {
			role := "user"
			if t["role"] == "assistant" {
				role = "model"
			}
			contents = append(contents, map[string]any{"role": role, "parts": []map[string]any{{"text": t["content"]}}})
		}
		body["contents"] = contents
		if c.system != "" {
			body["systemInstruction"] = map[string]any{"parts": []map[string]any{{"text": c.system}}}
		}
		if len(gen) > 0 {
			body["generationConfig"] = gen
		}
		target = base + "/v1beta/models/" + url.PathEscape(model) + ":streamGenerateContent?alt=sse"
		hdr.Set("x-goog-api-key", prov.APIKey)
	}
	for k, v := range agent.Request.Body {
		body[k] = v
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", target, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	for k, v := range agent.Request.Headers {
		req.Header.Set(k, v)
	}
	for k, v := range hdr {
		if prov.APIKey != "" {
			req.Header[k] = v
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	return req, nil
}

// streamTurn sends a turn and folds its stream into st; it returns the
// structured error of a failed turn (nil when interrupted: the caller
// sees ctx).
func streamTurn(ctx context.Context, prov ProviderConfig, agent *AgentInfo, model string, msgs []storedMessage, st *turnState, delta func(field, d string)) *StructuredError {
	req, err := buildRequest(ctx, prov, agent, model, msgs)
	if err != nil {
		return &StructuredError{Type: "ProviderConfigError", Message: "Cannot build the provider request: bad base URL or settings"}
	}
	client := prov.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		// The error text carries the URL only, never the key.
		return &StructuredError{Type: "ProviderConnectionError", Message: "Cannot reach the provider: " + err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		m := gjson.GetBytes(b, "error.message").String()
		if m == "" {
			m = gjson.GetBytes(b, "message").String()
		}
		if m == "" {
			m = strings.TrimSpace(string(b))
			if len(m) > 500 {
				m = m[:500]
			}
		}
		if m == "" {
			m = http.StatusText(resp.StatusCode)
		}
		return &StructuredError{Type: "APIError", Message: fmt.Sprintf("Provider answered %d: %s", resp.StatusCode, m), Status: resp.StatusCode}
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
		// Not a provider's stream: most often a base URL that reaches some
		// other server (a `connection` whose llm_gateway is not on the
		// instance's own site).
		if ct == "" {
			ct = "no content type"
		}
		return &StructuredError{Type: "ProviderStreamError", Message: fmt.Sprintf("The provider answered %d with %s, not an event stream: check the provider's base_url (a `connection` needs llm_gateway on the instance's own site)", resp.StatusCode, ct)}
	}
	format := prov.Format
	if format == "" {
		format = FormatChat
	}
	handle := map[string]func(event string, ev gjson.Result, st *turnState, delta func(string, string)) (bool, *StructuredError){
		FormatChat: chatEvent, FormatResponses: responsesEvent, FormatAnthropic: anthropicEvent, FormatGoogle: googleEvent,
	}[format]
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	done, event := false, ""
	for !done && sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "event:") {
			event = strings.TrimSpace(line[6:])
			continue
		}
		if line == "" {
			event = ""
			continue
		}
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(line[5:])
		if data == "[DONE]" {
			done = true
			break
		}
		if !gjson.Valid(data) {
			continue
		}
		var serr *StructuredError
		done, serr = handle(event, gjson.Parse(data), st, delta)
		if serr != nil {
			return serr
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if format == FormatGoogle && sc.Err() == nil && st.finish != "" {
		done = true // Google's stream has no terminal event: it ends after a finishReason
	}
	if err := sc.Err(); err != nil || !done {
		msg := "The provider's stream ended before it was complete"
		if err != nil {
			msg += ": " + err.Error()
		}
		return &StructuredError{Type: "ProviderStreamError", Message: msg}
	}
	return nil
}

func (st *turnState) tool(i int) *toolCall {
	c := st.tools[i]
	if c == nil {
		c = &toolCall{}
		st.tools[i] = c
	}
	return c
}

func chatEvent(_ string, ev gjson.Result, st *turnState, delta func(string, string)) (bool, *StructuredError) {
	if e := ev.Get("error"); e.Exists() {
		return false, &StructuredError{Type: "APIError", Message: "Provider stream error: " + e.Get("message").String()}
	}
	ch := ev.Get("choices.0")
	if d := ch.Get("delta.content").String(); d != "" {
		st.text.WriteString(d)
		delta("text", d)
	}
	for _, key := range []string{"delta.reasoning_content", "delta.reasoning"} {
		if d := ch.Get(key); d.Type == gjson.String && d.String() != "" {
			st.reasoning.WriteString(d.String())
			delta("reasoning", d.String())
		}
	}
	for _, tc := range ch.Get("delta.tool_calls").Array() {
		c := st.tool(int(tc.Get("index").Int()))
		if v := tc.Get("id").String(); v != "" {
			c.id = v
		}
		if v := tc.Get("function.name").String(); v != "" {
			c.name = v
		}
		c.args.WriteString(tc.Get("function.arguments").String())
	}
	if f := ch.Get("finish_reason").String(); f != "" {
		st.finish = f
	}
	if u := ev.Get("usage"); u.IsObject() {
		prompt, completion := u.Get("prompt_tokens").Float(), u.Get("completion_tokens").Float()
		cached := u.Get("prompt_tokens_details.cached_tokens").Float()
		reasoning := u.Get("completion_tokens_details.reasoning_tokens").Float()
		tu := &TokenUsage{Input: prompt - cached, Output: completion - reasoning, Reasoning: reasoning}
		tu.Cache.Read = cached
		st.usage = tu
	}
	return false, nil
}

func responsesEvent(event string, ev gjson.Result, st *turnState, delta func(string, string)) (bool, *StructuredError) {
	typ := ev.Get("type").String()
	if typ == "" {
		typ = event
	}
	switch typ {
	case "response.output_text.delta":
		d := ev.Get("delta").String()
		st.text.WriteString(d)
		delta("text", d)
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		d := ev.Get("delta").String()
		st.reasoning.WriteString(d)
		delta("reasoning", d)
	case "response.output_item.done":
		if it := ev.Get("item"); it.Get("type").String() == "function_call" {
			c := st.tool(len(st.tools))
			c.id, c.name = it.Get("call_id").String(), it.Get("name").String()
			c.args.WriteString(it.Get("arguments").String())
		}
	case "response.completed", "response.incomplete":
		r := ev.Get("response")
		st.finish = "stop"
		if typ == "response.incomplete" {
			st.finish = r.Get("incomplete_details.reason").String()
			if st.finish == "max_output_tokens" {
				st.finish = "length"
			}
		}
		if len(st.tools) > 0 && st.finish == "stop" {
			st.finish = "tool_calls"
		}
		if u := r.Get("usage"); u.IsObject() {
			cached := u.Get("input_tokens_details.cached_tokens").Float()
			reasoning := u.Get("output_tokens_details.reasoning_tokens").Float()
			tu := &TokenUsage{Input: u.Get("input_tokens").Float() - cached, Output: u.Get("output_tokens").Float() - reasoning, Reasoning: reasoning}
			tu.Cache.Read = cached
			st.usage = tu
		}
		return true, nil
	case "response.failed":
		return false, &StructuredError{Type: "APIError", Message: "Provider stream error: " + ev.Get("response.error.message").String()}
	case "error":
		return false, &StructuredError{Type: "APIError", Message: "Provider stream error: " + ev.Get("message").String()}
	}
	return false, nil
}

func anthropicEvent(event string, ev gjson.Result, st *turnState, delta func(string, string)) (bool, *StructuredError) {
	typ := ev.Get("type").String()
	if typ == "" {
		typ = event
	}
	switch typ {
	case "message_start":
		u := ev.Get("message.usage")
		tu := &TokenUsage{Input: u.Get("input_tokens").Float(), Output: u.Get("output_tokens").Float()}
		tu.Cache.Read, tu.Cache.Write = u.Get("cache_read_input_tokens").Float(), u.Get("cache_creation_input_tokens").Float()
		st.usage = tu
	case "content_block_start":
		if b := ev.Get("content_block"); b.Get("type").String() == "tool_use" {
			c := st.tool(int(ev.Get("index").Int()))
			c.id, c.name = b.Get("id").String(), b.Get("name").String()
		}
	case "content_block_delta":
		d := ev.Get("delta")
		switch d.Get("type").String() {
		case "text_delta":
			st.text.WriteString(d.Get("text").String())
			delta("text", d.Get("text").String())
		case "thinking_delta":
			st.reasoning.WriteString(d.Get("thinking").String())
			delta("reasoning", d.Get("thinking").String())
		case "input_json_delta":
			st.tool(int(ev.Get("index").Int())).args.WriteString(d.Get("partial_json").String())
		}
	case "message_delta":
		if f := ev.Get("delta.stop_reason").String(); f != "" {
			st.finish = f
		}
		if o := ev.Get("usage.output_tokens"); o.Exists() && st.usage != nil {
			st.usage.Output = o.Float() // the final count, not a sum
		}
	case "message_stop":
		return true, nil
	case "error":
		return false, &StructuredError{Type: "APIError", Message: "Provider stream error: " + ev.Get("error.message").String()}
	}
	return false, nil
}

func googleEvent(_ string, ev gjson.Result, st *turnState, delta func(string, string)) (bool, *StructuredError) {
	if e := ev.Get("error"); e.Exists() {
		return false, &StructuredError{Type: "APIError", Message: "Provider stream error: " + e.Get("message").String()}
	}
	cand := ev.Get("candidates.0")
	for _, part := range cand.Get("content.parts").Array() {
		switch {
		case part.Get("functionCall").Exists():
			c := st.tool(len(st.tools))
			c.name = part.Get("functionCall.name").String()
			c.id = "call_" + c.name
			c.args.WriteString(part.Get("functionCall.args").Raw)
		case part.Get("thought").Bool():
			st.reasoning.WriteString(part.Get("text").String())
			delta("reasoning", part.Get("text").String())
		case part.Get("text").Exists():
			st.text.WriteString(part.Get("text").String())
			delta("text", part.Get("text").String())
		}
	}
	if f := cand.Get("finishReason").String(); f != "" {
		switch f {
		case "STOP":
			st.finish = "stop"
			if len(st.tools) > 0 {
				st.finish = "tool_calls"
			}
		case "MAX_TOKENS":
			st.finish = "length"
		case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII":
			st.finish = "content_filter"
		default:
			st.finish = strings.ToLower(f)
		}
	}
	if u := ev.Get("usageMetadata"); u.IsObject() { // the last one counts, not the sum
		cached := u.Get("cachedContentTokenCount").Float()
		tu := &TokenUsage{Input: u.Get("promptTokenCount").Float() - cached, Output: u.Get("candidatesTokenCount").Float(),
			Reasoning: u.Get("thoughtsTokenCount").Float()}
		tu.Cache.Read = cached
		st.usage = tu
	}
	return false, nil
}

package usage

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/modules/gateway/formats"
)

// maxCount bounds a reported token count, so sums cannot overflow.
const maxCount = 1 << 50

// num reads a token count: a JSON number, clamped to [0, maxCount].
func num(v gjson.Result) int64 {
	if v.Type != gjson.Number {
		return 0
	}
	n := v.Int()
	if n < 0 {
		return 0
	}
	return min(n, maxCount)
}

// split returns total−part and part, with part clamped to [0, total].
func split(total, part int64) (rest, p int64) {
	p = min(max(part, 0), total)
	return total - p, p
}

// str views b as a string without copying; the string must not outlive b's
// contents (gjson results taken from it are used and dropped at once; the
// model is cloned).
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func (m *Meter) setModel(v gjson.Result) {
	if v.Type == gjson.String && v.Str != "" && v.Str != m.model {
		m.model = strings.Clone(v.Str)
	}
}

func (m *Meter) addText(n int64) {
	if n > 0 {
		m.deltas++
		m.textBytes += n
	}
}

func textLen(v gjson.Result) int64 {
	if v.Type == gjson.String {
		return int64(len(v.Str))
	}
	return 0
}

// onEvent reads one stream event's data (an SSE event or a JSON-array
// element). It reports whether the event is a Chat usage-only chunk.
func (m *Meter) onEvent(name, data []byte) (usageOnly bool) {
	js := str(data)
	if !gjson.Valid(js) {
		return false
	}
	v := gjson.Parse(js)
	if !v.IsObject() {
		return false
	}
	switch m.opts.Format {
	case formats.Chat:
		return m.chatChunk(v)
	case formats.Responses:
		m.responsesEvent(eventType(v, name), v)
	case formats.Anthropic:
		m.anthropicEvent(eventType(v, name), v)
	case formats.Google:
		m.googleChunk(v, false)
	}
	return false
}

// eventType is the data's type field, or else the SSE event name.
func eventType(v gjson.Result, name []byte) string {
	if t := v.Get("type"); t.Type == gjson.String {
		return t.Str
	}
	return str(name)
}

// Chat Completions.

func (m *Meter) chatChunk(v gjson.Result) (usageOnly bool) {
	choices := -1
	hasUsage := false
	var text int64
	v.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "model":
			m.setModel(val)
		case "usage":
			if val.IsObject() {
				m.chatUsage(val)
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
func (m *Meter) chatUsage(u gjson.Result) {
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
	var t Tokens
	t.Input, t.CacheRead = split(prompt, cached)
	t.Output, t.Reasoning = split(completion, reasoning)
	m.tok = t
	m.inputSeen, m.usageSeen, m.complete = true, true, true
}

func (m *Meter) chatBody(v gjson.Result) {
	m.setModel(v.Get("model"))
	if u := v.Get("usage"); u.IsObject() {
		m.chatUsage(u)
	}
	var text int64
	v.Get("choices").ForEach(func(_, ch gjson.Result) bool {
		text += chatDeltaText(ch.Get("message"))
		return true
	})
	m.textBytes += text
}

// Responses.

func isResponsesFinal(typ string) bool {
	return typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed"
}

func (m *Meter) responsesEvent(typ string, v gjson.Result) {
	switch {
	case isResponsesFinal(typ):
		r := v.Get("response")
		m.setModel(r.Get("model"))
		if u := r.Get("usage"); u.IsObject() {
			m.responsesUsage(u)
		}
	case typ == "response.created" || typ == "response.in_progress" || typ == "response.queued":
		m.setModel(v.Get("response.model"))
	case typ == "response.audio.delta": // base64 audio, not text
	case strings.HasSuffix(typ, ".delta"):
		m.addText(textLen(v.Get("delta")))
	}
}

// responsesUsage reads a Responses usage object: input_tokens includes the
// cached tokens, output_tokens the reasoning tokens.
func (m *Meter) responsesUsage(u gjson.Result) {
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
	var t Tokens
	t.Input, t.CacheRead = split(input, cached)
	t.Output, t.Reasoning = split(output, reasoning)
	m.tok = t
	m.inputSeen, m.usageSeen, m.complete = true, true, true
}

func (m *Meter) responsesBody(v gjson.Result) {
	m.setModel(v.Get("model"))
	if u := v.Get("usage"); u.IsObject() {
		m.responsesUsage(u)
	}
	var text int64
	v.Get("output").ForEach(func(_, item gjson.Result) bool {
		text += textLen(item.Get("arguments"))
		item.Get("content").ForEach(func(_, c gjson.Result) bool {
			text += textLen(c.Get("text"))
			return true
		})
		item.Get("summary").ForEach(func(_, c gjson.Result) bool {
			text += textLen(c.Get("text"))
			return true
		})
		return true
	})
	m.textBytes += text
}

// Anthropic Messages.

func (m *Meter) anthropicEvent(typ string, v gjson.Result) {
	switch typ {
	case "message_start":
		msg := v.Get("message")
		m.setModel(msg.Get("model"))
		if u := msg.Get("usage"); u.IsObject() {
			m.anthropicUsage(u, false)
		}
	case "message_delta":
		if u := v.Get("usage"); u.IsObject() {
			m.anthropicUsage(u, true)
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
}

// anthropicUsage reads an Anthropic usage object. Each count present
// replaces the one known (output_tokens in message_delta is cumulative);
// input_tokens does not include the cache counts. final is set for the
// message_delta usage and the non-stream body.
func (m *Meter) anthropicUsage(u gjson.Result, final bool) {
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

func (m *Meter) anthropicBody(v gjson.Result) {
	m.setModel(v.Get("model"))
	if u := v.Get("usage"); u.IsObject() {
		m.anthropicUsage(u, true)
	}
	var text int64
	v.Get("content").ForEach(func(_, c gjson.Result) bool {
		text += textLen(c.Get("text")) + textLen(c.Get("thinking"))
		if in := c.Get("input"); in.Exists() {
			text += int64(len(in.Raw))
		}
		return true
	})
	m.textBytes += text
}

// Google.

// googleChunk reads one GenerateContentResponse. On streams the usage is
// complete once a candidate finished (or the prompt was blocked) and a
// usageMetadata came with or after it; a body's usage is complete as is.
func (m *Meter) googleChunk(v gjson.Result, body bool) {
	hasUsage := false
	var text int64
	v.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "usageMetadata":
			if val.IsObject() {
				m.googleUsage(val)
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
func (m *Meter) googleUsage(u gjson.Result) {
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
	var t Tokens
	t.Input, t.CacheRead = split(prompt, cached)
	t.Input += toolUse
	t.Output, t.Reasoning = candidates, thoughts
	m.tok = t
	m.usageSeen = true
}

// Non-stream bodies.

func (m *Meter) endBody() {
	if m.bodyOver {
		m.salvage(nil, &m.win, true)
		if !m.usageSeen {
			m.textBytes += m.bodyBytes
		}
		m.win = window{}
		return
	}
	js := str(m.body)
	if gjson.Valid(js) {
		v := gjson.Parse(js)
		switch {
		case m.opts.Format == formats.Google && v.IsArray():
			// A streamed array read as a whole.
			v.ForEach(func(_, el gjson.Result) bool {
				if el.IsObject() {
					m.googleChunk(el, true)
				}
				return true
			})
		case !v.IsObject():
		case m.opts.Format == formats.Chat:
			m.chatBody(v)
		case m.opts.Format == formats.Responses:
			m.responsesBody(v)
		case m.opts.Format == formats.Anthropic:
			m.anthropicBody(v)
		case m.opts.Format == formats.Google:
			m.googleChunk(v, true)
		}
	}
	m.body = nil
}

// Events over the cap.

// salvage reads the usage of an event or body too big to parse from its
// first and last bytes: the usage object comes after the content in every
// format, so the last "usage" (or "usageMetadata") object in the tail is
// the one. An unescaped `"usage":` can only be an object key in valid JSON.
func (m *Meter) salvage(name []byte, w *window, body bool) {
	tail := w.last()
	switch m.opts.Format {
	case formats.Chat:
		if u, ok := lastObject(tail, `"usage":`); ok {
			m.chatUsage(u)
		}
	case formats.Responses:
		typ := str(name)
		if t := gjson.GetBytes(w.head, "type"); t.Type == gjson.String {
			typ = t.Str
		}
		if body || isResponsesFinal(typ) {
			if u, ok := lastObject(tail, `"usage":`); ok {
				m.responsesUsage(u)
			}
		}
	case formats.Anthropic:
		typ := str(name)
		if t := gjson.GetBytes(w.head, "type"); t.Type == gjson.String {
			typ = t.Str
		}
		if body || typ == "message_start" || typ == "message_delta" {
			if u, ok := lastObject(tail, `"usage":`); ok {
				m.anthropicUsage(u, body || typ == "message_delta")
			}
		}
	case formats.Google:
		if hasFinishReason(tail) {
			m.finished = true
		}
		if u, ok := lastObject(tail, `"usageMetadata":`); ok {
			m.googleUsage(u)
			if body || m.finished {
				m.complete = true
			}
		}
	}
}

// hasFinishReason reports whether b has a non-empty "finishReason" string.
func hasFinishReason(b []byte) bool {
	key := []byte(`"finishReason":`)
	for {
		i := bytes.Index(b, key)
		if i < 0 {
			return false
		}
		b = bytes.TrimLeft(b[i+len(key):], " \t\r\n")
		if len(b) > 1 && b[0] == '"' && b[1] != '"' {
			return true
		}
	}
}

// lastObject finds the last occurrence of key in b whose value is a whole
// JSON object. It tries a few occurrences only, so a hostile tail costs
// linear time.
func lastObject(b []byte, key string) (gjson.Result, bool) {
	for end, tries := len(b), 0; end > 0 && tries < 8; tries++ {
		i := bytes.LastIndex(b[:end], []byte(key))
		if i < 0 {
			break
		}
		end = i
		rest := bytes.TrimLeft(b[i+len(key):], " \t\r\n")
		if len(rest) == 0 || rest[0] != '{' {
			continue
		}
		if n := objectEnd(rest); n > 0 {
			obj := string(rest[:n]) // copied: the window is reused
			if gjson.Valid(obj) {
				return gjson.Parse(obj), true
			}
		}
	}
	return gjson.Result{}, false
}

// objectEnd returns the length of the JSON object at the start of b, or 0.
func objectEnd(b []byte) int {
	depth, inStr, esc := 0, false, false
	for i, c := range b {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return 0
}

// window keeps the first and the last bytes of something too big to keep.
type window struct {
	head  []byte
	tail  []byte
	total int64
}

const (
	windowHead = 512
	windowTail = 64 << 10
)

func (w *window) reset() {
	w.head, w.total = w.head[:0], 0
	w.tail = w.tail[:0]
}

func (w *window) write(p []byte) {
	w.total += int64(len(p))
	if len(w.head) < windowHead {
		w.head = append(w.head, p[:min(windowHead-len(w.head), len(p))]...)
	}
	if len(p) >= windowTail {
		w.tail = append(w.tail[:0], p[len(p)-windowTail:]...)
		return
	}
	if len(w.tail)+len(p) > 2*windowTail {
		keep := w.tail[len(w.tail)-(windowTail-len(p)):]
		n := copy(w.tail, keep)
		w.tail = w.tail[:n]
	}
	w.tail = append(w.tail, p...)
}

func (w *window) last() []byte {
	if len(w.tail) > windowTail {
		return w.tail[len(w.tail)-windowTail:]
	}
	return w.tail
}

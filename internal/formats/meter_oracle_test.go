package formats

// The oracle of the body reader: a non-stream body as it was read before
// bodyScan, kept whole (up to the cap) and parsed at its end with the
// format's gjson reader. TestBodyOracle and FuzzBodyMeter check that the
// meter reads every body, in any pieces, exactly as this does.

import (
	"io"

	"github.com/tidwall/gjson"
)

// oracleBody is the MeterResult of a non-stream body read whole, and the
// answer text it counted (which the result shows only rounded).
func oracleBody(in []byte, opts MeterOptions) bodyRead {
	m := NewMeter(io.Discard, opts)
	if m.mode != modeBody {
		panic("oracleBody: not a body")
	}
	m.bodyBytes = int64(len(in))
	if len(in) > m.maxBody {
		m.win.write(in)
		m.salvage(nil, &m.win, true)
		if !m.usageSeen {
			m.textBytes += m.bodyBytes
		}
	} else if js := str(in); gjson.Valid(js) {
		oracleBodies[m.opts.Format.w().name()](m, gjson.Parse(js))
	}
	m.closed = true
	return bodyRead{m.result(), m.textBytes}
}

// bodyRead is what a meter read of a body.
type bodyRead struct {
	MeterResult
	text int64
}

var oracleBodies = map[string]func(*Meter, gjson.Result){
	"chat": oracleChatBody, "responses": oracleResponsesBody, "anthropic": oracleAnthropicBody, "google": oracleGoogleBody,
}

// The formats' body readers as they were.

func oracleChatBody(m *Meter, v gjson.Result) {
	if !v.IsObject() {
		return
	}
	// One pass over the answer's members (the first of a repeated name
	// counts, as with Get).
	var text int64
	var model, usage, choices bool
	v.ForEach(func(k, val gjson.Result) bool {
		switch {
		case k.Str == "model" && !model:
			model = true
			m.setModel(val)
		case k.Str == "usage" && !usage:
			usage = true
			if val.IsObject() {
				chatUsage(m, val)
			}
		case k.Str == "choices" && !choices:
			choices = true
			val.ForEach(func(_, ch gjson.Result) bool {
				text += chatDeltaText(ch.Get("message"))
				return true
			})
		}
		return true
	})
	m.textBytes += text
}

func oracleResponsesBody(m *Meter, v gjson.Result) {
	if !v.IsObject() {
		return
	}
	m.setModel(v.Get("model"))
	if u := v.Get("usage"); u.IsObject() {
		responsesUsage(m, u)
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

func oracleAnthropicBody(m *Meter, v gjson.Result) {
	if !v.IsObject() {
		return
	}
	m.setModel(v.Get("model"))
	if u := v.Get("usage"); u.IsObject() {
		anthropicUsage(m, u, true)
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

// oracleGoogleBody reads a whole answer: one response, or a streamed array read whole.
func oracleGoogleBody(m *Meter, v gjson.Result) {
	switch {
	case v.IsArray():
		v.ForEach(func(_, el gjson.Result) bool {
			if el.IsObject() {
				googleChunk(m, el, true)
			}
			return true
		})
	case v.IsObject():
		googleChunk(m, v, true)
	}
}

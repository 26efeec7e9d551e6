package formats

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
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
// element). It reports whether the event carries usage only (an event
// MeterOptions.DropUsageChunk hides).
func (m *Meter) onEvent(name, data []byte) (usageOnly bool) {
	js := str(data)
	if !gjson.Valid(js) {
		return false
	}
	v := gjson.Parse(js)
	if !v.IsObject() {
		return false
	}
	usageOnly = m.wire.event(m, name, v)
	if m.dec != nil && m.dec.err == nil {
		m.wire.decode(m.dec, string(name), v)
	}
	return usageOnly
}

// eventType is the data's type field, or else the SSE event name.
func eventType(v gjson.Result, name []byte) string {
	if t := v.Get("type"); t.Type == gjson.String {
		return t.Str
	}
	return str(name)
}

// headType is the type of an event over the cap, from its first bytes,
// or else its SSE event name.
func headType(w *window, name []byte) string {
	if t := gjson.GetBytes(w.head, "type"); t.Type == gjson.String {
		return t.Str
	}
	return str(name)
}

// Non-stream bodies.

// modelNode reads a reported model (a string); textNode counts a string
// as answer text.
var (
	modelNode = &bodyNode{gate: '"', read: (*Meter).setModel}
	textNode  = &bodyNode{text: true}
)

// writeBody reads the next bytes of a non-stream body. A body over the cap
// is not read: its ends are kept for salvage, from the last windowTail
// bytes under the cap on (the only ones its window can end with), so that
// a body under the cap is never copied.
func (m *Meter) writeBody(p []byte) {
	from := m.bodyBytes
	m.bodyBytes += int64(len(p))
	if m.bodyOver {
		m.win.write(p)
		return
	}
	if keep := int64(m.maxBody) + 1 - windowTail; m.bodyBytes > keep {
		m.win.write(p[max(keep-from, 0):])
	}
	if m.bodyBytes > int64(m.maxBody) {
		m.bodyOver = true
		m.unread()
		return
	}
	m.scan.write(m, p)
}

// unread drops what the body reader took from a body that is not read
// after all (over the cap, or not valid JSON).
func (m *Meter) unread() {
	m.tok, m.model = Tokens{}, ""
	m.inputSeen, m.usageSeen, m.complete, m.finished = false, false, false, false
	m.scan.reset(nil)
}

func (m *Meter) endBody() {
	if m.bodyOver {
		m.salvage(nil, &m.win, true)
		if !m.usageSeen {
			m.textBytes += m.bodyBytes
		}
		m.win = window{}
		return
	}
	if m.scan.finish(m) {
		m.textBytes += m.scan.text
	} else {
		m.unread()
	}
}

// salvage reads the usage of an event or body too big to parse from its
// first and last bytes: the usage object comes after the content in every
// format, so the last usage object in the tail is the one.
func (m *Meter) salvage(name []byte, w *window, body bool) { m.wire.salvage(m, name, w, body) }

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

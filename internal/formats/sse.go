package formats

import "bytes"

// sseState is the state of an SSE stream between writes.
type sseState struct {
	line []byte // the current line's bytes so far, without its '\n'
	skip bool   // the current line is over the cap: skipped to its end
	// rawLine counts the raw bytes of the current line seen so far.
	rawLine int

	data    []byte // the current event's data
	hasData bool
	name    []byte // the current event's event: field
	// over is set when the current event went over the cap: it is not
	// parsed, win keeps the ends of its data, and dataLine is set while a
	// data line too long to keep goes on.
	over     bool
	win      window
	dataLine bool

	// With DropUsageChunk:
	hold   []byte // raw bytes of the current event, held back
	pass   bool   // the current event went over the cap: forwarded as it comes
	direct bool   // the current line is a comment between events: forwarded as it comes
}

const maxEventName = 256

// scanSSE reads p, splitting it into lines. With DropUsageChunk it also
// forwards the raw bytes, event by event.
func (m *Meter) scanSSE(p []byte) {
	s := &m.sse
	for len(p) > 0 {
		var seg []byte
		i := bytes.IndexByte(p, '\n')
		done := i >= 0
		if done {
			seg, p = p[:i+1], p[i+1:]
		} else {
			seg, p = p, nil
		}
		if m.drop {
			m.rawSSE(seg, done)
		}
		if s.skip {
			if done {
				s.skip = false
			}
			continue
		}
		if s.dataLine {
			if done {
				s.win.write(trimCR(seg[:len(seg)-1]))
				s.dataLine = false
			} else {
				s.win.write(seg)
			}
			continue
		}
		if !done {
			if len(s.line)+len(seg) > m.maxEvent {
				m.longLine(seg)
				continue
			}
			s.line = append(s.line, seg...)
			continue
		}
		content := seg[:len(seg)-1]
		if len(s.line) > 0 {
			if len(s.line)+len(content) > m.maxEvent {
				m.longLine(trimCR(content))
				s.skip, s.dataLine = false, false
				continue
			}
			s.line = append(s.line, content...)
			content = s.line
		}
		m.sseLine(trimCR(content), false)
		s.line = s.line[:0]
	}
}

// longLine handles a line grown over the cap, whose next bytes are rest: a
// data line goes on into the event's window, any other line is skipped.
func (m *Meter) longLine(rest []byte) {
	s := &m.sse
	if k := min(len("data: ")-len(s.line), len(rest)); k > 0 {
		s.line = append(s.line, rest[:k]...)
		rest = rest[k:]
	}
	if v, ok := bytes.CutPrefix(s.line, []byte("data:")); ok {
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
		m.overEvent()
		m.overData(v)
		s.win.write(rest)
		s.dataLine = true
	} else {
		s.skip = true
	}
	s.line = s.line[:0]
}

func trimCR(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\r' {
		return b[:n-1]
	}
	return b
}

// overEvent marks the current event as too big to parse; its data so far
// goes to the window.
func (m *Meter) overEvent() {
	s := &m.sse
	if s.over {
		return
	}
	s.over = true
	s.win.reset()
	s.win.write(s.data)
	s.data = s.data[:0]
}

// overData adds a data line to an event over the cap.
func (m *Meter) overData(v []byte) {
	s := &m.sse
	if s.hasData {
		s.win.write([]byte{'\n'})
	}
	s.win.write(v)
	s.hasData = true
}

// rawSSE forwards or holds back one segment of a line (DropUsageChunk).
func (m *Meter) rawSSE(seg []byte, done bool) {
	s := &m.sse
	start := s.rawLine == 0
	if done {
		s.rawLine = 0
	} else {
		s.rawLine += len(seg)
	}
	if start && !s.pass && len(s.hold) == 0 {
		// Nothing of this event is held: comments and blank lines go
		// straight through, so keep-alives are not delayed.
		if seg[0] == ':' {
			s.direct = true
		} else if done && (len(seg) == 1 || (len(seg) == 2 && seg[0] == '\r')) {
			m.forward(seg)
			return
		}
	}
	if s.direct || s.pass {
		m.forward(seg)
		if done {
			s.direct = false
		}
		return
	}
	if len(s.hold)+len(seg) > m.maxEvent {
		// Too big to hold: release it and let the rest of the event pass.
		m.forward(s.hold)
		m.forward(seg)
		s.hold = s.hold[:0]
		s.pass = true
		m.overEvent()
		return
	}
	s.hold = append(s.hold, seg...)
}

// sseLine handles one line, without its line ending.
func (m *Meter) sseLine(line []byte, eof bool) {
	s := &m.sse
	if len(line) == 0 {
		m.dispatch(eof)
		return
	}
	if line[0] == ':' {
		return // comment
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		n := len(value)
		if s.hasData {
			n++
		}
		if !s.over && len(s.data)+n > m.maxEvent {
			m.overEvent()
		}
		if s.over {
			m.overData(value)
			return
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	case "event":
		if len(value) > maxEventName {
			value = value[:maxEventName]
		}
		s.name = append(s.name[:0], value...)
	}
}

var doneData = []byte("[DONE]")

// dispatch ends the current event: its data is read, and with
// DropUsageChunk its held bytes are forwarded unless it is the usage-only
// chunk. At eof the event was not ended by a blank line.
func (m *Meter) dispatch(eof bool) {
	s := &m.sse
	drop, count := false, false
	if s.hasData && !s.over && bytes.Equal(bytes.TrimSpace(s.data), doneData) {
		if m.dec != nil {
			m.dec.done = true
		}
	} else if s.hasData && !s.over {
		usageOnly := m.onEvent(s.name, s.data)
		drop = m.drop && usageOnly
		count = !drop && !eof
	} else if s.hasData && s.over {
		m.salvage(s.name, &s.win, false)
		count = !eof
	}
	if m.drop && len(s.hold) > 0 && !drop {
		m.forward(s.hold)
	}
	if count && m.err == nil {
		m.events++
	}
	s.data = s.data[:0]
	s.hasData = false
	s.name = s.name[:0]
	s.over = false
	s.dataLine = false
	s.win.reset()
	s.hold = s.hold[:0]
	s.pass = false
	s.direct = false
	m.shrinkSSE()
}

// shrinkSSE lets go of buffers that grew for a big event.
func (m *Meter) shrinkSSE() {
	const keep = 64 << 10
	s := &m.sse
	if cap(s.data) > keep {
		s.data = nil
	}
	if cap(s.hold) > keep {
		s.hold = nil
	}
	if cap(s.line) > keep && len(s.line) == 0 {
		s.line = nil
	}
	if cap(s.win.tail) > keep {
		s.win = window{}
	}
}

// endSSE reads what is left when the body ends: a last line without a line
// ending, and an event without its blank line, which is read if its data is
// whole JSON and forwarded (DropUsageChunk) unless it is the usage chunk.
func (m *Meter) endSSE() {
	s := &m.sse
	if len(s.line) > 0 && !s.skip {
		m.sseLine(trimCR(s.line), true)
	}
	s.line = nil
	if s.hasData || len(s.hold) > 0 {
		m.dispatch(true)
	}
	// Emptied, not dropped: a released meter keeps them for the next
	// answer (Release keeps only small ones).
	s.data, s.hold, s.line, s.name, s.win = s.data[:0], s.hold[:0], s.line[:0], s.name[:0], window{}
}

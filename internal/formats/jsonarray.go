package formats

// arrayState splits a JSON-array stream (Google's without alt=sse) ("[{...},\r\n{...}]") into
// its elements as they arrive, keeping only the current element. It also
// takes a top-level object (an error body) as one element.
type arrayState struct {
	depth     int
	outerArr  bool // the top-level value is an array
	inStr     bool
	esc       bool
	in        bool // inside an element
	elemDepth int  // depth before the element's opening brace
	elem      []byte
	over      bool   // the current element is over the cap: not parsed
	win       window // the ends of an element over the cap
}

func (m *Meter) scanArray(p []byte) {
	a := &m.arr
	from := -1
	if a.in {
		from = 0
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if a.inStr {
			switch {
			case a.esc:
				a.esc = false
			case c == '\\':
				a.esc = true
			case c == '"':
				a.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			a.inStr = true
		case '{', '[':
			if !a.in && c == '{' && (a.depth == 0 || (a.depth == 1 && a.outerArr)) {
				a.in, a.elemDepth, from = true, a.depth, i
			}
			if a.depth == 0 {
				a.outerArr = c == '['
			}
			a.depth++
		case '}', ']':
			if a.depth > 0 {
				a.depth--
			}
			if a.in && a.depth == a.elemDepth {
				m.element(p[from : i+1])
				a.in, from = false, -1
			}
		}
	}
	if a.in && from >= 0 {
		m.elementPart(p[from:])
	}
}

// elementPart keeps the start of an element that goes on in a later write.
func (m *Meter) elementPart(b []byte) {
	a := &m.arr
	if a.over {
		a.win.write(b)
		return
	}
	if len(a.elem)+len(b) > m.maxEvent {
		a.over = true
		a.win.reset()
		a.win.write(a.elem)
		a.win.write(b)
		a.elem = nil
		return
	}
	a.elem = append(a.elem, b...)
}

// element reads a whole element whose last part is tail.
func (m *Meter) element(tail []byte) {
	a := &m.arr
	whole := tail
	if len(a.elem) > 0 || a.over {
		m.elementPart(tail)
		whole = a.elem
	}
	if a.over {
		m.salvage(nil, &a.win, false)
		a.win = window{}
	} else {
		m.onEvent(nil, whole)
	}
	if m.err == nil {
		m.events++
	}
	a.over = false
	if cap(a.elem) > 64<<10 {
		a.elem = nil
	} else {
		a.elem = a.elem[:0]
	}
}

// endArray drops an element cut by the end of the body.
func (m *Meter) endArray() { m.arr.elem, m.arr.win = nil, window{} }

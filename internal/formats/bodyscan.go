package formats

// The reader of non-stream answers. A non-stream body is read as its bytes
// pass, in the Write that forwards them, and never kept whole: bodyScan
// checks the body is one JSON value (exactly what gjson.Valid accepts:
// JSON's grammar, bytes of strings taken as they are) and picks out, as
// they go by, only the values the format's reader asks for (a bodyNode
// tree, one per format): the usage object and the model are kept and
// read with the format's usage reader when they end; the text of the
// answer, for the estimate when the usage is missing, is counted without
// being kept. What it read counts only when the whole body turns out
// valid, as when the body was parsed at its end.
//
// The lookups mean what gjson's do on the body: Get(key) takes the first
// member of that name (a path "key.inner" the first member named key
// whose value is an object with an inner member), ForEach every element
// of an array and every member value of an object; a member name matches
// once its escapes are decoded, and a string's length is its length once
// decoded, as gjson decodes it (a lone or broken surrogate escape is
// U+FFFD).

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// bodyNode says what is read of one value of a body, and of the values
// inside it.
type bodyNode struct {
	// fields are the members read when the value is an object.
	fields []bodyField
	// each applies to every element of an array and to every member
	// value of an object (ForEach); elems to the elements of an array
	// only. A node has fields or each, not both.
	each, elems *bodyNode
	// text counts the length of a string value as answer text; raw the
	// length of the value's JSON text, whatever its type.
	text, raw bool
	// read is given the value, parsed, at its end when its first byte is
	// gate (or whatever it is when gate is 0); the value is kept until
	// then. It may set the meter's usage and model.
	gate byte
	read func(m *Meter, v gjson.Result)
	// start is called as the value begins, whatever it is, and end as it
	// ends when it is an object. With fields whose nodes read each member,
	// they read an object member by member as it passes, without keeping
	// it (the usage objects, counts.go).
	start, end func(m *Meter)
}

// bodyField is a member a node reads.
type bodyField struct {
	key string
	// all reads every member of the name (a ForEach's switch); otherwise
	// the first one only (Get).
	all bool
	// inner, when set, is Get(key + "." + inner): node applies to the
	// inner member of the first member named key that is an object with
	// one.
	inner string
	node  *bodyNode
	// sub is the lookup inside a key member (built by newBodyNode).
	sub *bodyNode
}

// newBodyNode checks a node tree and builds its inner lookups.
func newBodyNode(n *bodyNode) *bodyNode {
	if len(n.fields) > 0 && n.each != nil {
		panic("formats: a body node reads fields or each member, not both")
	}
	if n.end != nil && len(n.fields) == 0 {
		panic("formats: a body node with an end hook reads fields")
	}
	if len(n.fields) > 32 {
		panic("formats: a body node reads at most 32 fields")
	}
	for i := range n.fields {
		f := &n.fields[i]
		if len(f.key) > maxBodyKey || len(f.inner) > maxBodyKey {
			panic("formats: body field name too long: " + f.key)
		}
		if f.inner != "" {
			if f.all {
				panic("formats: an inner lookup takes the first member")
			}
			f.sub = &bodyNode{fields: []bodyField{{key: f.inner, node: f.node}}}
		}
		if f.node != nil {
			newBodyNode(f.node)
		}
	}
	for _, c := range []*bodyNode{n.each, n.elems} {
		if c != nil {
			newBodyNode(c)
		}
	}
	return n
}

// maxBodyKey bounds the member names a node reads; longer names are not
// kept while they are read.
const maxBodyKey = 32

// Grammar states.
const (
	bsValue     uint8 = iota // a value is expected
	bsArrFirst               // after '[': a value or ']'
	bsObjFirst               // after '{': a member name or '}'
	bsKey                    // after ',' in an object: a member name
	bsColon                  // after a member name
	bsNext                   // after a value in a container: ',' or its end
	bsEnd                    // after the top-level value: whitespace only
	bsStr                    // in a string
	bsEsc                    // after '\' in a string
	bsHex                    // in the hex digits of \u
	bsMinus                  // after '-': a digit
	bsZero                   // after a leading 0
	bsInt                    // in the integer digits
	bsDot                    // after '.': a digit
	bsFrac                   // in the fraction digits
	bsExp                    // after 'e': a sign or a digit
	bsExpSign                // after the exponent's sign: a digit
	bsExpDigits              // in the exponent digits
	bsLit                    // in true, false or null
	bsBad                    // not valid JSON: nothing more is read
)

// bodyFrame is an open object or array.
type bodyFrame struct {
	node *bodyNode // nil: nothing in it is read
	done uint32    // the first-only fields already taken
	// up is the field of the enclosing object whose inner lookup this
	// object is (set done there when the inner member is found), or -1.
	up  int8
	obj bool
}

// bodyScan is the state of a body between writes.
type bodyScan struct {
	st    uint8
	stack []bodyFrame
	pos   int64 // bytes read

	// child is the node of the next value (and childUp its inner lookup,
	// see bodyFrame.up), set by the member name before it.
	child   *bodyNode
	childUp int8

	// The current string: inKey when it is a member name, strText counts
	// it as text, strKey keeps it as a member name to look up (key, up to
	// maxBodyKey bytes; keyLong when longer).
	inKey, strText, strKey, keyLong bool
	keyLen                          int
	key                             [maxBodyKey]byte
	// \u escapes: hex digits left and the code read so far; surr is a
	// surrogate waiting for the escape after it, surrEsc set when that
	// escape's '\' was read.
	hexLeft int8
	hex     rune
	surr    rune
	surrEsc bool

	lit    string // the rest of a literal
	litPos int

	// A value kept for its node's read, from capFrom in the current
	// write, at depth capDepth; and a value whose raw length is counted,
	// from rawStart.
	capNode  *bodyNode
	capDepth int
	capFrom  int
	capBuf   []byte
	rawOn    bool
	rawDepth int
	rawStart int64

	text int64 // the answer text's bytes
}

// reset readies s for a body read by root, keeping its buffers.
func (s *bodyScan) reset(root *bodyNode) {
	stack, capBuf := s.stack[:0], s.capBuf[:0]
	if cap(capBuf) > 64<<10 {
		capBuf = nil
	}
	*s = bodyScan{stack: stack, capBuf: capBuf, child: root, childUp: -1}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// write reads p. The reads of kept values go to m at once; the caller
// undoes them when the body turns out invalid.
func (s *bodyScan) write(m *Meter, p []byte) {
	if s.st == bsBad {
		return
	}
	s.capFrom = 0
	i := 0
	for i < len(p) {
		c := p[i]
		switch s.st {
		case bsStr:
			// The fast path: a run of plain bytes.
			j := i
			for j < len(p) && p[j] != '"' && p[j] != '\\' && p[j] >= 0x20 {
				j++
			}
			if j > i {
				if s.surr != 0 {
					s.emitRune(utf8.RuneError)
					s.surr = 0
				}
				if s.strText {
					s.text += int64(j - i)
				}
				if s.strKey {
					s.keyBytes(p[i:j])
				}
				i = j
				continue
			}
			switch {
			case c == '"':
				if s.surr != 0 {
					s.emitRune(utf8.RuneError)
					s.surr = 0
				}
				i++
				if s.inKey {
					s.st = bsColon
					if s.strKey {
						s.lookup()
					}
					s.inKey, s.strKey = false, false
					continue
				}
				s.strText = false
				s.endValue(m, p, i)
			case c == '\\':
				s.st = bsEsc
				i++
			default: // a control byte
				s.bad()
				return
			}
			continue
		case bsEsc:
			var b byte
			switch c {
			case '"', '\\', '/':
				b = c
			case 'b':
				b = '\b'
			case 'f':
				b = '\f'
			case 'n':
				b = '\n'
			case 'r':
				b = '\r'
			case 't':
				b = '\t'
			case 'u':
				s.st, s.hexLeft, s.hex = bsHex, 4, 0
				i++
				continue
			default:
				s.bad()
				return
			}
			if s.surr != 0 {
				s.emitRune(utf8.RuneError)
				s.surr = 0
			}
			s.emitByte(b)
			s.st = bsStr
			i++
			continue
		case bsHex:
			var d byte
			switch {
			case c >= '0' && c <= '9':
				d = c - '0'
			case c >= 'a' && c <= 'f':
				d = c - 'a' + 10
			case c >= 'A' && c <= 'F':
				d = c - 'A' + 10
			default:
				s.bad()
				return
			}
			s.hex = s.hex<<4 | rune(d)
			s.hexLeft--
			i++
			if s.hexLeft == 0 {
				s.st = bsStr
				switch r := s.hex; {
				case s.surr != 0:
					// gjson takes the escape after a surrogate as its
					// pair, whatever it is.
					s.emitRune(utf16.DecodeRune(s.surr, r))
					s.surr = 0
				case utf16.IsSurrogate(r):
					s.surr = r
				default:
					s.emitRune(r)
				}
			}
			continue
		case bsMinus, bsZero, bsInt, bsDot, bsFrac, bsExp, bsExpSign, bsExpDigits:
			if s.st == bsInt || s.st == bsFrac || s.st == bsExpDigits {
				// The fast path: a run of digits.
				j := i
				for j < len(p) && p[j] >= '0' && p[j] <= '9' {
					j++
				}
				if j > i {
					i = j
					continue
				}
			}
			if s.number(c) {
				i++
				continue
			}
			if s.st == bsBad {
				return
			}
			// c ends the number: it is read again after the value.
			s.endValue(m, p, i)
			continue
		case bsLit:
			if c != s.lit[s.litPos] {
				s.bad()
				return
			}
			s.litPos++
			i++
			if s.litPos == len(s.lit) {
				s.endValue(m, p, i)
			}
			continue
		}
		// Structure.
		if isSpace(c) {
			for i++; i < len(p) && isSpace(p[i]); i++ {
			}
			continue
		}
		switch s.st {
		case bsValue, bsArrFirst:
			if c == ']' && s.st == bsArrFirst {
				s.pop(m, p, i+1)
				i++
				continue
			}
			if !s.startValue(m, c, i) {
				s.bad()
				return
			}
		case bsObjFirst, bsKey:
			switch {
			case c == '"':
				s.startKey()
			case c == '}' && s.st == bsObjFirst:
				s.pop(m, p, i+1)
			default:
				s.bad()
				return
			}
		case bsColon:
			if c != ':' {
				s.bad()
				return
			}
			s.st = bsValue
		case bsNext:
			top := &s.stack[len(s.stack)-1]
			switch {
			case c == ',' && top.obj:
				s.st = bsKey
			case c == ',':
				s.st = bsValue
				s.elemChild(top)
			case c == '}' && top.obj, c == ']' && !top.obj:
				s.pop(m, p, i+1)
			default:
				s.bad()
				return
			}
		default: // bsEnd
			s.bad()
			return
		}
		i++
	}
	s.pos += int64(len(p))
	if s.capNode != nil {
		s.capBuf = append(s.capBuf, p[s.capFrom:]...)
	}
}

func (s *bodyScan) bad() {
	s.st = bsBad
	s.stack, s.capNode = s.stack[:0], nil
}

// number reads c in a number, or reports that c ends it (s.st is bsBad
// when the number cannot end there).
func (s *bodyScan) number(c byte) bool {
	digit := c >= '0' && c <= '9'
	switch s.st {
	case bsMinus:
		switch {
		case c == '0':
			s.st = bsZero
		case digit:
			s.st = bsInt
		default:
			s.st = bsBad
			return false
		}
		return true
	case bsZero, bsInt:
		switch {
		case digit && s.st == bsInt:
			return true
		case c == '.':
			s.st = bsDot
			return true
		case c == 'e' || c == 'E':
			s.st = bsExp
			return true
		}
		return false
	case bsDot:
		if !digit {
			s.st = bsBad
			return false
		}
		s.st = bsFrac
		return true
	case bsFrac:
		switch {
		case digit:
			return true
		case c == 'e' || c == 'E':
			s.st = bsExp
			return true
		}
		return false
	case bsExp:
		switch {
		case c == '+' || c == '-':
			s.st = bsExpSign
		case digit:
			s.st = bsExpDigits
		default:
			s.st = bsBad
			return false
		}
		return true
	case bsExpSign:
		if !digit {
			s.st = bsBad
			return false
		}
		s.st = bsExpDigits
		return true
	default: // bsExpDigits
		return digit
	}
}

// startValue begins the value whose first byte, at p[i], is c.
func (s *bodyScan) startValue(m *Meter, c byte, i int) bool {
	n, up := s.child, s.childUp
	s.child, s.childUp = nil, -1
	if n != nil && s.capNode == nil && !s.rawOn {
		if n.start != nil {
			n.start(m)
		}
		if n.read != nil && (n.gate == 0 || n.gate == c) {
			s.capNode, s.capDepth, s.capFrom = n, len(s.stack), i
		}
		if n.raw {
			s.rawOn, s.rawDepth, s.rawStart = true, len(s.stack), s.pos+int64(i)
		}
	}
	switch c {
	case '{', '[':
		f := bodyFrame{node: n, up: up, obj: c == '{'}
		if s.capNode != nil || s.rawOn || (n != nil && n.text) {
			f.node = nil // read whole, or a string's node
		}
		s.stack = append(s.stack, f)
		if f.obj {
			s.st = bsObjFirst
		} else {
			s.st = bsArrFirst
			s.elemChild(&s.stack[len(s.stack)-1])
		}
	case '"':
		s.st = bsStr
		s.strText = n != nil && n.text
	case '-':
		s.st = bsMinus
	case '0':
		s.st = bsZero
	case '1', '2', '3', '4', '5', '6', '7', '8', '9':
		s.st = bsInt
	case 't':
		s.st, s.lit, s.litPos = bsLit, "true", 1
	case 'f':
		s.st, s.lit, s.litPos = bsLit, "false", 1
	case 'n':
		s.st, s.lit, s.litPos = bsLit, "null", 1
	default:
		return false
	}
	return true
}

// elemChild sets the node of an array's next element.
func (s *bodyScan) elemChild(f *bodyFrame) {
	s.child, s.childUp = nil, -1
	if f.node != nil {
		if f.node.each != nil {
			s.child = f.node.each
		} else {
			s.child = f.node.elems
		}
	}
}

// startKey begins a member name, kept when the object's node reads
// fields by name.
func (s *bodyScan) startKey() {
	s.st, s.inKey = bsStr, true
	top := &s.stack[len(s.stack)-1]
	s.strKey = top.node != nil && len(top.node.fields) > 0
	s.keyLen, s.keyLong = 0, false
	if top.node != nil && top.node.each != nil {
		s.child, s.childUp = top.node.each, -1
	} else {
		s.child, s.childUp = nil, -1
	}
}

// lookup sets the node of the member whose name was just read.
func (s *bodyScan) lookup() {
	if s.keyLong {
		return
	}
	depth := len(s.stack)
	top := &s.stack[depth-1]
	key := s.key[:s.keyLen]
	for i := range top.node.fields {
		f := &top.node.fields[i]
		if string(key) != f.key || (!f.all && top.done&(1<<i) != 0) {
			continue
		}
		if f.sub != nil {
			s.child, s.childUp = f.sub, int8(i)
			return
		}
		if !f.all {
			top.done |= 1 << i
			if top.up >= 0 {
				// The inner member of the enclosing object's lookup.
				s.stack[depth-2].done |= 1 << top.up
			}
		}
		s.child = f.node
		return
	}
}

func (s *bodyScan) keyBytes(b []byte) {
	if s.keyLong || s.keyLen+len(b) > maxBodyKey {
		s.keyLong = true
		return
	}
	s.keyLen += copy(s.key[s.keyLen:], b)
}

func (s *bodyScan) emitByte(b byte) {
	if s.strText {
		s.text++
	}
	if s.strKey {
		s.keyBytes([]byte{b})
	}
}

// emitRune adds a decoded \u escape as gjson writes it in UTF-8
// (a surrogate as U+FFFD).
func (s *bodyScan) emitRune(r rune) {
	if s.strText {
		n := utf8.RuneLen(r)
		if n < 0 {
			n = 3
		}
		s.text += int64(n)
	}
	if s.strKey {
		var buf [utf8.UTFMax]byte
		s.keyBytes(utf8.AppendRune(buf[:0], r))
	}
}

// pop closes the container that ends at p[:end].
func (s *bodyScan) pop(m *Meter, p []byte, end int) {
	top := &s.stack[len(s.stack)-1]
	if top.obj && top.node != nil && top.node.end != nil {
		top.node.end(m)
	}
	s.stack = s.stack[:len(s.stack)-1]
	s.endValue(m, p, end)
}

// endValue ends the value that ends at p[:end]: a kept value is read, a
// raw length counted, and the grammar goes on after it.
func (s *bodyScan) endValue(m *Meter, p []byte, end int) {
	depth := len(s.stack)
	if s.rawOn && depth == s.rawDepth {
		s.text += s.pos + int64(end) - s.rawStart
		s.rawOn = false
	}
	if s.capNode != nil && depth == s.capDepth {
		s.capBuf = append(s.capBuf, p[s.capFrom:end]...)
		s.capNode.read(m, parseCaptured(str(s.capBuf)))
		s.capNode, s.capBuf = nil, s.capBuf[:0]
	}
	if depth == 0 {
		s.st = bsEnd
	} else {
		s.st = bsNext
	}
}

// parseCaptured is gjson.Parse(v) for a kept value. A whole number of up
// to 15 digits (a token count), which a float64 holds exactly, is read
// here instead, into the Result gjson.Parse would make of it.
func parseCaptured(v string) gjson.Result {
	n := len(v)
	if n == 0 || n > 15 || (v[0] == '0' && n > 1) {
		return gjson.Parse(v)
	}
	var x int64
	for i := range n {
		c := v[i]
		if c < '0' || c > '9' {
			return gjson.Parse(v)
		}
		x = x*10 + int64(c-'0')
	}
	return gjson.Result{Type: gjson.Number, Raw: v, Num: float64(x)}
}

// finish ends the body and reports whether it was one valid JSON value.
func (s *bodyScan) finish(m *Meter) bool {
	switch s.st {
	case bsEnd:
		return true
	case bsZero, bsInt, bsFrac, bsExpDigits:
		if len(s.stack) == 0 {
			s.endValue(m, nil, 0)
			return true
		}
	}
	return false
}

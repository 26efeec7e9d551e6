package formats

import (
	"encoding/binary"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// MaxDepth is the deepest nesting of arrays and objects a request body may
// have (the top-level object counts 1). No request of any format comes near
// it; a body nested deeper is refused like malformed JSON. ScanBody keeps
// the open levels in a bit stack, not in calls: gjson.ValidBytes, which
// read bodies before, took a call per level, and a body of a few million
// levels (within the default size limit) could exhaust a goroutine's
// stack, which ends the process.
const MaxDepth = 10000

// ScanBody reads a request body of format f in one pass: it checks that the
// body is one JSON object and finds the Fields the gateway reads, with the
// refusals of ScanFields (a repeated key, another spelling of a key it
// reads). ok is false when the body is not a JSON object. A format that
// folds keys makes the two spellings of a field name (generationConfig
// and generation_config) count as the same key; a key with escapes is
// compared unescaped, an unpaired surrogate escape read as U+FFFD (gjson
// read it together with the escape after it).
//
// The JSON it accepts is RFC 8259's: strings of valid UTF-8 with no
// unescaped control characters and only the escapes the RFC lists, numbers
// of the RFC's grammar, true, false, null, and the four whitespace
// characters between tokens. Compared with gjson.ValidBytes, which read
// bodies before, it also refuses invalid UTF-8 (gjson takes any byte from
// 0x20 up in a string) and nesting deeper than MaxDepth (gjson has no
// limit).
//
// The Fields point into body (nothing is copied unless a key or a string
// has escapes): call Fields.Keep before the body's buffer is reused.
func ScanBody(body []byte, f Format) (fs Fields, ok bool) {
	fs.format = f
	fold := f.w().foldsKeys()
	s := scanner{b: body}
	s.ws()
	if !s.at('{') {
		return fs, false
	}
	fs.open = s.i
	s.i++
	keys := keySet{fold: fold}
	// refused: a refusal was found; what is left is only checked as JSON.
	refused := false
	s.ws()
	if s.at('}') {
		s.i++
	} else {
		for {
			key, ok := s.key()
			if !ok {
				return fs, false
			}
			start := s.i
			var dst *gjson.Result
			// checked: an object whose own keys must not repeat either;
			// thinking: so must those of its thinking config.
			checked, thinking := false, false
			if !refused && keys.add(key) {
				fs.duplicate, refused = strings.Clone(key), true
			}
			if !refused {
				switch key {
				case "model":
					dst = &fs.model
				case "stream":
					dst = &fs.stream
				case "stream_options":
					dst, checked = &fs.streamOptions, true
				case "max_tokens":
					dst = &fs.maxTokens
				case "max_completion_tokens":
					dst = &fs.maxCompletionTokens
				case "max_output_tokens":
					dst = &fs.maxOutput
				case "generationConfig":
					dst, checked, thinking = &fs.generationConfig, true, true
				case "generation_config":
					dst, checked, thinking = &fs.generationConfigSnakeCase, true, true
				case "generateContentRequest", "generate_content_request":
					// Read only by a Google token count, which checks its
					// keys (countDuplicate) after the model. The first
					// spelling wins, as gjson's lookup of it did before.
					if !fs.countRequest.Exists() || fs.countKey != "generateContentRequest" {
						dst, checked = &fs.countRequest, true
						fs.countKey = "generate_content_request"
						if key == "generateContentRequest" {
							fs.countKey = "generateContentRequest"
						}
					}
				default:
					if name := readKeyVariant(key, fold); name != "" {
						fs.variant, fs.variantOf, refused = strings.Clone(key), name, true
					}
				}
			}
			if checked && s.at('{') {
				countRequest := dst == &fs.countRequest
				dup, ok := s.checkedObject(fold || countRequest, thinking, 1)
				if !ok {
					return fs, false
				}
				switch {
				case countRequest:
					fs.countDuplicate = dup
				case dup != "":
					fs.duplicate, refused, dst = key+"."+dup, true, nil
				}
			} else if !s.value(1) {
				return fs, false
			}
			if dst != nil {
				*dst = resultAt(body, start, s.i)
			}
			s.ws()
			if s.at(',') {
				s.i++
				s.ws()
				continue
			}
			if !s.at('}') {
				return fs, false
			}
			s.i++
			break
		}
	}
	fs.close = s.i - 1
	s.ws()
	return fs, s.i == len(body)
}

// resultAt is the value at body[start:end] as gjson reads it, in place,
// with its offset in the body as its Index.
func resultAt(body []byte, start, end int) gjson.Result {
	r := gjson.Parse(unsafe.String(&body[start], end-start))
	r.Index = start
	return r
}

// scanner reads JSON text from b at i.
type scanner struct {
	b []byte
	i int
	// kinds holds one bit per container open inside the value being
	// read (value), set for an array; deep takes over past the first
	// 1024 levels.
	kinds [16]uint64
	deep  []uint64
}

func (s *scanner) at(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

// ws skips whitespace.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// key reads an object's key, the colon after it and the whitespace after
// that, and returns the key unescaped (in place when it has no escapes).
func (s *scanner) key() (string, bool) {
	if !s.at('"') {
		return "", false
	}
	start := s.i
	escaped, ok := s.str()
	if !ok {
		return "", false
	}
	raw := s.b[start+1 : s.i-1]
	s.ws()
	if !s.at(':') {
		return "", false
	}
	s.i++
	s.ws()
	if escaped {
		return unescape(raw), true
	}
	return unsafe.String(unsafe.SliceData(raw), len(raw)), true
}

// checkedObject reads the object at i (which sits inside depth open
// containers) and returns a key that it repeats, as ScanFields' duplicate
// names it ("" when none). thinking also checks the keys of a thinking
// config object in it.
func (s *scanner) checkedObject(fold, thinking bool, depth int) (dup string, ok bool) {
	if depth >= MaxDepth {
		return "", false
	}
	s.i++ // '{'
	keys := keySet{fold: fold}
	s.ws()
	if s.at('}') {
		s.i++
		return "", true
	}
	for {
		key, ok := s.key()
		if !ok {
			return "", false
		}
		if dup == "" && keys.add(key) {
			dup = strings.Clone(key)
		}
		if dup == "" && thinking && (key == "thinkingConfig" || key == "thinking_config") && s.at('{') {
			d, ok := s.checkedObject(fold, false, depth+1)
			if !ok {
				return "", false
			}
			if d != "" {
				dup = key + "." + d
			}
		} else if !s.value(depth + 1) {
			return "", false
		}
		s.ws()
		if s.at(',') {
			s.i++
			s.ws()
			continue
		}
		if !s.at('}') {
			return "", false
		}
		s.i++
		return dup, true
	}
}

// value reads one JSON value at i, which sits inside depth open
// containers, and leaves i after it. Containers inside it are tracked in a
// bit stack rather than by recursion, so that nesting costs no call stack.
func (s *scanner) value(depth int) bool {
	b := s.b
	open := 0 // containers opened inside the value and not closed yet
next:
	for {
		// A value starts here.
		if s.i >= len(b) {
			return false
		}
		switch c := b[s.i]; c {
		case '{', '[':
			if depth+open >= MaxDepth {
				return false
			}
			s.setKind(open, c == '[')
			open++
			s.i++
			s.ws()
			if s.at(c + 2) { // '}' and ']' are '{' and '[' plus 2
				s.i++
				open--
				break
			}
			if c == '{' {
				if _, ok := s.key(); !ok {
					return false
				}
			}
			continue next
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
		case 't':
			if !s.literal("true") {
				return false
			}
		case 'f':
			if !s.literal("false") {
				return false
			}
		case 'n':
			if !s.literal("null") {
				return false
			}
		default:
			if !s.number() {
				return false
			}
		}
		// A value ended: close what it ends, or move to the next one.
		for open > 0 {
			s.ws()
			if s.i >= len(b) {
				return false
			}
			array := s.kind(open - 1)
			switch b[s.i] {
			case ',':
				s.i++
				s.ws()
				if !array {
					if _, ok := s.key(); !ok {
						return false
					}
				}
				continue next
			case ']':
				if !array {
					return false
				}
			case '}':
				if array {
					return false
				}
			default:
				return false
			}
			s.i++
			open--
		}
		return true
	}
}

func (s *scanner) setKind(d int, array bool) {
	k := s.kinds[:]
	if d >= len(k)*64 {
		if s.deep == nil {
			s.deep = make([]uint64, MaxDepth/64+1)
			copy(s.deep, s.kinds[:])
		}
		k = s.deep
	}
	w, bit := d>>6, uint64(1)<<(d&63)
	if array {
		k[w] |= bit
	} else {
		k[w] &^= bit
	}
}

func (s *scanner) kind(d int) (array bool) {
	k := s.kinds[:]
	if s.deep != nil {
		k = s.deep
	}
	return k[d>>6]&(1<<(d&63)) != 0
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number reads a number of RFC 8259's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	s.i = i
	return true
}

// Bytes of a word, for reading strings eight bytes at a time.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plain reports whether none of the eight bytes in w ends or escapes a
// string, is a control character or starts a multi-byte sequence: no byte
// below 0x20, none equal to '"' or '\\', none from 0x80 up. (A byte v
// below n shows as the high bit of (v - n) & ^v; a byte equal to c as one
// below 1 after an xor with c.)
func plain(w uint64) bool {
	below20 := (w - ones*0x20) & ^w
	x := w ^ (ones * '"')
	quote := (x - ones) & ^x
	y := w ^ (ones * '\\')
	backslash := (y - ones) & ^y
	return (below20|quote|backslash|w)&highs == 0
}

// str reads a string at i (its opening quote) and leaves i after its
// closing quote; escaped reports whether it has escapes.
func (s *scanner) str() (escaped, ok bool) {
	b := s.b
	i := s.i + 1
	for {
		for i+8 <= len(b) && plain(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return false, false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return false, false
				}
				for _, h := range b[i+2 : i+6] {
					if hexVal(h) < 0 {
						return false, false
					}
				}
				i += 6
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return false, false
			}
			i += size
		}
	}
}

func hexVal(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// unescape decodes the escapes of a string's text that str accepted. A
// \u escape of a surrogate that does not pair with the next escape reads
// as U+FFFD, and the next escape reads on its own (as encoding/json
// decodes it).
func unescape(raw []byte) string {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if p := utf16.DecodeRune(r, hex4(raw[i+2:])); p != utf8.RuneError {
						r = p
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
			continue
		default: // '"', '\\', '/'
			out = append(out, raw[i+1])
		}
		i += 2
	}
	return string(out)
}

func hex4(b []byte) rune {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}

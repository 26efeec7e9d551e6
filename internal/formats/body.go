package formats

import (
	"encoding/json"
	"io"

	"github.com/tidwall/gjson"
)

// Body is a request body on its way to the provider: the client's bytes
// with a few spans replaced (the model id, the stream's usage option),
// kept as pieces so that no edit copies the body. Its bytes are exactly
// those the edits made with sjson.SetBytes before: values are spelled as
// sjson spells them, and a member added to the top-level object drops the
// whitespace around the object, as sjson does.
type Body struct {
	base []byte
	// lo and hi bound the part of base that is sent.
	lo, hi int
	edits  [maxEdits]edit
	n      int
}

// maxEdits is the most edits a body gets: the model, the model of the
// request a Google token count wraps, and the stream's usage option.
const maxEdits = 3

// edit replaces base[start:end] with its text's three parts in order.
type edit struct {
	start, end int
	text       [3]string
}

// NewBody is the body that sends base as it is.
func NewBody(base []byte) Body { return Body{base: base, hi: len(base)} }

// Len is the body's length in bytes.
func (b *Body) Len() int {
	n := b.hi - b.lo
	for _, e := range b.edits[:b.n] {
		n += len(e.text[0]) + len(e.text[1]) + len(e.text[2]) - (e.end - e.start)
	}
	return n
}

// Edited reports whether the body differs from the base it was made of.
func (b *Body) Edited() bool { return b.n > 0 || b.lo != 0 || b.hi != len(b.base) }

// Bytes returns the body's bytes: its base when it is not edited, else a
// copy.
func (b *Body) Bytes() []byte {
	if !b.Edited() {
		return b.base
	}
	return b.AppendTo(make([]byte, 0, b.Len()))
}

// AppendTo appends the body's bytes to dst.
func (b *Body) AppendTo(dst []byte) []byte {
	for k := 0; ; k++ {
		p, s, ok := b.piece(k)
		if !ok {
			return dst
		}
		dst = append(append(dst, p...), s...)
	}
}

// piece is the body's k-th piece, a span of the base (p) or a part of an
// edit's text (s); ok is false past the last. Pieces 4j to 4j+3 are the
// base before edit j and edit j's text; piece 4n is the base after the
// last edit.
func (b *Body) piece(k int) (p []byte, s string, ok bool) {
	j, m := k/4, k%4
	if j > b.n {
		return nil, "", false
	}
	if m > 0 {
		if j == b.n {
			return nil, "", false
		}
		return nil, b.edits[j].text[m-1], true
	}
	from, to := b.lo, b.hi
	if j > 0 {
		from = b.edits[j-1].end
	}
	if j < b.n {
		to = b.edits[j].start
	}
	return b.base[from:to], "", true
}

// replace replaces base[start:end] with the text parts; false when the
// span meets another edit's or lies outside the part sent.
func (b *Body) replace(start, end int, t0, t1, t2 string) bool {
	if b.n == maxEdits || start < b.lo || end > b.hi || start > end {
		return false
	}
	for _, e := range b.edits[:b.n] {
		if !(e.end <= start || end <= e.start) || (e.start == start && e.end == end) {
			return false
		}
	}
	// In order of start; an insertion before a replacement at its start.
	at := b.n
	for at > 0 && (b.edits[at-1].start > start || b.edits[at-1].start == start && b.edits[at-1].end > end) {
		at--
	}
	copy(b.edits[at+1:b.n+1], b.edits[at:b.n])
	b.edits[at] = edit{start: start, end: end, text: [3]string{t0, t1, t2}}
	b.n++
	return true
}

// span is where a value read from the body's base lies in it: its Index
// and length, checked against the base.
func (b *Body) span(v gjson.Result) (start, end int, ok bool) {
	start, end = v.Index, v.Index+len(v.Raw)
	if v.Raw == "" || start <= 0 || end > len(b.base) || string(b.base[start:end]) != v.Raw {
		return 0, 0, false
	}
	return start, end, true
}

// setString replaces the value v (read from the body's base) with the JSON
// string of prefix+s, spelled as sjson spells it.
func (b *Body) setString(v gjson.Result, prefix, s string) bool {
	start, end, ok := b.span(v)
	if !ok {
		return false
	}
	if mustMarshalString(prefix) || mustMarshalString(s) {
		q, _ := json.Marshal(prefix + s)
		return b.replace(start, end, string(q), "", "")
	}
	open := `"`
	if prefix != "" {
		open += prefix
	}
	return b.replace(start, end, open, s, `"`)
}

// mustMarshalString reports whether sjson spells s through encoding/json
// rather than between two quotes as it is.
func mustMarshalString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > 0x7f || s[i] == '"' || s[i] == '\\' {
			return true
		}
	}
	return false
}

// BodyReader reads a Body (a copy of it: the Body it was made of may be
// reused meanwhile).
type BodyReader struct {
	body Body
	k    int // the piece being read
	off  int // the offset in it
}

// Reset makes r read b from its start.
func (r *BodyReader) Reset(b *Body) { *r = BodyReader{body: *b} }

// Len is the number of bytes left to read.
func (r *BodyReader) Len() int {
	n := 0
	for k := r.k; ; k++ {
		p, s, ok := r.body.piece(k)
		if !ok {
			return n - r.off
		}
		n += len(p) + len(s)
	}
}

func (r *BodyReader) Read(dst []byte) (n int, err error) {
	for n < len(dst) {
		p, s, ok := r.body.piece(r.k)
		if !ok {
			break
		}
		var c int
		if p != nil {
			c = copy(dst[n:], p[r.off:])
		} else {
			c = copy(dst[n:], s[r.off:])
		}
		n += c
		if r.off += c; r.off == len(p)+len(s) {
			r.k, r.off = r.k+1, 0
		}
	}
	if _, _, ok := r.body.piece(r.k); !ok {
		return n, io.EOF
	}
	return n, nil
}

// WriteTo writes what is left to read to w.
func (r *BodyReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		p, s, ok := r.body.piece(r.k)
		if !ok {
			return total, nil
		}
		var n int
		var err error
		switch {
		case p != nil && len(p) > r.off:
			n, err = w.Write(p[r.off:])
		case len(s) > r.off:
			n, err = io.WriteString(w, s[r.off:])
		}
		total += int64(n)
		if r.off += n; err != nil {
			return total, err
		}
		r.k, r.off = r.k+1, 0
	}
}

var (
	_ io.Reader   = (*BodyReader)(nil)
	_ io.WriterTo = (*BodyReader)(nil)
)

package formats

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// FuzzMeter feeds random bodies in random pieces under every format and
// mode: the meter never panics, forwards the input exactly unless
// DropUsageChunk is on, and then forwards the input minus whole events.
func FuzzMeter(f *testing.F) {
	for _, g := range goldens {
		f.Add(fixture(f, g.file), uint8(g.opts.Format), uint8(0), uint16(7))
	}
	f.Add(fixture(f, "chat_stream.sse"), uint8(Chat), uint8(4), uint16(3))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\n\r\n: x\n\ndata"), uint8(Chat), uint8(4), uint16(1))
	f.Add([]byte(`[{"a":"}\"{"},{"usageMetadata":{"promptTokenCount":1}}]`), uint8(Google), uint8(2), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, format, flags uint8, split uint16) {
		opts := MeterOptions{
			Format:          Format(int(format)%Count() + 1),
			StreamRequested: flags&1 != 0,
			DropUsageChunk:  flags&4 != 0,
			RequestBytes:    int64(len(data)),
			MaxEventBytes:   int(split%512) + 1, // small caps reach the over-cap paths
			MaxBodyBytes:    int(split%1024) + 1,
		}
		if flags&8 != 0 {
			opts.MaxEventBytes, opts.MaxBodyBytes = 0, 0
		}
		switch flags >> 1 & 1 {
		case 0:
			opts.ContentType = "text/event-stream"
		default:
			opts.ContentType = "application/json"
		}
		var out bytes.Buffer
		m := NewMeter(&out, opts)
		step := int(split%97) + 1
		for rest := data; len(rest) > 0; {
			n := min(step, len(rest))
			if k, err := m.Write(rest[:n]); k != n || err != nil {
				t.Fatalf("Write = %d, %v", k, err)
			}
			rest = rest[n:]
			step = step*7%97 + 1
		}
		res := m.Result()
		if res.Complete == res.Estimated {
			t.Fatalf("complete = estimated = %v", res.Complete)
		}
		tk := res.Tokens
		if tk.Input < 0 || tk.CacheRead < 0 || tk.CacheWrite < 0 || tk.Output < 0 || tk.Reasoning < 0 {
			t.Fatalf("negative tokens %+v", tk)
		}
		if !m.drop {
			if !bytes.Equal(out.Bytes(), data) {
				t.Fatalf("forwarded %q, want %q", out.Bytes(), data)
			}
			return
		}
		// With drop, what is missing is whole usage-only chunks: the
		// output is the input with some events taken out.
		if !isSubsequence(out.Bytes(), data) {
			t.Fatalf("forwarded bytes are not taken from the input")
		}
		if !bytes.Contains(data, []byte("usage")) && !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("bytes dropped without a usage chunk")
		}
	})
}

func isSubsequence(sub, s []byte) bool {
	for _, c := range sub {
		i := bytes.IndexByte(s, c)
		if i < 0 {
			return false
		}
		s = s[i+1:]
	}
	return true
}

// FuzzOutputBound reads number text as every member that bounds output:
// it never panics, a bound is never negative nor over MaxCount, and the
// request is refused (400) exactly when the number is not a whole count
// the member allows, as math/big reads it.
func FuzzOutputBound(f *testing.F) {
	for _, v := range boundValues {
		f.Add(v.text, uint8(0))
	}
	f.Fuzz(func(t *testing.T, text string, field uint8) {
		n, ok := wholeNumber(text)
		if ok && (n > MaxCount || n < -MaxCount) {
			t.Fatalf("wholeNumber(%q) = %d", text, n)
		}
		if len(text) == 0 || (text[0] != '-' && !isDigit(text[0])) || !json.Valid([]byte(text)) {
			return // not a JSON number
		}
		// The body holds the number with any whitespace after it; the
		// number's own text is what the gateway reads.
		num := strings.TrimRight(text, " \t\r\n")
		n, ok = wholeNumber(num)
		want, wantOK := bigWhole(num)
		if !wantOK {
			return // an exponent too large for math/big to expand quickly
		}
		if ok != (want != nil) || (ok && want.Int64() != n) {
			t.Fatalf("wholeNumber(%q) = %d, %v; math/big reads %v", text, n, ok, want)
		}
		fld := boundFields[int(field)%len(boundFields)]
		fs := ScanFields([]byte(strings.Replace(fld.body, "V", text, 1)), fld.format)
		e := Route{Format: fld.format, Op: Generate}.Check(&fs)
		allowed := ok && (n >= fld.min || (n == -1 && fld.minusOne))
		if (e == nil) != allowed {
			t.Fatalf("%s = %s: refusal %v, want allowed %v", fld.name, text, e, allowed)
		}
		if e != nil && e.Status != 400 {
			t.Fatalf("%s = %s: status %d", fld.name, text, e.Status)
		}
		for _, b := range []int64{fs.OutputLimit(), fs.ExtraOutput()} {
			if b < 0 || (e == nil && b > MaxCount) || (e != nil && b != 0 && b != math.MaxInt64) {
				t.Fatalf("%s = %s: bound %d (refusal %v)", fld.name, text, b, e)
			}
		}
	})
}

// bigWhole is the value of JSON number text when it is an integer of
// magnitude at most MaxCount (nil when not), read by math/big; ok is false
// when the exponent is too large to expand.
func bigWhole(text string) (v *big.Int, ok bool) {
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimLeft(text[i+1:], "+"))
		if err != nil || exp > 10000 || exp < -10000 {
			return nil, false
		}
	}
	r, good := new(big.Rat).SetString(text)
	if !good {
		return nil, true
	}
	if !r.IsInt() || r.Num().CmpAbs(big.NewInt(MaxCount)) > 0 {
		return nil, true
	}
	return r.Num(), true
}

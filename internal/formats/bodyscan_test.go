package formats

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// meterBody reads in as a non-stream body written in the pieces cuts
// gives (the offsets where a new write starts).
func meterBody(t testing.TB, in []byte, opts MeterOptions, cuts []int) bodyRead {
	t.Helper()
	var out bytes.Buffer
	m := NewMeter(&out, opts)
	last := 0
	for _, c := range append(cuts, len(in)) {
		if c < last || c > len(in) {
			continue
		}
		if n, err := m.Write(in[last:c]); n != c-last || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		last = c
	}
	res := m.Result()
	if !bytes.Equal(out.Bytes(), in) {
		t.Fatalf("forwarded bytes differ from the input")
	}
	return bodyRead{res, m.textBytes}
}

// bodyOpts are the options a body is checked under: every format, the
// default caps, and caps around its size (the over-cap path).
func bodyOpts(in []byte) []MeterOptions {
	var out []MeterOptions
	for _, f := range All() {
		for _, cap := range []int{0, len(in) - 1, len(in), len(in) / 2} {
			if cap < 0 {
				continue
			}
			out = append(out, MeterOptions{Format: f, ContentType: "application/json", RequestBytes: 1234, MaxBodyBytes: cap})
		}
	}
	return out
}

// checkBody compares the meter with the oracle on in, written whole, in
// every two pieces and byte by byte when in is small, and in random
// pieces.
func checkBody(t *testing.T, name string, in []byte, r *rand.Rand) {
	t.Helper()
	for _, opts := range bodyOpts(in) {
		want := oracleBody(in, opts)
		check := func(how string, cuts []int) {
			t.Helper()
			if got := meterBody(t, in, opts, cuts); got != want {
				t.Fatalf("%s (%s, cap %d, %s):\n got %+v\nwant %+v", name, opts.Format, opts.MaxBodyBytes, how, got, want)
			}
		}
		check("whole", nil)
		if len(in) <= 600 {
			for i := 1; i < len(in); i++ {
				check(fmt.Sprintf("split at %d", i), []int{i})
			}
			every := make([]int, len(in))
			for i := range every {
				every[i] = i
			}
			check("byte by byte", every)
		}
		for k := 0; k < 8; k++ {
			var cuts []int
			for c := 0; c < len(in); c += 1 + r.IntN(max(len(in)/4, 2)) {
				cuts = append(cuts, c)
			}
			check(fmt.Sprintf("random pieces %v", cuts), cuts)
		}
	}
}

// TestBodyOracle: the fixtures, the fake provider's answers in every
// format and random bodies read as they pass give exactly what reading
// them whole gave.
func TestBodyOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	files, err := filepath.Glob(filepath.Join("testdata", "*.*"))
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, f := range files {
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkBody(t, f, in, r)
	}
	for name, in := range fakeAnswers(t) {
		checkBody(t, name, in, r)
	}
	for _, in := range bodyCases {
		checkBody(t, in, []byte(in), r)
	}
	for i := 0; i < 300; i++ {
		in := randomBody(r)
		checkBody(t, fmt.Sprintf("random body %d %q", i, in), in, r)
		// And broken: cut short, or a byte changed.
		if len(in) > 1 {
			checkBody(t, "cut", in[:r.IntN(len(in))], r)
			b := bytes.Clone(in)
			b[r.IntN(len(b))] = `{}[]":,\ u0"`[r.IntN(12)]
			checkBody(t, "changed", b, r)
		}
	}
}

// TestBodyOracleLarge: a body of some megabytes, and one over the default
// cap, in random pieces.
func TestBodyOracleLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	text := strings.Repeat(`lorem \"ipsum\" \u00e9\ud83d\ude00 `, 1<<15)
	in := []byte(`{"model":"m","choices":[{"message":{"content":"` + text + `"}}],"content":[{"text":"` + text +
		`"}],"usage":{"prompt_tokens":7,"completion_tokens":9,"input_tokens":3,"output_tokens":4}}`)
	for _, opts := range []MeterOptions{{Format: Chat}, {Format: Anthropic}, {Format: Chat, MaxBodyBytes: len(in) - 100}, {Format: Anthropic, MaxBodyBytes: len(in) - windowTail - 5}} {
		opts.ContentType = "application/json"
		want := oracleBody(in, opts)
		for k := 0; k < 4; k++ {
			var cuts []int
			for c := 0; c < len(in); c += 1 + r.IntN(100000) {
				cuts = append(cuts, c)
			}
			if got := meterBody(t, in, opts, cuts); got != want {
				t.Fatalf("%s cap %d: got %+v, want %+v", opts.Format, opts.MaxBodyBytes, got, want)
			}
		}
	}
	big := bytes.Repeat([]byte(" "), DefaultMaxBodyBytes)
	big = append(big, `{"usage":{"prompt_tokens":1,"completion_tokens":2}}`...)
	opts := MeterOptions{Format: Chat, ContentType: "application/json"}
	if got, want := meterBody(t, big, opts, []int{1 << 20, 5 << 20, DefaultMaxBodyBytes - 3}), oracleBody(big, opts); got != want || !got.Complete {
		t.Fatalf("over the cap: got %+v, want %+v", got, want)
	}
}

// bodyCases are bodies that reach the corners of the lookups: repeated
// members, an inner lookup that moves on to the next member of the name,
// escaped names, surrogates, values of the wrong type.
var bodyCases = []string{
	`{"candidates":[{"content":{"parts":[{"text":"ab"}]},"content":{"parts":[{"text":"cdefgh"}]}}]}`,
	`{"candidates":[{"content":{"x":1},"content":{"parts":[{"text":"cdef"}]},"content":{"parts":[{"text":"gh"}]}}]}`,
	`{"candidates":[{"content":"s","content":[{"parts":[{"text":"ab"}]}],"content":{"parts":{"a":{"text":"cd"}}}}]}`,
	`[{"candidates":{"a":{"content":{"parts":[{"text":"ab"}]}}},"usageMetadata":{"promptTokenCount":3}},{"usageMetadata":[]},{"usageMetadata":{"candidatesTokenCount":2},"modelVersion":"m2"}]`,
	`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"ab"},"function":{"arguments":"cdefgh"}}]}}]}`,
	`{"choices":[{"message":{"tool_calls":[{"function":{"name":"x"},"function":{"arguments":"cdefgh"}}]}}]}`,
	`{"choices":[{"message":{"content":"ab","content":"cdefgh","refusal":7}}],"model":"a","model":"b","choices":[{"message":{"content":"zzzzzzzzzzzz"}}]}`,
	`{"mod\u0065l":"x","\u0075sage":{"prompt_tokens":5,"completion_tokens":6},"usage":{"prompt_tokens":1}}`,
	`{"model":"\ud83d\ude00\ud83d","content":[{"text":"\ud83d\u0041\ude00x\ud800\n"},{"input":{"a":[1,2]}},{"input":null},{"input":12.5e3}],"usage":{"output_tokens":1}}`,
	`{"output":[{"arguments":"abc","content":[{"text":"d"},{"text":"e","text":"fffff"}],"summary":{"x":{"text":"gg"}}}],"usage":[1]}`,
	`{"usage":"x","model":{"a":1},"choices":"x"} `,
	` [ {"usageMetadata":{"promptTokenCount":-5,"candidatesTokenCount":1e3}} ] `,
	`{"choices":[{"message":{"content":"ab"}}]`,
	`{"choices":[{"message":{"content":"ab"}}]}x`,
	`{"choices":[{"message":{"content":"a\x"}}]}`,
	`12`, `"abc"`, `-`, `[1.]`, `[01]`, `{"a":tru}`, `{}`, `[]`, ``, ` `,
	// Usage objects read member by member (counts.go): repeated counts,
	// details objects repeated, empty, of another type or without their
	// count, counts of every type, escaped names, and the names deeper.
	`{"usage":{"prompt_tokens":5,"prompt_tokens":7,"completion_tokens":"9","prompt_tokens_details":{"cached_tokens":null},"prompt_tokens_details":{"audio_tokens":1},"completion_tokens_details":{"reasoning_tokens":3},"completion_tokens_details":{},"prompt_cache_hit_tokens":2}}`,
	`{"usage":{"prompt_tokens":10,"prompt_cache_hit_tokens":4,"prompt_tokens_details":[{"cached_tokens":1}],"completion_tokens":8,"completion_tokens_details":{"reasoning_tokens":2,"reasoning_tokens":5},"completion_tokens_details":7}}`,
	`{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":3,"cached_tokens":1},"prompt_tokens_details":5,"completion_tokens":8,"completion_tokens_details":{"reasoning_tokens":9}}}`,
	`{"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":4},"input_tokens_details":{"x":1},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2,"reasoning_tokens":9}}}`,
	`{"usage":{"input_tokens":"3","input_tokens":4,"cache_creation_input_tokens":null,"cache_read_input_tokens":2.5,"output_tokens":{"a":1},"output_tokens":6}}`,
	`{"usage":{"input_tokens":1,"output_tokens":"x","cache_creation_input_tokens":-3}}`,
	`[{"usageMetadata":{"promptTokenCount":5,"cachedContentTokenCount":2,"toolUsePromptTokenCount":1}},{"usageMetadata":null},{"usageMetadata":{"candidatesTokenCount":"3","thoughtsTokenCount":2}}]`,
	`{"usageMetadata":{"toolUsePromptTokenCount":"4","candidatesTokenCount":1e2},"usageMetadata":{"thoughtsTokenCount":7}}`,
	`{"usage":{"prompt_\u0074okens":5,"completion_tokens_details":{"reasoning\u005ftokens":2},"completion_tokens":4,"output_tokens":3}}`,
	`{"usage":{"x":{"prompt_tokens":99},"prompt_tokens":3,"completion_tokens":[{"completion_tokens":5}],"input_tokens":{"input_tokens":1}}}`,
	`{"usage":null,"usage":{"prompt_tokens":3}}`,
	`{"usage":{},"model":"m"}`,
}

// fakeAnswers are the fake provider's non-stream answers in every format,
// its token counts, and Google's stream as one JSON array.
func fakeAnswers(t *testing.T) map[string][]byte {
	p, err := fakeprovider.Start("secret")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := map[string][]byte{}
	get := func(name, path, body string, h map[string]string) {
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, rec.Code, rec.Body)
		}
		out[name] = rec.Body.Bytes()
	}
	bearer := map[string]string{"Authorization": "Bearer secret"}
	anth := map[string]string{"X-Api-Key": "secret", "Anthropic-Version": "2023-06-01"}
	goog := map[string]string{"X-Goog-Api-Key": "secret"}
	get("fake chat", "/v1/chat/completions", `{"model":"gpt-x"}`, bearer)
	get("fake responses", "/v1/responses", `{"model":"gpt-x"}`, bearer)
	get("fake anthropic", "/v1/messages", `{"model":"claude-x"}`, anth)
	get("fake anthropic count", "/v1/messages/count_tokens", `{"model":"claude-x"}`, anth)
	get("fake google", "/v1beta/models/gemini-x:generateContent", `{}`, goog)
	get("fake google count", "/v1beta/models/gemini-x:countTokens", `{}`, goog)
	get("fake google array", "/v1beta/models/gemini-x:streamGenerateContent", `{}`, goog)
	return out
}

// randomBody is a random JSON value shaped like the formats' answers:
// mostly the members each reader looks for where it looks, with others
// around them, repeated members, values of the wrong type, escapes (in
// names too), surrogates and random whitespace.
func randomBody(r *rand.Rand) []byte {
	var b bytes.Buffer
	ws := func() {
		if r.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r\n  "}[r.IntN(4)])
		}
	}
	name := func(k string) {
		b.WriteByte('"')
		if r.IntN(10) == 0 && len(k) > 1 {
			i := r.IntN(len(k))
			fmt.Fprintf(&b, `%s\u%04x%s`, k[:i], k[i], k[i+1:])
		} else {
			b.WriteString(k)
		}
		b.WriteByte('"')
	}
	text := func() {
		b.WriteByte('"')
		for n := r.IntN(6); n > 0; n-- {
			b.WriteString(stringParts[r.IntN(len(stringParts))])
		}
		b.WriteByte('"')
	}
	var value func(parent string, depth int)
	object := func(parent string, depth int) {
		b.WriteByte('{')
		kids := bodyShape[parent]
		for i, n := 0, r.IntN(6); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			k := bodyNames[r.IntN(len(bodyNames))]
			if len(kids) > 0 && r.IntN(5) > 0 {
				k = kids[r.IntN(len(kids))]
			}
			name(k)
			ws()
			b.WriteByte(':')
			value(k, depth+1)
		}
		ws()
		b.WriteByte('}')
	}
	value = func(parent string, depth int) {
		ws()
		_, shaped := bodyShape[parent]
		k := r.IntN(10)
		switch {
		case depth > 7:
			k = 6 + r.IntN(4)
		case shaped && k < 7:
			if bodyArrays[parent] && k < 5 {
				k = 3 // an array of objects
			} else {
				k = 0
			}
		}
		switch {
		case k < 3:
			object(parent, depth)
		case k < 5:
			b.WriteByte('[')
			for i, n := 0, r.IntN(4); i < n; i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				ws()
				if r.IntN(4) > 0 {
					object(parent, depth+1)
				} else {
					value(parent, depth+1)
				}
				ws()
			}
			ws()
			b.WriteByte(']')
		case k < 8:
			text()
		case k < 9:
			b.WriteString([]string{"0", "-12", "3.5e2", "7", "1E-2", "12345678901234567890", "-0.0", "9007199254740993", "1e400"}[r.IntN(9)])
		default:
			b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
		}
		ws()
	}
	if r.IntN(5) == 0 {
		// Google's stream read whole: an array of responses.
		b.WriteByte('[')
		for i, n := 0, r.IntN(4); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			value("", 1)
		}
		b.WriteByte(']')
	} else {
		value("", 0)
	}
	return b.Bytes()
}

// bodyShape lists the members the readers look for in each member's
// value; bodyArrays the members whose value is an array of objects.
var bodyShape = map[string][]string{
	"":           {"model", "usage", "choices", "output", "content", "candidates", "usageMetadata", "modelVersion", "promptFeedback"},
	"choices":    {"message", "delta", "finish_reason"},
	"message":    {"content", "refusal", "reasoning_content", "reasoning", "tool_calls"},
	"tool_calls": {"function", "id"},
	"function":   {"arguments", "name"},
	"output":     {"arguments", "content", "summary", "type"},
	"content":    {"text", "thinking", "input", "parts", "type"},
	"summary":    {"text"},
	"candidates": {"content", "finishReason"},
	"parts":      {"text", "thought"},
	"usage": {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cache_read_input_tokens", "prompt_tokens_details",
		"completion_tokens_details", "prompt_cache_hit_tokens", "input_tokens_details", "output_tokens_details", "cache_creation_input_tokens"},
	"usageMetadata":             {"promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount", "cachedContentTokenCount", "toolUsePromptTokenCount"},
	"prompt_tokens_details":     {"cached_tokens", "audio_tokens"},
	"completion_tokens_details": {"reasoning_tokens", "audio_tokens"},
	"input_tokens_details":      {"cached_tokens"},
	"output_tokens_details":     {"reasoning_tokens"},
}

var bodyArrays = map[string]bool{"choices": true, "tool_calls": true, "output": true, "content": true, "summary": true, "candidates": true, "parts": true}

var bodyNames = []string{"model", "usage", "choices", "message", "content", "refusal", "reasoning_content", "reasoning",
	"tool_calls", "function", "arguments", "output", "summary", "text", "thinking", "input", "usageMetadata",
	"modelVersion", "candidates", "parts", "finishReason", "promptFeedback", "prompt_tokens", "completion_tokens",
	"input_tokens", "output_tokens", "promptTokenCount", "candidatesTokenCount", "cache_read_input_tokens", "x",
	"cached_tokens", "reasoning_tokens", "prompt_tokens_details", "completion_tokens_details"}

var stringParts = []string{"a", "héllo", `\"`, `\\`, `\/`, `\b\f\n\r\t`, `\u0041`, `\u00e9`, `\u20ac`, `\ud83d\ude00`,
	`\ud83d`, `\ude00`, `\ud83d\n`, `\ud83d\u0041`, `\ude00\ud83d`, `\ud83d\ud83d\ude00`, "{", "[", "usage", `\u0000`, "\xff",
	`\"usage\":{\"prompt_tokens\":5}`}

// FuzzBodyMeter: any body, in any pieces, under any format and cap, is
// read exactly as the oracle reads it whole.
func FuzzBodyMeter(f *testing.F) {
	for _, g := range goldens {
		f.Add(fixture(f, g.file), uint8(g.opts.Format), uint16(0), uint16(7))
	}
	for i, c := range bodyCases {
		f.Add([]byte(c), uint8(i), uint16(i*13), uint16(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, format uint8, cap, split uint16) {
		opts := MeterOptions{Format: Format(int(format)%Count() + 1), ContentType: "application/json",
			RequestBytes: int64(len(data)), MaxBodyBytes: int(cap)}
		want := oracleBody(data, opts)
		var cuts []int
		step := int(split%97) + 1
		for c := 0; c < len(data); c += step {
			cuts = append(cuts, c)
			step = step*7%97 + 1
		}
		if got := meterBody(t, data, opts, cuts); got != want {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})
}

// BenchmarkMeterBody reads non-stream answers (the Chat fixture, and a
// 64 KB one) written in 16 KB pieces, with meters reused as the gateway
// reuses them; "oracle" is the same read kept whole and parsed at the end,
// as it was.
func BenchmarkMeterBody(b *testing.B) {
	long := []byte(`{"model":"m","choices":[{"message":{"content":"` + strings.Repeat("lorem ipsum \u00e9 ", 4096) +
		`"}}],"usage":{"prompt_tokens":7,"completion_tokens":9}}`)
	for _, in := range []struct {
		name string
		body []byte
	}{{"chat.json", fixture(b, "chat.json")}, {"64KB", long}} {
		opts := MeterOptions{Format: Chat, ContentType: "application/json"}
		b.Run(in.name+"/scan", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.body)))
			for b.Loop() {
				m := NewMeter(io.Discard, opts)
				for p := in.body; len(p) > 0; p = p[min(len(p), 16<<10):] {
					m.Write(p[:min(len(p), 16<<10)])
				}
				if !m.Result().Complete {
					b.Fatal("incomplete")
				}
				m.Release() // as the gateway does
			}
		})
		b.Run(in.name+"/oracle", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.body)))
			for b.Loop() {
				var kept []byte
				for p := in.body; len(p) > 0; p = p[min(len(p), 16<<10):] {
					kept = append(kept, p[:min(len(p), 16<<10)]...)
				}
				if !oracleBody(kept, opts).Complete {
					b.Fatal("incomplete")
				}
			}
		})
	}
}

// parseCaptured makes of every value the Result gjson.Parse makes of it,
// its fast path (whole numbers of up to 15 digits) included.
func TestParseCaptured(t *testing.T) {
	values := []string{"0", "7", "42", "123456789012345", "999999999999999", "1234567890123456",
		"9007199254740993", "00", "01", "-1", "-0", "1.0", "1e3", "1E3", "12a", "", " 1", "1 ",
		`"12"`, "true", "false", "null", "{}", `{"a":1}`, "[1]", "+1"}
	for k := 1; k <= 18; k++ {
		values = append(values, strings.Repeat("9", k), "1"+strings.Repeat("0", k-1))
	}
	for _, v := range values {
		if got, want := parseCaptured(v), gjson.Parse(v); !reflect.DeepEqual(got, want) {
			t.Errorf("parseCaptured(%q) = %+v, gjson.Parse: %+v", v, got, want)
		}
	}
}

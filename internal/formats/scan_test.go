package formats

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/agentgate/agentgate/internal/apierr"
)

// The reference: how the gateway read and edited bodies before ScanBody
// and Body (gjson.ValidBytes, then a gjson walk of the top-level members,
// then sjson edits that copied the body). FuzzScanBody checks the new
// pass against it.

func refValid(body []byte) bool {
	if !gjson.ValidBytes(body) {
		return false
	}
	for _, c := range body {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

func refScanFields(body []byte, format Format) (f Fields) {
	f.format = format
	fold := format.w().foldsKeys()
	keys := keySet{fold: fold}
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		if keys.add(k.Str) {
			f.duplicate = strings.Clone(k.Str)
			return false
		}
		var dst *gjson.Result
		nested := false
		switch k.Str {
		case "model":
			dst = &f.model
		case "stream":
			dst = &f.stream
		case "stream_options":
			dst, nested = &f.streamOptions, true
		case "max_tokens":
			dst = &f.maxTokens
		case "max_completion_tokens":
			dst = &f.maxCompletionTokens
		case "max_output_tokens":
			dst = &f.maxOutput
		case "generationConfig":
			dst, nested = &f.generationConfig, true
		case "generation_config":
			dst, nested = &f.generationConfigSnakeCase, true
		default:
			if name := readKeyVariant(k.Str, fold); name != "" {
				f.variant, f.variantOf = strings.Clone(k.Str), name
				return false
			}
			return true
		}
		if nested {
			if d := refDuplicateKey(v, fold, 1); d != "" {
				f.duplicate = k.Str + "." + d
				return false
			}
		}
		v.Raw, v.Str = strings.Clone(v.Raw), strings.Clone(v.Str)
		*dst = v
		return true
	})
	return f
}

func refDuplicateKey(obj gjson.Result, fold bool, depth int) (dup string) {
	if !obj.IsObject() {
		return ""
	}
	keys := keySet{fold: fold}
	obj.ForEach(func(k, v gjson.Result) bool {
		if keys.add(k.Str) {
			dup = strings.Clone(k.Str)
			return false
		}
		if depth > 0 && (k.Str == "thinkingConfig" || k.Str == "thinking_config") {
			if d := refDuplicateKey(v, fold, depth-1); d != "" {
				dup = k.Str + "." + d
				return false
			}
		}
		return true
	})
	return dup
}

func refRewrite(r Route, body []byte, f *Fields, requested, upstream string) ([]byte, *apierr.Error) {
	if r.Format != Google {
		if upstream == requested {
			return body, nil
		}
		out, err := sjson.SetBytes(body, "model", upstream)
		if err != nil {
			return nil, apierr.BadRequest("the model cannot be rewritten")
		}
		return out, nil
	}
	body, e := refGoogleBodyModel(body, f.model, "model", requested, upstream)
	if e != nil || r.Op != CountTokens {
		return body, e
	}
	outer := "generateContentRequest"
	gcr := gjson.GetBytes(body, outer)
	if !gcr.Exists() {
		outer = "generate_content_request"
		if gcr = gjson.GetBytes(body, outer); !gcr.Exists() {
			return body, nil
		}
	}
	if d := refDuplicateKey(gcr, true, 0); d != "" {
		return nil, apierr.BadRequest("the request body repeats the key %q; send each key once", outer+"."+d)
	}
	return refGoogleBodyModel(body, gcr.Get("model"), outer+".model", requested, upstream)
}

func refGoogleBodyModel(body []byte, m gjson.Result, path, requested, upstream string) ([]byte, *apierr.Error) {
	if !m.Exists() {
		return body, nil
	}
	if m.Type != gjson.String || (m.Str != requested && m.Str != "models/"+requested) {
		return nil, apierr.BadRequest("%s must be the model of the path (%s)", path, requested)
	}
	if upstream == requested {
		return body, nil
	}
	rewritten := upstream
	if strings.HasPrefix(m.Str, "models/") {
		rewritten = "models/" + upstream
	}
	body, err := sjson.SetBytes(body, path, rewritten)
	if err != nil {
		return nil, apierr.BadRequest("the model cannot be rewritten")
	}
	return body, nil
}

func refPrepareStream(format Format, body []byte, f *Fields) ([]byte, bool) {
	if format != Chat || f.streamOptions.Get("include_usage").Bool() {
		return body, false
	}
	patched, err := sjson.SetBytes(body, "stream_options.include_usage", true)
	if err != nil {
		return body, false
	}
	return patched, true
}

// stricterOnly reports whether a body that gjson.ValidBytes accepts has
// what ScanBody refuses on purpose: invalid UTF-8 or nesting deeper than
// MaxDepth.
func stricterOnly(body []byte) bool {
	if !utf8.Valid(body) {
		return true
	}
	depth, deepest, inStr, esc := 0, 0, false, false
	for _, c := range body {
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest > MaxDepth
}

// surrogateEscape reports whether a body has a \u escape of a UTF-16
// surrogate, which gjson unescapes in keys differently from ScanBody (an
// unpaired one swallows the escape after it).
func surrogateEscape(body []byte) bool {
	for i := 0; i+6 <= len(body); i++ {
		if body[i] == '\\' && body[i+1] == 'u' && (body[i+2]|0x20) == 'd' && strings.IndexByte("89abAB", body[i+3]) >= 0 {
			return true
		}
	}
	return false
}

func sameResult(a, b gjson.Result) bool {
	return a.Type == b.Type && a.Raw == b.Raw && a.Str == b.Str && a.Index == b.Index &&
		(a.Num == b.Num || math.IsNaN(a.Num) && math.IsNaN(b.Num))
}

// FuzzScanBody checks ScanBody and Body against the reference: the same
// bodies accepted (except the stricter cases, documented on ScanBody), the
// same refusals and fields, and, through Rewrite and PrepareStream, the
// very bytes the sjson edits made, read whole, piece by piece and through
// WriteTo.
func FuzzScanBody(f *testing.F) {
	for _, name := range []string{"chat_request.json", "responses_request.json", "anthropic_request.json", "google_request.json"} {
		f.Add(fixture(f, name), uint8(0), "up")
	}
	f.Fuzz(func(t *testing.T, body []byte, sel uint8, upstream string) {
		format := Format(int(sel)%Count() + 1)
		route := Route{Format: format, Op: Generate}
		if sel&0x40 != 0 {
			route.Op = CountTokens
		}
		fs, ok := ScanBody(body, format)
		if want := refValid(body); ok != want {
			if ok || !stricterOnly(body) {
				t.Fatalf("ScanBody accepts %q: %v; gjson: %v", body, ok, want)
			}
		}
		if !ok {
			return
		}
		ref := refScanFields(body, format)
		if fs.Refusal() != nil || ref.Refusal() != nil {
			if surrogateEscape(body) {
				return
			}
			if fs.duplicate != ref.duplicate || fs.variant != ref.variant || fs.variantOf != ref.variantOf {
				t.Fatalf("%q: refusal %q/%q/%q, reference %q/%q/%q", body, fs.duplicate, fs.variant, fs.variantOf,
					ref.duplicate, ref.variant, ref.variantOf)
			}
			return
		}
		for i, pair := range [][2]gjson.Result{{fs.model, ref.model}, {fs.stream, ref.stream}, {fs.streamOptions, ref.streamOptions},
			{fs.maxTokens, ref.maxTokens}, {fs.maxCompletionTokens, ref.maxCompletionTokens}, {fs.maxOutput, ref.maxOutput},
			{fs.generationConfig, ref.generationConfig}, {fs.generationConfigSnakeCase, ref.generationConfigSnakeCase}} {
			if !sameResult(pair[0], pair[1]) {
				t.Fatalf("%q: field %d is %+v, reference %+v", body, i, pair[0], pair[1])
			}
		}
		kept := fs
		kept.Keep()
		if !sameResult(kept.model, fs.model) || !sameResult(kept.streamOptions, fs.streamOptions) {
			t.Fatalf("%q: Keep changed the fields", body)
		}

		requested := route.Model
		if format.ModelInPath() {
			requested = strings.TrimPrefix(fs.model.Str, "models/")
			route.Model = requested
		} else if fs.model.Type == gjson.String {
			requested = fs.model.Str
		} else {
			return // refused before any rewrite
		}
		b := NewBody(body)
		e := route.Rewrite(&b, &fs, requested, upstream)
		want, refE := refRewrite(route, bytes.Clone(body), &ref, requested, upstream)
		if (e == nil) != (refE == nil) || (e != nil && e.Message != refE.Message) {
			t.Fatalf("%q: rewrite %v, reference %v", body, e, refE)
		}
		if e != nil {
			return
		}
		checkBodyPieces(t, &b, want)
		drop := route.PrepareStream(&b, &fs)
		want, refDrop := refPrepareStream(format, want, &ref)
		if drop != refDrop {
			t.Fatalf("%q: drop %v, reference %v", body, drop, refDrop)
		}
		checkBodyPieces(t, &b, want)
	})
}

// checkBody checks that b reads as want, whole and in pieces.
func checkBodyPieces(t *testing.T, b *Body, want []byte) {
	t.Helper()
	if got := b.Bytes(); !bytes.Equal(got, want) || b.Len() != len(want) {
		t.Fatalf("body %q (length %d), want %q", got, b.Len(), want)
	}
	var r BodyReader
	r.Reset(b)
	var got []byte
	buf := make([]byte, 3)
	for {
		if r.Len() != len(want)-len(got) {
			t.Fatalf("Len %d with %d of %d read", r.Len(), len(got), len(want))
		}
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil || n == 0 {
			t.Fatalf("Read: %d, %v", n, err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	r.Reset(b)
	var w bytes.Buffer
	if n, err := r.WriteTo(&w); err != nil || n != int64(len(want)) || !bytes.Equal(w.Bytes(), want) {
		t.Fatalf("WriteTo: %d, %v, %q", n, err, w.Bytes())
	}
}

// Cases the fuzzer would take long to find: each documented difference
// from gjson, deep nesting, and the edits at the edges of the body.
func TestScanBodyAcceptance(t *testing.T) {
	deep := func(n int, open, close string) []byte {
		return []byte(`{"a":` + strings.Repeat(open, n-1) + strings.Repeat(close, n-1) + `}`)
	}
	for _, c := range []struct {
		body     []byte
		accepted bool
	}{
		{[]byte(`{}`), true},
		{[]byte(" \t\r\n{ \"a\" : [ 1 , -0.5e+3 , true , false , null , \"\\u00e9\\n\" , { } , [ ] ] }\n"), true},
		{[]byte(`{"a":"é☃😀"}`), true},
		{[]byte("{\"a\":\"\x7f\"}"), true},
		{[]byte("{\"a\":\"\xff\"}"), false},         // invalid UTF-8: gjson accepts it
		{[]byte("{\"a\":\"\xed\xa0\x80\"}"), false}, // an encoded surrogate: gjson accepts it
		{[]byte("{\"a\":\"\xc0\xaf\"}"), false},     // overlong: gjson accepts it
		{[]byte("{\"\xe9\":1}"), false},             // in a key too
		{[]byte(`{"a":"\ud800"}`), true},            // an unpaired surrogate escape is JSON
		{deep(MaxDepth, "[", "]"), true},            // MaxDepth levels with the top-level object
		{deep(MaxDepth+1, "[", "]"), false},         // gjson accepts it
		{deep(MaxDepth+1, `{"b":`, "}"), false},     // gjson accepts it
		{[]byte(`{"generationConfig":{"thinkingConfig":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}}`), false},
		{[]byte(`{"a":1,}`), false},
		{[]byte(`{"a":[1,]}`), false},
		{[]byte(`{"a":01}`), false},
		{[]byte(`{"a":1.}`), false},
		{[]byte(`{"a":.5}`), false},
		{[]byte(`{"a":1e}`), false},
		{[]byte(`{"a":-}`), false},
		{[]byte(`{"a":+1}`), false},
		{[]byte(`{"a":tru}`), false},
		{[]byte(`{"a":"\x"}`), false},
		{[]byte(`{"a":"\u12g4"}`), false},
		{[]byte("{\"a\":\"\t\"}"), false},
		{[]byte(`{"a" 1}`), false},
		{[]byte(`{"a":1}}`), false},
		{[]byte(`{"a":1} x`), false},
		{[]byte(`{"a":[}`), false},
		{[]byte(`{"a":{]}`), false},
		{[]byte(`{"a":"`), false},
		{[]byte(`{`), false},
		{[]byte(`[]`), false},
		{[]byte(``), false},
		{[]byte(`{"model":"m","stream_options":{"include_usage":tru}}`), false},
	} {
		if _, ok := ScanBody(c.body, Chat); ok != c.accepted {
			t.Errorf("ScanBody(%.60q) accepts: %v, want %v", c.body, ok, c.accepted)
		}
		if ok := refValid(c.body); ok != c.accepted && !stricterOnly(c.body) {
			t.Errorf("%.60q: not a documented difference from gjson", c.body)
		}
	}
}

// The edits give sjson's bytes at the edges: whitespace around the
// object, an empty object, stream_options of every shape, a model that
// needs escaping, and both edits in either order.
func TestBodyEditsAsSjson(t *testing.T) {
	for _, c := range []struct {
		body, upstream string
		format         Format
		op             Op
	}{
		{` {"model":"a"} ` + "\n", "b", Chat, Generate},
		{`{"stream_options":{},"model":"a"}`, "b", Chat, Generate},
		{`{"model":"a","stream_options":{ "x":1 } }`, "b\"<é>\x01", Chat, Generate},
		{`{"model":"a","stream_options":{"include_usage":false}}`, "a", Chat, Generate},
		{`{"model":"a","stream_options":null}`, "b", Chat, Generate},
		{`{"model":"a","stream_options":"x"}`, "b", Chat, Generate},
		{`{"model":"a","stream_options":[]}`, "b", Chat, Generate},
		{`{"stream_options":{"include_usage":true},"model":"a"}`, "b", Chat, Generate},
		{`{"mod\u0065l":"a"}`, "b", Responses, Generate},
		{`{"model":"a\u00e9"}`, "b", Anthropic, Generate},
		{`{"model":"models/a","generateContentRequest":{"model":"a","contents":[]}}`, "b", Google, CountTokens},
		{`{"generate_content_request":{"contents":[],"model":"models/a"}}`, "b", Google, CountTokens},
		{`{"generate_content_request":{"model":"models/a","model":"x"}}`, "b", Google, CountTokens},
		{`{"generateContentRequest":{"model":"x"}}`, "b", Google, CountTokens},
		{`{"model":"a","contents":[]}`, "b/é", Google, Generate},
	} {
		route := Route{Format: c.format, Op: c.op}
		requested := "a"
		if c.format == Google {
			route.Model = "a"
		}
		body := []byte(c.body)
		fs, ok := ScanBody(body, c.format)
		if !ok || fs.Refusal() != nil {
			t.Fatalf("%s: not scanned", c.body)
		}
		b := NewBody(body)
		e := route.Rewrite(&b, &fs, requested, c.upstream)
		ref := refScanFields(body, c.format)
		want, refE := refRewrite(route, bytes.Clone(body), &ref, requested, c.upstream)
		if (e == nil) != (refE == nil) || e != nil && e.Message != refE.Message {
			t.Fatalf("%s: rewrite %v, reference %v", c.body, e, refE)
		}
		if e != nil {
			continue
		}
		checkBodyPieces(t, &b, want)
		drop := route.PrepareStream(&b, &fs)
		want, refDrop := refPrepareStream(c.format, want, &ref)
		if drop != refDrop {
			t.Fatalf("%s: drop %v, reference %v", c.body, drop, refDrop)
		}
		checkBodyPieces(t, &b, want)
		if !json.Valid(b.Bytes()) {
			t.Fatalf("%s: edited into %s", c.body, b.Bytes())
		}
	}
}

// An ordinary body is read in place: no allocation at all.
func TestScanBodyAllocations(t *testing.T) {
	body := fixture(t, "chat_request.json")
	if n := testing.AllocsPerRun(100, func() { ScanBody(body, Chat) }); n != 0 {
		t.Fatalf("%v allocations per scan", n)
	}
	fs, _ := ScanBody(body, Chat)
	b := new(Body) // in the gateway, a member of the call
	n := testing.AllocsPerRun(100, func() {
		*b = NewBody(body)
		Route{Format: Chat}.Rewrite(b, &fs, fs.model.Str, "another-model")
		Route{Format: Chat}.PrepareStream(b, &fs)
	})
	if !b.Edited() {
		t.Fatal("not edited")
	}
	if n != 0 {
		t.Fatalf("%v allocations per rewrite", n)
	}
}

// benchBodies are a Chat request of about 1 KB (the gateway benchmark's)
// and one of about 1 MB.
func benchBodies() map[string][]byte {
	small := []byte(`{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"` +
		strings.Repeat("lorem ipsum ", 78) + `"}]}`)
	var big bytes.Buffer
	big.WriteString(`{"model":"gpt-4o-mini","max_tokens":64,"stream":true,"messages":[`)
	for i := 0; big.Len() < 1<<20; i++ {
		if i > 0 {
			big.WriteByte(',')
		}
		big.WriteString(`{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet, ", 40) + `\n\"quoted\" \u00e9 é"}`)
	}
	big.WriteString(`]}`)
	return map[string][]byte{"1KB": small, "1MB": big.Bytes()}
}

// BenchmarkScan compares reading a body's fields in one pass (ScanBody)
// with the passes it replaces (gjson.ValidBytes, then the gjson walk of
// ScanFields), and the rewrite of the model and stream options as Body
// edits with the sjson copies it replaces.
//
//	go test ./internal/formats -run '^$' -bench Scan -benchmem
func BenchmarkScan(b *testing.B) {
	for name, body := range benchBodies() {
		b.Run("ScanBody/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, ok := ScanBody(body, Chat); !ok {
					b.Fatal("refused")
				}
			}
		})
		b.Run("ValidBytes+ScanFields/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !refValid(body) {
					b.Fatal("refused")
				}
				refScanFields(body, Chat)
			}
		})
		b.Run("BodyEdits/"+name, func(b *testing.B) {
			fs, _ := ScanBody(body, Chat)
			var r BodyReader
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				out := NewBody(body)
				Route{Format: Chat}.Rewrite(&out, &fs, "gpt-4o-mini", "gpt-4o-mini-2024-07-18")
				Route{Format: Chat}.PrepareStream(&out, &fs)
				r.Reset(&out)
				r.WriteTo(io.Discard)
			}
		})
		b.Run("SjsonEdits/"+name, func(b *testing.B) {
			fs := refScanFields(body, Chat)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				out, _ := refRewrite(Route{Format: Chat}, body, &fs, "gpt-4o-mini", "gpt-4o-mini-2024-07-18")
				out, _ = refPrepareStream(Chat, out, &fs)
				io.Copy(io.Discard, bytes.NewReader(out))
			}
		})
	}
}

// readKeyVariant's shortcut for a key in lower case agrees with keysEqual:
// such a key is another spelling of a read key only when it is that key in
// lower case (generationconfig).
func TestReadKeyVariantLowerCase(t *testing.T) {
	for _, fold := range []bool{false, true} {
		for _, k := range []string{"generationconfig", "messages", "model", "stream", "max_tokens", "maxtokens", "generation_config", "streams", "m", "s"} {
			want := ""
			for _, name := range readKeys {
				if keysEqual(k, name, fold) {
					want = name
					break
				}
			}
			if got := readKeyVariant(k, fold); got != want {
				t.Errorf("readKeyVariant(%q, %v) = %q, want %q", k, fold, got, want)
			}
		}
	}
}

package gateway

import (
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// fields are the top-level members of a request body that the gateway
// reads, found in one pass over the body instead of one search per member
// (a search for an absent member reads the whole body).
//
// A body that repeats a key is refused (duplicate names it): the gateway
// would read and rewrite one copy while the provider's parser, which keeps
// the last, acts on the other — a model that is not enabled, served at an
// enabled model's price, or a stream metered as a plain answer.
type fields struct {
	model, stream, streamOptions                gjson.Result
	maxTokens, maxCompletionTokens, maxOutput   gjson.Result
	generationConfig, generationConfigSnakeCase gjson.Result
	// duplicate is a key that the body repeats, or "".
	duplicate string
	// variant is a top-level key that is another spelling (by the rules of
	// keySet) of variantOf, a key the gateway reads: the gateway would not
	// see it, a provider might.
	variant, variantOf string
}

// refusal is why the body is refused, or nil.
func (f *fields) refusal() *failure {
	if f.duplicate != "" {
		return fail(http.StatusBadRequest, "InvalidRequest", "the request body repeats the key %q; send each key once", f.duplicate)
	}
	if f.variant != "" {
		return fail(http.StatusBadRequest, "InvalidRequest", "the request body has the key %q, another spelling of %q; send it as %q", f.variant, f.variantOf, f.variantOf)
	}
	return nil
}

// readKeys are the top-level keys the gateway reads.
var readKeys = [...]string{"model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens",
	"generationConfig", "generation_config"}

// readKeyVariant returns the key the gateway reads that k is another
// spelling of, or "". Only keys whose first letter could fold to m, s or g
// are compared.
func readKeyVariant(k string, google bool) string {
	if k == "" {
		return ""
	}
	if c := k[0] | 0x20; c != 'm' && c != 's' && c != 'g' && k[0] < utf8.RuneSelf {
		return ""
	}
	for _, name := range readKeys {
		if keysEqual(k, name, google) {
			return name
		}
	}
	return ""
}

// scanFields reads the members of a body that readBody validated as a
// JSON object. It reads the body in place (gjson.ParseBytes would copy it
// whole) and copies out only the members it keeps, which must outlive the
// body's buffer (a pooled buffer is reused after the request). google
// makes the two spellings of a Google field name (generationConfig and
// generation_config) count as the same key.
//
// In the same pass it checks that no key repeats, in the top-level object
// and in the nested objects the gateway reads (stream_options and the
// generation config with its thinking config), and that no top-level key
// is another spelling of one the gateway reads ("Stream" alone would be
// missed here and honoured by a provider whose decoder ignores case).
func scanFields(body []byte, google bool) (f fields) {
	keys := keySet{google: google}
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		if keys.add(k.Str) {
			f.duplicate = strings.Clone(k.Str)
			return false
		}
		var dst *gjson.Result
		nested := false // an object whose own keys must not repeat either
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
			if name := readKeyVariant(k.Str, google); name != "" {
				f.variant, f.variantOf = strings.Clone(k.Str), name
				return false
			}
			return true
		}
		if nested {
			if d := duplicateKey(v, google, 1); d != "" {
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

// duplicateKey returns a key that an object repeats (as a dotted path), or
// "". depth > 0 also looks into a thinking config object.
func duplicateKey(obj gjson.Result, google bool, depth int) (dup string) {
	if !obj.IsObject() {
		return ""
	}
	keys := keySet{google: google}
	obj.ForEach(func(k, v gjson.Result) bool {
		if keys.add(k.Str) {
			dup = strings.Clone(k.Str)
			return false
		}
		if depth > 0 && (k.Str == "thinkingConfig" || k.Str == "thinking_config") {
			if d := duplicateKey(v, google, depth-1); d != "" {
				dup = k.Str + "." + d
				return false
			}
		}
		return true
	})
	return dup
}

// keySet holds the keys of one JSON object seen so far. Keys are equal
// when they are equal after JSON unescaping (gjson unescapes them) and
// Unicode case folding, since some providers' JSON decoders match names
// without regard to case; for Google, also when they differ only in the
// snake_case and lowerCamelCase spellings of a name, which Google's parser
// takes as the same field. The first keys are compared in place against an
// array (no allocation for an ordinary body); past that a map of
// canonical forms takes over.
type keySet struct {
	google bool
	n      int
	few    [32]string
	many   map[string]struct{}
}

// add records k and reports whether an equal key was already there.
func (s *keySet) add(k string) (seen bool) {
	if s.many != nil {
		c := canonicalKey(k, s.google)
		if _, ok := s.many[c]; ok {
			return true
		}
		s.many[c] = struct{}{}
		return false
	}
	for _, o := range s.few[:s.n] {
		if keysEqual(o, k, s.google) {
			return true
		}
	}
	if s.n < len(s.few) {
		s.few[s.n] = k
		s.n++
		return false
	}
	s.many = make(map[string]struct{}, 2*len(s.few))
	for _, o := range s.few {
		s.many[canonicalKey(o, s.google)] = struct{}{}
	}
	s.many[canonicalKey(k, s.google)] = struct{}{}
	return false
}

// nextKeyRune returns the canonical rune of a key at byte i and the index
// after it: case folded, and for Google an underscore before an ASCII
// letter dropped (max_output_tokens reads as maxOutputTokens).
func nextKeyRune(s string, i int, google bool) (rune, int) {
	c := s[i]
	if google && c == '_' && i+1 < len(s) && ('a' <= s[i+1]|0x20 && s[i+1]|0x20 <= 'z') {
		i++
		c = s[i]
	}
	if c < utf8.RuneSelf {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return rune(c), i + 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	return unicode.ToLower(unicode.ToUpper(r)), i + size
}

func keysEqual(a, b string, google bool) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		var ra, rb rune
		ra, i = nextKeyRune(a, i, google)
		rb, j = nextKeyRune(b, j, google)
		if ra != rb {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

func canonicalKey(k string, google bool) string {
	var b strings.Builder
	b.Grow(len(k))
	for i := 0; i < len(k); {
		var r rune
		r, i = nextKeyRune(k, i, google)
		b.WriteRune(r)
	}
	return b.String()
}

package formats

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
)

// Fields are the top-level members of a request body that the gateway
// reads, found in one pass over the body instead of one search per member
// (a search for an absent member reads the whole body).
//
// A body that repeats a key is refused (duplicate names it): the gateway
// would read and rewrite one copy while the provider's parser, which keeps
// the last, acts on the other — a model that is not enabled, served at an
// enabled model's price, or a stream metered as a plain answer.
type Fields struct {
	format                                      Format
	model, stream, streamOptions                gjson.Result
	maxTokens, maxCompletionTokens, maxOutput   gjson.Result
	generationConfig, generationConfigSnakeCase gjson.Result
	// duplicate is a key that the body repeats, or "".
	duplicate string
	// variant is a top-level key that is another spelling (by the rules of
	// keySet) of variantOf, a key the gateway reads: the gateway would not
	// see it, a provider might.
	variant, variantOf string
	// countRequest is the request a Google token count wraps, under
	// countKey (generateContentRequest, either spelling), and
	// countDuplicate a key that it repeats.
	countRequest             gjson.Result
	countKey, countDuplicate string
	// open and close are the offsets of the top-level object's braces.
	open, close int
}

// Refusal is why the body is refused before anything else is read from
// it, or nil.
func (f *Fields) Refusal() *apierr.Error {
	if f.duplicate != "" {
		return apierr.BadRequest("the request body repeats the key %q; send each key once", f.duplicate)
	}
	if f.variant != "" {
		return apierr.BadRequest("the request body has the key %q, another spelling of %q; send it as %q", f.variant, f.variantOf, f.variantOf)
	}
	return nil
}

// BodyModel is the body's "model" as a string ("" when absent), for the
// usage record of a request refused before its model is checked.
func (f *Fields) BodyModel() string { return f.model.String() }

// Stream reports whether the body asks for a stream.
func (f *Fields) Stream() bool { return f.stream.Bool() }

// OutputLimit is the request's own bound on output tokens, 0 when it sets
// none. Route.Check refuses a bound that is not a whole count from 0 to
// MaxCount; unchecked, such a bound reads as math.MaxInt64.
func (f *Fields) OutputLimit() int64 { return f.format.w().outputLimit(f) }

// ExtraOutput is output the request allows beyond OutputLimit (a thinking
// budget), 0 when none, at most MaxCount once Route.Check passed (else up
// to math.MaxInt64, like OutputLimit).
func (f *Fields) ExtraOutput() int64 { return f.format.w().extraOutput(f) }

// RequestedModel is the model a request asks for: the path's, or else the
// body's "model", which must be a non-empty string.
func (r Route) RequestedModel(f *Fields) (string, *apierr.Error) {
	if r.Format.w().modelInPath() {
		return r.Model, nil
	}
	m := f.model
	if !m.Exists() {
		return "", apierr.BadRequest("model is required")
	}
	if m.Type != gjson.String || m.Str == "" {
		return "", apierr.BadRequest("model must be a non-empty string")
	}
	return m.Str, nil
}

// Check refuses a request that lacks a field the format requires (one the
// gateway relies on, such as an output limit), before its model is looked
// up.
func (r Route) Check(f *Fields) *apierr.Error { return r.Format.w().check(r, f) }

// Rewrite checks the model a body names and rewrites it from requested to
// upstream in b, keeping every other byte; a model in the path is
// rewritten by UpstreamPath. b must be made of the body f was scanned
// from.
func (r Route) Rewrite(b *Body, f *Fields, requested, upstream string) *apierr.Error {
	return r.Format.w().rewrite(r, b, f, requested, upstream)
}

// PrepareStream edits a streamed request so that its answer reports usage.
// drop says that the client did not ask for that usage, and a Meter must
// hide it (MeterOptions.DropUsageChunk).
func (r Route) PrepareStream(b *Body, f *Fields) (drop bool) {
	return r.Format.w().prepareStream(b, f)
}

// rewriteBodyModel sets the body's "model" to upstream when it differs
// from the requested model.
func rewriteBodyModel(b *Body, f *Fields, requested, upstream string) *apierr.Error {
	if upstream == requested {
		return nil
	}
	if !b.setString(f.model, "", upstream) {
		return apierr.BadRequest("the model cannot be rewritten")
	}
	return nil
}

// readKeys are the top-level keys the gateway reads.
var readKeys = [...]string{"model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens",
	"generationConfig", "generation_config"}

// readKeysLower are readKeys in lower case.
var readKeysLower = func() (l [len(readKeys)]string) {
	for i, k := range readKeys {
		l[i] = strings.ToLower(k)
	}
	return l
}()

// readKeyVariant returns the key the gateway reads that k is another
// spelling of, or "". Only keys whose first letter could fold to m, s or g
// are compared.
func readKeyVariant(k string, fold bool) string {
	if k == "" {
		return ""
	}
	if c := k[0] | 0x20; c != 'm' && c != 's' && c != 'g' && k[0] < utf8.RuneSelf {
		return ""
	}
	if !fold && lowerASCII(k) {
		// Folding leaves k as it is: it is another spelling of a key
		// only if it is that key in lower case.
		for i, name := range readKeysLower {
			if k == name {
				return readKeys[i]
			}
		}
		return ""
	}
	for _, name := range readKeys {
		if keysEqual(k, name, fold) {
			return name
		}
	}
	return ""
}

// lowerASCII reports whether s has no upper-case letter and no byte
// outside ASCII: whether Unicode case folding leaves it as it is.
func lowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// ScanFields reads the members of a request body of format f, which the
// caller validated as a JSON object, as ScanBody does, and copies out the
// members it keeps (Keep), so that they outlive the body's buffer.
//
// In the same pass it checks that no key repeats, in the top-level object
// and in the nested objects the gateway reads (stream_options and the
// generation config with its thinking config), and that no top-level key
// is another spelling of one the gateway reads ("Stream" alone would be
// missed here and honoured by a provider whose decoder ignores case).
func ScanFields(body []byte, format Format) Fields {
	f, _ := ScanBody(body, format)
	f.Keep()
	return f
}

// Keep copies the members the Fields hold out of the body they were
// scanned from, which may then be reused. Offsets into the body (each
// member's Index) stay as they were.
func (f *Fields) Keep() {
	for _, v := range [...]*gjson.Result{&f.model, &f.stream, &f.streamOptions, &f.maxTokens, &f.maxCompletionTokens,
		&f.maxOutput, &f.generationConfig, &f.generationConfigSnakeCase, &f.countRequest} {
		keepResult(v)
	}
}

// KeepModel copies the body's model (BodyModel, and RequestedModel's
// answer) out of the body, like Keep but for the model alone.
func (f *Fields) KeepModel() { keepResult(&f.model) }

// keepResult copies a value's text; a string without escapes is read from the
// copy.
func keepResult(v *gjson.Result) {
	if v.Raw == "" {
		return
	}
	raw := strings.Clone(v.Raw)
	if v.Type == gjson.String && len(v.Str) == len(raw)-2 && raw[1:len(raw)-1] == v.Str {
		v.Str = raw[1 : len(raw)-1]
	} else if v.Str != "" {
		v.Str = strings.Clone(v.Str)
	}
	v.Raw = raw
}

// keySet holds the keys of one JSON object seen so far. Keys are equal
// when they are equal after JSON unescaping (ScanBody unescapes them) and
// Unicode case folding, since some providers' JSON decoders match names
// without regard to case; for a format that folds keys, also when they
// differ only in the snake_case and lowerCamelCase spellings of a name,
// which its parser takes as the same field. The first keys are compared in place against an
// array (no allocation for an ordinary body); past that a map of
// canonical forms takes over.
type keySet struct {
	fold bool
	n    int
	few  [32]string
	many map[string]struct{}
}

// add records k and reports whether an equal key was already there.
func (s *keySet) add(k string) (seen bool) {
	if s.many != nil {
		c := canonicalKey(k, s.fold)
		if _, ok := s.many[c]; ok {
			return true
		}
		s.many[c] = struct{}{}
		return false
	}
	for _, o := range s.few[:s.n] {
		if keysEqual(o, k, s.fold) {
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
		s.many[canonicalKey(o, s.fold)] = struct{}{}
	}
	s.many[canonicalKey(k, s.fold)] = struct{}{}
	return false
}

// nextKeyRune returns the canonical rune of a key at byte i and the index
// after it: case folded, and when fold is set an underscore before an
// ASCII letter dropped (max_output_tokens reads as maxOutputTokens).
func nextKeyRune(s string, i int, fold bool) (rune, int) {
	c := s[i]
	if fold && c == '_' && i+1 < len(s) && ('a' <= s[i+1]|0x20 && s[i+1]|0x20 <= 'z') {
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

func keysEqual(a, b string, fold bool) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		var ra, rb rune
		ra, i = nextKeyRune(a, i, fold)
		rb, j = nextKeyRune(b, j, fold)
		if ra != rb {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

func canonicalKey(k string, fold bool) string {
	var b strings.Builder
	b.Grow(len(k))
	for i := 0; i < len(k); {
		var r rune
		r, i = nextKeyRune(k, i, fold)
		b.WriteRune(r)
	}
	return b.String()
}

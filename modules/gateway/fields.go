package gateway

import (
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// fields are the top-level members of a request body that the gateway
// reads, found in one pass over the body instead of one search per member
// (a search for an absent member reads the whole body). As with
// gjson.Get, the first of duplicate members counts.
type fields struct {
	model, stream, streamOptions                gjson.Result
	maxTokens, maxCompletionTokens, maxOutput   gjson.Result
	generationConfig, generationConfigSnakeCase gjson.Result
}

// scanFields reads the members of a body that readBody validated as a
// JSON object. It reads the body in place (gjson.ParseBytes would copy it
// whole) and copies out only the members it keeps, which must outlive the
// body's buffer (a pooled buffer is reused after the request).
func scanFields(body []byte) (f fields) {
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		var dst *gjson.Result
		switch k.Str {
		case "model":
			dst = &f.model
		case "stream":
			dst = &f.stream
		case "stream_options":
			dst = &f.streamOptions
		case "max_tokens":
			dst = &f.maxTokens
		case "max_completion_tokens":
			dst = &f.maxCompletionTokens
		case "max_output_tokens":
			dst = &f.maxOutput
		case "generationConfig":
			dst = &f.generationConfig
		case "generation_config":
			dst = &f.generationConfigSnakeCase
		default:
			return true
		}
		if !dst.Exists() {
			v.Raw, v.Str = strings.Clone(v.Raw), strings.Clone(v.Str)
			*dst = v
		}
		return true
	})
	return f
}

package gateway

import "github.com/tidwall/gjson"

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
// JSON object.
func scanFields(body []byte) (f fields) {
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
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
			*dst = v
		}
		return true
	})
	return f
}

package gateway

import (
	"bytes"
	"testing"
)

// scanFields reads the body in place but what it keeps must survive the
// body's buffer being reused (pooled buffers are).
func TestScanFieldsOutlivesTheBuffer(t *testing.T) {
	body := []byte(` {"messages":[{"model":"no"}],"model":"gpt-4o","model":"second","stream":true,"stream_options":{"include_usage":false},"max_tokens":77}`)
	if !isObject(body) || isObject([]byte(" [1]")) {
		t.Fatal("isObject")
	}
	fs := scanFields(body)
	copy(body, bytes.Repeat([]byte("x"), len(body)))
	if fs.model.String() != "gpt-4o" || !fs.stream.Bool() || fs.maxTokens.Int() != 77 ||
		!fs.streamOptions.Get("include_usage").Exists() || fs.streamOptions.Get("include_usage").Bool() {
		t.Fatalf("fields after the buffer was overwritten: %+v", fs)
	}
}

package formats

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the request goldens of testdata/*_request.json")

// toolsConversation exercises every kind of part: a system prompt and a
// mid-conversation system update, user text, an assistant turn with signed
// reasoning, text and two tool calls, the two results (one failed), and
// more user text; two tools, one without a schema.
func toolsConversation() *Conversation {
	return &Conversation{
		Model:  "m-1",
		System: "You are terse.",
		Messages: []Message{
			Text(RoleUser, "Fix the test."),
			{Role: RoleAssistant, Parts: []Part{
				{Kind: ReasoningPart, Text: "thinking", Signature: "sig"},
				{Kind: TextPart, Text: "Let me look."},
				{Kind: ToolCallPart, CallID: "call_a", Name: "read", Input: json.RawMessage(`{"filePath":"a.go"}`)},
				{Kind: ToolCallPart, CallID: "call_b", Name: "bash", Input: json.RawMessage(`{"command":"go test"}`)},
			}},
			{Role: RoleUser, Parts: []Part{
				{Kind: ToolResultPart, CallID: "call_a", Name: "read", Output: "package a"},
				{Kind: ToolResultPart, CallID: "call_b", Name: "bash", Output: "exit status 1", IsError: true},
			}},
			Text(RoleSystem, "The user switched models."),
			Text(RoleUser, "Go on."),
		},
		Tools: []Tool{
			{Name: "read", Description: "Read a file.", Schema: json.RawMessage(`{"type":"object","properties":{"filePath":{"type":"string"}},"required":["filePath"]}`)},
			{Name: "todoread", Description: "Read the todo list."},
		},
		Settings: map[string]any{"temperature": 0.5, "maxTokens": 100, "unknownOption": true},
		Body:     map[string]any{"user": "u-1"},
		Headers:  map[string]string{"X-Agent": "build"},
	}
}

// TestEncodeEveryFormat: every registered format encodes the conversation
// as its golden request (testdata/<format>_request.json); a format without
// a golden fails. Requests carry the key in the format's slot, the
// agent's headers, and go to the path its SDK uses.
func TestEncodeEveryFormat(t *testing.T) {
	paths := map[string]string{
		"chat":      "/base/chat/completions",
		"responses": "/base/responses",
		"anthropic": "/base/v1/messages",
		"google":    "/base/v1beta/models/m-1:streamGenerateContent",
	}
	for _, f := range All() {
		t.Run(f.String(), func(t *testing.T) {
			req, err := f.NewRequest(t.Context(), "http://provider.test/base/", "sk-key", toolsConversation())
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.Path != paths[f.String()] || req.Method != http.MethodPost {
				t.Errorf("%s %s, want POST %s", req.Method, req.URL.Path, paths[f.String()])
			}
			if req.Header.Get("X-Agent") != "build" || req.Header.Get("Accept") != "text/event-stream" {
				t.Errorf("headers %v", req.Header)
			}
			slot := http.Header{}
			f.w().setCredential(slot, "sk-key")
			for k := range slot {
				if req.Header.Get(k) != slot.Get(k) {
					t.Errorf("credential header %s = %q, want %q", k, req.Header.Get(k), slot.Get(k))
				}
			}
			body, _ := io.ReadAll(req.Body)
			var got any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", f.String()+"_request.json")
			if *update {
				pretty, _ := json.MarshalIndent(got, "", "  ")
				os.WriteFile(golden, append(pretty, '\n'), 0o644)
			}
			raw, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("no request golden for %s: %v", f, err)
			}
			var want any
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("request differs from %s:\n%s", golden, body)
			}
			for _, s := range []string{"Fix the test.", "package a", "exit status 1", "Go on.", "The user switched models.", `"read"`, `"bash"`, "todoread", "u-1"} {
				if !bytes.Contains(body, []byte(s)) {
					t.Errorf("the request lost %s", s)
				}
			}
			if bytes.Contains(body, []byte("unknownOption")) {
				t.Error("an option the format lacks was sent")
			}
		})
	}
}

// TestDecodeEveryFormat: every registered format decodes its tool-call
// stream (testdata/<format>_tools.sse) into the same step: text,
// reasoning, two tool calls with their arguments whole, a tool-calls
// finish, and the usage the gateway would meter; deltas arrive as they
// stream, in every split of the stream.
func TestDecodeEveryFormat(t *testing.T) {
	usage := map[string]Tokens{
		"chat":      {Input: 20, CacheRead: 10, Output: 10, Reasoning: 2},
		"responses": {Input: 20, CacheRead: 10, Output: 10, Reasoning: 2},
		"anthropic": {Input: 20, CacheRead: 10, Output: 12},
		"google":    {Input: 20, CacheRead: 10, Output: 10, Reasoning: 2},
	}
	firstID := map[string]string{"google": "call_read"}
	for _, f := range All() {
		t.Run(f.String(), func(t *testing.T) {
			stream := fixture(t, f.String()+"_tools.sse")
			want, ok := usage[f.String()]
			if !ok {
				t.Fatalf("no expected usage for %s", f)
			}
			for _, chunk := range []int{len(stream), 1, 7, 64} {
				var deltas strings.Builder
				step, err := f.ReadResponse(sseResponse(stream, chunk), func(d Delta) { deltas.WriteString(d.Field + ":" + d.Text + ";") })
				if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				id := firstID[f.String()]
				if id == "" {
					id = "call_a"
				}
				calls := []ToolCall{{id, "read", `{"filePath":"a.go"}`}, {"call_b", "bash", `{"command":"go test"}`}}
				if step.Text != "Let me look." || step.Reasoning != "thinking" || !equalCalls(step.ToolCalls, calls) || step.Finish != FinishToolCalls {
					t.Fatalf("chunk %d: step %+v", chunk, step)
				}
				if step.Usage == nil || *step.Usage != want {
					t.Fatalf("chunk %d: usage %+v, want %+v", chunk, step.Usage, want)
				}
				if d := deltas.String(); !strings.Contains(d, "text:Let me look.") && !strings.Contains(d, "text:L") || !strings.Contains(d, "reasoning:") {
					t.Fatalf("chunk %d: deltas %q", chunk, d)
				}
			}
			if f == Anthropic {
				step, _ := f.ReadResponse(sseResponse(stream, len(stream)), nil)
				if step.Signature != "sig" {
					t.Errorf("signature %q", step.Signature)
				}
			}
		})
	}
}

// equalCalls compares tool calls, their arguments as JSON.
func equalCalls(got, want []ToolCall) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		var a, b any
		if got[i].ID != want[i].ID || got[i].Name != want[i].Name ||
			json.Unmarshal([]byte(got[i].Arguments), &a) != nil || json.Unmarshal([]byte(want[i].Arguments), &b) != nil || !reflect.DeepEqual(a, b) {
			return false
		}
	}
	return true
}

// chunkReader returns at most n bytes a read.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.n, len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

func sseResponse(body []byte, chunk int) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}},
		Body: io.NopCloser(&chunkReader{b: body, n: chunk})}
}

// A stream cut before its end, an error event, an error status and an
// answer that is no event stream are each a CallError of their kind; what
// a cut or failed stream decoded comes back with it.
func TestReadResponseFailures(t *testing.T) {
	stream := fixture(t, "chat_tools.sse")
	cut := stream[:bytes.Index(stream, []byte(`"finish_reason"`))]
	step, err := Chat.ReadResponse(sseResponse(cut, len(cut)), nil)
	if err == nil || err.Kind != CallCut || step == nil || step.Text != "Let me look." {
		t.Errorf("cut: %v %+v", err, step)
	}
	failed := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n"
	step, err = Chat.ReadResponse(sseResponse([]byte(failed), 1<<20), nil)
	if err == nil || err.Kind != CallStreamError || !strings.Contains(err.Message, "overloaded") || step.Text != "a" {
		t.Errorf("stream error: %v %+v", err, step)
	}
	refused := &http.Response{StatusCode: 429, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"error":{"message":"slow down"}}`))}
	if _, err := Anthropic.ReadResponse(refused, nil); err == nil || err.Kind != CallRefused || err.Status != 429 || err.Message != "Provider answered 429: slow down" {
		t.Errorf("refused: %+v", err)
	}
	plain := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{}`))}
	if _, err := Google.ReadResponse(plain, nil); err == nil || err.Kind != CallNotStream || !strings.Contains(err.Message, "200 with application/json") {
		t.Errorf("not a stream: %+v", err)
	}
}

// TestEveryFormatHasEveryPiece walks the registry: every format has a
// unique name, answers errors and model lists as JSON, is served by some
// kind, has a metering golden, and routes a request path to itself.
func TestEveryFormatHasEveryPiece(t *testing.T) {
	samplePaths := map[string]string{
		"chat":      "/custom/c/v1/chat/completions",
		"responses": "/custom/c/v1/responses",
		"anthropic": "/custom/c/v1/messages",
		"google":    "/custom/c/v1beta/models/m:generateContent",
	}
	kinds := []string{"openai", "openai-compatible", "anthropic", "google"}
	metered := map[Format]bool{}
	for _, g := range goldens {
		metered[g.opts.Format] = true
	}
	seen := map[string]bool{}
	for _, f := range All() {
		name := f.String()
		if name == "" || name == "unknown" || seen[name] {
			t.Errorf("format %d: name %q", f, name)
		}
		seen[name] = true
		if g, ok := Named(name); !ok || g != f {
			t.Errorf("Named(%q) = %v", name, g)
		}
		var env map[string]any
		if err := json.Unmarshal(ErrorBody(f, 404, "NotFound", "gone", nil), &env); err != nil || env["_tag"] != "NotFound" || env["error"] == nil {
			t.Errorf("%s: error body %v %v", name, env, err)
		}
		if !json.Valid(ModelList(f, []ModelInfo{{ID: "a"}}, "x")) || !json.Valid(ModelObject(f, ModelInfo{ID: "a"}, "x")) {
			t.Errorf("%s: model shapes", name)
		}
		served := false
		for _, k := range kinds {
			served = served || Supports(k, f)
		}
		if !served {
			t.Errorf("%s: no connection kind serves it", name)
		}
		if !metered[f] {
			t.Errorf("%s: no metering golden", name)
		}
		path, ok := samplePaths[name]
		if !ok {
			t.Errorf("%s: no sample path", name)
			continue
		}
		if rt, err := ParseRoute(path); err != nil || rt.Format != f || rt.Op != Generate {
			t.Errorf("%s: %s routes to %+v %v", name, path, rt, err)
		}
	}
}

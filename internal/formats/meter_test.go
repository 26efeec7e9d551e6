package formats

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

func micros(m money.Micros) *money.Micros { return &m }

// The pricing of the golden tests: input 2.5, output 10, cache_read 1.25,
// cache_write 3.75 USD per 1M tokens, reasoning unset (= output). In
// pico-dollars per token: 2_500_000, 10_000_000, 1_250_000, 3_750_000.
var pricing = store.Pricing{
	Input:      2_500_000,
	Output:     10_000_000,
	CacheRead:  micros(1_250_000),
	CacheWrite: micros(3_750_000),
}

type golden struct {
	file   string
	opts   MeterOptions
	tokens Tokens
	cost   money.Pico
	model  string
	events int
}

const sse = "text/event-stream"

// The expected numbers are worked out by hand from the fixtures.
var goldens = []golden{
	{
		// prompt 1200 (1024 cached), completion 350 (192 reasoning).
		file:   "chat_stream.sse",
		opts:   MeterOptions{Format: Chat, ContentType: sse, StreamRequested: true},
		tokens: Tokens{Input: 176, CacheRead: 1024, Output: 158, Reasoning: 192},
		// 176×2.5M + 1024×1.25M + 158×10M + 192×10M
		// = 440M + 1280M + 1580M + 1920M
		cost:  5_220_000_000,
		model: "gpt-4.1-2025-04-14",
		// 8 data events: the prompt-filter chunk, 6 chunks, the usage chunk; not [DONE].
		events: 8,
	},
	{
		// prompt 2006 (1920 cached), completion 300 (64 reasoning).
		file:   "chat.json",
		opts:   MeterOptions{Format: Chat, ContentType: "application/json"},
		tokens: Tokens{Input: 86, CacheRead: 1920, Output: 236, Reasoning: 64},
		// 86×2.5M + 1920×1.25M + 236×10M + 64×10M = 215M + 2400M + 2360M + 640M
		cost:  5_615_000_000,
		model: "o4-mini-2025-04-16",
	},
	{
		// input 5400 (4096 cached), output 812 (512 reasoning).
		file:   "responses_stream.sse",
		opts:   MeterOptions{Format: Responses, ContentType: "text/event-stream; charset=utf-8", StreamRequested: true},
		tokens: Tokens{Input: 1304, CacheRead: 4096, Output: 300, Reasoning: 512},
		// 1304×2.5M + 4096×1.25M + 300×10M + 512×10M = 3260M + 5120M + 3000M + 5120M
		cost:   16_500_000_000,
		model:  "o4-mini-2025-04-16",
		events: 14,
	},
	{
		// status incomplete (max_output_tokens) is billed: input 320, output 64, all reasoning.
		file:   "responses_incomplete.sse",
		opts:   MeterOptions{Format: Responses, ContentType: sse, StreamRequested: true},
		tokens: Tokens{Input: 320, Reasoning: 64},
		// 320×2.5M + 64×10M = 800M + 640M
		cost:   1_440_000_000,
		model:  "o4-mini-2025-04-16",
		events: 5,
	},
	{
		// input 1500 (1280 cached), output 45.
		file:   "responses.json",
		opts:   MeterOptions{Format: Responses, ContentType: "application/json"},
		tokens: Tokens{Input: 220, CacheRead: 1280, Output: 45},
		// 220×2.5M + 1280×1.25M + 45×10M = 550M + 1600M + 450M
		cost:  2_600_000_000,
		model: "gpt-4.1-2025-04-14",
	},
	{
		// message_start: input 28, cache write 1520, cache read 10240, output 1;
		// message_delta: output 402 (cumulative, not 403).
		file:   "anthropic_stream.sse",
		opts:   MeterOptions{Format: Anthropic, ContentType: sse, StreamRequested: true},
		tokens: Tokens{Input: 28, CacheWrite: 1520, CacheRead: 10240, Output: 402},
		// 28×2.5M + 1520×3.75M + 10240×1.25M + 402×10M = 70M + 5700M + 12800M + 4020M
		cost:   22_590_000_000,
		model:  "claude-sonnet-4-5-20250929",
		events: 14,
	},
	{
		file:   "anthropic.json",
		opts:   MeterOptions{Format: Anthropic, ContentType: "application/json"},
		tokens: Tokens{Input: 12, CacheRead: 2048, Output: 88},
		// 12×2.5M + 2048×1.25M + 88×10M = 30M + 2560M + 880M
		cost:  3_470_000_000,
		model: "claude-haiku-4-5-20251001",
	},
	{
		// The last usageMetadata: prompt 9000 (8192 cached), candidates 73,
		// thoughts 120, tool-use prompt 30. Input = 9000 − 8192 + 30.
		file:   "google_stream.sse",
		opts:   MeterOptions{Format: Google, ContentType: sse, StreamRequested: true},
		tokens: Tokens{Input: 838, CacheRead: 8192, Output: 73, Reasoning: 120},
		// 838×2.5M + 8192×1.25M + 73×10M + 120×10M = 2095M + 10240M + 730M + 1200M
		cost:   14_265_000_000,
		model:  "gemini-2.5-flash",
		events: 3,
	},
	{
		// The last element: prompt 640, candidates 42, thoughts 256.
		file:   "google_stream.json",
		opts:   MeterOptions{Format: Google, ContentType: "application/json; charset=UTF-8", StreamRequested: true},
		tokens: Tokens{Input: 640, Output: 42, Reasoning: 256},
		// 640×2.5M + 42×10M + 256×10M = 1600M + 420M + 2560M
		cost:   4_580_000_000,
		model:  "gemini-2.5-pro",
		events: 3,
	},
	{
		// prompt 4200 (4096 cached), candidates 19, thoughts 31.
		file:   "google.json",
		opts:   MeterOptions{Format: Google, ContentType: "application/json"},
		tokens: Tokens{Input: 104, CacheRead: 4096, Output: 19, Reasoning: 31},
		// 104×2.5M + 4096×1.25M + 19×10M + 31×10M = 260M + 5120M + 190M + 310M
		cost:  5_880_000_000,
		model: "gemini-2.5-flash",
	},
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// feed writes in to a meter in pieces of the sizes next returns.
func feed(t testing.TB, in []byte, opts MeterOptions, next func(rest int) int) (MeterResult, []byte) {
	t.Helper()
	var out bytes.Buffer
	m := NewMeter(&out, opts)
	for rest := in; len(rest) > 0; {
		n := min(max(next(len(rest)), 1), len(rest))
		k, err := m.Write(rest[:n])
		if err != nil || k != n {
			t.Fatalf("Write = %d, %v; want %d, nil", k, err, n)
		}
		rest = rest[n:]
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	return m.Result(), out.Bytes()
}

func whole(rest int) int { return rest }

func TestGolden(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			in := fixture(t, g.file)
			res, out := feed(t, in, g.opts, whole)
			if !bytes.Equal(out, in) {
				t.Errorf("forwarded bytes differ from the input")
			}
			if res.Tokens != g.tokens {
				t.Errorf("tokens = %+v, want %+v", res.Tokens, g.tokens)
			}
			if c := Cost(res.Tokens, pricing); c != g.cost {
				t.Errorf("cost = %d (%s), want %d (%s)", c, c, g.cost, g.cost)
			}
			if !res.Complete || res.Estimated {
				t.Errorf("complete = %v, estimated = %v; want true, false", res.Complete, res.Estimated)
			}
			if res.Model != g.model {
				t.Errorf("model = %q, want %q", res.Model, g.model)
			}
			if res.Events != g.events {
				t.Errorf("events = %d, want %d", res.Events, g.events)
			}
		})
	}
}

// chunkings returns the ways every fixture is cut into writes: 1-byte
// writes, every split into two, and random chunkings.
func chunkings(n int) []func(int) int {
	var cs []func(int) int
	cs = append(cs, func(int) int { return 1 })
	for i := 1; i < n; i++ {
		first := true
		cs = append(cs, func(rest int) int {
			if first {
				first = false
				return i
			}
			return rest
		})
	}
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 7))
		maxN := []int{3, 17, 64, 300}[seed%4]
		cs = append(cs, func(int) int { return 1 + r.IntN(maxN) })
	}
	return cs
}

func TestEverySplit(t *testing.T) {
	for _, g := range goldens {
		for _, drop := range []bool{false, true} {
			if drop && g.opts.Format != Chat {
				continue
			}
			t.Run(g.file, func(t *testing.T) {
				in := fixture(t, g.file)
				opts := g.opts
				opts.DropUsageChunk = drop
				want, wantOut := feed(t, in, opts, whole)
				for i, c := range chunkings(len(in)) {
					res, out := feed(t, in, opts, c)
					if res != want {
						t.Fatalf("chunking %d: result %+v, want %+v", i, res, want)
					}
					if !bytes.Equal(out, wantOut) {
						t.Fatalf("chunking %d: forwarded bytes differ", i)
					}
				}
			})
		}
	}
}

// removeEvent removes from in the one blank-line-ended event whose text
// contains marker, and checks that there is exactly one.
func removeEvent(t *testing.T, in, marker string) string {
	t.Helper()
	events := strings.SplitAfter(in, "\n\n")
	var keep []string
	found := 0
	for _, e := range events {
		if strings.Contains(e, marker) {
			found++
			continue
		}
		keep = append(keep, e)
	}
	if found != 1 {
		t.Fatalf("%d events contain %q", found, marker)
	}
	return strings.Join(keep, "")
}

func TestDropUsageChunk(t *testing.T) {
	in := fixture(t, "chat_stream.sse")
	want := removeEvent(t, string(in), `"choices":[],"usage":{"prompt_tokens"`)
	if len(want) >= len(in) || !strings.Contains(want, `"choices":[],"created":0`) {
		t.Fatal("the expected output is wrong")
	}
	opts := MeterOptions{Format: Chat, ContentType: sse, StreamRequested: true, DropUsageChunk: true}
	for i, c := range chunkings(len(in)) {
		res, out := feed(t, in, opts, c)
		if string(out) != want {
			t.Fatalf("chunking %d: forwarded\n%s\nwant\n%s", i, out, want)
		}
		if res.Tokens != goldens[0].tokens || !res.Complete {
			t.Fatalf("chunking %d: %+v", i, res)
		}
		if res.Events != 7 {
			t.Fatalf("chunking %d: events = %d, want 7 (the usage chunk was not delivered)", i, res.Events)
		}
	}
}

func TestDropUsageChunkOnlyForChat(t *testing.T) {
	// Anthropic events carry "usage" too; the option is for Chat only.
	in := fixture(t, "anthropic_stream.sse")
	res, out := feed(t, in, MeterOptions{Format: Anthropic, ContentType: sse, DropUsageChunk: true}, whole)
	if !bytes.Equal(out, in) || res.Tokens.Output != 402 {
		t.Fatalf("out differs or %+v", res)
	}
}

func TestDropKeepsUsageWithChoices(t *testing.T) {
	// A chunk with choices and a usage (some compatible servers) is not the
	// extra usage-only chunk: it is delivered.
	in := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\r\n\r\n" +
		": keep-alive\r\n\r\ndata: [DONE]\r\n\r\n"
	res, out := feed(t, []byte(in), MeterOptions{Format: Chat, ContentType: sse, DropUsageChunk: true}, whole)
	if string(out) != in {
		t.Fatalf("out = %q", out)
	}
	if res.Tokens != (Tokens{Input: 7, Output: 1}) || !res.Complete || res.Events != 1 {
		t.Fatalf("%+v", res)
	}
}

func TestDropHoldsOnlyTheCurrentEvent(t *testing.T) {
	var out bytes.Buffer
	m := NewMeter(&out, MeterOptions{Format: Chat, ContentType: sse, DropUsageChunk: true})
	write := func(s string) {
		t.Helper()
		if n, err := m.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	write(": keep-alive\n")
	if out.String() != ": keep-alive\n" {
		t.Fatalf("a comment between events is held: %q", out.String())
	}
	write("\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n")
	if out.String() != ": keep-alive\n\n" {
		t.Fatalf("out = %q", out.String())
	}
	write("\n")
	if out.String() != ": keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" {
		t.Fatalf("a whole event is not forwarded: %q", out.String())
	}
	// An incomplete event at the end of the body is forwarded by Close.
	write("data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}")
	n := out.Len()
	m.Flush()
	if out.Len() != n {
		t.Fatal("Flush released part of an event")
	}
	res := m.Result()
	if !strings.HasSuffix(out.String(), "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}") {
		t.Fatalf("out = %q", out.String())
	}
	if res.Complete || !res.Estimated || res.Events != 1 {
		t.Fatalf("%+v", res)
	}
}

// cutAt returns the fixture up to the start of the line containing marker.
func cutAt(t *testing.T, in []byte, marker string) []byte {
	t.Helper()
	i := bytes.Index(in, []byte(marker))
	if i < 0 {
		t.Fatalf("no %q", marker)
	}
	return in[:bytes.LastIndexByte(in[:i], '\n')+1]
}

func TestCutStream(t *testing.T) {
	tests := []struct {
		name   string
		file   string
		opts   MeterOptions
		cut    func(t *testing.T, in []byte) []byte
		tokens Tokens
	}{
		{
			// 4 content deltas, 11+10+10+7 = 38 text bytes: output =
			// max(4, ceil(38/4) = 10); input = ceil(1001/4) = 251.
			name: "chat before the finish chunk",
			file: "chat_stream.sse",
			opts: MeterOptions{Format: Chat, ContentType: sse, StreamRequested: true, RequestBytes: 1001},
			cut: func(t *testing.T, in []byte) []byte {
				return cutAt(t, in, `"finish_reason":"stop"`)
			},
			tokens: Tokens{Input: 251, Output: 10},
		},
		{
			name: "chat in the middle of the usage chunk",
			file: "chat_stream.sse",
			opts: MeterOptions{Format: Chat, ContentType: sse, StreamRequested: true, RequestBytes: 1001, DropUsageChunk: true},
			cut: func(t *testing.T, in []byte) []byte {
				i := bytes.Index(in, []byte(`"completion_tokens":350`))
				return in[:i+len(`"completion_tokens":35`)]
			},
			tokens: Tokens{Input: 251, Output: 10},
		},
		{
			// 4 deltas, 3+8+8+7 = 26 bytes: output = max(4, 7); input = ceil(99/4) = 25.
			name: "responses before response.completed",
			file: "responses_stream.sse",
			opts: MeterOptions{Format: Responses, ContentType: sse, StreamRequested: true, RequestBytes: 99},
			cut: func(t *testing.T, in []byte) []byte {
				return cutAt(t, in, "event: response.completed")
			},
			tokens: Tokens{Input: 25, Output: 7},
		},
		{
			// message_start input and cache counts are kept; 4 deltas
			// (thinking 16, text 7+14+11; the signature is not text) = 48
			// bytes: output = max(1 reported, 4, 12).
			name: "anthropic before message_delta",
			file: "anthropic_stream.sse",
			opts: MeterOptions{Format: Anthropic, ContentType: sse, StreamRequested: true, RequestBytes: 5000},
			cut: func(t *testing.T, in []byte) []byte {
				return cutAt(t, in, "event: message_delta")
			},
			tokens: Tokens{Input: 28, CacheWrite: 1520, CacheRead: 10240, Output: 12},
		},
		{
			// The last usageMetadata seen (chunk 2) is kept: 9000 − 8192,
			// candidates 40, thoughts 120, above the 2-delta estimate.
			name: "google sse before the final chunk",
			file: "google_stream.sse",
			opts: MeterOptions{Format: Google, ContentType: sse, StreamRequested: true, RequestBytes: 5000},
			cut: func(t *testing.T, in []byte) []byte {
				return cutAt(t, in, "Rayleigh")
			},
			tokens: Tokens{Input: 808, CacheRead: 8192, Output: 40, Reasoning: 120},
		},
		{
			name: "google array in the middle of the last element",
			file: "google_stream.json",
			opts: MeterOptions{Format: Google, ContentType: "application/json", StreamRequested: true, RequestBytes: 5000},
			cut: func(t *testing.T, in []byte) []byte {
				return in[:bytes.Index(in, []byte(" slept."))]
			},
			tokens: Tokens{Input: 640, Output: 17, Reasoning: 256},
		},
		{
			name:   "nothing received",
			file:   "chat_stream.sse",
			opts:   MeterOptions{Format: Chat, ContentType: sse, StreamRequested: true, RequestBytes: 10},
			cut:    func(*testing.T, []byte) []byte { return nil },
			tokens: Tokens{Input: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.cut(t, fixture(t, tt.file))
			for i, c := range chunkings(len(in))[:60] {
				res, out := feed(t, in, tt.opts, c)
				if !bytes.Equal(out, in) {
					t.Fatalf("chunking %d: forwarded bytes differ from the input", i)
				}
				if res.Complete || !res.Estimated {
					t.Fatalf("chunking %d: complete = %v, estimated = %v", i, res.Complete, res.Estimated)
				}
				if res.Tokens != tt.tokens {
					t.Fatalf("chunking %d: tokens = %+v, want %+v", i, res.Tokens, tt.tokens)
				}
			}
		})
	}
}

// Every prefix of every stream gives a consistent result, and a prefix
// without the final usage is estimated.
func TestEveryPrefix(t *testing.T) {
	for _, g := range goldens {
		if !g.opts.StreamRequested {
			continue
		}
		t.Run(g.file, func(t *testing.T) {
			in := fixture(t, g.file)
			opts := g.opts
			opts.RequestBytes = 400
			for n := 0; n <= len(in); n++ {
				res, out := feed(t, in[:n], opts, whole)
				if !bytes.Equal(out, in[:n]) {
					t.Fatalf("prefix %d: forwarded bytes differ", n)
				}
				if res.Complete == res.Estimated {
					t.Fatalf("prefix %d: complete = estimated = %v", n, res.Complete)
				}
				if res.Complete && res.Tokens != g.tokens {
					t.Fatalf("prefix %d: complete with %+v", n, res.Tokens)
				}
				if !res.Complete && res.Tokens.Input == 0 && res.Tokens.CacheRead == 0 {
					t.Fatalf("prefix %d: no input estimate: %+v", n, res.Tokens)
				}
				if g.opts.Format == Anthropic && n > bytes.Index(in, []byte("event: content_block_start")) &&
					(res.Tokens.Input != 28 || res.Tokens.CacheRead != 10240 || res.Tokens.CacheWrite != 1520) {
					t.Fatalf("prefix %d: message_start input lost: %+v", n, res.Tokens)
				}
			}
		})
	}
}

func TestAnthropicDeltaReplacesInput(t *testing.T) {
	in := "event: message_start\n" +
		`data: {"type":"message_start","message":{"model":"claude-opus-4-1","usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":1}}}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"input_tokens":11,"cache_creation_input_tokens":null,"cache_read_input_tokens":33,"output_tokens":5}}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{},"usage":{"output_tokens":9}}` + "\n\n"
	res, _ := feed(t, []byte(in), MeterOptions{Format: Anthropic, ContentType: sse}, whole)
	want := Tokens{Input: 11, CacheWrite: 20, CacheRead: 33, Output: 9}
	if res.Tokens != want || !res.Complete {
		t.Fatalf("%+v, want %+v", res, want)
	}
}

func TestResponsesFailed(t *testing.T) {
	withUsage := "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"model\":\"gpt-5\",\"usage\":{\"input_tokens\":9,\"output_tokens\":2}}}\n\n"
	res, _ := feed(t, []byte(withUsage), MeterOptions{Format: Responses, ContentType: sse}, whole)
	if res.Tokens != (Tokens{Input: 9, Output: 2}) || !res.Complete || res.Model != "gpt-5" {
		t.Fatalf("%+v", res)
	}
	noUsage := "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"usage\":null}}\n\n"
	res, _ = feed(t, []byte(noUsage), MeterOptions{Format: Responses, ContentType: sse, RequestBytes: 40}, whole)
	if res.Tokens != (Tokens{Input: 10}) || res.Complete || !res.Estimated {
		t.Fatalf("%+v", res)
	}
	// A usage in another event type is not the final one.
	other := "data: {\"type\":\"response.in_progress\",\"response\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":2}}}\n\n"
	res, _ = feed(t, []byte(other), MeterOptions{Format: Responses, ContentType: sse, RequestBytes: 4}, whole)
	if res.Complete || res.Tokens != (Tokens{Input: 1}) {
		t.Fatalf("%+v", res)
	}
}

func TestSSEFraming(t *testing.T) {
	// Multiple data lines join with "\n"; the event name stands in for a
	// missing type; fields without a space; unknown fields and comments.
	in := ":comment\r\nid: 1\r\nretry: 100\r\nevent: response.completed\r\ndata:{\"response\":{\"usage\":\r\ndata: {\"input_tokens\":12,\"output_tokens\":3}}}\r\n\r\ndata: [DONE]\r\n\r\n"
	res, _ := feed(t, []byte(in), MeterOptions{Format: Responses, ContentType: sse}, whole)
	if res.Tokens != (Tokens{Input: 12, Output: 3}) || !res.Complete || res.Events != 1 {
		t.Fatalf("%+v", res)
	}
}

func TestChatProviderVariants(t *testing.T) {
	// DeepSeek reports the cache hit outside prompt_tokens_details.
	in := `{"model":"deepseek-chat","choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":100,"completion_tokens":10,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}}`
	res, _ := feed(t, []byte(in), MeterOptions{Format: Chat, ContentType: "application/json"}, whole)
	if res.Tokens != (Tokens{Input: 36, CacheRead: 64, Output: 10}) {
		t.Fatalf("%+v", res)
	}
	// Counts that do not add up are clamped, never negative.
	in = `{"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":9},"completion_tokens_details":{"reasoning_tokens":-4}}}`
	res, _ = feed(t, []byte(in), MeterOptions{Format: Chat, ContentType: "application/json"}, whole)
	if res.Tokens != (Tokens{CacheRead: 5, Output: 2}) {
		t.Fatalf("%+v", res)
	}
}

func TestBodyWithoutUsage(t *testing.T) {
	// An answer without usage (some compatible servers): estimated from the
	// request and the answer text (32 bytes → 8).
	in := `{"model":"local","choices":[{"message":{"role":"assistant","content":"abcdefghijklmnopqrstuvwxyz012345"}}]}`
	res, _ := feed(t, []byte(in), MeterOptions{Format: Chat, ContentType: "application/json", RequestBytes: 17}, whole)
	if res.Tokens != (Tokens{Input: 5, Output: 8}) || res.Complete || !res.Estimated || res.Model != "local" {
		t.Fatalf("%+v", res)
	}
	// An error body has no usage either.
	in = `{"error":{"message":"bad","type":"invalid_request_error"}}`
	res, _ = feed(t, []byte(in), MeterOptions{Format: Chat, ContentType: "application/json", StreamRequested: true, RequestBytes: 8}, whole)
	if res.Tokens != (Tokens{Input: 2}) || res.Complete {
		t.Fatalf("%+v", res)
	}
}

func TestGoogleBlockedPrompt(t *testing.T) {
	in := "data: {\"promptFeedback\": {\"blockReason\": \"SAFETY\"},\"usageMetadata\": {\"promptTokenCount\": 12,\"totalTokenCount\": 12},\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n"
	res, _ := feed(t, []byte(in), MeterOptions{Format: Google, ContentType: sse, StreamRequested: true}, whole)
	if res.Tokens != (Tokens{Input: 12}) || !res.Complete {
		t.Fatalf("%+v", res)
	}
}

func TestModes(t *testing.T) {
	tests := []struct {
		opts MeterOptions
		want mode
	}{
		{MeterOptions{Format: Chat, ContentType: "text/event-stream"}, modeSSE},
		{MeterOptions{Format: Chat, ContentType: "Text/Event-Stream; charset=utf-8"}, modeSSE},
		{MeterOptions{Format: Chat, ContentType: "application/json", StreamRequested: true}, modeBody},
		{MeterOptions{Format: Chat, StreamRequested: true}, modeSSE},
		{MeterOptions{Format: Chat}, modeBody},
		{MeterOptions{Format: Google, ContentType: "application/json", StreamRequested: true}, modeArray},
		{MeterOptions{Format: Google, StreamRequested: true}, modeArray},
		{MeterOptions{Format: Google, ContentType: "text/event-stream", StreamRequested: true}, modeSSE},
		{MeterOptions{Format: Google, ContentType: "application/json"}, modeBody},
	}
	for _, tt := range tests {
		if got := NewMeter(io.Discard, tt.opts).mode; got != tt.want {
			t.Errorf("%+v: mode %d, want %d", tt.opts, got, tt.want)
		}
	}
}

func TestGoogleArrayErrorObject(t *testing.T) {
	in := `{"error": {"code": 429, "message": "quota [exceeded] {x}", "status": "RESOURCE_EXHAUSTED"}}`
	res, out := feed(t, []byte(in), MeterOptions{Format: Google, ContentType: "application/json", StreamRequested: true, RequestBytes: 4}, func(int) int { return 3 })
	if string(out) != in || res.Complete || res.Tokens != (Tokens{Input: 1}) || res.Events != 1 {
		t.Fatalf("%+v", res)
	}
}

// A huge event passes through unparsed with bounded memory, and the events
// after it are read.
func TestHugeEvent(t *testing.T) {
	in := fixture(t, "chat_stream.sse")
	big := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 3<<20) + "\"}}]}\n\n"
	at := bytes.Index(in, []byte("data: {\"id\"")) // before the first chunk
	huge := append(append(append([]byte{}, in[:at]...), big...), in[at:]...)
	usageEvent := removeEvent(t, string(huge), `"choices":[],"usage":{"prompt_tokens"`)

	for _, drop := range []bool{false, true} {
		for _, size := range []int{len(huge), 1, 4096, 100_000} {
			if size == 1 && drop {
				continue // slow and covered by other sizes
			}
			var out bytes.Buffer
			m := NewMeter(&out, MeterOptions{Format: Chat, ContentType: sse, DropUsageChunk: drop})
			maxHeld := 0
			for rest := huge; len(rest) > 0; {
				n := min(size, len(rest))
				if k, err := m.Write(rest[:n]); k != n || err != nil {
					t.Fatal(k, err)
				}
				rest = rest[n:]
				s := &m.sse
				maxHeld = max(maxHeld, cap(s.line)+cap(s.data)+cap(s.hold)+cap(s.win.head)+cap(s.win.tail))
			}
			res := m.Result()
			if limit := 3*DefaultMaxEventBytes + 256<<10; maxHeld > limit {
				t.Errorf("drop=%v size=%d: held %d bytes, over %d", drop, size, maxHeld, limit)
			}
			want := string(huge)
			if drop {
				want = usageEvent
			}
			if out.String() != want {
				t.Errorf("drop=%v size=%d: forwarded bytes differ", drop, size)
			}
			if res.Tokens != goldens[0].tokens || !res.Complete || res.Events != 9-btoi(drop) {
				t.Errorf("drop=%v size=%d: %+v", drop, size, res)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The usage of an event or body over the cap is still read from its end.
func TestOverCapUsage(t *testing.T) {
	img := strings.Repeat("iVBORw0KGgo", 200_000) // 2.2 MB of base64
	t.Run("responses completed with an image", func(t *testing.T) {
		in := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5\",\"output\":[{\"type\":\"image_generation_call\",\"result\":\"" + img +
			"\"}],\"metadata\":{\"usage\":\"a string\"},\"usage\":{\"input_tokens\":50,\"input_tokens_details\":{\"cached_tokens\":10},\"output_tokens\":1600,\"output_tokens_details\":{\"reasoning_tokens\":100}},\"user\":null}}\n\n"
		// Whole, in small pieces, and with the long line in one write
		// before its line ending.
		for _, size := range []int{len(in), 8192, len(in) - 2} {
			res, out := feed(t, []byte(in), MeterOptions{Format: Responses, ContentType: sse}, func(int) int { return size })
			if string(out) != in || res.Tokens != (Tokens{Input: 40, CacheRead: 10, Output: 1500, Reasoning: 100}) || !res.Complete {
				t.Fatalf("size %d: %+v", size, res)
			}
		}
	})
	t.Run("google array element with inline data", func(t *testing.T) {
		in := `[{"candidates": [{"content": {"parts": [{"inlineData": {"mimeType": "image/png","data": "` + img + `"}}]},"finishReason": "STOP"}],` +
			"\n" + `"usageMetadata": {"promptTokenCount": 30,"candidatesTokenCount": 1290,"totalTokenCount": 1320}}]`
		res, out := feed(t, []byte(in), MeterOptions{Format: Google, ContentType: "application/json", StreamRequested: true}, func(int) int { return 10000 })
		if string(out) != in || res.Tokens != (Tokens{Input: 30, Output: 1290}) || !res.Complete || res.Events != 1 {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("body over the cap", func(t *testing.T) {
		in := fixture(t, "chat.json")
		res, out := feed(t, in, MeterOptions{Format: Chat, ContentType: "application/json", MaxBodyBytes: 100}, func(int) int { return 7 })
		if !bytes.Equal(out, in) || res.Tokens != goldens[1].tokens || !res.Complete {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("body over the cap without usage", func(t *testing.T) {
		in := bytes.Repeat([]byte("z"), 4001)
		res, _ := feed(t, in, MeterOptions{Format: Anthropic, ContentType: "application/json", MaxBodyBytes: 1000, RequestBytes: 4}, whole)
		if res.Tokens != (Tokens{Input: 1, Output: 1001}) || res.Complete {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("huge comment line", func(t *testing.T) {
		in := ": " + strings.Repeat("k", 2<<20) + "\n\n" + string(fixture(t, "anthropic_stream.sse"))
		res, out := feed(t, []byte(in), MeterOptions{Format: Anthropic, ContentType: sse}, func(int) int { return 50_000 })
		if string(out) != in || res.Tokens != goldens[5].tokens {
			t.Fatalf("%+v", res)
		}
	})
}

type failWriter struct {
	after int // bytes accepted before failing
	n     int
	short bool
}

var errClient = errors.New("client went away")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n+len(p) <= w.after {
		w.n += len(p)
		return len(p), nil
	}
	k := w.after - w.n
	w.n = w.after
	if w.short {
		return k, nil
	}
	return k, errClient
}

func TestDstError(t *testing.T) {
	in := fixture(t, "anthropic_stream.sse")
	for _, drop := range []bool{false, true} {
		w := &failWriter{after: 500}
		m := NewMeter(w, MeterOptions{Format: Anthropic, ContentType: sse, DropUsageChunk: drop})
		var firstErr error
		for rest := in; len(rest) > 0; {
			n := min(100, len(rest))
			k, err := m.Write(rest[:n])
			if err == nil && k != n {
				t.Fatalf("short write without an error")
			}
			if err != nil && firstErr == nil {
				firstErr = err
			} else if firstErr != nil && !errors.Is(err, errClient) {
				t.Fatalf("a later write returned %v", err)
			}
			rest = rest[n:]
		}
		if !errors.Is(firstErr, errClient) {
			t.Fatalf("drop=%v: error %v", drop, firstErr)
		}
		if err := m.Close(); !errors.Is(err, errClient) {
			t.Fatalf("Close = %v", err)
		}
		// What upstream produced is still read.
		if res := m.Result(); res.Tokens != goldens[5].tokens || !res.Complete {
			t.Fatalf("%+v", res)
		}
	}
	// Chat with DropUsageChunk holds events: the error comes from a later write.
	w := &failWriter{after: 10}
	m := NewMeter(w, MeterOptions{Format: Chat, ContentType: sse, DropUsageChunk: true})
	in = fixture(t, "chat_stream.sse")
	if _, err := m.Write(in); !errors.Is(err, errClient) {
		t.Fatalf("err = %v", err)
	}
	// A short write without an error is io.ErrShortWrite.
	m = NewMeter(&failWriter{after: 10, short: true}, MeterOptions{Format: Chat, ContentType: sse})
	if n, err := m.Write(in); n != 10 || !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("Write = %d, %v", n, err)
	}
}

func TestWriteAfterClose(t *testing.T) {
	m := NewMeter(io.Discard, MeterOptions{Format: Chat})
	m.Result()
	if _, err := m.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if m.Result() != m.Result() {
		t.Fatal("Result is not stable")
	}
}

type flushRecorder struct {
	bytes.Buffer
	flushes int
}

func (f *flushRecorder) Flush() { f.flushes++ }

func TestFlush(t *testing.T) {
	var f flushRecorder
	m := NewMeter(&f, MeterOptions{Format: Chat, ContentType: sse})
	m.Write([]byte("data: {}\n\n"))
	m.Flush()
	if f.flushes != 1 || f.String() != "data: {}\n\n" {
		t.Fatalf("flushes = %d, %q", f.flushes, f.String())
	}
}

func TestCost(t *testing.T) {
	tok := Tokens{Input: 1_000_000, CacheRead: 1_000_000, CacheWrite: 1_000_000, Output: 1_000_000, Reasoning: 1_000_000}
	// A million of each at 3 in / 15 out, cache and reasoning unset:
	// 3 + 3 + 3 + 15 + 15 = 39 USD.
	p := store.Pricing{Input: 3_000_000, Output: 15_000_000}
	if got, want := Cost(tok, p), money.Pico(39_000_000_000_000); got != want {
		t.Errorf("defaults: %s, want %s", got, want)
	}
	// 3 + 0.3 + 3.75 + 15 + 60 = 82.05 USD.
	p = store.Pricing{Input: 3_000_000, Output: 15_000_000, CacheRead: micros(300_000), CacheWrite: micros(3_750_000), Reasoning: micros(60_000_000)}
	if got, want := Cost(tok, p), money.Pico(82_050_000_000_000); got != want {
		t.Errorf("explicit: %s, want %s", got, want)
	}
	// One token at 0.000001 USD per 1M tokens is one pico-dollar.
	if got := Cost(Tokens{Output: 1}, store.Pricing{Output: 1}); got != 1 {
		t.Errorf("smallest: %d", got)
	}
	// No overflow wrap-around.
	if got := Cost(Tokens{Input: math.MaxInt64 / 2, Output: 5}, store.Pricing{Input: money.MaxPrice, Output: money.MaxPrice}); got != math.MaxInt64 {
		t.Errorf("saturation: %d", got)
	}
	if got := (Tokens{Input: 1, CacheRead: 2, CacheWrite: 3, Output: 4, Reasoning: 5}).Total(); got != 15 {
		t.Errorf("Total = %d", got)
	}
}

func BenchmarkMeterChatStream(b *testing.B) {
	in := fixture(b, "chat_stream.sse")
	events := bytes.SplitAfter(in, []byte("\n\n"))
	for _, drop := range []bool{false, true} {
		name := "passthrough"
		if drop {
			name = "drop"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				m := NewMeter(io.Discard, MeterOptions{Format: Chat, ContentType: sse, StreamRequested: true, DropUsageChunk: drop})
				for _, e := range events {
					m.Write(e)
				}
				if m.Result().Tokens.Input != 176 {
					b.Fatal("wrong result")
				}
				m.Release() // as the gateway does
			}
		})
	}
}

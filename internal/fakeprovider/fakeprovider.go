// Package fakeprovider is a fake LLM provider for tests and benchmarks. It
// speaks the four wire formats the gateway forwards — OpenAI Chat
// Completions, OpenAI Responses, Anthropic Messages and Google Generative
// AI — streaming and not, with realistic usage fields — and the token
// counting endpoints of Anthropic (/messages/count_tokens) and Google
// (:countTokens). It checks the
// provider credential in each format's native header, records what it
// received, and can be told to be slow, fail, or cut a stream.
package fakeprovider

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// Received is one request as the provider saw it.
type Received struct {
	Method   string
	Host     string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	// Canceled is set when the client went away before the answer ended.
	Canceled bool
}

// Behavior changes how the provider answers.
type Behavior struct {
	// Status, when not 0, answers every request with this status and
	// Body (or a provider-shaped error body when Body is empty).
	Status int
	Body   string
	// Delay waits before the answer and between stream events.
	Delay time.Duration
	// Hold, when set, keeps every answer back until it is closed (after
	// any Delay): a test decides when the provider answers. A request
	// cancelled meanwhile is marked Canceled and not answered.
	Hold <-chan struct{}
	// CutAfter, when > 0, closes the connection abruptly after that many
	// stream events: no terminal event, no [DONE].
	CutAfter int
	// Chunks is the number of content deltas in a stream (default 3).
	Chunks int
	// KeepAlive sends an SSE comment before every event.
	KeepAlive bool
	// Script, when set, decides a streamed answer from the request's body
	// (the conversation so far): its text and the tool calls it makes,
	// streamed in the format's own events.
	Script func(body []byte) Step
}

// Step is a scripted answer: text, then tool calls.
type Step struct {
	Text  string
	Calls []Call
	// Reasoning, when set, is streamed before the text as the model's
	// reasoning (Chat Completions' reasoning_content; the other formats
	// leave it out).
	Reasoning string
}

// Call is a scripted tool call; Args is its JSON arguments text.
type Call struct {
	ID, Name, Args string
}

// Usage numbers the fake reports (the same for every format, mapped to each
// format's fields).
const (
	InputTokens      = 21
	CachedTokens     = 5
	CacheWriteTokens = 3
	OutputTokens     = 12
	ReasoningTokens  = 4
)

// Provider is the fake. Credential is the secret it expects.
type Provider struct {
	Credential string
	URL        string // base URL, e.g. http://127.0.0.1:port

	srv      *http.Server
	closeFn  func()
	ln       net.Listener
	mu       sync.Mutex
	received []*Received
	// sent keeps when each event of a stream was written, for requests
	// that carry a StreamIDHeader (a benchmark tells the provider's own
	// lateness from the proxy's with it).
	sent map[string][]time.Time

	behavior Behavior
	conns    map[net.Conn]http.ConnState
}

// StreamIDHeader names a stream for SentTimes.
const StreamIDHeader = "X-Bench-Stream"

// SentTimes returns when each event of the stream named id was written
// (and flushed), in order, and forgets them.
func (p *Provider) SentTimes(id string) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.sent[id]
	delete(p.sent, id)
	return t
}

// Start runs a fake provider on a loopback port.
func Start(credential string) (*Provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Provider{Credential: credential, URL: "http://" + ln.Addr().String(), ln: ln}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ConnState: p.connState}
	go p.srv.Serve(ln)
	return p, nil
}

// StartTLS runs a fake provider over HTTPS on a loopback port, with a
// self-signed certificate for 127.0.0.1; CertPEM is that certificate.
func StartTLS(credential string) (*Provider, []byte, error) {
	p := &Provider{Credential: credential}
	ts := httptest.NewUnstartedServer(p)
	ts.Config.ConnState = p.connState
	ts.StartTLS()
	p.URL = ts.URL
	p.srv = ts.Config
	p.closeFn = ts.Close
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	return p, pemBytes, nil
}

// Close stops the provider.
func (p *Provider) Close() error {
	if p.closeFn != nil {
		p.closeFn()
		return nil
	}
	return p.srv.Close()
}

// SetBehavior changes how later requests are answered.
func (p *Provider) SetBehavior(b Behavior) {
	p.mu.Lock()
	p.behavior = b
	p.mu.Unlock()
}

// Received returns a copy of the requests seen so far.
func (p *Provider) Received() []Received {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Received, len(p.received))
	for i, r := range p.received {
		out[i] = *r
	}
	return out
}

// Take returns a copy of the requests seen so far and forgets them, keeping
// the behavior: a long run counts what it received without the list
// growing for the whole run.
func (p *Provider) Take() []Received {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Received, len(p.received))
	for i, r := range p.received {
		out[i] = *r
	}
	p.received = nil
	return out
}

// CloseIdleConnections closes the connections that carry no request now:
// idle keep-alive ones, and new ones no request has arrived on yet (a
// client's transport may dial one it then leaves in its pool). Call it
// when no request is on its way; later requests open new connections.
func (p *Provider) CloseIdleConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, st := range p.conns {
		if st == http.StateIdle || st == http.StateNew {
			c.Close()
		}
	}
}

// connState follows the server's connections for CloseIdleConnections.
func (p *Provider) connState(c net.Conn, st http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[net.Conn]http.ConnState{}
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(p.conns, c)
	default:
		p.conns[c] = st
	}
}

// Last returns the last request seen, or the zero value.
func (p *Provider) Last() Received {
	rs := p.Received()
	if len(rs) == 0 {
		return Received{}
	}
	return rs[len(rs)-1]
}

// Reset forgets received requests and the behavior.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.received = nil
	p.behavior = Behavior{}
	p.mu.Unlock()
}

type format int

const (
	chat format = iota
	responses
	anthropic
	google
)

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/v1/models") {
		// OpenAI's model list, which some gateways read at start (the
		// bench's peers); not recorded, as it is no inference request.
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model","created":1700000000,"owned_by":"openai"}]}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	rec := &Received{Method: r.Method, Host: r.Host, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	p.mu.Lock()
	p.received = append(p.received, rec)
	b := p.behavior
	p.mu.Unlock()
	if b.Chunks <= 0 {
		b.Chunks = 3
	}

	var f format
	var model string
	var stream, count bool
	path := r.URL.Path
	switch {
	case strings.HasSuffix(path, "/messages/count_tokens"):
		f, model, count = anthropic, gjson.GetBytes(body, "model").String(), true
	case strings.Contains(path, "/models/") && strings.HasSuffix(path, ":countTokens"):
		f, count = google, true
		seg := path[strings.LastIndex(path, "/models/")+len("/models/"):]
		model, _, _ = strings.Cut(seg, ":")
	case strings.HasSuffix(path, "/chat/completions"):
		f, model, stream = chat, gjson.GetBytes(body, "model").String(), gjson.GetBytes(body, "stream").Bool()
	case strings.HasSuffix(path, "/responses"):
		f, model, stream = responses, gjson.GetBytes(body, "model").String(), gjson.GetBytes(body, "stream").Bool()
	case strings.HasSuffix(path, "/messages"):
		f, model, stream = anthropic, gjson.GetBytes(body, "model").String(), gjson.GetBytes(body, "stream").Bool()
	case strings.Contains(path, "/models/") && (strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent")):
		f = google
		seg := path[strings.LastIndex(path, "/models/")+len("/models/"):]
		model, _, _ = strings.Cut(seg, ":")
		stream = strings.HasSuffix(path, ":streamGenerateContent")
	default:
		http.Error(w, `{"error":{"message":"unknown path"}}`, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, f, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if !p.authorized(f, r) {
		writeError(w, f, http.StatusUnauthorized, "invalid credential")
		return
	}
	if b.Delay > 0 {
		select {
		case <-time.After(b.Delay):
		case <-r.Context().Done():
			p.markCanceled(rec)
			return
		}
	}
	if b.Hold != nil {
		select {
		case <-b.Hold:
		case <-r.Context().Done():
			p.markCanceled(rec)
			return
		}
	}
	if b.Status != 0 {
		if b.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(b.Status)
			io.WriteString(w, b.Body)
			return
		}
		writeError(w, f, b.Status, "the fake provider was told to fail")
		return
	}
	w.Header().Set("x-ratelimit-remaining-requests", "99")
	w.Header().Set("x-request-id", "req_fake")
	if count {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, countAnswer(f))
		return
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer(f, model))
		return
	}
	var events []string
	if b.Script != nil {
		events = scriptEvents(f, model, b.Script(body))
	} else {
		events = streamEvents(f, model, b.Chunks, gjson.GetBytes(body, "stream_options.include_usage").Bool())
	}
	if f == google && r.URL.Query().Get("alt") != "sse" {
		p.streamJSONArray(w, r, rec, events, b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	id := r.Header.Get(StreamIDHeader)
	var sent []time.Time
	if id != "" {
		sent = make([]time.Time, 0, len(events))
		defer func() {
			p.mu.Lock()
			if p.sent == nil {
				p.sent = map[string][]time.Time{}
			}
			p.sent[id] = sent
			p.mu.Unlock()
		}()
	}
	for i, ev := range events {
		if b.CutAfter > 0 && i == b.CutAfter {
			panic(http.ErrAbortHandler) // close the connection without ending the stream
		}
		if b.KeepAlive {
			io.WriteString(w, ": keep-alive\n\n")
		}
		io.WriteString(w, ev)
		rc.Flush()
		if id != "" {
			sent = append(sent, time.Now())
		}
		if b.Delay > 0 && i < len(events)-1 {
			select {
			case <-time.After(b.Delay):
			case <-r.Context().Done():
				p.markCanceled(rec)
				return
			}
		}
	}
}

func (p *Provider) markCanceled(rec *Received) {
	p.mu.Lock()
	rec.Canceled = true
	p.mu.Unlock()
}

// streamJSONArray answers Google's default stream form: a JSON array whose
// elements arrive one by one.
func (p *Provider) streamJSONArray(w http.ResponseWriter, r *http.Request, rec *Received, events []string, b Behavior) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	io.WriteString(w, "[")
	for i, ev := range events {
		if b.CutAfter > 0 && i == b.CutAfter {
			panic(http.ErrAbortHandler)
		}
		if i > 0 {
			io.WriteString(w, ",\r\n")
		}
		io.WriteString(w, strings.TrimSuffix(strings.TrimPrefix(ev, "data: "), "\r\n\r\n"))
		rc.Flush()
		if b.Delay > 0 {
			select {
			case <-time.After(b.Delay):
			case <-r.Context().Done():
				p.markCanceled(rec)
				return
			}
		}
	}
	io.WriteString(w, "]")
}

func (p *Provider) authorized(f format, r *http.Request) bool {
	switch f {
	case chat, responses:
		return r.Header.Get("Authorization") == "Bearer "+p.Credential
	case anthropic:
		// The API takes the key as x-api-key or, from newer SDKs, as a bearer token.
		return (r.Header.Get("x-api-key") == p.Credential || r.Header.Get("Authorization") == "Bearer "+p.Credential) &&
			r.Header.Get("anthropic-version") != ""
	default:
		return r.Header.Get("x-goog-api-key") == p.Credential
	}
}

// writeError answers in the format's own error envelope.
func writeError(w http.ResponseWriter, f format, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var v any
	switch f {
	case anthropic:
		v = map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": msg}}
	case google:
		v = map[string]any{"error": map[string]any{"code": status, "message": msg, "status": "INTERNAL"}}
	default:
		v = map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "code": nil}}
	}
	json.NewEncoder(w).Encode(v)
}

// countAnswer is a token count in the provider's wire format: Anthropic's
// count_tokens answers {"input_tokens": N}, Google's countTokens
// {"totalTokens": N, "promptTokensDetails": [...]}. The count is always
// InputTokens.
func countAnswer(f format) string {
	if f == anthropic {
		return fmt.Sprintf(`{"input_tokens":%d}`, InputTokens)
	}
	return fmt.Sprintf(`{"totalTokens":%d,"promptTokensDetails":[{"modality":"TEXT","tokenCount":%d}]}`, InputTokens, InputTokens)
}

// Text is the answer's text; streams split it into chunks.
const Text = "Hello from the fake provider."

func answer(f format, model string) string {
	m, _ := json.Marshal(model)
	t, _ := json.Marshal(Text)
	switch f {
	case chat:
		return fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion","created":1700000000,"model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":%d,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"system_fingerprint":"fp_fake"}`,
			m, t, InputTokens, OutputTokens, InputTokens+OutputTokens, CachedTokens, ReasoningTokens)
	case responses:
		return responseObject(model, "completed", true)
	case anthropic:
		return fmt.Sprintf(`{"id":"msg_fake","type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":%s}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}}`,
			m, t, InputTokens, CacheWriteTokens, CachedTokens, OutputTokens)
	default:
		return googleChunk(Text, true, model)
	}
}

func responseObject(model, status string, withOutput bool) string {
	m, _ := json.Marshal(model)
	t, _ := json.Marshal(Text)
	output := "[]"
	usage := "null"
	if withOutput {
		output = fmt.Sprintf(`[{"type":"message","id":"msg_fake","status":"completed","role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}]}]`, t)
		usage = fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}`,
			InputTokens, CachedTokens, OutputTokens, ReasoningTokens, InputTokens+OutputTokens)
	}
	return fmt.Sprintf(`{"id":"resp_fake","object":"response","created_at":1700000000,"status":%q,"model":%s,"output":%s,"usage":%s}`, status, m, output, usage)
}

func googleChunk(text string, final bool, model string) string {
	t, _ := json.Marshal(text)
	finish := ""
	if final {
		finish = `,"finishReason":"STOP"`
	}
	return fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":%s}],"role":"model"}%s,"index":0}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d,"cachedContentTokenCount":%d,"thoughtsTokenCount":%d},"modelVersion":%q}`,
		t, finish, InputTokens, OutputTokens-ReasoningTokens, InputTokens+OutputTokens, CachedTokens, ReasoningTokens, model)
}

// split cuts Text into n pieces.
func split(n int) []string {
	words := strings.SplitAfter(Text, " ")
	out := make([]string, n)
	for i, w := range words {
		out[i*n/len(words)] += w
	}
	return out
}

func streamEvents(f format, model string, n int, includeUsage bool) []string {
	m, _ := json.Marshal(model)
	data := func(s string) string { return "data: " + s + "\n\n" }
	var ev []string
	switch f {
	case chat:
		ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":%s,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, m)))
		for _, piece := range split(n) {
			t, _ := json.Marshal(piece)
			ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":%s,"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}`, m, t)))
		}
		ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":%s,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, m)))
		if includeUsage {
			ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":%s,"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d},"completion_tokens_details":{"reasoning_tokens":%d}}}`,
				m, InputTokens, OutputTokens, InputTokens+OutputTokens, CachedTokens, ReasoningTokens)))
		}
		ev = append(ev, "data: [DONE]\n\n")
	case responses:
		event := func(typ, payload string) string { return "event: " + typ + "\ndata: " + payload + "\n\n" }
		// The whole sequence of a message item, as the official clients
		// (the AI SDK's among them) expect it.
		seq := 0
		next := func() int { seq++; return seq }
		full, _ := json.Marshal(Text)
		ev = append(ev, event("response.created", fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, responseObject(model, "in_progress", false))))
		ev = append(ev, event("response.output_item.added", fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":%d,"output_index":0,"item":{"id":"msg_fake","type":"message","status":"in_progress","role":"assistant","content":[]}}`, next())))
		ev = append(ev, event("response.content_part.added", fmt.Sprintf(`{"type":"response.content_part.added","sequence_number":%d,"item_id":"msg_fake","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`, next())))
		for _, piece := range split(n) {
			t, _ := json.Marshal(piece)
			ev = append(ev, event("response.output_text.delta", fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_fake","output_index":0,"content_index":0,"delta":%s}`, next(), t)))
		}
		ev = append(ev, event("response.output_text.done", fmt.Sprintf(`{"type":"response.output_text.done","sequence_number":%d,"item_id":"msg_fake","output_index":0,"content_index":0,"text":%s}`, next(), full)))
		ev = append(ev, event("response.content_part.done", fmt.Sprintf(`{"type":"response.content_part.done","sequence_number":%d,"item_id":"msg_fake","output_index":0,"content_index":0,"part":{"type":"output_text","text":%s,"annotations":[]}}`, next(), full)))
		ev = append(ev, event("response.output_item.done", fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":%d,"output_index":0,"item":{"id":"msg_fake","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}]}}`, next(), full)))
		ev = append(ev, event("response.completed", fmt.Sprintf(`{"type":"response.completed","sequence_number":%d,"response":%s}`, next(), responseObject(model, "completed", true))))
	case anthropic:
		event := func(typ, payload string) string { return "event: " + typ + "\ndata: " + payload + "\n\n" }
		ev = append(ev, event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":%s,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}}`,
			m, InputTokens, CacheWriteTokens, CachedTokens)))
		ev = append(ev, event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
		ev = append(ev, event("ping", `{"type": "ping"}`))
		for _, piece := range split(n) {
			t, _ := json.Marshal(piece)
			ev = append(ev, event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`, t)))
		}
		ev = append(ev, event("content_block_stop", `{"type":"content_block_stop","index":0}`))
		ev = append(ev, event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, OutputTokens)))
		ev = append(ev, event("message_stop", `{"type":"message_stop"}`))
	case google:
		pieces := split(n)
		for i, piece := range pieces {
			ev = append(ev, "data: "+googleChunk(piece, i == len(pieces)-1, model)+"\r\n\r\n")
		}
	}
	return ev
}

// halves splits a string in two, so that streamed arguments arrive in
// pieces.
func halves(s string) [2]string {
	return [2]string{s[:len(s)/2], s[len(s)/2:]}
}

// scriptEvents streams a scripted step in a format: its text, then each
// tool call with its arguments in two pieces (Google sends whole calls),
// then the finish (tool calls when there are any) and usage.
func scriptEvents(f format, model string, st Step) []string {
	m, _ := json.Marshal(model)
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	data := func(s string) string { return "data: " + s + "\n\n" }
	event := func(typ, payload string) string { return "event: " + typ + "\ndata: " + payload + "\n\n" }
	var ev []string
	switch f {
	case chat:
		if st.Reasoning != "" {
			ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","model":%s,"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":%s}}]}`, m, js(st.Reasoning))))
		}
		ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","model":%s,"choices":[{"index":0,"delta":{"role":"assistant","content":%s}}]}`, m, js(st.Text))))
		for i, c := range st.Calls {
			h := halves(c.Args)
			ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}]}}]}`, i, js(c.ID), js(c.Name), js(h[0]))))
			ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}}]}`, i, js(h[1]))))
		}
		finish := "stop"
		if len(st.Calls) > 0 {
			finish = "tool_calls"
		}
		ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","choices":[{"index":0,"delta":{},"finish_reason":%q}]}`, finish)))
		ev = append(ev, data(fmt.Sprintf(`{"id":"chatcmpl-fake","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d},"completion_tokens_details":{"reasoning_tokens":%d}}}`,
			InputTokens, OutputTokens, CachedTokens, ReasoningTokens)))
		ev = append(ev, "data: [DONE]\n\n")
	case responses:
		ev = append(ev, event("response.created", fmt.Sprintf(`{"type":"response.created","response":{"id":"resp_fake","model":%s,"status":"in_progress"}}`, m)))
		if st.Text != "" {
			ev = append(ev, event("response.output_text.delta", fmt.Sprintf(`{"type":"response.output_text.delta","item_id":"msg_fake","output_index":0,"content_index":0,"delta":%s}`, js(st.Text))))
		}
		for i, c := range st.Calls {
			h := halves(c.Args)
			item := fmt.Sprintf(`"fc_%d"`, i)
			ev = append(ev, event("response.output_item.added", fmt.Sprintf(`{"type":"response.output_item.added","output_index":%d,"item":{"type":"function_call","id":%s,"call_id":%s,"name":%s,"arguments":""}}`, i+1, item, js(c.ID), js(c.Name))))
			for _, piece := range h {
				ev = append(ev, event("response.function_call_arguments.delta", fmt.Sprintf(`{"type":"response.function_call_arguments.delta","item_id":%s,"output_index":%d,"delta":%s}`, item, i+1, js(piece))))
			}
			ev = append(ev, event("response.output_item.done", fmt.Sprintf(`{"type":"response.output_item.done","output_index":%d,"item":{"type":"function_call","id":%s,"call_id":%s,"name":%s,"arguments":%s,"status":"completed"}}`, i+1, item, js(c.ID), js(c.Name), js(c.Args))))
		}
		ev = append(ev, event("response.completed", fmt.Sprintf(`{"type":"response.completed","response":{"id":"resp_fake","model":%s,"status":"completed","usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":%d}}}}`,
			m, InputTokens, CachedTokens, OutputTokens, ReasoningTokens)))
	case anthropic:
		ev = append(ev, event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":%s,"content":[],"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}}`,
			m, InputTokens, CacheWriteTokens, CachedTokens)))
		idx := 0
		if st.Text != "" {
			ev = append(ev, event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
			ev = append(ev, event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`, js(st.Text))))
			ev = append(ev, event("content_block_stop", `{"type":"content_block_stop","index":0}`))
			idx++
		}
		for _, c := range st.Calls {
			ev = append(ev, event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%s,"name":%s,"input":{}}}`, idx, js(c.ID), js(c.Name))))
			for _, piece := range halves(c.Args) {
				ev = append(ev, event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, idx, js(piece))))
			}
			ev = append(ev, event("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, idx)))
			idx++
		}
		stop := "end_turn"
		if len(st.Calls) > 0 {
			stop = "tool_use"
		}
		ev = append(ev, event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, OutputTokens)))
		ev = append(ev, event("message_stop", `{"type":"message_stop"}`))
	case google:
		parts := []string{}
		if st.Text != "" {
			parts = append(parts, fmt.Sprintf(`{"text":%s}`, js(st.Text)))
		}
		for _, c := range st.Calls {
			args := c.Args
			if !json.Valid([]byte(args)) {
				args = js(args) // Google sends objects; a broken script sends a string
			}
			parts = append(parts, fmt.Sprintf(`{"functionCall":{"id":%s,"name":%s,"args":%s}}`, js(c.ID), js(c.Name), args))
		}
		ev = append(ev, "data: "+fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[%s]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d,"cachedContentTokenCount":%d,"thoughtsTokenCount":%d},"modelVersion":%s}`,
			strings.Join(parts, ","), InputTokens, OutputTokens-ReasoningTokens, InputTokens+OutputTokens, CachedTokens, ReasoningTokens, m)+"\r\n\r\n")
	}
	return ev
}

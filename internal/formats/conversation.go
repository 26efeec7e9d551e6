package formats

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// The instance's provider client: a conversation in no format's shape is
// encoded as one streamed request of a format, and the streamed answer is
// read through a Meter (the gateway's own usage reader, so both count
// tokens alike) that also decodes it into text, reasoning and tool calls.

// Conversation is one provider step of an agent: what it sends.
type Conversation struct {
	// Model is the model id the request names.
	Model string
	// System is the system prompt.
	System string
	// Messages are the turns so far, oldest first.
	Messages []Message
	// Tools are the tools the model may call.
	Tools []Tool
	// Settings are model options by the names agents configure them with
	// (temperature, topP, topK, maxTokens, seed, stop, reasoningEffort, …);
	// each format sends those it has, under its own names, and drops the
	// rest.
	Settings map[string]any
	// Body members are set on the request body as they are, last.
	Body map[string]any
	// Headers are set on the request before the credential.
	Headers map[string]string
}

// Role is who a message is from.
type Role string

// The roles. RoleSystem is a system message in the middle of a
// conversation (an update the model must see); formats without such
// messages send it as user text marked "[system]".
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleSystem    Role = "system"
)

// Message is one turn: parts of one role.
type Message struct {
	Role  Role
	Parts []Part
}

// PartKind is what a part holds.
type PartKind int

// The kinds of part.
const (
	// TextPart is text (Text).
	TextPart PartKind = iota
	// ReasoningPart is the model's reasoning (Text), sent back only to
	// formats that take it, with its Signature.
	ReasoningPart
	// ToolCallPart is a call the model made (CallID, Name, Input).
	ToolCallPart
	// ToolResultPart answers a call (CallID, Name, Output, IsError).
	ToolResultPart
)

// Part is a piece of a message.
type Part struct {
	Kind PartKind
	Text string
	// Signature is the provider's signature of a reasoning part, which a
	// format that verifies reasoning it is sent back needs.
	Signature string
	// CallID and Name identify a tool call and the result that answers it.
	CallID, Name string
	// Input is a tool call's arguments, a JSON object.
	Input json.RawMessage
	// Output is a tool result's text; IsError marks a failed call.
	Output  string
	IsError bool
}

// Text returns a message of one text part.
func Text(role Role, text string) Message {
	return Message{Role: role, Parts: []Part{{Kind: TextPart, Text: text}}}
}

// Tool is a tool the model may call.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the tool's arguments (an object).
	Schema json.RawMessage
}

// Finish is why a step ended, in one vocabulary for every format.
type Finish int

// The finishes.
const (
	FinishUnknown       Finish = iota // the stream named none
	FinishStop                        // the model ended its answer
	FinishLength                      // the output limit was reached
	FinishToolCalls                   // the model waits for tool results
	FinishContentFilter               // the provider withheld content
	FinishOther                       // any other reason (RawFinish says which)
)

// Step is a decoded streamed answer.
type Step struct {
	Text, Reasoning string
	// Signature is the provider's signature of the reasoning, if any.
	Signature string
	// ToolCalls are the calls the model made, in its order.
	ToolCalls []ToolCall
	// Finish is why the step ended; RawFinish is the provider's word for
	// it.
	Finish    Finish
	RawFinish string
	// Usage is the usage the answer reported (as the gateway meters it),
	// nil when it reported none.
	Usage *Tokens
}

// ToolCall is a call the model made; Arguments is the JSON text it sent.
type ToolCall struct {
	ID, Name, Arguments string
}

// Delta is a piece of streamed text as it arrives.
type Delta struct {
	// Field is "text" or "reasoning".
	Field string
	Text  string
}

// CallErrorKind says what went wrong with a provider call.
type CallErrorKind int

// The kinds of call error.
const (
	// CallUnreachable: the request could not be sent.
	CallUnreachable CallErrorKind = iota + 1
	// CallRefused: the provider answered an error status (Status).
	CallRefused
	// CallNotStream: the answer is not an event stream.
	CallNotStream
	// CallStreamError: the stream carried an error event.
	CallStreamError
	// CallCut: the stream ended before its end.
	CallCut
)

// CallError is a failed provider call. Its message never carries the key.
type CallError struct {
	Kind    CallErrorKind
	Status  int
	Message string
	// Detail is the provider's own message of a CallRefused answer.
	Detail string
}

func (e *CallError) Error() string { return e.Message }

// MaxStreamEvent is the largest stream event the client decodes.
const MaxStreamEvent = 8 << 20

// NewRequest makes the streamed request of a conversation in format f:
// POST <base><path> with the format's body, the conversation's headers,
// and apiKey (when set) in the format's credential slot.
func (f Format) NewRequest(ctx context.Context, base, apiKey string, c *Conversation) (*http.Request, error) {
	w := f.w()
	body := w.encode(c)
	for k, v := range c.Body {
		body[k] = v
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+w.clientPath(c.Model), bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	for k, v := range c.Headers {
		req.Header.Set(k, v)
	}
	if apiKey != "" {
		w.setCredential(req.Header, apiKey)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	return req, nil
}

// ReadResponse reads the answer to a NewRequest: an error status, or the
// event stream decoded into a Step (onDelta sees text and reasoning as
// they arrive). It reads the body to its end unless the stream reports an
// error. A stream that fails or is cut still returns what it decoded (and
// the usage it reported) with its error.
func (f Format) ReadResponse(resp *http.Response, onDelta func(Delta)) (*Step, *CallError) {
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		detail := errorMessage(b, resp.StatusCode)
		return nil, &CallError{Kind: CallRefused, Status: resp.StatusCode, Detail: detail,
			Message: fmt.Sprintf("Provider answered %d: %s", resp.StatusCode, detail)}
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct != "text/event-stream" {
		// Not a provider's stream: most often a base URL that reaches some
		// other server.
		if ct == "" {
			ct = "no content type"
		}
		return nil, &CallError{Kind: CallNotStream, Status: resp.StatusCode,
			Message: fmt.Sprintf("The provider answered %d with %s, not an event stream", resp.StatusCode, ct)}
	}
	d := &decoder{calls: map[int]*ToolCall{}, onDelta: onDelta}
	m := NewMeter(io.Discard, MeterOptions{Format: f, ContentType: "text/event-stream", StreamRequested: true, MaxEventBytes: MaxStreamEvent})
	m.dec = d
	buf := make([]byte, 32<<10)
	var readErr error
	for d.err == nil {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			m.Write(buf[:n])
		}
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	m.Close()
	step := d.step()
	if m.usageSeen {
		t := m.Result().Tokens
		step.Usage = &t
	}
	if d.err != nil {
		return step, d.err
	}
	if readErr != nil || !d.done {
		msg := "The provider's stream ended before it was complete"
		if readErr != nil {
			msg += ": " + readErr.Error()
		}
		return step, &CallError{Kind: CallCut, Message: msg}
	}
	return step, nil
}

// errorMessage is the message of a provider's error body: error.message
// (every format's envelope), a top-level message, or the body itself.
func errorMessage(b []byte, status int) string {
	m := gjson.GetBytes(b, "error.message").String()
	if m == "" {
		m = gjson.GetBytes(b, "message").String()
	}
	if m == "" {
		m = strings.TrimSpace(string(b))
		if len(m) > 500 {
			m = m[:500]
		}
	}
	if m == "" {
		m = http.StatusText(status)
	}
	return m
}

// decoder is a streamed answer being decoded, event by event. The events
// it is given are views of the Meter's buffers: what it keeps, it copies
// (the builders copy; strings set on calls go through keep).
type decoder struct {
	text, reasoning strings.Builder
	signature       strings.Builder
	calls           map[int]*ToolCall // by the stream's index
	order           []int
	args            map[int]*strings.Builder
	finish          Finish
	rawFinish       string
	// done is set by the format's terminal event.
	done    bool
	err     *CallError
	onDelta func(Delta)
}

func (d *decoder) addText(s string) {
	if s == "" {
		return
	}
	d.text.WriteString(s)
	if d.onDelta != nil {
		d.onDelta(Delta{Field: "text", Text: s})
	}
}

func (d *decoder) addReasoning(s string) {
	if s == "" {
		return
	}
	d.reasoning.WriteString(s)
	if d.onDelta != nil {
		d.onDelta(Delta{Field: "reasoning", Text: s})
	}
}

// call is the tool call at a stream index, made on first sight.
func (d *decoder) call(i int) *ToolCall {
	c, ok := d.calls[i]
	if !ok {
		c = &ToolCall{}
		d.calls[i] = c
		d.order = append(d.order, i)
	}
	return c
}

// nextCall is a new tool call after the ones seen (formats whose calls
// come whole, without an index).
func (d *decoder) nextCall() *ToolCall {
	i := len(d.order)
	for {
		if _, taken := d.calls[i]; !taken {
			return d.call(i)
		}
		i++
	}
}

// addArgs appends streamed argument text to the call at index i.
func (d *decoder) addArgs(i int, s string) {
	if d.args == nil {
		d.args = map[int]*strings.Builder{}
	}
	b, ok := d.args[i]
	if !ok {
		b = &strings.Builder{}
		d.args[i] = b
	}
	b.WriteString(s)
}

func (d *decoder) setFinish(raw string, f Finish) { d.rawFinish, d.finish = strings.Clone(raw), f }

// keep copies a string out of the event being decoded.
func keep(s string) string { return strings.Clone(s) }

func (d *decoder) fail(message string) {
	if d.err == nil {
		d.err = &CallError{Kind: CallStreamError, Message: "Provider stream error: " + message}
	}
}

// step is what was decoded, tool calls in the order they appeared.
func (d *decoder) step() *Step {
	s := &Step{Text: d.text.String(), Reasoning: d.reasoning.String(), Signature: d.signature.String(),
		Finish: d.finish, RawFinish: d.rawFinish}
	for _, i := range d.order {
		c := *d.calls[i]
		if b, ok := d.args[i]; ok {
			c.Arguments += b.String()
		}
		s.ToolCalls = append(s.ToolCalls, c)
	}
	return s
}

// finishTable maps a format's finish words to Finish; words it lacks are
// FinishOther, and no word is FinishUnknown.
type finishTable map[string]Finish

func (t finishTable) of(raw string) Finish {
	if raw == "" {
		return FinishUnknown
	}
	if f, ok := t[raw]; ok {
		return f
	}
	return FinishOther
}

// settings maps agent option names to a format's request field names.
type settings map[string]string

// apply sets the options a format has on dst under its names.
func (s settings) apply(dst map[string]any, from map[string]any) {
	for k, v := range from {
		if f, ok := s[k]; ok {
			dst[f] = v
		}
	}
}

// outputSettingNames are the names agents give the output limit.
var outputSettingNames = []string{"maxTokens", "max_tokens", "maxOutputTokens"}

// withOutput adds the output-limit names of an agent's options, mapped to
// field, to s.
func (s settings) withOutput(field string) settings {
	for _, n := range outputSettingNames {
		s[n] = field
	}
	return s
}

// systemAsUser turns mid-conversation system messages into user text
// marked [system], for formats without such messages.
func systemAsUser(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Role == RoleSystem {
			out = append(out, Text(RoleUser, "[system] "+joinText(m.Parts)))
			continue
		}
		out = append(out, m)
	}
	return out
}

// alternating joins consecutive messages of one role (formats that want
// user and assistant turns to alternate); text that meets text is joined
// with a blank line.
func alternating(msgs []Message) []Message {
	var out []Message
	for _, m := range msgs {
		n := len(out)
		if n == 0 || out[n-1].Role != m.Role {
			out = append(out, Message{Role: m.Role, Parts: append([]Part(nil), m.Parts...)})
			continue
		}
		prev := &out[n-1]
		for _, p := range m.Parts {
			last := len(prev.Parts) - 1
			if p.Kind == TextPart && last >= 0 && prev.Parts[last].Kind == TextPart {
				prev.Parts[last].Text += "\n\n" + p.Text
				continue
			}
			prev.Parts = append(prev.Parts, p)
		}
	}
	return out
}

// joinText is the text of a message's text parts.
func joinText(parts []Part) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Kind == TextPart {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// onlyText reports whether a message is text and nothing else.
func onlyText(parts []Part) bool {
	for _, p := range parts {
		if p.Kind != TextPart {
			return false
		}
	}
	return true
}

// argsObject is a tool call's arguments as a JSON object ({} when empty
// or not an object).
func argsObject(in json.RawMessage) json.RawMessage {
	if gjson.ValidBytes(in) && gjson.ParseBytes(in).IsObject() {
		return in
	}
	return json.RawMessage("{}")
}

// schemaOf is a tool's schema, or the empty object schema.
func schemaOf(t Tool) json.RawMessage {
	if len(t.Schema) == 0 {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return t.Schema
}

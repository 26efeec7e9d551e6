// Package formats is the one home of the wire formats agentgate speaks:
// OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and Google
// Generative AI. For each format it knows
//
//   - its gateway routes and methods, where a client puts its key, and
//     where a provider expects its credential (route.go, kinds.go);
//   - the request fields the gateway reads (model, stream, output limits),
//     found in one pass that also checks the body is JSON (scan.go), the
//     request checks (fields.go) and the model rewrite, made as edits of
//     the body that copy nothing (body.go);
//   - its error envelope and its model-list shape (envelope.go);
//   - the usage its answers report, streamed or not, read by a Meter as
//     the bytes pass (meter.go);
//   - for the instance's provider client, how a conversation with tools is
//     encoded as a streamed request and how the streamed answer decodes
//     into text, reasoning and tool calls (conversation.go).
//
// Each format is one file that implements wire (chat.go, responses.go,
// anthropic.go, google.go) and one registration line below; nothing
// outside this package branches on a format. It has no Caddy import.
package formats

import (
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/apierr"
)

// Format is a registered wire format. The zero Format is no format: a path
// or request that suggests none.
type Format uint8

// The formats. Registration order is precedence order where two formats
// could claim a request: the path a malformed route suggests, and the
// header a client key is read from when a request carries several.
var (
	Anthropic = register(anthropicWire{})
	Chat      = register(chatWire{})
	Responses = register(responsesWire{})
	Google    = register(googleWire{})
)

// registry holds the formats by value; index 0 is the zero Format. all
// lists the registered ones, for All.
var (
	registry = []wire{nil}
	all      []Format
)

func register(w wire) Format {
	registry = append(registry, w)
	f := Format(len(registry) - 1)
	all = append(all, f)
	return f
}

// All returns every registered format, in registration order. The slice
// is shared (the gateway asks for it on every request): do not modify it.
func All() []Format { return all[:len(all):len(all)] }

// Count is the number of registered formats; Format values run from 1 to
// Count, so a table indexed by Format has Count()+1 entries.
func Count() int { return len(registry) - 1 }

// Named returns the format of a name ("chat", "responses", "anthropic",
// "google"), or false.
func Named(name string) (Format, bool) {
	for _, f := range All() {
		if registry[f].name() == name {
			return f, true
		}
	}
	return 0, false
}

// Names lists the registered formats' names.
func Names() []string {
	out := make([]string, 0, Count())
	for _, f := range All() {
		out = append(out, f.String())
	}
	return out
}

// Valid reports whether f is a registered format.
func (f Format) Valid() bool { return f > 0 && int(f) < len(registry) }

func (f Format) String() string {
	if !f.Valid() {
		return "unknown"
	}
	return registry[f].name()
}

// w is f's implementation; the zero Format answers as Chat, whose error
// envelope is the one of requests that suggest no format.
func (f Format) w() wire {
	if !f.Valid() {
		return registry[Chat]
	}
	return registry[f]
}

// wire is everything agentgate knows of one format. Each method is one
// question that code outside this package would otherwise answer with a
// switch on the format.
type wire interface {
	// name is the format's name in usage records, metric labels and the
	// instance's provider configuration.
	name() string

	routes
	requests
	envelopes
	meterer
	client
}

// routes: the gateway paths of a format, and the connection kinds that
// serve it.
type routes interface {
	// match recognises one of the format's routes in a gateway path tail
	// (after the connection and any version prefix): ok is false when the
	// tail is not the format's; perr says why a tail of the format's is
	// malformed.
	match(tail string) (op Op, model, method string, perr *ParseError, ok bool)
	// suggests reports whether a tail that is no route looks like one of
	// the format's (for the envelope of the error that says so).
	suggests(tail, version string) bool
	// upstreamPath is the path after the connection's base URL.
	upstreamPath(r Route, model string) string
	// streamsByPath reports whether the route itself asks for a stream.
	streamsByPath(r Route) bool

	// serves reports whether connections of a kind speak the format.
	serves(kind string) bool
	// nativeTo reports whether the format is a kind's own: its envelope
	// answers errors of the kind's connections, and its credential slot
	// carries the kind's provider credential.
	nativeTo(kind string) bool
	// setCredential puts a provider credential in the format's slot.
	setCredential(h http.Header, secret string)
	// keySlots are where the format's SDK sends its key besides
	// Authorization: a header ("" when it has none of its own), and
	// whether it may use ?key=.
	keySlots() (header string, query bool)
	// claims reports whether a request's headers mark a client of the
	// format even when its key travels in Authorization.
	claims(h http.Header) bool
}

// requests: the request body fields the gateway reads and rewrites.
type requests interface {
	// foldsKeys reports whether the format's parser takes snake_case and
	// lowerCamelCase spellings of a field as the same field.
	foldsKeys() bool
	// modelInPath reports whether the model travels in the path rather
	// than in the body's "model".
	modelInPath() bool
	// check refuses a request the provider would refuse for a missing or
	// malformed field the gateway relies on.
	check(r Route, f *Fields) *apierr.Error
	// outputLimit is the request's own bound on output tokens (0: none);
	// extraOutput is output the request allows beyond it (a thinking
	// budget).
	outputLimit(f *Fields) int64
	extraOutput(f *Fields) int64
	// rewrite checks and rewrites the model of a request body (the model
	// of the path is rewritten by upstreamPath).
	rewrite(r Route, b *Body, f *Fields, requested, upstream string) *apierr.Error
	// prepareStream edits a streamed request so that the answer reports
	// usage; drop says the usage the client did not ask for must be hidden
	// from it.
	prepareStream(b *Body, f *Fields) (drop bool)
}

// envelopes: the shapes of gateway-made answers.
type envelopes interface {
	// errorBody adds the format's error members to m, which holds _tag
	// and message.
	errorBody(m map[string]any, status int, tag, message string)
	// modelObject is one model in the format's shape; modelList wraps the
	// objects of one page.
	modelObject(m ModelInfo, ownedBy string) any
	modelList(objects []any, models []ModelInfo) any
}

// meterer: reading the usage of answers (meter.go).
type meterer interface {
	// arrayStream reports whether a stream that is not SSE arrives as one
	// JSON array whose elements are events.
	arrayStream() bool
	// dropsUsageChunk reports whether the usage-only event of a stream can
	// be hidden from a client (MeterOptions.DropUsageChunk).
	dropsUsageChunk() bool
	// event reads one stream event (an SSE event's data, or an array
	// element); usageOnly marks an event that carries usage and nothing
	// for the client.
	event(m *Meter, name []byte, v gjson.Result) (usageOnly bool)
	// bodyReader says what is read of a whole non-stream answer, as its
	// bytes pass (bodyscan.go).
	bodyReader() *bodyNode
	// salvage reads the usage of an event or body too big to parse from
	// its first and last bytes.
	salvage(m *Meter, name []byte, w *window, body bool)
}

// client: the instance's provider requests (conversation.go).
type client interface {
	// clientPath is where a streamed request goes, after the base URL the
	// format's official SDK takes.
	clientPath(model string) string
	// encode makes the body of a streamed request.
	encode(c *Conversation) map[string]any
	// decode reads one stream event into a step.
	decode(d *decoder, name string, v gjson.Result)
}

package pluginhost

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"
)

// A plugin tool's context reaches the server through its process's stdio
// like the client's requests (see rpc.go), each naming the call by the
// token the server gave it when it started the tool; a token of a call
// that is not running in that process is refused:
//
//	{"rpc":"ask","id":N,"req":{"call":"call-7","permission":"compress","patterns":["*"],"always":["*"],"metadata":{}}}
//	{"rpc":"ask","id":N,"res":{}}                                      allowed
//	{"rpc":"ask","id":N,"res":{"error":{"name":"PermissionRejectedError","message":"…"}}}
//	{"rpc":"meta","id":N,"req":{"call":"call-7","title":"…","metadata":{…}}}   not answered
//
// Both are checked before they are used: an ask with a malformed input is
// refused (the tool sees why); a metadata update that is malformed or too
// large is dropped, logged once per call.
const (
	// maxAsks bounds the permission requests of one process waiting at
	// once; more are refused.
	maxAsks = 16
	// Limits of an ask's input.
	maxAskName     = 128
	maxAskPatterns = 64
	maxAskPattern  = 4096
	maxAskMetadata = 16 << 10
	// Limits of a metadata update: its title (in bytes, cut at a rune)
	// and its metadata, encoded.
	maxMetaTitle = 1000
	maxMetadata  = 64 << 10
)

// call finds a running tool call of the process by its token.
func (p *proc) call(token string) *toolCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[token]
}

type askError struct{ name, msg string }

func (e *askError) Error() string        { return e.msg }
func (e *askError) AskErrorName() string { return e.name }

// invalidAsk is the refusal of an ask whose input is malformed.
func invalidAsk(msg string) error { return &askError{name: "InvalidAskError", msg: "ask: " + msg} }

// parseAsk checks an ask's input.
func parseAsk(raw json.RawMessage) (string, AskInput, error) {
	var in struct {
		Call       string          `json:"call"`
		Permission json.RawMessage `json:"permission"`
		Patterns   json.RawMessage `json:"patterns"`
		Always     json.RawMessage `json:"always"`
		Metadata   json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(raw, &in) != nil {
		return "", AskInput{}, invalidAsk("the input is not a JSON object")
	}
	var out AskInput
	if json.Unmarshal(in.Permission, &out.Permission) != nil || out.Permission == "" || len(out.Permission) > maxAskName ||
		strings.ContainsAny(out.Permission, "\x00\r\n") {
		return in.Call, out, invalidAsk("permission must be a name of 1 to 128 characters")
	}
	list := func(field string, raw json.RawMessage, dst *[]string) error {
		if len(raw) == 0 || string(raw) == "null" {
			*dst = []string{}
			return nil
		}
		if json.Unmarshal(raw, dst) != nil || len(*dst) > maxAskPatterns {
			return invalidAsk(field + " must be an array of at most 64 strings")
		}
		for _, p := range *dst {
			if p == "" || len(p) > maxAskPattern || strings.ContainsRune(p, 0) {
				return invalidAsk(field + " holds an empty, overlong or binary pattern")
			}
		}
		return nil
	}
	if err := list("patterns", in.Patterns, &out.Patterns); err != nil {
		return in.Call, out, err
	}
	if len(out.Patterns) == 0 {
		return in.Call, out, invalidAsk("patterns must name at least one pattern")
	}
	if err := list("always", in.Always, &out.Always); err != nil {
		return in.Call, out, err
	}
	if len(in.Metadata) > maxAskMetadata {
		return in.Call, out, invalidAsk("metadata is over 16 KB")
	}
	if len(in.Metadata) > 0 && string(in.Metadata) != "null" && json.Unmarshal(in.Metadata, &out.Metadata) != nil {
		return in.Call, out, invalidAsk("metadata must be an object")
	}
	return in.Call, out, nil
}

// serveAsk decides a tool's permission request with the call's Ask, in a
// goroutine of its own (it may wait for the user as long as the call
// runs), and answers it.
func (p *proc) serveAsk(h *Host, id int64, raw json.RawMessage) {
	refuse := func(err error) {
		name := "PermissionRejectedError"
		if ae, ok := err.(AskError); ok {
			name = ae.AskErrorName()
		}
		p.answer("ask", id, map[string]any{"error": map[string]string{"name": name, "message": err.Error()}})
	}
	token, in, err := parseAsk(raw)
	c := p.call(token)
	switch {
	case c == nil:
		refuse(invalidAsk("the tool call is not running"))
		return
	case err != nil:
		refuse(err)
		return
	case c.tc.Ask == nil:
		refuse(&askError{name: "PermissionDeniedError", msg: "this tool call cannot ask for permissions"})
		return
	}
	select {
	case p.asks <- struct{}{}:
	default:
		refuse(invalidAsk("too many permission requests at once"))
		return
	}
	go func() {
		defer func() { <-p.asks }()
		ctx, cancel := context.WithCancel(c.ctx)
		defer cancel()
		go func() {
			select {
			case <-p.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := c.tc.Ask(ctx, in); err != nil {
			refuse(err)
			return
		}
		p.answer("ask", id, map[string]any{})
	}()
}

// serveMeta hands a tool's metadata update to its call's Metadata.
func (p *proc) serveMeta(h *Host, raw json.RawMessage) {
	var in struct {
		Call     string          `json:"call"`
		Title    *string         `json:"title"`
		Metadata json.RawMessage `json:"metadata"`
		Dropped  string          `json:"dropped"`
	}
	err := json.Unmarshal(raw, &in)
	c := p.call(in.Call)
	if c == nil || c.tc.Metadata == nil {
		return
	}
	warn := func(why string) {
		p.mu.Lock()
		first := !c.warned
		c.warned = true
		p.mu.Unlock()
		if first {
			h.log.Warn("a plugin tool's metadata update was dropped", zap.String("call", c.tc.CallID), zap.String("why", why))
		}
	}
	if err != nil {
		warn("not a JSON object")
		return
	}
	title := ""
	if in.Title != nil {
		title = cut(*in.Title, maxMetaTitle)
	}
	var meta map[string]any
	switch {
	case in.Dropped != "":
		warn(in.Dropped)
	case len(in.Metadata) > maxMetadata:
		warn("the metadata is over 64 KB")
	case len(in.Metadata) > 0 && string(in.Metadata) != "null":
		if json.Unmarshal(in.Metadata, &meta) != nil || meta == nil {
			warn("the metadata is not an object")
			meta = nil
		}
	}
	if in.Title == nil && meta == nil {
		return
	}
	c.tc.Metadata(title, meta)
}

// cut shortens s to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

package webapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/webpage"
)

// markdown renders assistant text. Goldmark's defaults keep it inert: raw
// HTML in the text is dropped (not passed through), and links and images
// with javascript:, vbscript:, file: or data: (other than images) URLs lose
// their URL.
var markdown = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.TaskList))

// renderMarkdown is the template function: the text as safe HTML.
func renderMarkdown(s string) template.HTML {
	var b bytes.Buffer
	if err := markdown.Convert([]byte(s), &b); err != nil {
		return template.HTML(template.HTMLEscapeString(s))
	}
	return template.HTML(b.String())
}

func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"markdown": renderMarkdown,
		"session":  func(id string, parts ...string) string { return sessionPath(id, parts...) },
		"ms":       formatMS,
		"when":     func(ms int64) string { return formatMS(float64(ms)) },
		"usd":      formatUSD,
		"int":      func(v any) string { return webpage.Commas(strconv.FormatInt(integer(v), 10)) },
		"count":    func(n any, one, many string) string { return plural(integer(n), one, many) },
		"noun":     func(n any, one, many string) string { return noun(integer(n), one, many) },
		"json":     prettyJSON,
		"modelref": modelRef,
		"deref":    func(b *bool) bool { return b != nil && *b },
	}
	return webpage.ParsePages(templateFS, funcs, "templates/layout.html", "templates/parts.html")
}

// formatMS is an epoch-millisecond time in UTC.
func formatMS(ms float64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(int64(ms)).UTC().Format("2006-01-02 15:04 UTC")
}

// formatUSD is a cost in dollars, in one format everywhere: cents from a
// dollar up (with thousands separators), up to four decimals below (at
// least two: "$0.50", "$0.0123"), "<$0.0001" for a cost too small for
// them, and "$0.00" for none.
func formatUSD(v float64) string {
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	switch {
	case v == 0:
		return "$0.00"
	case v < 0.0001:
		return sign + "<$0.0001"
	case v >= 1:
		return sign + "$" + webpage.Commas(strconv.FormatFloat(v, 'f', 2, 64))
	}
	s := strconv.FormatFloat(v, 'f', 4, 64)
	for strings.HasSuffix(s, "0") && len(s) > len("0.00") {
		s = s[:len(s)-1]
	}
	return sign + "$" + s
}

// plural is a count with its noun, singular for one ("1 step", "2 steps",
// "1,024 tokens").
func plural(n int64, one, many string) string {
	return webpage.Commas(strconv.FormatInt(n, 10)) + " " + noun(n, one, many)
}

// noun is the noun of a count: one for 1, many for any other.
func noun(n int64, one, many string) string {
	if n == 1 || n == -1 {
		return one
	}
	return many
}

// integer is a template's count of any integer type (0 for anything
// else).
func integer(n any) int64 {
	switch v := n.(type) {
	case int:
		return int64(v)
	case int64:
		return v
	}
	return 0
}

// prettyJSON is a tool input or metadata value, indented, for a <pre>
// (the template escapes it).
func prettyJSON(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case json.RawMessage:
		var buf bytes.Buffer
		if json.Indent(&buf, t, "", "  ") == nil {
			return buf.String()
		}
		return string(t)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func modelRef(m *agents.ModelRef) string {
	if m == nil {
		return ""
	}
	return m.ProviderID + "/" + m.ID
}

// message is a stored message as the transcript shows it: the arms of the
// public message union that the page draws, one struct.
type message struct {
	ID          string           `json:"id"`
	Type        string           `json:"type"`
	Text        string           `json:"text"`
	Description string           `json:"description"`
	Agent       string           `json:"agent"`
	Model       *agents.ModelRef `json:"model"`
	Content     []content        `json:"content"`
	Finish      string           `json:"finish"`
	Error       *structuredError `json:"error"`
	Cost        float64          `json:"cost"`
	Tokens      *struct {
		Input, Output, Reasoning int64
	} `json:"tokens"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Summary string `json:"summary"`
	Outcome string `json:"outcome"`
	Command string `json:"command"`
	Exit    *int   `json:"exit"`
	Output  *struct {
		Output string `json:"output"`
	} `json:"output"`
	Name     string `json:"name"`
	Location *struct {
		Directory string `json:"directory"`
	} `json:"location"`
	Files []struct {
		Name string `json:"name"`
		Mime string `json:"mime"`
	} `json:"files"`
	Time struct {
		Created   float64 `json:"created"`
		Completed float64 `json:"completed"`
	} `json:"time"`
	// Run names the outcome of an idle marker's run (markRuns).
	Run runOutcome `json:"-"`
}

type structuredError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// content is one part of an assistant message.
type content struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	ID    string `json:"id"`
	Name  string `json:"name"`
	State struct {
		Status  string           `json:"status"`
		Input   json.RawMessage  `json:"input"`
		Content []toolContent    `json:"content"`
		Error   *structuredError `json:"error"`
	} `json:"state"`
}

type toolContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
	URI  string `json:"uri"`
	Name string `json:"name"`
}

// Input is the tool call's input for display: a streaming input is a
// JSON string of the partial text.
func (c content) Input() string {
	var s string
	if json.Unmarshal(c.State.Input, &s) == nil {
		return s
	}
	return prettyJSON(c.State.Input)
}

// decodeMessages reads stored messages for the transcript; one that does
// not decode is shown by its type only.
func decodeMessages(raws []json.RawMessage) []message {
	out := make([]message, 0, len(raws))
	for _, raw := range raws {
		var m message
		if err := json.Unmarshal(raw, &m); err != nil {
			var head struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			}
			json.Unmarshal(raw, &head)
			m = message{ID: head.ID, Type: head.Type}
		}
		out = append(out, m)
	}
	markRuns(out)
	return out
}

// sessionView is a session as the list and the session page show it.
type sessionView struct {
	*session.Info
	Children []sessionView
	Running  bool
	// LastRun names the outcome of its last run (lastRun).
	LastRun runOutcome
}

// Name is the session's title, or its id when it has none.
func (v sessionView) Name() string {
	if v.Title != "" {
		return v.Title
	}
	return v.ID
}

// StepCount is the session's steps (0 when not counted yet).
func (v sessionView) StepCount() int64 {
	if v.Steps == nil {
		return 0
	}
	return *v.Steps
}

// TokenTotal is all of the session's tokens.
func (v sessionView) TokenTotal() int64 {
	t := v.Tokens
	return int64(t.Input + t.Output + t.Reasoning + t.Cache.Read + t.Cache.Write)
}

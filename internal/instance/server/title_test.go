package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/money"
)

// titleProvider stands in front of the fake provider: it answers the
// title agent's requests as a test says (a title, an error status, or
// held until the test lets them go), and passes every other request to
// the fake.
type titleProvider struct {
	fake    *fakeprovider.Provider
	arrived chan struct{} // a title request arrived

	mu     sync.Mutex
	titles []fakeprovider.Received
	answer string
	status int           // when not 0, title requests fail with it
	hold   chan struct{} // when set, title requests wait until it is closed
}

func (p *titleProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if isTitleRequest(body) {
		p.mu.Lock()
		p.titles = append(p.titles, fakeprovider.Received{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		hold, status := p.hold, p.status
		p.mu.Unlock()
		select {
		case p.arrived <- struct{}{}:
		default:
		}
		if hold != nil {
			<-hold
		}
		if status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprint(w, `{"error":{"message":"budget exhausted","type":"insufficient_quota"}}`)
			return
		}
	}
	p.fake.ServeHTTP(w, r)
}

func (p *titleProvider) set(f func(p *titleProvider)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *titleProvider) requests() []fakeprovider.Received {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]fakeprovider.Received(nil), p.titles...)
}

// newTitleHarness is a drain harness whose provider is a titleProvider
// (titles answered "Fix the parser", turns the fake's text), with the
// server's log kept at debug level; prov changes the provider config, and
// titleAgent, when set, is the server config's definition of the title
// agent.
func newTitleHarness(t *testing.T, prov func(*loop.ProviderConfig), titleAgent string) (*drainHarness, *titleProvider, *observer.ObservedLogs) {
	t.Helper()
	fake, err := fakeprovider.Start(fakeKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	tp := &titleProvider{fake: fake, arrived: make(chan struct{}, 16), answer: "Fix the parser"}
	fake.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		if isTitleRequest(body) {
			tp.mu.Lock()
			defer tp.mu.Unlock()
			return fakeprovider.Step{Text: tp.answer}
		}
		return fakeprovider.Step{Text: fakeprovider.Text}
	}})
	front := httptest.NewServer(tp)
	t.Cleanup(front.Close)
	runner := loop.NewRunner()
	pc := loop.ProviderConfig{BaseURL: front.URL + "/v1", APIKey: fakeKey, Format: "chat", Model: "fake-model",
		InputPrice: 2 * money.Scale, OutputPrice: 8 * money.Scale}
	if prov != nil {
		prov(&pc)
	}
	runner.SetProvider(pc)
	core, logs := observer.New(zapcore.DebugLevel)
	sh := newSessHarness(t, func(o *Options) {
		o.Runner = runner
		o.Logger = zap.New(core)
		if titleAgent != "" {
			o.Agents = map[string]json.RawMessage{"title": json.RawMessage(titleAgent)}
		}
	})
	t.Cleanup(runner.Close)
	return &drainHarness{sessHarness: sh, fake: fake, runner: runner}, tp, logs
}

// settledTitle waits until the session's run is idle (n idle markers)
// and no title request of it runs, and returns its title.
func (h *drainHarness) settledTitle(sid string, n int) string {
	h.t.Helper()
	h.waitIdle(sid, n)
	deadline := time.Now().Add(10 * time.Second)
	for h.runner.Titling(sid) {
		if time.Now().After(deadline) {
			h.t.Fatalf("session %s: the title request never ended", sid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	info, r := h.getSession(sid)
	if r.status != 200 {
		h.t.Fatalf("session %s: %d %s", sid, r.status, r.body)
	}
	return info.Title
}

// noPromptInLog fails when a log entry carries the prompt's text.
func noPromptInLog(t *testing.T, logs *observer.ObservedLogs, prompt string) {
	t.Helper()
	for _, e := range logs.All() {
		if strings.Contains(e.Message, prompt) || strings.Contains(fmt.Sprint(e.ContextMap()), prompt) {
			t.Fatalf("the log carries the prompt: %s %v", e.Message, e.ContextMap())
		}
	}
}

func logged(logs *observer.ObservedLogs, snippet string) bool {
	return logs.FilterMessageSnippet(snippet).Len() > 0
}

// The first prompt of a root session titles it through the title agent,
// beside the turn: the request carries the title agent's system prompt,
// the prompt, no tools, the output bound and the session's header, on the
// session's model; the title is read by the v2 and v1 routes and
// announced on both event streams. A second prompt does not title again.
func TestTitleOnFirstPrompt(t *testing.T) {
	h, tp, logs := newTitleHarness(t, nil, "")
	tp.set(func(p *titleProvider) { p.answer = "  \"**Fix the parser**\"\nignored second line" })
	h.send("POST", "/api/session", map[string]any{"id": "ses_t"})
	placeholder, _ := h.getSession("ses_t")
	if !session.IsDefaultTitle(placeholder.Title) {
		t.Fatalf("a new session's title: %q", placeholder.Title)
	}
	ev := h.subscribe(t)
	ev.next(t) // server.connected
	v1 := h.streamAt(t, "/event?directory="+h.dir)
	v1.event(t) // server.connected
	h.prompt("ses_t", "the parser drops the last token", nil)
	if got := h.settledTitle("ses_t", 1); got != "Fix the parser" {
		t.Fatalf("title %q", got)
	}
	// The turn went on as usual: its request is the session's, with tools.
	msgs := h.messages("ses_t")
	if as := ofType(msgs, "assistant"); len(as) != 1 || text(as[0]) != fakeprovider.Text || ofType(msgs, "idle")[0]["outcome"] != "succeeded" {
		t.Fatalf("the turn: %v", msgs)
	}
	if turn := lastTurn(t, h.fake); !gjson.GetBytes(turn.Body, "tools").IsArray() {
		t.Fatalf("the turn offered no tools: %s", turn.Body)
	}
	reqs := tp.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d title requests", len(reqs))
	}
	body := reqs[0].Body
	if reqs[0].Path != "/v1/chat/completions" || gjson.GetBytes(body, "model").String() != "fake-model" ||
		reqs[0].Header.Get(loop.SessionHeader) != "ses_t" || gjson.GetBytes(body, "tools").Exists() ||
		gjson.GetBytes(body, "max_tokens").Int() != 64 {
		t.Fatalf("title request %s %v %s", reqs[0].Path, reqs[0].Header, body)
	}
	msgsSent := gjson.GetBytes(body, "messages").Array()
	if len(msgsSent) != 3 || msgsSent[0].Get("role").String() != "system" || msgsSent[0].Get("content").String() != agents.TitlePrompt ||
		!strings.HasPrefix(msgsSent[1].Get("content").String(), "Generate a title for this conversation") ||
		msgsSent[2].Get("content").String() != "the parser drops the last token" {
		t.Fatalf("title request messages: %s", gjson.GetBytes(body, "messages").Raw)
	}
	// Both route families read the title.
	if r := h.get("/api/session/ses_t"); gjson.GetBytes(r.body, "data.title").String() != "Fix the parser" {
		t.Fatalf("v2 session: %s", r.body)
	}
	if r := h.get("/session/ses_t?directory=" + h.dir); gjson.GetBytes(r.body, "title").String() != "Fix the parser" {
		t.Fatalf("v1 session: %s", r.body)
	}
	// The web app's page and its live part (which an open page fetches
	// on the event) carry it.
	wantPage(t, h.page("/ui/session/ses_t"), http.StatusOK, `<h1 id="title">Fix the parser</h1>`)
	wantPage(t, h.page("/ui/session/ses_t/live"), http.StatusOK, `data-title="Fix the parser"`)
	// Both streams announce it.
	for {
		f := strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: ")
		if gjson.Get(f, "type").String() == "session.updated" && gjson.Get(f, "data.info.title").String() == "Fix the parser" {
			break
		}
	}
	for {
		e := v1.event(t)
		if e.Get("type").String() == "session.updated" && e.Get("properties.info.title").String() == "Fix the parser" {
			break
		}
	}

	// A second prompt: no title request; a title set since stays.
	h.prompt("ses_t", "and the lexer too", nil)
	if got := h.settledTitle("ses_t", 2); got != "Fix the parser" || len(tp.requests()) != 1 {
		t.Fatalf("after the second prompt: title %q, %d title requests", got, len(tp.requests()))
	}
	// Not even when the first title left the placeholder.
	h.send("POST", "/api/session", map[string]any{"id": "ses_t2"})
	tp.set(func(p *titleProvider) { p.answer = "" })
	h.prompt("ses_t2", "first", nil)
	h.settledTitle("ses_t2", 1)
	tp.set(func(p *titleProvider) { p.answer = "Second try" })
	h.prompt("ses_t2", "second", nil)
	if got := h.settledTitle("ses_t2", 2); !session.IsDefaultTitle(got) || len(tp.requests()) != 2 {
		t.Fatalf("second prompt of an untitled session: title %q, %d title requests", got, len(tp.requests()))
	}
	noPromptInLog(t, logs, "the parser drops")
}

// A session created with a title, a child session (the task tool's, or one
// made with parentID) and a session whose title agent is disabled are not
// titled.
func TestTitleNotForChildrenOrNamedSessions(t *testing.T) {
	h, tp, _ := newTitleHarness(t, nil, "")
	h.send("POST", "/api/session", map[string]any{"id": "ses_root", "title": "Named by me"})
	h.send("POST", "/api/session", map[string]any{"id": "ses_child", "parentID": "ses_root"})
	h.prompt("ses_child", "child work", nil)
	h.settledTitle("ses_child", 1)
	h.prompt("ses_root", "root work", nil)
	if got := h.settledTitle("ses_root", 1); got != "Named by me" {
		t.Fatalf("named session: %q", got)
	}
	if child, _ := h.getSession("ses_child"); !session.IsDefaultTitle(child.Title) || !strings.HasPrefix(child.Title, "Child session - ") {
		t.Fatalf("child: %q", child.Title)
	}
	if n := len(tp.requests()); n != 0 {
		t.Fatalf("%d title requests for a child and a named session", n)
	}
	// The same root without a title is titled: the check above could fail.
	h.send("POST", "/api/session", map[string]any{"id": "ses_plain"})
	h.prompt("ses_plain", "root work", nil)
	if got := h.settledTitle("ses_plain", 1); got != "Fix the parser" || len(tp.requests()) != 1 {
		t.Fatalf("plain root: %q, %d requests", got, len(tp.requests()))
	}
}

// The title agent disabled by the server config: no title request. A
// title agent with a prompt, a model and an output limit of its own uses
// them.
func TestTitleAgentConfigured(t *testing.T) {
	h, tp, _ := newTitleHarness(t, nil, `{"disable": true}`)
	h.send("POST", "/api/session", map[string]any{"id": "ses_off"})
	h.prompt("ses_off", "hello", nil)
	if got := h.settledTitle("ses_off", 1); !session.IsDefaultTitle(got) || len(tp.requests()) != 0 {
		t.Fatalf("disabled title agent: %q, %d requests", got, len(tp.requests()))
	}

	h, tp, _ = newTitleHarness(t, func(p *loop.ProviderConfig) { p.TitleModel = "small" },
		`{"prompt": "Name it.", "model": "agentgate/tiny", "maxTokens": 20}`)
	h.send("POST", "/api/session", map[string]any{"id": "ses_own"})
	h.prompt("ses_own", "hello", nil)
	if got := h.settledTitle("ses_own", 1); got != "Fix the parser" || len(tp.requests()) != 1 {
		t.Fatalf("own title agent: %q, %d requests", got, len(tp.requests()))
	}
	body := tp.requests()[0].Body
	if gjson.GetBytes(body, "model").String() != "tiny" || gjson.GetBytes(body, "max_tokens").Int() != 20 ||
		gjson.GetBytes(body, "messages.0.content").String() != "Name it." {
		t.Fatalf("own title agent's request: %s", body)
	}
}

// title_model titles with that model; the turns keep the session's.
func TestTitleModel(t *testing.T) {
	h, tp, _ := newTitleHarness(t, func(p *loop.ProviderConfig) { p.TitleModel = "small" }, "")
	h.send("POST", "/api/session", map[string]any{"id": "ses_m"})
	h.prompt("ses_m", "hello", nil)
	if got := h.settledTitle("ses_m", 1); got != "Fix the parser" || len(tp.requests()) != 1 {
		t.Fatalf("title %q, %d requests", got, len(tp.requests()))
	}
	if m := gjson.GetBytes(tp.requests()[0].Body, "model").String(); m != "small" {
		t.Fatalf("the title request's model: %q", m)
	}
	if m := gjson.GetBytes(lastTurn(t, h.fake).Body, "model").String(); m != "fake-model" {
		t.Fatalf("the turn's model: %q", m)
	}
}

// The title request runs beside the turn: held, it delays nothing. A
// rename while it runs wins: the generated title is dropped, and the log
// says so.
func TestTitleRenameWins(t *testing.T) {
	h, tp, logs := newTitleHarness(t, nil, "")
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	tp.set(func(p *titleProvider) { p.hold = hold })
	h.send("POST", "/api/session", map[string]any{"id": "ses_r"})
	h.prompt("ses_r", "hello", nil)
	select {
	case <-tp.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no title request")
	}
	msgs := h.waitIdle("ses_r", 1)
	if as := ofType(msgs, "assistant"); len(as) != 1 || text(as[0]) != fakeprovider.Text || !h.runner.Titling("ses_r") {
		t.Fatalf("the turn while the title request is held: %v (titling %v)", msgs, h.runner.Titling("ses_r"))
	}
	if r := h.send("PATCH", "/api/session/ses_r", map[string]any{"title": "Mine"}); r.status != 204 {
		t.Fatalf("rename: %d %s", r.status, r.body)
	}
	release()
	if got := h.settledTitle("ses_r", 1); got != "Mine" {
		t.Fatalf("title %q after a rename", got)
	}
	if !logged(logs, "named meanwhile") {
		t.Fatalf("log: %v", logs.All())
	}
	if r := h.get("/session/ses_r?directory=" + h.dir); gjson.GetBytes(r.body, "title").String() != "Mine" {
		t.Fatalf("v1 session: %s", r.body)
	}
}

// A failed title request (the provider's or the budget's refusal) and an
// answer with no title in it leave the placeholder, log at debug level
// without the prompt, and never fail the turn.
func TestTitleFailureLeavesPlaceholder(t *testing.T) {
	for _, c := range []struct {
		name   string
		set    func(p *titleProvider)
		logged string
	}{
		{"budget refusal", func(p *titleProvider) { p.status = http.StatusPaymentRequired }, "the request failed"},
		{"provider error", func(p *titleProvider) { p.status = http.StatusInternalServerError }, "the request failed"},
		{"empty answer", func(p *titleProvider) { p.answer = "" }, "held no title"},
		{"reasoning only", func(p *titleProvider) { p.answer = "<think>a title about secret words" }, "held no title"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, tp, logs := newTitleHarness(t, nil, "")
			tp.set(c.set)
			h.send("POST", "/api/session", map[string]any{"id": "ses_f"})
			h.prompt("ses_f", "secret words", nil)
			if got := h.settledTitle("ses_f", 1); !session.IsDefaultTitle(got) || len(tp.requests()) != 1 {
				t.Fatalf("title %q, %d requests", got, len(tp.requests()))
			}
			msgs := h.messages("ses_f")
			if as := ofType(msgs, "assistant"); len(as) != 1 || text(as[0]) != fakeprovider.Text || as[0]["error"] != nil ||
				ofType(msgs, "idle")[0]["outcome"] != "succeeded" {
				t.Fatalf("the turn: %v", msgs)
			}
			entries := logs.FilterMessageSnippet(c.logged).All()
			if len(entries) != 1 || entries[0].Level != zapcore.DebugLevel || entries[0].ContextMap()["session"] != "ses_f" {
				t.Fatalf("log: %v", logs.All())
			}
			noPromptInLog(t, logs, "secret words")
		})
	}
}

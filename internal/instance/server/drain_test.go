package server

import (
	"encoding/json"
	"fmt"
	"github.com/agentgate/agentgate/internal/instance/session"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

const fakeKey = "sk-fake-provider"

type drainHarness struct {
	*sessHarness
	fake   *fakeprovider.Provider
	runner *loop.Runner
}

// newDrainHarness starts a fake provider and a server whose drains send
// Chat Completions turns to it, priced at 2 USD / 8 USD per 1M tokens.
func newDrainHarness(t testing.TB) *drainHarness {
	t.Helper()
	fake, err := fakeprovider.Start(fakeKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	runner := loop.NewRunner()
	runner.SetProvider(loop.ProviderConfig{BaseURL: fake.URL + "/v1", APIKey: fakeKey, Format: "chat", Model: "fake-model",
		InputPrice: 2 * money.Scale, OutputPrice: 8 * money.Scale})
	sh := newSessHarness(t, func(o *Options) { o.Runner = runner })
	t.Cleanup(runner.Close)
	return &drainHarness{sessHarness: sh, fake: fake, runner: runner}
}

func (h *drainHarness) prompt(sid, text string, extra map[string]any) {
	h.t.Helper()
	body := map[string]any{"text": text}
	for k, v := range extra {
		body[k] = v
	}
	if r := h.send("POST", "/api/session/"+sid+"/prompt", body); r.status != 200 {
		h.t.Fatalf("prompt: %d %s", r.status, r.body)
	}
}

// messages returns the stored messages of a session.
func (h *drainHarness) messages(sid string) []map[string]any {
	h.t.Helper()
	var out []map[string]any
	err := h.store().View(h.t.Context(), func(tx store.Tx) error {
		out = out[:0]
		return tx.SessionItems("default", sid, store.ItemMessage, func(raw []byte) (bool, error) {
			var m map[string]any
			json.Unmarshal(raw, &m)
			out = append(out, m)
			return true, nil
		})
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitIdle waits until the session's drain has ended and n idle markers
// are stored.
func (h *drainHarness) waitIdle(sid string, n int) []map[string]any {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msgs := h.messages(sid)
		idles := 0
		for _, m := range msgs {
			if m["type"] == "idle" {
				idles++
			}
		}
		if idles >= n && !h.runner.IsActive(sid) {
			return msgs
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("session %s: %d idle markers, want %d; messages %v", sid, idles, n, msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// turns are the requests of turns the provider received: all but the
// title requests that run beside sessions' first turns.
func turns(p *fakeprovider.Provider) []fakeprovider.Received {
	var out []fakeprovider.Received
	for _, r := range p.Received() {
		if !isTitleRequest(r.Body) {
			out = append(out, r)
		}
	}
	return out
}

// lastTurn is the last request of a turn the provider received.
func lastTurn(t testing.TB, p *fakeprovider.Provider) fakeprovider.Received {
	t.Helper()
	rs := turns(p)
	if len(rs) == 0 {
		t.Fatal("the provider received no turn")
	}
	return rs[len(rs)-1]
}

func ofType(msgs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, m := range msgs {
		if m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

func text(m map[string]any) string {
	raw, _ := json.Marshal(m)
	var b strings.Builder
	for _, c := range gjson.GetBytes(raw, "content").Array() {
		if c.Get("type").String() == "text" {
			b.WriteString(c.Get("text").String())
		}
	}
	if b.Len() == 0 {
		return gjson.GetBytes(raw, "text").String()
	}
	return b.String()
}

func TestDrainTurn(t *testing.T) {
	h := newDrainHarness(t)
	h.send("POST", "/api/session", map[string]any{"id": "ses_a", "agent": "build"})
	ev := h.subscribe(t)
	ev.next(t) // server.connected
	h.prompt("ses_a", "hello there", map[string]any{"id": "msg_u1"})
	msgs := h.waitIdle("ses_a", 1)
	if got := []string{msgs[0]["type"].(string), msgs[1]["type"].(string), msgs[2]["type"].(string)}; fmt.Sprint(got) != "[user assistant idle]" || len(msgs) != 3 {
		t.Fatalf("messages: %v", msgs)
	}
	if msgs[0]["id"] != "msg_u1" || text(msgs[0]) != "hello there" {
		t.Fatalf("user message: %v", msgs[0])
	}
	a := msgs[1]
	if text(a) != fakeprovider.Text || a["finish"] != "stop" || a["agent"] != "build" {
		t.Fatalf("assistant: %v", a)
	}
	raw, _ := json.Marshal(a)
	tok := gjson.GetBytes(raw, "tokens")
	in := float64(fakeprovider.InputTokens - fakeprovider.CachedTokens)
	out := float64(fakeprovider.OutputTokens - fakeprovider.ReasoningTokens)
	if tok.Get("input").Float() != in || tok.Get("cache.read").Float() != fakeprovider.CachedTokens ||
		tok.Get("output").Float() != out || tok.Get("reasoning").Float() != fakeprovider.ReasoningTokens {
		t.Fatalf("tokens: %s", tok.Raw)
	}
	wantCost := (float64(fakeprovider.InputTokens)*2 + float64(fakeprovider.OutputTokens)*8) / 1e6
	if c := a["cost"].(float64); c < wantCost-1e-12 || c > wantCost+1e-12 {
		t.Fatalf("cost %v, want %v", c, wantCost)
	}
	if gjson.GetBytes(raw, "time.completed").Int() == 0 || gjson.GetBytes(raw, "model.id").String() != "fake-model" {
		t.Fatalf("assistant: %s", raw)
	}
	if msgs[2]["outcome"] != "succeeded" {
		t.Fatalf("idle: %v", msgs[2])
	}
	info, _ := h.getSession("ses_a")
	if info.Cost != a["cost"].(float64) || info.Tokens.Input != in || info.Tokens.Output != out || info.Steps == nil || *info.Steps != 1 ||
		info.Outcome != "succeeded" || info.Time.Idle == nil {
		t.Fatalf("session: %+v", info)
	}
	// The request: the fake model, the conversation, streaming with usage.
	last := lastTurn(t, h.fake)
	if last.Path != "/v1/chat/completions" || gjson.GetBytes(last.Body, "model").String() != "fake-model" || last.Header.Get("X-Opencode-Session") != "ses_a" ||
		!gjson.GetBytes(last.Body, "stream_options.include_usage").Bool() ||
		gjson.GetBytes(last.Body, "messages.#(role==\"user\").content").String() != "hello there" {
		t.Fatalf("request: %s %s", last.Path, last.Body)
	}
	// The stream: deltas that add up to the text, then the settled message.
	// The stream, in the released server's names: the step opens, its text
	// opens, deltas add up to it, it closes with the whole text, the step
	// ends with its cost; durable events carry ascending ids, deltas none.
	var deltas strings.Builder
	seen := map[string]bool{}
	var order []string
	lastID := ""
	for !seen["session.idle"] {
		f := ev.next(t)
		data := strings.TrimPrefix(strings.TrimSpace(f), "data: ")
		typ := gjson.Get(data, "type").String()
		seen[typ] = true
		if strings.HasPrefix(typ, "session.next.") && (len(order) == 0 || order[len(order)-1] != typ) {
			order = append(order, typ)
		}
		durable := gjson.Get(data, "durable").Exists()
		if durable != (ev.lastID != "") || durable != session.IsDurable(typ) {
			t.Fatalf("%s: durable %v, id line %q", typ, durable, ev.lastID)
		}
		if durable {
			if ev.lastID != gjson.Get(data, "id").String() || ev.lastID <= lastID {
				t.Fatalf("%s: id line %q after %q", typ, ev.lastID, lastID)
			}
			lastID = ev.lastID
		}
		switch typ {
		case "session.next.text.delta":
			deltas.WriteString(gjson.Get(data, "data.delta").String())
		case "session.next.text.ended":
			if gjson.Get(data, "data.text").String() != fakeprovider.Text || gjson.Get(data, "data.textID").String() != "text-0" {
				t.Fatalf("text.ended: %s", data)
			}
		case "session.next.step.ended":
			if gjson.Get(data, "data.finish").String() != "stop" || gjson.Get(data, "data.cost").Float() != a["cost"].(float64) ||
				gjson.Get(data, "data.tokens.input").Float() != in || gjson.Get(data, "durable.version").Int() != 2 {
				t.Fatalf("step.ended: %s", data)
			}
		}
	}
	want := []string{"session.next.prompt.admitted", "session.next.prompted", "session.next.step.started", "session.next.text.started",
		"session.next.text.delta", "session.next.text.ended", "session.next.step.ended"}
	if deltas.String() != fakeprovider.Text || !seen["session.status"] || strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("events: %v deltas %q", order, deltas.String())
	}
	// Export carries the settled messages; a second turn sends the history.
	tr, _ := h.export("ses_a", "")
	if len(tr.Data.Messages) != 3 {
		t.Fatalf("export: %v", tr.Data.Messages)
	}
	h.prompt("ses_a", "again", nil)
	h.waitIdle("ses_a", 2)
	if n := gjson.GetBytes(lastTurn(t, h.fake).Body, "messages.#").Int(); n != 3 {
		t.Fatalf("second request has %d messages: %s", n, lastTurn(t, h.fake).Body)
	}
}

func TestDrainActiveAndConcurrent(t *testing.T) {
	h := newDrainHarness(t)
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 100 * time.Millisecond})
	for _, id := range []string{"ses_1", "ses_2"} {
		h.send("POST", "/api/session", map[string]any{"id": id})
	}
	start := time.Now()
	h.prompt("ses_1", "one", nil)
	h.prompt("ses_2", "two", nil)
	r := h.get("/api/session/active")
	if gjson.GetBytes(r.body, "data.ses_1.type").String() != "running" || gjson.GetBytes(r.body, "data.ses_2.type").String() != "running" {
		t.Fatalf("active: %s", r.body)
	}
	h.waitIdle("ses_1", 1)
	h.waitIdle("ses_2", 1)
	// Each turn takes ~5 delays; run one after the other they would take twice that.
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Fatalf("two sessions took %v: not concurrent", el)
	}
	r = h.get("/api/session/active")
	if string(gjson.GetBytes(r.body, "data").Raw) != "{}" {
		t.Fatalf("active after: %s", r.body)
	}
}

func TestDrainSteerBeforeQueue(t *testing.T) {
	h := newDrainHarness(t)
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 50 * time.Millisecond})
	h.send("POST", "/api/session", map[string]any{"id": "ses_o"})
	h.prompt("ses_o", "first", nil)
	h.prompt("ses_o", "queued", map[string]any{"delivery": "queue"})
	h.prompt("ses_o", "steered", map[string]any{"delivery": "steer"})
	msgs := h.waitIdle("ses_o", 2)
	var order []string
	for _, m := range msgs {
		switch m["type"] {
		case "user":
			order = append(order, text(m))
		case "idle", "assistant":
			order = append(order, m["type"].(string))
		}
	}
	// The steer joins the running turn at its boundary; the queued input
	// waits for the session to go idle and starts a run of its own.
	want := "[first assistant steered assistant idle queued assistant idle]"
	if fmt.Sprint(order) != want {
		t.Fatalf("order %v, want %s", order, want)
	}
	info, _ := h.getSession("ses_o")
	if *info.Steps != 3 {
		t.Fatalf("steps %d", *info.Steps)
	}
}

func TestDrainSwitchModelNextTurn(t *testing.T) {
	h := newDrainHarness(t)
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 50 * time.Millisecond})
	h.send("POST", "/api/session", map[string]any{"id": "ses_m"})
	h.prompt("ses_m", "one", nil)
	time.Sleep(60 * time.Millisecond) // the turn is streaming
	if r := h.send("POST", "/api/session/ses_m/model", map[string]any{"model": map[string]any{"id": "other-model", "providerID": "p"}}); r.status != 204 {
		t.Fatalf("switch: %d", r.status)
	}
	h.prompt("ses_m", "two", map[string]any{"delivery": "queue"})
	h.waitIdle("ses_m", 2)
	rs := turns(h.fake)
	if len(rs) != 2 || gjson.GetBytes(rs[0].Body, "model").String() != "fake-model" || gjson.GetBytes(rs[1].Body, "model").String() != "other-model" {
		t.Fatalf("models: %d", len(rs))
	}
}

func TestDrainInterrupt(t *testing.T) {
	h := newDrainHarness(t)
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 100 * time.Millisecond, Chunks: 20})
	h.send("POST", "/api/session", map[string]any{"id": "ses_i"})
	h.prompt("ses_i", "long", nil)
	time.Sleep(250 * time.Millisecond)
	if r := h.send("POST", "/api/session/ses_i/interrupt", nil); r.status != 204 {
		t.Fatalf("interrupt: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle("ses_i", 1)
	a := ofType(msgs, "assistant")[0]
	raw, _ := json.Marshal(a)
	if gjson.GetBytes(raw, "error.type").String() != "MessageAbortedError" || ofType(msgs, "idle")[0]["outcome"] != "interrupted" {
		t.Fatalf("messages: %v", msgs)
	}
	if t1 := text(a); t1 == "" || t1 == fakeprovider.Text {
		t.Fatalf("partial text %q", t1)
	}
	info, _ := h.getSession("ses_i")
	if info.Outcome != "interrupted" {
		t.Fatalf("outcome %q", info.Outcome)
	}
	if r := h.send("POST", "/api/session/ses_none/interrupt", nil); r.status != 404 {
		t.Fatalf("interrupt unknown: %d", r.status)
	}
	// Usable afterwards.
	h.fake.SetBehavior(fakeprovider.Behavior{})
	h.prompt("ses_i", "again", nil)
	msgs = h.waitIdle("ses_i", 2)
	if text(ofType(msgs, "assistant")[1]) != fakeprovider.Text {
		t.Fatalf("after interrupt: %v", msgs)
	}
}

func TestDrainProviderFailures(t *testing.T) {
	h := newDrainHarness(t)
	h.send("POST", "/api/session", map[string]any{"id": "ses_f"})
	h.fake.SetBehavior(fakeprovider.Behavior{Status: 500})
	h.prompt("ses_f", "boom", nil)
	msgs := h.waitIdle("ses_f", 1)
	raw, _ := json.Marshal(ofType(msgs, "assistant")[0])
	if gjson.GetBytes(raw, "error.status").Int() != 500 || gjson.GetBytes(raw, "error.type").String() != "APIError" ||
		!strings.Contains(gjson.GetBytes(raw, "error.message").String(), "told to fail") || gjson.GetBytes(raw, "finish").String() != "error" {
		t.Fatalf("500: %s", raw)
	}
	if info, _ := h.getSession("ses_f"); info.Outcome != "failed" {
		t.Fatalf("outcome %q", info.Outcome)
	}
	h.fake.SetBehavior(fakeprovider.Behavior{CutAfter: 2})
	h.prompt("ses_f", "cut", nil)
	msgs = h.waitIdle("ses_f", 2)
	raw, _ = json.Marshal(ofType(msgs, "assistant")[1])
	if gjson.GetBytes(raw, "error.type").String() != "ProviderStreamError" || ofType(msgs, "idle")[1]["outcome"] != "failed" {
		t.Fatalf("cut: %s", raw)
	}
	h.fake.SetBehavior(fakeprovider.Behavior{})
	h.prompt("ses_f", "fine", nil)
	msgs = h.waitIdle("ses_f", 3)
	if info, _ := h.getSession("ses_f"); info.Outcome != "succeeded" || text(ofType(msgs, "assistant")[2]) != fakeprovider.Text {
		t.Fatalf("recovery: %+v", info)
	}
	// The failed turns are not sent back to the provider as history.
	if n := gjson.GetBytes(lastTurn(t, h.fake).Body, `messages.#(role=="assistant")#`).Array(); len(n) != 1 {
		t.Fatalf("history: %s", lastTurn(t, h.fake).Body)
	}
}

func TestDrainRestartResumes(t *testing.T) {
	h := newDrainHarness(t)
	h.send("POST", "/api/session", map[string]any{"id": "ses_r"})
	// Admitted but not scheduled (resume false), then the process stops.
	if r := h.send("POST", "/api/session/ses_r/prompt", map[string]any{"text": "pending", "resume": false}); r.status != 200 {
		t.Fatal(r.status)
	}
	time.Sleep(50 * time.Millisecond)
	if len(turns(h.fake)) != 0 {
		t.Fatal("resume:false ran a turn")
	}
	// Another session is mid-stream when the process stops.
	h.send("POST", "/api/session", map[string]any{"id": "ses_cut"})
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 50 * time.Millisecond})
	h.prompt("ses_cut", "interrupted by the stop", nil)
	time.Sleep(120 * time.Millisecond)
	h.runner.Close()
	if n := len(ofType(h.messages("ses_cut"), "assistant")); n != 0 {
		t.Fatalf("a step cut by the stop was stored: %d", n)
	}
	h.fake.SetBehavior(fakeprovider.Behavior{})
	h.restart()
	// A new process: a new runner and server on the reopened store.
	r2 := loop.NewRunner()
	r2.SetProvider(h.runner.Provider())
	t.Cleanup(r2.Close)
	New(Options{Store: h.opts.Store, Runner: r2, Bus: events.NewBus(0, nil)})
	h.runner = r2
	msgs := h.waitIdle("ses_r", 1)
	if len(msgs) != 3 || text(msgs[0]) != "pending" || text(msgs[1]) != fakeprovider.Text {
		t.Fatalf("messages: %v", msgs)
	}
	msgs = h.waitIdle("ses_cut", 1)
	if len(msgs) != 3 || text(msgs[0]) != "interrupted by the stop" || text(msgs[1]) != fakeprovider.Text || msgs[2]["outcome"] != "succeeded" {
		t.Fatalf("re-run step: %v", msgs)
	}
}

func TestDrainStatsEqualMessages(t *testing.T) {
	h := newDrainHarness(t)
	var wg sync.WaitGroup
	for i := range 3 {
		sid := fmt.Sprintf("ses_s%d", i)
		h.send("POST", "/api/session", map[string]any{"id": sid})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j <= i; j++ {
				h.prompt(sid, "q", map[string]any{"delivery": "queue"})
			}
		}()
	}
	wg.Wait()
	var cost, output float64
	var steps int64
	for i := range 3 {
		sid := fmt.Sprintf("ses_s%d", i)
		deadline := time.Now().Add(10 * time.Second)
		var msgs []map[string]any
		for {
			msgs = h.messages(sid)
			if len(ofType(msgs, "assistant")) == i+1 && !h.runner.IsActive(sid) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", sid, msgs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		var sc float64
		for _, a := range ofType(msgs, "assistant") {
			sc += a["cost"].(float64)
			output += a["tokens"].(map[string]any)["output"].(float64)
		}
		info, _ := h.getSession(sid)
		if diff := info.Cost - sc; diff > 1e-12 || diff < -1e-12 || *info.Steps != int64(i+1) {
			t.Fatalf("%s: info cost %v steps %d, messages %v", sid, info.Cost, *info.Steps, sc)
		}
		cost += sc
		steps += *info.Steps
	}
	if steps != 6 {
		t.Fatalf("steps %d", steps)
	}
	r := h.get("/api/experimental/session/stats")
	if r.status != 200 {
		t.Fatalf("stats: %d %s", r.status, r.body)
	}
	if c := gjson.GetBytes(r.body, "data.cost").Float(); c < cost-1e-9 || c > cost+1e-9 {
		t.Logf("stats: %s", r.body)
		t.Fatalf("stats cost %v, messages %v", c, cost)
	}
	if o := gjson.GetBytes(r.body, "data.tokens.output").Float(); o != output {
		t.Fatalf("stats output %v, messages %v", o, output)
	}
}

func TestDrainMoveAtBoundaryAcrossReload(t *testing.T) {
	h := newDrainHarness(t)
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 60 * time.Millisecond})
	h.send("POST", "/api/session", map[string]any{"id": "ses_mv"})
	other := canonicalTempDir(t)
	h.prompt("ses_mv", "one", nil)
	time.Sleep(80 * time.Millisecond)
	if r := h.send("POST", "/api/session/ses_mv/move", map[string]any{"directory": other, "delivery": "steer"}); r.status != 204 {
		t.Fatalf("move: %d %s", r.status, r.body)
	}
	// A configuration reload builds a new server on the same runner: the
	// running drain goes on and the new server reports it.
	s2 := New(h.opts)
	if !s2.IsActive("ses_mv") {
		t.Fatal("the new server does not see the running drain")
	}
	info, _ := h.getSession("ses_mv")
	if info.Location.Directory == other {
		t.Fatal("moved before the boundary")
	}
	msgs := h.waitIdle("ses_mv", 1)
	var order []string
	for _, m := range msgs {
		order = append(order, m["type"].(string))
	}
	if fmt.Sprint(order) != "[user assistant location-switched idle]" {
		t.Fatalf("order %v", order)
	}
	if info, _ := h.getSession("ses_mv"); info.Location.Directory != other {
		t.Fatalf("location %v", info.Location)
	}
}

func TestDrainFormats(t *testing.T) {
	for _, tc := range []struct {
		format, base, path, authHeader, authValue string
		in, cacheRead, cacheWrite, out, reasoning float64
	}{
		{formats.Responses.String(), "/v1", "/v1/responses", "Authorization", "Bearer " + fakeKey, 16, 5, 0, 8, 4},
		{formats.Anthropic.String(), "", "/v1/messages", "X-Api-Key", fakeKey, 21, 5, 3, 12, 0},
		{formats.Google.String(), "", "/v1beta/models/fake-model:streamGenerateContent", "X-Goog-Api-Key", fakeKey, 16, 5, 0, 8, 4},
	} {
		t.Run(tc.format, func(t *testing.T) {
			h := newDrainHarness(t)
			p := h.runner.Provider()
			p.Format, p.BaseURL = tc.format, h.fake.URL+tc.base
			h.runner.SetProvider(p)
			h.send("POST", "/api/session", map[string]any{"id": "ses_fmt"})
			h.prompt("ses_fmt", "hi", nil)
			h.prompt("ses_fmt", "and again", map[string]any{"delivery": "queue"})
			msgs := h.waitIdle("ses_fmt", 2)
			for _, a := range ofType(msgs, "assistant") {
				raw, _ := json.Marshal(a)
				if text(a) != fakeprovider.Text || a["finish"] != "stop" {
					t.Fatalf("assistant: %s", raw)
				}
				tok := gjson.GetBytes(raw, "tokens")
				if tok.Get("input").Float() != tc.in || tok.Get("cache.read").Float() != tc.cacheRead || tok.Get("cache.write").Float() != tc.cacheWrite ||
					tok.Get("output").Float() != tc.out || tok.Get("reasoning").Float() != tc.reasoning {
					t.Fatalf("tokens: %s", tok.Raw)
				}
			}
			last := lastTurn(t, h.fake)
			if last.Path != tc.path || last.Header.Get(tc.authHeader) != tc.authValue {
				t.Fatalf("request %s %v", last.Path, last.Header)
			}
			// The second request carries the history: user, assistant, user.
			if !strings.Contains(string(last.Body), fakeprovider.Text) || !strings.Contains(string(last.Body), "and again") {
				t.Fatalf("history: %s", last.Body)
			}
		})
	}
}

func TestDrainSessionRemovedMidTurn(t *testing.T) {
	h := newDrainHarness(t)
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 50 * time.Millisecond, Chunks: 10})
	h.send("POST", "/api/session", map[string]any{"id": "ses_del"})
	h.prompt("ses_del", "soon gone", nil)
	time.Sleep(100 * time.Millisecond)
	if r := h.send("DELETE", "/api/session/ses_del", nil); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.runner.IsActive("ses_del") {
		if time.Now().After(deadline) {
			t.Fatal("the drain of a removed session still runs")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if msgs := h.messages("ses_del"); len(msgs) != 0 {
		t.Fatalf("items of a removed session: %v", msgs)
	}
}

// A base URL that reaches a server other than a provider (here one that
// answers 200 with JSON, as a site without llm_gateway may) fails the turn
// with a message that says so, not as a stream that ended early.
func TestDrainNotAProviderStream(t *testing.T) {
	h := newDrainHarness(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(other.Close)
	p := h.runner.Provider()
	p.BaseURL = other.URL + "/custom/conn_x"
	h.runner.SetProvider(p)
	h.send("POST", "/api/session", map[string]any{"id": "ses_n"})
	h.prompt("ses_n", "hello", nil)
	msgs := h.waitIdle("ses_n", 1)
	raw, _ := json.Marshal(ofType(msgs, "assistant")[0])
	if msg := gjson.GetBytes(raw, "error.message").String(); !strings.Contains(msg, "200 with application/json, not an event stream") {
		t.Fatalf("error: %s", raw)
	}
}

// A server whose loop has no provider admits prompts and fails each turn
// at once: an error message and a failed step say why and what to do, the
// session goes idle, and a provider set later answers the next prompt.
func TestDrainNoProvider(t *testing.T) {
	runner := loop.NewRunner()
	sh := newSessHarness(t, func(o *Options) { o.Runner = runner })
	t.Cleanup(runner.Close)
	h := &drainHarness{sessHarness: sh, runner: runner}
	h.send("POST", "/api/session", map[string]any{"id": "ses_np"})
	ev := h.subscribe(t)
	ev.next(t) // server.connected
	for n := 1; n <= 2; n++ {
		h.prompt("ses_np", "hello", nil)
		msgs := h.waitIdle("ses_np", n)
		as := ofType(msgs, "assistant")
		if len(as) != n || len(ofType(msgs, "user")) != n || msgs[len(msgs)-1]["outcome"] != "failed" {
			t.Fatalf("prompt %d: messages %v", n, msgs)
		}
		raw, _ := json.Marshal(as[n-1])
		if gjson.GetBytes(raw, "error.type").String() != "ProviderConfigError" || gjson.GetBytes(raw, "error.message").String() != loop.NoProviderMessage ||
			gjson.GetBytes(raw, "finish").String() != "error" {
			t.Fatalf("prompt %d: assistant %s", n, raw)
		}
		failed := ""
		for {
			data := strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: ")
			typ := gjson.Get(data, "type").String()
			if typ == "session.next.step.failed" {
				failed = gjson.Get(data, "data.error.message").String()
			}
			if typ == "session.idle" {
				if gjson.Get(data, "data.outcome").String() != "failed" {
					t.Fatalf("prompt %d: idle %s", n, data)
				}
				break
			}
		}
		if failed != loop.NoProviderMessage {
			t.Fatalf("prompt %d: step.failed error %q", n, failed)
		}
		if info, _ := h.getSession("ses_np"); info.Outcome != "failed" || info.Time.Idle == nil {
			t.Fatalf("prompt %d: session %+v", n, info)
		}
	}
	fake, err := fakeprovider.Start(fakeKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	runner.SetProvider(loop.ProviderConfig{BaseURL: fake.URL + "/v1", APIKey: fakeKey, Model: "fake-model"})
	h.prompt("ses_np", "hello again", nil)
	msgs := h.waitIdle("ses_np", 3)
	if as := ofType(msgs, "assistant"); len(as) != 3 || text(as[2]) != fakeprovider.Text || msgs[len(msgs)-1]["outcome"] != "succeeded" {
		t.Fatalf("after the provider was set: %v", msgs)
	}
}

package server

import (
	"context"
	"encoding/base64"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/store"
)

// streamAt opens an event stream at path with request headers (name,
// value pairs) and reads it in the background.
func (h *srvHarness) streamAt(t *testing.T, path string, headers ...string) *eventStream {
	t.Helper()
	return h.openStreamAt(t, path, headers...).background()
}

// event is a decoded frame with its id line.
type event struct {
	idLine string
	gjson.Result
}

func (s *eventStream) event(t *testing.T) event {
	t.Helper()
	f := s.next(t)
	return event{s.lastID, gjson.Parse(strings.TrimPrefix(strings.TrimSpace(f), "data: "))}
}

// quiet reports whether the stream sends nothing for a while.
func (s *eventStream) quiet(d time.Duration) bool {
	select {
	case <-s.frames:
		return false
	case <-time.After(d):
		return true
	}
}

func TestEventReplayAfterDroppedConnection(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	h.srv.Bus().Flush()
	first := h.streamAt(t, "/api/event")
	if e := first.event(t); e.Get("type").String() != "server.connected" || e.Get("data.resync").Exists() {
		t.Fatalf("connected: %s", e.Raw)
	}
	h.send("POST", "/api/session/"+s.ID+"/agent", map[string]any{"agent": "plan"})
	seen := first.event(t) // session.next.agent.switched
	if seen.Get("type").String() != "session.next.agent.switched" || seen.idLine == "" || seen.idLine != seen.Get("id").String() {
		t.Fatalf("switched: %q %s", seen.idLine, seen.Raw)
	}
	first.cancel() // the connection drops here

	// Missed: the rest of the switch, a prompt, an ephemeral status and a
	// delta (neither replayed).
	h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "while away"})
	info, _ := h.getSession(s.ID)
	h.srv.Sessions().PublishEvents(&info, session.Ev{Type: "session.next.text.delta", Data: map[string]any{"delta": "x"}})
	h.srv.Sessions().PublishStatus(s.ID, "busy")
	h.srv.Bus().Flush()

	again := h.streamAt(t, "/api/event", "Last-Event-ID", seen.idLine)
	if e := again.event(t); e.Get("type").String() != "server.connected" || e.Get("data.resync").Exists() {
		t.Fatalf("connected: %s", e.Raw)
	}
	var types []string
	last := seen.idLine
	for len(types) < 3 {
		e := again.event(t)
		if e.idLine == "" || e.idLine <= last || !e.Get("durable").Exists() {
			t.Fatalf("replayed %q after %q: %s", e.idLine, last, e.Raw)
		}
		last = e.idLine
		types = append(types, e.Get("type").String())
	}
	if want := "session.updated session.next.prompt.admitted session.updated"; strings.Join(types, " ") != want {
		t.Fatalf("replayed %v, want %s", types, want)
	}
	if !again.quiet(100 * time.Millisecond) {
		t.Fatal("more than the missed durable events were replayed")
	}
	// Then live events, once each.
	h.send("POST", "/api/session/"+s.ID+"/agent", map[string]any{"agent": "build"})
	if e := again.event(t); e.Get("type").String() != "session.next.agent.switched" || e.idLine <= last {
		t.Fatalf("live: %q %s", e.idLine, e.Raw)
	}

	// A position past the retention, or not an event id: resync.
	h.clk.Advance(session.DefaultEventRetention + time.Minute)
	for _, id := range []string{seen.idLine, "nonsense", "evt_zz"} {
		st := h.streamAt(t, "/api/event", "Last-Event-ID", id)
		if e := st.event(t); e.Get("type").String() != "server.connected" || !e.Get("data.resync").Bool() {
			t.Fatalf("%q: %s", id, e.Raw)
		}
		if !st.quiet(50 * time.Millisecond) {
			t.Fatalf("%q: events replayed past the retention", id)
		}
	}
}

func TestSessionEventStreamAndHistory(t *testing.T) {
	h := newSessHarness(t, nil)
	a := h.createSession(nil)
	b := h.createSession(nil)
	for _, agent := range []string{"plan", "build", "plan"} {
		h.send("POST", "/api/session/"+a.ID+"/agent", map[string]any{"agent": agent})
	}
	h.send("POST", "/api/session/"+b.ID+"/agent", map[string]any{"agent": "plan"})
	h.srv.Bus().Flush()

	// history: only session.next.* events, by seq, paged with after/limit.
	r := h.get("/api/session/" + a.ID + "/history?limit=2")
	body := gjson.ParseBytes(r.body)
	if r.status != 200 || len(body.Get("data").Array()) != 2 || !body.Get("hasMore").Bool() {
		t.Fatalf("history: %d %s", r.status, r.body)
	}
	seqs := []int64{}
	for _, e := range body.Get("data").Array() {
		if e.Get("type").String() != "session.next.agent.switched" || e.Get("durable.aggregateID").String() != a.ID {
			t.Fatalf("history item %s", e.Raw)
		}
		seqs = append(seqs, e.Get("durable.seq").Int())
	}
	// seq 1 is session.created, then switched and updated alternate.
	if seqs[0] != 2 || seqs[1] != 4 {
		t.Fatalf("seqs %v", seqs)
	}
	r = h.get("/api/session/" + a.ID + "/history?after=4")
	body = gjson.ParseBytes(r.body)
	if items := body.Get("data").Array(); len(items) != 1 || items[0].Get("durable.seq").Int() != 6 || body.Get("hasMore").Bool() ||
		items[0].Get("data.agent").String() != "plan" {
		t.Fatalf("history after 4: %s", r.body)
	}
	if r := h.get("/api/session/" + a.ID + "/history?after=99"); gjson.GetBytes(r.body, "data.#").Int() != 0 {
		t.Fatalf("history after the end: %s", r.body)
	}
	wantError(t, h.get("/api/session/ses_none/history"), 404, "SessionNotFoundError", nil)
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "after=-1", "after=x", "bogus=1", "limit=1&limit=2"} {
		wantError(t, h.get("/api/session/"+a.ID+"/history?"+q), 400, "InvalidRequestError", nil)
	}

	// The session's stream replays after a seq, then only its own events.
	st := h.streamAt(t, "/api/session/"+a.ID+"/event?after=5")
	if e := st.event(t); e.Get("type").String() != "server.connected" {
		t.Fatalf("connected %s", e.Raw)
	}
	for _, want := range []int64{6, 7} {
		if e := st.event(t); e.Get("durable.seq").Int() != want || e.idLine == "" {
			t.Fatalf("replayed %s, want seq %d", e.Raw, want)
		}
	}
	h.send("POST", "/api/session/"+b.ID+"/agent", map[string]any{"agent": "build"}) // another session's
	h.send("POST", "/api/session/"+a.ID+"/agent", map[string]any{"agent": "build"})
	if e := st.event(t); e.Get("durable.seq").Int() != 8 || e.Get("data.sessionID").String() != a.ID {
		t.Fatalf("live %s", e.Raw)
	}
	r = h.get("/api/session/ses_none/event")
	wantError(t, r, 404, "SessionNotFoundError", nil)
}

func TestMessagesPagedAndFetched(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	var ids []string
	for _, agent := range []string{"plan", "build", "plan", "build", "plan"} {
		h.send("POST", "/api/session/"+s.ID+"/agent", map[string]any{"agent": agent})
	}
	all := gjson.ParseBytes(h.get("/api/session/" + s.ID + "/message?order=asc").body)
	for _, m := range all.Get("data").Array() {
		ids = append(ids, m.Get("id").String())
	}
	if len(ids) != 5 || !all.Get("cursor.next").Exists() || !all.Get("cursor.previous").Exists() {
		t.Fatalf("all: %s", all.Raw)
	}
	page := func(q string) ([]string, gjson.Result) {
		t.Helper()
		r := h.get("/api/session/" + s.ID + "/message?" + q)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", q, r.status, r.body)
		}
		b := gjson.ParseBytes(r.body)
		var out []string
		for _, m := range b.Get("data").Array() {
			out = append(out, m.Get("id").String())
		}
		return out, b.Get("cursor")
	}
	// Default order is newest first; cursors keep it both ways.
	p1, c1 := page("limit=2")
	if strings.Join(p1, ",") != ids[4]+","+ids[3] {
		t.Fatalf("page 1 %v %s", p1, c1.Raw)
	}
	if before, c := page("limit=2&cursor=" + url.QueryEscape(c1.Get("previous").String())); len(before) != 0 || c.Get("next").Exists() {
		t.Fatalf("before page 1: %v %s", before, c.Raw)
	}
	p2, c2 := page("limit=2&cursor=" + url.QueryEscape(c1.Get("next").String()))
	if strings.Join(p2, ",") != ids[2]+","+ids[1] || !c2.Get("previous").Exists() || !c2.Get("next").Exists() {
		t.Fatalf("page 2 %v %s", p2, c2.Raw)
	}
	p3, c3 := page("limit=2&cursor=" + url.QueryEscape(c2.Get("next").String()))
	if strings.Join(p3, ",") != ids[0] {
		t.Fatalf("page 3 %v %s", p3, c3.Raw)
	}
	if after, _ := page("limit=2&cursor=" + url.QueryEscape(c3.Get("next").String())); len(after) != 0 {
		t.Fatalf("after the last page: %v", after)
	}
	back, _ := page("limit=2&cursor=" + url.QueryEscape(c3.Get("previous").String()))
	if strings.Join(back, ",") != strings.Join(p2, ",") {
		t.Fatalf("back from page 3: %v, want %v", back, p2)
	}
	asc, ca := page("order=asc&limit=3")
	if strings.Join(asc, ",") != strings.Join(ids[:3], ",") || !ca.Get("next").Exists() {
		t.Fatalf("asc %v", asc)
	}
	// One message; bad input.
	r := h.get("/api/session/" + s.ID + "/message/" + ids[2])
	if gjson.GetBytes(r.body, "data.id").String() != ids[2] || gjson.GetBytes(r.body, "data.type").String() != "agent-switched" {
		t.Fatalf("message: %s", r.body)
	}
	wantError(t, h.get("/api/session/"+s.ID+"/message/msg_none"), 404, "MessageNotFoundError",
		map[string]any{"sessionID": s.ID, "messageID": "msg_none"})
	wantError(t, h.get("/api/session/"+s.ID+"/message/nope"), 400, "InvalidRequestError", nil)
	wantError(t, h.get("/api/session/ses_none/message"), 404, "SessionNotFoundError", nil)
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"id":"msg_gone","order":"asc","direction":"next"}`))
	for _, c := range []string{"garbage", forged, base64.RawURLEncoding.EncodeToString([]byte(`{"id":"x","order":"up","direction":"next"}`))} {
		wantError(t, h.get("/api/session/"+s.ID+"/message?cursor="+url.QueryEscape(c)), 400, "InvalidCursorError", nil)
	}
	wantError(t, h.get("/api/session/"+s.ID+"/message?order=asc&cursor="+url.QueryEscape(c1.Get("next").String())), 400,
		"InvalidCursorError", map[string]any{"message": "Cursor cannot be combined with order"})
	for _, q := range []string{"limit=0", "limit=201", "order=up", "nope=1"} {
		wantError(t, h.get("/api/session/"+s.ID+"/message?"+q), 400, "InvalidRequestError", nil)
	}
	// An empty session's page.
	e := h.createSession(nil)
	if r := h.get("/api/session/" + e.ID + "/message"); string(r.body) != `{"data":[],"cursor":{}}`+"\n" && string(r.body) != `{"data":[],"cursor":{}}` {
		t.Fatalf("empty: %q", r.body)
	}
}

func TestWaitCompactAndContext(t *testing.T) {
	h := newDrainHarness(t)
	h.send("POST", "/api/session", map[string]any{"id": "ses_w"})
	h.prompt("ses_w", "first", nil)
	if r := h.send("POST", "/api/session/ses_w/wait", nil); r.status != 204 {
		t.Fatalf("wait: %d %s", r.status, r.body)
	}
	// wait returned after the run: its idle message is stored and its
	// events are in the history.
	if msgs := h.messages("ses_w"); len(msgs) != 3 || msgs[2]["type"] != "idle" {
		t.Fatalf("after wait: %v", msgs)
	}
	hist := gjson.ParseBytes(h.get("/api/session/ses_w/history").body).Get("data.#.type").String()
	if !strings.Contains(hist, "session.next.step.ended") {
		t.Fatalf("history after wait: %s", hist)
	}
	ctxBefore := gjson.ParseBytes(h.get("/api/session/ses_w/context").body).Get("data.#").Int()
	if ctxBefore != 3 {
		t.Fatalf("context before compaction: %d", ctxBefore)
	}
	h.fake.SetBehavior(fakeprovider.Behavior{Script: func([]byte) fakeprovider.Step { return fakeprovider.Step{Text: "SUMMARY"} }})
	if r := h.send("POST", "/api/session/ses_w/compact", nil); r.status != 204 {
		t.Fatalf("compact: %d %s", r.status, r.body)
	}
	h.send("POST", "/api/session/ses_w/wait", nil)
	msgs := h.messages("ses_w")
	var compaction map[string]any
	for _, m := range msgs {
		if m["type"] == "compaction" {
			compaction = m
		}
	}
	if compaction == nil || compaction["reason"] != "manual" || compaction["status"] != "completed" || compaction["summary"] != "SUMMARY" {
		t.Fatalf("compaction: %v", msgs)
	}
	hist = gjson.ParseBytes(h.get("/api/session/ses_w/history").body).Get(`data.#(type=="session.next.compaction.ended").data`).Raw
	if gjson.Get(hist, "reason").String() != "manual" || gjson.Get(hist, "text").String() != "SUMMARY" {
		t.Fatalf("compaction.ended: %s", hist)
	}
	// The context starts at the compaction.
	c := gjson.ParseBytes(h.get("/api/session/ses_w/context").body).Get("data")
	if first := c.Get("0"); first.Get("type").String() != "compaction" || first.Get("id").String() != compaction["id"] {
		t.Fatalf("context: %s", c.Raw)
	}
	// The next request starts from the summary.
	h.prompt("ses_w", "after", nil)
	h.send("POST", "/api/session/ses_w/wait", nil)
	if body := string(lastTurn(t, h.fake).Body); !strings.Contains(body, "SUMMARY") || strings.Contains(body, `"first"`) {
		t.Fatalf("request after compaction: %s", body)
	}
	wantError(t, h.send("POST", "/api/session/ses_none/wait", nil), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/api/session/ses_none/compact", nil), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/api/session/ses_w/compact", map[string]any{"x": 1}), 400, "InvalidRequestError", nil)
	wantError(t, h.get("/api/session/ses_none/context"), 404, "SessionNotFoundError", nil)
}

func TestHealthModelsProvidersCommandsSkills(t *testing.T) {
	h := newDrainHarness(t)
	p := h.runner.Provider()
	p.Limits = map[string]loop.ModelLimits{"big-model": {Context: 200000, Output: 8000}}
	h.runner.SetProvider(p)
	if r := h.get("/api/health"); r.status != 200 || strings.TrimSpace(string(r.body)) != `{"healthy":true}` {
		t.Fatalf("health: %d %s", r.status, r.body)
	}
	r := h.get("/api/model")
	models := gjson.ParseBytes(r.body)
	if r.status != 200 || models.Get("location.directory").String() != h.dir || models.Get("data.#").Int() != 2 {
		t.Fatalf("models: %d %s", r.status, r.body)
	}
	big := models.Get(`data.#(id=="big-model")`)
	if big.Get("providerID").String() != "agentgate" || big.Get("limit.context").Int() != 200000 || big.Get("limit.output").Int() != 8000 ||
		big.Get("cost.0.input").Float() != 2 || big.Get("cost.0.output").Float() != 8 || !big.Get("enabled").Bool() ||
		big.Get("status").String() != "active" || !big.Get("capabilities.tools").Bool() {
		t.Fatalf("big-model: %s", big.Raw)
	}
	if !models.Get(`data.#(id=="fake-model")`).Exists() {
		t.Fatalf("default model missing: %s", r.body)
	}
	r = h.get("/api/provider")
	if gjson.GetBytes(r.body, "data.#").Int() != 1 || gjson.GetBytes(r.body, "data.0.id").String() != "agentgate" ||
		strings.Contains(string(r.body), fakeKey) || strings.Contains(string(r.body), h.fake.URL) {
		t.Fatalf("providers: %s", r.body)
	}
	if r := h.get("/api/provider/agentgate"); gjson.GetBytes(r.body, "data.id").String() != "agentgate" {
		t.Fatalf("provider: %s", r.body)
	}
	wantError(t, h.get("/api/provider/openai"), 404, "ProviderNotFoundError", map[string]any{"providerID": "openai"})

	// Commands and skills of the location.
	writeFile := func(rel, content string) {
		t.Helper()
		path := filepath.Join(h.dir, rel)
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("opencode.json", `{"command": {"test": {"template": "Run the tests", "description": "tests", "agent": "build", "subtask": true}}}`)
	writeFile(".opencode/command/review.md", "---\ndescription: Review a change\nmodel: agentgate/big-model\n---\nReview $ARGUMENTS\n")
	writeFile(".opencode/skill/go-style/SKILL.md", "---\nname: go-style\ndescription: How we write Go\n---\nUse gofmt.\n")
	h.send("POST", "/api/location/reload", nil)
	r = h.get("/api/command")
	cmds := gjson.ParseBytes(r.body).Get("data")
	if r.status != 200 || cmds.Get("#").Int() != 2 || cmds.Get("0.name").String() != "review" || cmds.Get("0.template").String() != "Review $ARGUMENTS" ||
		cmds.Get("0.model.id").String() != "big-model" || cmds.Get("1.name").String() != "test" || !cmds.Get("1.subtask").Bool() ||
		cmds.Get("1.agent").String() != "build" {
		t.Fatalf("commands: %d %s", r.status, r.body)
	}
	r = h.get("/api/skill")
	sk := gjson.ParseBytes(r.body).Get("data.0")
	if r.status != 200 || sk.Get("name").String() != "go-style" || sk.Get("description").String() != "How we write Go" ||
		sk.Get("content").String() != "Use gofmt." || !strings.HasSuffix(sk.Get("location").String(), "SKILL.md") {
		t.Fatalf("skills: %d %s", r.status, r.body)
	}
	// A malformed command fails the list with a clear error, not a 500.
	writeFile(".opencode/command/bad.md", "---\nmodel: [\n---\nx\n")
	wantError(t, h.get("/api/command"), 503, "ServiceUnavailableError", nil)
	writeFile("opencode.json", `{"command": {"empty": {"template": ""}}}`)
	os.Remove(filepath.Join(h.dir, ".opencode/command/bad.md"))
	wantError(t, h.get("/api/command"), 503, "ServiceUnavailableError", nil)
}

// The file routes: a directory's entries, files found by name, a file's
// bytes; paths that leave the location are refused, symlinks included.
func TestFileRoutes(t *testing.T) {
	h := newDrainHarness(t)
	for name, body := range map[string]string{"main.go": "package main\n", "pkg/util/strings.go": "package util\n", "node_modules/x/index.js": "x"} {
		p := filepath.Join(h.dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("no"), 0o644)
	os.Symlink(outside, filepath.Join(h.dir, "escape"))

	r := h.get("/api/fs/list")
	list := gjson.ParseBytes(r.body)
	if r.status != 200 || list.Get("location.directory").String() != h.dir || list.Get("data.0.path").String() != "pkg" ||
		list.Get(`data.#(path=="main.go").type`).String() != "file" || list.Get(`data.#(path=="pkg").type`).String() != "directory" ||
		list.Get(`data.#(path=="node_modules")`).Exists() {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r := h.get("/api/fs/list?path=pkg/util"); gjson.GetBytes(r.body, "data.0.path").String() != "pkg/util/strings.go" {
		t.Fatalf("list pkg/util: %s", r.body)
	}
	r = h.get("/api/fs/find?query=str")
	if gjson.GetBytes(r.body, "data.0.path").String() != "pkg/util/strings.go" || gjson.GetBytes(r.body, "data.#").Int() != 1 {
		t.Fatalf("find: %s", r.body)
	}
	if r := h.get("/api/fs/find?query=util&type=directory"); gjson.GetBytes(r.body, "data.0.path").String() != "pkg/util" {
		t.Fatalf("find a directory: %s", r.body)
	}
	if r := h.get("/api/fs/read/pkg/util/strings.go"); r.status != 200 || string(r.body) != "package util\n" {
		t.Fatalf("read: %d %q", r.status, r.body)
	}
	for _, bad := range []string{"/api/fs/read/escape/secret.txt", "/api/fs/read/..%2F..%2Fetc%2Fpasswd", "/api/fs/read/pkg",
		"/api/fs/list?path=escape", "/api/fs/list?path=/etc", "/api/fs/list?path=../", "/api/fs/find", "/api/fs/find?query=x&type=link",
		"/api/fs/find?query=x&limit=0", "/api/fs/read/"} {
		r := h.get(bad)
		if r.status != 400 || strings.Contains(string(r.body), "no\"") {
			t.Fatalf("%s: %d %s", bad, r.status, r.body)
		}
	}
	if r := h.get("/api/permission/request"); r.status != 200 || gjson.GetBytes(r.body, "data.#").Int() != 0 {
		t.Fatalf("pending permissions: %s", r.body)
	}
	if r := h.get("/api/question/request"); r.status != 200 || !gjson.GetBytes(r.body, "data").IsArray() {
		t.Fatalf("pending forms: %s", r.body)
	}
}

// The released SDK's operations for features this server does not have
// answer truthfully: no integrations, no terminals.
func TestUnsupportedOperations(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	if r := h.get("/api/integration/openai"); r.status != 200 || gjson.GetBytes(r.body, "data").Type != gjson.Null ||
		gjson.GetBytes(r.body, "location.directory").String() != h.dir {
		t.Fatalf("integration: %d %s", r.status, r.body)
	}
	wantError(t, h.send("POST", "/api/integration/openai/connect/key", map[string]any{"key": "sk-x"}), 400, "InvalidRequestError", nil)
	wantError(t, h.send("PATCH", "/api/credential/c1", map[string]any{"label": "x"}), 400, "InvalidRequestError", nil)
	if r := h.send("DELETE", "/api/credential/c1", nil); r.status != 204 {
		t.Fatalf("credential delete: %d", r.status)
	}
	if r := h.get("/api/pty"); r.status != 200 || gjson.GetBytes(r.body, "data.#").Int() != 0 {
		t.Fatalf("pty list: %d %s", r.status, r.body)
	}
	wantError(t, h.send("POST", "/api/pty", map[string]any{}), 503, "ServiceUnavailableError", nil)
	wantError(t, h.send("POST", "/api/session/"+s.ID+"/revert/stage", map[string]any{}), 400, "InvalidRequestError", nil)
	wantError(t, h.send("POST", "/api/session/ses_none/revert/clear", nil), 404, "SessionNotFoundError", nil)
}

// A page reads only its own messages: an unreadable message early in a
// session does not fail the newest page (it fails a page that holds it).
func TestMessagePageReadsOnlyItsMessages(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	if err := h.store().Update(context.Background(), func(tx store.Tx) error {
		return tx.AppendSessionItem("default", s.ID, store.ItemMessage, "msg_broken", []byte(`{"id":"msg_broken","type":"nonsense"}`))
	}); err != nil {
		t.Fatal(err)
	}
	for _, agent := range []string{"plan", "build", "plan"} {
		h.send("POST", "/api/session/"+s.ID+"/agent", map[string]any{"agent": agent})
	}
	r := h.get("/api/session/" + s.ID + "/message?limit=3")
	if r.status != 200 || gjson.GetBytes(r.body, "data.#").Int() != 3 {
		t.Fatalf("newest page: %d %s", r.status, r.body)
	}
	next := gjson.GetBytes(r.body, "cursor.next").String()
	if r := h.get("/api/session/" + s.ID + "/message?limit=3&cursor=" + url.QueryEscape(next)); r.status != 500 {
		t.Fatalf("the page holding the unreadable message: %d %s", r.status, r.body)
	}
}

package v1

import (
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/session"
)

// ev is an instance event record as the bus encodes it.
func ev(t *testing.T, id, typ string, data map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(events.Event{ID: id, Created: 1000, Type: typ, Location: &events.LocationRef{Directory: "/p/sub"}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func translate(t *testing.T, tr *Translator, raw []byte) []gjson.Result {
	t.Helper()
	evs, dir := tr.Translate(raw)
	if dir != "/p/sub" && gjson.GetBytes(raw, "location").Exists() {
		t.Fatalf("directory %q", dir)
	}
	var out []gjson.Result
	for _, e := range evs {
		b, _ := json.Marshal(e)
		out = append(out, gjson.ParseBytes(b))
	}
	return out
}

// A step with text and a tool call becomes the v1 sequence the released
// CLI reads: the user message and its text part, the assistant message
// with a step-start, a text part that grows by deltas and closes with its
// text, a tool part pending → running → completed with its tool name,
// input and output, a step-finish, and the completed assistant message.
func TestTranslateStep(t *testing.T) {
	tr := &Translator{Root: func(string) string { return "/p" }}
	sid, mid := "ses_1", "msg_a"
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"sessionID": sid, "timestamp": 2000, "assistantMessageID": mid}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	u := translate(t, tr, ev(t, "evt_1", "session.next.prompted", map[string]any{"sessionID": sid, "timestamp": 1500, "messageID": "msg_u",
		"prompt": map[string]any{"text": "hi"}}))
	if len(u) != 2 || u[0].Get("type").String() != "message.updated" || u[0].Get("properties.info.role").String() != "user" ||
		u[1].Get("properties.part.text").String() != "hi" || u[1].Get("properties.part.id").String() != "prt_u_u0" {
		t.Fatalf("prompted: %v", u)
	}
	s := translate(t, tr, ev(t, "evt_2", "session.next.step.started", base(map[string]any{"agent": "build",
		"model": map[string]any{"id": "m1", "providerID": "agentgate"}})))
	a := s[0].Get("properties.info")
	if a.Get("role").String() != "assistant" || a.Get("parentID").String() != "msg_u" || a.Get("modelID").String() != "m1" ||
		a.Get("path.root").String() != "/p" || a.Get("path.cwd").String() != "/p/sub" || a.Get("time.completed").Exists() ||
		s[1].Get("properties.part.type").String() != "step-start" {
		t.Fatalf("step.started: %v", s)
	}
	translate(t, tr, ev(t, "evt_3", "session.next.text.started", base(map[string]any{"textID": "text-0"})))
	d := translate(t, tr, ev(t, "evt_4", "session.next.text.delta", base(map[string]any{"textID": "text-0", "delta": "Hel"})))
	if d[0].Get("type").String() != "message.part.delta" || d[0].Get("properties.partID").String() != "prt_a_2t0" ||
		d[0].Get("properties.delta").String() != "Hel" || d[0].Get("properties.field").String() != "text" {
		t.Fatalf("delta: %v", d)
	}
	e := translate(t, tr, ev(t, "evt_5", "session.next.text.ended", base(map[string]any{"textID": "text-0", "text": "Hello"})))
	if p := e[0].Get("properties.part"); p.Get("text").String() != "Hello" || p.Get("time.start").Int() != 2000 || !p.Get("time.end").Exists() {
		t.Fatalf("text.ended: %v", e)
	}
	translate(t, tr, ev(t, "evt_6", "session.next.tool.input.started", base(map[string]any{"callID": "c1", "name": "read"})))
	r := translate(t, tr, ev(t, "evt_7", "session.next.tool.called", base(map[string]any{"callID": "c1", "tool": "read",
		"input": map[string]any{"filePath": "a.go"}})))
	if p := r[0].Get("properties.part"); p.Get("state.status").String() != "running" || p.Get("tool").String() != "read" ||
		p.Get("state.input.filePath").String() != "a.go" {
		t.Fatalf("called: %v", r)
	}
	c := translate(t, tr, ev(t, "evt_8", "session.next.tool.success", base(map[string]any{"callID": "c1",
		"structured": map[string]any{"title": "a.go"}, "content": []any{map[string]any{"type": "text", "text": "package a"}}})))
	if p := c[0].Get("properties.part"); p.Get("state.status").String() != "completed" || p.Get("state.output").String() != "package a" ||
		p.Get("state.title").String() != "a.go" || p.Get("tool").String() != "read" || p.Get("state.input.filePath").String() != "a.go" ||
		p.Get("id").String() != "prt_a_3cc1" {
		t.Fatalf("success: %v", c)
	}
	f := translate(t, tr, ev(t, "evt_9", "session.next.step.ended", base(map[string]any{"finish": "tool-calls", "cost": 0.5,
		"tokens": map[string]any{"input": 10, "output": 2, "reasoning": 0, "cache": map[string]any{"read": 1, "write": 0}}})))
	if len(f) != 2 || f[0].Get("properties.part.type").String() != "step-finish" || f[0].Get("properties.part.reason").String() != "tool-calls" {
		t.Fatalf("step.ended: %v", f)
	}
	if done := f[1].Get("properties.info"); done.Get("finish").String() != "tool-calls" || done.Get("cost").Float() != 0.5 ||
		done.Get("tokens.input").Int() != 10 || done.Get("time.completed").Int() != 2000 || done.Get("modelID").String() != "m1" {
		t.Fatalf("completed assistant: %v", f[1])
	}
	if len(tr.steps) != 0 || len(tr.calls) != 0 {
		t.Fatalf("state kept after the step: %d steps, %d calls", len(tr.steps), len(tr.calls))
	}
	// A failed call, an unknown event, a session record.
	x := translate(t, tr, ev(t, "evt_10", "session.next.tool.failed", base(map[string]any{"callID": "c9",
		"error": map[string]any{"type": "PermissionRejectedError", "message": "no"}})))
	if x[0].Get("properties.part.state.status").String() != "error" || x[0].Get("properties.part.state.error").String() != "no" {
		t.Fatalf("failed: %v", x)
	}
	if out := translate(t, tr, ev(t, "evt_11", "location.shutdown", nil)); len(out) != 0 {
		t.Fatalf("an event with no v1 form: %v", out)
	}
	info := session.Info{ID: sid, ProjectID: "p1", Title: "T", Location: events.LocationRef{Directory: "/p/sub"},
		Permissions: []agents.PermissionRule{{Action: "bash", Resource: "*", Effect: "ask"}}}
	up := translate(t, tr, ev(t, "evt_12", "session.updated", map[string]any{"sessionID": sid, "info": info}))
	if i := up[0].Get("properties.info"); i.Get("directory").String() != "/p/sub" || i.Get("permission.0.permission").String() != "bash" ||
		i.Get("permission.0.action").String() != "ask" || i.Get("title").String() != "T" {
		t.Fatalf("session.updated: %v", up)
	}
	if bad, _ := tr.Translate([]byte(`{"type":"session.updated","data":{"info":"not a record"}}`)); len(bad) != 0 {
		t.Fatalf("a malformed record: %v", bad)
	}
}

// Stored messages project onto v1 messages: user messages with their text
// part, assistant steps with step-start, text, tool and step-finish parts
// and the user message they answer; other records have no v1 form.
func TestMessages(t *testing.T) {
	info := &session.Info{ID: "ses_1", Location: events.LocationRef{Directory: "/p"}}
	raw := []string{
		`{"id":"msg_s","type":"agent-switched","agent":"plan","time":{"created":1}}`,
		`{"id":"msg_u","type":"user","text":"hi","time":{"created":2}}`,
		`{"id":"msg_a","type":"assistant","agent":"plan","model":{"id":"m1","providerID":"agentgate"},"finish":"stop","cost":0.25,` +
			`"tokens":{"input":3,"output":4},"time":{"created":3,"completed":4},"content":[{"type":"text","text":"hello"},` +
			`{"type":"tool","id":"c1","name":"bash","state":{"status":"completed","input":{"command":"ls"},"content":[{"type":"text","text":"a"}]},"time":{"created":3,"completed":4}}]}`,
		`{"id":"msg_i","type":"idle","outcome":"succeeded","time":{"created":5}}`,
	}
	var msgs []session.Message
	for _, r := range raw {
		var h session.MessageHeader
		json.Unmarshal([]byte(r), &h)
		msgs = append(msgs, session.Message{Header: h, Raw: json.RawMessage(r)})
	}
	out := Messages(info, msgs, "/p", "")
	if len(out) != 2 {
		t.Fatalf("%d messages", len(out))
	}
	if out[0].Info["role"] != "user" || out[0].Info["agent"] != "plan" || out[0].Parts[0]["text"] != "hi" {
		t.Fatalf("user: %+v", out[0])
	}
	a := out[1]
	if a.Info["parentID"] != "msg_u" || a.Info["finish"] != "stop" || a.Info["cost"] != 0.25 || len(a.Parts) != 4 {
		t.Fatalf("assistant: %+v", a)
	}
	kinds := []any{a.Parts[0]["type"], a.Parts[1]["type"], a.Parts[2]["type"], a.Parts[3]["type"]}
	if kinds[0] != "step-start" || kinds[1] != "text" || kinds[2] != "tool" || kinds[3] != "step-finish" {
		t.Fatalf("parts %v", kinds)
	}
	if st := a.Parts[2]["state"].(map[string]any); st["status"] != "completed" || st["output"] != "a" {
		t.Fatalf("tool part %+v", a.Parts[2])
	}
	// The released TUI keeps a message's parts sorted by id: they sort in
	// the order they come.
	for i := 1; i < len(a.Parts); i++ {
		if a.Parts[i-1]["id"].(string) >= a.Parts[i]["id"].(string) {
			t.Fatalf("part ids out of order: %v then %v", a.Parts[i-1]["id"], a.Parts[i]["id"])
		}
	}
}

// A compaction projects as the released server records one: a user
// message with a compaction part, then an assistant message with summary:
// true, the summary as its text, parented to it and sorting between it and
// the next message; a failed one carries its error; the share link of a
// session is its share.url.
func TestMessagesCompaction(t *testing.T) {
	info := &session.Info{ID: "ses_1", Location: events.LocationRef{Directory: "/p/sub"}, Share: &session.Share{URL: "http://h/ui/session/ses_1"}}
	var msgs []session.Message
	for _, r := range []string{
		`{"id":"msg_1u","type":"user","text":"hi","time":{"created":1}}`,
		`{"id":"msg_2c","type":"compaction","reason":"manual","status":"completed","summary":"we said hi","model":{"id":"m1","providerID":"agentgate"},` +
			`"cost":0.5,"tokens":{"input":7,"output":3},"time":{"created":2,"completed":3}}`,
		`{"id":"msg_3c","type":"compaction","reason":"auto","status":"failed","error":{"type":"CompactionError","message":"no summary"},"time":{"created":4,"completed":5}}`,
		`{"id":"msg_4u","type":"user","text":"next","time":{"created":6}}`,
	} {
		var h session.MessageHeader
		json.Unmarshal([]byte(r), &h)
		msgs = append(msgs, session.Message{Header: h, Raw: json.RawMessage(r)})
	}
	out := Messages(info, msgs, "/p", "")
	if len(out) != 6 {
		t.Fatalf("%d messages: %+v", len(out), out)
	}
	u, a := out[1], out[2]
	if u.Info["id"] != "msg_2c" || u.Info["role"] != "user" || len(u.Parts) != 1 || u.Parts[0]["type"] != "compaction" || u.Parts[0]["auto"] != false {
		t.Fatalf("compaction's user message: %+v", u)
	}
	if a.Info["role"] != "assistant" || a.Info["summary"] != true || a.Info["parentID"] != "msg_2c" || a.Info["finish"] != "stop" ||
		a.Info["modelID"] != "m1" || a.Info["cost"] != 0.5 || a.Info["agent"] != "compaction" || len(a.Parts) != 1 || a.Parts[0]["text"] != "we said hi" {
		t.Fatalf("summary: %+v", a)
	}
	for i := 1; i < len(out); i++ {
		if out[i-1].Info["id"].(string) >= out[i].Info["id"].(string) {
			t.Fatalf("message ids out of order: %v then %v", out[i-1].Info["id"], out[i].Info["id"])
		}
	}
	if f := out[4]; f.Info["summary"] != true || f.Info["finish"] != nil || out[3].Parts[0]["auto"] != true ||
		f.Info["error"].(map[string]any)["data"].(map[string]any)["message"] != "no summary" {
		t.Fatalf("failed compaction: %+v %+v", out[3], f)
	}
	if s := Session(info); s["share"].(map[string]any)["url"] != "http://h/ui/session/ses_1" {
		t.Fatalf("share: %+v", s)
	}
	if s := Session(&session.Info{ID: "ses_2"}); s["share"] != nil {
		t.Fatalf("an unshared session has a share: %+v", s)
	}
}

// A compaction's events make the same messages live: started gives the
// user message with its compaction part and the running summary; ended
// gives the summary's text and the finished message; failed its error.
func TestTranslateCompaction(t *testing.T) {
	tr := &Translator{Root: func(string) string { return "/p" }, DefaultModel: func() string { return "m1" }}
	st := translate(t, tr, ev(t, "evt_1", "session.next.compaction.started", map[string]any{"sessionID": "ses_1", "timestamp": 10,
		"messageID": "msg_c", "reason": "manual"}))
	if len(st) != 3 || st[0].Get("properties.info.role").String() != "user" || st[1].Get("properties.part.type").String() != "compaction" ||
		st[2].Get("properties.info.summary").Bool() != true || st[2].Get("properties.info.parentID").String() != "msg_c" ||
		st[2].Get("properties.info.time.completed").Exists() || st[2].Get("properties.info.modelID").String() != "m1" {
		t.Fatalf("started: %v", st)
	}
	end := translate(t, tr, ev(t, "evt_2", "session.next.compaction.ended", map[string]any{"sessionID": "ses_1", "timestamp": 20,
		"messageID": "msg_c", "reason": "manual", "text": "the summary"}))
	if len(end) != 2 || end[0].Get("properties.part.text").String() != "the summary" ||
		end[0].Get("properties.part.messageID").String() != SummaryID("msg_c") || end[1].Get("properties.info.finish").String() != "stop" ||
		end[1].Get("properties.info.time.created").Int() != 10 || end[1].Get("properties.info.time.completed").Int() != 20 {
		t.Fatalf("ended: %v", end)
	}
	if len(tr.compactions) != 0 {
		t.Fatalf("state kept after the compaction: %d", len(tr.compactions))
	}
	fail := translate(t, tr, ev(t, "evt_3", "session.next.compaction.failed", map[string]any{"sessionID": "ses_1", "timestamp": 30,
		"messageID": "msg_d", "reason": "auto", "error": map[string]any{"type": "CompactionError", "message": "no summary"}}))
	if len(fail) != 1 || fail[0].Get("properties.info.error.data.message").String() != "no summary" || fail[0].Get("properties.info.finish").Exists() {
		t.Fatalf("failed: %v", fail)
	}
}

// A user message carries the model its turn uses, never an empty model id
// when one is known: the instance's default before any step, the
// session's own when it names one, the last step's after it (a client
// checks the id against the provider list and complains of an empty one).
func TestMessagesUserModel(t *testing.T) {
	mk := func(raw ...string) []session.Message {
		var msgs []session.Message
		for _, r := range raw {
			var h session.MessageHeader
			json.Unmarshal([]byte(r), &h)
			msgs = append(msgs, session.Message{Header: h, Raw: json.RawMessage(r)})
		}
		return msgs
	}
	msgs := mk(`{"id":"msg_u1","type":"user","text":"hi","time":{"created":1}}`,
		`{"id":"msg_a","type":"assistant","model":{"id":"m2","providerID":"agentgate"},"time":{"created":2,"completed":3},"content":[]}`,
		`{"id":"msg_u2","type":"user","text":"again","time":{"created":4}}`)
	model := func(out []WithParts, i int) string {
		m := out[i].Info["model"].(map[string]any)
		return m["providerID"].(string) + "/" + m["modelID"].(string)
	}
	info := &session.Info{ID: "ses_1", Location: events.LocationRef{Directory: "/p"}}
	out := Messages(info, msgs, "/p", "chat")
	if model(out, 0) != "agentgate/chat" || model(out, 2) != "agentgate/m2" {
		t.Fatalf("with the default chat: %s then %s", model(out, 0), model(out, 2))
	}
	info.Model = &agents.ModelRef{ID: "picked", ProviderID: "agentgate"}
	if out := Messages(info, msgs, "/p", "chat"); model(out, 0) != "agentgate/picked" {
		t.Fatalf("with the session's model: %s", model(out, 0))
	}
	info.Model = nil
	if out := Messages(info, msgs, "/p", ""); model(out, 0) != "agentgate/" {
		t.Fatalf("with no model known: %s", model(out, 0))
	}
}

// The event stream's user message carries the same model: the default
// before any step, then the model the session's steps use.
func TestTranslateUserModel(t *testing.T) {
	tr := &Translator{Root: func(d string) string { return d }, DefaultModel: func() string { return "chat" }}
	prompted := func(mid string) string {
		evs, _ := tr.Translate([]byte(`{"id":"e","type":"session.next.prompted","location":{"directory":"/p"},"data":{"sessionID":"ses_1","messageID":"` + mid + `","prompt":{"text":"hi"}}}`))
		b, _ := json.Marshal(evs[0].Properties)
		return gjson.GetBytes(b, "info.model.providerID").String() + "/" + gjson.GetBytes(b, "info.model.modelID").String()
	}
	if got := prompted("msg_u1"); got != "agentgate/chat" {
		t.Fatalf("before any step: %s", got)
	}
	tr.Translate([]byte(`{"id":"e2","type":"session.next.step.started","location":{"directory":"/p"},"data":{"sessionID":"ses_1","assistantMessageID":"msg_a","model":{"id":"m2","providerID":"agentgate"}}}`))
	if got := prompted("msg_u2"); got != "agentgate/m2" {
		t.Fatalf("after a step: %s", got)
	}
}

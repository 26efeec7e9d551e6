package v1

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/session"
)

// Translator turns the instance's events into v1 events for one stream.
// It remembers, for the steps and tool calls in flight, what the v1
// records repeat in every update (a step's model and start, a call's tool
// and input); a stream that joins mid-step sees those fields empty.
type Translator struct {
	// Root returns the project directory of a session's directory.
	Root func(dir string) string
	// DefaultModel, when set, returns the model of sessions that name
	// none: the model a user message carries until its session has one.
	DefaultModel func() string
	steps        map[string]*stepState       // by assistant message id
	calls        map[string]*callState       // by call id
	users        map[string]string           // the last user message id by session
	models       map[string]*agents.ModelRef // the model of each session's last step, or its own
	compactions  map[string]*compactionState // by compaction message id
}

type compactionState struct {
	model     *agents.ModelRef
	created   int64
	cwd, root string
}

type stepState struct {
	sid, agent, modelID, providerID, cwd string
	created                              int64
	parent                               string
	textStart                            map[string]int64
}

type callState struct {
	tool  string
	input json.RawMessage
	start int64
}

// Event is a v1 event: {id, type, properties}.
type Event struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Properties any    `json:"properties"`
}

// Translate returns the v1 events of one event record (none for an
// event with no v1 form) and the event's directory ("" when it has none).
func (t *Translator) Translate(raw []byte) (out []Event, dir string) {
	if t.steps == nil {
		t.steps, t.calls, t.users = map[string]*stepState{}, map[string]*callState{}, map[string]string{}
		t.models, t.compactions = map[string]*agents.ModelRef{}, map[string]*compactionState{}
	}
	ev := gjson.ParseBytes(raw)
	id, typ, data := ev.Get("id").String(), ev.Get("type").String(), ev.Get("data")
	dir = ev.Get("location.directory").String()
	sid := data.Get("sessionID").String()
	ts := data.Get("timestamp").Int()
	if ts == 0 {
		ts = ev.Get("created").Int()
	}
	emit := func(typ string, props any) { out = append(out, Event{ID: id, Type: typ, Properties: props}) }
	part := func(p map[string]any) {
		emit("message.part.updated", map[string]any{"sessionID": sid, "part": p, "time": ts})
	}
	base := func(msgID, pid, typ string) map[string]any {
		return map[string]any{"id": PartID(msgID, pid), "sessionID": sid, "messageID": msgID, "type": typ}
	}
	msgID := data.Get("assistantMessageID").String()
	st := t.steps[msgID]
	switch typ {
	case "server.connected":
		emit(typ, map[string]any{})
	case "session.created", "session.updated":
		var info session.Info
		if json.Unmarshal([]byte(data.Get("info").Raw), &info) != nil {
			return nil, dir
		}
		if info.Model != nil {
			t.models[sid] = info.Model
		}
		emit(typ, map[string]any{"sessionID": sid, "info": Session(&info)})
	case "session.deleted":
		delete(t.users, sid)
		delete(t.models, sid)
		emit(typ, map[string]any{"sessionID": sid, "info": map[string]any{"id": sid}})
	case "session.next.prompted":
		mid := data.Get("messageID").String()
		t.users[sid] = mid
		emit("message.updated", map[string]any{"sessionID": sid, "info": map[string]any{"id": mid, "sessionID": sid, "role": "user",
			"time": map[string]any{"created": ts}, "agent": "build", "model": userModel(t.sessionModel(sid))}})
		p := base(mid, "u0", "text")
		p["text"] = data.Get("prompt.text").String()
		part(p)
	case "session.next.step.started":
		st = &stepState{sid: sid, agent: data.Get("agent").String(), modelID: data.Get("model.id").String(),
			providerID: data.Get("model.providerID").String(), cwd: dir, created: ts, parent: t.users[sid], textStart: map[string]int64{}}
		t.steps[msgID] = st
		if st.modelID != "" {
			t.models[sid] = &agents.ModelRef{ID: st.modelID, ProviderID: st.providerID}
		}
		emit("message.updated", map[string]any{"sessionID": sid, "info": t.assistant(msgID, st, nil)})
		part(base(msgID, "s", "step-start"))
	case "session.next.text.started", "session.next.reasoning.started", "session.next.text.ended", "session.next.reasoning.ended":
		kind := "text"
		if typ == "session.next.reasoning.started" || typ == "session.next.reasoning.ended" {
			kind = "reasoning"
		}
		p := base(msgID, kind[:1]+"0", kind)
		start := ts
		if st != nil {
			if s, ok := st.textStart[kind]; ok {
				start = s
			} else {
				st.textStart[kind] = ts
			}
		}
		if typ == "session.next."+kind+".started" {
			p["text"], p["time"] = "", map[string]any{"start": start}
		} else {
			p["text"], p["time"] = data.Get("text").String(), map[string]any{"start": start, "end": ts}
		}
		part(p)
	case "session.next.text.delta", "session.next.reasoning.delta":
		pid := "t0"
		if typ == "session.next.reasoning.delta" {
			pid = "r0"
		}
		emit("message.part.delta", map[string]any{"sessionID": sid, "messageID": msgID, "partID": PartID(msgID, pid),
			"field": "text", "delta": data.Get("delta").String()})
	case "session.next.tool.input.started":
		callID := data.Get("callID").String()
		t.calls[callID] = &callState{tool: data.Get("name").String(), input: json.RawMessage("{}")}
		p := base(msgID, "c"+callID, "tool")
		p["callID"], p["tool"] = callID, data.Get("name").String()
		p["state"] = map[string]any{"status": "pending", "input": map[string]any{}, "raw": ""}
		part(p)
	case "session.next.tool.called", "session.next.tool.success", "session.next.tool.failed", "session.next.tool.progress":
		callID := data.Get("callID").String()
		c := t.calls[callID]
		if c == nil {
			c = &callState{input: json.RawMessage("{}")}
			t.calls[callID] = c
		}
		if typ == "session.next.tool.called" {
			c.tool, c.start = data.Get("tool").String(), ts
			if in := data.Get("input"); in.Exists() {
				c.input = json.RawMessage(in.Raw)
			}
		}
		p := base(msgID, "c"+callID, "tool")
		p["callID"], p["tool"] = callID, c.tool
		state := map[string]any{"input": c.input}
		switch typ {
		case "session.next.tool.called":
			state["status"], state["time"] = "running", map[string]any{"start": c.start}
		case "session.next.tool.progress":
			state["status"], state["time"] = "running", map[string]any{"start": c.start}
			state["metadata"] = json.RawMessage(orEmpty(data.Get("structured").Raw))
			if t := data.Get("structured.title"); t.Type == gjson.String {
				state["title"] = t.String()
			}
		case "session.next.tool.success":
			var out string
			for _, x := range data.Get("content").Array() {
				out += x.Get("text").String()
			}
			state["status"], state["output"] = "completed", out
			state["title"] = data.Get("structured.title").String()
			state["metadata"] = json.RawMessage(orEmpty(data.Get("structured").Raw))
			state["time"] = map[string]any{"start": c.start, "end": ts}
			delete(t.calls, callID)
		case "session.next.tool.failed":
			state["status"], state["error"] = "error", data.Get("error.message").String()
			state["time"] = map[string]any{"start": c.start, "end": ts}
			delete(t.calls, callID)
		}
		p["state"] = state
		part(p)
	case "session.next.step.ended", "session.next.step.failed":
		if st == nil {
			st = &stepState{sid: sid, cwd: dir, created: ts, parent: t.users[sid]}
		}
		delete(t.steps, msgID)
		if typ == "session.next.step.ended" {
			p := base(msgID, "f", "step-finish")
			p["reason"], p["cost"] = data.Get("finish").String(), data.Get("cost").Float()
			p["tokens"] = tokensOf(data.Get("tokens"))
			part(p)
		}
		emit("message.updated", map[string]any{"sessionID": sid, "info": t.assistant(msgID, st, &data)})
	case "session.next.compaction.started":
		// The released server's compaction: a user message with a
		// compaction part, then the assistant message of the summary.
		mid := data.Get("messageID").String()
		model := t.sessionModel(sid)
		emit("message.updated", map[string]any{"sessionID": sid, "info": map[string]any{"id": mid, "sessionID": sid, "role": "user",
			"time": map[string]any{"created": ts}, "agent": "build", "model": userModel(model)}})
		part(CompactionPart(sid, mid, data.Get("reason").String() == "auto"))
		root := dir
		if t.Root != nil {
			root = t.Root(dir)
		}
		t.compactions[mid] = &compactionState{model: model, created: ts, cwd: dir, root: root}
		emit("message.updated", map[string]any{"sessionID": sid, "info": summaryInfo(sid, mid, model, dir, root, ts)})
	case "session.next.compaction.ended", "session.next.compaction.failed":
		mid := data.Get("messageID").String()
		c := t.compactions[mid]
		if c == nil {
			c = &compactionState{model: t.sessionModel(sid), created: ts, cwd: dir, root: dir}
		}
		delete(t.compactions, mid)
		sum := SummaryID(mid)
		a := summaryInfo(sid, mid, c.model, c.cwd, c.root, c.created)
		a["time"] = map[string]any{"created": c.created, "completed": ts}
		if typ == "session.next.compaction.ended" {
			part(map[string]any{"id": PartID(sum, "t0"), "sessionID": sid, "messageID": sum, "type": "text",
				"text": data.Get("text").String(), "time": map[string]any{"start": c.created, "end": ts}})
			a["finish"] = "stop"
		} else {
			a["error"] = errorOf(data.Get("error"))
		}
		emit("message.updated", map[string]any{"sessionID": sid, "info": a})
	case "session.next.step.snapshot":
		// The step's files are recorded once its tools ran: its patch part.
		if p := patchPart(sid, msgID, data.Get("snapshot")); p != nil {
			part(p)
		}
	case "session.diff", "message.removed":
		emit(typ, json.RawMessage(orEmpty(data.Raw)))
	case "session.status", "session.idle", "permission.asked", "permission.replied", "question.asked", "question.replied",
		"question.rejected", "todo.updated", "tui.toast.show":
		emit(typ, json.RawMessage(orEmpty(data.Raw)))
	}
	return out, dir
}

// assistant is a step's v1 AssistantMessage; end, when set, is its
// step.ended or step.failed data.
func (t *Translator) assistant(msgID string, st *stepState, end *gjson.Result) map[string]any {
	root := st.cwd
	if t.Root != nil {
		root = t.Root(st.cwd)
	}
	agent := st.agent
	if agent == "" {
		agent = "build"
	}
	a := map[string]any{"id": msgID, "sessionID": st.sid, "role": "assistant", "parentID": st.parent, "mode": agent, "agent": agent,
		"path": map[string]any{"cwd": st.cwd, "root": root}, "modelID": st.modelID, "providerID": st.providerID, "cost": 0,
		"tokens": tokensOf(gjson.Result{}), "time": map[string]any{"created": st.created}}
	if end != nil {
		a["time"] = map[string]any{"created": st.created, "completed": end.Get("timestamp").Int()}
		if f := end.Get("finish"); f.Exists() {
			a["finish"], a["cost"], a["tokens"] = f.String(), end.Get("cost").Float(), tokensOf(end.Get("tokens"))
		}
		if e := end.Get("error"); e.Exists() {
			a["error"] = errorOf(e)
		}
	}
	return a
}

// sessionModel is the model a session's next turn uses as far as this
// stream knows: its last step's or its own, else the instance's default.
func (t *Translator) sessionModel(sid string) *agents.ModelRef {
	if m := t.models[sid]; m != nil {
		return m
	}
	if t.DefaultModel != nil {
		if id := t.DefaultModel(); id != "" {
			return &agents.ModelRef{ID: id, ProviderID: ProviderID}
		}
	}
	return nil
}

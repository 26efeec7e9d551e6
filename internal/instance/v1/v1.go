// Package v1 projects the instance's sessions, messages and events onto
// the records of the released OpenCode server's first (v1) routes, which
// its CLI (`opencode run --attach`) and TUI (`opencode attach`) speak:
// Session, UserMessage and AssistantMessage with their parts, and
// `{id, type, properties}` events. It holds no state of its own beyond a
// stream's translation of tool calls in flight.
package v1

import (
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/session"
)

// Version is the version v1 records report.
const Version = "agentgate"

// Rule is a v1 permission rule.
type Rule struct {
	Permission string `json:"permission"`
	Pattern    string `json:"pattern"`
	Action     string `json:"action"`
}

// RulesIn turns v1 rules into the session's.
func RulesIn(in []Rule) []agents.PermissionRule {
	out := make([]agents.PermissionRule, 0, len(in))
	for _, r := range in {
		out = append(out, agents.PermissionRule{Action: r.Permission, Resource: r.Pattern, Effect: r.Action})
	}
	return out
}

// Session is the v1 Session record of a session.
func Session(info *session.Info) map[string]any {
	out := map[string]any{"id": info.ID, "slug": slug(info.ID), "projectID": info.ProjectID, "directory": info.Location.Directory,
		"path": info.Subpath, "title": info.Title, "version": Version, "cost": info.Cost, "tokens": tokens(info.Tokens),
		"time": map[string]any{"created": info.Time.Created, "updated": info.Time.Updated}}
	if info.ParentID != "" {
		out["parentID"] = info.ParentID
	}
	if info.Agent != "" {
		out["agent"] = info.Agent
	}
	if info.Model != nil {
		out["model"] = map[string]any{"id": info.Model.ID, "providerID": info.Model.ProviderID}
	}
	if info.Share != nil {
		out["share"] = map[string]any{"url": info.Share.URL}
	}
	if len(info.Permissions) > 0 {
		rules := make([]Rule, 0, len(info.Permissions))
		for _, r := range info.Permissions {
			rules = append(rules, Rule{Permission: r.Action, Pattern: r.Resource, Action: r.Effect})
		}
		out["permission"] = rules
	}
	if r := revert(info); r != nil {
		out["revert"] = r
	}
	return out
}

func slug(id string) string {
	if len(id) > 8 {
		return strings.ToLower(id[len(id)-8:])
	}
	return id
}

func tokens(t session.TokenUsage) map[string]any {
	return map[string]any{"input": t.Input, "output": t.Output, "reasoning": t.Reasoning,
		"cache": map[string]any{"read": t.Cache.Read, "write": t.Cache.Write}}
}

// PartID is the v1 part id of a message's part: step-start "s", text
// "t0", reasoning "r0", a tool call "c" + its call id, step-finish "f",
// a user message's text "u0", a compaction's marker "k". An assistant
// step's parts sort by id in the order they come — step start,
// reasoning, text, tool calls, step finish — as the released TUI keeps a
// message's parts sorted by id (it inserts each update where its id
// sorts).
func PartID(msgID, part string) string {
	rank := ""
	if part != "" {
		switch part[0] {
		case 's':
			rank = "0"
		case 'r':
			rank = "1"
		case 't':
			rank = "2"
		case 'c':
			rank = "3"
		case 'f':
			rank = "9"
		}
	}
	return "prt_" + strings.TrimPrefix(msgID, "msg_") + "_" + rank + part
}

// WithParts is a v1 message and its parts.
type WithParts struct {
	Info  map[string]any   `json:"info"`
	Parts []map[string]any `json:"parts"`
}

// SummaryID is the v1 id of the assistant message that carries a
// compaction's summary: the compaction's id and a suffix, so that it sorts
// right after the compaction's own (user) message and before the next.
func SummaryID(compactionID string) string { return compactionID + "_summary" }

// Messages projects a session's stored messages onto v1 messages: user
// messages, assistant steps, and each compaction as the released server
// records one — a user message with a compaction part, then an assistant
// message with summary: true whose text is the summary (other records
// have no v1 form). cwd and root are the session's directory and its
// project's. A user message
// carries the model its turn uses: the last step's, else the session's,
// else defaultModel (the instance's default), so that a client never sees
// a user message without a model id.
func Messages(info *session.Info, msgs []session.Message, root, defaultModel string) []WithParts {
	out := []WithParts{}
	lastUser := ""
	agent := "build"
	model := info.Model
	if model == nil && defaultModel != "" {
		model = &agents.ModelRef{ID: defaultModel, ProviderID: ProviderID}
	}
	for _, m := range msgs {
		raw := gjson.ParseBytes(m.Raw)
		switch m.Header.Type {
		case "agent-switched":
			agent = raw.Get("agent").String()
		case "user":
			// A notice a plugin posted with noReply and ignored parts is
			// shown, not answered: the steps after it answer the user
			// message before it.
			ignored := raw.Get("metadata.ignored").Bool()
			if !ignored {
				lastUser = m.Header.ID
			}
			u := map[string]any{"id": m.Header.ID, "sessionID": info.ID, "role": "user",
				"time": map[string]any{"created": raw.Get("time.created").Int()}, "agent": agent}
			u["model"] = userModel(model)
			part := map[string]any{"id": PartID(m.Header.ID, "u0"), "sessionID": info.ID,
				"messageID": m.Header.ID, "type": "text", "text": raw.Get("text").String()}
			if ignored {
				part["ignored"] = true
			}
			out = append(out, WithParts{Info: u, Parts: []map[string]any{part}})
		case "assistant":
			a := assistant(info.ID, m.Header.ID, lastUser, info.Location.Directory, root, raw)
			if mr := raw.Get("model"); mr.Exists() {
				model = &agents.ModelRef{ID: mr.Get("id").String(), ProviderID: mr.Get("providerID").String()}
			}
			out = append(out, WithParts{Info: a, Parts: assistantParts(info.ID, m.Header.ID, raw)})
		case "compaction":
			out = append(out, compaction(info.ID, m.Header.ID, agent, model, info.Location.Directory, root, raw)...)
		}
	}
	return out
}

// compaction is the v1 pair of messages of a stored compaction: the user
// message that asked for it and the assistant message with the summary
// (finished when the compaction completed, with its error when it
// failed, neither while it runs).
func compaction(sid, id, agent string, model *agents.ModelRef, cwd, root string, raw gjson.Result) []WithParts {
	if mr := raw.Get("model"); mr.Exists() {
		model = &agents.ModelRef{ID: mr.Get("id").String(), ProviderID: mr.Get("providerID").String()}
	}
	created, completed := raw.Get("time.created").Int(), raw.Get("time.completed").Int()
	user := WithParts{Info: map[string]any{"id": id, "sessionID": sid, "role": "user", "time": map[string]any{"created": created},
		"agent": agent, "model": userModel(model)}, Parts: []map[string]any{CompactionPart(sid, id, raw.Get("reason").String() == "auto")}}
	sum := SummaryID(id)
	a := summaryInfo(sid, id, model, cwd, root, created)
	var parts []map[string]any
	if text := raw.Get("summary").String(); text != "" {
		parts = append(parts, map[string]any{"id": PartID(sum, "t0"), "sessionID": sid, "messageID": sum, "type": "text", "text": text,
			"time": map[string]any{"start": created, "end": completed}})
	}
	switch raw.Get("status").String() {
	case "completed":
		a["finish"] = "stop"
	case "failed":
		a["error"] = errorOf(raw.Get("error"))
	}
	if completed != 0 {
		a["time"] = map[string]any{"created": created, "completed": completed}
		a["cost"], a["tokens"] = raw.Get("cost").Float(), tokensOf(raw.Get("tokens"))
	}
	if parts == nil {
		parts = []map[string]any{}
	}
	return []WithParts{user, {Info: a, Parts: parts}}
}

// CompactionPart is the compaction part of the user message that stands
// for a compaction.
func CompactionPart(sid, id string, auto bool) map[string]any {
	return map[string]any{"id": PartID(id, "k"), "sessionID": sid, "messageID": id, "type": "compaction", "auto": auto}
}

// summaryInfo is the AssistantMessage, still running, that carries the
// summary of the compaction id.
func summaryInfo(sid, id string, model *agents.ModelRef, cwd, root string, created int64) map[string]any {
	m := userModel(model)
	return map[string]any{"id": SummaryID(id), "sessionID": sid, "role": "assistant", "parentID": id, "mode": "compaction",
		"agent": "compaction", "summary": true, "path": map[string]any{"cwd": cwd, "root": root}, "modelID": m["modelID"],
		"providerID": m["providerID"], "cost": 0, "tokens": tokensOf(gjson.Result{}), "time": map[string]any{"created": created}}
}

// assistant is the v1 AssistantMessage of a stored step.
func assistant(sid, id, parent, cwd, root string, raw gjson.Result) map[string]any {
	agent := raw.Get("agent").String()
	if agent == "" {
		agent = "build"
	}
	a := map[string]any{"id": id, "sessionID": sid, "role": "assistant", "parentID": parent, "mode": agent, "agent": agent,
		"path": map[string]any{"cwd": cwd, "root": root}, "modelID": raw.Get("model.id").String(),
		"providerID": raw.Get("model.providerID").String(), "cost": raw.Get("cost").Float()}
	t := map[string]any{"created": raw.Get("time.created").Int()}
	if c := raw.Get("time.completed"); c.Exists() {
		t["completed"] = c.Int()
	}
	a["time"] = t
	a["tokens"] = tokensOf(raw.Get("tokens"))
	if f := raw.Get("finish"); f.Exists() {
		a["finish"] = f.String()
	}
	if e := raw.Get("error"); e.Exists() {
		a["error"] = errorOf(e)
	}
	return a
}

func tokensOf(t gjson.Result) map[string]any {
	return map[string]any{"input": t.Get("input").Float(), "output": t.Get("output").Float(), "reasoning": t.Get("reasoning").Float(),
		"cache": map[string]any{"read": t.Get("cache.read").Float(), "write": t.Get("cache.write").Float()}}
}

// errorOf is a v1 message error: {name, data: {message}}.
func errorOf(e gjson.Result) map[string]any {
	name := e.Get("type").String()
	if name == "" {
		name = "UnknownError"
	}
	return map[string]any{"name": name, "data": map[string]any{"message": e.Get("message").String()}}
}

func assistantParts(sid, id string, raw gjson.Result) []map[string]any {
	base := func(part, typ string) map[string]any {
		return map[string]any{"id": PartID(id, part), "sessionID": sid, "messageID": id, "type": typ}
	}
	created, completed := raw.Get("time.created").Int(), raw.Get("time.completed").Int()
	parts := []map[string]any{base("s", "step-start")}
	snap := raw.Get("snapshot")
	if v := snap.Get("start"); v.Exists() {
		parts[0]["snapshot"] = v.String()
	}
	for _, c := range raw.Get("content").Array() {
		switch c.Get("type").String() {
		case "text", "reasoning":
			kind := c.Get("type").String()
			p := base(kind[:1]+"0", kind)
			p["text"] = c.Get("text").String()
			p["time"] = map[string]any{"start": created, "end": completed}
			parts = append(parts, p)
		case "tool":
			parts = append(parts, ToolPart(sid, id, c))
		}
	}
	if f := raw.Get("finish"); f.Exists() {
		p := base("f", "step-finish")
		p["reason"] = f.String()
		p["cost"] = raw.Get("cost").Float()
		p["tokens"] = tokensOf(raw.Get("tokens"))
		if v := snap.Get("end"); v.Exists() {
			p["snapshot"] = v.String()
		}
		parts = append(parts, p)
	}
	if p := patchPart(sid, id, snap); p != nil {
		parts = append(parts, p)
	}
	return parts
}

// ToolPart is the v1 ToolPart of a stored tool part.
func ToolPart(sid, msgID string, c gjson.Result) map[string]any {
	callID := c.Get("id").String()
	state := map[string]any{"input": json.RawMessage(orEmpty(c.Get("state.input").Raw))}
	start := c.Get("time.ran").Int()
	if start == 0 {
		start = c.Get("time.created").Int()
	}
	end := c.Get("time.completed").Int()
	meta := json.RawMessage(orEmpty(c.Get("state.metadata").Raw))
	switch c.Get("state.status").String() {
	case "completed":
		var out strings.Builder
		for _, x := range c.Get("state.content").Array() {
			out.WriteString(x.Get("text").String())
		}
		state["status"], state["output"], state["metadata"] = "completed", out.String(), meta
		state["title"] = c.Get("state.metadata.title").String()
		state["time"] = map[string]any{"start": start, "end": end}
	case "error":
		if end == 0 {
			end = start
		}
		state["status"], state["error"], state["metadata"] = "error", c.Get("state.error.message").String(), meta
		state["time"] = map[string]any{"start": start, "end": end}
	default:
		state["status"], state["time"] = "running", map[string]any{"start": start}
		// What the tool said of itself so far (a plugin tool's metadata()).
		state["metadata"] = meta
		if t := c.Get("state.metadata.title"); t.Type == gjson.String {
			state["title"] = t.String()
		}
	}
	return map[string]any{"id": PartID(msgID, "c"+callID), "sessionID": sid, "messageID": msgID, "type": "tool",
		"callID": callID, "tool": c.Get("name").String(), "state": state}
}

func orEmpty(raw string) string {
	if raw == "" {
		return "{}"
	}
	return raw
}

// ProviderID is the provider id of the instance's models.
const ProviderID = "agentgate"

// userModel is a v1 user message's model: the given one, or the
// instance's provider with no model when none is known.
func userModel(m *agents.ModelRef) map[string]any {
	if m == nil || m.ID == "" {
		return map[string]any{"providerID": ProviderID, "modelID": ""}
	}
	provider := m.ProviderID
	if provider == "" {
		provider = ProviderID
	}
	return map[string]any{"providerID": provider, "modelID": m.ID}
}

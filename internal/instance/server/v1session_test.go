package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// v1Session makes a session over the v1 route and prompts it once per
// text (each prompt answered before the next); it returns the session's
// id and the v1 ids of the user messages.
func (h *drainHarness) v1Session(texts ...string) (string, []string) {
	h.t.Helper()
	r := h.send("POST", "/session?directory="+h.dir, map[string]any{"title": "original"})
	sid := gjson.GetBytes(r.body, "id").String()
	if r.status != 200 || sid == "" {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var users []string
	for _, text := range texts {
		r := h.send("POST", "/session/"+sid+"/message", map[string]any{"parts": []any{map[string]any{"type": "text", "text": text}}})
		if r.status != 200 {
			h.t.Fatalf("prompt: %d %s", r.status, r.body)
		}
		users = append(users, gjson.GetBytes(r.body, "info.parentID").String())
	}
	return sid, users
}

// v1Messages is a session's v1 messages.
func (h *drainHarness) v1Messages(sid string) gjson.Result {
	h.t.Helper()
	r := h.get("/session/" + sid + "/message")
	if r.status != 200 {
		h.t.Fatalf("messages: %d %s", r.status, r.body)
	}
	return gjson.ParseBytes(r.body)
}

// The TUI's /rename is PATCH /session/{id} {title}; deleting from its
// /sessions list is DELETE /session/{id}.
func TestV1RenameDelete(t *testing.T) {
	h := newDrainHarness(t)
	sid, _ := h.v1Session()
	r := h.send("PATCH", "/session/"+sid, map[string]any{"title": "Renamed"})
	if r.status != 200 || gjson.GetBytes(r.body, "title").String() != "Renamed" || gjson.GetBytes(r.body, "id").String() != sid {
		t.Fatalf("rename: %d %s", r.status, r.body)
	}
	if info, _ := h.getSession(sid); info.Title != "Renamed" {
		t.Fatalf("the stored title: %q", info.Title)
	}
	wantError(t, h.send("PATCH", "/session/ses_0123456789abcdefghijklmnop", map[string]any{"title": "x"}), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("PATCH", "/session/"+sid, map[string]any{}), 400, "InvalidRequestError", map[string]any{"field": "title"})
	wantError(t, h.send("PATCH", "/session/"+sid, map[string]any{"title": "x", "time": map[string]any{"archived": 1}}), 400, "InvalidRequestError", nil)
	wantError(t, h.do("PATCH", "/session/"+sid, strings.NewReader(`{"title":`), "Content-Type", "application/json"), 400, "InvalidRequestError", nil)
	wantError(t, h.send("PATCH", "/session/not a session", map[string]any{"title": "x"}), 400, "InvalidRequestError", nil)

	if r := h.do("DELETE", "/session/"+sid, nil); r.status != 200 || strings.TrimSpace(string(r.body)) != "true" {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantError(t, h.get("/session/"+sid), 404, "SessionNotFoundError", nil)
	wantError(t, h.do("DELETE", "/session/"+sid, nil), 404, "SessionNotFoundError", nil)
}

// /fork is POST /session/{id}/fork {messageID?}: a new root session (the
// TUI lists and opens it) titled "<title> (fork #n)" holding the messages
// before messageID, or all of them; forking at the first message gives an
// empty session.
func TestV1Fork(t *testing.T) {
	h := newDrainHarness(t)
	sid, users := h.v1Session("first", "second")
	r := h.send("POST", "/session/"+sid+"/fork", map[string]any{"messageID": users[1]})
	fork := gjson.ParseBytes(r.body)
	if r.status != 200 || fork.Get("id").String() == sid || fork.Get("parentID").Exists() || fork.Get("title").String() != "original (fork #1)" ||
		fork.Get("directory").String() != h.dir {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	msgs := h.v1Messages(fork.Get("id").String())
	if msgs.Get("#").Int() != 2 || msgs.Get("0.parts.0.text").String() != "first" || msgs.Get("1.info.role").String() != "assistant" {
		t.Fatalf("the fork's messages: %s", msgs.Raw)
	}
	if l := h.get("/session?directory=" + h.dir); !strings.Contains(string(l.body), fork.Get("id").String()) {
		t.Fatalf("the fork is not listed with the root sessions: %s", l.body)
	}
	// The whole session (no body), and the fork's own fork.
	r = h.do("POST", "/session/"+sid+"/fork", nil)
	if all := h.v1Messages(gjson.GetBytes(r.body, "id").String()); r.status != 200 || all.Get("#").Int() != 4 {
		t.Fatalf("full fork: %d %s / %s", r.status, r.body, all.Raw)
	}
	r = h.send("POST", "/session/"+fork.Get("id").String()+"/fork", map[string]any{})
	if gjson.GetBytes(r.body, "title").String() != "original (fork #2)" {
		t.Fatalf("fork of a fork: %s", r.body)
	}
	// At the first message: an empty session.
	r = h.send("POST", "/session/"+sid+"/fork", map[string]any{"messageID": users[0]})
	if empty := h.v1Messages(gjson.GetBytes(r.body, "id").String()); r.status != 200 || empty.Get("#").Int() != 0 {
		t.Fatalf("fork at the first message: %d %s / %s", r.status, r.body, empty.Raw)
	}

	other, otherUsers := h.v1Session("elsewhere")
	wantError(t, h.send("POST", "/session/"+sid+"/fork", map[string]any{"messageID": otherUsers[0]}), 404, "MessageNotFoundError",
		map[string]any{"messageID": otherUsers[0]})
	wantError(t, h.send("POST", "/session/ses_0123456789abcdefghijklmnop/fork", map[string]any{}), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/session/"+sid+"/fork", map[string]any{"messageID": "not an id"}), 400, "InvalidRequestError", nil)
	wantError(t, h.send("POST", "/session/"+sid+"/fork", map[string]any{"messageID": 3}), 400, "InvalidRequestError", nil)
	wantError(t, h.do("POST", "/session/"+other+"/fork", strings.NewReader(`[`), "Content-Type", "application/json"), 400, "InvalidRequestError", nil)
}

// /compact is POST /session/{id}/summarize {providerID, modelID}: the
// session compacts with that model, answered true once done; the v1
// messages show it as the released server records one.
func TestV1Summarize(t *testing.T) {
	h := newDrainHarness(t)
	sid, _ := h.v1Session("hello")
	r := h.send("POST", "/session/"+sid+"/summarize", map[string]any{"providerID": "agentgate", "modelID": "fake-model"})
	if r.status != 200 || strings.TrimSpace(string(r.body)) != "true" {
		t.Fatalf("summarize: %d %s", r.status, r.body)
	}
	var compaction map[string]any
	for _, m := range h.messages(sid) {
		if m["type"] == "compaction" {
			compaction = m
		}
	}
	if compaction == nil || compaction["status"] != "completed" || compaction["reason"] != "manual" || compaction["summary"] != fakeprovider.Text {
		t.Fatalf("no completed compaction: %v", h.messages(sid))
	}
	msgs := h.v1Messages(sid)
	if msgs.Get("#").Int() != 4 || msgs.Get("2.parts.0.type").String() != "compaction" || !msgs.Get("3.info.summary").Bool() ||
		msgs.Get("3.parts.0.text").String() != fakeprovider.Text {
		t.Fatalf("v1 messages: %s", msgs.Raw)
	}
	// The web app's page shows the same compaction.
	if p := h.get("/ui/session/" + sid); p.status != 200 || !strings.Contains(string(p.body), "Conversation compacted (manual)") {
		t.Fatalf("the web app's page: %d %s", p.status, p.body)
	}

	wantError(t, h.send("POST", "/session/"+sid+"/summarize", map[string]any{"providerID": "agentgate"}), 400, "InvalidRequestError", nil)
	wantError(t, h.send("POST", "/session/"+sid+"/summarize", map[string]any{"providerID": "openai", "modelID": "fake-model"}), 400,
		"InvalidRequestError", map[string]any{"field": "providerID"})
	wantError(t, h.send("POST", "/session/"+sid+"/summarize", map[string]any{"providerID": "agentgate", "modelID": "nope"}), 400,
		"InvalidRequestError", map[string]any{"field": "modelID"})
	wantError(t, h.send("POST", "/session/ses_0123456789abcdefghijklmnop/summarize", map[string]any{"providerID": "agentgate", "modelID": "fake-model"}),
		404, "SessionNotFoundError", nil)
	wantError(t, h.do("POST", "/session/"+sid+"/summarize", strings.NewReader(`"x"`), "Content-Type", "application/json"), 400, "InvalidRequestError", nil)
	if strings.Count(mustJSON(t, h.messages(sid)), `"type":"compaction"`) != 1 {
		t.Fatalf("a refused summarize compacted: %v", h.messages(sid))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// /init and the project's commands: GET /command lists the built-in init
// (with the placeholders it takes) before the project's; POST
// /session/{id}/command runs one with its arguments, POST
// /session/{id}/init runs init, whose prompt has the agent write
// AGENTS.md through the agent loop.
func TestV1CommandAndInit(t *testing.T) {
	h := newDrainHarness(t)
	if err := os.MkdirAll(filepath.Join(h.dir, ".opencode", "command"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, ".opencode", "command", "hello.md"), []byte("---\ndescription: Say hello\n---\nSay hello to $1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmds := gjson.ParseBytes(h.get("/command?directory=" + h.dir).body)
	if cmds.Get("#").Int() != 2 || cmds.Get("0.name").String() != "init" || !strings.Contains(cmds.Get("0.template").String(), "AGENTS.md") ||
		cmds.Get("0.hints.0").String() != "$ARGUMENTS" || cmds.Get("1.name").String() != "hello" || cmds.Get("1.hints.0").String() != "$1" {
		t.Fatalf("commands: %s", cmds.Raw)
	}
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	h.fake.SetBehavior(fakeprovider.Behavior{Script: func(body []byte) fakeprovider.Step {
		if strings.Contains(string(body), "Create or update AGENTS.md") && !strings.Contains(string(body), "call_init") {
			return fakeprovider.Step{Calls: []fakeprovider.Call{{ID: "call_init", Name: "write",
				Args: args(map[string]any{"filePath": "AGENTS.md", "content": "# Agents\n"})}}}
		}
		return fakeprovider.Step{Text: "done"}
	}})
	sid, _ := h.v1Session()
	r := h.send("POST", "/session/"+sid+"/command", map[string]any{"command": "hello", "arguments": "Ann Lee", "agent": "build",
		"model": "agentgate/fake-model", "parts": []any{}})
	if r.status != 200 || gjson.GetBytes(r.body, "info.role").String() != "assistant" || gjson.GetBytes(r.body, `parts.#(type=="text").text`).String() != "done" {
		t.Fatalf("command: %d %s", r.status, r.body)
	}
	if msgs := h.v1Messages(sid); msgs.Get("0.parts.0.text").String() != "Say hello to Ann Lee" {
		t.Fatalf("the command's prompt: %s", msgs.Raw)
	}
	r = h.send("POST", "/session/"+sid+"/init", map[string]any{"providerID": "agentgate", "modelID": "fake-model", "messageID": "msg_0123456789abcdefghijklmnop"})
	if r.status != 200 || strings.TrimSpace(string(r.body)) != "true" {
		t.Fatalf("init: %d %s", r.status, r.body)
	}
	if b, err := os.ReadFile(filepath.Join(h.dir, "AGENTS.md")); err != nil || string(b) != "# Agents\n" {
		t.Fatalf("AGENTS.md: %q %v", b, err)
	}
	msgs := h.v1Messages(sid)
	if u := msgs.Get(`#(info.id=="msg_0123456789abcdefghijklmnop")`); !strings.Contains(u.Get("parts.0.text").String(), "AGENTS.md at the root of this project ("+h.dir+")") {
		t.Fatalf("init's prompt: %s", msgs.Raw)
	}
	// /init through the command route works too (the TUI's way).
	r = h.send("POST", "/session/"+sid+"/command", map[string]any{"command": "init", "arguments": ""})
	if r.status != 200 {
		t.Fatalf("init command: %d %s", r.status, r.body)
	}

	wantError(t, h.send("POST", "/session/"+sid+"/command", map[string]any{"command": "nope", "arguments": ""}), 404, "CommandNotFoundError",
		map[string]any{"command": "nope"})
	wantError(t, h.send("POST", "/session/"+sid+"/command", map[string]any{"arguments": ""}), 400, "InvalidRequestError", map[string]any{"field": "command"})
	wantError(t, h.send("POST", "/session/"+sid+"/command", map[string]any{"command": "hello", "model": "fake-model"}), 400, "InvalidRequestError",
		map[string]any{"field": "model"})
	wantError(t, h.send("POST", "/session/"+sid+"/command", map[string]any{"command": "hello", "parts": []any{map[string]any{"type": "text", "text": "x"}}}),
		400, "InvalidRequestError", map[string]any{"field": "parts"})
	wantError(t, h.send("POST", "/session/ses_0123456789abcdefghijklmnop/command", map[string]any{"command": "hello"}), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/session/"+sid+"/init", map[string]any{"modelID": "fake-model"}), 400, "InvalidRequestError", nil)
	wantError(t, h.send("POST", "/session/ses_0123456789abcdefghijklmnop/init", map[string]any{"providerID": "agentgate", "modelID": "fake-model"}),
		404, "SessionNotFoundError", nil)
	wantError(t, h.do("POST", "/session/"+sid+"/init", strings.NewReader(`{`), "Content-Type", "application/json"), 400, "InvalidRequestError", nil)
}

// /share is POST /session/{id}/share: the session's share.url becomes its
// page in this instance's web app (no share service of the vendor's);
// /unshare (DELETE) removes it. Both show in the v1 and v2 records.
func TestV1ShareUnshare(t *testing.T) {
	h := newDrainHarness(t)
	sid, _ := h.v1Session()
	r := h.do("POST", "/session/"+sid+"/share", nil)
	want := h.ts.URL + "/ui/session/" + sid
	if r.status != 200 || gjson.GetBytes(r.body, "share.url").String() != want {
		t.Fatalf("share: %d %s (want %s)", r.status, r.body, want)
	}
	if g := h.get("/session/" + sid); gjson.GetBytes(g.body, "share.url").String() != want {
		t.Fatalf("v1 session: %s", g.body)
	}
	if g := h.get("/api/session/" + sid); gjson.GetBytes(g.body, "data.share.url").String() != want {
		t.Fatalf("v2 session: %s", g.body)
	}
	// The link opens the session's page for a client that signs in.
	if p := h.get("/ui/session/" + sid); p.status != 200 || !strings.Contains(string(p.body), sid) {
		t.Fatalf("the shared page: %d", p.status)
	}
	// An export carries the link; an import (here or elsewhere) drops it.
	tr, _ := h.export(sid, "")
	doc := map[string]any{"info": tr.Data.Info, "messages": tr.Data.Messages}
	doc["info"].(map[string]any)["id"] = "ses_0123456789abcdefghijklmnoq"
	if r := h.send("POST", "/api/experimental/session/import", doc); r.status != 200 || gjson.GetBytes(r.body, "data.share").Exists() {
		t.Fatalf("import of a shared session: %d %s", r.status, r.body)
	}
	r = h.do("DELETE", "/session/"+sid+"/share", nil)
	if r.status != 200 || gjson.GetBytes(r.body, "share").Exists() || gjson.GetBytes(h.get("/session/"+sid).body, "share").Exists() {
		t.Fatalf("unshare: %d %s", r.status, r.body)
	}
	wantError(t, h.do("POST", "/session/ses_0123456789abcdefghijklmnop/share", nil), 404, "SessionNotFoundError", nil)
	wantError(t, h.do("DELETE", "/session/ses_0123456789abcdefghijklmnop/share", nil), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/session/"+sid+"/share", map[string]any{"public": true}), 400, "InvalidRequestError", nil)
}

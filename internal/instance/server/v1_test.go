package server

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// The v1 routes the released CLI's run --attach uses, over the same
// sessions: create with v1 permission rules, the config (no endpoint or
// key), a blocking prompt answered with the assistant step and its parts,
// the v1 event stream of the directory, and the messages.
func TestV1RunAttachRoutes(t *testing.T) {
	h := newDrainHarness(t)
	r := h.do("POST", "/session?directory="+h.dir, strings.NewReader(`{"permission":[{"permission":"question","action":"deny","pattern":"*"}]}`),
		"Content-Type", "application/json")
	sess := gjson.ParseBytes(r.body)
	sid := sess.Get("id").String()
	if r.status != 200 || sess.Get("directory").String() != h.dir || sess.Get("permission.0.action").String() != "deny" || sess.Get("version").String() == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if info, _ := h.getSession(sid); len(info.Permissions) != 1 || info.Permissions[0].Action != "question" || info.Permissions[0].Effect != "deny" {
		t.Fatalf("the rules: %+v", info.Permissions)
	}
	cfg := h.get("/config?directory=" + h.dir)
	if gjson.GetBytes(cfg.body, "model").String() != "agentgate/fake-model" || !gjson.GetBytes(cfg.body, "provider.agentgate.models.fake-model").Exists() ||
		strings.Contains(string(cfg.body), fakeKey) || strings.Contains(string(cfg.body), h.fake.URL) {
		t.Fatalf("config: %s", cfg.body)
	}
	ev := h.streamAt(t, "/event?directory="+h.dir)
	if e := ev.event(t); e.Get("type").String() != "server.connected" || !e.Get("properties").Exists() || e.idLine != "" {
		t.Fatalf("connected: %s", e.Raw)
	}
	r = h.send("POST", "/session/"+sid+"/message", map[string]any{"parts": []any{map[string]any{"type": "text", "text": "hello"}}})
	ans := gjson.ParseBytes(r.body)
	if r.status != 200 || ans.Get("info.role").String() != "assistant" || ans.Get("info.finish").String() != "stop" ||
		ans.Get(`parts.#(type=="text").text`).String() != fakeprovider.Text || ans.Get("info.parentID").String() == "" {
		t.Fatalf("message: %d %s", r.status, r.body)
	}
	// The stream carried the answer in v1 records, ending idle.
	var types []string
	closedText := false
	for {
		e := ev.event(t)
		types = append(types, e.Get("type").String())
		if e.Get("type").String() == "session.idle" {
			break
		}
		if e.Get("type").String() == "message.part.updated" && e.Get("properties.part.type").String() == "text" &&
			e.Get("properties.part.time.end").Exists() {
			if e.Get("properties.part.text").String() != fakeprovider.Text {
				t.Fatalf("text part: %s", e.Raw)
			}
			closedText = true
		}
	}
	if !closedText {
		t.Fatalf("no closed text part on the stream: %v", types)
	}
	joined := strings.Join(types, " ")
	for _, want := range []string{"message.updated", "message.part.updated", "message.part.delta", "session.status"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("the stream lacks %s: %v", want, types)
		}
	}
	msgs := gjson.ParseBytes(h.get("/session/" + sid + "/message").body)
	if msgs.Get("#").Int() != 2 || msgs.Get("0.info.role").String() != "user" || msgs.Get("1.parts.#").Int() < 3 {
		t.Fatalf("messages: %s", msgs.Raw)
	}
	if r := h.get("/session/" + sid); gjson.GetBytes(r.body, "id").String() != sid {
		t.Fatalf("get: %s", r.body)
	}
	if r := h.get("/session?directory=" + h.dir); gjson.GetBytes(r.body, "#").Int() != 1 {
		t.Fatalf("list: %s", r.body)
	}
	wantError(t, h.get("/session/ses_none"), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/session/"+sid+"/message", map[string]any{"parts": []any{}}), 400, "InvalidRequestError", nil)
	wantError(t, h.send("POST", "/session/"+sid+"/message", map[string]any{"parts": []any{map[string]any{"type": "agent", "name": "x"}}}),
		400, "InvalidRequestError", nil)
	// Another directory's stream does not see this session's events.
	other := canonicalTempDir(t)
	h.send("POST", "/api/location/reload", nil)
	oth := h.streamAt(t, "/event?directory="+other)
	oth.event(t)
	h.send("POST", "/session/"+sid+"/message", map[string]any{"parts": []any{map[string]any{"type": "text", "text": "again"}}})
	h.send("POST", "/api/session/"+sid+"/wait", nil)
	h.srv.Bus().Flush()
	for {
		select {
		case f := <-oth.frames:
			t.Fatalf("another directory's stream got %s", f)
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
}

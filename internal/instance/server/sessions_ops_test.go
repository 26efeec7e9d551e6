package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/store"
)

type transfer struct {
	Data struct {
		Info     map[string]any   `json:"info"`
		Messages []map[string]any `json:"messages"`
	} `json:"data"`
}

func (h *srvHarness) export(id, q string) (transfer, reply) {
	h.t.Helper()
	r := h.get("/api/experimental/session/" + id + "/export" + q)
	var tr transfer
	if r.status == 200 {
		if err := json.Unmarshal(r.body, &tr); err != nil {
			h.t.Fatal(err)
		}
	}
	return tr, r
}

func TestSessionForkSwitchMove(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(map[string]any{"title": "src", "metadata": map[string]any{"a": 1}})
	wantError(t, h.send("POST", "/api/session/"+s.ID+"/fork", map[string]any{}), 400, "InvalidRequestError", map[string]any{"kind": "empty_session"})
	for _, a := range []string{"plan", "build"} {
		if r := h.send("POST", "/api/session/"+s.ID+"/agent", map[string]any{"agent": a}); r.status != 204 {
			t.Fatalf("agent %d %s", r.status, r.body)
		}
	}
	if r := h.send("POST", "/api/session/"+s.ID+"/model", map[string]any{"model": map[string]any{"id": "m", "providerID": "p", "variant": "high"}}); r.status != 204 {
		t.Fatalf("model %d %s", r.status, r.body)
	}
	got, _ := h.getSession(s.ID)
	if got.Agent != "build" || got.Model == nil || got.Model.Variant != "high" {
		t.Fatalf("%+v", got)
	}
	tr, _ := h.export(s.ID, "")
	if len(tr.Data.Messages) != 3 || tr.Data.Messages[1]["type"] != "agent-switched" || tr.Data.Messages[1]["previous"] != "plan" ||
		tr.Data.Messages[2]["type"] != "model-switched" {
		t.Fatalf("messages %v", tr.Data.Messages)
	}
	second := tr.Data.Messages[1]["id"].(string)

	// fork before the second message copies one
	r := h.send("POST", "/api/session/"+s.ID+"/fork", map[string]any{"before": second})
	var f struct{ Data session.Info }
	json.Unmarshal(r.body, &f)
	if r.status != 200 || f.Data.ParentID != s.ID || f.Data.Fork == nil || f.Data.Fork.Boundary.Type != "before" ||
		f.Data.Fork.Boundary.MessageID != second || string(f.Data.Metadata["a"]) != "1" {
		t.Fatalf("fork %d %s", r.status, r.body)
	}
	ftr, _ := h.export(f.Data.ID, "")
	if len(ftr.Data.Messages) != 1 || ftr.Data.Messages[0]["agent"] != "plan" || ftr.Data.Messages[0]["id"] == tr.Data.Messages[0]["id"] {
		t.Fatalf("fork messages %v", ftr.Data.Messages)
	}
	// full copy, older body field
	r = h.send("POST", "/api/session/"+s.ID+"/fork", map[string]any{})
	json.Unmarshal(r.body, &f)
	if full, _ := h.export(f.Data.ID, ""); len(full.Data.Messages) != 3 || f.Data.Fork.Boundary.Type != "through" {
		t.Fatalf("full fork %s", r.body)
	}
	wantError(t, h.send("POST", "/api/session/"+s.ID+"/fork", map[string]any{"messageID": "msg_unknown"}), 404, "MessageNotFoundError",
		map[string]any{"messageID": "msg_unknown", "sessionID": s.ID})
	wantError(t, h.send("POST", "/api/session/ses_gone/fork", map[string]any{}), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/api/session/ses_gone/agent", map[string]any{"agent": "x"}), 404, "SessionNotFoundError", nil)

	// move: validated, applied and recorded when idle
	sub := filepath.Join(h.dir, "pkg")
	os.Mkdir(sub, 0o755)
	os.Mkdir(filepath.Join(h.dir, ".git"), 0o755)
	os.WriteFile(filepath.Join(h.dir, "file"), nil, 0o644)
	wantError(t, h.send("POST", "/api/session/"+s.ID+"/move", map[string]any{"directory": filepath.Join(h.dir, "file")}), 400, "InvalidRequestError",
		map[string]any{"message": "Not a directory: " + filepath.Join(h.dir, "file")})
	wantError(t, h.send("POST", "/api/session/"+s.ID+"/move", map[string]any{"directory": "/nonexistent-dir"}), 400, "InvalidRequestError",
		map[string]any{"message": "Directory does not exist: /nonexistent-dir"})
	if r := h.send("POST", "/api/session/"+s.ID+"/move", map[string]any{"directory": sub, "delivery": "queue"}); r.status != 204 {
		t.Fatalf("move %d %s", r.status, r.body)
	}
	got, _ = h.getSession(s.ID)
	if got.Location.Directory != sub || got.Subpath != "pkg" {
		t.Fatalf("moved %+v", got)
	}
	tr, _ = h.export(s.ID, "")
	last := tr.Data.Messages[len(tr.Data.Messages)-1]
	if last["type"] != "location-switched" || last["location"].(map[string]any)["directory"] != sub {
		t.Fatalf("location-switched %v", last)
	}
	// while a drain runs the move waits in the inbox
	h.loop.active[s.ID] = true
	h.send("POST", "/api/session/"+s.ID+"/move", map[string]any{"directory": h.dir})
	if got, _ = h.getSession(s.ID); got.Location.Directory != sub {
		t.Fatal("move applied during a drain")
	}
	n := 0
	h.store().View(context.Background(), func(tx store.Tx) error {
		return tx.SessionItems("default", s.ID, store.ItemInbox, func(raw []byte) (bool, error) {
			if strings.Contains(string(raw), `"type":"move"`) {
				n++
			}
			return true, nil
		})
	})
	if n != 1 {
		t.Fatalf("%d move items", n)
	}
}

func TestSessionImportExportRoundTrip(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(map[string]any{"title": "secret plan", "metadata": map[string]any{"k": "v"}})
	h.send("POST", "/api/session/"+s.ID+"/agent", map[string]any{"agent": "build"})
	doc := map[string]any{"info": map[string]any{"id": "ses_imported", "projectID": "x", "title": "Imported", "cost": 1.5,
		"tokens": map[string]any{"input": 10, "output": 20, "reasoning": 0, "cache": map[string]any{"read": 1, "write": 2}},
		"time":   map[string]any{"created": 1000, "updated": 2000}, "location": map[string]any{"directory": "/x"}},
		"messages": []any{
			map[string]any{"id": "msg_1", "type": "user", "text": "do the thing", "time": map[string]any{"created": 1000},
				"files": []any{map[string]any{"data": "aGk=", "mime": "text/plain", "source": map[string]any{"type": "uri", "uri": "file:///x/a"}, "name": "a"}}},
			map[string]any{"id": "msg_2", "type": "assistant", "agent": "build", "model": map[string]any{"id": "m", "providerID": "p"},
				"content": []any{map[string]any{"type": "text", "text": "done"},
					map[string]any{"type": "tool", "id": "t1", "name": "bash", "state": map[string]any{"status": "completed", "input": map[string]any{"cmd": "ls"},
						"content": []any{map[string]any{"type": "text", "text": "out"}}}, "time": map[string]any{"created": 1001}}},
				"cost": 1.5, "time": map[string]any{"created": 1001, "completed": 1002}},
			map[string]any{"id": "msg_3", "type": "assistant", "agent": "build", "model": map[string]any{"id": "m", "providerID": "p"},
				"content": []any{}, "time": map[string]any{"created": 1003}}, // unsettled: dropped
		}}
	r := h.send("POST", "/api/experimental/session/import", doc)
	if r.status != 200 {
		t.Fatalf("import %d %s", r.status, r.body)
	}
	wantError(t, h.send("POST", "/api/experimental/session/import", doc), 409, "ConflictError",
		map[string]any{"message": "Session already exists: ses_imported", "resource": "ses_imported"})
	orphan := map[string]any{"info": map[string]any{"id": "ses_orphan", "parentID": "ses_nobody", "projectID": "x", "cost": 0,
		"tokens": map[string]any{"input": 0, "output": 0, "reasoning": 0, "cache": map[string]any{"read": 0, "write": 0}},
		"time":   map[string]any{"created": 1, "updated": 1}, "location": map[string]any{"directory": "/x"}}, "messages": []any{}}
	wantError(t, h.send("POST", "/api/experimental/session/import", orphan), 404, "SessionNotFoundError", nil)
	// duplicates and disorder
	bad := func(msgs ...any) map[string]any {
		d := map[string]any{"info": orphan["info"], "messages": msgs}
		d["info"].(map[string]any)["parentID"] = nil
		return d
	}
	m1 := map[string]any{"id": "msg_a", "type": "system", "text": "x", "time": map[string]any{"created": 5}}
	m0 := map[string]any{"id": "msg_b", "type": "system", "text": "x", "time": map[string]any{"created": 4}}
	wantError(t, h.send("POST", "/api/experimental/session/import", bad(m1, m1)), 400, "InvalidRequestError", map[string]any{"field": "messages"})
	wantError(t, h.send("POST", "/api/experimental/session/import", bad(m1, m0)), 400, "InvalidRequestError", map[string]any{"field": "messages"})
	wantError(t, h.send("POST", "/api/experimental/session/import", bad(map[string]any{"id": "x", "type": "system", "time": map[string]any{"created": 1}})), 400, "InvalidRequestError", nil)
	if _, r := h.getSession("ses_orphan"); r.status != 404 {
		t.Fatal("failed import left a session")
	}

	for _, q := range []string{"", "?sanitize=false", "?sanitize=true"} {
		for _, id := range []string{s.ID, "ses_imported"} {
			first, r := h.export(id, q)
			if r.status != 200 {
				t.Fatalf("export %d %s", r.status, r.body)
			}
			// into a fresh instance (own store), then export again
			h2 := newSessHarness(t, func(o *Options) { o.Clock = h.clk; o.DefaultDirectory = h.dir })
			body := map[string]any{"info": first.Data.Info, "messages": first.Data.Messages, "location": map[string]any{"directory": h.dir}}
			if r := h2.send("POST", "/api/experimental/session/import", body); r.status != 200 {
				t.Fatalf("re-import %s %d %s", q, r.status, r.body)
			}
			second, _ := h2.export(id, q)
			a, _ := json.Marshal(first.Data)
			b, _ := json.Marshal(second.Data)
			if q != "?sanitize=true" {
				a = []byte(strings.ReplaceAll(string(a), `"updated":2000`, fmt.Sprintf(`"updated":%d`, h.clk.Now().UnixMilli())))
			}
			if string(a) != string(b) {
				t.Fatalf("round trip %s differs:\n%s\n%s", q, a, b)
			}
		}
	}
	san, _ := h.export("ses_imported", "?sanitize=true")
	raw, _ := json.Marshal(san.Data)
	for _, leak := range []string{"do the thing", "Imported", "aGk=", "ls", `"out"`, `"done"`, h.dir, "file:///x/a"} {
		if strings.Contains(string(raw), leak) {
			t.Fatalf("sanitized export leaks %q: %s", leak, raw)
		}
	}
	for _, kept := range []string{"msg_1", `"cost":1.5`, `"input":10`, `"name":"bash"`, `"created":1001`, "[redacted:text:msg_1]"} {
		if !strings.Contains(string(raw), kept) {
			t.Fatalf("sanitized export lost %q: %s", kept, raw)
		}
	}
	san2, _ := h.export(s.ID, "?sanitize=true")
	if san2.Data.Info["title"] != "[redacted:session-title:"+s.ID+"]" || san2.Data.Info["metadata"].(map[string]any)["redacted"] == nil {
		t.Fatalf("%v", san2.Data.Info)
	}
	wantError(t, h.get("/api/experimental/session/ses_nope/export"), 404, "SessionNotFoundError", nil)
}

func TestSessionExportUndecodableMessage(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	h.store().Update(context.Background(), func(tx store.Tx) error {
		return tx.AppendSessionItem("default", s.ID, store.ItemMessage, "msg_broken", []byte("{not json"))
	})
	m := wantError(t, h.get("/api/experimental/session/"+s.ID+"/export"), 500, "UnknownError", nil)
	if ref, _ := m["ref"].(string); !strings.HasPrefix(ref, "err_") || strings.Contains(string(fmt.Sprint(m)), "not json") {
		t.Fatalf("%v", m)
	}
	if _, r := h.getSession(s.ID); r.status != 200 {
		t.Fatal("server unhappy after a bad message")
	}
	if l := h.list(""); len(l.Data) != 1 {
		t.Fatal(l)
	}
}

func TestSessionsScopedPerInstance(t *testing.T) {
	h := newSessHarness(t, nil)
	other := New(Options{Auth: h.opts.Auth, DefaultDirectory: h.dir, Clock: h.clk, Instance: "other",
		Store: h.opts.Store})
	s := h.createSession(nil)
	var found int
	st := h.store()
	st.View(context.Background(), func(tx store.Tx) error {
		return tx.ListInstanceSessions(other.Sessions().InstanceName(), store.SessionScan{}, func(*store.InstanceSession) (bool, error) { found++; return true, nil })
	})
	if found != 0 {
		t.Fatal("instance other sees the default instance's sessions")
	}
	_ = s
}

func TestSessionStats(t *testing.T) {
	h := newSessHarness(t, nil)
	msgs := []any{
		map[string]any{"id": "msg_1", "type": "user", "text": "x", "time": map[string]any{"created": 1000}},
		map[string]any{"id": "msg_2", "type": "assistant", "agent": "build", "model": map[string]any{"id": "m", "providerID": "p"},
			"content": []any{map[string]any{"type": "tool", "id": "t", "name": "bash", "state": map[string]any{"status": "completed"}},
				map[string]any{"type": "tool", "id": "u", "name": "read", "state": map[string]any{"status": "error"}}},
			"cost": 0.5, "tokens": map[string]any{"input": 3, "output": 4, "reasoning": 0, "cache": map[string]any{"read": 0, "write": 0}},
			"time": map[string]any{"created": 86_400_000 + 1000, "completed": 86_400_000 + 2000}},
	}
	info := map[string]any{"id": "ses_s", "projectID": "x", "cost": 0.5,
		"tokens": map[string]any{"input": 0, "output": 0, "reasoning": 0, "cache": map[string]any{"read": 0, "write": 0}},
		"time":   map[string]any{"created": 1000, "updated": 1000}, "location": map[string]any{"directory": "/x"}}
	if r := h.send("POST", "/api/experimental/session/import", map[string]any{"info": info, "messages": msgs}); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r := h.get("/api/experimental/session/stats?from=0&to=200000000&tools=detail&timezone=America/New_York")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	d := r.json(t)["data"].(map[string]any)
	tools := d["tools"].(map[string]any)
	if d["sessions"] != 1.0 || d["prompts"] != 1.0 || d["steps"] != 1.0 || d["cost"] != 0.5 || tools["mode"] != "detail" ||
		tools["totals"].(map[string]any)["failed"] != 1.0 || len(tools["usage"].([]any)) != 2 ||
		d["activity"].([]any)[0].(map[string]any)["date"] != "1970-01-01" || d["activeDays"] != 1.0 || len(d["models"].([]any)) != 1 {
		t.Fatalf("%s", r.body)
	}
	wantError(t, h.get("/api/experimental/session/stats?timezone=Mars/Base"), 400, "InvalidRequestError", map[string]any{"message": "Invalid time zone: Mars/Base"})
	wantError(t, h.get("/api/experimental/session/stats?from=10&to=5"), 400, "InvalidRequestError", map[string]any{"message": "Stats range must end after it starts"})
	wantError(t, h.get("/api/experimental/session/stats?tools=all"), 400, "InvalidRequestError", nil)
}

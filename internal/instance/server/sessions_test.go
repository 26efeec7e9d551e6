package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/store"
)

type sessHarness struct {
	*srvHarness
	dataDir string
	loop    *fakeLoop
	mu      sync.Mutex
	st      store.Store
}

func openTestStore(t testing.TB, dir string) store.Store {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newSessHarness(t testing.TB, mod func(o *Options)) *sessHarness {
	t.Helper()
	sh := &sessHarness{dataDir: t.TempDir(), loop: &fakeLoop{active: map[string]bool{}}}
	sh.st = openTestStore(t, sh.dataDir)
	t.Cleanup(func() { sh.store().Close() })
	sh.srvHarness = newSrvHarness(t, func(o *Options) {
		o.Store = func(context.Context) (store.Store, error) { return sh.store(), nil }
		o.Runner = sh.loop
		if mod != nil {
			mod(o)
		}
	})
	return sh
}

// fakeLoop stands in for the agent loop: it records wakes, reports the
// sessions a test marks active, and runs onSchedule on a wake (which
// comes after the prompt is committed, before it is answered).
type fakeLoop struct {
	mu         sync.Mutex
	scheduled  []string
	active     map[string]bool // set by the test before requests
	onSchedule func()
}

func (f *fakeLoop) Attach(*session.Service) {}

func (f *fakeLoop) Schedule(sid string) {
	f.mu.Lock()
	f.scheduled = append(f.scheduled, sid)
	f.mu.Unlock()
	if f.onSchedule != nil {
		f.onSchedule()
	}
}

func (f *fakeLoop) Scheduled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.scheduled...)
}

func (f *fakeLoop) Interrupt(string) bool { return false }

func (f *fakeLoop) Active() []string {
	var out []string
	for id := range f.active {
		out = append(out, id)
	}
	return out
}

func (f *fakeLoop) IsActive(sid string) bool { return f.active[sid] }

func (f *fakeLoop) Wait(context.Context, string) error { return nil }

func (sh *sessHarness) store() store.Store {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.st
}

// restart closes and reopens the store (a process restart as far as the
// sessions are concerned).
func (sh *sessHarness) restart() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.st.Close()
	sh.st = openTestStore(sh.t, sh.dataDir)
}

func (h *srvHarness) send(method, path string, body any) reply {
	h.t.Helper()
	var s string
	switch b := body.(type) {
	case nil:
		return h.do(method, path, nil)
	case string:
		s = b
	default:
		raw, _ := json.Marshal(b)
		s = string(raw)
	}
	return h.do(method, path, strings.NewReader(s), "Content-Type", "application/json")
}

func (h *srvHarness) createSession(body any) session.Info {
	h.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	r := h.send("POST", "/api/session", body)
	if r.status != 200 {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var out struct{ Data session.Info }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.t.Fatal(err)
	}
	return out.Data
}

func (h *srvHarness) getSession(id string) (session.Info, reply) {
	h.t.Helper()
	r := h.get("/api/session/" + id)
	var out struct{ Data session.Info }
	if r.status == 200 {
		json.Unmarshal(r.body, &out)
	}
	return out.Data, r
}

type listReply struct {
	Data   []session.Info `json:"data"`
	Cursor struct {
		Previous string `json:"previous"`
		Next     string `json:"next"`
	} `json:"cursor"`
}

func (h *srvHarness) list(query string) listReply {
	h.t.Helper()
	r := h.get("/api/session" + query)
	if r.status != 200 {
		h.t.Fatalf("list %s: %d %s", query, r.status, r.body)
	}
	var out listReply
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func ids2(list []session.Info) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.ID
	}
	return out
}

func TestSessionCreateGetUpdateRemove(t *testing.T) {
	h := newSessHarness(t, nil)
	ev := h.subscribe(t)
	s := h.createSession(map[string]any{"title": "hello", "agent": "build",
		"model":       map[string]any{"id": "m1", "providerID": "p1"},
		"metadata":    map[string]any{"k": []int{1, 2}},
		"permissions": []map[string]any{{"action": "edit", "resource": "*", "effect": "ask"}}})
	if !strings.HasPrefix(s.ID, "ses_") || len(s.ID) != 30 || s.Title != "hello" || s.Location.Directory != h.dir ||
		s.ProjectID == "" || s.Time.Created != h.clk.Now().UnixMilli() || s.Agent != "build" || s.Model.ID != "m1" {
		t.Fatalf("created %+v", s)
	}
	raw := h.get("/api/session/" + s.ID).json(t)["data"].(map[string]any)
	for _, k := range []string{"id", "projectID", "cost", "tokens", "time", "location", "title"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("Session.Info lacks %s: %v", k, raw)
		}
	}
	if _, ok := raw["parentID"]; ok {
		t.Fatal("root session has parentID")
	}
	if e := nextEvent(t, ev); e["type"] != "session.created" {
		t.Fatalf("event %v", e)
	}

	// client-chosen id, then a duplicate
	c := h.createSession(map[string]any{"id": "ses_mine"})
	if c.ID != "ses_mine" || !strings.HasPrefix(c.Title, "New session - ") {
		t.Fatalf("%+v", c)
	}
	wantError(t, h.send("POST", "/api/session", map[string]any{"id": "ses_mine"}), 409, "ConflictError", nil)

	// child at the parent's location with inherited metadata
	child := h.createSession(map[string]any{"parentID": s.ID, "location": map[string]any{"directory": "/elsewhere"}})
	if child.ParentID != s.ID || child.Location != s.Location || string(child.Metadata["k"]) != "[1,2]" {
		t.Fatalf("child %+v", child)
	}
	wantError(t, h.send("POST", "/api/session", map[string]any{"parentID": "ses_missing"}), 404, "SessionNotFoundError",
		map[string]any{"sessionID": "ses_missing", "message": "Session not found: ses_missing"})

	// PATCH fields independently
	h.clk.Advance(time.Second)
	r := h.send("PATCH", "/api/session/"+s.ID, map[string]any{"title": "renamed"})
	if r.status != 204 || len(r.body) != 0 {
		t.Fatalf("patch %d %s", r.status, r.body)
	}
	got, _ := h.getSession(s.ID)
	if got.Title != "renamed" || got.Agent != "build" || len(got.Permissions) != 1 || got.Time.Updated != s.Time.Updated+1000 {
		t.Fatalf("after patch %+v", got)
	}
	h.send("PATCH", "/api/session/"+s.ID, map[string]any{"metadata": map[string]any{"x": "y"}, "title": nil})
	got, _ = h.getSession(s.ID)
	if got.Title != "renamed" || string(got.Metadata["x"]) != `"y"` || got.Metadata["k"] != nil {
		t.Fatalf("after metadata patch %+v", got)
	}
	// empty title: generated from the first prompt
	h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "Fix the login bug\nplease"})
	h.send("PATCH", "/api/session/"+s.ID, map[string]any{"title": ""})
	if got, _ = h.getSession(s.ID); got.Title != "Fix the login bug" {
		t.Fatalf("generated title %q", got.Title)
	}
	wantError(t, h.send("PATCH", "/api/session/ses_nope", map[string]any{"title": "x"}), 404, "SessionNotFoundError", nil)

	// DELETE removes the descendants too
	grand := h.createSession(map[string]any{"parentID": child.ID})
	if r := h.do("DELETE", "/api/session/"+s.ID, nil); r.status != 204 {
		t.Fatalf("delete %d %s", r.status, r.body)
	}
	for _, id := range []string{s.ID, child.ID, grand.ID} {
		if _, r := h.getSession(id); r.status != 404 {
			t.Fatalf("%s still there: %d", id, r.status)
		}
	}
	if _, r := h.getSession("ses_mine"); r.status != 200 {
		t.Fatal("unrelated session deleted")
	}
	wantError(t, h.do("DELETE", "/api/session/"+s.ID, nil), 404, "SessionNotFoundError", nil)
}

func TestSessionBadInput(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/session/nope", nil},
		{"DELETE", "/api/session/msg_1", nil},
		{"POST", "/api/session", map[string]any{"id": "abc"}},
		{"POST", "/api/session", map[string]any{"parentID": "x"}},
		{"POST", "/api/session", map[string]any{"bogus": 1}},
		{"POST", "/api/session", map[string]any{"model": map[string]any{"id": "x"}}},
		{"POST", "/api/session", map[string]any{"permissions": []map[string]any{{"action": "a", "resource": "b", "effect": "maybe"}}}},
		{"POST", "/api/session", `{"title": 5}`},
		{"POST", "/api/session", `not json`},
		{"POST", "/api/session", map[string]any{"location": map[string]any{"directory": "relative"}}},
		{"PATCH", "/api/session/" + s.ID, map[string]any{"name": "x"}},
		{"POST", "/api/session/" + s.ID + "/prompt", map[string]any{"text": "x", "id": "bad"}},
		{"POST", "/api/session/" + s.ID + "/prompt", map[string]any{"text": "x", "extra": true}},
		{"POST", "/api/session/" + s.ID + "/prompt", map[string]any{"files": []any{}}},
		{"POST", "/api/session/" + s.ID + "/prompt", map[string]any{"text": "x", "delivery": "now"}},
		{"POST", "/api/session/" + s.ID + "/prompt", map[string]any{"text": "x", "files": []map[string]any{{"uri": "http://x/y"}}}},
		{"POST", "/api/session/" + s.ID + "/prompt", map[string]any{"text": "x", "skills": []map[string]any{{"id": "nope"}}}},
		{"POST", "/api/session/" + s.ID + "/fork", map[string]any{"before": "ses_x"}},
		{"POST", "/api/session/" + s.ID + "/agent", map[string]any{}},
		{"POST", "/api/session/" + s.ID + "/model", map[string]any{"model": map[string]any{"providerID": "p"}}},
		{"POST", "/api/session/" + s.ID + "/move", map[string]any{"directory": "/definitely/not/here"}},
		{"GET", "/api/experimental/session/" + s.ID + "/export?sanitize=yes", nil},
	} {
		r := h.send(c.method, c.path, c.body)
		wantError(t, r, 400, "InvalidRequestError", nil)
	}
	for _, q := range []string{"limit=0", "limit=-1", "limit=1000000", "limit=abc", "limit=1.5", "order=up", "order=ASC",
		"parentID=abc", "directory=relative", "directory=/a&project=p", "subpath=x", "limit=1&limit=2"} {
		wantError(t, h.get("/api/session?"+q), 400, "InvalidRequestError", nil)
	}
	// the server is fine afterwards
	if _, r := h.getSession(s.ID); r.status != 200 {
		t.Fatal(r.status)
	}
}

func TestSessionList(t *testing.T) {
	h := newSessHarness(t, nil)
	other := canonicalTempDir(t)
	var all []session.Info
	for i := range 7 {
		body := map[string]any{"title": fmt.Sprintf("Task %d", i)}
		if i%2 == 1 {
			body["location"] = map[string]any{"directory": other}
		}
		all = append(all, h.createSession(body))
		h.clk.Advance(time.Millisecond)
	}
	child := h.createSession(map[string]any{"parentID": all[0].ID, "title": "sub"})

	// default: newest first, all sessions
	l := h.list("")
	if len(l.Data) != 8 || l.Data[0].ID != child.ID || l.Data[7].ID != all[0].ID {
		t.Fatalf("default list %v", ids2(l.Data))
	}
	asc := h.list("?order=asc&parentID=null")
	if len(asc.Data) != 7 || asc.Data[0].ID != all[0].ID {
		t.Fatalf("asc roots %v", ids2(asc.Data))
	}
	if l := h.list("?parentID=" + all[0].ID); len(l.Data) != 1 || l.Data[0].ID != child.ID {
		t.Fatalf("children %v", ids2(l.Data))
	}
	if l := h.list("?search=TASK%203"); len(l.Data) != 1 || l.Data[0].Title != "Task 3" {
		t.Fatalf("search %v", ids2(l.Data))
	}
	if l := h.list("?directory=" + url.QueryEscape(other)); len(l.Data) != 3 {
		t.Fatalf("directory %v", ids2(l.Data))
	}
	if l := h.list("?project=" + all[1].ProjectID); len(l.Data) != 3 {
		t.Fatalf("project %v", ids2(l.Data))
	}
	if l := h.list("?project=" + all[0].ProjectID + "&subpath="); len(l.Data) != 5 {
		t.Fatalf("project+subpath %v", ids2(l.Data))
	}
	if l := h.list("?directory=/nowhere"); len(l.Data) != 0 || l.Cursor.Next != "" || l.Cursor.Previous != "" {
		t.Fatalf("empty %+v", l)
	}

	// paging through roots, newest first, 3 at a time, while sessions are
	// added and updated in between
	p1 := h.list("?limit=3&parentID=null")
	want := []string{all[6].ID, all[5].ID, all[4].ID}
	if fmt.Sprint(ids2(p1.Data)) != fmt.Sprint(want) {
		t.Fatalf("page 1 %v want %v", ids2(p1.Data), want)
	}
	h.clk.Advance(time.Millisecond)
	newer := h.createSession(map[string]any{"title": "newer"})
	h.send("PATCH", "/api/session/"+all[0].ID, map[string]any{"title": "touched"}) // moves to the top
	p2 := h.list("?limit=3&cursor=" + p1.Cursor.Next)
	if fmt.Sprint(ids2(p2.Data)) != fmt.Sprint([]string{all[3].ID, all[2].ID, all[1].ID}) {
		t.Fatalf("page 2 %v", ids2(p2.Data))
	}
	p3 := h.list("?limit=3&cursor=" + p2.Cursor.Next)
	if len(p3.Data) != 0 {
		t.Fatalf("page 3 %v", ids2(p3.Data))
	}
	// previous from page 2 gives page 1 back, in the same order
	back := h.list("?limit=3&cursor=" + p2.Cursor.Previous)
	if fmt.Sprint(ids2(back.Data)) != fmt.Sprint(want) {
		t.Fatalf("previous %v want %v", ids2(back.Data), want)
	}
	// previous from page 1 shows what arrived since
	fresh := h.list("?limit=3&cursor=" + p1.Cursor.Previous)
	if fmt.Sprint(ids2(fresh.Data)) != fmt.Sprint([]string{all[0].ID, newer.ID}) {
		t.Fatalf("fresh %v", ids2(fresh.Data))
	}
	// the cursor keeps the filters: the child never shows up
	var cq map[string]any
	b, _ := base64.RawURLEncoding.DecodeString(p1.Cursor.Next)
	json.Unmarshal(b, &cq)
	if cq["parentID"] != "null" || cq["anchor"].(map[string]any)["direction"] != "next" || cq["limit"] != nil {
		t.Fatalf("cursor %s", b)
	}

	// tampered cursors
	for _, c := range []string{"x", p1.Cursor.Next[:len(p1.Cursor.Next)-3] + "!!!", "e30", // {}
		base64.RawURLEncoding.EncodeToString([]byte(`{"anchor":{"id":"abc","time":1,"direction":"next"}}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"anchor":{"id":"ses_1","time":1,"direction":"sideways"}}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"evil":1,"anchor":{"id":"ses_1","time":1,"direction":"next"}}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"order":"up","anchor":{"id":"ses_1","time":1,"direction":"next"}}`)),
	} {
		wantError(t, h.get("/api/session?cursor="+url.QueryEscape(c)), 400, "InvalidCursorError", map[string]any{"message": "Invalid cursor"})
	}
}

func TestSessionPromptAdmission(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	h.srv.Bus().Flush() // session.created is sent before the stream opens
	ev := h.subscribe(t)
	r := h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "hi", "id": "msg_client1",
		"agents":   []map[string]any{{"name": "plan", "mention": map[string]any{"start": 0, "end": 2, "text": "hi"}}},
		"files":    []map[string]any{{"uri": "data:text/plain;base64,aGVsbG8=", "name": "a.txt"}},
		"metadata": map[string]any{"m": 1}})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var out struct {
		Data struct {
			session.InboxUser
			AdmittedSeq uint64                `json:"admittedSeq"`
			Prompt      session.DurablePrompt `json:"prompt"`
			TimeCreated int64                 `json:"timeCreated"`
		}
	}
	json.Unmarshal(r.body, &out)
	d := out.Data
	if d.ID != "msg_client1" || d.SessionID != s.ID || d.Type != "user" || d.Delivery != "steer" || d.Payload.Text != "hi" ||
		len(d.Payload.Files) != 1 || d.Payload.Files[0].Data != "aGVsbG8=" || d.Payload.Files[0].Mime != "text/plain" ||
		d.Time.Created == 0 || len(d.Payload.Agents) != 1 {
		t.Fatalf("%s", r.body)
	}
	// The released server's fields: the admission's durable seq (the
	// session's created event is seq 1), the prompt, its time.
	if d.AdmittedSeq != 2 || d.TimeCreated != d.Time.Created || d.Prompt.Text != "hi" || len(d.Prompt.Files) != 1 ||
		d.Prompt.Files[0].URI != "data:text/plain;base64,aGVsbG8=" || d.Prompt.Files[0].Mime != "text/plain" ||
		len(d.Prompt.Agents) != 1 || d.Prompt.Agents[0].Name != "plan" || d.Prompt.Agents[0].Source == nil {
		t.Fatalf("admitted %s", r.body)
	}
	e := nextEvent(t, ev)
	durable, _ := e["durable"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if e["type"] != "session.next.prompt.admitted" || durable["seq"] != float64(2) || durable["aggregateID"] != s.ID ||
		durable["version"] != float64(1) || ev.lastID != e["id"] || data["messageID"] != "msg_client1" || data["delivery"] != "steer" ||
		data["timestamp"] == nil || e["created"] == nil {
		t.Fatalf("event %v (id line %q)", e, ev.lastID)
	}
	if e := nextEvent(t, ev); e["type"] != "session.updated" || e["durable"] == nil {
		t.Fatalf("event %v", e)
	}
	wantError(t, h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "again", "id": "msg_client1"}), 409, "ConflictError",
		map[string]any{"resource": "msg_client1"})
	// older nested shape, queue delivery, resume false
	r = h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"prompt": map[string]any{"text": "nested"}, "delivery": "queue", "resume": false})
	json.Unmarshal(r.body, &out)
	if r.status != 200 || out.Data.Payload.Text != "nested" || out.Data.Delivery != "queue" || !strings.HasPrefix(out.Data.ID, "msg_") {
		t.Fatalf("nested %d %s", r.status, r.body)
	}
	if sc := h.loop.Scheduled(); len(sc) != 1 || sc[0] != s.ID {
		t.Fatalf("scheduled %v", sc)
	}
	wantError(t, h.send("POST", "/api/session/ses_none/prompt", map[string]any{"text": "x"}), 404, "SessionNotFoundError", nil)

	// active: empty until a drain runs
	if a := h.get("/api/session/active"); a.status != 200 || string(a.body) != "{\"data\":{}}\n" {
		t.Fatalf("active %d %s", a.status, a.body)
	}
	h.loop.active[s.ID] = true
	if a := h.get("/api/session/active").json(t)["data"].(map[string]any); fmt.Sprint(a) != fmt.Sprintf("map[%s:map[type:running]]", s.ID) {
		t.Fatalf("active %v", a)
	}
}

func TestSessionPromptSurvivesRestart(t *testing.T) {
	var h *sessHarness
	h = newSessHarness(t, nil)
	s := h.createSession(nil)
	// the store goes away between the commit and the answer
	h.loop.onSchedule = h.restart
	r := h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "durable", "id": "msg_d1"})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h.loop.onSchedule = nil
	var found []string
	h.store().View(context.Background(), func(tx store.Tx) error {
		return tx.SessionItems("default", s.ID, store.ItemInbox, func(raw []byte) (bool, error) {
			found = append(found, string(raw))
			return true, nil
		})
	})
	if len(found) != 1 || !strings.Contains(found[0], `"msg_d1"`) || !strings.Contains(found[0], "durable") {
		t.Fatalf("inbox after restart %v", found)
	}
	wantError(t, h.send("POST", "/api/session/"+s.ID+"/prompt", map[string]any{"text": "x", "id": "msg_d1"}), 409, "ConflictError", nil)
}

func TestSessionConcurrentUpdates(t *testing.T) {
	h := newSessHarness(t, nil)
	s := h.createSession(nil)
	const rounds = 15
	var wg sync.WaitGroup
	for _, field := range []string{"title", "metadata", "permissions"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= rounds; i++ {
				var body map[string]any
				switch field {
				case "title":
					body = map[string]any{"title": fmt.Sprintf("t%d", i)}
				case "metadata":
					body = map[string]any{"metadata": map[string]any{"n": i}}
				default:
					body = map[string]any{"permissions": []map[string]any{{"action": fmt.Sprint(i), "resource": "*", "effect": "allow"}}}
				}
				if r := h.send("PATCH", "/api/session/"+s.ID, body); r.status != 204 {
					t.Errorf("patch %d %s", r.status, r.body)
				}
			}
		}()
	}
	// concurrent agent switches each record a message
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := h.send("POST", "/api/session/"+s.ID+"/agent", map[string]any{"agent": fmt.Sprint("a", i)}); r.status != 204 {
				t.Errorf("agent %d %s", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	got, _ := h.getSession(s.ID)
	if got.Title != fmt.Sprintf("t%d", rounds) || string(got.Metadata["n"]) != fmt.Sprint(rounds) ||
		got.Permissions[0].Action != fmt.Sprint(rounds) {
		t.Fatalf("lost update: %+v", got)
	}
	exp := h.get("/api/experimental/session/" + s.ID + "/export")
	var tr struct {
		Data struct{ Messages []map[string]any }
	}
	json.Unmarshal(exp.body, &tr)
	if len(tr.Data.Messages) != 10 {
		t.Fatalf("%d agent-switched messages, want 10", len(tr.Data.Messages))
	}
}

func TestSessionDeleteParentWhileCreatingChildren(t *testing.T) {
	h := newSessHarness(t, nil)
	for round := range 5 {
		parent := h.createSession(map[string]any{"title": fmt.Sprint("p", round)})
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := h.send("POST", "/api/session", map[string]any{"parentID": parent.ID})
				if r.status != 200 && r.status != 404 {
					t.Errorf("child create %d %s", r.status, r.body)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := h.do("DELETE", "/api/session/"+parent.ID, nil); r.status != 204 {
				t.Errorf("delete %d %s", r.status, r.body)
			}
		}()
		wg.Wait()
		if l := h.list("?parentID=" + parent.ID); len(l.Data) != 0 {
			t.Fatalf("orphans after delete: %v", ids2(l.Data))
		}
	}
	if l := h.list(""); len(l.Data) != 0 {
		t.Fatalf("left over: %v", ids2(l.Data))
	}
}

// nextEvent reads the next event other than server.connected.
func nextEvent(t *testing.T, s *eventStream) map[string]any {
	t.Helper()
	for {
		f := strings.TrimSpace(s.next(t))
		if !strings.HasPrefix(f, "data: ") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] != "server.connected" {
			return m
		}
	}
}

package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/instance/snapshot"
	"github.com/agentgate/agentgate/internal/money"
)

// newRevertHarness is a drain harness whose fake provider follows a
// script and whose instance takes file snapshots (cfg may change their
// configuration) in a directory of the test's.
func newRevertHarness(t *testing.T, sc *script, cfg func(*snapshot.Config)) *drainHarness {
	t.Helper()
	fake, err := fakeprovider.Start(fakeKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	runner := loop.NewRunner()
	runner.SetProvider(loop.ProviderConfig{BaseURL: fake.URL + "/v1", APIKey: fakeKey, Format: "chat", Model: "fake-model",
		InputPrice: 2 * money.Scale, OutputPrice: 8 * money.Scale})
	c := snapshot.Config{Dir: filepath.Join(t.TempDir(), "snapshots")}
	if cfg != nil {
		cfg(&c)
	}
	snaps := snapshot.New(c)
	t.Cleanup(snaps.Wait)
	sh := newSessHarness(t, func(o *Options) {
		o.Runner = runner
		o.Snapshots = snaps
	})
	t.Cleanup(runner.Close)
	fake.SetBehavior(fakeprovider.Behavior{Script: sc.next})
	return &drainHarness{sessHarness: sh, fake: fake, runner: runner}
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(b)
}

// userIDs lists a session's user message ids.
func userIDs(msgs []map[string]any) []string {
	var out []string
	for _, m := range ofType(msgs, "user") {
		out = append(out, m["id"].(string))
	}
	return out
}

// revert sends the v1 revert and returns the v1 Session it answers.
func (h *drainHarness) revert(sid, mid string) gjson.Result {
	h.t.Helper()
	r := h.send("POST", "/session/"+sid+"/revert", map[string]any{"messageID": mid})
	if r.status != 200 {
		h.t.Fatalf("revert to %s: %d %s", mid, r.status, r.body)
	}
	return gjson.ParseBytes(r.body)
}

func (h *drainHarness) unrevert(sid string) gjson.Result {
	h.t.Helper()
	r := h.send("POST", "/session/"+sid+"/unrevert", nil)
	if r.status != 200 {
		h.t.Fatalf("unrevert: %d %s", r.status, r.body)
	}
	return gjson.ParseBytes(r.body)
}

func skipped(sess gjson.Result) map[string]string {
	out := map[string]string{}
	for _, s := range sess.Get("revert.skipped").Array() {
		out[s.Get("file").String()] = s.Get("reason").String()
	}
	return out
}

func writeCall(id, file, content string) fakeprovider.Call {
	return call(id, "write", map[string]any{"filePath": file, "content": content})
}

func TestRevertUndoTwiceRedoTwice(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A by the agent\n")}}, {Text: "wrote a"},
		{Calls: []fakeprovider.Call{writeCall("c2", "b.txt", "B by the agent\n"), writeCall("c3", "new/c.txt", "C\n")}}, {Text: "wrote b"},
	}}
	h := newRevertHarness(t, sc, nil)
	writeFile(t, h.dir, "a.txt", "A\n")
	writeFile(t, h.dir, "b.txt", "B\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_u"})
	h.prompt("ses_u", "change a", nil)
	h.waitIdle("ses_u", 1)
	h.prompt("ses_u", "change b", nil)
	msgs := h.waitIdle("ses_u", 2)
	u := userIDs(msgs)
	as := ofType(msgs, "assistant")
	snap := gjson.Get(mustJSONString(as[2]), "snapshot")
	if !slices.Equal(stringsOf(snap.Get("files")), []string{"b.txt", "new/c.txt"}) || snap.Get("start").String() == "" || snap.Get("end").String() == "" {
		t.Fatalf("the second step's snapshot: %s", snap.Raw)
	}
	if gjson.Get(mustJSONString(as[1]), "snapshot").Exists() {
		t.Fatal("a step without tools took a snapshot")
	}
	// v1 messages carry the step's patch part with absolute paths.
	v1msgs := gjson.ParseBytes(h.send("GET", "/session/ses_u/message", nil).body)
	patch := v1msgs.Get(`#.parts|@flatten|#(type=="patch")#`).Array()
	if len(patch) != 2 || patch[1].Get("files.0").String() != filepath.Join(h.dir, "b.txt") || patch[1].Get("hash").String() != snap.Get("start").String() {
		t.Fatalf("patch parts: %v", patch)
	}
	// The session's diff, and one message's.
	diff := gjson.ParseBytes(h.send("GET", "/session/ses_u/diff", nil).body)
	if n := len(diff.Array()); n != 3 || diff.Get(`#(file=="a.txt").before`).String() != "A\n" || diff.Get(`#(file=="a.txt").after`).String() != "A by the agent\n" ||
		diff.Get(`#(file=="new/c.txt").status`).String() != "added" || diff.Get(`#(file=="a.txt").additions`).Int() != 1 {
		t.Fatalf("session diff: %s", diff.Raw)
	}
	one := gjson.ParseBytes(h.send("GET", "/session/ses_u/diff?messageID="+u[1], nil).body)
	if len(one.Array()) != 2 || one.Get(`#(file=="a.txt")`).Exists() {
		t.Fatalf("diff of the second turn: %s", one.Raw)
	}

	// /undo: the TUI reverts to the last user message.
	s1 := h.revert("ses_u", u[1])
	if s1.Get("revert.messageID").String() != u[1] || readFile(t, h.dir, "b.txt") != "B\n" || readFile(t, h.dir, "a.txt") != "A by the agent\n" {
		t.Fatalf("first undo: %s; b.txt %q", s1.Get("revert").Raw, readFile(t, h.dir, "b.txt"))
	}
	if _, err := os.Stat(filepath.Join(h.dir, "new", "c.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the file the step created is still there")
	}
	if d := s1.Get("revert.diff").String(); !strings.Contains(d, "b/b.txt") || !strings.Contains(d, "-B by the agent") {
		t.Fatalf("revert diff: %q", d)
	}
	// The v2 list hides the messages from the revert point on; v1 keeps
	// them (the released TUI hides them itself and redoes from them).
	v2 := gjson.ParseBytes(h.send("GET", "/api/session/ses_u/message?order=asc", nil).body)
	for _, m := range v2.Get("data").Array() {
		if m.Get("id").String() >= u[1] {
			t.Fatalf("the v2 list shows hidden message %s", m.Get("id"))
		}
	}
	if n := len(gjson.ParseBytes(h.send("GET", "/session/ses_u/message", nil).body).Array()); n != 6 {
		t.Fatalf("v1 list: %d messages", n)
	}
	// /undo again.
	h.revert("ses_u", u[0])
	if readFile(t, h.dir, "a.txt") != "A\n" || readFile(t, h.dir, "b.txt") != "B\n" {
		t.Fatal("second undo did not restore a.txt")
	}
	// /redo: the TUI reverts to the next user message.
	s3 := h.revert("ses_u", u[1])
	if readFile(t, h.dir, "a.txt") != "A by the agent\n" || readFile(t, h.dir, "b.txt") != "B\n" || s3.Get("revert.messageID").String() != u[1] {
		t.Fatalf("first redo: a %q b %q", readFile(t, h.dir, "a.txt"), readFile(t, h.dir, "b.txt"))
	}
	// /redo again: no user message follows, so the TUI unreverts.
	s4 := h.unrevert("ses_u")
	if s4.Get("revert").Exists() || readFile(t, h.dir, "b.txt") != "B by the agent\n" || readFile(t, h.dir, "new/c.txt") != "C\n" {
		t.Fatalf("second redo: %s", s4.Raw)
	}
	if !slices.Equal(stringsOf(s4.Get("redo.files")), []string{"b.txt", "new/c.txt"}) {
		t.Fatalf("redo report: %s", s4.Get("redo").Raw)
	}
	if n := len(gjson.ParseBytes(h.send("GET", "/api/session/ses_u/message", nil).body).Get("data").Array()); n != 8 {
		t.Fatalf("after the redo the v2 list has %d messages", n)
	}
}

func mustJSONString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func stringsOf(r gjson.Result) []string {
	var out []string
	for _, v := range r.Array() {
		out = append(out, v.String())
	}
	return out
}

// The journey: two files edited over two steps, a hand edit to
// one of them, /undo restores the other and reports the one it kept,
// /redo reapplies it.
func TestRevertKeepsAHandEditAndReportsIt(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A by the agent\n")}},
		{Calls: []fakeprovider.Call{call("c2", "edit", map[string]any{"filePath": "b.txt", "oldString": "B", "newString": "B by the agent"})}},
		{Text: "done"},
	}}
	h := newRevertHarness(t, sc, nil)
	writeFile(t, h.dir, "a.txt", "A\n")
	writeFile(t, h.dir, "b.txt", "B\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_h"})
	h.prompt("ses_h", "edit both", nil)
	u := userIDs(h.waitIdle("ses_h", 1))
	writeFile(t, h.dir, "a.txt", "A by the agent\nand by hand\n")
	ev := h.subscribe(t)
	ev.next(t)
	s := h.revert("ses_h", u[0])
	// The released TUI lists only the files a revert changed: a toast
	// names the one it left.
	deadline := time.Now().Add(5 * time.Second)
	for {
		e := frameOf(t, ev)
		if e.Get("type").String() == "tui.toast.show" {
			if !strings.Contains(e.Get("data.message").String(), "a.txt changed since") || e.Get("data.variant").String() != "warning" {
				t.Fatalf("toast: %s", e.Raw)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no toast names the file left")
		}
	}
	if got := readFile(t, h.dir, "a.txt"); got != "A by the agent\nand by hand\n" {
		t.Fatalf("the hand edit was overwritten: %q", got)
	}
	if readFile(t, h.dir, "b.txt") != "B\n" {
		t.Fatal("b.txt not restored")
	}
	if sk := skipped(s); sk["a.txt"] != "changed" || len(sk) != 1 {
		t.Fatalf("skipped: %s", s.Get("revert.skipped").Raw)
	}
	if d := s.Get("revert.diff").String(); strings.Contains(d, "a.txt") || !strings.Contains(d, "b.txt") {
		t.Fatalf("diff: %q", d)
	}
	h.unrevert("ses_h")
	if readFile(t, h.dir, "b.txt") != "B by the agent\n" || readFile(t, h.dir, "a.txt") != "A by the agent\nand by hand\n" {
		t.Fatal("redo")
	}
}

func TestRevertFileDeletedBinaryAndTooLarge(t *testing.T) {
	big := strings.Repeat("x", 300)
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "gone.txt", "agent\n"), writeCall("c2", "bin.dat", "\x00\x01\x02agent\xff"),
			writeCall("c3", "big.txt", big)}},
		{Text: "done"},
	}}
	h := newRevertHarness(t, sc, func(c *snapshot.Config) { c.MaxFileSize = 200 })
	writeFile(t, h.dir, "gone.txt", "user\n")
	writeFile(t, h.dir, "bin.dat", "\x00\x01\x02user")
	writeFile(t, h.dir, "big.txt", "small\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_d"})
	h.prompt("ses_d", "go", nil)
	u := userIDs(h.waitIdle("ses_d", 1))
	os.Remove(filepath.Join(h.dir, "gone.txt"))
	s := h.revert("ses_d", u[0])
	if _, err := os.Stat(filepath.Join(h.dir, "gone.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a file deleted since was brought back")
	}
	if readFile(t, h.dir, "bin.dat") != "\x00\x01\x02user" {
		t.Fatal("binary file not restored byte for byte")
	}
	if readFile(t, h.dir, "big.txt") != big {
		t.Fatal("the file over the size limit was changed")
	}
	sk := skipped(s)
	if sk["gone.txt"] != "deleted" || sk["big.txt"] != "not-in-snapshot" {
		t.Fatalf("skipped: %s", s.Get("revert.skipped").Raw)
	}
	if !strings.Contains(s.Get(`revert.skipped.#(file=="big.txt").message`).String(), "too-large") {
		t.Fatalf("big.txt's reason: %s", s.Get("revert.skipped").Raw)
	}
	if !s.Get(`revert.files.#(file=="bin.dat").binary`).Bool() {
		t.Fatalf("files: %s", s.Get("revert.files").Raw)
	}
}

// digest is a digest of every file under dir: names, modes, times, bytes.
func digest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		fmt.Fprintf(h, "%s %v %d\n", p, fi.Mode(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+t.TempDir(),
		"GIT_AUTHOR_NAME=u", "GIT_AUTHOR_EMAIL=u@example.com", "GIT_COMMITTER_NAME=u", "GIT_COMMITTER_EMAIL=u@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return string(out)
}

func TestRevertInAGitProjectLeavesTheRepositoryAlone(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A by the agent\n"), writeCall("c2", "new.txt", "new\n")}},
		{Text: "done"},
	}}
	h := newRevertHarness(t, sc, nil)
	writeFile(t, h.dir, "a.txt", "A\n")
	writeFile(t, h.dir, "b.txt", "B\n")
	gitIn(t, h.dir, "init", "-q")
	gitIn(t, h.dir, "add", ".")
	gitIn(t, h.dir, "commit", "-qm", "first")
	writeFile(t, h.dir, "b.txt", "B staged\n")
	gitIn(t, h.dir, "add", "b.txt")
	index := gitIn(t, h.dir, "ls-files", "--stage")
	before := digest(t, filepath.Join(h.dir, ".git"))
	h.send("POST", "/api/session", map[string]any{"id": "ses_g"})
	h.prompt("ses_g", "go", nil)
	u := userIDs(h.waitIdle("ses_g", 1))
	h.revert("ses_g", u[0])
	if readFile(t, h.dir, "a.txt") != "A\n" {
		t.Fatal("not restored")
	}
	if _, err := os.Stat(filepath.Join(h.dir, "new.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("new.txt still there")
	}
	h.unrevert("ses_g")
	if readFile(t, h.dir, "a.txt") != "A by the agent\n" {
		t.Fatal("redo")
	}
	if after := digest(t, filepath.Join(h.dir, ".git")); after != before {
		t.Fatal("the user's repository changed")
	}
	if got := gitIn(t, h.dir, "ls-files", "--stage"); got != index {
		t.Fatalf("the user's index: %q, was %q", got, index)
	}
	if got := gitIn(t, h.dir, "status", "--porcelain"); !strings.Contains(got, "M  b.txt") || !strings.Contains(got, " M a.txt") {
		t.Fatalf("the user's status: %q", got)
	}
}

func TestRevertBadInput(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"},
		{Text: "other session"},
	}}
	h := newRevertHarness(t, sc, nil)
	h.send("POST", "/api/session", map[string]any{"id": "ses_a"})
	h.send("POST", "/api/session", map[string]any{"id": "ses_b"})
	h.prompt("ses_a", "go", nil)
	ua := userIDs(h.waitIdle("ses_a", 1))
	h.prompt("ses_b", "hi", nil)
	ub := userIDs(h.waitIdle("ses_b", 1))
	// Another session's message.
	r := h.send("POST", "/session/ses_a/revert", map[string]any{"messageID": ub[0]})
	wantError(t, r, 404, "MessageNotFoundError", nil)
	r = h.send("POST", "/api/session/ses_a/revert/stage", map[string]any{"messageID": ub[0]})
	wantError(t, r, 404, "MessageNotFoundError", nil)
	for _, body := range []string{`{}`, `{"messageID": 7}`, `{"messageID": "nope"}`, `{"messageID": "` + ua[0] + `", "extra": 1}`, `not json`} {
		r := h.send("POST", "/session/ses_a/revert", body)
		wantError(t, r, 400, "InvalidRequestError", nil)
	}
	wantError(t, h.send("POST", "/session/ses_nope/revert", map[string]any{"messageID": ua[0]}), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/session/ses_nope/unrevert", nil), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("GET", "/session/ses_a/diff?messageID="+ub[0], nil), 404, "MessageNotFoundError", nil)
	wantError(t, h.send("GET", "/session/ses_a/diff?messageID=bad", nil), 400, "InvalidRequestError", nil)
	// Unrevert without a revert answers the session as it is.
	if s := h.unrevert("ses_a"); s.Get("revert").Exists() || s.Get("id").String() != "ses_a" {
		t.Fatalf("unrevert with nothing staged: %s", s.Raw)
	}
	// A chat-only turn reverts (no file to put back).
	if s := h.revert("ses_b", ub[0]); s.Get("revert.messageID").String() != ub[0] || s.Get("revert.snapshot").Exists() {
		t.Fatalf("chat-only revert: %s", s.Raw)
	}
}

func TestRevertWithoutSnapshotIsAClearError(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"}}}
	h := newRevertHarness(t, sc, func(c *snapshot.Config) { c.Git = "git-is-not-installed-here" })
	writeFile(t, h.dir, "a.txt", "A\n")
	info := gjson.ParseBytes(h.send("GET", "/api/info", nil).body)
	if info.Get("snapshots.mode").String() != "unavailable" || !strings.Contains(info.Get("snapshots.reason").String(), "git is not installed") {
		t.Fatalf("info: %s", info.Get("snapshots").Raw)
	}
	h.send("POST", "/api/session", map[string]any{"id": "ses_n"})
	h.prompt("ses_n", "go", nil)
	msgs := h.waitIdle("ses_n", 1)
	if readFile(t, h.dir, "a.txt") != "A2\n" {
		t.Fatal("the step did not run without snapshots")
	}
	a := ofType(msgs, "assistant")[0]
	if inc := gjson.Get(mustJSONString(a), "snapshot.incomplete").String(); !strings.Contains(inc, "git is not installed") {
		t.Fatalf("the step's snapshot: %v", a["snapshot"])
	}
	r := h.send("POST", "/session/ses_n/revert", map[string]any{"messageID": userIDs(msgs)[0]})
	wantError(t, r, 400, "InvalidRequestError", nil)
	if m := gjson.GetBytes(r.body, "message").String(); !strings.Contains(m, "no snapshot") || !strings.Contains(m, "git is not installed") ||
		gjson.GetBytes(r.body, "kind").String() != "no_snapshot" {
		t.Fatalf("error: %s", r.body)
	}
	if readFile(t, h.dir, "a.txt") != "A2\n" {
		t.Fatal("a refused revert changed a file")
	}
	// Hiding the messages only is still possible (v2, files: false).
	r = h.send("POST", "/api/session/ses_n/revert/stage", map[string]any{"messageID": userIDs(msgs)[0], "files": false})
	if r.status != 200 || !gjson.GetBytes(r.body, "data.noFiles").Bool() {
		t.Fatalf("stage without files: %d %s", r.status, r.body)
	}
}

// A snapshot that fails (a full disk) does not fail the step: its record
// says the snapshot is incomplete, and a revert through it says why.
func TestSnapshotFailureDoesNotFailTheStep(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"}}}
	h := newRevertHarness(t, sc, func(c *snapshot.Config) {
		c.Exec = func(ctx context.Context, git string, cmd snapshot.Cmd) ([]byte, error) {
			if slices.Contains(cmd.Args, "update-index") && slices.Contains(cmd.Args, "--add") {
				return nil, errors.New("git update-index: exit status 128: fatal: unable to write new index file: No space left on device")
			}
			return snapshot.RealExec(ctx, git, cmd)
		}
	})
	writeFile(t, h.dir, "a.txt", "A\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_f"})
	h.prompt("ses_f", "go", nil)
	msgs := h.waitIdle("ses_f", 1)
	if readFile(t, h.dir, "a.txt") != "A2\n" || text(ofType(msgs, "assistant")[1]) != "done" {
		t.Fatal("the step did not go on")
	}
	snap := gjson.Get(mustJSONString(ofType(msgs, "assistant")[0]), "snapshot")
	if !strings.Contains(snap.Get("incomplete").String(), "No space left on device") || snap.Get("end").Exists() {
		t.Fatalf("snapshot: %s", snap.Raw)
	}
	r := h.send("POST", "/session/ses_f/revert", map[string]any{"messageID": userIDs(msgs)[0]})
	wantError(t, r, 400, "InvalidRequestError", nil)
	if !strings.Contains(string(r.body), "No space left on device") {
		t.Fatalf("error: %s", r.body)
	}
}

func TestRevertWhileATurnRunsIsBusy(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"},
		{Calls: []fakeprovider.Call{call("q1", "question", map[string]any{"questions": []map[string]any{{"question": "go on?", "header": "Go",
			"options": []map[string]any{{"label": "yes", "description": "y"}}}}})}},
		{Text: "answered"},
	}}
	h := newRevertHarness(t, sc, nil)
	h.send("POST", "/api/session", map[string]any{"id": "ses_busy"})
	h.prompt("ses_busy", "first", nil)
	u := userIDs(h.waitIdle("ses_busy", 1))
	h.prompt("ses_busy", "ask me", nil)
	q := h.waitPending("/question")
	for _, req := range [][2]string{{"/session/ses_busy/revert", `{"messageID":"` + u[0] + `"}`}, {"/session/ses_busy/unrevert", ""},
		{"/api/session/ses_busy/revert/stage", `{"messageID":"` + u[0] + `"}`}} {
		var body any
		if req[1] != "" {
			body = req[1]
		}
		r := h.send("POST", req[0], body)
		wantError(t, r, 409, "SessionBusyError", nil)
		if gjson.GetBytes(r.body, "sessionID").String() != "ses_busy" {
			t.Fatalf("busy error: %s", r.body)
		}
	}
	if readFile(t, h.dir, "a.txt") != "A2\n" {
		t.Fatal("a refused revert changed a file")
	}
	_ = q
	// The released TUI's /undo during a turn: abort (answered once the
	// turn stopped), then revert.
	if r := h.send("POST", "/session/ses_busy/abort", nil); r.status != 200 {
		t.Fatalf("abort: %d %s", r.status, r.body)
	}
	h.revert("ses_busy", u[0])
	if _, err := os.Stat(filepath.Join(h.dir, "a.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the revert after the abort did not remove the file the first turn wrote")
	}
}

func TestRevertSurvivesARestart(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"}}}
	var snapDir string
	h := newRevertHarness(t, sc, func(c *snapshot.Config) { snapDir = c.Dir })
	writeFile(t, h.dir, "a.txt", "A\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_r"})
	h.prompt("ses_r", "go", nil)
	u := userIDs(h.waitIdle("ses_r", 1))
	h.revert("ses_r", u[0])
	if readFile(t, h.dir, "a.txt") != "A\n" {
		t.Fatal("undo")
	}
	// The process stops and starts again: a new store handle, server,
	// loop and snapshot manager over the same directories.
	h.runner.Close()
	h.restart()
	r2 := loop.NewRunner()
	r2.SetProvider(h.runner.Provider())
	t.Cleanup(r2.Close)
	opts := h.opts
	opts.Runner, opts.Bus, opts.Snapshots = r2, events.NewBus(0, nil), snapshot.New(snapshot.Config{Dir: snapDir})
	h2 := *h.srvHarness
	h2.srv = New(opts)
	h2.ts = httptest.NewServer(h2.srv)
	t.Cleanup(h2.ts.Close)
	r := h2.send("POST", "/session/ses_r/unrevert", nil)
	if r.status != 200 || gjson.GetBytes(r.body, "revert").Exists() {
		t.Fatalf("redo after a restart: %d %s", r.status, r.body)
	}
	if readFile(t, h.dir, "a.txt") != "A2\n" {
		t.Fatal("redo after a restart did not put the file back")
	}
}

func TestTwoSessionsRevertOnlyTheirOwn(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A by one\n")}}, {Text: "one"},
		{Calls: []fakeprovider.Call{writeCall("c2", "b.txt", "B by two\n")}}, {Text: "two"},
	}}
	h := newRevertHarness(t, sc, nil)
	writeFile(t, h.dir, "a.txt", "A\n")
	writeFile(t, h.dir, "b.txt", "B\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_1"})
	h.send("POST", "/api/session", map[string]any{"id": "ses_2"})
	h.prompt("ses_1", "a", nil)
	u1 := userIDs(h.waitIdle("ses_1", 1))
	h.prompt("ses_2", "b", nil)
	h.waitIdle("ses_2", 1)
	h.revert("ses_1", u1[0])
	if readFile(t, h.dir, "a.txt") != "A\n" || readFile(t, h.dir, "b.txt") != "B by two\n" {
		t.Fatalf("a %q b %q", readFile(t, h.dir, "a.txt"), readFile(t, h.dir, "b.txt"))
	}
}

func TestNextPromptDropsTheRevertedMessages(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "first"},
		{Text: "second"},
	}}
	h := newRevertHarness(t, sc, nil)
	h.send("POST", "/api/session", map[string]any{"id": "ses_p"})
	h.prompt("ses_p", "go", nil)
	u := userIDs(h.waitIdle("ses_p", 1))
	ev := h.subscribe(t)
	ev.next(t)
	h.revert("ses_p", u[0])
	h.prompt("ses_p", "instead", nil)
	msgs := h.waitIdle("ses_p", 1)
	if ids := userIDs(msgs); len(ids) != 1 || ids[0] == u[0] || text(ofType(msgs, "assistant")[0]) != "second" {
		t.Fatalf("messages after the next prompt: %v", msgs)
	}
	info := gjson.ParseBytes(h.send("GET", "/api/session/ses_p", nil).body)
	if info.Get("data.revert").Exists() {
		t.Fatalf("revert still staged: %s", info.Raw)
	}
	// The model saw only the new prompt.
	bodies := sc.seen()
	if last := bodies[len(bodies)-1]; strings.Contains(last, `"go"`) || !strings.Contains(last, "instead") {
		t.Fatalf("the request after the commit: %s", last)
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for !seen["session.next.revert.committed"] && time.Now().Before(deadline) {
		seen[frameOf(t, ev).Get("type").String()] = true
	}
	if !seen["session.next.revert.staged"] || !seen["message.removed"] || !seen["session.next.revert.committed"] {
		t.Fatalf("events: %v", seen)
	}
}

func TestRevertV2Routes(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"}}}
	h := newRevertHarness(t, sc, nil)
	writeFile(t, h.dir, "a.txt", "A\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_v"})
	h.prompt("ses_v", "go", nil)
	u := userIDs(h.waitIdle("ses_v", 1))
	r := h.send("POST", "/api/session/ses_v/revert/stage", map[string]any{"messageID": u[0]})
	d := gjson.GetBytes(r.body, "data")
	if r.status != 200 || d.Get("messageID").String() != u[0] || d.Get("files.0.file").String() != "a.txt" || d.Get("files.0.status").String() != "modified" {
		t.Fatalf("stage: %d %s", r.status, r.body)
	}
	if readFile(t, h.dir, "a.txt") != "A\n" {
		t.Fatal("stage did not revert")
	}
	if got := gjson.ParseBytes(h.send("GET", "/api/session/ses_v", nil).body).Get("data.revert.messageID").String(); got != u[0] {
		t.Fatalf("session revert: %q", got)
	}
	if r := h.send("POST", "/api/session/ses_v/revert/clear", nil); r.status != 204 || readFile(t, h.dir, "a.txt") != "A2\n" {
		t.Fatalf("clear: %d %s", r.status, r.body)
	}
	h.send("POST", "/api/session/ses_v/revert/stage", map[string]any{"messageID": u[0]})
	if r := h.send("POST", "/api/session/ses_v/revert/commit", nil); r.status != 204 {
		t.Fatalf("commit: %d %s", r.status, r.body)
	}
	if n := len(gjson.ParseBytes(h.send("GET", "/api/session/ses_v/message", nil).body).Get("data").Array()); n != 0 || readFile(t, h.dir, "a.txt") != "A\n" {
		t.Fatalf("after commit: %d messages, a.txt %q", n, readFile(t, h.dir, "a.txt"))
	}
	wantError(t, h.send("POST", "/api/session/ses_nope/revert/clear", nil), 404, "SessionNotFoundError", nil)
	wantError(t, h.send("POST", "/api/session/ses_v/revert/stage", `{"messageID":"msg_x","bogus":true}`), 400, "InvalidRequestError", nil)
}

func TestWebUndoAndRedo(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"}}}
	h := newRevertHarness(t, sc, nil)
	writeFile(t, h.dir, "a.txt", "A\n")
	writeFile(t, h.dir, "b.txt", "B\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_w"})
	tok := h.csrf()
	wantPage(t, h.post("/ui/session/ses_w/undo", url.Values{"csrf": {tok}}), http.StatusBadRequest, "no prompt to undo")
	wantPage(t, h.post("/ui/session/ses_w/redo", url.Values{"csrf": {tok}}), http.StatusBadRequest, "nothing to redo")
	h.prompt("ses_w", "go", nil)
	h.waitIdle("ses_w", 1)
	wantPage(t, h.post("/ui/session/ses_w/undo", url.Values{}), http.StatusForbidden)
	if r := h.post("/ui/session/ses_w/undo", url.Values{"csrf": {tok}}); r.status != http.StatusSeeOther {
		t.Fatalf("undo: %d %s", r.status, r.body)
	}
	if readFile(t, h.dir, "a.txt") != "A\n" {
		t.Fatal("the web undo did not put a.txt back")
	}
	wantPage(t, h.page("/ui/session/ses_w"), http.StatusOK, "1 prompt undone", "<code>a.txt</code> modified", "Redo")
	if r := h.post("/ui/session/ses_w/redo", url.Values{"csrf": {tok}}); r.status != http.StatusSeeOther {
		t.Fatalf("redo: %d %s", r.status, r.body)
	}
	if readFile(t, h.dir, "a.txt") != "A2\n" {
		t.Fatal("the web redo did not put a.txt back")
	}
	if body := wantPage(t, h.page("/ui/session/ses_w"), http.StatusOK); strings.Contains(body, "undone</h2>") {
		t.Fatal("the page still shows the undo")
	}
}

// frameOf reads the next event of a stream.
func frameOf(t *testing.T, ev *eventStream) gjson.Result {
	t.Helper()
	return gjson.Parse(strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: "))
}

// A hand edit between two of the session's steps that both changed a
// file: reverting the later step puts back the hand edit; reverting both
// would lose it, so the file is left and reported.
func TestRevertKeepsEditsBetweenSteps(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "one\n")}}, {Text: "first"},
		{Calls: []fakeprovider.Call{call("c2", "edit", map[string]any{"filePath": "a.txt", "oldString": "hand", "newString": "hand, then agent"})}},
		{Text: "second"},
	}}
	h := newRevertHarness(t, sc, nil)
	writeFile(t, h.dir, "a.txt", "zero\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_b"})
	h.prompt("ses_b", "write", nil)
	h.waitIdle("ses_b", 1)
	writeFile(t, h.dir, "a.txt", "one\nhand\n")
	h.prompt("ses_b", "edit", nil)
	u := userIDs(h.waitIdle("ses_b", 2))
	if readFile(t, h.dir, "a.txt") != "one\nhand, then agent\n" {
		t.Fatalf("a.txt: %q", readFile(t, h.dir, "a.txt"))
	}
	s := h.revert("ses_b", u[0])
	if sk := skipped(s); sk["a.txt"] != "changed-between-steps" || readFile(t, h.dir, "a.txt") != "one\nhand, then agent\n" {
		t.Fatalf("revert of both steps: %s, a.txt %q", s.Get("revert.skipped").Raw, readFile(t, h.dir, "a.txt"))
	}
	s = h.revert("ses_b", u[1])
	if len(skipped(s)) != 0 || readFile(t, h.dir, "a.txt") != "one\nhand\n" {
		t.Fatalf("revert of the second step: %s, a.txt %q", s.Get("revert.skipped").Raw, readFile(t, h.dir, "a.txt"))
	}
	h.unrevert("ses_b")
	if readFile(t, h.dir, "a.txt") != "one\nhand, then agent\n" {
		t.Fatalf("after redo a.txt %q", readFile(t, h.dir, "a.txt"))
	}
}

// The trees a collection of the project's snapshots keeps are those of
// the live sessions: a deleted session's go with it.
func TestSnapshotTreesFollowTheSessions(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{writeCall("c1", "a.txt", "A2\n")}}, {Text: "done"}}}
	h := newRevertHarness(t, sc, nil)
	h.send("POST", "/api/session", map[string]any{"id": "ses_k"})
	h.prompt("ses_k", "go", nil)
	msgs := h.waitIdle("ses_k", 1)
	snap := gjson.Get(mustJSONString(ofType(msgs, "assistant")[0]), "snapshot")
	trees, err := h.srv.Sessions().SnapshotTrees(context.Background(), snap.Get("root").String())
	if err != nil || !slices.Contains(trees, snap.Get("start").String()) || !slices.Contains(trees, snap.Get("end").String()) {
		t.Fatalf("kept trees %v (%v), snapshot %s", trees, err, snap.Raw)
	}
	h.revert("ses_k", userIDs(msgs)[0])
	redo := gjson.GetBytes(h.send("GET", "/api/session/ses_k", nil).body, "data.revert.snapshot").String()
	if trees, _ := h.srv.Sessions().SnapshotTrees(context.Background(), snap.Get("root").String()); !slices.Contains(trees, redo) {
		t.Fatalf("the redo point %s is not kept: %v", redo, trees)
	}
	if r := h.send("DELETE", "/api/session/ses_k", nil); r.status != 200 && r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if trees, _ := h.srv.Sessions().SnapshotTrees(context.Background(), snap.Get("root").String()); len(trees) != 0 {
		t.Fatalf("a deleted session's trees are kept: %v", trees)
	}
}

// Commands change files too: a revert puts back what a bash call in the
// sandbox deleted and removes what it created.
func TestRevertUndoesACommand(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "rm b.txt && mkdir -p out && echo made > out/c.txt && echo more >> a.txt"})}},
		{Text: "done"},
	}}
	h := newRevertHarness(t, sc, nil)
	h.runner.SetTools(loop.ToolConfig{Rules: []permission.Rule{{Action: "bash", Resource: "*", Effect: "allow"}}})
	writeFile(t, h.dir, "a.txt", "A\n")
	writeFile(t, h.dir, "b.txt", "B\n")
	h.send("POST", "/api/session", map[string]any{"id": "ses_c"})
	h.prompt("ses_c", "go", nil)
	msgs := h.waitIdle("ses_c", 1)
	if p := toolParts(msgs)[0]; p.Get("state.status").String() != "completed" {
		t.Skipf("the command did not run here: %s", p.Raw)
	}
	snap := gjson.Get(mustJSONString(ofType(msgs, "assistant")[0]), "snapshot")
	if !slices.Equal(stringsOf(snap.Get("files")), []string{"a.txt", "b.txt", "out/c.txt"}) {
		t.Fatalf("the command's snapshot: %s", snap.Raw)
	}
	h.revert("ses_c", userIDs(msgs)[0])
	if readFile(t, h.dir, "a.txt") != "A\n" || readFile(t, h.dir, "b.txt") != "B\n" {
		t.Fatal("not restored")
	}
	if _, err := os.Stat(filepath.Join(h.dir, "out", "c.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the command's file is still there")
	}
}

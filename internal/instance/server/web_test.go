package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/webapp"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// page fetches a web app page with the password (Basic), not following
// redirects.
func (h *srvHarness) page(path string, headers ...string) reply {
	h.t.Helper()
	return h.get(path, append([]string{"Accept", "text/html"}, headers...)...)
}

// csrf reads the CSRF token of a page's forms.
func (h *srvHarness) csrf() string {
	h.t.Helper()
	r := h.page("/")
	m := csrfField.FindSubmatch(r.body)
	if r.status != 200 || m == nil {
		h.t.Fatalf("no csrf token on /: %d %s", r.status, r.body)
	}
	return string(m[1])
}

// post sends a form from the app's own origin (headers may add or
// override).
func (h *srvHarness) post(path string, form url.Values, headers ...string) reply {
	h.t.Helper()
	hs := append([]string{"Content-Type", "application/x-www-form-urlencoded", "Origin", h.ts.URL, "Sec-Fetch-Site", "same-origin"}, headers...)
	return h.do("POST", path, strings.NewReader(form.Encode()), hs...)
}

func wantPage(t *testing.T, r reply, status int, contains ...string) string {
	t.Helper()
	body := string(r.body)
	if r.status != status || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d (%s), want %d: %s", r.status, r.header.Get("Content-Type"), status, body)
	}
	if csp := r.header.Get("Content-Security-Policy"); csp != webapp.ContentSecurityPolicy {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
	for _, s := range contains {
		if !strings.Contains(body, s) {
			t.Fatalf("the page lacks %q:\n%s", s, body)
		}
	}
	return body
}

// TestWebWithoutCredentials: a page request without a cookie or password
// gets the pairing explanation (401, no Basic challenge, no data); a
// wrong password is counted like any guess.
func TestWebWithoutCredentials(t *testing.T) {
	h := newSessHarness(t, nil)
	if r := h.send("POST", "/api/session", map[string]any{"title": "secret-title-42"}); r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for _, p := range []string{"/", "/ui/stats", "/ui/session/ses_0123456789abcdefghijklmnop", "/ui/anything"} {
		r := h.page(p, "auth", "none")
		body := wantPage(t, r, http.StatusUnauthorized, "Pair this browser", "/auth/connect/")
		if r.header.Get("WWW-Authenticate") != "" {
			t.Fatalf("%s: a Basic challenge: %q", p, r.header.Get("WWW-Authenticate"))
		}
		if strings.Contains(body, "secret-title-42") || strings.Contains(body, `name="csrf"`) {
			t.Fatalf("%s: the pairing page shows data: %s", p, body)
		}
	}
	// The stylesheet is served to the pairing page too.
	if r := h.get("/ui/static/app.css", "auth", "none"); r.status != 200 {
		t.Fatalf("stylesheet without credentials: %d", r.status)
	}
	for range AuthFailuresPerAddress {
		r := h.page("/", "Authorization", basicHeader("opencode", "wrong"))
		wantPage(t, r, http.StatusUnauthorized, "Pair this browser")
	}
	if r := h.page("/"); r.status != http.StatusTooManyRequests {
		t.Fatalf("after %d wrong passwords: %d", AuthFailuresPerAddress, r.status)
	}
}

// TestWebPairingPageCommands: the pairing page names commands that run as
// shown: curl with the configured username against the instance's own
// origin (scheme and Host as the request addressed it), then the
// /auth/connect/ link.
func TestWebPairingPageCommands(t *testing.T) {
	h := newSessHarness(t, func(o *Options) {
		o.Auth.Username = "alice"
		o.TrustedProxy = func(r *http.Request) bool { return r.Header.Get("X-Test-Proxy") != "" }
	})
	host := strings.TrimPrefix(h.ts.URL, "http://")
	body := wantPage(t, h.page("/", "auth", "none"), http.StatusUnauthorized, "Pair this browser",
		"curl -u alice -X POST http://"+host+"/api/pair", "http://"+host+"/auth/connect/&lt;code&gt;")
	if strings.Contains(body, "opencode pair") || strings.Contains(body, "$PASSWORD") {
		t.Fatalf("the pairing page names a command that does not exist:\n%s", body)
	}
	// Behind a trusted proxy that terminates TLS the command is https.
	wantPage(t, h.page("/", "auth", "none", "X-Test-Proxy", "1", "X-Forwarded-Proto", "https"), http.StatusUnauthorized,
		"curl -u alice -X POST https://"+host+"/api/pair", "https://"+host+"/auth/connect/&lt;code&gt;")
	// The command from the page, run as shown, makes a code.
	if r := h.do("POST", "/api/pair", nil, "Authorization", basicHeader("alice", testPassword)); r.status != 200 || r.json(t)["code"] == nil {
		t.Fatalf("pair as alice: %d %s", r.status, r.body)
	}
	// A username that is not one shell word is quoted.
	if got, want := webapp.PairCommand("http://127.0.0.1:4096", "o'brien x"), `curl -u 'o'\''brien x' -X POST http://127.0.0.1:4096/api/pair`; got != want {
		t.Fatalf("PairCommand %s, want %s", got, want)
	}
}

// TestWebWithoutPassword: without a password the pages open in a browser
// on this machine with no pairing at all.
func TestWebWithoutPassword(t *testing.T) {
	h := newSessHarness(t, noPassword)
	if r := h.send("POST", "/api/session", map[string]any{"title": "open session"}); r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	body := wantPage(t, h.page("/", "auth", "none"), http.StatusOK, "open session", "New session", `name="csrf"`)
	if strings.Contains(body, "Pair this browser") {
		t.Fatalf("the sessions page asks to pair:\n%s", body)
	}
}

// TestWebPairedBrowser: a pairing link sets the cookie and sends the
// browser to /, where the session list is.
func TestWebPairedBrowser(t *testing.T) {
	h := newSessHarness(t, nil)
	if r := h.send("POST", "/api/session", map[string]any{"title": "first session"}); r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	code := h.pairCode()
	r := h.get("/auth/connect/"+code, "auth", "none", "Accept", "text/html")
	if r.status != http.StatusFound || r.header.Get("Location") != "/" {
		t.Fatalf("connect: %d %v", r.status, r.header)
	}
	cookie := (&http.Response{Header: r.header}).Cookies()[0]
	wantPage(t, h.page("/", "auth", "none", "Cookie", cookie.Name+"="+cookie.Value), http.StatusOK, "first session", "New session")
	// A cookie sent with a cross-origin request is not honoured: the
	// request is refused before authentication.
	r = h.page("/", "auth", "none", "Cookie", cookie.Name+"="+cookie.Value, "Origin", "https://evil.example")
	wantPage(t, r, http.StatusForbidden, "another origin")
}

// TestWebFormsRefuseForgeries: a form without the CSRF token, with
// another, or sent from another origin changes nothing.
func TestWebFormsRefuseForgeries(t *testing.T) {
	h := newSessHarness(t, nil)
	tok := h.csrf()
	count := func() int {
		r := h.send("GET", "/api/session", nil)
		return len(gjson.GetBytes(r.body, "data").Array())
	}
	cases := []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"no token", url.Values{"title": {"x"}}, nil},
		{"another token", url.Values{"title": {"x"}, "csrf": {"AAAA" + tok[4:]}}, nil},
		{"cross-site", url.Values{"title": {"x"}, "csrf": {tok}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"other origin", url.Values{"title": {"x"}, "csrf": {tok}}, []string{"Origin", "https://evil.example", "Sec-Fetch-Site", ""}},
	}
	for _, c := range cases {
		r := h.post("/ui/sessions", c.form, c.headers...)
		wantPage(t, r, http.StatusForbidden)
		if n := count(); n != 0 {
			t.Fatalf("%s: %d sessions created", c.name, n)
		}
	}
	r := h.post("/ui/sessions", url.Values{"title": {"made in the page"}, "csrf": {tok}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/ui/session/ses") {
		t.Fatalf("create: %d %v %s", r.status, r.header, r.body)
	}
	if count() != 1 {
		t.Fatal("the session was not created")
	}
	// A password change invalidates the token of open pages.
	h2 := newSessHarness(t, func(o *Options) { o.Auth = &Auth{Password: "another", Clock: h.clk} })
	r = h2.post("/ui/sessions", url.Values{"title": {"x"}, "csrf": {tok}}, "Authorization", basicHeader("opencode", "another"))
	wantPage(t, r, http.StatusForbidden)
}

// TestWebSessionIDs: a session id of another format, or one that does
// not exist, is a 404 page.
func TestWebSessionIDs(t *testing.T) {
	h := newSessHarness(t, nil)
	tok := h.csrf()
	for _, p := range []string{"/ui/session/msg_0123456789abcdefghijklmn", "/ui/session/..%2f..%2fetc", "/ui/session/ses_nope",
		"/ui/session/ses_0123456789abcdefghijklmnop/live", "/ui/nowhere", "/ui/session/"} {
		wantPage(t, h.page(p), http.StatusNotFound)
	}
	wantPage(t, h.post("/ui/session/ses_0123456789abcdefghijklmnop/rename", url.Values{"title": {"x"}, "csrf": {tok}}), http.StatusNotFound)
}

// TestWebSessionOperations: rename, fork, export and delete (after a
// confirmation page) from the pages; the list nests children and
// searches titles.
func TestWebSessionOperations(t *testing.T) {
	h := newSessHarness(t, nil)
	tok := h.csrf()
	pinfo := &session.Info{ID: "ses_0000000000000000000parent", Title: "parent one", Time: session.Time{Created: 1_770_000_000_000, Updated: 1_770_000_000_000}}
	if _, err := h.srv.Sessions().Import(t.Context(), pinfo, []json.RawMessage{json.RawMessage(
		`{"id":"msg_00000000000000000000000001","type":"user","text":"hello","time":{"created":1770000000000}}`)}, h.dir); err != nil {
		t.Fatal(err)
	}
	parent := pinfo.ID
	r := h.send("POST", "/api/session", map[string]any{"title": "empty"})
	wantPage(t, h.post("/ui/session/"+gjson.GetBytes(r.body, "data.id").String()+"/fork", url.Values{"csrf": {tok}}), http.StatusBadRequest, "no messages to fork")
	r = h.send("POST", "/api/session", map[string]any{"title": "child of one", "parentID": parent})
	child := gjson.GetBytes(r.body, "data.id").String()
	h.send("POST", "/api/session", map[string]any{"title": "unrelated"})

	body := wantPage(t, h.page("/"), http.StatusOK, "parent one", "child of one", "unrelated")
	if i, j := strings.Index(body, "parent one"), strings.Index(body, "child of one"); !strings.Contains(body[i:], `class="children"`) || j < i {
		t.Fatalf("the child is not listed under its parent:\n%s", body)
	}
	body = wantPage(t, h.page("/?search=UNREL"), http.StatusOK, "unrelated")
	if strings.Contains(body, "parent one") {
		t.Fatal("search did not filter")
	}
	wantPage(t, h.page("/?cursor=bm90LWpzb24"), http.StatusBadRequest, "Invalid cursor")

	r = h.post(fmt.Sprintf("/ui/session/%s/rename", parent), url.Values{"title": {"renamed <b>parent</b>"}, "csrf": {tok}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("rename: %d %s", r.status, r.body)
	}
	wantPage(t, h.page(r.header.Get("Location")), http.StatusOK, "renamed &lt;b&gt;parent&lt;/b&gt;", "Session renamed.")
	wantPage(t, h.post("/ui/session/"+parent+"/rename", url.Values{"title": {" "}, "csrf": {tok}}), http.StatusBadRequest)

	r = h.post("/ui/session/"+parent+"/fork", url.Values{"csrf": {tok}})
	fork := strings.TrimPrefix(strings.Split(r.header.Get("Location"), "?")[0], "/ui/session/")
	if r.status != http.StatusSeeOther || fork == parent || !strings.HasPrefix(fork, "ses") {
		t.Fatalf("fork: %d %v", r.status, r.header)
	}

	r = h.page("/ui/session/" + parent + "/export")
	if r.status != 200 || gjson.GetBytes(r.body, "data.info.id").String() != parent || !strings.Contains(r.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("export: %d %v %s", r.status, r.header, r.body)
	}

	wantPage(t, h.page("/ui/session/"+parent+"/delete"), http.StatusOK, "Delete the session")
	r = h.post("/ui/session/"+parent+"/delete", url.Values{"csrf": {tok}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/?done=deleted") {
		t.Fatalf("delete: %d %v", r.status, r.header)
	}
	for _, id := range []string{parent, child} {
		if r := h.send("GET", "/api/session/"+id, nil); r.status != 404 {
			t.Fatalf("%s after delete: %d", id, r.status)
		}
	}
}

// TestWebHugeTranscript: a session of 500 messages shows the newest
// page; older ones are a link away, and paging back and forth covers
// them all once.
func TestWebHugeTranscript(t *testing.T) {
	h := newSessHarness(t, nil)
	var msgs []json.RawMessage
	for i := range 500 {
		msgs = append(msgs, json.RawMessage(fmt.Sprintf(`{"id":"msg_%026d","type":"user","text":"line-%03d.","time":{"created":%d}}`,
			i+1, i, 1_770_000_000_000+int64(i))))
	}
	info := &session.Info{ID: "ses_0000000000000000000000huge", Title: "huge", Time: session.Time{Created: 1_770_000_000_000, Updated: 1_770_000_000_000}}
	if _, err := h.srv.Sessions().Import(t.Context(), info, msgs, h.dir); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	next := "/ui/session/" + info.ID
	pages := 0
	for next != "" {
		body := wantPage(t, h.page(next), http.StatusOK)
		lines := regexp.MustCompile(`line-(\d{3})\.`).FindAllStringSubmatch(body, -1)
		if len(lines) > 50 {
			t.Fatalf("a page shows %d messages", len(lines))
		}
		for i, l := range lines {
			if seen[l[1]] {
				t.Fatalf("line %s shown twice", l[1])
			}
			seen[l[1]] = true
			if i > 0 && l[1] < lines[i-1][1] {
				t.Fatalf("not oldest first: %s after %s", l[1], lines[i-1][1])
			}
		}
		if pages == 0 && (!strings.Contains(body, "line-499.") || strings.Contains(body, "line-000.")) {
			t.Fatal("the first page is not the newest messages")
		}
		m := regexp.MustCompile(`href="([^"]+)" rel="prev"`).FindStringSubmatch(body)
		next = ""
		if m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
		if pages++; pages > 20 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 500 {
		t.Fatalf("paging showed %d of 500 messages", len(seen))
	}
}

// TestWebMarkdownAndToolOutputAreInert: an answer whose Markdown carries
// HTML, a script and javascript: links, and a tool whose output carries
// HTML, render as text; the prompt, the ask and the answer all go through
// the pages.
func TestWebAgentJourneyAndInertOutput(t *testing.T) {
	answer := "**Done.** <script>alert('md')</script> <img src=x onerror=alert(1)> [click](javascript:alert(2)) `code`"
	sc := &script{steps: []fakeprovider.Step{
		{Text: "Writing it.", Calls: []fakeprovider.Call{call("call_w", "bash", map[string]any{
			"command": "printf '<img src=y onerror=alert(3)>' > out.html && cat out.html", "description": "write <b>html</b>"})}},
		{Text: answer},
	}}
	h := newAgentHarness(t, "chat", sc)
	tok := h.csrf()
	r := h.post("/ui/sessions", url.Values{"title": {"journey"}, "csrf": {tok}})
	id := strings.TrimPrefix(r.header.Get("Location"), "/ui/session/")
	if r.status != http.StatusSeeOther || session.CheckID("id", id) != nil {
		t.Fatalf("create: %d %v %s", r.status, r.header, r.body)
	}
	wantPage(t, h.post("/ui/session/"+id+"/prompt", url.Values{"text": {""}, "csrf": {tok}}), http.StatusBadRequest)
	wantPage(t, h.post("/ui/session/"+id+"/prompt", url.Values{"text": {"x"}, "delivery": {"later"}, "csrf": {tok}}), http.StatusBadRequest)
	if r := h.post("/ui/session/"+id+"/prompt", url.Values{"text": {"write the file"}, "delivery": {"steer"}, "csrf": {tok}}); r.status != http.StatusSeeOther {
		t.Fatalf("prompt: %d %s", r.status, r.body)
	}
	ask := h.waitPending("/permission?sessionID=" + id)
	live := wantPage(t, h.page("/ui/session/"+id+"/live"), http.StatusOK, "ask-"+ask.Get("id").String(), "Allow once")
	if strings.Contains(live, "<html") {
		t.Fatal("the live part is a whole page")
	}
	wantPage(t, h.post("/ui/session/"+id+"/permission/"+ask.Get("id").String(), url.Values{"reply": {"sometimes"}, "csrf": {tok}}), http.StatusBadRequest)
	if r := h.post("/ui/session/"+id+"/permission/"+ask.Get("id").String(), url.Values{"reply": {"once"}, "csrf": {tok}}); r.status != http.StatusSeeOther {
		t.Fatalf("reply: %d %s", r.status, r.body)
	}
	// Answered once: a second answer is refused.
	wantPage(t, h.post("/ui/session/"+id+"/permission/"+ask.Get("id").String(), url.Values{"reply": {"once"}, "csrf": {tok}}), http.StatusConflict, "already answered")
	wantPage(t, h.post("/ui/session/"+id+"/permission/per_nope", url.Values{"reply": {"once"}, "csrf": {tok}}), http.StatusNotFound, "no longer pending")
	h.waitIdle(id, 1)
	if b, err := os.ReadFile(filepath.Join(h.dir, "out.html")); err != nil || string(b) != "<img src=y onerror=alert(3)>" {
		t.Fatalf("out.html: %q %v", b, err)
	}
	body := wantPage(t, h.page("/ui/session/"+id), http.StatusOK, "<strong>Done.</strong>", "<code>code</code>",
		"&lt;img src=y onerror=alert(3)&gt;", "write the file", "Run succeeded")
	for _, bad := range []string{"<script>alert", "<img src=x", "<img src=y", "javascript:", "<b>html</b>"} {
		if strings.Contains(body, bad) {
			t.Fatalf("the page carries %q live:\n%s", bad, body)
		}
	}
	if strings.Contains(wantPage(t, h.page("/ui/session/"+id+"/live"), http.StatusOK), "ask-") {
		t.Fatal("a settled ask is still shown")
	}
}

// TestWebQuestionForm: a question tool's form shows in the page and is
// answered there; a form settled elsewhere disappears from it.
func TestWebQuestionForm(t *testing.T) {
	q := map[string]any{"questions": []any{map[string]any{"question": "Which color?", "header": "Color",
		"options": []any{map[string]any{"label": "red", "description": "warm"}, map[string]any{"label": "blue", "description": "cold"}}}}}
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("call_q", "question", q)}},
		{Text: "Got it."},
		{Calls: []fakeprovider.Call{call("call_q2", "question", q)}},
		{Text: "Fine."},
	}}
	h := newAgentHarness(t, "chat", sc)
	tok := h.csrf()
	r := h.send("POST", "/api/session", map[string]any{"title": "forms"})
	id := gjson.GetBytes(r.body, "data.id").String()
	h.prompt(id, "ask me", nil)
	form := h.waitPending("/question?sessionID=" + id)
	wantPage(t, h.page("/ui/session/"+id+"/live"), http.StatusOK, "Which color?", `value="red"`, "form-"+form.Get("id").String())
	if r := h.post("/ui/session/"+id+"/question/"+form.Get("id").String(), url.Values{"q0": {"blue"}, "csrf": {tok}}); r.status != http.StatusSeeOther {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	msgs := h.waitIdle(id, 1)
	raw, _ := json.Marshal(msgs)
	if !strings.Contains(string(raw), "blue") {
		t.Fatalf("the answer did not reach the tool: %s", raw)
	}
	// The second form is answered through the API: the page drops it.
	h.prompt(id, "again", nil)
	form = h.waitPending("/question?sessionID=" + id)
	if r := h.send("POST", "/question/"+form.Get("id").String()+"/reply", map[string]any{"answers": [][]string{{"red"}}}); r.status != 200 {
		t.Fatalf("API answer: %d %s", r.status, r.body)
	}
	if strings.Contains(wantPage(t, h.page("/ui/session/"+id+"/live"), http.StatusOK), "form-"+form.Get("id").String()) {
		t.Fatal("a form answered elsewhere is still shown")
	}
	wantPage(t, h.post("/ui/session/"+id+"/question/"+form.Get("id").String(), url.Values{"q0": {"red"}, "csrf": {tok}}), http.StatusConflict, "already answered")
}

// TestWebStats: the stats page charts steps by day in the chosen time
// zone and lists tool reliability; a bad zone or range is a 400 page.
func TestWebStats(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "echo hi"})}}, {Text: "ok"}}}
	h := newAgentHarness(t, "chat", sc)
	r := h.send("POST", "/api/session", map[string]any{"title": "stats", "permissions": []any{map[string]any{"action": "*", "resource": "*", "effect": "allow"}}})
	id := gjson.GetBytes(r.body, "data.id").String()
	h.prompt(id, "go", nil)
	h.waitIdle(id, 1)
	body := wantPage(t, h.page("/ui/stats?days=7&tz=Pacific/Kiritimati"), http.StatusOK, "Pacific/Kiritimati", "<svg", "bash", "100%")
	if n := strings.Count(body, `<rect class="bar"`); n != 7 {
		t.Fatalf("%d bars for 7 days", n)
	}
	if !regexp.MustCompile(`: 2 steps</title>`).MatchString(body) {
		t.Fatalf("the day's two steps are not charted:\n%s", body)
	}
	wantPage(t, h.page("/ui/stats?tz=Mars/Olympus"), http.StatusBadRequest, "unknown time zone")
	wantPage(t, h.page("/ui/stats?days=3"), http.StatusBadRequest)
}

// TestWebStaticFiles: the script and stylesheet are served with a type;
// a directory is not listed.
func TestWebStaticFiles(t *testing.T) {
	h := newSrvHarness(t, nil)
	for path, typ := range map[string]string{"/ui/static/app.js": "text/javascript", "/ui/static/app.css": "text/css"} {
		r := h.get(path)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), typ) {
			t.Fatalf("%s: %d %s", path, r.status, r.header.Get("Content-Type"))
		}
	}
	wantPage(t, h.page("/ui/static/"), http.StatusNotFound)
}

// TestWebRunOutcomesCountsAndMoney: the sessions list and the session
// page name a run in which a permission was rejected "rejected" (saying
// whether it stopped there), never "succeeded"; counts take the singular
// for one; every cost has one format ("$0.00" for none, four decimals
// below a dollar).
func TestWebRunOutcomesCountsAndMoney(t *testing.T) {
	sc := &script{steps: []fakeprovider.Step{
		{Calls: []fakeprovider.Call{call("c1", "bash", map[string]any{"command": "rm -rf build"})}},
		{Calls: []fakeprovider.Call{call("c2", "bash", map[string]any{"command": "rm -rf dist"})}},
		{Text: "Understood."},
	}}
	h := newAgentHarness(t, "chat", sc)
	r := h.send("POST", "/api/session", map[string]any{"title": "rejecting"})
	id := gjson.GetBytes(r.body, "data.id").String()
	h.send("POST", "/api/session", map[string]any{"title": "a child", "parentID": id})
	h.send("POST", "/api/session", map[string]any{"title": "untouched"})

	// Rejected without a word: the run stops at the call, after 1 step.
	h.prompt(id, "clean up", nil)
	req := h.waitPending("/permission")
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "reject"}); r.status != 200 {
		t.Fatal(r.body)
	}
	h.waitIdle(id, 1)
	if info, _ := h.getSession(id); info.Outcome != "succeeded" || *info.Steps != 1 {
		t.Fatalf("recorded: %q, %d steps", info.Outcome, *info.Steps)
	}
	list := wantPage(t, h.page("/"), http.StatusOK, `<span class="badge rejected" title="a permission was rejected: the run stopped there">rejected</span>`,
		"1 step<", "$0.0001", "$0.00<", "0 steps", "0 tokens")
	session := wantPage(t, h.page("/ui/session/"+id), http.StatusOK, "Last run: rejected (a permission was rejected: the run stopped there)",
		"Run rejected (a permission was rejected: the run stopped there)", "1 step<")
	for _, page := range []string{list, session} {
		for _, bad := range []string{">succeeded<", "1 steps", ">$0<", "$0.0000", "Run succeeded", "Last run: succeeded"} {
			if strings.Contains(page, bad) {
				t.Fatalf("the page says %q:\n%s", bad, page)
			}
		}
	}

	// Rejected with feedback: the agent goes on and answers.
	h.prompt(id, "then the other one", nil)
	req = h.waitPending("/permission")
	if r := h.send("POST", "/permission/"+req.Get("id").String()+"/reply", map[string]any{"reply": "reject", "message": "not now"}); r.status != 200 {
		t.Fatal(r.body)
	}
	h.waitIdle(id, 2)
	wantPage(t, h.page("/"), http.StatusOK, `title="a permission was rejected: the agent went on with the feedback">rejected</span>`, "3 steps")
	wantPage(t, h.page("/ui/session/"+id), http.StatusOK, "Run rejected (a permission was rejected: the run stopped there)",
		"Run rejected (a permission was rejected: the agent went on with the feedback)")

	// A run with nothing rejected succeeded.
	h.prompt(id, "thanks", nil)
	h.waitIdle(id, 3)
	list = wantPage(t, h.page("/"), http.StatusOK, `<span class="badge succeeded">succeeded</span>`, "4 steps")
	if strings.Contains(list, "badge rejected") {
		t.Fatalf("a run with nothing rejected is called rejected:\n%s", list)
	}
}

// TestWebLastRunAcrossPages: a session's last run is read back to the run
// before, over several pages of messages: a rejection early in a long
// last run names it, one in the run before does not.
func TestWebLastRunAcrossPages(t *testing.T) {
	h := newSessHarness(t, nil)
	tool := func(errType string) map[string]any {
		return map[string]any{"type": "tool", "id": "c", "name": "bash", "time": map[string]any{"created": 1, "completed": 1},
			"state": map[string]any{"status": "error", "input": map[string]any{}, "error": map[string]any{"type": errType, "message": "m"}}}
	}
	doc := func(id, title string, early, late bool) map[string]any {
		var msgs []any
		n := 0
		add := func(m map[string]any) {
			m["id"] = fmt.Sprintf("msg_%04d", n)
			m["time"] = map[string]any{"created": n + 1, "completed": n + 1}
			n++
			msgs = append(msgs, m)
		}
		assistant := func(parts ...any) map[string]any {
			return map[string]any{"type": "assistant", "agent": "build", "model": map[string]any{"id": "m", "providerID": "p"},
				"content": append([]any{map[string]any{"type": "text", "text": "working"}}, parts...)}
		}
		add(map[string]any{"type": "user", "text": "first"})
		if early {
			add(assistant(tool("PermissionCorrectedError")))
		}
		add(map[string]any{"type": "idle", "outcome": "succeeded"})
		add(map[string]any{"type": "user", "text": "second"})
		if late {
			add(assistant(tool("PermissionCorrectedError")))
		}
		for range 60 {
			add(assistant())
		}
		add(map[string]any{"type": "idle", "outcome": "succeeded"})
		return map[string]any{"location": map[string]any{"directory": h.dir}, "messages": msgs, "info": map[string]any{
			"id": id, "title": title, "projectID": "x", "cost": 0, "outcome": "succeeded",
			"tokens": map[string]any{"input": 0, "output": 0, "reasoning": 0, "cache": map[string]any{"read": 0, "write": 0}},
			"time":   map[string]any{"created": 1, "updated": 1, "idle": 1}, "location": map[string]any{"directory": h.dir}}}
	}
	for _, d := range []map[string]any{doc("ses_late", "late rejection", false, true), doc("ses_early", "early rejection", true, false)} {
		if r := h.send("POST", "/api/experimental/session/import", d); r.status != 200 {
			t.Fatalf("import: %d %s", r.status, r.body)
		}
	}
	list := wantPage(t, h.page("/"), http.StatusOK)
	row := func(title string) string {
		i := strings.Index(list, ">"+title+"</a>")
		if i < 0 {
			t.Fatalf("no row %q:\n%s", title, list)
		}
		end := strings.Index(list[i:], "</li>")
		return list[i : i+end]
	}
	if r := row("late rejection"); !strings.Contains(r, ">rejected</span>") {
		t.Fatalf("a rejection 60 messages before the end of the last run: %s", r)
	}
	if r := row("early rejection"); !strings.Contains(r, ">succeeded</span>") {
		t.Fatalf("a rejection in the run before: %s", r)
	}
}

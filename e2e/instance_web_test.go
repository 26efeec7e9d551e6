package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// TestBrowserInstanceWebApp is the instance web app as a person uses it,
// in Chromium against the real binary: an unpaired browser gets the
// pairing page; a pairing link lands it on the sessions list; it creates a
// session, prompts it, watches the answer stream in with its tool parts,
// allows the bash ask in the page and finds the file fixed on disk. Then
// its connections are cut (a proxy between it and the instance) while the
// agent asks again, and the page catches up after the reconnect; the stats, sessions and delete pages are saved
// as screenshots at desktop and phone widths.
func TestBrowserInstanceWebApp(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	dir := browserReady(t, ctx)
	shots := screenshotDir(t)
	const secret = "sk-provider-web-SECRET"
	s, tn, p := fakeWorkspace(t, ctx, "Web", secret)
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	const answer = "Fixed: Add adds now."
	steps := []fakeprovider.Step{
		{Text: "Let me look at the code first.", Calls: []fakeprovider.Call{{ID: "call_read", Name: "read", Args: args(map[string]any{"filePath": "add.go"})}}},
		{Calls: []fakeprovider.Call{{ID: "call_edit", Name: "edit", Args: args(map[string]any{"filePath": "add.go", "oldString": "return a - b", "newString": "return a + b"})}}},
		{Calls: []fakeprovider.Call{{ID: "call_cat", Name: "bash", Args: args(map[string]any{"command": "cat add.go", "description": "show the fix"})}}},
		{Text: answer},
		{Calls: []fakeprovider.Call{{ID: "call_again", Name: "bash", Args: args(map[string]any{"command": "echo again", "description": "once more"})}}},
		{Text: "Understood, I will not run it."},
	}
	var mu sync.Mutex
	var bodies []string
	// A delay between stream events, so that the page sees the answer
	// arrive in pieces; the first answer waits until the page that sent
	// the prompt has surely connected its event stream.
	// The session is created untitled: the title agent's request is
	// answered "web journey", apart from the counted steps.
	p.SetBehavior(fakeprovider.Behavior{Delay: 200 * time.Millisecond, Script: answerTitles("web journey", func(body []byte) fakeprovider.Step {
		mu.Lock()
		bodies = append(bodies, string(body))
		n := len(bodies) - 1
		mu.Unlock()
		if n == 0 {
			time.Sleep(2 * time.Second)
		}
		if n < len(steps) {
			return steps[n]
		}
		return fakeprovider.Step{Text: "done"}
	})})
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "add.go"), []byte("package calc\n\nfunc Add(a, b int) int { return a - b }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gi := s.gatewayInstance(t, ctx, tn, p, secret, project, "")
	st, b, _ := call(ctx, httpClient, "POST", gi.base+"/api/pair", gi.auth, nil)
	code := gjson.GetBytes(b, "code").String()
	if st != 200 || code == "" {
		t.Fatalf("pair: %d %s", st, b)
	}

	// The browser reaches the instance through a proxy the scenario can cut.
	proxy := startCutProxy(t, strings.TrimPrefix(gi.base, "http://"))
	out := runBrowser(t, ctx, dir, "instance", map[string]string{
		"INSTANCE_URL": "http://" + proxy.addr, "NETWORK_CONTROL": proxy.control, "INSTANCE_API": gi.base, "PAIR_PATH": "/auth/connect/" + code, "INSTANCE_AUTH": "opencode:pw-e2e",
		"PROMPT": "make Add add", "PROMPT2": "run it again", "EXPECT_ANSWER": answer, "EXPECT_TITLE": "web journey", "SCREENSHOT_DIR": shots,
	})
	if out["unpaired_status"] != float64(401) || out["unpaired_title"] != "Pair this browser" {
		t.Errorf("unpaired browser: %v %v", out["unpaired_status"], out["unpaired_title"])
	}
	if out["landed"] != "/" {
		t.Errorf("after pairing the browser is at %v", out["landed"])
	}
	if s, _ := out["streamed_text"].(string); !strings.HasPrefix("Let me look at the code first.", s) || s == "" {
		t.Errorf("streamed text %q: want a prefix of the first step's text", s)
	}
	if a, _ := out["ask_text"].(string); !strings.Contains(a, "bash") || !strings.Contains(a, "cat add.go") {
		t.Errorf("the ask in the page: %q", a)
	}
	if out["live_without_reload"] != true || out["reconnected_without_reload"] != true {
		t.Errorf("the page reloaded instead of following the stream: %v %v", out["live_without_reload"], out["reconnected_without_reload"])
	}
	if parts := strs(out["tool_parts_done"]); !slices.Equal(parts, []string{"read", "edit", "bash"}) {
		t.Errorf("tool parts in the page: %v", parts)
	}
	if out["ask_while_offline"] != false {
		t.Errorf("the page showed the second ask while its stream was down: the drop was not a drop")
	}
	if n, _ := out["stats_bars"].(float64); n != 7 || !slices.Contains(strs(out["stats_tools"]), "bash") {
		t.Errorf("stats page: %v bars, tools %v", out["stats_bars"], out["stats_tools"])
	}
	if l := strs(out["listed"]); !slices.Contains(l, "web journey") {
		t.Errorf("sessions list: %v", l)
	}
	// The title agent's title replaced the placeholder in the open page.
	if b, _ := out["title_before"].(string); !strings.HasPrefix(b, "New session - ") || out["title_live"] != "web journey" {
		t.Errorf("the session page's title: %q, then %v", b, out["title_live"])
	}
	// The page loaded by the ask's answer rendered the running turn, and
	// its stream opened only after the run had ended: it caught up.
	if out["rendered_running"] != true {
		t.Errorf("the page after the answer did not render a running turn: the held stream tested nothing")
	}
	if s, _ := out["status_after_open"].(string); !strings.HasPrefix(s, "Last run: succeeded") {
		t.Errorf("status after the stream opened: %q", s)
	}
	// The last run's ask was rejected (with a reason): the list says so.
	if o := strs(out["listed_outcomes"]); !slices.Equal(o, []string{"rejected"}) {
		t.Errorf("sessions list outcomes: %v", o)
	}
	if got, _ := os.ReadFile(filepath.Join(project, "add.go")); !strings.Contains(string(got), "return a + b") {
		t.Errorf("add.go on disk: %s", got)
	}
	// The reject's message reached the model with the refused call.
	mu.Lock()
	if len(bodies) < 6 || !strings.Contains(bodies[5], "not now") {
		t.Errorf("the model did not read the rejection: %d requests", len(bodies))
	}
	mu.Unlock()
	if out["error_status"] != float64(404) {
		t.Errorf("a path that does not exist: %v", out["error_status"])
	}
	pages := []string{"instance-pair", "instance-session-ask", "instance-session", "instance-stats", "instance-sessions", "instance-delete", "instance-error"}
	wantScreenshots(t, shots, pages...)
	wantLayout(t, out, []string{"instance-stats"}, pages...)
	if strings.Contains(s.stderr.String(), secret) || strings.Contains(s.stderr.String(), "pw-e2e") {
		t.Fatal("a secret is in the log")
	}
}

// strs is a JSON array of strings.
func strs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

// cutProxy forwards TCP connections on loopback to an address; its
// control endpoint cuts every open connection and refuses new ones
// (POST /cut) until POST /resume, as a network drop does.
type cutProxy struct {
	addr, control string
	mu            sync.Mutex
	conns         map[net.Conn]bool
	down          bool
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns[c] = true
			p.mu.Unlock()
			go p.pipe(c, to)
		}
	}()
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch r.URL.Path {
		case "/cut":
			p.down = true
			for c := range p.conns {
				c.Close()
				delete(p.conns, c)
			}
		case "/resume":
			p.down = false
		default:
			http.NotFound(w, r)
		}
	}))
	p.control = ctl.URL
	t.Cleanup(func() { ln.Close(); ctl.Close() })
	return p
}

func (p *cutProxy) pipe(c net.Conn, to string) {
	up, err := net.Dial("tcp", to)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = true
	p.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

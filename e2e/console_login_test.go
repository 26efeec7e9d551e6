package e2e

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// TestOpenCodeConsoleLogin: the released OpenCode CLI signs in to the
// Console with `opencode console login` (the device code approved by the
// person on the web page, in headless Chromium), then `opencode run` answers through the gateway
// with the workspace config the CLI fetched itself — no hand-written
// opencode.json — metered against the person, with the Console's MCP
// server added from the same config.
func TestOpenCodeConsoleLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs the OpenCode CLI")
	}
	ctx := testContext(t, 4*time.Minute)
	oc := opencodeBinary(t, ctx)
	// Access tokens live 12 s, so that a run started after that has to
	// refresh (OpenCode refreshes an expired token when it starts).
	s := startServer(t, ctx, caddyBinary(t), config{AccessLog: true, AccessTokenTTL: "12s"})
	d := &deviceSite{s: s, base: "http://" + s.httpAddr, tn: s.bootstrap(t, ctx, "ConsoleLogin")}
	ws := "/agentgate/workspaces/" + d.tn.Workspace

	const secret = "sk-provider-console-login-SECRET"
	p, connID := fakeConnection(t, ctx, s, ws, "anthropic", "/v1", secret,
		map[string]any{"claude-sonnet": map[string]any{"limit": map[string]any{"output": 2000}, "pricing": map[string]any{"input": 3, "output": 15}}})
	conn := idName{ID: connID}

	env := opencodeEnv(t)
	project := t.TempDir()
	login := exec.CommandContext(ctx, oc, "console", "login", d.base)
	login.Dir, login.Env = project, env
	out, _ := login.StdoutPipe()
	login.Stderr = login.Stdout
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var printed strings.Builder
	codeCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		code := regexp.MustCompile(`[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}`)
		for sc.Scan() {
			mu.Lock()
			printed.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if c := code.FindString(sc.Text()); c != "" {
				select {
				case codeCh <- c:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	var userCode string
	select {
	case userCode = <-codeCh:
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("opencode console login printed no user code:\n%s", printed.String())
	}
	// The person approves in headless Chromium, on the page the CLI named.
	browser := runBrowser(t, ctx, browserReady(t, ctx), "device", map[string]string{
		"AGENTGATE_CONSOLE_URL": d.base, "AGENTGATE_EMAIL": d.tn.Email, "AGENTGATE_PASSWORD": d.tn.Password,
		"VERIFICATION_URI": "/device?user_code=" + userCode, "USER_CODE": userCode, "SCREENSHOT_DIR": screenshotDir(t),
	})
	if browser["client_shown"] != "opencode-cli" {
		t.Fatalf("the device page named the client %v", browser["client_shown"])
	}
	loggedIn := time.Now()
	if err := login.Wait(); err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("opencode console login: %v\n%s\nserver log:\n%s", err, printed.String(), tail(s.stderr.String(), 30))
	}

	// The CLI now runs from the workspace config it fetched.
	run := exec.CommandContext(ctx, oc, "run", "--model", conn.ID+"/claude-sonnet", "Say hello")
	run.Dir, run.Env = project, env
	b, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(b), fakeprovider.Text) {
		t.Fatalf("opencode run after console login: %v\n%s\nserver log:\n%s", err, b, tail(s.stderr.String(), 30))
	}
	last := p.Last()
	if gjson.GetBytes(last.Body, "max_tokens").Int() != 2000 || last.Header.Get("X-Api-Key") != secret {
		t.Errorf("the provider got max_tokens %d: %s", gjson.GetBytes(last.Body, "max_tokens").Int(), last.Body)
	}
	// The config's mcp entry made OpenCode open the Console's MCP server
	// with its token.
	if !regexp.MustCompile(`"uri":"/mcp".*"status":200`).MatchString(s.stderr.String()) {
		t.Errorf("OpenCode did not initialize the Console's MCP server:\n%s", tail(s.stderr.String(), 20))
	}
	// Past the access token's lifetime OpenCode refreshes it (a JSON
	// refresh_token grant) and runs again.
	time.Sleep(time.Until(loggedIn.Add(13 * time.Second)))
	run = exec.CommandContext(ctx, oc, "run", "--model", conn.ID+"/claude-sonnet", "Say hello again")
	run.Dir, run.Env = project, env
	if b, err := run.CombinedOutput(); err != nil || !strings.Contains(string(b), fakeprovider.Text) {
		t.Fatalf("opencode run past the token's lifetime: %v\n%s\nserver log:\n%s", err, b, tail(s.stderr.String(), 30))
	}
	if !regexp.MustCompile(`"uri":"/auth/device/token".*"status":200`).MatchString(s.stderr.String()) || strings.Count(s.stderr.String(), `"uri":"/auth/device/token"`) < 2 {
		t.Errorf("no refresh seen in the access log")
	}
	// Metered against the person who signed in. (Tokens here live 12 s: a
	// fresh one reads.)
	var fresh struct {
		AccessToken string `json:"access_token"`
	}
	fresh2 := func() string {
		must(t, "issue a token", 201, &fresh)(s.admin(ctx, "POST", "/agentgate/people/"+d.tn.Person+"/tokens", map[string]any{"workspace": d.tn.Workspace}))
		return fresh.AccessToken
	}
	st, body, err := s.console(ctx, "GET", "/api/v1/usage?limit=100", fresh2(), nil)
	if err != nil || st != 200 || !strings.Contains(string(body), `"member_id":"`+d.tn.Person+`"`) {
		t.Fatalf("usage: %d %v %s", st, err, body)
	}
	// console logout forgets the sign-in on this machine only: the
	// Console still lists it until the person revokes it.
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	logout := exec.CommandContext(lctx, oc, "console", "logout", d.tn.Email)
	logout.Dir, logout.Env = project, env
	if b, err := logout.CombinedOutput(); err != nil {
		t.Fatalf("opencode console logout: %v\n%s", err, b)
	}
	st, body, err = s.console(ctx, "GET", "/api/v1/sign-ins", fresh2(), nil)
	if err != nil || st != 200 || !strings.Contains(string(body), `"client_id":"opencode-cli"`) {
		t.Fatalf("sign-ins after logout: %d %v %s", st, err, body)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range strings.Split(printed.String(), "\n") {
		for _, m := range []string{"Go to", "Enter code", "Logged in as"} {
			if i := strings.Index(l, m); i >= 0 {
				t.Logf("opencode console login: %s", l[i:])
			}
		}
	}
}

// TestOpenCodeAuthLogin: `opencode auth login <console_url>` reads
// /.well-known/opencode, keeps the member's key (from AGENTGATE_API_KEY in
// its environment), and from then on `opencode run` — with the key gone
// from the environment — loads the workspace config from the Console and
// answers through the gateway.
func TestOpenCodeAuthLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs the OpenCode CLI")
	}
	ctx := testContext(t, 3*time.Minute)
	oc := opencodeBinary(t, ctx)
	s := startServer(t, ctx, caddyBinary(t), config{})
	tn := s.bootstrap(t, ctx, "AuthLogin")
	ws := "/agentgate/workspaces/" + tn.Workspace
	key := inferenceKey(t, ctx, s, ws)
	const secret = "sk-provider-auth-login-SECRET"
	p, connID := fakeConnection(t, ctx, s, ws, "openai-compatible", "/v1", secret,
		map[string]any{"llama": map[string]any{"pricing": map[string]any{"input": 1, "output": 1}}})
	conn := idName{ID: connID}
	base := "http://" + s.httpAddr

	// The document names no secret.
	st, doc, err := call(ctx, httpClient, "GET", base+"/.well-known/opencode", nil, nil)
	if err != nil || st != 200 || gjson.GetBytes(doc, "auth.env").String() != "AGENTGATE_API_KEY" ||
		gjson.GetBytes(doc, "remote_config.url").String() != base+"/api/config" || strings.Contains(string(doc), "ag_sk_") {
		t.Fatalf("well-known: %d %v %s", st, err, doc)
	}

	env := opencodeEnv(t)
	project := t.TempDir()
	login := exec.CommandContext(ctx, oc, "auth", "login", base)
	login.Dir, login.Env = project, append(env, "AGENTGATE_API_KEY="+key)
	if out, err := login.CombinedOutput(); err != nil || !strings.Contains(string(out), "Logged into") {
		t.Fatalf("opencode auth login: %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, oc, "run", "--model", conn.ID+"/llama", "Say hello")
	run.Dir, run.Env = project, env // no AGENTGATE_API_KEY now
	b, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(b), fakeprovider.Text) {
		t.Fatalf("opencode run after auth login: %v\n%s\nserver log:\n%s", err, b, tail(s.stderr.String(), 30))
	}
	if p.Last().Header.Get("Authorization") != "Bearer "+secret {
		t.Errorf("the provider got %q", p.Last().Header.Get("Authorization"))
	}
}

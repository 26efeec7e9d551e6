package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// claudeBinary is the released Claude Code CLI pinned in
// examples/clients' lockfile (its native binary, which the package's
// install step puts in place of bin/claude.exe).
func claudeBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := nodeReady(t, ctx)
	bin := filepath.Join(dir, "node_modules", "@anthropic-ai", "claude-code", "bin", "claude.exe")
	if fi, err := os.Stat(bin); err != nil || fi.Size() < 1<<20 {
		msg := fmt.Sprintf("the Claude Code CLI is not installed: %s (%v)", bin, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// claudeHome gives one Claude Code user a home of their own
// (testenv.ToolVars) with the two settings that point the CLI at the
// gateway at base, and the environment to run it in: no update checks and
// no traffic but the gateway's. Of this process's environment only PATH
// reaches it.
func claudeHome(t *testing.T, base string) (env []string, home string) {
	t.Helper()
	vars := testenv.ToolVars(t)
	for _, kv := range vars {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	settings, _ := json.Marshal(map[string]any{"forceLoginMethod": "gateway", "forceLoginGatewayUrl": base})
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), settings, 0o600); err != nil {
		t.Fatal(err)
	}
	env = append(vars, "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "NO_COLOR=1", "TERM=dumb")
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return env, home
}

// claudeSite is a running binary with a workspace (its owner tn), a member
// who uses Claude Code, and the workspace model claude-sonnet-4-5 served by
// a fake Anthropic provider.
type claudeSite struct {
	s        *server
	tn       tenant
	devID    string
	devEmail string
	devPass  string
	provider *fakeprovider.Provider
}

const claudeProviderSecret = "sk-provider-claude-code-SECRET"

func newClaudeSite(t *testing.T, ctx context.Context, s *server) *claudeSite {
	t.Helper()
	c := &claudeSite{s: s, tn: s.bootstrap(t, ctx, "ClaudeCode"), devEmail: "dev@example.com", devPass: "pw-" + randomHex(12)}
	ws := "/agentgate/workspaces/" + c.tn.Workspace
	var p idName
	must(t, "create the member", 201, &p)(s.admin(ctx, "POST", "/agentgate/people",
		map[string]any{"email": c.devEmail, "name": "Dev", "password": c.devPass, "workspace": c.tn.Workspace, "role": "member"}))
	c.devID = p.ID
	var connID string
	c.provider, connID = fakeConnection(t, ctx, s, ws, "anthropic", "/v1", claudeProviderSecret,
		map[string]any{"claude-sonnet-4-5-20250929": map[string]any{"pricing": map[string]any{"input": 3, "output": 15}}})
	must(t, "create the workspace model", 201, nil)(s.admin(ctx, "POST", ws+"/models", map[string]any{
		"id": "claude-sonnet-4-5", "targets": []map[string]any{{"connection": connID, "model": "claude-sonnet-4-5-20250929", "order": 1}}}))
	return c
}

// login runs `claude auth login --gateway-json` with the gateway URL
// gatewayURL (its settings' forceLoginGatewayUrl): one JSON object a line,
// each question answered on stdin with what it showed. The member
// approves the code in headless Chromium on the page the CLI names, which
// must be consoleURL's device page. It returns what the browser saw.
func (c *claudeSite) login(t *testing.T, ctx context.Context, cc, browserDir string, env []string, project, gatewayURL, consoleURL string) map[string]any {
	t.Helper()
	login := exec.CommandContext(ctx, cc, "auth", "login", "--gateway-json")
	login.Dir, login.Env = project, env
	stdin, err := login.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := login.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	login.Stderr = &stderr
	login.WaitDelay = 5 * time.Second
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any)
	var printed syncBuffer
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printed.Write(append(sc.Bytes(), '\n'))
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	failLogin := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("claude auth login: "+format+"\nprinted:\n%s\nstderr:\n%s\nserver:\n%s", append(args, printed.String(), tail(stderr.String(), 4000), tail(c.s.stderr.String(), 6000))...)
	}
	answer := func(m map[string]any) {
		t.Helper()
		if err := json.NewEncoder(stdin).Encode(map[string]any{"state": m["state"], "shown": m["shown"], "accept": true}); err != nil {
			failLogin("answering %v: %v", m["state"], err)
		}
	}
	var browser map[string]any
	states := []string{}
	timeout := time.After(3 * time.Minute)
read:
	for {
		var m map[string]any
		var ok bool
		select {
		case m, ok = <-lines:
		case <-timeout:
			failLogin("no end after 3 minutes")
		}
		if !ok {
			failLogin("the output ended without done")
		}
		state, _ := m["state"].(string)
		states = append(states, state)
		switch state {
		case "url_input":
			if m["shown"] != gatewayURL {
				failLogin("it offers the gateway URL %v, want %s", m["shown"], gatewayURL)
			}
			answer(m)
		case "trust_prompt":
			// Plain HTTP on loopback: nothing to pin.
			if m["shown"] != "http-loopback" {
				failLogin("trust prompt shows %v", m["shown"])
			}
			answer(m)
		case "polling":
			userCode, _ := m["userCode"].(string)
			browserURL, _ := m["browserUrl"].(string)
			if !userCodeShape.MatchString(userCode) || browserURL != consoleURL+"/device?user_code="+userCode {
				failLogin("polling with code %q and browser URL %q", userCode, browserURL)
			}
			// The member approves in their browser, on the page the CLI
			// names (with --gateway-json it leaves opening it to its
			// driver).
			browser = runBrowser(t, ctx, browserDir, "device", map[string]string{
				"AGENTGATE_CONSOLE_URL": consoleURL, "AGENTGATE_EMAIL": c.devEmail, "AGENTGATE_PASSWORD": c.devPass,
				"VERIFICATION_URI": browserURL, "USER_CODE": userCode, "WORKSPACE": c.tn.Workspace, "SCREENSHOT_DIR": screenshotDir(t),
			})
		case "confirm_account":
			if m["shown"] != c.devEmail {
				failLogin("it asks to confirm the account %v, want %s", m["shown"], c.devEmail)
			}
			answer(m)
		case "error":
			failLogin("error %v", m)
		case "done":
			break read
		}
	}
	if err := login.Wait(); err != nil {
		failLogin("exit: %v", err)
	}
	t.Logf("claude auth login states: %s", strings.Join(states, " → "))
	// The device page named the client, where it asked from and when.
	if browser["client_shown"] != "claude-code" || browser["client_name"] != "Claude Code" || browser["requested_from"] != "127.0.0.1" ||
		!regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d UTC$`).MatchString(fmt.Sprint(browser["requested_at"])) {
		t.Fatalf("the device page showed %v", browser)
	}
	return browser
}

// ask runs `claude -p` with the workspace's Claude model and checks that
// the answer came from the provider through the gateway, as the member:
// the provider got its own credential and the upstream model, the usage
// record names the member and Claude Code's session. It returns the
// session id.
func (c *claudeSite) ask(t *testing.T, ctx context.Context, cc string, env []string, project string) string {
	t.Helper()
	run := exec.CommandContext(ctx, cc, "-p", "--model", "claude-sonnet-4-5", "say hello")
	run.Dir, run.Env = project, env
	run.WaitDelay = 5 * time.Second
	out, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(out), fakeprovider.Text) {
		t.Fatalf("claude -p: %v\n%s\nserver:\n%s", err, out, tail(c.s.stderr.String(), 6000))
	}
	last := c.provider.Last()
	session := last.Header.Get("X-Claude-Code-Session-Id")
	if last.Header.Get("X-Api-Key") != claudeProviderSecret || strings.Contains(last.Header.Get("Authorization"), "ag_at_") || session == "" ||
		gjson.GetBytes(last.Body, "model").String() != "claude-sonnet-4-5-20250929" {
		t.Fatalf("the provider got %v %.300s", last.Header, last.Body)
	}
	st, body, err := c.s.console(ctx, "GET", "/api/v1/usage?limit=100", c.tn.Token, nil)
	rec := gjson.GetBytes(body, `data.#(session=="`+session+`")`)
	if err != nil || st != 200 || rec.Get("member_id").String() != c.devID || rec.Get("model").String() != "claude-sonnet-4-5" ||
		rec.Get("status").Int() != 200 {
		t.Fatalf("usage of session %s: %d %v %s", session, st, err, body)
	}
	return session
}

// TestClaudeCodeSignsIn: the released Claude Code CLI, given only the two
// settings lines, signs a member in to the workspace with `claude auth
// login` (scripted with --gateway-json: it discovers the Console's device
// endpoints, the member approves the code in headless Chromium on the
// Console's device page, which names Claude Code and the address it asks
// from), then `claude -p` answers through the Inference API from a fake
// provider, metered to the member with Claude Code's session id. `claude
// auth logout` revokes the sign-in: its token is refused at once.
func TestClaudeCodeSignsIn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs the Claude Code CLI")
	}
	ctx := testContext(t, 5*time.Minute)
	cc := claudeBinary(t, ctx)
	browserDir := browserReady(t, ctx)
	s := startServer(t, ctx, caddyBinary(t), config{AccessLog: true})
	c := newClaudeSite(t, ctx, s)
	tn := c.tn
	base := "http://" + s.httpAddr
	env, home := claudeHome(t, base)
	project := t.TempDir()

	browser := c.login(t, ctx, cc, browserDir, env, project, base, base)
	// The device endpoints came from the metadata, with no client id.
	for _, uri := range []string{"/.well-known/oauth-authorization-server", "/auth/device/code", "/auth/device/token"} {
		if !strings.Contains(s.stderr.String(), `"uri":"`+uri+`"`) {
			t.Fatalf("the CLI did not call %s:\n%s", uri, tail(s.stderr.String(), 4000))
		}
	}
	devToken := s.token(t, ctx, c.devID, tn.Workspace)
	st, body, err := s.console(ctx, "GET", "/api/v1/sign-ins", devToken, nil)
	if err != nil || st != 200 || !gjson.GetBytes(body, `data.#(client_id=="claude-code")`).Exists() ||
		gjson.GetBytes(body, `data.#(client_id=="claude-code").workspace`).String() != tn.Workspace {
		t.Fatalf("the member's sign-ins: %d %v %s", st, err, body)
	}

	// claude -p answers through the Inference API as the member.
	c.ask(t, ctx, cc, env, project)
	// The CLI asked for its managed settings with the member's token.
	if !regexp.MustCompile(`"method":"GET"[^\n]*"uri":"/managed/settings"`).MatchString(s.stderr.String()) {
		t.Errorf("the CLI did not call GET /managed/settings:\n%s", tail(s.stderr.String(), 4000))
	}

	t.Logf("Claude Code's requests: %s", strings.Join(claudeRequests(s), ", "))

	t.Run("managed settings", func(t *testing.T) {
		claudeManagedSettings(t, ctx, c, cc, env, home, project)
	})

	// claude auth logout revokes the sign-in (best effort, as the CLI
	// does it): its access token is refused at once, and not retried.
	cred, err := os.ReadFile(filepath.Join(home, ".claude", ".credentials.json"))
	accessToken := gjson.GetBytes(cred, "enterpriseGateway.jwt").String()
	refreshToken := gjson.GetBytes(cred, "enterpriseGateway.idpRefreshToken").String()
	if err != nil || !strings.HasPrefix(accessToken, "ag_at_") || !strings.HasPrefix(refreshToken, "ag_rt_") {
		t.Fatalf("the CLI's stored sign-in: %v (no ag_at_ and ag_rt_ tokens under enterpriseGateway)", err)
	}
	logout := exec.CommandContext(ctx, cc, "auth", "logout")
	logout.Dir, logout.Env = project, env
	logout.WaitDelay = 5 * time.Second
	if out, err := logout.CombinedOutput(); err != nil {
		t.Fatalf("claude auth logout: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`"uri":"/auth/device/revoke"[^\n]*"status":200`).MatchString(s.stderr.String()) {
		t.Fatalf("no revocation in the access log:\n%s", tail(s.stderr.String(), 4000))
	}
	st, body, err = s.console(ctx, "GET", "/api/v1/sign-ins", devToken, nil)
	if err != nil || st != 200 || gjson.GetBytes(body, `data.#(client_id=="claude-code")`).Exists() {
		t.Fatalf("sign-ins after logout: %d %v %s", st, err, body)
	}
	h := http.Header{"Authorization": {"Bearer " + accessToken}, "Content-Type": {"application/json"}, "anthropic-version": {"2023-06-01"}}
	resp, rbody := postRaw(t, ctx, base+"/v1/messages?beta=true", h, `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 401 || resp.Header.Get("X-Should-Retry") != "false" || gjson.Get(rbody, "error.type").String() != "authentication_error" {
		t.Fatalf("the revoked sign-in's token: %d x-should-retry %q %s", resp.StatusCode, resp.Header.Get("X-Should-Retry"), rbody)
	}
	// The server's log (the access log included) holds none of the
	// sign-in's secrets: not its tokens, not the code the member typed.
	for name, secret := range map[string]string{"access token": accessToken, "refresh token": refreshToken,
		"user code": fmt.Sprint(browser["code_shown"])} {
		if strings.Contains(s.stderr.String(), secret) || strings.Contains(s.stdout.String(), secret) {
			t.Errorf("the server's log holds the %s", name)
		}
	}
}

// claudeRequests lists the requests of the access log that Claude Code
// sent (its user agents are claude-code/… and claude-cli/…), as
// "METHOD uri status".
func claudeRequests(s *server) []string {
	var out []string
	for _, l := range strings.Split(s.stderr.String(), "\n") {
		if ua := gjson.Get(l, "request.headers.User-Agent.0").String(); !strings.HasPrefix(ua, "claude-") {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %d", gjson.Get(l, "request.method"), gjson.Get(l, "request.uri"), gjson.Get(l, "status").Int()))
	}
	return out
}

// postRaw posts body and returns the answer with its headers.
func postRaw(t *testing.T, ctx context.Context, rawURL string, h http.Header, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// claudeManagedSettings: the managed settings the CLI fetched carry the
// workspace's allowed models and an owner's permissions rule, the CLI
// applies them (a denied tool is not offered to the model), and an
// owner's change reaches it at the next fetch.
//
// Over a plain-http loopback gateway the CLI keeps no copy of its settings
// between `claude -p` runs, so it sends neither If-None-Match nor the
// checksum of what it holds: the conditional fetch is checked with the
// CLI's own access token, as the CLI sends it once it keeps a copy.
func claudeManagedSettings(t *testing.T, ctx context.Context, c *claudeSite, cc string, env []string, home, project string) {
	s, tn := c.s, c.tn
	const settingsRoute = "/api/v1/claude-code/settings"
	put := func(doc map[string]any) {
		t.Helper()
		st, body, err := s.console(ctx, "PUT", settingsRoute, tn.Token, doc)
		if err != nil || st != 200 {
			t.Fatalf("PUT %s: %d %v %s", settingsRoute, st, err, body)
		}
	}
	offers := func(r fakeprovider.Received, tool string) bool {
		return gjson.GetBytes(r.Body, `tools.#(name=="`+tool+`")`).Exists()
	}
	// served is the ETag of the last GET /managed/settings the CLI made.
	served := func() string {
		t.Helper()
		tag := ""
		for _, l := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(l, `"uri":"/managed/settings"`) && gjson.Get(l, "status").Int() == 200 {
				tag = strings.Trim(gjson.Get(l, "resp_headers.Etag.0").String(), `"`)
			}
		}
		if !strings.HasPrefix(tag, "sha256:") {
			t.Fatalf("no managed settings served with an ETag:\n%s", tail(s.stderr.String(), 4000))
		}
		return tag
	}
	run := func() fakeprovider.Received {
		t.Helper()
		cmd := exec.CommandContext(ctx, cc, "-p", "--model", "claude-sonnet-4-5", "say hello")
		cmd.Dir, cmd.Env = project, env
		cmd.WaitDelay = 5 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), fakeprovider.Text) {
			t.Fatalf("claude -p: %v\n%s", err, out)
		}
		return c.provider.Last()
	}

	if before := c.provider.Last(); !offers(before, "Write") {
		t.Fatalf("before the owner's rule the CLI did not offer Write: %s", gjson.GetBytes(before.Body, "tools.#.name"))
	}
	put(map[string]any{"permissions": map[string]any{"deny": []string{"Write"}}})
	first := run()
	sum1 := served()
	if offers(first, "Write") || !offers(first, "Edit") {
		t.Fatalf("with Write denied the CLI offered: %s", gjson.GetBytes(first.Body, "tools.#.name"))
	}

	put(map[string]any{"permissions": map[string]any{"deny": []string{"Write", "Edit", "Bash(curl:*)"}}})
	second := run()
	sum2 := served()
	if sum2 == sum1 || offers(second, "Edit") || !offers(second, "Bash") {
		t.Fatalf("after the owner's change (served %s, before %s) the CLI offered: %s", sum2, sum1, gjson.GetBytes(second.Body, "tools.#.name"))
	}

	// The same fetch with the CLI's token: If-None-Match with the old
	// checksum gets the new settings, with the new one 304.
	cred, err := os.ReadFile(filepath.Join(home, ".claude", ".credentials.json"))
	token := gjson.GetBytes(cred, "enterpriseGateway.jwt").String()
	if err != nil || token == "" {
		t.Fatalf("the CLI's stored sign-in: %v", err)
	}
	fetch := func(ifNoneMatch string) (int, string, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.httpAddr+"/managed/settings", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("If-None-Match", `"`+ifNoneMatch+`"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Etag"), b
	}
	st, tag, body := fetch(sum1)
	if st != 200 || tag != `"`+sum2+`"` || gjson.GetBytes(body, "checksum").String() != sum2 ||
		!gjson.GetBytes(body, `settings.availableModels.#(=="claude-sonnet-4-5")`).Exists() ||
		!gjson.GetBytes(body, `settings.permissions.deny.#(=="Bash(curl:*)")`).Exists() {
		t.Fatalf("GET /managed/settings with the old checksum: %d %s %s", st, tag, body)
	}
	if st, _, body := fetch(sum2); st != http.StatusNotModified || len(body) != 0 {
		t.Fatalf("GET /managed/settings with the current checksum: %d %s", st, body)
	}
}

// TestClaudeCodeSeparateSites: with the Console and the gateway on sites of
// their own, Claude Code is pointed at the gateway's site, which hands the
// Console's Claude Code paths to a workspace_console whose console_url is
// the Console's site (as docs/claude-code.md shows). The metadata then
// names endpoints of the Console's origin, so the CLI signs in through the
// fallback names /oauth/device_authorization and /oauth/token of the
// gateway's site; the member approves on the Console's own device page,
// and `claude -p` answers through the gateway's site.
func TestClaudeCodeSeparateSites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary and runs the Claude Code CLI")
	}
	ctx := testContext(t, 5*time.Minute)
	cc := claudeBinary(t, ctx)
	browserDir := browserReady(t, ctx)
	s := newServer(t, caddyBinary(t), config{AccessLog: true})
	gwAddr := freeAddr(t)
	consoleURL, gatewayURL := "http://"+s.httpAddr, "http://"+gwAddr
	caddyfile := fmt.Sprintf(`{
	admin %s
	agentgate {
		storage badger
	}
}

%s {
	bind 127.0.0.1
	log {
		output stderr
		format json
	}
	workspace_console {
		inference_url %s
	}
}

%s {
	bind 127.0.0.1
	log {
		output stderr
		format json
	}
	@console path /.well-known/oauth-authorization-server /auth/device/* /oauth/* /managed/settings /api/oauth/usage
	handle @console {
		workspace_console {
			console_url %s
		}
	}
	llm_gateway
}
`, s.adminAddr, consoleURL, gatewayURL, gatewayURL, consoleURL)
	if err := os.WriteFile(s.cfgPath, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start()
	s.waitReady(ctx)
	c := newClaudeSite(t, ctx, s)
	env, _ := claudeHome(t, gatewayURL)
	project := t.TempDir()

	c.login(t, ctx, cc, browserDir, env, project, gatewayURL, consoleURL)
	for _, uri := range []string{"/oauth/device_authorization", "/oauth/token"} {
		if !regexp.MustCompile(`"host":"` + regexp.QuoteMeta(gwAddr) + `","uri":"` + uri + `"[^\n]*"status":200`).MatchString(s.stderr.String()) {
			t.Fatalf("no %s answered on the gateway's site:\n%s", uri, tail(s.stderr.String(), 4000))
		}
	}
	c.ask(t, ctx, cc, env, project)
	t.Logf("Claude Code's requests: %s", strings.Join(claudeRequests(s), ", "))
}

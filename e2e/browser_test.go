package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/testenv"
)

// chromiumPath is Debian's Chromium, which the browser tests drive with
// npm playwright-core (no browser download).
const chromiumPath = "/usr/bin/chromium"

// screenshotDir is where the browser tests save their screenshots.
func screenshotDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "artifacts", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browserReady skips under -short; when Chromium or node is missing it
// skips with what to install, unless CI is set (then it fails, so that CI
// really drives the browser). It installs playwright-core from the
// lockfile when needed.
func browserReady(t *testing.T, ctx context.Context) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping under -short: drives Chromium against the real binary")
	}
	missing := t.Skipf
	if os.Getenv("CI") != "" {
		missing = t.Fatalf
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		missing("%s is missing (%v): the browser tests need Debian's Chromium; .ci/run installs it "+
			"(apt-get install -y chromium chromium-driver)", chromiumPath, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node is not installed: the browser tests drive Chromium with npm playwright-core (.ci/run installs node and the packages of examples/clients)")
	}
	dir := clientsDir(t)
	if !installed(dir, "playwright-core") {
		npmInstall(t, ctx, dir)
	}
	return dir
}

// runBrowser runs one scenario of examples/clients/browser.mjs and decodes
// what it prints.
func runBrowser(t *testing.T, ctx context.Context, dir, scenario string, env map[string]string) map[string]any {
	t.Helper()
	cmd := exec.CommandContext(ctx, "node", "browser.mjs", scenario)
	cmd.Dir = dir
	cmd.Env = testenv.ToolEnv(t)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("browser %s: %s", scenario, time.Since(start).Round(time.Millisecond))
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || stderr.Len() > 0 {
			t.Fatalf("node browser.mjs %s: %v\n%s", scenario, err, tail(stderr.String(), 8000))
		}
		t.Fatalf("node browser.mjs %s: %v", scenario, err)
	}
	var out map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("browser.mjs %s printed %q: %v", scenario, stdout.String(), err)
	}
	if errs, _ := out["console_errors"].([]any); len(errs) > 0 {
		t.Errorf("browser %s: console errors (a CSP violation, a script error …): %v", scenario, errs)
	}
	return out
}

// formPost sends an application/x-www-form-urlencoded POST and decodes the
// JSON answer.
func formPost(t *testing.T, ctx context.Context, rawURL string, f url.Values) (int, map[string]any) {
	t.Helper()
	st, body, err := call(ctx, httpClient, "POST", rawURL, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, f.Encode())
	if err != nil {
		t.Fatalf("POST %s: %v", rawURL, err)
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("POST %s: %d, not JSON: %s", rawURL, st, body)
	}
	return st, out
}

// wantScreenshots checks that each page was saved at both sizes as a PNG of
// the viewport's width.
func wantScreenshots(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		for size, width := range map[string]int{"desktop": 1280, "phone": 390} {
			path := filepath.Join(dir, n+"-"+size+".png")
			f, err := os.Open(path)
			if err != nil {
				t.Errorf("screenshot %s: %v", path, err)
				continue
			}
			cfg, err := png.DecodeConfig(f)
			f.Close()
			if err != nil || cfg.Width != width || cfg.Height < 300 {
				t.Errorf("screenshot %s: %dx%d, %v; want a PNG %d wide", path, cfg.Width, cfg.Height, err, width)
			}
		}
	}
}

// minLabelHeight is the least rendered height, in CSS pixels, of a chart's
// axis label: text of about 11 px and more.
const minLabelHeight = 10

// wantLayout checks what browser.mjs measured on each page at both sizes:
// the document no wider than the viewport, and no action (link, button,
// form field, summary) or table cell beyond the viewport or cut off by a
// scrolling box, with the page as shown and with its <details> open; on
// the pages in charts, axis labels at least minLabelHeight high that do
// not overlap.
func wantLayout(t *testing.T, out map[string]any, charts []string, names ...string) {
	t.Helper()
	layouts, _ := out["layout"].(map[string]any)
	for _, n := range names {
		sizes, _ := layouts[n].(map[string]any)
		for _, size := range []string{"desktop", "phone"} {
			m, _ := sizes[size].(map[string]any)
			if m == nil {
				t.Errorf("page %s at %s: not measured", n, size)
				continue
			}
			where := n + " at " + size
			width, _ := m["width"].(float64)
			if sw, _ := m["scroll_width"].(float64); width == 0 || sw > width {
				t.Errorf("%s: the document is %v px wide in a %v px viewport: %v", where, sw, width, strs(m["too_wide"]))
			}
			if a, _ := m["actions"].(float64); a == 0 {
				t.Errorf("%s: no action measured", where)
			}
			wantNone(t, where+": actions out of view", strs(m["cut_actions"]))
			wantNone(t, where+": table cells cut off", strs(m["cut_cells"]))
			open, _ := m["details_open"].(map[string]any)
			if sw, _ := open["scroll_width"].(float64); sw > width {
				t.Errorf("%s with its details open: the document is %v px wide in a %v px viewport: %v", where, sw, width, strs(open["too_wide"]))
			}
			wantNone(t, where+" with its details open: actions out of view", strs(open["cut_actions"]))
			wantNone(t, where+" with its details open: table cells cut off", strs(open["cut_cells"]))
			labels, _ := m["labels"].([]any)
			if slices.Contains(charts, n) && len(labels) == 0 {
				t.Errorf("%s: no chart label measured", where)
			}
			for _, l := range labels {
				l, _ := l.(map[string]any)
				if h, _ := l["height"].(float64); h < minLabelHeight {
					t.Errorf("%s: chart label %q is %v px high (font %v px), want at least %d", where, l["text"], h, l["font_px"], minLabelHeight)
				}
			}
			for _, o := range strs(m["overlapping_labels"]) {
				t.Errorf("%s: chart labels overlap: %s", where, o)
			}
		}
	}
}

// wantNone reports what should not be there: how many, and the first few.
func wantNone(t *testing.T, what string, found []string) {
	t.Helper()
	if len(found) == 0 {
		return
	}
	t.Errorf("%s: %d, such as\n\t%s", what, len(found), strings.Join(found[:min(len(found), 4)], "\n\t"))
}

// cellsMeasured is how many table cells browser.mjs saw on a page at a
// size, with the page's details open.
func cellsMeasured(out map[string]any, name, size string) float64 {
	layouts, _ := out["layout"].(map[string]any)
	sizes, _ := layouts[name].(map[string]any)
	m, _ := sizes[size].(map[string]any)
	open, _ := m["details_open"].(map[string]any)
	n, _ := open["cells"].(float64)
	return n
}

// TestBrowserDeviceApproval is the device flow as a person does it: the
// CLI (a plain HTTP POST here) starts a device authorization; Chromium
// opens verification_uri_complete, is sent to sign in, signs in, lands back
// on the verification page showing the code and the client, picks the
// workspace and approves; the CLI's poll then gets tokens bound to that
// workspace.
func TestBrowserDeviceApproval(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	dir := browserReady(t, ctx)
	shots := screenshotDir(t)
	bin := caddyBinary(t)
	s := startServer(t, ctx, bin, config{})
	tn := s.bootstrap(t, ctx, "Browser")
	base := "http://" + s.httpAddr

	// A second workspace, so that the picker has a real choice.
	var other idName
	must(t, "create workspace", 201, &other)(s.admin(ctx, "POST", "/agentgate/workspaces", map[string]any{"name": "Elsewhere"}))
	must(t, "add member", 201, nil)(s.admin(ctx, "POST", "/agentgate/workspaces/"+other.ID+"/members",
		map[string]any{"person_id": tn.Person, "role": "member"}))

	st, start := formPost(t, ctx, base+"/auth/device/code", url.Values{"client_id": {"agentgate-cli"}, "supports_org_scope": {"true"}})
	if st != 200 {
		t.Fatalf("device code: %d %v", st, start)
	}
	deviceCode, _ := start["device_code"].(string)
	userCode, _ := start["user_code"].(string)
	complete, _ := start["verification_uri_complete"].(string)
	if deviceCode == "" || userCode == "" || !strings.HasPrefix(complete, "/device?user_code=") {
		t.Fatalf("device code answer: %v", start)
	}
	pollForm := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {deviceCode}, "client_id": {"agentgate-cli"}}
	if st, body := formPost(t, ctx, base+"/auth/device/token", pollForm); st != 400 || body["error"] != "authorization_pending" {
		t.Fatalf("poll before approval: %d %v", st, body)
	}

	out := runBrowser(t, ctx, dir, "device", map[string]string{
		"AGENTGATE_CONSOLE_URL": base, "AGENTGATE_EMAIL": tn.Email, "AGENTGATE_PASSWORD": tn.Password,
		"VERIFICATION_URI": complete, "USER_CODE": userCode, "WORKSPACE": tn.Workspace, "SCREENSHOT_DIR": shots,
	})
	signin, _ := out["signin_url"].(string)
	if !strings.Contains(signin, "/signin?next=") || !strings.Contains(signin, url.QueryEscape(userCode)) {
		t.Errorf("the verification page sent the browser to %q: want /signin?next=… keeping the code", signin)
	}
	if out["code_shown"] != userCode || out["client_shown"] != "agentgate-cli" {
		t.Errorf("the device page showed code %v and client %v", out["code_shown"], out["client_shown"])
	}
	if r, _ := out["result"].(string); !strings.Contains(r, "Device signed in") || !strings.Contains(r, "Browser") {
		t.Errorf("result page: %q", r)
	}

	// The CLI's next poll gets tokens bound to the chosen workspace.
	var tokens map[string]any
	deadline := time.Now().Add(40 * time.Second)
	for {
		time.Sleep(5500 * time.Millisecond) // the interval since the last poll
		st, body := formPost(t, ctx, base+"/auth/device/token", pollForm)
		if st == 200 {
			tokens = body
			break
		}
		if body["error"] != "slow_down" && body["error"] != "authorization_pending" || time.Now().After(deadline) {
			t.Fatalf("poll after approval: %d %v", st, body)
		}
	}
	if tokens["org_id"] != tn.Workspace || tokens["token_type"] != "Bearer" {
		t.Fatalf("tokens: org_id %v (want %s), token_type %v", tokens["org_id"], tn.Workspace, tokens["token_type"])
	}
	at, _ := tokens["access_token"].(string)
	var ws idName
	must(t, "the access token on /api/v1/workspace", 200, &ws)(s.console(ctx, "GET", "/api/v1/workspace", at, nil))
	if ws.ID != tn.Workspace {
		t.Fatalf("the access token acts in %s, want %s", ws.ID, tn.Workspace)
	}
	wantScreenshots(t, shots, "signin", "device", "device-approved")
	wantLayout(t, out, nil, "signin", "device", "device-approved")
}

// TestBrowserKeyOnGateway creates a service account and an inference key
// on the web page, reads the value the page shows once, and uses it on a
// gateway route to a fake provider; then it visits every workspace page
// (setting a budget on the way) and saves the screenshots.
func TestBrowserKeyOnGateway(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	dir := browserReady(t, ctx)
	shots := screenshotDir(t)
	bin := caddyBinary(t)
	s := startServer(t, ctx, bin, config{})
	tn := s.bootstrap(t, ctx, "Browser")
	base := "http://" + s.httpAddr

	const secret = "sk-provider-browser-SECRET"
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var conn idName
	must(t, "create connection", 201, &conn)(s.admin(ctx, "POST", "/agentgate/workspaces/"+tn.Workspace+"/connections", map[string]any{
		"name": "OpenAI (fake)", "kind": "openai", "base_url": p.URL + "/v1", "credential": secret,
		"models": map[string]any{
			"gpt-4o":      map[string]any{"upstream_id": "gpt-4o-2024-08-06", "pricing": map[string]any{"input": 2.5, "output": 10}},
			"gpt-4o-mini": map[string]any{"pricing": map[string]any{"input": 0.15, "output": 0.6}},
			"o1":          map[string]any{"enabled": false, "pricing": map[string]any{"input": 15, "output": 60}},
		},
	}))

	env := map[string]string{"AGENTGATE_CONSOLE_URL": base, "AGENTGATE_EMAIL": tn.Email, "AGENTGATE_PASSWORD": tn.Password,
		"WORKSPACE": tn.Workspace, "SCREENSHOT_DIR": shots, "SA_NAME": "browser-bot", "KEY_NAME": "e2e laptop"}
	out := runBrowser(t, ctx, dir, "keys", env)
	key, _ := out["key"].(string)
	wantLayout(t, out, nil, "key-created", "service-accounts")
	if !strings.HasPrefix(key, "ag_sk_") {
		t.Fatalf("the page showed %q, not a key", key)
	}
	if out["read_only"] != true || out["copied"] != key || out["listing_shows_key"] != false {
		t.Errorf("key page: read_only %v, copied %v, listing shows the key %v", out["read_only"], out["copied"] == key, out["listing_shows_key"])
	}
	// The service account exists, seen through the admin API.
	found := false
	for _, name := range s.adminServiceAccounts(t, ctx, tn.Workspace) {
		found = found || name == "browser-bot"
	}
	if !found {
		t.Fatal("the service account made on the page is not listed by the admin API")
	}

	// The key works on the gateway; the request names an agent session,
	// which the budgets page then lists.
	st, body, err := call(ctx, httpClient, "POST", base+"/custom/"+url.PathEscape(conn.ID)+"/v1/chat/completions",
		http.Header{"Authorization": {"Bearer " + key}, "Content-Type": {"application/json"}, "X-Opencode-Session": {"ses_browser_journey"}},
		`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`)
	if err != nil || st != 200 || !strings.Contains(string(body), fakeprovider.Text) {
		t.Fatalf("gateway with the key from the page: %d %v %s", st, err, body)
	}
	if got := p.Last().Header.Get("Authorization"); got != "Bearer "+secret {
		t.Errorf("the provider got Authorization %q", got)
	}

	out = runBrowser(t, ctx, dir, "pages", env)
	pages, _ := out["pages"].(map[string]any)
	for name, nav := range map[string]string{"service-accounts": "Service accounts", "connections": "Connections", "policies": "Policies",
		"claude-code": "Claude Code", "members": "Members", "budgets": "Budgets & usage"} {
		pg, _ := pages[name].(map[string]any)
		if pg == nil || pg["nav"] != nav {
			t.Errorf("page %s: %v", name, pg)
		}
	}
	if b, _ := pages["budgets"].(map[string]any); b == nil || b["bars"] != float64(30) || b["flash"] != "Budget saved." {
		t.Errorf("budgets page: %v", pages["budgets"])
	}
	if c, _ := pages["connections"].(map[string]any); c == nil || c["flash"] != "Model saved." {
		t.Errorf("connections page: %v", pages["connections"])
	}
	if c, _ := pages["policies"].(map[string]any); c == nil || !strings.HasPrefix(toString(c["flash"]), "Policy added.") {
		t.Errorf("policies page: %v", pages["policies"])
	}
	if c, _ := pages["claude-code"].(map[string]any); c == nil || !strings.HasPrefix(toString(c["flash"]), "Claude Code settings saved.") {
		t.Errorf("claude-code page: %v", pages["claude-code"])
	}
	// What the forms saved, as the API reads it.
	st, b, err := s.console(ctx, "GET", "/api/v1/connections/"+conn.ID, tn.Token, nil)
	if err != nil || st != 200 || gjson.GetBytes(b, "data.models.browser-model.max_output_tokens").Int() != 4096 ||
		gjson.GetBytes(b, "data.models.browser-model.pricing.input").Float() != 1.5 {
		t.Errorf("the model added in the browser: %d %v %s", st, err, b)
	}
	st, b, err = s.console(ctx, "GET", "/api/v1/policies", tn.Token, nil)
	if err != nil || st != 200 || gjson.GetBytes(b, "data.0.name").String() != "No browser models" || gjson.GetBytes(b, "data.0.effect").String() != "deny" {
		t.Errorf("the policy added in the browser: %d %v %s", st, err, b)
	}
	st, b, err = s.console(ctx, "GET", "/api/v1/claude-code/settings", tn.Token, nil)
	if err != nil || st != 200 || gjson.GetBytes(b, "data.settings.permissions.deny.0").String() != "WebFetch" || gjson.GetBytes(b, "data.version").Int() != 1 {
		t.Errorf("the Claude Code settings saved in the browser: %d %v %s", st, err, b)
	}
	if h, _ := pages["home"].(map[string]any); h == nil || h["h1"] != "Your workspaces" || h["revoke"] == float64(0) {
		t.Errorf("workspaces page: %v (want the keys run's sign-in listed with its Revoke button)", pages["home"])
	}
	if e, _ := pages["error"].(map[string]any); e == nil || e["status"] != float64(404) {
		t.Errorf("error page: %v", pages["error"])
	}
	wantScreenshots(t, shots, "key-created", "service-accounts", "connections", "policies", "claude-code", "members", "budgets", "home", "device-entry", "error")
	wantLayout(t, out, []string{"budgets"}, "service-accounts", "connections", "policies", "claude-code", "members", "budgets", "home", "device-entry", "error")
	// The connections page's models table (five rows of eight cells: the
	// header and four models) was measured whole at desktop width.
	if n := cellsMeasured(out, "connections", "desktop"); n < 40 {
		t.Errorf("connections at desktop: %v table cells measured, want the models table's 40 and more", n)
	}
}

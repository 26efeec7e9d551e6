package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInstanceRefusesCrossSite runs the real binary as the default config
// does (no password, loopback) with a project whose local plugin writes a
// marker file when it loads, and sends it what a page the user visits
// could make the browser send: none of it has an effect. The instance's
// own origin, clients that send no Origin, and a listed cors_origins
// origin keep working.
func TestInstanceRefusesCrossSite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	ctx := testContext(t, 2*time.Minute)
	bin := caddyBinary(t)
	project, marker := markerProject(t)

	s, port := startOpenInstance(t, ctx, bin, project, "cors_origins https://app.example")
	base := "http://" + s.httpAddr
	self := "http://localhost:" + port

	// send makes one request exactly as given: Host (when not ""),
	// headers, and a body without a Content-Type unless one is among them.
	send := func(method, path, host, body string, hdr ...string) (int, []byte, http.Header) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}
	wantTag := func(what string, st int, b []byte, status int, tag string) {
		t.Helper()
		var e struct {
			Tag string `json:"_tag"`
		}
		json.Unmarshal(b, &e)
		if st != status || e.Tag != tag {
			t.Fatalf("%s: %d %s, want %d %s", what, st, b, status, tag)
		}
	}
	sessions := func() int {
		t.Helper()
		st, b, _ := send("GET", "/api/session", "", "")
		var out struct{ Data []json.RawMessage }
		if st != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("session list: %d %s", st, b)
		}
		return len(out.Data)
	}

	// (a) fetch(url, {mode: "no-cors", method: "POST", body: new Blob([json])})
	// from a page of https://evil.example.
	attack := `{"title":"pwned","permissions":[{"action":"bash","resource":"*","effect":"allow"}]}`
	noCORS := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors",
		"Sec-Fetch-Dest", "empty", "Accept", "*/*"}
	st, b, _ := send("POST", "/api/session", "", attack, noCORS...)
	wantTag("cross-site session create", st, b, 403, "ForbiddenError")
	if n := sessions(); n != 0 {
		t.Fatalf("%d sessions after the cross-site create", n)
	}
	// (b) The same body from a client without Origin, without a type.
	st, b, _ = send("POST", "/api/session", "", attack)
	wantTag("create without Content-Type", st, b, 400, "InvalidRequestError")
	if n := sessions(); n != 0 {
		t.Fatalf("%d sessions after the untyped create", n)
	}

	// (c) Cross-site reads of the project neither load it nor its plugins.
	q := "?" + url.Values{"location[directory]": {project}}.Encode()
	for _, p := range []string{"/api/location", "/api/plugin", "/api/agent"} {
		st, b, _ := send("GET", p+q, "", "", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "script")
		wantTag("cross-site GET "+p, st, b, 403, "ForbiddenError")
	}
	// (d) A foreign Origin without Sec-Fetch headers, and "null".
	for _, o := range []string{"https://evil.example", "null", "http://127.0.0.1:" + port} {
		st, b, _ := send("GET", "/api/plugin"+q, "localhost:"+port, "", "Origin", o)
		wantTag("Origin "+o, st, b, 403, "ForbiddenError")
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused request loaded the project's plugins")
	}

	// (e) DNS rebinding: a loopback peer, a foreign Host.
	st, b, _ = send("POST", "/api/session", "evil.example:"+port, `{}`, "Content-Type", "application/json", "Origin", "http://evil.example:"+port)
	wantTag("rebinding Host", st, b, 403, "ForbiddenError")
	st, b, _ = send("GET", "/", "evil.example:"+port, "")
	if st != 403 {
		t.Fatalf("the web app under a rebinding Host: %d %s", st, b)
	}
	for _, h := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
		if st, b, _ := send("GET", "/api/info", h, ""); st != 200 {
			t.Fatalf("Host %s: %d %s", h, st, b)
		}
	}

	// The instance's own origin (its web app) loads the project: the
	// plugin's marker appears, so the refusals above were what kept it away.
	st, b, _ = send("GET", "/api/plugin"+q, "localhost:"+port, "", "Origin", self, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors")
	if st != 200 {
		t.Fatalf("same-origin plugin list: %d %s", st, b)
	}
	waitFor(t, ctx, "the plugin loads for a same-origin request", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})

	// (g) cors_origins: the listed origin's preflight and request.
	st, b, hdr := send("OPTIONS", "/api/session", "", "", "Origin", "https://app.example", "Sec-Fetch-Site", "cross-site",
		"Sec-Fetch-Mode", "cors", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type,x-opencode-directory")
	if st != 204 || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" || hdr.Get("Access-Control-Allow-Credentials") != "true" ||
		!strings.Contains(hdr.Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Fatalf("preflight of the listed origin: %d %v %s", st, hdr, b)
	}
	st, b, hdr = send("POST", "/api/session", "", `{"title":"from the app"}`, "Content-Type", "application/json",
		"Origin", "https://app.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors")
	if st != 200 || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(hdr.Get("Vary"), "Origin") {
		t.Fatalf("the listed origin's create: %d %v %s", st, hdr, b)
	}
	st, b, _ = send("OPTIONS", "/api/session", "", "", "Origin", "https://other.example", "Access-Control-Request-Method", "POST")
	wantTag("preflight of another origin", st, b, 403, "ForbiddenError")
	if n := sessions(); n != 1 {
		t.Fatalf("%d sessions, want the listed origin's one", n)
	}
}

// markerProject is a project whose local plugin writes the file it
// returns when the plugin loads.
func markerProject(t *testing.T) (project, marker string) {
	t.Helper()
	project = t.TempDir()
	os.Mkdir(filepath.Join(project, ".git"), 0o755)
	os.MkdirAll(filepath.Join(project, ".opencode", "plugin"), 0o755)
	os.WriteFile(filepath.Join(project, ".opencode", "plugin", "marker.ts"), []byte(`
import { writeFileSync } from "node:fs";
export const Marker = async ({ directory }) => {
  writeFileSync(directory + "/plugin-loaded", "loaded\n");
  return {};
};
`), 0o644)
	return project, filepath.Join(project, "plugin-loaded")
}

// startOpenInstance starts the real binary with an instance as the
// default config has it, no password, on loopback, but under a site
// address without a host matcher (http://:<port>), so that every Host
// reaches the instance; extra is more of its options. It returns when the
// instance answers.
func startOpenInstance(t *testing.T, ctx context.Context, bin, project, extra string) (*server, string) {
	t.Helper()
	s := newServer(t, bin, config{})
	_, port, _ := net.SplitHostPort(s.httpAddr)
	caddyfile := fmt.Sprintf(`{
	admin %s
	agentgate {
		storage badger %q
	}
}

http://:%s {
	bind 127.0.0.1
	agent_instance {
		directory %q
		%s
		plugin_host {
			bun %q
		}
	}
}
`, s.adminAddr, filepath.Join(s.dir, "data"), port, project, extra, bunBinary(t, ctx))
	os.WriteFile(s.cfgPath, []byte(caddyfile), 0o600)
	s.start()
	waitFor(t, ctx, "instance answers", func() bool {
		st, _, err := call(ctx, httpClient, "GET", "http://"+s.httpAddr+"/api/info", nil, nil)
		return err == nil && st == 200
	})
	return s, port
}

// TestInstanceBrowserCrossSite: Chromium visits a page of another site
// (127.0.0.1 on another port; the instance is http://localhost:<port>)
// whose script fires the attack at the instance: no session is created,
// the project's plugins do not load, and the page reads nothing.
func TestInstanceBrowserCrossSite(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	dir := browserReady(t, ctx)
	project, marker := markerProject(t)
	s, port := startOpenInstance(t, ctx, caddyBinary(t), project, "")
	base := "http://" + s.httpAddr
	var mu sync.Mutex
	var seen []string
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<!doctype html><title>cute cats</title><p>Nothing to see here.</p>")
	}))
	defer attacker.Close()

	out := runBrowser(t, ctx, dir, "crosssite", map[string]string{
		"INSTANCE_URL": "http://localhost:" + port, "ATTACKER_URL": attacker.URL + "/cats", "PROJECT_DIR": project,
	})
	if sent := strs(out["sent"]); len(sent) != 4 {
		t.Fatalf("the page's requests: %v", sent)
	}
	for _, p := range strs(out["sent"]) {
		if strings.Contains(p, ":") {
			t.Fatalf("the page could not send %s", p)
		}
	}
	if out["read"] != "blocked" {
		t.Fatalf("the page read the instance's answer: %v", out["read"])
	}
	mu.Lock()
	if len(seen) == 0 {
		t.Fatal("the browser never visited the attacker's page")
	}
	mu.Unlock()
	st, b, _ := call(ctx, httpClient, "GET", base+"/api/session", nil, nil)
	var list struct{ Data []json.RawMessage }
	if st != 200 || json.Unmarshal(b, &list) != nil || len(list.Data) != 0 {
		t.Fatalf("sessions after the visit: %d %s", st, b)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the visit loaded the project's plugins")
	}
	// The same read from a client (no Origin) loads them: the refusals
	// were what kept them away.
	q := "?" + url.Values{"location[directory]": {project}}.Encode()
	if st, b, _ := call(ctx, httpClient, "GET", base+"/api/plugin"+q, nil, nil); st != 200 {
		t.Fatalf("plugin list: %d %s", st, b)
	}
	waitFor(t, ctx, "the plugin loads for a client", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
}

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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
	project := t.TempDir()
	os.Mkdir(filepath.Join(project, ".git"), 0o755)
	os.MkdirAll(filepath.Join(project, ".opencode", "plugin"), 0o755)
	marker := filepath.Join(project, "plugin-loaded")
	os.WriteFile(filepath.Join(project, ".opencode", "plugin", "marker.ts"), []byte(`
import { writeFileSync } from "node:fs";
export const Marker = async ({ directory }) => {
  writeFileSync(directory + "/plugin-loaded", "loaded\n");
  return {};
};
`), 0o644)

	s := newServer(t, bin, config{})
	_, port, _ := net.SplitHostPort(s.httpAddr)
	// No host matcher: every Host reaches the instance, which must refuse
	// the ones that are not loopback names itself.
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
		cors_origins https://app.example
		plugin_host {
			bun %q
		}
	}
}
`, s.adminAddr, filepath.Join(s.dir, "data"), port, project, bunBinary(t, ctx))
	os.WriteFile(s.cfgPath, []byte(caddyfile), 0o600)
	s.start()
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
	waitFor(t, ctx, "instance answers", func() bool {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/info", nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

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

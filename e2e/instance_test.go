package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// npmPackage builds a real npm tarball (package/ prefix, package.json).
func npmPackage(t *testing.T, name, version string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for file, body := range map[string]string{
		"package/package.json": fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js"}`, name, version),
		"package/index.js":     "export default async () => ({})\n",
	} {
		tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// TestInstanceClientJourney is what an OpenCode-style client does against
// the real binary: pair, read the server's info, location, agents and
// plugins (the Caddyfile's installed at start), update a plugin from an
// npm registry, and see the reload on the event stream.
func TestInstanceClientJourney(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	ctx := testContext(t, 2*time.Minute)
	bin := caddyBinary(t)

	// A project with agents of its own.
	project := t.TempDir()
	os.Mkdir(filepath.Join(project, ".git"), 0o755)
	os.WriteFile(filepath.Join(project, "opencode.jsonc"), []byte(`{
		// project agents
		"agent": {"reviewer": {"description": "Reviews diffs", "mode": "subagent", "model": "anthropic/claude-sonnet"},}
	}`), 0o644)
	os.MkdirAll(filepath.Join(project, ".opencode", "agent"), 0o755)
	os.WriteFile(filepath.Join(project, ".opencode", "agent", "docs.md"), []byte("---\ndescription: Writes docs\nmode: primary\n---\nYou write documentation.\n"), 0o644)

	// A local npm registry with two versions of a plugin.
	const pkg = "agentgate-demo-plugin"
	tarballs := map[string][]byte{"1.0.0": npmPackage(t, pkg, "1.0.0"), "1.1.0": npmPackage(t, pkg, "1.1.0")}
	var reg *httptest.Server
	reg = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/"+pkg {
			versions := map[string]any{}
			for v, b := range tarballs {
				sum := sha512.Sum512(b)
				versions[v] = map[string]any{"name": pkg, "version": v, "dist": map[string]any{
					"tarball": reg.URL + "/" + pkg + "/-/" + pkg + "-" + v + ".tgz", "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum[:])}}
			}
			json.NewEncoder(w).Encode(map[string]any{"name": pkg, "dist-tags": map[string]string{"latest": "1.1.0"}, "versions": versions})
			return
		}
		for v, b := range tarballs {
			if r.URL.Path == "/"+pkg+"/-/"+pkg+"-"+v+".tgz" {
				w.Write(b)
				return
			}
		}
		http.NotFound(w, r)
	}))
	defer reg.Close()

	s := newServer(t, bin, config{})
	caddyfile := fmt.Sprintf(`{
	admin %s
	agentgate {
		storage badger %q
	}
}

http://%s {
	bind 127.0.0.1
	agent_instance {
		password {env.AGENT_INSTANCE_PASSWORD}
		directory %q
		plugin %s@1.0.0
		registry %s
		plugin_host {
			bun %q
		}
		heartbeat 1s
	}
}
`, s.adminAddr, filepath.Join(s.dir, "data"), s.httpAddr, project, pkg, reg.URL, bunBinary(t, ctx))
	os.WriteFile(s.cfgPath, []byte(caddyfile), 0o600)
	s.env = append(s.env, "AGENT_INSTANCE_PASSWORD=instance-secret")
	s.start()
	base := "http://" + s.httpAddr
	waitFor(t, ctx, "instance answers", func() bool {
		st, _, err := call(ctx, httpClient, "GET", base+"/api/info", nil, nil)
		return err == nil && st == 401
	})

	basic := func(secret string) http.Header {
		h := http.Header{}
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("opencode:"+secret)))
		return h
	}
	get := func(path string, h http.Header, out any) {
		t.Helper()
		st, b, err := call(ctx, httpClient, "GET", base+path, h, nil)
		if err != nil || st != 200 {
			t.Fatalf("GET %s: %d %v %s", path, st, err, b)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}

	// Pair: the password makes a code, the code becomes a token.
	var code struct {
		Code      string `json:"code"`
		ExpiresIn int    `json:"expires_in"`
	}
	st, b, err := call(ctx, httpClient, "POST", base+"/api/pair", basic("instance-secret"), nil)
	if err != nil || st != 200 || json.Unmarshal(b, &code) != nil || code.ExpiresIn != 300 {
		t.Fatalf("pair: %d %v %s", st, err, b)
	}
	accept := http.Header{"Accept": {"application/json"}}
	var session struct{ Token string }
	st, b, _ = call(ctx, httpClient, "GET", base+"/auth/connect/"+code.Code, accept, nil)
	if st != 200 || json.Unmarshal(b, &session) != nil || session.Token == "" {
		t.Fatalf("connect: %d %s", st, b)
	}
	if st, _, _ := call(ctx, httpClient, "GET", base+"/auth/connect/"+code.Code, accept, nil); st != 401 {
		t.Fatalf("a spent pairing code answered %d", st)
	}
	auth := basic(session.Token)

	var info struct {
		Version string
		PID     int
		URLs    []string
	}
	get("/api/info", auth, &info)
	if info.PID <= 0 || len(info.URLs) == 0 {
		t.Fatalf("info %+v", info)
	}
	var loc struct {
		Directory string
		Project   struct{ ID, Directory string }
	}
	get("/api/location", auth, &loc)
	if loc.Directory != project || loc.Project.ID == "" {
		t.Fatalf("location %+v", loc)
	}
	var agents struct {
		Location struct{ Directory string }
		Data     []struct{ ID, Mode, Description string }
	}
	get("/api/agent", auth, &agents)
	ids := map[string]string{}
	for _, a := range agents.Data {
		ids[a.ID] = a.Mode
	}
	if ids["build"] != "primary" || ids["reviewer"] != "subagent" || ids["docs"] != "primary" || agents.Location.Directory != project {
		t.Fatalf("agents %+v", agents)
	}

	// The event stream, with the token in ?auth_token= as EventSource clients send it.
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	req, _ := http.NewRequestWithContext(evCtx, "GET", base+"/api/event?auth_token="+base64.StdEncoding.EncodeToString([]byte("opencode:"+session.Token)), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("event stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	events := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ev map[string]any
				if json.Unmarshal([]byte(data), &ev) == nil {
					events <- ev
				}
			}
		}
		close(events)
	}()
	if ev := <-events; ev["type"] != "server.connected" {
		t.Fatalf("first event %v", ev)
	}

	type plugin struct {
		Source struct {
			Type, Target, Version string
			Outdated              bool
		}
		State    struct{ Status, Error string }
		Features map[string]any
	}
	findPkg := func(list []plugin) plugin {
		for _, p := range list {
			if p.Source.Type == "package" {
				return p
			}
		}
		t.Fatalf("no package plugin in %+v", list)
		return plugin{}
	}
	var plugins struct{ Data []plugin }
	get("/api/plugin", auth, &plugins)
	// Installed at start, at the version the Caddyfile names.
	if p := findPkg(plugins.Data); p.State.Status != "active" || p.Source.Version != "1.0.0" {
		t.Fatalf("before the update: %+v", p)
	}
	var checked struct{ Data []plugin }
	st, b, _ = call(ctx, httpClient, "POST", base+"/api/plugin/check", auth, map[string]any{})
	if st != 200 || json.Unmarshal(b, &checked) != nil || !findPkg(checked.Data).Source.Outdated {
		t.Fatalf("check: %d %s", st, b)
	}
	st, b, _ = call(ctx, httpClient, "POST", base+"/api/plugin/update", auth, map[string]any{"targets": []string{pkg}})
	if st != 204 {
		t.Fatalf("update: %d %s", st, b)
	}
	seen := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for !seen["plugin.updated"] || !seen["location.shutdown"] {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended")
			}
			seen[fmt.Sprint(ev["type"])] = true
			if ev["type"] == "location.shutdown" {
				if l, _ := ev["location"].(map[string]any); l["directory"] != project {
					t.Fatalf("shutdown of %v", ev["location"])
				}
			}
		case <-deadline:
			t.Fatalf("events seen: %v", seen)
		}
	}
	var after struct{ Data []plugin }
	get("/api/plugin", auth, &after)
	// Installed and loaded in the plugin host: active, with what it hooks.
	if p := findPkg(after.Data); p.State.Status != "active" || p.Source.Version != "1.1.0" || p.Source.Outdated || p.Features["server"] != true {
		t.Fatalf("after update: %+v", p)
	}
	if st, _, _ := call(ctx, httpClient, "GET", base+"/api/agent", nil, nil); st != 401 {
		t.Fatalf("no credentials: %d", st)
	}
}

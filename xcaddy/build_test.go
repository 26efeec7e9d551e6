package xcaddy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ourModule is the module path the xcaddy build must never look up remotely;
// the go command also asks about its prefixes (github.com/agentgate), which
// ourOrg matches too.
const (
	ourModule = "github.com/agentgate/agentgate"
	ourOrg    = "github.com/agentgate/"
)

// wantModules are the Caddy modules agentgate adds.
var wantModules = []string{"agentgate", "http.handlers.workspace_console", "admin.api.agentgate"}

// repoRoot is the root of the repository (the directory of the root
// go.mod): the parent of this package's directory, which is where go test
// runs the test.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s has no go.mod: %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(wd, "build.sh")); err != nil {
		t.Fatalf("the test does not run in xcaddy/: %v", err)
	}
	return root
}

// testContext is bounded by the test binary's deadline (less a margin for
// reporting) and by max.
func testContext(t *testing.T, max time.Duration) context.Context {
	t.Helper()
	deadline := time.Now().Add(max)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// caddyVersion is the Caddy version pinned in the root go.mod.
func caddyVersion(t *testing.T, ctx context.Context, root string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "github.com/caddyserver/caddy/v2")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m github.com/caddyserver/caddy/v2: %v", err)
	}
	v := strings.TrimSpace(string(out))
	if !strings.HasPrefix(v, "v2.") {
		t.Fatalf("unexpected Caddy version %q in the root go.mod", v)
	}
	return v
}

// checkBinary asserts that the binary lists every agentgate module and is
// built against Caddy at version.
func checkBinary(t *testing.T, ctx context.Context, bin, version string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, bin, "list-modules").CombinedOutput()
	if err != nil {
		t.Fatalf("%s list-modules: %v\n%s", bin, err, out)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		listed[strings.TrimSpace(line)] = true
	}
	for _, m := range wantModules {
		if !listed[m] {
			t.Errorf("%s list-modules does not list %s; got:\n%s", bin, m, out)
		}
	}
	info, err := exec.CommandContext(ctx, bin, "build-info").CombinedOutput()
	if err != nil {
		t.Fatalf("%s build-info: %v\n%s", bin, err, info)
	}
	want := "dep\tgithub.com/caddyserver/caddy/v2\t" + version + "\t"
	if !strings.Contains(string(info), want) {
		t.Errorf("%s is not built with Caddy %s; build-info:\n%s", bin, version, info)
	}
}

func TestGoBuildHasAgentgateModules(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping under -short: builds the custom Caddy with go build (up to minutes on a cold cache)")
	}
	ctx := testContext(t, 8*time.Minute)
	root := repoRoot(t)
	version := caddyVersion(t, ctx, root)
	bin := filepath.Join(t.TempDir(), "caddy")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/caddy")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/caddy: %v\n%s", err, out)
	}
	t.Logf("go build ./cmd/caddy took %s", time.Since(start).Round(time.Millisecond))
	checkBinary(t, ctx, bin, version)
}

func TestXcaddyBuildHasAgentgateModules(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping under -short: the xcaddy build compiles all of Caddy in a fresh module (minutes on a cold cache)")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed: build.sh needs it")
	}
	ctx := testContext(t, 9*time.Minute)
	root := repoRoot(t)
	version := caddyVersion(t, ctx, root)
	bin := filepath.Join(t.TempDir(), "caddy-xcaddy")

	env := os.Environ()
	rec := newRecordingProxy(t, ctx)
	if rec != nil {
		// Every module download goes through the recorder, which forwards it
		// to the configured proxy and remembers what was asked.
		env = append(env, "GOPROXY="+rec.url)
	}

	var log bytes.Buffer
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "xcaddy", "build.sh"), bin)
	cmd.Dir = t.TempDir() // build.sh must not depend on the working directory
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("xcaddy/build.sh: %v\n%s", err, log.String())
	}
	t.Logf("xcaddy/build.sh took %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(log.String(), ourModule+"@v0.0.0 => "+root) {
		t.Errorf("build.sh did not report the local replacement of %s@v0.0.0 by %s:\n%s", ourModule, root, log.String())
	}

	checkBinary(t, ctx, bin, version)
	info, _ := exec.CommandContext(ctx, bin, "build-info").CombinedOutput()
	if !strings.Contains(string(info), "dep\t"+ourModule+"\tv0.0.0") {
		t.Errorf("the xcaddy binary does not depend on %s v0.0.0 (the local replacement); build-info:\n%s", ourModule, info)
	}

	if rec != nil {
		asked := rec.asked()
		t.Logf("the build made %d module proxy requests", len(asked))
		for _, p := range asked {
			if strings.Contains(p, ourOrg) {
				t.Errorf("the xcaddy build looked up its own module remotely: GET %s", p)
			}
		}
	}
}

// recordingProxy is a Go module proxy that forwards to the configured one
// and records every path asked, refusing our own module.
type recordingProxy struct {
	url      string
	mu       sync.Mutex
	requests []string
}

func (r *recordingProxy) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// newRecordingProxy starts a recorder in front of the first proxy of `go env
// GOPROXY`, or returns nil when there is no HTTP proxy to put it in front of.
func newRecordingProxy(t *testing.T, ctx context.Context) *recordingProxy {
	t.Helper()
	out, err := exec.CommandContext(ctx, "go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env GOPROXY: %v", err)
	}
	upstream := strings.TrimSpace(strings.FieldsFunc(strings.TrimSpace(string(out))+",", func(r rune) bool { return r == ',' || r == '|' })[0])
	if !strings.HasPrefix(upstream, "http://") && !strings.HasPrefix(upstream, "https://") {
		t.Logf("GOPROXY is %q: not recording module look-ups", strings.TrimSpace(string(out)))
		return nil
	}
	upstream = strings.TrimRight(upstream, "/")
	rec := &recordingProxy{}
	client := &http.Client{Timeout: 2 * time.Minute}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.requests = append(rec.requests, r.URL.Path)
		rec.mu.Unlock()
		if strings.Contains(r.URL.Path, ourOrg) {
			http.Error(w, "the build must not look up "+ourModule, http.StatusGone)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.Path, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, fmt.Sprintf("forwarding: %v", err), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for _, h := range []string{"Content-Type", "Content-Length"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rec.url = "http://" + ln.Addr().String()
	return rec
}

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/pgtest"
	"github.com/agentgate/agentgate/internal/testenv"
)

const shortSkip = "skipping under -short: builds and runs the real caddy binary"

// build is the binary shared by every test of the package, built on first use.
var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	took time.Duration
}

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Teardown() // the PostgreSQL server of the multi-node tests, if one was started
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// envBinary names a binary built already (by the isolation test, for the
// run it starts), used instead of building one.
const envBinary = "AGENTGATE_E2E_CADDY"

// caddyBinary skips the test under -short and otherwise returns the path of
// the real binary, building it with `go build ./cmd/caddy` from the
// repository root on first use.
func caddyBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip(shortSkip)
	}
	if bin := os.Getenv(envBinary); bin != "" {
		return bin
	}
	root := testenv.RepoRoot(t)
	build.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		var err error
		if build.dir, err = os.MkdirTemp("", "agentgate-e2e-"); err != nil {
			build.err = err
			return
		}
		bin := filepath.Join(build.dir, "caddy")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/caddy")
		cmd.Dir = root
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, out)
			return
		}
		build.bin, build.took = bin, time.Since(start)
		t.Logf("built %s in %s", bin, build.took.Round(time.Millisecond))
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// testContext bounds a test: max, and never past the test binary's deadline
// (less a margin so that failures are still reported).
func testContext(t *testing.T, max time.Duration) context.Context {
	t.Helper()
	deadline := time.Now().Add(max)
	if d, ok := t.Deadline(); ok && d.Add(-20*time.Second).Before(deadline) {
		deadline = d.Add(-20 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		// The kernel may hand a closed port out again; two Caddy
		// processes would then both listen on it (Caddy sets
		// SO_REUSEPORT) and split its connections. No address is given
		// twice in one run.
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

// handedOut are the addresses freeAddr gave.
var handedOut sync.Map

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// syncBuffer is a bytes.Buffer safe for the process's copier and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// config is what varies between the generated Caddyfiles.
type config struct {
	DataDir   string // storage badger <DataDir>; "" for the default under XDG_DATA_HOME
	MaxBody   string // workspace_console max_request_body; "" for the default
	Debug     bool   // the debug global option
	AccessLog bool   // an access log (to stderr) for the site
	// DeviceClients are the workspace_console device_client ids; none for
	// the default (agentgate-cli).
	DeviceClients []string
	// Postgres, when set, is the DSN of a PostgreSQL database the node
	// keeps its state in, with MasterKey (required with it). Both reach
	// the process through its environment only, as in
	// examples/multi-node: `storage postgres {env.AGENTGATE_POSTGRES_DSN}`
	// and `master_key {env.AGENTGATE_MASTER_KEY}`.
	Postgres, MasterKey string
	// AccessTokenTTL is the agentgate access_token_ttl; "" for the default.
	AccessTokenTTL string
}

// server is one caddy process, with its own ports, XDG directories and log.
type server struct {
	t         *testing.T
	bin       string
	dir       string
	env       []string
	adminAddr string
	httpAddr  string
	cfgPath   string
	cfg       config

	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan struct{}
	waitErr        error
}

// newServer prepares a server (ports, directories, Caddyfile) without starting it.
func newServer(t *testing.T, bin string, c config) *server {
	t.Helper()
	dir := t.TempDir()
	s := &server{t: t, bin: bin, dir: dir, adminAddr: freeAddr(t), httpAddr: freeAddr(t),
		cfgPath: filepath.Join(dir, "Caddyfile")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "AGENTGATE_") {
			s.env = append(s.env, kv)
		}
	}
	// The binary starts tools (the plugin host's Bun, an agent's commands
	// with the sandbox off): their home, caches and temporary files lie in
	// a temp dir (testenv.ToolVars); Caddy's data and config under dir.
	s.env = testenv.SetEnv(s.env, append(testenv.ToolVars(t),
		"XDG_DATA_HOME="+filepath.Join(dir, "xdg-data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg-config"))...)
	s.writeConfig(c)
	return s
}

// caddyfile renders the Caddyfile of c for this server's addresses.
func (s *server) caddyfile(c config) string {
	var b strings.Builder
	b.WriteString("{\n")
	fmt.Fprintf(&b, "\tadmin %s\n", s.adminAddr)
	if c.Debug {
		b.WriteString("\tdebug\n")
	}
	b.WriteString("\tagentgate {\n")
	if c.Postgres != "" {
		b.WriteString("\t\tstorage postgres {env.AGENTGATE_POSTGRES_DSN}\n\t\tmaster_key {env.AGENTGATE_MASTER_KEY}\n")
	} else if c.DataDir != "" {
		fmt.Fprintf(&b, "\t\tstorage badger %q\n", c.DataDir)
	} else {
		b.WriteString("\t\tstorage badger\n")
	}
	if c.AccessTokenTTL != "" {
		fmt.Fprintf(&b, "\t\taccess_token_ttl %s\n", c.AccessTokenTTL)
	}
	b.WriteString("\t}\n}\n\n")
	fmt.Fprintf(&b, "http://%s {\n\tbind 127.0.0.1\n", s.httpAddr)
	if c.AccessLog {
		// A plain access log, as an operator writes it: the gateway and
		// the Console keep workspace keys out of it themselves.
		b.WriteString("\tlog {\n\t\toutput stderr\n\t\tformat json\n\t}\n")
	}
	b.WriteString("\tllm_gateway\n")
	if c.MaxBody != "" || len(c.DeviceClients) > 0 {
		b.WriteString("\tworkspace_console {\n")
		if c.MaxBody != "" {
			fmt.Fprintf(&b, "\t\tmax_request_body %s\n", c.MaxBody)
		}
		if len(c.DeviceClients) > 0 {
			fmt.Fprintf(&b, "\t\tdevice_client %s\n", strings.Join(c.DeviceClients, " "))
		}
		b.WriteString("\t}\n")
	} else {
		b.WriteString("\tworkspace_console\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// writeConfig writes the Caddyfile of c to s.cfgPath and returns its text.
func (s *server) writeConfig(c config) string {
	s.t.Helper()
	s.cfg = c
	text := s.caddyfile(c)
	if err := os.WriteFile(s.cfgPath, []byte(text), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return text
}

// home is the process's HOME.
func (s *server) home() string {
	home := ""
	for _, kv := range s.env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	return home
}

// dataDir is the agentgate data directory of the current config.
func (s *server) dataDir() string {
	if s.cfg.DataDir != "" {
		return s.cfg.DataDir
	}
	return filepath.Join(s.dir, "xdg-data", "caddy", "agentgate")
}

// startServer starts a server and waits until it serves.
func startServer(t *testing.T, ctx context.Context, bin string, c config) *server {
	t.Helper()
	s := newServer(t, bin, c)
	s.start()
	s.waitReady(ctx)
	return s
}

// start starts the process; t.Cleanup kills it if it still runs.
func (s *server) start() {
	s.t.Helper()
	s.stdout, s.stderr = &syncBuffer{}, &syncBuffer{}
	s.exited = make(chan struct{})
	s.cmd = exec.Command(s.bin, "run", "--config", s.cfgPath, "--adapter", "caddyfile")
	s.cmd.Dir = s.dir
	s.cmd.Env = s.env
	if s.cfg.Postgres != "" {
		s.cmd.Env = append(s.env[:len(s.env):len(s.env)],
			"AGENTGATE_POSTGRES_DSN="+s.cfg.Postgres, "AGENTGATE_MASTER_KEY="+s.cfg.MasterKey)
	}
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	s.cmd.WaitDelay = 5 * time.Second
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t := s.t
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("caddy (admin %s, http %s) stderr:\n%s", s.adminAddr, s.httpAddr, tail(s.stderr.String(), 12000))
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// running reports whether the process has not exited.
func (s *server) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// waitReady polls until the store is open behind both the admin API and the
// Console, failing at once if the process exits.
func (s *server) waitReady(ctx context.Context) {
	s.t.Helper()
	start := time.Now()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.exited:
			s.t.Fatalf("caddy exited before it was ready (%v); stderr:\n%s", s.waitErr, s.stderr.String())
		case <-ctx.Done():
			s.t.Fatalf("caddy not ready after %s; stderr:\n%s", time.Since(start).Round(time.Millisecond), s.stderr.String())
		case <-tick.C:
		}
		st, _, err := s.admin(ctx, "GET", "/agentgate/workspaces", nil)
		if err != nil || st != http.StatusOK {
			continue
		}
		st, _, err = s.console(ctx, "GET", "/api/v2/config", "", nil)
		if err == nil && st == http.StatusUnauthorized {
			return
		}
	}
}

// kill SIGKILLs the process (if it runs) and waits for it.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil || !s.running() {
		return
	}
	s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Errorf("caddy (pid %d) did not exit 30s after SIGKILL", s.cmd.Process.Pid)
	}
}

// stop asks the process to shut down (SIGINT) and waits for it, killing it
// if it takes more than 30 s.
func (s *server) stop() {
	s.t.Helper()
	if !s.running() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Errorf("caddy did not stop within 30s of SIGINT; killing it")
		s.kill()
	}
}

// httpClient talks to the servers; never through a proxy.
var httpClient = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	},
}

// freshClient opens a new connection for every request. See TestReloadDuringWrites.
var freshClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

// call sends a request; body is JSON-encoded unless it is a []byte or string.
func call(ctx context.Context, client *http.Client, method, rawURL string, hdr http.Header, body any) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(j)
		if hdr.Get("Content-Type") == "" {
			hdr = hdr.Clone()
			if hdr == nil {
				hdr = http.Header{}
			}
			hdr.Set("Content-Type", "application/json")
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// admin calls the admin API of the server.
func (s *server) admin(ctx context.Context, method, path string, body any) (int, []byte, error) {
	return call(ctx, httpClient, method, "http://"+s.adminAddr+path, nil, body)
}

// console calls the Console API of the server with a bearer credential.
func (s *server) console(ctx context.Context, method, path, bearer string, body any) (int, []byte, error) {
	h := http.Header{}
	if bearer != "" {
		h.Set("Authorization", "Bearer "+bearer)
	}
	return call(ctx, httpClient, method, "http://"+s.httpAddr+path, h, body)
}

// must fails the test unless the call answered want, and decodes the
// answer's "data" into out (when out is not nil).
func must(t *testing.T, what string, want int, out any) func(int, []byte, error) {
	t.Helper()
	return func(st int, body []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if st != want {
			t.Fatalf("%s: HTTP %d, want %d: %s", what, st, want, body)
		}
		if out != nil {
			decodeData(t, what, body, out)
		}
	}
}

func decodeData(t *testing.T, what string, body []byte, out any) {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || len(env.Data) == 0 {
		t.Fatalf("%s: answer is not {\"data\": …}: %v: %s", what, err, body)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		t.Fatalf("%s: decoding data: %v: %s", what, err, body)
	}
}

// idName is the {id, name} of created records.
type idName struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// tenant is a workspace with an owner who holds an access token.
type tenant struct {
	Workspace, Person, Email, Password, Token string
}

// bootstrap creates a workspace and an owner through the admin API and mints
// the owner an access token bound to the workspace.
func (s *server) bootstrap(t *testing.T, ctx context.Context, name string) tenant {
	t.Helper()
	var ws, p idName
	must(t, "create workspace", 201, &ws)(s.admin(ctx, "POST", "/agentgate/workspaces", map[string]any{"name": name}))
	tn := tenant{Workspace: ws.ID, Email: strings.ToLower(name) + "-owner@example.com", Password: "pw-" + randomHex(12)}
	must(t, "create person", 201, &p)(s.admin(ctx, "POST", "/agentgate/people",
		map[string]any{"email": tn.Email, "name": name + " Owner", "password": tn.Password, "workspace": ws.ID, "role": "owner"}))
	tn.Person = p.ID
	tn.Token = s.token(t, ctx, p.ID, ws.ID)
	return tn
}

// token mints an access token for a person, bound to a workspace.
func (s *server) token(t *testing.T, ctx context.Context, person, workspace string) string {
	t.Helper()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	must(t, "issue token", 201, &tok)(s.admin(ctx, "POST", "/agentgate/people/"+url.PathEscape(person)+"/tokens",
		map[string]any{"workspace": workspace}))
	if tok.AccessToken == "" {
		t.Fatal("issue token: empty access_token")
	}
	return tok.AccessToken
}

// adminServiceAccounts lists a workspace's service accounts through the
// admin API, as id → name.
func (s *server) adminServiceAccounts(t *testing.T, ctx context.Context, wrk string) map[string]string {
	t.Helper()
	var list []idName
	must(t, "list service accounts (admin)", 200, &list)(s.admin(ctx, "GET", "/agentgate/workspaces/"+url.PathEscape(wrk)+"/service-accounts", nil))
	out := map[string]string{}
	for _, sa := range list {
		out[sa.ID] = sa.Name
	}
	return out
}

// consoleServiceAccounts lists the service accounts through the Console API,
// following every page, as id → name.
func (s *server) consoleServiceAccounts(t *testing.T, ctx context.Context, token string) map[string]string {
	t.Helper()
	out := map[string]string{}
	cursor := ""
	for {
		path := "/api/v1/service-accounts?limit=1000"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		st, body, err := s.console(ctx, "GET", path, token, nil)
		must(t, "list service accounts (console)", 200, nil)(st, body, err)
		var page struct {
			Data       []idName `json:"data"`
			NextCursor *string  `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("list service accounts (console): %v: %s", err, body)
		}
		for _, sa := range page.Data {
			out[sa.ID] = sa.Name
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return out
		}
		cursor = *page.NextCursor
	}
}

// cli runs `caddy agentgate <args> --address <admin>` and returns its
// standard output, failing the test if it fails.
func (s *server) cli(t *testing.T, ctx context.Context, args ...string) []byte {
	t.Helper()
	args = append(append([]string{"agentgate"}, args...), "--address", s.adminAddr)
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = s.env
	cmd.Dir = s.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("caddy %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// acked is the set of ids whose creation was acknowledged.
type acked struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (a *acked) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[string]bool{}
	}
	a.ids[id] = true
}

func (a *acked) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids)
}

func (a *acked) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.ids))
	for id := range a.ids {
		out = append(out, id)
	}
	return out
}

// waitFor polls cond every 10 ms until it holds, failing the test when ctx
// ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// missing returns the acknowledged ids absent from listed.
func missing(ack []string, listed map[string]string) []string {
	var out []string
	for _, id := range ack {
		if _, ok := listed[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// TestHarnessWritesOnlyTempDirs runs end-to-end tests (the binary started,
// bootstrapped with `caddy agentgate` commands, restarted and reloaded)
// with an empty home and empty XDG and temporary directories: all stay
// empty.
func TestHarnessWritesOnlyTempDirs(t *testing.T) {
	bin := caddyBinary(t)
	testenv.RunIsolated(t, "^(TestBootstrapWithCommands|TestSessionsSurviveRestartAndReload)$", envBinary+"="+bin)
}

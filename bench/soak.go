package main

// The soak (go run ./bench -soak 1h): one agentgate process serving an
// llm_gateway site and an agent_instance site, under steady mixed load
// for a long time, sampled every minute, so that a leak — memory,
// goroutines or open files growing with the requests and sessions
// served — shows as a slope over the run's second half. See
// docs/performance.md, "Soak".

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
)

// soakOptions sizes a soak.
type soakOptions struct {
	dur        time.Duration
	rate       int           // gateway requests per second; 0: half the capacity measured at the start
	capDur     time.Duration // the closed-loop capacity measurement
	sample     time.Duration // how often RSS, heap, goroutines and open files are sampled
	reload     time.Duration // how often the config is loaded again
	sessionGap time.Duration // pause between one instance worker's sessions
	workers    int           // instance session workers
	keep       int           // sessions kept per worker; older ones are deleted
	churnGap   time.Duration // how often a short-lived event client connects
	pin        bool
	bin        string
	root       string
	out        string // results directory; "" writes nothing
	stamp      string
	limits     soakLimits
	logf       func(string, ...any)
}

// soakLimits are the slopes, per hour over the run's second half, above
// which the soak fails.
type soakLimits struct {
	heapMB, goroutines, fds float64
	why                     string // where the limits come from, for the report
}

// hourLimits are the soak's limits: 1 MB of heap, 10 goroutines and one open
// file per hour.
var hourLimits = soakLimits{heapMB: 1, goroutines: 10, fds: 1, why: "the one-hour soak's limits"}

func soakDefaults(dur time.Duration) soakOptions {
	return soakOptions{dur: dur, capDur: 5 * time.Second, sample: time.Minute, reload: 3 * time.Minute,
		sessionGap: time.Second, workers: 2, keep: 5, churnGap: 2 * time.Second, pin: true, limits: hourLimits}
}

// soakKind is one kind of gateway request the soak sends.
type soakKind struct {
	name   string
	path   string // under the gateway site
	body   []byte
	stream bool
	want   int  // expected status
	bad    bool // sent with a key that does not exist
	cancel bool // a stream the client abandons after its first event
}

// soakRig is the soak's processes and what it created in them.
type soakRig struct {
	work, bin, caddyVersion string
	pin                     bool
	// good answers every gateway format; bad answers 503 (the Inference
	// API model's first target); slow streams at a 20 ms pace (the
	// disconnect lane); agent answers the instance's turns from a script.
	good, bad, slow, agent *fakeprovider.Provider
	cmd                    *exec.Cmd
	log                    *os.File
	n                      *gwNode // admin address, workspace, the main service account and key
	gwAddr, instAddr       string
	cfPath, dataDir        string
	projects               []string
	conns                  map[string]string
	cancelSA, cancelKey    string
	instSA                 string
	reloads                int
	reloadAt               atomic.Int64 // when the last reload ended (unix ns)
	instRetried            atomic.Int64 // instance requests sent again after a reload closed their connection
	q                      quietGate
}

// quietGate pauses the load for a sample. Read under load, goroutines,
// descriptors and live heap go up and down by hundreds with the requests,
// sessions and streams in flight (and the keep-alive connections the
// load's peaks opened), which would swamp a slope of a few per hour. At
// each sample the load stops starting work, the work in flight finishes,
// the clients close their idle connections, and the reading is the
// server's floor: what it holds with nothing to do but the long-lived
// event streams and the sessions kept. A leak raises that floor.
type quietGate struct {
	paused      atomic.Bool
	busy        atomic.Int64 // gateway requests, sessions and short-lived event clients in progress
	pausedTicks atomic.Int64 // gateway ticks not sent because the load was paused
	ticks       atomic.Int64 // gateway ticks received (the ticker drops those the generator is too busy to take)
}

// quiet pauses the load, waits (at most 20 s) for the work in flight,
// closes the idle connections on both sides of the server and waits a
// moment for it to drop them; resume ends the pause. waited is how long it took.
func (r *soakRig) quiet() (waited time.Duration, drained bool) {
	t0 := time.Now()
	r.q.paused.Store(true)
	deadline := t0.Add(20 * time.Second)
	for r.q.busy.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	drained = r.q.busy.Load() == 0
	soakClient.CloseIdleConnections()
	eventHTTP.CloseIdleConnections()
	// The gateway's own keep-alive connections to the providers (two
	// goroutines each in its transport) are closed from the providers'
	// side.
	for _, p := range []*fakeprovider.Provider{r.good, r.bad, r.slow, r.agent} {
		p.CloseIdleConnections()
	}
	time.Sleep(300 * time.Millisecond)
	return time.Since(t0), drained
}

func (r *soakRig) resume() { r.q.paused.Store(false) }

// sinceReload is how long before t the last reload ended (0 when one
// is under way or ended after t).
func (r *soakRig) sinceReload(t time.Time) time.Duration {
	at := r.reloadAt.Load()
	if at == 0 {
		return time.Duration(1 << 62)
	}
	return max(0, t.Sub(time.Unix(0, at)))
}

const (
	soakWorkspace  = "soak"
	soakAgentModel = "soak-agent"
	soakFallback   = "soak-fb"
	soakKindHeader = "X-Soak-Kind" // passed through to the provider, which counts answers by kind
)

func startSoakRig(ctx context.Context, o soakOptions) (r *soakRig, err error) {
	work, err := os.MkdirTemp("", "agentgate-soak-")
	if err != nil {
		return nil, err
	}
	r = &soakRig{work: work, pin: o.pin && tasksetAvailable(), conns: map[string]string{}, dataDir: filepath.Join(work, "data")}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.bin = o.bin; r.bin == "" {
		o.logf("building ./cmd/caddy …")
		r.bin = filepath.Join(work, "caddy")
		build := exec.CommandContext(ctx, "go", "build", "-o", r.bin, "./cmd/caddy")
		build.Dir = o.root
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, out)
		}
	}
	if out, err := exec.Command(r.bin, "version").Output(); err == nil {
		r.caddyVersion = strings.TrimSpace(string(out))
	}
	for _, p := range []**fakeprovider.Provider{&r.good, &r.bad, &r.slow, &r.agent} {
		if *p, err = fakeprovider.Start(providerSecret); err != nil {
			return nil, err
		}
	}
	r.good.SetBehavior(fakeprovider.Behavior{Chunks: 16})
	r.bad.SetBehavior(fakeprovider.Behavior{Status: http.StatusServiceUnavailable})
	r.slow.SetBehavior(fakeprovider.Behavior{Chunks: 50, Delay: pace})
	r.agent.SetBehavior(fakeprovider.Behavior{Script: soakScript})
	for i := range 3 {
		d := filepath.Join(work, "projects", fmt.Sprintf("p%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		for name, body := range map[string]string{"README.md": "# soak project\n\nstatus lines below.\n", "main.go": "package main\n\nfunc main() {}\n"} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
				return nil, err
			}
		}
		r.projects = append(r.projects, d)
	}

	// The first start has the gateway only: the instance's workspace
	// model must exist before the instance names it.
	r.n = &gwNode{adminAddr: freeAddr()}
	r.gwAddr, r.instAddr = freeAddr(), freeAddr()
	r.cfPath = filepath.Join(work, "soak.Caddyfile")
	if err := os.WriteFile(r.cfPath, []byte(r.caddyfile(false, "1s")), 0o600); err != nil {
		return nil, err
	}
	if r.log, err = os.Create(filepath.Join(work, "caddy.log")); err != nil {
		return nil, err
	}
	args := []string{"run", "--config", r.cfPath, "--adapter", "caddyfile"}
	if r.pin {
		r.cmd = exec.Command("taskset", append([]string{"-c", "1", r.bin}, args...)...)
	} else {
		r.cmd = exec.Command(r.bin, args...)
	}
	home := filepath.Join(work, "home")
	r.cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+filepath.Join(work, "xdg-data"),
		"XDG_CONFIG_HOME="+filepath.Join(work, "xdg-config"), "XDG_CACHE_HOME="+filepath.Join(work, "xdg-cache"),
		"XDG_STATE_HOME="+filepath.Join(work, "xdg-state"), "GOMAXPROCS="+serverProcs(),
		"GODEBUG="+withGODEBUG(os.Getenv("GODEBUG"), "memprofilerate="+strconv.Itoa(soakProfileRate)))
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	if err := r.waitFor(ctx, "the admin API", func() bool {
		st, _, err := r.n.admin(ctx, "GET", "/agentgate/workspaces", nil)
		return err == nil && st == 200
	}); err != nil {
		return nil, err
	}
	if err := r.bootstrap(ctx); err != nil {
		return nil, err
	}
	if err := r.load(ctx, r.caddyfile(true, "1s")); err != nil {
		return nil, err
	}
	r.reloads = 0
	if err := r.waitFor(ctx, "the instance", func() bool {
		st, _, err := r.inst(ctx, "GET", "/api/info", nil, nil)
		return err == nil && st == 200
	}); err != nil {
		return nil, err
	}
	// The instance's service account exists once the instance started;
	// a budget makes its spend readable like the others'.
	var sas []struct{ ID, Name string }
	if err := r.n.adminData(ctx, "list service accounts", 200, "GET", "/agentgate/workspaces/"+r.n.ws+"/service-accounts", nil, &sas); err != nil {
		return nil, err
	}
	for _, sa := range sas {
		if strings.HasPrefix(sa.Name, "instance ") {
			r.instSA = sa.ID
		}
	}
	if r.instSA == "" {
		return nil, errors.New("the instance's service account is not in the workspace")
	}
	if err := r.setBudget(ctx, r.instSA); err != nil {
		return nil, err
	}
	return r, nil
}

// caddyfile is the soak's config: the gateway site, and the instance
// site when withInstance. cooldown alternates between reloads, so that
// each reload is a real one.
func (r *soakRig) caddyfile(withInstance bool, cooldown string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{\n\tadmin %s\n\tagentgate {\n\t\tstorage badger %q\n\t}\n}\n\n", r.n.adminAddr, r.dataDir)
	fmt.Fprintf(&b, "http://%s {\n\tbind 127.0.0.1\n\tllm_gateway {\n\t\tcooldown %s\n\t}\n}\n", r.gwAddr, cooldown)
	if withInstance {
		fmt.Fprintf(&b, "\nhttp://%s {\n\tbind 127.0.0.1\n\tagent_instance {\n\t\tworkspace %s\n\t\tmodel %s\n\t\tdirectory %q\n\t\tallow_root %q\n\t}\n}\n",
			r.instAddr, soakWorkspace, soakAgentModel, r.projects[0], filepath.Dir(r.projects[0]))
	}
	return b.String()
}

// load posts a Caddyfile to the admin API's /load.
func (r *soakRig) load(ctx context.Context, cf string) error {
	r.reloadAt.Store(time.Now().UnixNano())
	defer func() { r.reloadAt.Store(time.Now().UnixNano()) }()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+r.n.adminAddr+"/load", strings.NewReader(cf))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("load: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("load: status %d: %.300s", resp.StatusCode, b)
	}
	r.reloads++
	return nil
}

func (r *soakRig) waitFor(ctx context.Context, what string, ok func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if ok() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(r.log.Name())
	return fmt.Errorf("%s did not come up; log:\n%s", what, tail(string(b), 4000))
}

func (r *soakRig) setBudget(ctx context.Context, member string) error {
	return r.n.adminData(ctx, "set budget", 200, "PUT", "/agentgate/workspaces/"+r.n.ws+"/budgets/"+member,
		map[string]any{"limit_usd": 100_000, "period": "monthly"}, nil)
}

// bootstrap creates the workspace, two keyed service accounts with
// budgets (the main one, and one for the disconnect lane, whose partial
// streams are not part of the exact sum), a connection per format and
// per provider behaviour, and two workspace models: the Inference API's,
// whose first target always answers 503, and the instance's.
func (r *soakRig) bootstrap(ctx context.Context) error {
	n := r.n
	var ws struct{ ID string }
	if err := n.adminData(ctx, "create workspace", 201, "POST", "/agentgate/workspaces", map[string]any{"name": soakWorkspace}, &ws); err != nil {
		return err
	}
	n.ws = ws.ID
	base := "/agentgate/workspaces/" + ws.ID
	account := func(name string) (id, key string, err error) {
		var sa struct{ ID string }
		if err := n.adminData(ctx, "create service account", 201, "POST", base+"/service-accounts", map[string]any{"name": name}, &sa); err != nil {
			return "", "", err
		}
		var k struct{ Key string }
		if err := n.adminData(ctx, "create key", 201, "POST", base+"/service-accounts/"+sa.ID+"/keys",
			map[string]any{"name": name, "permission": "inference"}, &k); err != nil {
			return "", "", err
		}
		return sa.ID, k.Key, r.setBudget(ctx, sa.ID)
	}
	var err error
	if n.sa, n.key, err = account("soak"); err != nil {
		return err
	}
	if r.cancelSA, r.cancelKey, err = account("soak-disconnects"); err != nil {
		return err
	}
	pricing := map[string]any{"input": priceIn, "output": priceOut}
	for _, c := range []struct{ name, kind, url, model string }{
		{"openai", "openai", r.good.URL + "/v1", model},
		{"anthropic", "anthropic", r.good.URL + "/v1", "claude-soak"},
		{"google", "google", r.good.URL + "/v1beta", "gemini-soak"},
		{"bad", "openai", r.bad.URL + "/v1", model},
		{"slow", "openai", r.slow.URL + "/v1", model},
		{"agent", "openai", r.agent.URL + "/v1", model},
	} {
		var out struct{ ID string }
		if err := n.adminData(ctx, "create connection", 201, "POST", base+"/connections", map[string]any{
			"name": c.name, "kind": c.kind, "base_url": c.url, "credential": providerSecret,
			"models": map[string]any{c.model: map[string]any{"pricing": pricing, "limit": map[string]any{"context": 128000, "output": 4096}}},
		}, &out); err != nil {
			return err
		}
		r.conns[c.name] = out.ID
	}
	if err := n.adminData(ctx, "create model", 201, "POST", base+"/models", map[string]any{"id": soakFallback, "targets": []any{
		map[string]any{"connection": r.conns["bad"], "model": model, "order": 1},
		map[string]any{"connection": r.conns["openai"], "model": model, "order": 2},
	}}, nil); err != nil {
		return err
	}
	return n.adminData(ctx, "create model", 201, "POST", base+"/models", map[string]any{"id": soakAgentModel, "targets": []any{
		map[string]any{"connection": r.conns["agent"], "model": model},
	}}, nil)
}

// inst calls the instance API; out, when set, gets the answer's data.
func (r *soakRig) inst(ctx context.Context, method, path string, body any, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := jsonMarshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.instAddr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := soakClient.Do(req)
	if err != nil && ctx.Err() == nil && r.sinceReload(time.Now()) < reloadGrace {
		// A reload closes the old server's idle keep-alive connections;
		// a request that had just picked one was never read (a request in
		// progress is waited for), so it is sent again, as a client does
		// when the server closed an idle connection, and counted apart.
		r.instRetried.Add(1)
		if req.GetBody != nil {
			req.Body, _ = req.GetBody() // the body again, from its start
		}
		resp, err = soakClient.Do(req)
	}
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

var soakClient = newClient()

func (r *soakRig) close() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { r.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			r.cmd.Process.Kill()
			<-done
		}
	}
	for _, p := range []*fakeprovider.Provider{r.good, r.bad, r.slow, r.agent} {
		if p != nil {
			p.Close()
		}
	}
	if r.log != nil {
		r.log.Close()
	}
	os.RemoveAll(r.work)
}

// soakKinds are the gateway requests of the mix: the four formats on the
// Providers API, streaming and not, and the Inference API's model whose
// first target fails, streaming and not.
func (r *soakRig) soakKinds() []soakKind {
	chat := func(m string, stream bool) []byte {
		s := ""
		if stream {
			s = `"stream":true,"stream_options":{"include_usage":true},`
		}
		return []byte(`{"model":"` + m + `",` + s + `"max_tokens":64,"messages":[{"role":"user","content":"soak: say hello"}]}`)
	}
	st := func(stream bool) string {
		if stream {
			return `"stream":true,`
		}
		return ""
	}
	google := []byte(`{"contents":[{"role":"user","parts":[{"text":"soak: say hello"}]}]}`)
	c := func(name string) string { return "/custom/" + r.conns[name] }
	var ks []soakKind
	for _, stream := range []bool{false, true} {
		sfx := map[bool]string{false: "", true: " stream"}[stream]
		gpath := c("google") + "/models/gemini-soak:generateContent"
		if stream {
			gpath = c("google") + "/models/gemini-soak:streamGenerateContent?alt=sse"
		}
		ks = append(ks,
			soakKind{name: "chat" + sfx, path: c("openai") + "/chat/completions", body: chat(model, stream), stream: stream, want: 200},
			soakKind{name: "responses" + sfx, path: c("openai") + "/responses", body: []byte(`{"model":"` + model + `",` + st(stream) + `"input":"soak: say hello"}`), stream: stream, want: 200},
			soakKind{name: "messages" + sfx, path: c("anthropic") + "/messages", body: []byte(`{"model":"claude-soak",` + st(stream) + `"max_tokens":64,"messages":[{"role":"user","content":"soak: say hello"}]}`), stream: stream, want: 200},
			soakKind{name: "google" + sfx, path: gpath, body: google, stream: stream, want: 200},
			soakKind{name: "inference fallback" + sfx, path: "/v1/chat/completions", body: chat(soakFallback, stream), stream: stream, want: 200},
		)
	}
	return ks
}

// soakSpecial are the mix's other requests: an invalid key (401, never
// reaching a provider) and a stream the client leaves after its first
// event (on the disconnect lane's own key and slow provider).
func (r *soakRig) soakSpecial() (invalid, cancel soakKind) {
	invalid = soakKind{name: "invalid key", path: "/custom/" + r.conns["openai"] + "/chat/completions",
		body: []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"soak"}]}`), want: 401, bad: true}
	cancel = soakKind{name: "client disconnect", path: "/custom/" + r.conns["slow"] + "/chat/completions",
		body:   []byte(`{"model":"` + model + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"soak"}]}`),
		stream: true, want: 200, cancel: true}
	return
}

// send makes one gateway request of kind k and reads its answer (a
// disconnect: its first event, then leaves).
func (r *soakRig) send(ctx context.Context, k *soakKind) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+r.gwAddr+k.path, bytes.NewReader(k.body))
	key := r.n.key
	switch {
	case k.bad:
		key = key[:len(key)-4] + "AAAA"
	case k.cancel:
		key = r.cancelKey
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set(soakKindHeader, map[bool]string{false: "main", true: "invalid"}[k.bad])
	resp, err := soakClient.Do(req)
	if err != nil {
		return transportErr{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != k.want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if k.cancel {
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return fmt.Errorf("before the first event: %v", err)
			}
			if strings.HasPrefix(line, "data:") {
				return nil // the deferred cancel drops the connection mid-stream
			}
		}
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return transportErr{err}
	}
	if k.stream && !bytes.Contains(b, []byte("data:")) {
		return fmt.Errorf("a stream without events: %.200s", b)
	}
	return nil
}

// transportErr is a request that failed below HTTP: the connection
// closed or reset before an answer (or during one).
type transportErr struct{ error }

// soakCounts are one traffic kind's outcomes.
type soakCounts struct {
	sent, ok, errs atomic.Int64
	// cut are requests whose connection closed under them within
	// reloadGrace of a config reload: a reload closes the old server's
	// idle keep-alive connections, and a client that had just picked one
	// for a POST sees EOF or a reset (it is not retried, a POST not being
	// idempotent). Expected, counted apart.
	cut      atomic.Int64
	mu       sync.Mutex
	firstErr string
	firstCut string
}

// reloadGrace is how long after a reload a closed connection counts as
// the reload's.
const reloadGrace = 5 * time.Second

func (c *soakCounts) note(err error, sinceReload time.Duration) {
	if err == nil {
		c.ok.Add(1)
		return
	}
	if _, ok := err.(transportErr); ok && sinceReload < reloadGrace {
		c.cut.Add(1)
		c.mu.Lock()
		if c.firstCut == "" {
			c.firstCut = err.Error()
		}
		c.mu.Unlock()
		return
	}
	c.errs.Add(1)
	c.mu.Lock()
	if c.firstErr == "" {
		c.firstErr = err.Error()
	}
	c.mu.Unlock()
}

// capacity runs the regular mix closed loop at conc for d and answers
// requests per second.
func (r *soakRig) capacity(ctx context.Context, kinds []soakKind, conc int, d time.Duration) (float64, error) {
	var ok, errs atomic.Int64
	var first atomic.Value
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				if err := r.send(ctx, &kinds[i%len(kinds)]); err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if e := errs.Load(); e > 0 {
		return 0, fmt.Errorf("capacity run: %d failed requests (%v)", e, first.Load())
	}
	return float64(ok.Load()) / time.Since(start).Seconds(), nil
}

// gateway sends the mix open loop at rate until ctx ends: a ticker that
// drops the ticks it misses (no bursts to catch up), at most maxInflight
// requests at once (a tick with no room is skipped and counted). Of every
// 50 requests one has an invalid key and one is a disconnect.
func (r *soakRig) gateway(ctx context.Context, rate int, counts map[string]*soakCounts, skipped *atomic.Int64, wg *sync.WaitGroup) {
	kinds := r.soakKinds()
	invalid, cancel := r.soakSpecial()
	const maxInflight = 512
	sem := make(chan struct{}, maxInflight)
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.q.ticks.Add(1)
		if r.q.paused.Load() {
			r.q.pausedTicks.Add(1)
			continue
		}
		k := &kinds[i%len(kinds)]
		switch i % 50 {
		case 17:
			k = &invalid
		case 41:
			k = &cancel
		}
		select {
		case sem <- struct{}{}:
		default:
			skipped.Add(1)
			continue
		}
		c := counts[k.name]
		c.sent.Add(1)
		wg.Add(1)
		r.q.busy.Add(1)
		go func() {
			defer wg.Done()
			defer r.q.busy.Add(-1)
			defer func() { <-sem }()
			// Requests in flight when the soak ends finish on their own
			// context, so that none is counted as a client disconnect.
			t0 := time.Now()
			err := r.send(context.WithoutCancel(ctx), k)
			c.note(err, r.sinceReload(t0))
		}()
	}
}

// soakScript answers the instance's agent: a session's turn first reads,
// lists, globs and greps (one step, four calls), then edits the file its
// prompt names, then answers; the title agent and compaction (requests
// without tools) get text.
func soakScript(body []byte) fakeprovider.Step {
	if bytes.Contains(body, []byte("Generate a title for this conversation")) {
		return fakeprovider.Step{Text: "Soak session"}
	}
	if len(gjson.GetBytes(body, "tools").Array()) == 0 {
		return fakeprovider.Step{Text: "Summary: the soak edited a status file."}
	}
	msgs := gjson.GetBytes(body, "messages").Array()
	lastUser := -1
	for i, m := range msgs {
		if m.Get("role").String() == "user" {
			lastUser = i
		}
	}
	file := ""
	if lastUser >= 0 {
		if m := soakFileRE.FindStringSubmatch(msgs[lastUser].Get("content").Raw); m != nil {
			file = m[1]
		}
	}
	steps := 0
	for _, m := range msgs[lastUser+1:] {
		if m.Get("role").String() == "assistant" {
			steps++
		}
	}
	args := func(v map[string]any) string { b, _ := jsonMarshal(v); return string(b) }
	switch {
	case file == "":
		return fakeprovider.Step{Text: "Nothing to do."}
	case steps == 0:
		return fakeprovider.Step{Text: "Looking around.", Calls: []fakeprovider.Call{
			{ID: "call_read", Name: "read", Args: args(map[string]any{"filePath": file})},
			{ID: "call_list", Name: "list", Args: args(map[string]any{"path": "."})},
			{ID: "call_glob", Name: "glob", Args: args(map[string]any{"pattern": "*.txt"})},
			{ID: "call_grep", Name: "grep", Args: args(map[string]any{"pattern": "status"})},
		}}
	case steps == 1:
		return fakeprovider.Step{Calls: []fakeprovider.Call{{ID: "call_edit", Name: "edit",
			Args: args(map[string]any{"filePath": file, "oldString": "status: todo", "newString": "status: done"})}}}
	default:
		return fakeprovider.Step{Text: "Done: " + file + " says done."}
	}
}

var soakFileRE = regexp.MustCompile(`soak-file: (s-[0-9]+-[0-9]+\.txt)`)

// sessionStats are the instance lane's counts.
type sessionStats struct {
	mu                                   sync.Mutex
	created, turns, compactions, deleted int
	edited                               int // turns whose edit reached the file
	errs                                 int
	firstErr                             string
	expected                             map[string]uint64 // session → its last durable seq, read from its history
}

func (s *sessionStats) fail(err error) {
	s.mu.Lock()
	s.errs++
	if s.firstErr == "" {
		s.firstErr = err.Error()
	}
	s.mu.Unlock()
}

// sessions runs one instance worker until ctx ends: create a session in
// one of the projects, prompt it (the script reads, lists, globs, greps,
// then edits a file), wait for it, compact every third session, read its
// last durable seq from its history, and delete the oldest sessions so
// that the worker keeps at most keep.
func (r *soakRig) sessions(ctx context.Context, w int, o soakOptions, st *sessionStats) {
	var live []string
	for n := 1; ctx.Err() == nil; n++ {
		for r.q.paused.Load() && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		r.q.busy.Add(1)
		err := r.oneSession(ctx, w, n, st, &live, o.keep)
		r.q.busy.Add(-1)
		if err != nil && ctx.Err() == nil {
			st.fail(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(o.sessionGap):
		}
	}
}

func (r *soakRig) oneSession(ctx context.Context, w, n int, st *sessionStats, live *[]string, keep int) error {
	dir := r.projects[(w+n)%len(r.projects)]
	file := fmt.Sprintf("s-%d-%d.txt", w, n)
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte("soak file\nstatus: todo\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(path)
	var s struct{ Data struct{ ID string } }
	code, b, err := r.inst(ctx, "POST", "/api/session", map[string]any{"location": map[string]any{"directory": dir}}, nil)
	if err != nil || code != 200 {
		return fmt.Errorf("create session: %d %v %.200s", code, err, b)
	}
	if err := jsonUnmarshal(b, &s); err != nil || s.Data.ID == "" {
		return fmt.Errorf("create session: %.200s", b)
	}
	id := s.Data.ID
	st.mu.Lock()
	st.created++
	st.mu.Unlock()
	*live = append(*live, id)
	for len(*live) > keep {
		old := (*live)[0]
		*live = (*live)[1:]
		if code, b, err := r.inst(context.WithoutCancel(ctx), "DELETE", "/api/session/"+old, nil, nil); err != nil || code >= 300 {
			st.fail(fmt.Errorf("delete session: %d %v %.200s", code, err, b))
		} else {
			st.mu.Lock()
			st.deleted++
			st.mu.Unlock()
		}
	}
	if code, b, err := r.inst(ctx, "POST", "/api/session/"+id+"/prompt", map[string]any{"text": "Mark the file done. soak-file: " + file}, nil); err != nil || code != 200 {
		return fmt.Errorf("prompt: %d %v %.200s", code, err, b)
	}
	if err := r.settle(ctx, id, func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Contains(b, []byte("status: done"))
	}); err != nil {
		return fmt.Errorf("turn: %v", err)
	}
	st.mu.Lock()
	st.turns++
	st.edited++
	st.mu.Unlock()
	if n%3 == 0 {
		if code, b, err := r.inst(ctx, "POST", "/api/session/"+id+"/compact", nil, nil); err != nil || code != 204 {
			return fmt.Errorf("compact: %d %v %.200s", code, err, b)
		}
		if err := r.settle(ctx, id, func() bool {
			_, b, err := r.inst(ctx, "GET", "/api/session/"+id+"/history?limit=100", nil, nil)
			return err == nil && bytes.Contains(b, []byte("compaction.ended"))
		}); err != nil {
			return fmt.Errorf("compaction: %v", err)
		}
		st.mu.Lock()
		st.compactions++
		st.mu.Unlock()
	}
	seq, err := r.lastSeq(ctx, id)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.expected[id] = seq
	st.mu.Unlock()
	return nil
}

// settle waits for the session to be idle (POST …/wait) until done holds.
func (r *soakRig) settle(ctx context.Context, id string, done func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, b, err := r.inst(ctx, "POST", "/api/session/"+id+"/wait", nil, nil)
		if err != nil || code != 204 {
			return fmt.Errorf("wait: %d %v %.200s", code, err, b)
		}
		if done() {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("not done after a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lastSeq is the highest durable seq in the session's history.
func (r *soakRig) lastSeq(ctx context.Context, id string) (uint64, error) {
	var after uint64
	for {
		code, b, err := r.inst(ctx, "GET", fmt.Sprintf("/api/session/%s/history?after=%d&limit=100", id, after), nil, nil)
		if err != nil || code != 200 {
			return 0, fmt.Errorf("history: %d %v %.200s", code, err, b)
		}
		for _, e := range gjson.GetBytes(b, "data").Array() {
			if s := e.Get("durable.seq").Uint(); s > after {
				after = s
			}
		}
		if !gjson.GetBytes(b, "hasMore").Bool() {
			return after, nil
		}
	}
}

// eventClient is a client of the instance's event stream. A long-lived
// one stays for the whole run and checks, per session, that the durable
// events' seqs arrive 1, 2, 3 … with none missing or repeated; when its
// stream is cut it reconnects with Last-Event-ID, which replays the
// durable events it missed, so "stays connected" means across cuts.
type eventClient struct {
	mu         sync.Mutex
	last       map[string]uint64
	events     int
	durable    int
	gaps       int // durable events missing between two received
	dups       int
	resyncs    int // server.connected with resync: the replay could not cover the cut
	reconnects int
	lastID     string
	err        string
}

func (r *soakRig) listen(ctx context.Context, c *eventClient) {
	for ctx.Err() == nil {
		err := r.stream(ctx, c, func(string) bool { return true })
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.reconnects++
		if err != nil && c.err == "" {
			c.err = err.Error()
		}
		c.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
}

// stream reads one connection of the event stream into c until it ends,
// ctx ends, or more returns false.
func (r *soakRig) stream(ctx context.Context, c *eventClient, more func(typ string) bool) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+r.instAddr+"/api/event", nil)
	c.mu.Lock()
	if c.lastID != "" {
		req.Header.Set("Last-Event-ID", c.lastID)
	}
	c.mu.Unlock()
	resp, err := eventHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("event stream: status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var id string
	var data []byte
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("id:")):
			id = strings.TrimSpace(string(line[3:]))
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimSpace(line[5:])...)
		case len(line) == 0 && len(data) > 0:
			typ := c.note(id, data)
			id, data = "", data[:0]
			if !more(typ) {
				return nil
			}
		}
	}
}

func (c *eventClient) note(id string, data []byte) string {
	ev := gjson.ParseBytes(data)
	typ := ev.Get("type").String()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events++
	if typ == "server.connected" && ev.Get("data.resync").Bool() {
		c.resyncs++
	}
	if id != "" {
		c.lastID = id
	}
	if d := ev.Get("durable"); d.Exists() {
		c.durable++
		sid, seq := d.Get("aggregateID").String(), d.Get("seq").Uint()
		prev := c.last[sid]
		switch {
		case seq <= prev:
			c.dups++
		case seq > prev+1:
			c.gaps += int(seq - prev - 1)
		}
		if seq > prev {
			c.last[sid] = seq
		}
	}
	return typ
}

var eventHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 64}}

// churn connects short-lived event clients, one every gap, each reading
// for a random 0–3 s before it vanishes (its connection dropped).
func (r *soakRig) churn(ctx context.Context, gap time.Duration, n *atomic.Int64, wg *sync.WaitGroup) {
	t := time.NewTicker(gap)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.q.paused.Load() {
			continue
		}
		wg.Add(1)
		n.Add(1)
		r.q.busy.Add(1)
		go func() {
			defer wg.Done()
			defer r.q.busy.Add(-1)
			life := time.Duration(randInt(3000)) * time.Millisecond
			cctx, cancel := context.WithTimeout(ctx, life)
			defer cancel()
			c := &eventClient{last: map[string]uint64{}}
			r.stream(cctx, c, func(string) bool { return true })
		}()
	}
}

func randInt(n int64) int64 {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		return 0
	}
	return v.Int64()
}

// soakSample is one reading of the server process.
type soakSample struct {
	at                  time.Duration // since the load started
	rssKB               int64
	rssAnonKB           int64 // the process's own memory: RSS less the mapped files (the store's tables)
	heapInuse, heapLive int64 // bytes, after a forced GC
	// heapOurs and heapStore split the live heap by the heap profile taken
	// with the reading (heapSplit): the store's buffers and the rest.
	heapOurs, heapStore float64 // bytes
	profiled            bool    // the heap profile was read
	goroutines          int64
	fds, files          int           // open descriptors; those that are files (not sockets, pipes or other kernel objects)
	storeFiles          int           // descriptors of the store's tables and value logs (their number grows with the store, by design)
	storeBytes          int64         // the Badger directory's size on disk
	quiet               time.Duration // how long the load took to drain before the reading
	drained             bool          // false: work was still in flight at the reading
	// cpu is the server's CPU time (user + system) so far and sent the
	// gateway requests sent so far, read with the sample; cpuPerReq is the
	// server's CPU per gateway request since the sample before (µs; 0 for
	// the first): at a steady rate it stays flat unless a request's cost
	// grows with what the store holds.
	cpu       time.Duration
	sent      int64
	cpuPerReq float64
}

// cpuPerRequest is the server's CPU per gateway request between two
// samples, in µs (instance work and the store's background work
// included); 0 when no request was sent between them.
func cpuPerRequest(prev, cur soakSample) float64 {
	n := cur.sent - prev.sent
	if n <= 0 || cur.cpu < prev.cpu {
		return 0
	}
	return float64(cur.cpu-prev.cpu) / float64(time.Microsecond) / float64(n)
}

// sample reads the server process 300 ms apart, at least three times
// and until two readings in a row agree (at most six), and keeps each
// figure's lowest reading: a reading can catch the tail of the work that
// just drained (a connection not yet dropped, the store flushing a
// memtable, which holds a second one in the heap for a moment), while a
// leak raises the floor. Each reading forces a GC first through the
// admin API's pprof handler (heap?gc=1), then reads Caddy's /metrics
// (Go's heap and goroutines) and /proc.
func (r *soakRig) sample(ctx context.Context, at time.Duration) soakSample {
	var s, prev soakSample
	for i := range 6 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		x := r.reading(ctx)
		if i == 0 {
			s, prev = x, x
			continue
		}
		s.rssKB, s.rssAnonKB = min(s.rssKB, x.rssKB), min(s.rssAnonKB, x.rssAnonKB)
		s.heapInuse, s.heapLive = min(s.heapInuse, x.heapInuse), min(s.heapLive, x.heapLive)
		s.goroutines, s.fds, s.files = min(s.goroutines, x.goroutines), min(s.fds, x.fds), min(s.files, x.files)
		s.storeFiles = min(s.storeFiles, x.storeFiles)
		agree := x.goroutines == prev.goroutines && x.fds == prev.fds && x.storeFiles == prev.storeFiles && abs64(x.heapInuse-prev.heapInuse) < 1<<20
		prev = x
		if i >= 2 && agree {
			break
		}
	}
	s.at = at
	if st, b, err := r.n.admin(ctx, "GET", "/debug/pprof/heap?gc=1&debug=1", nil); err == nil && st == http.StatusOK {
		s.heapOurs, s.heapStore, s.profiled = heapSplit(b)
	}
	filepath.WalkDir(r.dataDir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				s.storeBytes += fi.Size()
			}
		}
		return nil
	})
	return s
}

// heapProfile is the server's heap profile after a GC (nil when the admin
// API does not give one).
func (r *soakRig) heapProfile(ctx context.Context) []byte {
	st, b, err := r.n.admin(ctx, "GET", "/debug/pprof/heap?gc=1", nil)
	if err != nil || st != http.StatusOK {
		return nil
	}
	return b
}

// isStoreFile reports whether an open file is one of the store's tables
// or value logs: Badger keeps every table open, so their number follows
// the store's size, which grows by design; the soak reports them and
// judges the other descriptors.
func isStoreFile(path, dataDir string) bool {
	if !strings.HasPrefix(path, dataDir+string(filepath.Separator)) {
		return false
	}
	return strings.HasSuffix(path, ".sst") || strings.HasSuffix(path, ".vlog")
}

// otherFDs are the open descriptors that are not the store's tables and
// value logs: the figure the soak judges.
func (s soakSample) otherFDs() int { return s.fds - s.storeFiles }

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func (r *soakRig) reading(ctx context.Context) soakSample {
	var s soakSample
	pid := r.cmd.Process.Pid
	r.n.admin(ctx, "GET", "/debug/pprof/heap?gc=1", nil)
	if st, b, err := r.n.admin(ctx, "GET", "/metrics", nil); err == nil && st == 200 {
		for _, line := range strings.Split(string(b), "\n") {
			name, v, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				continue
			}
			switch name {
			case "go_memstats_heap_inuse_bytes":
				s.heapInuse = int64(f)
			case "go_memstats_heap_alloc_bytes":
				s.heapLive = int64(f)
			case "go_goroutines":
				s.goroutines = int64(f)
			}
		}
	}
	s.rssKB, s.rssAnonKB = rssKB(pid), statusKB(pid, "RssAnon:")
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	if ents, err := os.ReadDir(dir); err == nil {
		s.fds = len(ents)
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "/") {
				s.files++
				if isStoreFile(l, r.dataDir) {
					s.storeFiles++
				}
			}
		}
	}
	return s
}

// providerTally counts what the providers answered, by kind.
type providerTally struct {
	main, invalid   int        // good provider: answers to the main key's requests, and to invalid keys (must be 0)
	mainCost        money.Pico // what the main key's answers cost, by their format's usage
	mainCanceled    int        // main-key streams the client left (none expected)
	bad             int        // 503s from the fallback model's first target
	slow, slowCut   int        // disconnect lane: requests, and those the client left mid-stream
	agent, agentCut int        // instance turns, titles and compactions
}

// anthropicCost is one Anthropic Messages answer of the fake: its
// input_tokens leave out the cache reads and writes, which are billed at
// the input price when the model has no cache prices (the other formats
// count them inside the prompt tokens, so their answers cost
// costPerAnswer).
const anthropicCost = money.Pico(((fakeprovider.InputTokens+fakeprovider.CachedTokens+fakeprovider.CacheWriteTokens)*priceIn + fakeprovider.OutputTokens*priceOut) * 1_000_000)

// answerCost is the price of the fake's answer on an upstream path.
func answerCost(path string) money.Pico {
	if strings.HasSuffix(path, "/messages") {
		return anthropicCost
	}
	return costPerAnswer
}

func (t *providerTally) take(r *soakRig) {
	for _, rec := range r.good.Take() {
		switch {
		case rec.Header.Get(soakKindHeader) == "invalid":
			t.invalid++
		case rec.Canceled:
			t.mainCanceled++
		default:
			t.main++
			t.mainCost += answerCost(rec.Path)
		}
	}
	t.bad += len(r.bad.Take())
	for _, rec := range r.slow.Take() {
		t.slow++
		if rec.Canceled {
			t.slowCut++
		}
	}
	for _, rec := range r.agent.Take() {
		t.agent++
		if rec.Canceled {
			t.agentCut++
		}
	}
}

// soakResult is what a soak measured.
type soakResult struct {
	o                   soakOptions
	rig                 *soakRig
	started             time.Time
	elapsed, loadFor    time.Duration
	capacity            float64 // req/s, closed loop, the regular mix
	rate                int
	sent                int64
	skipped             int64
	kinds               []string
	counts              map[string]*soakCounts
	sessions            *sessionStats
	long                []*eventClient
	churned             int64
	reloads, reloadErrs int
	instRetried         int64 // instance requests sent again after a reload closed their idle connection
	reloadErr           string
	samples             []soakSample
	paused              time.Duration // the load's pauses for the samples, in all
	tally               providerTally

	spent, reserved, want     money.Pico // main service account
	cancelSpent, cancelRes    money.Pico // disconnect lane
	instSpent, instRes, instW money.Pico // the instance's account
	lost                      int        // durable events the long-lived clients never got
	goroutineDump             string     // taken when the goroutine slope fails
	// heapHalf and heapEnd are heap profiles (after a GC) at the first
	// sample of the second half and at the last: their difference names
	// what grew over the judged half.
	heapHalf, heapEnd []byte
	heapDiff          string // the top of their difference, for the report
}

// runSoak starts the rig and runs the soak for o.dur.
func runSoak(ctx context.Context, o soakOptions) (*soakResult, error) {
	started := time.Now()
	r, err := startSoakRig(ctx, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	res := &soakResult{o: o, rig: r, started: started, counts: map[string]*soakCounts{},
		sessions: &sessionStats{expected: map[string]uint64{}}}
	kinds := r.soakKinds()
	invalid, cancel := r.soakSpecial()
	for _, k := range append(kinds, invalid, cancel) {
		res.kinds = append(res.kinds, k.name)
		res.counts[k.name] = &soakCounts{}
	}
	for i := range kinds {
		if err := r.send(ctx, &kinds[i]); err != nil {
			return nil, fmt.Errorf("%s: %v", kinds[i].name, err)
		}
	}
	res.rate = o.rate
	if res.rate <= 0 {
		o.logf("measuring capacity: the mix closed loop at c=16 for %v", o.capDur)
		c, err := r.capacity(ctx, kinds, 16, o.capDur)
		if err != nil {
			return nil, err
		}
		res.capacity = c
		res.rate = max(1, int(c/2))
	}
	o.logf("soak for %v: gateway at %d req/s, %d instance workers, samples every %v, reloads every %v", o.dur, res.rate, o.workers, o.sample, o.reload)
	time.Sleep(time.Second)
	res.tally.take(r) // the checks and the capacity run: counted like the rest

	lctx, stop := context.WithCancel(ctx)
	var wg, reqs sync.WaitGroup
	var skipped, churned atomic.Int64
	for range 2 {
		c := &eventClient{last: map[string]uint64{}}
		res.long = append(res.long, c)
		wg.Add(1)
		go func() { defer wg.Done(); r.listen(lctx, c) }()
	}
	time.Sleep(200 * time.Millisecond)
	loadStart := time.Now()
	wg.Add(1)
	go func() { defer wg.Done(); r.gateway(lctx, res.rate, res.counts, &skipped, &reqs) }()
	for w := range o.workers {
		wg.Add(1)
		go func() { defer wg.Done(); r.sessions(lctx, w, o, res.sessions) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.churn(lctx, o.churnGap, &churned, &reqs) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(o.reload)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			if err := r.load(lctx, r.caddyfile(true, []string{"2s", "1s"}[i%2])); err != nil && lctx.Err() == nil {
				res.reloadErrs++
				if res.reloadErr == "" {
					res.reloadErr = err.Error()
				}
			}
		}
	}()

	// Sample at the start of the load and every o.sample after.
	end := loadStart.Add(o.dur)
	for {
		at := time.Since(loadStart)
		waited, drained := r.quiet()
		s := r.sample(ctx, at)
		s.cpu, s.sent = cpuTime(r.cmd.Process.Pid), res.sentSoFar()
		r.resume()
		if n := len(res.samples); n > 0 {
			s.cpuPerReq = cpuPerRequest(res.samples[n-1], s)
		}
		s.quiet, s.drained = waited, drained
		res.paused += time.Since(loadStart) - at
		res.samples = append(res.samples, s)
		res.tally.take(r)
		next := loadStart.Add(time.Duration(len(res.samples)) * o.sample)
		if res.heapHalf == nil && at >= o.dur/2 {
			res.heapHalf = r.heapProfile(ctx)
		} else if next.After(end) {
			res.heapEnd = r.heapProfile(ctx)
		}
		o.logf("sample %v: RSS %.1f MB (%.1f MB anonymous), heap %.1f MB (live: %.1f MB outside the store, %.1f MB the store's), %d goroutines, %d fds (%d files, %d the store's tables), store %.1f MB, %.0f µs of CPU per gateway request; %d sessions, %d gateway requests",
			s.at.Round(time.Second), float64(s.rssKB)/1024, float64(s.rssAnonKB)/1024, float64(s.heapInuse)/(1<<20), s.heapOurs/(1<<20), s.heapStore/(1<<20), s.goroutines, s.fds, s.files, s.storeFiles, float64(s.storeBytes)/(1<<20),
			s.cpuPerReq, res.sessions.created, s.sent)
		if next.After(end) {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(time.Until(next)):
		}
	}
	res.loadFor = time.Since(loadStart)
	stop()
	wg.Wait()
	reqs.Wait()
	res.skipped = skipped.Load()
	res.churned = churned.Load()
	res.reloads = r.reloads
	res.instRetried = r.instRetried.Load()
	res.sent = res.sentSoFar()

	// What was sent is settled: read the ledger until it adds up (or 20 s).
	time.Sleep(time.Second)
	res.tally.take(r)
	res.want = res.tally.mainCost
	res.instW = costPerAnswer * moneyN(res.tally.agent)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if res.spent, res.reserved, err = spendOf(ctx, r.n, r.n.sa); err != nil {
			return nil, err
		}
		if res.cancelSpent, res.cancelRes, err = spendOf(ctx, r.n, r.cancelSA); err != nil {
			return nil, err
		}
		if res.instSpent, res.instRes, err = spendOf(ctx, r.n, r.instSA); err != nil {
			return nil, err
		}
		settled := res.spent == res.want && res.reserved == 0 && res.cancelRes == 0 && res.instSpent == res.instW && res.instRes == 0
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Events: every session's durable events up to the last seq its
	// history showed reached each long-lived client.
	for _, c := range res.long {
		c.mu.Lock()
		for sid, want := range res.sessions.expected {
			if got := c.last[sid]; got < want {
				res.lost += int(want - got)
			}
		}
		res.lost += c.gaps
		c.mu.Unlock()
	}
	res.elapsed = time.Since(started)
	if f := res.fit(func(s soakSample) float64 { return float64(s.goroutines) }); f.robust > o.limits.goroutines {
		if st, b, err := r.n.admin(ctx, "GET", "/debug/pprof/goroutine?debug=1", nil); err == nil && st == 200 {
			res.goroutineDump = string(b)
		}
	}
	return res, nil
}

func (res *soakResult) sentSoFar() int64 {
	var n int64
	for _, c := range res.counts {
		n += c.sent.Load()
	}
	return n
}

// spendOf reads one member's spend and reservations from the budgets.
func spendOf(ctx context.Context, n *gwNode, member string) (spent, reserved money.Pico, err error) {
	var bs []struct {
		MemberID    string     `json:"member_id"`
		SpentUSD    money.Pico `json:"spent_usd"`
		ReservedUSD money.Pico `json:"reserved_usd"`
	}
	if err := n.adminData(ctx, "list budgets", 200, "GET", "/agentgate/workspaces/"+n.ws+"/budgets", nil, &bs); err != nil {
		return 0, 0, err
	}
	for _, b := range bs {
		if b.MemberID == member {
			return b.SpentUSD, b.ReservedUSD, nil
		}
	}
	return 0, 0, fmt.Errorf("member %s has no budget row", member)
}

func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// soakMain runs `go run ./bench -soak <dur>` and answers the exit code:
// 1 when a verdict is not met.
func soakMain(ctx context.Context, bo options, root string, dur time.Duration, rate int) int {
	o := soakDefaults(dur)
	o.rate, o.pin, o.bin, o.root, o.out = rate, bo.pin, bo.bin, root, bo.out
	o.stamp = time.Now().Format("2006-01-02")
	if dur < 10*time.Minute {
		// A short soak samples and reloads more often, so that its
		// second half still has points to fit; its limits are the test's.
		o.sample, o.reload, o.limits = 5*time.Second, 30*time.Second, shortLimits
		o.stamp += "-" + dur.String()
	}
	o.logf = func(format string, a ...any) { fmt.Fprintf(os.Stderr, "soak: "+format+"\n", a...) }
	res, err := runSoak(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	md, svg, err := res.write()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "soak: wrote %s and %s\n", md, svg)
	fmt.Print(res.summary())
	if !res.ok() {
		fmt.Println("soak: not met")
		return 1
	}
	return 0
}

// shortLimits are a short soak's (TestSoak's two minutes): its second
// half is one minute, so a slope per hour is sixty times the change over
// that minute, and what is noise over an hour (a GC cycle's garbage, the
// requests and streams in flight at a sample) is a steep slope over one
// minute. They are set above that noise and far below what a real leak
// gives at the soak's rates: one goroutine left per gateway request is
// tens of thousands an hour, one descriptor per session or per event
// client thousands, and one turn's worth of memory per turn hundreds of
// MB.
var shortLimits = soakLimits{heapMB: 500, goroutines: 2000, fds: 600,
	why: "a short soak's (one minute of fit: 500 MB, 2,000 goroutines and 600 descriptors per hour, set above one minute's noise and warm-up and below a leak per request, session or event client)"}

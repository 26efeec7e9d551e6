package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/pgtest"
)

const (
	providerSecret = "sk-bench-provider-SECRET"
	model          = "gpt-4o-mini"
	pace           = 20 * time.Millisecond // the slow provider's delay and stream pace
	chunks         = 64                    // content deltas per stream
	// streamEvents is what a chat stream carries with include_usage: the
	// role chunk, 64 deltas, the finish chunk, the usage chunk and [DONE].
	streamEvents = chunks + 4
	// Prices of the bench model, USD per million tokens, and the cost of one
	// fake answer (21 prompt tokens, 12 completion tokens): with no cache or
	// reasoning prices set, cache reads and writes cost the input price and
	// reasoning the output price, so every split of the fake's usage costs
	// 21×1 + 12×2 = 45 µUSD.
	priceIn, priceOut = 1, 2
	costPerAnswer     = money.Pico((fakeprovider.InputTokens*priceIn + fakeprovider.OutputTokens*priceOut) * 1_000_000)
	laneHeader        = "X-Bench-Lane" // set by the gateway's connection, so the provider can count lane (c)
)

// gwNode is one agentgate process: its admin API and what the bench
// created through it.
type gwNode struct {
	adminAddr string
	lane      string // the tag its connections set in laneHeader
	cmd       *exec.Cmd
	ws, sa    string
	key       string
	conns     [2]string
	// inference is set when the binary has the Inference API (an older
	// binary, given with -bin to compare, may not: lane (i) is left out).
	inference bool
}

// lane is one way of reaching the fake provider.
type lane struct {
	id, name string
	// url and hdr per provider (0: no delay, 1: 20 ms delay).
	url    [2]string
	hdr    [2]http.Header
	client *http.Client
	want   int        // the status expected (0: 200)
	pid    func() int // the process to read RSS and server CPU from (0: none)
	// nodes, when set, are the lane's server processes (lane (p2): both
	// agentgate nodes): its server CPU is their sum, in place of pid's.
	nodes func() []int
	// front, when set, is a process in front of the nodes (lane (p2): the
	// load balancer), whose CPU per request is measured apart.
	front func() int
	// models, when set, replace the body's model per provider (the
	// Inference API routes by model, not by path).
	models [2]string
}

// serverPids are the processes whose CPU is the lane's server CPU.
func (l *lane) serverPids() []int {
	if l.nodes != nil {
		return l.nodes()
	}
	if l.pid != nil {
		if p := l.pid(); p != 0 {
			return []int{p}
		}
	}
	return nil
}

// frontPid is the lane's load balancer (0: none).
func (l *lane) frontPid() int {
	if l.front != nil {
		return l.front()
	}
	return 0
}

// body is the request body the lane sends to provider i.
func (l *lane) body(i int, body []byte) []byte {
	if l.models[i] == "" {
		return body
	}
	return bytes.Replace(body, []byte(`"model":"`+model+`"`), []byte(`"model":"`+l.models[i]+`"`), 1)
}

// inferenceModels are the workspace models of the Inference API lane, one
// per provider.
var inferenceModels = [2]string{"bench-fast", "bench-slow"}

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}, Timeout: 60 * time.Second}
}

func (l *lane) request(ctx context.Context, slow int, body []byte) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.url[slow], bytes.NewReader(body))
	for k, v := range l.hdr[slow] {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// rig is the fake providers, the caddy binary and the optional peer.
type rig struct {
	root, work string
	bin        string
	pin        bool // taskset the servers onto core 1
	providers  [2]*fakeprovider.Provider
	caddy      *exec.Cmd // lane (c): the agentgate app and llm_gateway
	plainCaddy *exec.Cmd // lane (b): plain reverse_proxy
	plainAdmin string    // lane (b)'s admin endpoint (profiles and traces only)
	caddyLog   *os.File
	gw         *gwNode // lane (c)
	pg         *gwNode // lane (p): llm_gateway on PostgreSQL; nil when skipped
	pgServer   *pgtest.Server
	pgMsg      string
	fleet      *fleet // lane (p2): two nodes on PostgreSQL behind a balancer; nil when skipped
	fleetMsg   string
	portkey    *exec.Cmd
	started    []*exec.Cmd // every caddy process, stopped by close
	portkeyMsg string
	peerMsgs   []string // why a peer given with -peer is not a lane
	lanes      []*lane

	mu           sync.Mutex
	answered     map[string]int // lane tag → requests the provider answered (all phases)
	caddyVersion string
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// moduleRoot is the directory of go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the agentgate module")
	}
	return filepath.Dir(gomod), nil
}

func tasksetAvailable() bool {
	_, err := exec.LookPath("taskset")
	return err == nil && cpuCount() >= 2
}

// serverCommand runs name pinned to core 1 when pinning is on.
func (r *rig) serverCommand(name string, args ...string) *exec.Cmd {
	if r.pin {
		return exec.Command("taskset", append([]string{"-c", "1", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func startRig(ctx context.Context, o options, logf func(string, ...any)) (*rig, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "agentgate-bench-")
	if err != nil {
		return nil, err
	}
	r := &rig{root: root, work: work, pin: o.pin && tasksetAvailable(), answered: map[string]int{}}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()

	if r.bin = o.bin; r.bin == "" {
		logf("building ./cmd/caddy …")
		r.bin = filepath.Join(work, "caddy")
		build := exec.CommandContext(ctx, "go", "build", "-o", r.bin, "./cmd/caddy")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, out)
		}
	}
	if out, err := exec.Command(r.bin, "version").Output(); err == nil {
		r.caddyVersion = strings.TrimSpace(string(out))
	}

	for i := range r.providers {
		p, err := fakeprovider.Start(providerSecret)
		if err != nil {
			return nil, err
		}
		r.providers[i] = p
	}
	r.resetProviders()

	// Two processes of the same binary, so that each lane's memory is its
	// own: lane (b) is one plain reverse_proxy site per provider, lane (c)
	// one llm_gateway site. No access logs on either.
	r.gw = &gwNode{adminAddr: freeAddr(), lane: "c"}
	siteB := [2]string{freeAddr(), freeAddr()}
	siteC := freeAddr()
	debug := ""
	if os.Getenv("AGENTGATE_BENCH_DEBUG") != "" {
		debug = "\tdebug\n"
	}
	var cfB, cfC strings.Builder
	// Lane (b)'s admin endpoint serves only its profiles and traces
	// (-trace-wrk); it is off the request path.
	r.plainAdmin = freeAddr()
	fmt.Fprintf(&cfB, "{\n%s\tadmin %s\n}\n\n", debug, r.plainAdmin)
	for i, a := range siteB {
		fmt.Fprintf(&cfB, "http://%s {\n\tbind 127.0.0.1\n\treverse_proxy %s\n}\n\n", a, strings.TrimPrefix(r.providers[i].URL, "http://"))
	}
	fmt.Fprintf(&cfC, "{\n%s\tadmin %s\n\tagentgate {\n\t\tstorage badger %q\n\t}\n}\n\n", debug, r.gw.adminAddr, filepath.Join(work, "data"))
	fmt.Fprintf(&cfC, "http://%s {\n\tbind 127.0.0.1\n\tllm_gateway\n}\n", siteC)
	if r.plainCaddy, err = r.startCaddy("plain", cfB.String()); err != nil {
		return nil, err
	}
	if r.gw.cmd, err = r.startCaddy("agentgate", cfC.String()); err != nil {
		return nil, err
	}
	r.caddy = r.gw.cmd
	if err := r.waitAdmin(ctx, r.gw); err != nil {
		return nil, err
	}
	if err := r.gw.bootstrap(ctx, r.providers); err != nil {
		return nil, err
	}

	direct := &lane{id: "a", name: "direct", client: newClient(), pid: func() int { return 0 }}
	plain := &lane{id: "b", name: "caddy reverse_proxy", client: newClient(), pid: func() int { return r.plainCaddy.Process.Pid }}
	gw := &lane{id: "c", name: "agentgate llm_gateway", client: newClient(), pid: func() int { return r.caddy.Process.Pid }}
	for i, p := range r.providers {
		direct.url[i] = p.URL + "/v1/chat/completions"
		direct.hdr[i] = http.Header{"Authorization": {"Bearer " + providerSecret}}
		plain.url[i] = "http://" + siteB[i] + "/v1/chat/completions"
		plain.hdr[i] = direct.hdr[i]
		gw.url[i] = "http://" + siteC + "/custom/" + r.gw.conns[i] + "/chat/completions"
		gw.hdr[i] = http.Header{"Authorization": {"Bearer " + r.gw.key}}
	}
	inf := &lane{id: "i", name: "agentgate Inference API", client: newClient(), pid: gw.pid, models: inferenceModels}
	for i := range r.providers {
		inf.url[i] = "http://" + siteC + "/v1/chat/completions"
		inf.hdr[i] = gw.hdr[i]
	}
	r.lanes = []*lane{direct, plain, gw}
	if r.gw.inference {
		r.lanes = append(r.lanes, inf)
	}
	if o.postgres {
		if pl, err := r.startPostgresLane(ctx, logf); err != nil {
			r.pgMsg = "lane (p) PostgreSQL skipped: " + err.Error()
			logf("%s", r.pgMsg)
		} else {
			r.lanes = append(r.lanes, pl)
		}
	} else {
		r.pgMsg = "lane (p) PostgreSQL skipped: not requested (-postgres=false)"
	}
	switch {
	case !o.fleet:
		r.fleetMsg = "lane (p2) PostgreSQL fleet skipped: not requested (-fleet=false)"
	case r.pgServer == nil:
		r.fleetMsg = "lane (p2) PostgreSQL fleet skipped: it runs on lane (p)'s PostgreSQL, which did not start"
	default:
		if fl, err := r.startFleet(ctx, logf); err != nil {
			r.fleetMsg = "lane (p2) PostgreSQL fleet skipped: " + err.Error()
			logf("%s", r.fleetMsg)
			r.fleet = nil // its processes are in r.started
		} else {
			r.lanes = append(r.lanes, fl)
		}
	}
	if o.portkey {
		if pk, err := r.startPortkey(ctx, logf); err != nil {
			r.portkeyMsg = "lane (d) Portkey skipped: " + err.Error()
			logf("%s", r.portkeyMsg)
		} else {
			r.lanes = append(r.lanes, pk)
		}
	} else {
		r.portkeyMsg = "lane (d) Portkey skipped: not requested (-portkey=false)"
	}
	for _, p := range o.peers {
		pl, err := r.startPeer(ctx, p, logf)
		if err != nil {
			msg := fmt.Sprintf("peer %s skipped: %v", p.name, err)
			r.peerMsgs = append(r.peerMsgs, msg)
			logf("%s", msg)
			continue
		}
		r.lanes = append(r.lanes, pl)
	}
	ok = true
	return r, nil
}

// profile takes a CPU profile ("profile") or an execution trace ("trace") of caddy for d through the admin endpoint's
// pprof handler and writes it to file.
func (r *rig) profile(ctx context.Context, kind string, d time.Duration, file string) chan error {
	return r.profileOf(ctx, r.gw, kind, d, file)
}

// profileOf is profile of the process behind node n's admin endpoint.
func (r *rig) profileOf(ctx context.Context, n *gwNode, kind string, d time.Duration, file string) chan error {
	done := make(chan error, 1)
	go func() {
		secs := int(d / time.Second)
		if secs < 1 {
			secs = 1
		}
		st, b, err := n.admin(ctx, "GET", fmt.Sprintf("/debug/pprof/%s?seconds=%d", kind, secs), nil)
		if err == nil && st != 200 {
			err = fmt.Errorf("pprof answered %d", st)
		}
		if err == nil {
			err = os.WriteFile(file, b, 0o644)
		}
		done <- err
	}()
	return done
}

// startPostgresLane runs lane (p): a second agentgate process with the same
// llm_gateway site, storing in a throwaway PostgreSQL cluster on loopback
// (started by internal/pgtest, so it runs beside the load generator, off
// the proxies' core) instead of Badger. It measures the
// cost of a store that several nodes share, where nothing is cached and
// every request reads the database.
func (r *rig) startPostgresLane(ctx context.Context, logf func(string, ...any)) (*lane, error) {
	logf("starting PostgreSQL for lane (p) …")
	srv, err := pgtest.Start()
	if err != nil {
		return nil, err
	}
	r.pgServer = srv
	master := make([]byte, 32)
	rand.Read(master)
	r.pg = &gwNode{adminAddr: freeAddr(), lane: "p"}
	site := freeAddr()
	cf := fmt.Sprintf("{\n\tadmin %s\n\tagentgate {\n\t\tstorage postgres %q\n\t\tmaster_key %s\n\t}\n}\n\nhttp://%s {\n\tbind 127.0.0.1\n\tllm_gateway\n}\n",
		r.pg.adminAddr, srv.DSN, hex.EncodeToString(master), site)
	if r.pg.cmd, err = r.startCaddy("postgres", cf); err != nil {
		return nil, err
	}
	if err := r.waitAdmin(ctx, r.pg); err != nil {
		return nil, err
	}
	if err := r.pg.bootstrap(ctx, r.providers); err != nil {
		return nil, err
	}
	l := &lane{id: "p", name: "agentgate llm_gateway on PostgreSQL", client: newClient(), pid: func() int { return r.pg.cmd.Process.Pid }}
	for i := range r.providers {
		l.url[i] = "http://" + site + "/custom/" + r.pg.conns[i] + "/chat/completions"
		l.hdr[i] = http.Header{"Authorization": {"Bearer " + r.pg.key}}
	}
	return l, nil
}

// serverProcs is the GOMAXPROCS of every server lane: 2 (a lane pinned to
// one core would otherwise get one P, and the store's blocking fsync would
// stall its requests), or AGENTGATE_BENCH_GOMAXPROCS.
func serverProcs() string {
	if v := os.Getenv("AGENTGATE_BENCH_GOMAXPROCS"); v != "" {
		return v
	}
	return "2"
}

// startCaddy writes a Caddyfile and runs the binary on it (pinned when
// pinning is on); every process logs to caddy.log.
func (r *rig) startCaddy(name, caddyfile string) (*exec.Cmd, error) {
	cfPath := filepath.Join(r.work, name+".Caddyfile")
	if err := os.WriteFile(cfPath, []byte(caddyfile), 0o600); err != nil {
		return nil, err
	}
	if r.caddyLog == nil {
		var err error
		if r.caddyLog, err = os.Create(filepath.Join(r.work, "caddy.log")); err != nil {
			return nil, err
		}
	}
	c := r.serverCommand(r.bin, "run", "--config", cfPath, "--adapter", "caddyfile")
	c.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(r.work, "xdg-data-"+name), "XDG_CONFIG_HOME="+filepath.Join(r.work, "xdg-config-"+name))
	c.Env = append(c.Env, "GOMAXPROCS="+serverProcs())
	if v := os.Getenv("AGENTGATE_BENCH_GATEWAY_GOGC"); v != "" && name != "plain" {
		// For experiments with the gateway's garbage collector: GOGC of
		// every agentgate process, not of plain Caddy's.
		c.Env = append(c.Env, "GOGC="+v)
	}
	c.Stdout, c.Stderr = r.caddyLog, r.caddyLog
	if err := c.Start(); err != nil {
		return nil, err
	}
	r.started = append(r.started, c)
	return c, nil
}

func (r *rig) waitAdmin(ctx context.Context, n *gwNode) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, _, err := n.admin(ctx, "GET", "/agentgate/workspaces", nil); err == nil && st == 200 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(r.caddyLog.Name())
	return fmt.Errorf("caddy did not come up; log:\n%s", tail(string(b), 4000))
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (n *gwNode) admin(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.adminAddr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// adminData calls the admin API and decodes {"data": …} into out.
func (n *gwNode) adminData(ctx context.Context, what string, want int, method, path string, body, out any) error {
	st, b, err := n.admin(ctx, method, path, body)
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if st != want {
		return fmt.Errorf("%s: status %d: %s", what, st, b)
	}
	if out == nil {
		return nil
	}
	var env struct{ Data json.RawMessage }
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	return json.Unmarshal(env.Data, out)
}

// bootstrap creates, through the admin API, a workspace, a service account
// with an inference key and a budget (so every request is reserved and
// settled), and one connection per fake provider.
func (n *gwNode) bootstrap(ctx context.Context, providers [2]*fakeprovider.Provider) error {
	var ws, sa struct{ ID string }
	if err := n.adminData(ctx, "create workspace", 201, "POST", "/agentgate/workspaces", map[string]any{"name": "bench"}, &ws); err != nil {
		return err
	}
	n.ws = ws.ID
	base := "/agentgate/workspaces/" + ws.ID
	if err := n.adminData(ctx, "create service account", 201, "POST", base+"/service-accounts", map[string]any{"name": "bench"}, &sa); err != nil {
		return err
	}
	n.sa = sa.ID
	var key struct{ Key string }
	if err := n.adminData(ctx, "create key", 201, "POST", base+"/service-accounts/"+sa.ID+"/keys",
		map[string]any{"name": "bench", "permission": "inference"}, &key); err != nil {
		return err
	}
	n.key = key.Key
	for i, p := range providers {
		var c struct{ ID string }
		if err := n.adminData(ctx, "create connection", 201, "POST", base+"/connections", map[string]any{
			"name": "fake" + strconv.Itoa(i), "kind": "openai", "base_url": p.URL + "/v1", "credential": providerSecret,
			"headers": map[string]string{laneHeader: n.lane},
			"models":  map[string]any{model: map[string]any{"pricing": map[string]any{"input": priceIn, "output": priceOut}}},
		}, &c); err != nil {
			return err
		}
		n.conns[i] = c.ID
		st, b, err := n.admin(ctx, "POST", base+"/models", map[string]any{"id": inferenceModels[i],
			"targets": []any{map[string]any{"connection": c.ID, "model": model}}})
		switch {
		case err != nil:
			return fmt.Errorf("create model: %v", err)
		case st == http.StatusNotFound:
			// No workspace models: a binary from before the Inference API.
		case st != http.StatusCreated:
			return fmt.Errorf("create model: status %d: %s", st, b)
		default:
			n.inference = true
		}
	}
	return n.adminData(ctx, "set budget", 200, "PUT", base+"/budgets/"+sa.ID,
		// Not the maximum (1,000,000): a budget at exactly MaxSpend is
		// accepted but cannot be read back when settling (issue reported).
		map[string]any{"limit_usd": 100_000, "period": "monthly"}, nil)
}

// lane is the lane of that id in this run, nil when it does not run.
func (r *rig) lane(id string) *lane {
	for _, l := range r.lanes {
		if l.id == id {
			return l
		}
	}
	return nil
}

// resetProviders forgets what the providers received (after counting lane
// (c)'s answered requests) and sets their behaviour again.
func (r *rig) resetProviders() (received int) {
	for i, p := range r.providers {
		// Take, not Received and Reset: a request arriving between the two
		// would be answered but not counted.
		for _, rec := range p.Take() {
			received++
			if tag := rec.Header.Get(laneHeader); tag != "" && !rec.Canceled {
				r.mu.Lock()
				r.answered[tag]++
				r.mu.Unlock()
			}
		}
		b := fakeprovider.Behavior{Chunks: chunks}
		if i == 1 {
			b.Delay = pace
		}
		p.SetBehavior(b)
	}
	return received
}

// spend reads the service account's spend and reservations from the admin API.
func (n *gwNode) spend(ctx context.Context) (spent, reserved money.Pico, err error) {
	return spendOf(ctx, n, n.sa)
}

// startPortkey runs Portkey's open-source gateway (npm @portkey-ai/gateway)
// with Node on loopback, installing it under the user cache directory when
// it is missing; it is used as a pass-through to the fake provider.
func (r *rig) startPortkey(ctx context.Context, logf func(string, ...any)) (*lane, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return nil, errors.New("node is not installed")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "agentgate-bench", "portkey")
	script := filepath.Join(dir, "node_modules", "@portkey-ai", "gateway", "build", "start-server.js")
	if _, err := os.Stat(script); err != nil {
		if _, err := exec.LookPath("npm"); err != nil {
			return nil, errors.New("npm is not installed")
		}
		logf("installing @portkey-ai/gateway into %s …", dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		ictx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		in := exec.CommandContext(ictx, "npm", "install", "--no-audit", "--no-fund", "@portkey-ai/gateway")
		in.Dir = dir
		if out, err := in.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm install @portkey-ai/gateway: %v: %s", err, tail(string(out), 500))
		}
	}
	addr := freeAddr()
	_, port, _ := net.SplitHostPort(addr)
	cmd := r.serverCommand("node", script, "--port="+port, "--headless")
	cmd.Env = append(os.Environ(), "NODE_ENV=production")
	logFile, err := os.Create(filepath.Join(r.work, "portkey.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r.portkey = cmd
	l := &lane{id: "d", name: "Portkey gateway (Node)", client: newClient(), pid: func() int { return cmd.Process.Pid }}
	for i, p := range r.providers {
		l.url[i] = "http://" + addr + "/v1/chat/completions"
		l.hdr[i] = http.Header{"Authorization": {"Bearer " + providerSecret}, "X-Portkey-Provider": {"openai"},
			"X-Portkey-Custom-Host": {p.URL + "/v1"}}
	}
	// Wait until it answers a request end to end.
	if err := waitAnswers(ctx, l, 20*time.Second, nil); err != nil {
		return nil, fmt.Errorf("it did not serve a pass-through request: %v", err)
	}
	return l, nil
}

// waitAnswers sends a 1 KB chat request to a lane every 200 ms until one
// is answered with 200, for at most d, or until gone reports that the
// server has exited (nil: never).
func waitAnswers(ctx context.Context, l *lane, d time.Duration, gone func() bool) error {
	body := chatBody(1024, false)
	deadline := time.Now().Add(d)
	for {
		resp, err := l.client.Do(l.request(ctx, 0, body))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, tail(string(b), 300))
		}
		if (gone != nil && gone()) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *rig) close() {
	for _, c := range append(r.started, r.portkey) {
		if c != nil && c.Process != nil {
			c.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				c.Process.Kill()
				<-done
			}
		}
	}
	for _, p := range r.providers {
		if p != nil {
			p.Close()
		}
	}
	if r.caddyLog != nil {
		r.caddyLog.Close()
	}
	if r.pgServer != nil {
		r.pgServer.Close()
	}
	os.RemoveAll(r.work)
}

// rssKB is VmRSS of a process, from /proc/<pid>/status.
func rssKB(pid int) int64 { return statusKB(pid, "VmRSS:") }

// statusKB reads a kB figure of /proc/<pid>/status (VmRSS:, RssAnon:,
// RssFile: …), 0 when there is none.
func statusKB(pid int, field string) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// rssPeak samples a process's RSS every 20 ms until stop is called.
func rssPeak(pid int) (stop func() int64) {
	var peak int64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v := rssKB(pid); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 { close(done); <-finished; return peak }
}

// cpuCount is the number of processors in /proc/cpuinfo.
func cpuCount() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 1
	}
	return strings.Count(string(b), "\nprocessor") + boolInt(strings.HasPrefix(string(b), "processor"))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// roundTrips reads the database round trips of lane (p)'s node, or the
// sum over lane (p2)'s two nodes, from their Caddy metrics
// (agentgate_store_round_trips_total); ok is false for other lanes, or
// when the binary has no such metric.
func (r *rig) roundTrips(ctx context.Context, l *lane) (n uint64, ok bool) {
	var nodes []*gwNode
	switch {
	case l.id == "p" && r.pg != nil:
		nodes = []*gwNode{r.pg}
	case l.id == "p2" && r.fleet != nil:
		nodes = r.fleet.nodes[:]
	default:
		return 0, false
	}
	for _, node := range nodes {
		v, ok := node.roundTrips(ctx)
		if !ok {
			return 0, false
		}
		n += v
	}
	return n, true
}

// roundTrips reads one node's agentgate_store_round_trips_total.
func (n *gwNode) roundTrips(ctx context.Context) (uint64, bool) {
	st, b, err := n.admin(ctx, "GET", "/metrics", nil)
	if err != nil || st != 200 {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "agentgate_store_round_trips_total "); found {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return uint64(f), err == nil
		}
	}
	return 0, false
}

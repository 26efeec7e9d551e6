package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// writer creates service accounts in a loop until stop is closed, recording
// every id acknowledged with 201. It returns on the first failure, which it
// reports through fail unless the failure is expected (expected() is true).
// With retryUnanswered, a request that got no answer at all (the connection
// was reset or closed before any response) is retried with the same name, up
// to 5 times in a row, and its name is recorded in unanswered.
type writer struct {
	name            string
	create          func(ctx context.Context, name string) (int, []byte, error)
	ack             *acked
	stop            <-chan struct{}
	expected        func() bool
	fail            func(format string, args ...any)
	retryUnanswered bool

	sent       atomic.Int64
	mu         sync.Mutex
	unanswered []string
}

func (w *writer) run(ctx context.Context) {
	for i, tries := 0, 0; ; {
		select {
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		name := fmt.Sprintf("%s-%d", w.name, i)
		w.sent.Add(1)
		st, body, err := w.create(ctx, name)
		if err == nil && st == http.StatusCreated {
			if id, ok := saID(body); ok {
				w.ack.add(id)
				i, tries = i+1, 0
				continue
			}
			err = fmt.Errorf("201 without an id: %s", body)
		}
		if w.expected() || ctx.Err() != nil {
			return
		}
		if err != nil && w.retryUnanswered && noAnswer(err) && tries < 5 {
			w.mu.Lock()
			w.unanswered = append(w.unanswered, fmt.Sprintf("%s (%v)", name, err))
			w.mu.Unlock()
			tries++
			continue
		}
		if err != nil {
			w.fail("writer %s, %s: %v", w.name, name, err)
		} else {
			w.fail("writer %s, %s: HTTP %d: %s", w.name, name, st, body)
		}
		return
	}
}

// noAnswer reports whether a request failed without any response: the
// connection was reset or closed before a status line arrived.
func noAnswer(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// saID extracts data.id from a create answer.
func saID(body []byte) (string, bool) {
	var env struct {
		Data idName `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Data.ID == "" {
		return "", false
	}
	return env.Data.ID, true
}

// TestKillDuringWrites kills the process with SIGKILL while concurrent
// writers create service accounts, restarts it on the same data directory
// and checks that every write acknowledged with 201 survived; three times
// over, so that later cycles also recover a store that was itself recovered.
func TestKillDuringWrites(t *testing.T) {
	bin := caddyBinary(t)
	ctx := testContext(t, 3*time.Minute)
	data := filepath.Join(t.TempDir(), "data")
	s := startServer(t, ctx, bin, config{DataDir: data})
	tn := s.bootstrap(t, ctx, "Crash")

	const cycles, writers, perCycle = 3, 8, 300 // kill once perCycle more writes are acknowledged
	var ack acked
	for cycle := 1; cycle <= cycles; cycle++ {
		var killed atomic.Bool
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var ws []*writer
		for i := range writers {
			w := &writer{
				name: fmt.Sprintf("c%d-w%d", cycle, i), ack: &ack, stop: stop, expected: killed.Load, fail: t.Errorf,
				create: func(ctx context.Context, name string) (int, []byte, error) {
					return s.admin(ctx, "POST", "/agentgate/workspaces/"+url.PathEscape(tn.Workspace)+"/service-accounts",
						map[string]any{"name": name})
				},
			}
			ws = append(ws, w)
			wg.Add(1)
			go func() { defer wg.Done(); w.run(ctx) }()
		}
		target := ack.len() + perCycle
		waitFor(t, ctx, fmt.Sprintf("%d acknowledged writes", target), func() bool { return ack.len() >= target || t.Failed() })
		killed.Store(true)
		s.kill()
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}
		var sent int64
		for _, w := range ws {
			sent += w.sent.Load()
		}
		ids := ack.all()
		t.Logf("cycle %d: SIGKILL with %d writes acknowledged in all (%d requests this cycle)", cycle, len(ids), sent)

		s = startServer(t, ctx, bin, config{DataDir: data})
		if m := missing(ids, s.adminServiceAccounts(t, ctx, tn.Workspace)); len(m) > 0 {
			t.Fatalf("cycle %d: after the restart the admin API lists %d of %d acknowledged service accounts; missing: %v", cycle, len(ids)-len(m), len(ids), m)
		}
		// The owner's token from before the kills still works (it is in the
		// store), and so does a new one.
		for _, tok := range []string{tn.Token, s.token(t, ctx, tn.Person, tn.Workspace)} {
			if m := missing(ids, s.consoleServiceAccounts(t, ctx, tok)); len(m) > 0 {
				t.Fatalf("cycle %d: after the restart the Console lists %d of %d acknowledged service accounts; missing: %v", cycle, len(ids)-len(m), len(ids), m)
			}
		}
	}
}

// TestReloadDuringWrites reloads the config through the admin /load endpoint
// several times while writers create service accounts through both the admin
// API and the Console. Every answer must be a 201 (no 5xx, no 503 while the
// new config starts, no 4xx) and every acknowledged write must be there
// afterwards, listed by both APIs. `caddy validate` on the same Caddyfile
// succeeds while the server runs on the same data directory.
//
// A request may get no answer at all: Caddy v2 on Linux gives every config
// generation its own SO_REUSEPORT socket and closes the old one on reload,
// and the kernel resets the connections still queued on it (the admin
// listener is replaced on every load too). That is Caddy core, with or
// without agentgate; such a request never reached a handler. The writers
// retry it with the same name, and the test proves it was not applied: no
// name is stored twice.
func TestReloadDuringWrites(t *testing.T) {
	bin := caddyBinary(t)
	ctx := testContext(t, 3*time.Minute)
	data := filepath.Join(t.TempDir(), "data")
	cfg := config{DataDir: data, MaxBody: "1MB"}
	s := startServer(t, ctx, bin, cfg)
	tn := s.bootstrap(t, ctx, "Reload")

	var ack acked
	var stopped atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ws []*writer
	start := func(w *writer) {
		w.ack, w.stop, w.expected, w.fail, w.retryUnanswered = &ack, stop, stopped.Load, t.Errorf, true
		ws = append(ws, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	// A new connection per request: a kept-alive connection adds the usual
	// race of a request sent just as the server closes the idle connection.
	for i := range 3 {
		start(&writer{name: fmt.Sprintf("admin%d", i), create: func(ctx context.Context, name string) (int, []byte, error) {
			return call(ctx, freshClient, "POST", "http://"+s.adminAddr+"/agentgate/workspaces/"+url.PathEscape(tn.Workspace)+"/service-accounts",
				nil, map[string]any{"name": name})
		}})
		start(&writer{name: fmt.Sprintf("console%d", i), create: func(ctx context.Context, name string) (int, []byte, error) {
			return call(ctx, freshClient, "POST", "http://"+s.httpAddr+"/api/v1/service-accounts",
				http.Header{"Authorization": {"Bearer " + tn.Token}}, map[string]any{"name": name})
		}})
	}
	stopWriters := func() {
		if !stopped.Swap(true) {
			close(stop)
		}
		wg.Wait()
	}
	t.Cleanup(stopWriters)

	const reloads, between = 6, 25 // acknowledged writes between two reloads
	waitMore := func(what string) {
		n := ack.len()
		waitFor(t, ctx, what, func() bool { return ack.len() >= n+between || t.Failed() })
	}
	waitMore("writes before the first reload")
	for i := 1; i <= reloads && !t.Failed(); i++ {
		cfg.MaxBody = strconv.Itoa(i+1) + "MB"
		st, body, err := call(ctx, httpClient, "POST", "http://"+s.adminAddr+"/load",
			http.Header{"Content-Type": {"text/caddyfile"}}, s.caddyfile(cfg))
		if err != nil || st != http.StatusOK {
			t.Fatalf("reload %d: POST /load: HTTP %d, %v: %s", i, st, err, body)
		}
		// The new config is the running one.
		want := fmt.Sprintf(`"max_request_body":%d`, (i+1)*1000*1000)
		st, body, err = s.admin(ctx, "GET", "/config/apps/http", nil)
		if err != nil {
			// The admin endpoint may close the connection the load came
			// on as it swaps configs; a fresh request is the check.
			st, body, err = s.admin(ctx, "GET", "/config/apps/http", nil)
		}
		if err != nil || st != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("reload %d: GET /config/apps/http: HTTP %d, %v; want %s in %s", i, st, err, want, body)
		}
		if i == reloads/2 {
			// caddy validate on the same Caddyfile and data directory while
			// the server runs (and writes): the store is opened in Start.
			s.writeConfig(cfg)
			vctx, cancel := context.WithTimeout(ctx, time.Minute)
			cmd := exec.CommandContext(vctx, bin, "validate", "--config", s.cfgPath, "--adapter", "caddyfile")
			cmd.Env, cmd.Dir = s.env, s.dir
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("caddy validate while the server runs on the same data directory: %v\n%s", err, out)
			}
		}
		waitMore(fmt.Sprintf("writes after reload %d", i))
	}
	stopWriters()
	if t.Failed() {
		return
	}
	var sent int64
	var unanswered []string
	for _, w := range ws {
		sent += w.sent.Load()
		unanswered = append(unanswered, w.unanswered...)
	}
	ids := ack.all()
	t.Logf("%d reloads during %d acknowledged writes (%d requests; %d got no answer and were retried)", reloads, len(ids), sent, len(unanswered))
	for _, u := range unanswered {
		t.Logf("no answer: %s", u)
	}
	// At most the requests queued on the closed sockets at each reload.
	if limit := reloads * len(ws); len(unanswered) > limit {
		t.Errorf("%d requests got no answer, more than %d (%d reloads × %d writers)", len(unanswered), limit, reloads, len(ws))
	}

	byAdmin := s.adminServiceAccounts(t, ctx, tn.Workspace)
	if m := missing(ids, byAdmin); len(m) > 0 {
		t.Errorf("the admin API lists %d of %d acknowledged service accounts; missing: %v", len(ids)-len(m), len(ids), m)
	}
	byConsole := s.consoleServiceAccounts(t, ctx, tn.Token)
	if m := missing(ids, byConsole); len(m) > 0 {
		t.Errorf("the Console lists %d of %d acknowledged service accounts; missing: %v", len(ids)-len(m), len(ids), m)
	}
	// No request was applied without an answer: each name is stored once.
	names := map[string][]string{}
	for id, name := range byAdmin {
		names[name] = append(names[name], id)
	}
	for name, ids := range names {
		if len(ids) > 1 {
			t.Errorf("service account name %s is stored %d times (%v): a request that got no answer was applied", name, len(ids), ids)
		}
	}
	if len(byAdmin) != len(ids) {
		t.Errorf("the workspace has %d service accounts, want the %d acknowledged", len(byAdmin), len(ids))
	}
	// Only the first config opened the store; the reloads shared it.
	if n := strings.Count(s.stderr.String(), `"shared_with_previous_config":false`); n != 1 {
		t.Errorf("the store was opened %d times, want once (reloads share it)", n)
	}
}

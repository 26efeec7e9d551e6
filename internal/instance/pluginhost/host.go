// Package pluginhost runs an instance's OpenCode plugins in a sidecar
// process: Bun running host.mjs, which imports each plugin module, calls
// its plugin functions with the OpenCode plugin input and keeps the hooks
// they return. The server talks to it over stdio, one JSON request per line
// on stdin and one marked JSON answer per line on stdout.
//
// The host is expendable: every call has a deadline; a call that times out
// is followed by a ping, and a host that does not answer it is killed and
// started again on the next call (with a backoff after crashes); a plugin
// that throws fails that call only. Plugins load per location (each gets
// its directory), lazily, and again after Reload.
package pluginhost

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

//go:embed host.mjs
var hostScript []byte

//go:embed plugin-shim.mjs
var pluginShim []byte

// mark starts every answer line of the host.
const mark = "\x1eagentgate-host "

// Defaults of Options.
const (
	DefaultCallTimeout = 30 * time.Second
	DefaultToolTimeout = 10 * time.Minute
	DefaultLoadTimeout = time.Minute
	DefaultBackoff     = time.Second
	maxBackoff         = 30 * time.Second
	maxLine            = 16 << 20
	maxLog             = 1 << 20
)

// Options configure a Host.
type Options struct {
	// Bun is the Bun executable.
	Bun string
	// Modules, when set, is a node_modules directory: bare imports a
	// plugin cannot resolve from its own directory resolve there, and the
	// plugins' client is its @opencode-ai/sdk.
	Modules string
	// Dir is a private directory for the host's files (its script and its
	// log of what plugins print).
	Dir string
	// Env is the host's environment (already scrubbed of secrets by the
	// caller).
	Env []string
	// CallTimeout bounds a hook call, ToolTimeout a plugin tool's run,
	// LoadTimeout loading a location's plugins.
	CallTimeout, ToolTimeout, LoadTimeout time.Duration
	// Backoff is the wait before the host starts again after it died
	// unasked; it doubles with each crash in a row, up to 30 s.
	Backoff time.Duration
	Logger  *zap.Logger
}

// Spec is a plugin to load: its id and its entry module, or why it has
// none (it then fails with that error, unloaded).
type Spec struct {
	ID    string `json:"id"`
	Entry string `json:"entry"`
	Error string `json:"error,omitempty"`
}

// LoadInput is what a location's plugins are loaded with: the plugin
// input (directory, worktree, project, the server's URL and the
// credential of its client) and the location's configuration, which the
// config hooks see.
type LoadInput struct {
	Directory string         `json:"directory"`
	Worktree  string         `json:"worktree"`
	Project   map[string]any `json:"project"`
	ServerURL string         `json:"serverUrl"`
	Auth      string         `json:"auth"`
	Plugins   []Spec         `json:"plugins"`
	Config    any            `json:"config"`
}

// Status is how a plugin loaded: its hooks and tools, or the loader's
// error.
type Status struct {
	ID    string    `json:"id"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Hooks []string  `json:"hooks,omitempty"`
	Tools []ToolDef `json:"tools,omitempty"`
}

// ToolDef is a tool a plugin defines, with its arguments' JSON Schema.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
}

// Host is the plugin host of one instance.
type Host struct {
	opts Options
	log  *zap.Logger

	mu        sync.Mutex
	proc      *proc
	crashes   int
	nextStart time.Time
	gen       int // starts of the process; loaded locations are of one
	locs      map[string]*location
	closed    bool

	eventsOnce sync.Once
	events     chan hostEvent
	quit       chan struct{} // closed by Close
}

type location struct {
	gen      int
	statuses []Status
	loading  chan struct{}
	err      error
}

// New returns a host; the process starts on first use.
func New(opts Options) (*Host, error) {
	if opts.Bun == "" {
		return nil, errors.New("no Bun executable")
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.ToolTimeout <= 0 {
		opts.ToolTimeout = DefaultToolTimeout
	}
	if opts.LoadTimeout <= 0 {
		opts.LoadTimeout = DefaultLoadTimeout
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	shim := filepath.Join(opts.Dir, "shims", "@opencode-ai", "plugin")
	if err := os.MkdirAll(shim, 0o700); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{
		"host.mjs": hostScript,
		// Bun reads it from the working directory: no package is ever
		// fetched to satisfy an import.
		"bunfig.toml": []byte("[install]\nauto = \"disable\"\n"),
		filepath.Join("shims", "@opencode-ai", "plugin", "index.mjs"):    pluginShim,
		filepath.Join("shims", "@opencode-ai", "plugin", "package.json"): []byte(`{"name":"@opencode-ai/plugin","version":"0.0.0-agentgate","type":"module","main":"index.mjs"}`),
	} {
		if err := os.WriteFile(filepath.Join(opts.Dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return &Host{opts: opts, log: opts.Logger, locs: map[string]*location{}, quit: make(chan struct{})}, nil
}

// ErrRestarting is a call made while the host waits to start again after
// a crash.
var ErrRestarting = errors.New("the plugin host stopped and is waiting to start again")

// proc is one run of the host process.
type proc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	mu      sync.Mutex
	pending map[int64]chan answer
	next    int64
	done    chan struct{} // closed when the process has exited
	ready   chan struct{}
	killed  bool
}

type answer struct {
	Result json.RawMessage `json:"result"`
	Error  *string         `json:"error"`
}

// start runs the process (h.mu held).
func (h *Host) start() (*proc, error) {
	if h.closed {
		return nil, errors.New("the plugin host is closed")
	}
	if time.Now().Before(h.nextStart) {
		return nil, ErrRestarting
	}
	cmd := exec.Command(h.opts.Bun, filepath.Join(h.opts.Dir, "host.mjs"))
	cmd.Dir = h.opts.Dir
	nodePath := filepath.Join(h.opts.Dir, "shims")
	if h.opts.Modules != "" {
		nodePath = h.opts.Modules + string(os.PathListSeparator) + nodePath
	}
	cmd.Env = append(append([]string(nil), h.opts.Env...), "AGENTGATE_PLUGIN_MODULES="+h.opts.Modules, "NODE_PATH="+nodePath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(h.opts.Dir, "host.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &cappedWriter{w: logf, left: maxLog}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting the plugin host: %w", err)
	}
	p := &proc{cmd: cmd, stdin: stdin, pending: map[int64]chan answer{}, done: make(chan struct{}), ready: make(chan struct{})}
	h.gen++
	go p.read(stdout, h.log)
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		killed := p.killed
		for id, ch := range p.pending {
			close(ch)
			delete(p.pending, id)
		}
		p.mu.Unlock()
		close(p.done)
		h.exited(p, killed, err)
	}()
	return p, nil
}

// exited forgets a process that ended; one that died unasked delays the
// next start.
func (h *Host) exited(p *proc, killed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == p {
		h.proc = nil
	}
	if killed || h.closed {
		return
	}
	h.crashes++
	wait := h.opts.Backoff << min(h.crashes-1, 5)
	if wait > maxBackoff {
		wait = maxBackoff
	}
	h.nextStart = time.Now().Add(wait)
	h.log.Warn("plugin host exited; it starts again on the next call", zap.Error(err), zap.Duration("after", wait),
		zap.String("log", filepath.Join(h.opts.Dir, "host.log")))
}

// read dispatches the host's answers; output without the mark is what a
// plugin wrote to stdout, counted and dropped.
func (p *proc) read(r io.Reader, log *zap.Logger) {
	br := bufio.NewReaderSize(r, 64<<10)
	garbage := 0
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			i := bytes.Index(line, []byte(mark))
			if i != 0 {
				garbage++
				if garbage == 1 || garbage%1000 == 0 {
					log.Warn("a plugin wrote to the plugin host's stdout; the output is dropped", zap.Int("lines", garbage))
				}
			}
			if i >= 0 {
				var a struct {
					ID int64 `json:"id"`
					answer
				}
				if json.Unmarshal(line[i+len(mark):], &a) == nil {
					if a.ID == 0 {
						select {
						case <-p.ready:
						default:
							close(p.ready)
						}
					}
					p.mu.Lock()
					ch := p.pending[a.ID]
					delete(p.pending, a.ID)
					p.mu.Unlock()
					if ch != nil {
						ch <- a.answer
					}
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line, cut at maxLine (the rest is dropped).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) <= maxLine {
			line = append(line, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

func (p *proc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// running returns the process, starting it when needed.
func (h *Host) running() (*proc, error) {
	h.mu.Lock()
	p := h.proc
	if p == nil {
		var err error
		if p, err = h.start(); err != nil {
			h.mu.Unlock()
			return nil, err
		}
		h.proc = p
	}
	h.mu.Unlock()
	select {
	case <-p.ready:
		return p, nil
	case <-p.done:
		return nil, errors.New("the plugin host exited as it started (see its log)")
	case <-time.After(h.opts.LoadTimeout):
		p.kill()
		return nil, errors.New("the plugin host did not start in time")
	}
}

// call sends a request and waits for its answer, at most timeout. A call
// that times out is followed by a ping: a host that does not answer that
// either is stuck and is killed.
func (h *Host) call(ctx context.Context, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	p, err := h.running()
	if err != nil {
		return nil, err
	}
	res, err := p.send(ctx, method, params, timeout)
	if errors.Is(err, context.DeadlineExceeded) && method != "ping" {
		if _, perr := p.send(context.Background(), "ping", nil, 2*time.Second); perr != nil {
			h.log.Warn("the plugin host stopped answering; it is killed and starts again on the next call", zap.String("method", method))
			p.kill()
		}
		return nil, fmt.Errorf("plugin %s: no answer within %v", method, timeout)
	}
	return res, err
}

func (p *proc) send(ctx context.Context, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	ch := make(chan answer, 1)
	p.mu.Lock()
	p.next++
	id := p.next
	p.pending[id] = ch
	p.mu.Unlock()
	forget := func() {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
	}
	b, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		forget()
		return nil, err
	}
	p.mu.Lock()
	_, err = p.stdin.Write(append(b, '\n'))
	p.mu.Unlock()
	if err != nil {
		forget()
		return nil, errors.New("the plugin host is gone")
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a, ok := <-ch:
		if !ok {
			return nil, errors.New("the plugin host exited during the call")
		}
		if a.Error != nil {
			return nil, errors.New(*a.Error)
		}
		return a.Result, nil
	case <-t.C:
		forget()
		return nil, context.DeadlineExceeded
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}

// Load loads a location's plugins unless they are loaded in the running
// process already, and returns how each loaded. in is called only when a
// load is needed.
func (h *Host) Load(ctx context.Context, dir string, in func() LoadInput) ([]Status, error) {
	for {
		h.mu.Lock()
		l := h.locs[dir]
		alive := h.proc != nil && l != nil && l.gen == h.gen
		if alive && l.loading == nil && l.err == nil {
			h.mu.Unlock()
			return l.statuses, nil
		}
		if alive && l.loading != nil {
			ch := l.loading
			h.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		l = &location{loading: make(chan struct{})}
		h.locs[dir] = l
		h.mu.Unlock()

		input := in()
		var out struct {
			Plugins []Status `json:"plugins"`
		}
		var err error
		p, err := h.running()
		if err == nil {
			h.mu.Lock()
			l.gen = h.gen
			h.mu.Unlock()
			var raw json.RawMessage
			raw, err = p.send(ctx, "load", input, h.opts.LoadTimeout)
			if errors.Is(err, context.DeadlineExceeded) {
				p.kill()
				err = fmt.Errorf("loading plugins took longer than %v (the plugin host was restarted)", h.opts.LoadTimeout)
			} else if err == nil {
				err = json.Unmarshal(raw, &out)
			}
		}
		h.mu.Lock()
		l.statuses, l.err = out.Plugins, err
		close(l.loading)
		l.loading = nil
		if err != nil {
			delete(h.locs, dir)
		}
		h.mu.Unlock()
		return out.Plugins, err
	}
}

// Loaded returns a location's statuses in the running process, if loaded.
func (h *Host) Loaded(dir string) ([]Status, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.locs[dir]
	if l == nil || h.proc == nil || l.gen != h.gen || l.loading != nil || l.err != nil {
		return nil, false
	}
	return l.statuses, true
}

// ToolContext is what a plugin tool's execute gets about its call.
type ToolContext struct {
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID"`
	Agent     string `json:"agent"`
	CallID    string `json:"callID"`
}

// ToolResult is a plugin tool's answer.
type ToolResult struct {
	Output   string         `json:"output"`
	Title    string         `json:"title"`
	Metadata map[string]any `json:"metadata"`
}

// Tool runs a plugin's tool.
func (h *Host) Tool(ctx context.Context, dir, worktree, plugin, name string, args json.RawMessage, tc ToolContext) (ToolResult, error) {
	raw, err := h.call(ctx, "tool", map[string]any{"directory": dir, "worktree": worktree, "plugin": plugin, "name": name,
		"args": args, "context": tc}, h.opts.ToolTimeout)
	var r ToolResult
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	return r, err
}

// Trigger runs a hook of every plugin of a loaded location in load order
// and returns the output they left. A location without plugins answers
// output unchanged without a call.
func (h *Host) Trigger(ctx context.Context, dir, hook string, input, output map[string]any) (map[string]any, error) {
	if st, ok := h.Loaded(dir); !ok || !hasHook(st, hook) {
		return output, nil
	}
	raw, err := h.call(ctx, "trigger", map[string]any{"directory": dir, "name": hook, "input": input, "output": output}, h.opts.CallTimeout)
	if err != nil {
		return output, err
	}
	var out struct {
		Output map[string]any `json:"output"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Output == nil {
		return output, err
	}
	return out.Output, nil
}

func hasHook(st []Status, hook string) bool {
	for _, s := range st {
		for _, h := range s.Hooks {
			if h == hook {
				return true
			}
		}
	}
	return false
}

// eventQueue bounds the events waiting for the host; more are dropped, as
// a slow event stream drops a subscriber's events.
const eventQueue = 1024

type hostEvent struct {
	dir string
	ev  json.RawMessage
}

// Event hands an event to the event hooks of a loaded location without
// waiting: events go to the host in order, one at a time, from a bounded
// queue (dropped when it is full).
func (h *Host) Event(dir string, ev json.RawMessage) {
	if st, ok := h.Loaded(dir); !ok || !hasHook(st, "event") {
		return
	}
	h.eventsOnce.Do(func() {
		h.events = make(chan hostEvent, eventQueue)
		go func() {
			for {
				select {
				case e := <-h.events:
					h.call(context.Background(), "event", map[string]any{"directory": e.dir, "event": e.ev}, h.opts.CallTimeout)
				case <-h.quit:
					return
				}
			}
		}()
	})
	select {
	case h.events <- hostEvent{dir, ev}:
	default:
	}
}

// Reload stops the process: every location loads its plugins afresh on
// its next use (a new module cache included).
func (h *Host) Reload() {
	h.mu.Lock()
	p := h.proc
	h.proc = nil
	h.locs = map[string]*location{}
	h.crashes, h.nextStart = 0, time.Time{}
	h.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Close stops the host for good.
func (h *Host) Close() {
	h.mu.Lock()
	if !h.closed {
		close(h.quit)
	}
	h.closed = true
	h.mu.Unlock()
	h.Reload()
}

// cappedWriter writes up to left bytes and drops the rest.
type cappedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (c *cappedWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left > 0 {
		n := min(len(b), c.left)
		c.w.Write(b[:n])
		c.left -= n
	}
	return len(b), nil
}

// Package pluginhost runs an instance's OpenCode plugins in sidecar
// processes: Bun running host.mjs, which imports each plugin module, calls
// its plugin functions with the OpenCode plugin input and keeps the hooks
// they return. Each location has a process of its own, confined by the
// instance's sandbox (see package sandbox): the location's project is its
// only writable directory, Bun, the node_modules, the host's script and
// the installed packages it reads, and it has no network. The server talks
// to it over stdio, one JSON request per line on stdin and one marked JSON
// answer per line on stdout; the plugins' client reaches the server over
// the same channel (see rpc.go), never over the network.
//
// A process is expendable: every call has a deadline; a call that times
// out is followed by a ping, and a process that does not answer it is
// killed and started again on the next load (with a backoff after
// crashes); a plugin that throws fails that call only. Plugins load per
// location, lazily, and again after Reload, which kills every process (and
// with it everything its plugins started).
package pluginhost

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/sandbox"
)

//go:embed host.mjs
var hostScript []byte

//go:embed plugin-shim.mjs
var pluginShim []byte

// mark starts every answer line of the host.
const mark = "\x1eagentgate-host "

// ClientURL is the base URL of the plugins' client: never resolved, every
// request it makes goes to the server over stdio.
const ClientURL = "http://agentgate.plugin"

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
	// Dir is a private directory for the host's files: its script (in
	// runtime/, which the processes read) and the logs of what plugins
	// print (in logs/, which they never see).
	Dir string
	// Env, when set, is the environment of a process run without a
	// sandbox (sandbox off); default: the sandbox's allow-listed one, as a
	// sandboxed process gets.
	Env []string
	// Sandbox confines the processes (default: sandbox.Default()). When
	// it is unavailable plugins do not load; when it is off they run as
	// plain processes.
	Sandbox *sandbox.Sandbox
	// Handler serves the requests of the plugins' client (the instance's
	// API). Each request's context carries the location of the process
	// that sent it (see RequestLocation). Nil: they are answered 503.
	Handler http.Handler
	// CallTimeout bounds a hook call, ToolTimeout a plugin tool's run,
	// LoadTimeout loading a location's plugins.
	CallTimeout, ToolTimeout, LoadTimeout time.Duration
	// Backoff is the wait before a location's process starts again after
	// it died unasked; it doubles with each crash in a row, up to 30 s.
	Backoff time.Duration
	Logger  *zap.Logger
}

// Spec is a plugin to load: its id and its entry module, or why it has
// none (it then fails with that error, unloaded).
type Spec struct {
	ID    string `json:"id"`
	Entry string `json:"entry"`
	Error string `json:"error,omitempty"`
	// Root, when set, is the directory the plugin's files are in (an
	// installed package's): the sandbox binds it read-only.
	Root string `json:"-"`
	// Options, when set, is the second argument of the plugin's
	// functions (a configuration's [name, options] entry).
	Options map[string]any `json:"options,omitempty"`
}

// LoadInput is what a location's plugins are loaded with: the plugin
// input (directory, worktree, project and the credential of its client)
// and the location's configuration, which the config hooks see.
type LoadInput struct {
	Directory string         `json:"directory"`
	Worktree  string         `json:"worktree"`
	Project   map[string]any `json:"project"`
	// ServerURL is the plugins' serverUrl (default ClientURL); their client
	// talks to the server over stdio whatever it is.
	ServerURL string `json:"serverUrl"`
	// Auth is the Authorization header of the client's requests: a
	// credential valid for this location only.
	Auth    string `json:"auth"`
	Plugins []Spec `json:"plugins"`
	Config  any    `json:"config"`
}

// Status is how a plugin loaded: its hooks and tools, or the loader's
// error.
type Status struct {
	ID    string    `json:"id"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Hooks []string  `json:"hooks,omitempty"`
	Tools []ToolDef `json:"tools,omitempty"`
	// Unused are the parts of the plugin contract the plugin uses that
	// this server does not serve, with why, beyond its hooks (see
	// UnusedHooks): a v2 plugin object, a tui export, workspace adapters.
	Unused map[string]string `json:"unused,omitempty"`
}

// ToolDef is a tool a plugin defines, with its arguments' JSON Schema.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
}

// Host is the plugin host of one instance: a process per location.
type Host struct {
	opts    Options
	log     *zap.Logger
	bun     string // resolved
	bunRoot string // what the sandbox binds of Bun
	modules string // resolved
	runtime string // the processes' read-only directory

	mu     sync.Mutex
	slots  map[string]*slot // by location directory
	closed bool

	eventsOnce sync.Once
	events     chan hostEvent
	quit       chan struct{} // closed by Close
}

// slot is one location's process and what it loaded.
type slot struct {
	dir       string
	worktree  string
	roots     []string // installed packages' directories
	proc      *proc
	crashes   int
	nextStart time.Time
	gen       int // starts of the process; loaded is of one
	loaded    *location
}

type location struct {
	gen      int
	statuses []Status
	loading  chan struct{}
	err      error
}

// New returns a host; processes start on first use.
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
	if opts.Sandbox == nil {
		opts.Sandbox = sandbox.Default()
	}
	h := &Host{opts: opts, log: opts.Logger, slots: map[string]*slot{}, quit: make(chan struct{})}
	h.bun = resolve(opts.Bun)
	h.bunRoot = h.bun
	// Bun as npm installs it (@oven/bun-linux-x64/bin/bun) is bound with
	// its package; a bun elsewhere alone.
	if bin := filepath.Dir(h.bun); filepath.Base(bin) == "bin" {
		if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "package.json")); err == nil {
			h.bunRoot = filepath.Dir(bin)
		}
	}
	if opts.Modules != "" {
		h.modules = resolve(opts.Modules)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	h.runtime = filepath.Join(resolve(opts.Dir), "runtime")
	shim := filepath.Join(h.runtime, "shims", "@opencode-ai", "plugin")
	for _, d := range []string{shim, filepath.Join(opts.Dir, "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	for name, b := range map[string][]byte{
		"host.mjs": hostScript,
		// Bun reads it from the working directory: no package is ever
		// fetched to satisfy an import.
		"bunfig.toml": []byte("[install]\nauto = \"disable\"\n"),
		filepath.Join("shims", "@opencode-ai", "plugin", "index.mjs"):    pluginShim,
		filepath.Join("shims", "@opencode-ai", "plugin", "package.json"): []byte(`{"name":"@opencode-ai/plugin","version":"0.0.0-agentgate","type":"module","main":"index.mjs"}`),
	} {
		if err := os.WriteFile(filepath.Join(h.runtime, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// Confinement is how the processes run: "enforced" (each in a sandbox),
// "off" (plain processes, the operator's choice) or "unavailable" (none
// runs: plugins fail to load), with the sandbox's reason.
func (h *Host) Confinement() (mode, reason string) {
	st := h.opts.Sandbox.Status()
	return st.Mode, st.Reason
}

// Network is the network the processes have: "loopback only" (their
// sandbox's own) or "host"; "" when they run without a sandbox.
func (h *Host) Network() string {
	st := h.opts.Sandbox.Status()
	if st.Mode != "enforced" {
		return ""
	}
	return st.Network
}

// LogPath is the log of what a location's plugins print.
func (h *Host) LogPath(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	base := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, filepath.Base(dir))
	if len(base) > 40 {
		base = base[:40]
	}
	return filepath.Join(h.opts.Dir, "logs", base+"-"+hex.EncodeToString(sum[:6])+".log")
}

// ErrRestarting is a call made while a location's process waits to start
// again after a crash.
var ErrRestarting = errors.New("the plugin host stopped and is waiting to start again")

// ErrNotLoaded is a call for a location whose plugins are not loaded.
var ErrNotLoaded = errors.New("location not loaded")

// proc is one run of a location's process.
type proc struct {
	cmd     *sandbox.Cmd
	dir     string
	stdin   io.WriteCloser
	mu      sync.Mutex
	pending map[int64]chan answer
	next    int64
	done    chan struct{} // closed when the process has exited
	ready   chan struct{}
	killed  bool
	rpcs    chan struct{} // bounds the client requests served at once
	asks    chan struct{} // bounds the permission requests waiting at once
	calls   map[string]*toolCall
}

type answer struct {
	Result json.RawMessage `json:"result"`
	Error  *string         `json:"error"`
}

// command prepares a location's process: in a sandbox whose writable
// directories are the location's project (and the location, when it lies
// outside), and which reads Bun, the node_modules, the host's runtime
// directory and the installed packages.
func (h *Host) command(s *slot) (*sandbox.Cmd, error) {
	sb := h.opts.Sandbox
	nodePath := filepath.Join(h.runtime, "shims")
	if h.modules != "" {
		nodePath = h.modules + string(os.PathListSeparator) + nodePath
	}
	own := []string{"AGENTGATE_PLUGIN_MODULES=" + h.modules, "NODE_PATH=" + nodePath}
	mode, reason := h.Confinement()
	var env []string
	switch mode {
	case "off":
		env = h.opts.Env
		if env == nil {
			env = sb.Env()
		}
		env = append(append([]string(nil), env...), own...)
	case "enforced":
		env = append(sb.Env(), own...)
	default:
		return nil, fmt.Errorf("plugins are not run: %w: %s (the operator can write `sandbox off` to run them unconfined)", sandbox.ErrUnavailable, reason)
	}
	writable := []string{}
	if s.worktree != "" {
		writable = append(writable, s.worktree)
	}
	if s.worktree == "" || !within(resolve(s.worktree), resolve(s.dir)) {
		writable = append(writable, s.dir)
	}
	ro := []string{h.bunRoot, h.runtime}
	if h.modules != "" {
		ro = append(ro, h.modules)
	}
	ro = append(ro, s.roots...)
	cmd, err := sb.Command(sandbox.Spec{Argv: []string{h.bun, filepath.Join(h.runtime, "host.mjs")}, Dir: h.runtime, Env: env,
		Writable: writable, ReadOnly: ro, LongLived: true})
	if err != nil {
		return nil, fmt.Errorf("plugins are not run: %w", err)
	}
	return cmd, nil
}

func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// start runs a location's process (h.mu held).
func (h *Host) start(s *slot) (*proc, error) {
	if h.closed {
		return nil, errors.New("the plugin host is closed")
	}
	if h.slots[s.dir] != s {
		return nil, errors.New("the plugins were reloaded meanwhile")
	}
	if time.Now().Before(s.nextStart) {
		return nil, ErrRestarting
	}
	cmd, err := h.command(s)
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// A restart appends, so that what the run before it printed (why it
	// crashed) stays readable; a log past its cap starts afresh.
	logPath := h.LogPath(s.dir)
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if fi, err := os.Stat(logPath); err == nil && fi.Size() >= maxLog {
		flags |= os.O_TRUNC
	}
	logf, err := os.OpenFile(logPath, flags, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &cappedWriter{w: logf, left: maxLog}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting the plugin host: %w", err)
	}
	p := &proc{cmd: cmd, dir: s.dir, stdin: stdin, pending: map[int64]chan answer{}, done: make(chan struct{}), ready: make(chan struct{}),
		rpcs: make(chan struct{}, maxRPCs), asks: make(chan struct{}, maxAsks), calls: map[string]*toolCall{}}
	s.gen++
	go p.read(stdout, h)
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
		h.exited(s, p, killed, err, logPath)
	}()
	return p, nil
}

// exited forgets a process that ended; one that died unasked delays the
// next start.
func (h *Host) exited(s *slot, p *proc, killed bool, err error, logPath string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.proc == p {
		s.proc = nil
	}
	if killed || h.closed {
		return
	}
	s.crashes++
	wait := h.opts.Backoff << min(s.crashes-1, 5)
	if wait > maxBackoff {
		wait = maxBackoff
	}
	s.nextStart = time.Now().Add(wait)
	h.log.Warn("plugin host exited; it starts again on the next load", zap.Error(err), zap.Duration("after", wait),
		zap.String("location", s.dir), zap.String("log", logPath))
}

// read dispatches the process's answers and its client's requests; output
// without the mark is what a plugin wrote to stdout, counted and dropped,
// and so is a marked line that is not well-formed.
func (p *proc) read(r io.Reader, h *Host) {
	br := bufio.NewReaderSize(r, 64<<10)
	garbage := 0
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			i := bytes.Index(line, []byte(mark))
			if i != 0 {
				garbage++
				if garbage == 1 || garbage%1000 == 0 {
					h.log.Warn("a plugin wrote to the plugin host's stdout; the output is dropped", zap.Int("lines", garbage))
				}
			}
			if i >= 0 {
				var a struct {
					ID  int64           `json:"id"`
					RPC string          `json:"rpc"`
					Req json.RawMessage `json:"req"`
					answer
				}
				if json.Unmarshal(line[i+len(mark):], &a) == nil {
					if a.RPC != "" {
						p.serveRPC(h, a.ID, a.RPC, a.Req)
						continue
					}
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

// write sends one line to the process.
func (p *proc) write(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.stdin.Write(append(b, '\n'))
	return err
}

// kill ends the process and everything its plugins started.
func (p *proc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.cmd.Kill()
}

// running returns a location's process, starting it when needed.
func (h *Host) running(s *slot) (*proc, error) {
	h.mu.Lock()
	p := s.proc
	if p == nil {
		var err error
		if p, err = h.start(s); err != nil {
			h.mu.Unlock()
			return nil, err
		}
		s.proc = p
	}
	h.mu.Unlock()
	select {
	case <-p.ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("the plugin host exited as it started (see %s)", h.LogPath(s.dir))
	case <-time.After(h.opts.LoadTimeout):
		p.kill()
		return nil, errors.New("the plugin host did not start in time")
	}
}

// call sends a request to a loaded location's process and waits for its
// answer, at most timeout. A call that times out is followed by a ping: a
// process that does not answer that either is stuck and is killed.
func (h *Host) call(ctx context.Context, dir, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	p := h.loadedProc(dir)
	if p == nil {
		return nil, ErrNotLoaded
	}
	return h.callOn(ctx, p, dir, method, params, timeout)
}

// loadedProc is the process of a loaded location, or nil.
func (h *Host) loadedProc(dir string) *proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.slots[dir]
	if s != nil && s.loaded != nil && s.loaded.gen == s.gen {
		return s.proc
	}
	return nil
}

func (h *Host) callOn(ctx context.Context, p *proc, dir, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	res, err := p.send(ctx, method, params, timeout)
	if errors.Is(err, context.DeadlineExceeded) && method != "ping" {
		if _, perr := p.send(context.Background(), "ping", nil, 2*time.Second); perr != nil {
			h.log.Warn("the plugin host stopped answering; it is killed and starts again on the next load", zap.String("method", method),
				zap.String("location", dir))
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
	if err := p.write(b); err != nil {
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

// Load loads a location's plugins in its process unless they are loaded
// there already, and returns how each loaded. in is called only when a
// load is needed; the process starts with the worktree and the package
// roots in gives.
func (h *Host) Load(ctx context.Context, dir string, in func() LoadInput) ([]Status, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, errors.New("the plugin host is closed")
		}
		s := h.slots[dir]
		if s == nil {
			s = &slot{dir: dir}
			h.slots[dir] = s
		}
		l := s.loaded
		if l != nil && l.loading != nil {
			ch := l.loading
			h.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if l != nil && s.proc != nil && l.gen == s.gen && l.err == nil {
			h.mu.Unlock()
			return l.statuses, nil
		}
		l = &location{loading: make(chan struct{})}
		s.loaded = l
		h.mu.Unlock()

		input := in()
		if input.ServerURL == "" {
			input.ServerURL = ClientURL
		}
		var roots []string
		for _, sp := range input.Plugins {
			if sp.Root != "" {
				roots = append(roots, sp.Root)
			}
		}
		h.mu.Lock()
		if s.proc != nil && (s.worktree != input.Worktree || !slicesEqual(s.roots, roots)) {
			// What the sandbox binds changed: a new process.
			s.proc.kill()
			s.proc = nil
		}
		s.worktree, s.roots = input.Worktree, roots
		h.mu.Unlock()

		var out struct {
			Plugins []Status `json:"plugins"`
		}
		p, err := h.running(s)
		if err == nil {
			h.mu.Lock()
			l.gen = s.gen
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
		if err != nil && s.loaded == l {
			s.loaded = nil
		}
		h.mu.Unlock()
		return out.Plugins, err
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Loaded returns a location's statuses in its running process, if loaded.
func (h *Host) Loaded(dir string) ([]Status, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.slots[dir]
	if s == nil || s.proc == nil || s.loaded == nil {
		return nil, false
	}
	l := s.loaded
	if l.gen != s.gen || l.loading != nil || l.err != nil {
		return nil, false
	}
	return l.statuses, true
}

// Pid is the process id (as the server sees it) of the process that runs
// a location's plugins: the sandbox's first process, or Bun itself
// without a sandbox; 0 when none runs.
func (h *Host) Pid(dir string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.slots[dir]; s != nil && s.proc != nil && s.proc.cmd.Process != nil {
		return s.proc.cmd.Process.Pid
	}
	return 0
}

// ToolContext is what a plugin tool's execute gets about its call: the
// ids, and the server's side of its context's ask and metadata.
type ToolContext struct {
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID"`
	Agent     string `json:"agent"`
	CallID    string `json:"callID"`
	// Ask decides a permission the tool asks for (ctx.ask): nil when
	// allowed, else the refusal the tool is thrown (see AskError). Nil
	// Ask refuses every ask.
	Ask func(ctx context.Context, in AskInput) error `json:"-"`
	// Metadata updates the running tool part (ctx.metadata): a title
	// ("" when the call gave none) and metadata (nil when it gave none).
	// It is called from the process's reader: it must not block.
	Metadata func(title string, metadata map[string]any) `json:"-"`
}

// AskInput is what a plugin tool's ctx.ask asks for.
type AskInput struct {
	Permission string         `json:"permission"`
	Patterns   []string       `json:"patterns"`
	Always     []string       `json:"always"`
	Metadata   map[string]any `json:"metadata"`
}

// AskError is how a refused ask reaches the plugin: a thrown Error with
// this name and message.
type AskError interface {
	error
	AskErrorName() string
}

// ToolResult is a plugin tool's answer.
type ToolResult struct {
	Output   string         `json:"output"`
	Title    string         `json:"title"`
	Metadata map[string]any `json:"metadata"`
}

// toolCall is a running plugin tool call: its context and the deadline
// of the asks it makes.
type toolCall struct {
	ctx context.Context
	tc  ToolContext
	// warned is set once a malformed metadata update has been logged.
	warned bool
}

// callSeq numbers the tool calls of the host: a call's token is known
// only to the server and the process running it.
var callSeq atomic.Int64

// Tool runs a plugin's tool. While it runs, its context's ask and
// metadata reach tc.Ask and tc.Metadata; when ctx ends (the session is
// interrupted) the tool's abort signal fires and Tool returns at once.
func (h *Host) Tool(ctx context.Context, dir, worktree, plugin, name string, args json.RawMessage, tc ToolContext) (ToolResult, error) {
	p := h.loadedProc(dir)
	if p == nil {
		return ToolResult{}, ErrNotLoaded
	}
	token := fmt.Sprintf("call-%d", callSeq.Add(1))
	p.mu.Lock()
	p.calls[token] = &toolCall{ctx: ctx, tc: tc}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.calls, token)
		p.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() {
		// The abort signal: sent without waiting for its answer.
		if b, err := json.Marshal(map[string]any{"id": -1, "method": "abort", "params": map[string]any{"call": token}}); err == nil {
			p.write(b)
		}
	})
	defer stop()
	raw, err := h.callOn(ctx, p, dir, "tool", map[string]any{"directory": dir, "worktree": worktree, "plugin": plugin, "name": name,
		"args": args, "context": tc, "call": token}, h.opts.ToolTimeout)
	var r ToolResult
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	return r, err
}

// HookError is a plugin whose hook threw or left garbage: its output was
// left as it found it.
type HookError struct {
	Plugin string `json:"plugin"`
	Tool   string `json:"tool,omitempty"`
	Error  string `json:"error"`
}

// Trigger runs a hook of every plugin of a loaded location in load order
// and returns the output they left, and the plugins whose hook failed
// (each left the output as it found it). A location without plugins
// answers output unchanged without a call.
func (h *Host) Trigger(ctx context.Context, dir, hook string, input, output map[string]any) (map[string]any, []HookError, error) {
	if st, ok := h.Loaded(dir); !ok || !hasHook(st, hook) {
		return output, nil, nil
	}
	raw, err := h.call(ctx, dir, "trigger", map[string]any{"directory": dir, "name": hook, "input": input, "output": output}, h.opts.CallTimeout)
	if err != nil {
		return output, nil, err
	}
	var out struct {
		Output map[string]any `json:"output"`
		Errors []HookError    `json:"errors"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Output == nil {
		return output, out.Errors, err
	}
	return out.Output, out.Errors, nil
}

// HasHook reports whether a loaded plugin of a location has a hook.
func (h *Host) HasHook(dir, hook string) bool {
	st, ok := h.Loaded(dir)
	return ok && hasHook(st, hook)
}

// Definition is a tool's definition as tool.definition sees and changes
// it: its description and its parameters' JSON Schema.
type Definition struct {
	ID          string          `json:"id,omitempty"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Definitions runs tool.definition for each tool of a step in one call and
// returns the definitions the plugins left (in order), and the plugins
// whose hook failed.
func (h *Host) Definitions(ctx context.Context, dir string, defs []Definition) ([]Definition, []HookError, error) {
	if !h.HasHook(dir, "tool.definition") {
		return defs, nil, nil
	}
	raw, err := h.call(ctx, dir, "definitions", map[string]any{"directory": dir, "tools": defs}, h.opts.CallTimeout)
	if err != nil {
		return defs, nil, err
	}
	var out struct {
		Tools  []Definition `json:"tools"`
		Errors []HookError  `json:"errors"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Tools) != len(defs) {
		return defs, out.Errors, errors.New("tool.definition: the plugin host answered garbage")
	}
	return out.Tools, out.Errors, nil
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
	evs []json.RawMessage
}

// Event hands events to the event hooks of a loaded location without
// waiting: they go to the host in order, one call at a time, from a
// bounded queue (dropped when it is full).
func (h *Host) Event(dir string, evs ...json.RawMessage) {
	if st, ok := h.Loaded(dir); !ok || !hasHook(st, "event") {
		return
	}
	h.eventsOnce.Do(func() {
		h.events = make(chan hostEvent, eventQueue)
		go func() {
			for {
				select {
				case e := <-h.events:
					h.call(context.Background(), e.dir, "event", map[string]any{"directory": e.dir, "events": e.evs}, h.opts.CallTimeout)
				case <-h.quit:
					return
				}
			}
		}()
	})
	select {
	case h.events <- hostEvent{dir, evs}:
	default:
	}
}

// Reload stops every location's process (and what its plugins started):
// every location loads its plugins afresh on its next use (a new module
// cache included).
//
// Before a loaded location's process is stopped, its plugins' dispose
// hooks run (at most disposeTimeout for all of them).
func (h *Host) Reload() {
	h.mu.Lock()
	slots := h.slots
	h.slots = map[string]*slot{}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range slots {
		h.mu.Lock()
		p := s.proc
		s.proc = nil
		loaded := s.loaded != nil && s.loaded.gen == s.gen && s.loaded.loading == nil && s.loaded.err == nil &&
			hasHook(s.loaded.statuses, "dispose")
		h.mu.Unlock()
		if p == nil {
			continue
		}
		wg.Go(func() {
			if loaded {
				p.send(context.Background(), "unload", map[string]any{"directory": s.dir}, disposeTimeout)
			}
			p.kill()
		})
	}
	wg.Wait()
}

// disposeTimeout bounds the dispose hooks of a location's plugins.
const disposeTimeout = 2 * time.Second

// Forget stops one location's process (and what its plugins started): the
// location loads its plugins afresh on its next use.
func (h *Host) Forget(dir string) {
	h.mu.Lock()
	s := h.slots[dir]
	delete(h.slots, dir)
	var p *proc
	if s != nil {
		p, s.proc = s.proc, nil
	}
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

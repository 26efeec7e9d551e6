// Package snapshot records the files of a project as git trees, so that a
// session's steps can be reverted and redone. Each project root gets a
// private git directory under the instance's data directory; every git
// call runs as `git --git-dir <snapshot dir> --work-tree <project root>`
// with the user's and the system's configuration, hooks, fsmonitor,
// attribute filters and line-ending conversions switched off. The user's
// repository, objects and index are never written (a first snapshot of a
// git project may read its objects, through objects/info/alternates, to
// start from the commit checked out).
//
// A snapshot is bounded: files over MaxFileSize, files the project's
// .gitignore (and the repository's info/exclude) ignore, the sensitive
// files (package sensitive) and nested repositories are left out, and a
// project's snapshots stop growing at MaxFiles entries or Quota bytes;
// what was left out is reported with the tree.
package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/clock"
)

// Defaults of Config.
const (
	DefaultMaxFileSize = 2 << 20
	DefaultMaxFiles    = 200_000
	DefaultQuota       = 2 << 30
	DefaultGCEvery     = 24 * time.Hour
)

// Cmd is one git call: its arguments (after "git"), environment and
// standard input.
type Cmd struct {
	Args  []string
	Env   []string
	Dir   string
	Stdin []byte
}

// Exec runs a git call and returns its standard output; a failure's
// error carries its standard error. Tests replace it to make git fail
// (a full disk, say).
type Exec func(ctx context.Context, git string, c Cmd) ([]byte, error)

// RealExec runs git.
func RealExec(ctx context.Context, git string, c Cmd) ([]byte, error) {
	cmd := exec.CommandContext(ctx, git, c.Args...)
	cmd.Env, cmd.Dir = c.Env, c.Dir
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[:500] + "…"
		}
		sub := ""
		for _, a := range c.Args {
			if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && !strings.Contains(a, "/") {
				sub = a
				break
			}
		}
		return stdout.Bytes(), fmt.Errorf("git %s: %v: %s", sub, err, msg)
	}
	return stdout.Bytes(), nil
}

// Config configures a Manager.
type Config struct {
	// Dir holds one git directory per project (the instance's
	// `snapshots/<instance>` in the data directory).
	Dir string
	// Off turns snapshots off (the operator's choice).
	Off bool
	// Git is the git executable (default: git on PATH).
	Git string
	// MaxFileSize: larger files are left out (default 2 MiB).
	MaxFileSize int64
	// MaxFiles bounds the entries of a project's snapshot (default
	// 200,000); past it new files are left out and the snapshot is
	// incomplete.
	MaxFiles int
	// Quota bounds the bytes of a project's snapshot directory (default
	// 2 GiB); past it new content is left out and the snapshot is
	// incomplete.
	Quota int64
	// GCEvery is how often a project's snapshot directory is collected
	// (default 24 h): objects no live session needs are pruned.
	GCEvery time.Duration
	// Keep returns, for a collection of the snapshot directory of the
	// project at root, the trees that live sessions still use; a project
	// no session uses any more is removed. Without it nothing is
	// collected.
	Keep func(ctx context.Context, root string) ([]string, error)
	// Exec runs git (default RealExec).
	Exec   Exec
	Clock  clock.Clock
	Logger *zap.Logger
}

// Status says whether snapshots are taken and why not.
type Status struct {
	// Mode is "on", "off" (configured) or "unavailable" (no usable git).
	Mode        string `json:"mode"`
	Reason      string `json:"reason,omitempty"`
	Git         string `json:"git,omitempty"`
	MaxFileSize int64  `json:"maxFileSize"`
	MaxFiles    int    `json:"maxFiles"`
	Quota       int64  `json:"quota"`
}

// ErrUnavailable is returned by every operation when snapshots are off or
// git cannot be used; its text says which.
var ErrUnavailable = errors.New("file snapshots are not available")

// Manager takes and reads the snapshots of an instance's projects.
type Manager struct {
	cfg      Config
	status   Status
	home     string
	mu       sync.Mutex
	projects map[string]*project
	gcs      sync.WaitGroup
	watches  int // projects with a watcher
	closed   bool
}

// Limits of the watchers that spare a snapshot from reading every file:
// projects watched per manager (each takes one of the user's inotify
// instances) and directories watched per project.
const (
	maxWatchedProjects = 32
	maxWatchedDirs     = 20000
)

// Close stops following the projects' files (a configuration that is
// replaced closes its manager).
func (m *Manager) Close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.closed = true
	list := make([]*project, 0, len(m.projects))
	for _, p := range m.projects {
		list = append(list, p)
	}
	m.mu.Unlock()
	for _, p := range list {
		p.mu.Lock()
		if p.watch != nil {
			p.watch.close()
			p.watch, p.noWatch = nil, "the snapshot manager is closed"
		}
		p.mu.Unlock()
	}
}

// watchSlot takes one of the manager's watcher slots.
func (m *Manager) watchSlot() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.watches >= maxWatchedProjects {
		return false
	}
	m.watches++
	return true
}

func (m *Manager) releaseWatchSlot() {
	m.mu.Lock()
	m.watches--
	m.mu.Unlock()
}

// New returns a manager; it checks git once (Status says what it found).
func New(cfg Config) *Manager {
	if cfg.MaxFileSize <= 0 {
		cfg.MaxFileSize = DefaultMaxFileSize
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.Quota <= 0 {
		cfg.Quota = DefaultQuota
	}
	if cfg.GCEvery <= 0 {
		cfg.GCEvery = DefaultGCEvery
	}
	if cfg.Exec == nil {
		cfg.Exec = RealExec
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Manager{cfg: cfg, projects: map[string]*project{}}
	m.status = Status{Mode: "on", MaxFileSize: cfg.MaxFileSize, MaxFiles: cfg.MaxFiles, Quota: cfg.Quota}
	switch {
	case cfg.Off:
		m.status.Mode, m.status.Reason = "off", "snapshots are turned off in the configuration"
	case cfg.Dir == "":
		m.status.Mode, m.status.Reason = "unavailable", "no data directory for snapshots"
	default:
		git := cfg.Git
		if git == "" {
			git = "git"
		}
		path, err := exec.LookPath(git)
		if err != nil {
			m.status.Mode, m.status.Reason = "unavailable", "git is not installed (no "+git+" on PATH): install git to revert file changes"
			break
		}
		m.cfg.Git = path
		out, err := exec.Command(path, "--version").Output()
		if err != nil {
			m.status.Mode, m.status.Reason = "unavailable", "git cannot run: "+err.Error()
			break
		}
		m.status.Git = strings.TrimSpace(string(out))
		if v := gitVersion(m.status.Git); v < 2*10000+25*100 {
			m.status.Mode, m.status.Reason = "unavailable", m.status.Git+" is too old: snapshots need git 2.25 or newer"
		}
	}
	return m
}

// gitVersion is major*10000+minor*100+patch of `git version X.Y.Z…`.
func gitVersion(s string) int {
	s = strings.TrimPrefix(s, "git version ")
	var a, b, c int
	fmt.Sscanf(s, "%d.%d.%d", &a, &b, &c)
	return a*10000 + b*100 + c
}

// Status says whether snapshots are taken.
func (m *Manager) Status() Status {
	if m == nil {
		return Status{Mode: "off", Reason: "no snapshots are configured"}
	}
	return m.status
}

// Enabled reports whether snapshots are taken.
func (m *Manager) Enabled() bool { return m != nil && m.status.Mode == "on" }

func (m *Manager) unavailable() error {
	if m == nil {
		return fmt.Errorf("%w: no snapshots are configured", ErrUnavailable)
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, m.status.Reason)
}

// Wait waits for background collections (tests, shutdown).
func (m *Manager) Wait() {
	if m != nil {
		m.gcs.Wait()
	}
}

// project is the snapshot directory of one project root.
type project struct {
	m    *Manager
	root string // the project root (work tree), links resolved
	dir  string // its git directory
	mu   sync.Mutex
	// ready: the directory is initialised in this process.
	ready bool
	// tree is the tree of the snapshot index's HEAD commit ("" unknown);
	// dirty: the index may differ from it.
	tree  string
	dirty bool
	// headTree is the tree of HEAD's commit as this manager last wrote it
	// (HEAD follows the index only before a status of every file);
	// index is the snapshot index as this manager left it.
	headTree string
	index    indexVersion
	// usage is the snapshot directory's size in bytes as last measured
	// plus what was added since (-1 unknown).
	usage  int64
	tracks int
	// lastGC and collecting are guarded by the manager's mutex.
	lastGC     time.Time
	collecting bool
	// watch follows the project's directories between snapshots (nil:
	// every snapshot asks git about every file; noWatch says why).
	watch          *watcher
	noWatch        string
	excludeChanged bool
}

// Key is the snapshot directory name of a project root: a hash of the
// root's path.
func Key(root string) string {
	return fmt.Sprintf("%x", sha1sum([]byte(root)))[:20]
}

// project returns the snapshot directory of a root.
func (m *Manager) project(root string) (*project, error) {
	if !m.Enabled() {
		return nil, m.unavailable()
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("snapshot: project root %q is not absolute", root)
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	root = filepath.Clean(root)
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.projects[root]
	if p == nil {
		p = &project{m: m, root: root, dir: filepath.Join(m.cfg.Dir, Key(root)), usage: -1}
		m.projects[root] = p
	}
	return p, nil
}

// lock serialises the operations on a snapshot directory: in this
// process with a mutex, between processes with a lock file.
func (p *project) lock() (func(), error) {
	p.mu.Lock()
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		p.mu.Unlock()
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(p.dir, "agentgate.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		p.mu.Unlock()
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		p.mu.Unlock()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		p.mu.Unlock()
	}, nil
}

// env is the environment of every git call: nothing of the server's but
// PATH, an empty home, no system or global configuration or attributes,
// no prompts, literal pathspecs, and a fixed identity for snapshot
// commits.
func (m *Manager) env() []string {
	m.mu.Lock()
	if m.home == "" {
		m.home = filepath.Join(m.cfg.Dir, ".home")
	}
	home := m.home
	m.mu.Unlock()
	os.MkdirAll(home, 0o700)
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/bin:/bin"
	}
	return []string{"PATH=" + path, "HOME=" + home, "XDG_CONFIG_HOME=" + home, "LC_ALL=C", "LANG=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_LITERAL_PATHSPECS=1", "GIT_NO_REPLACE_OBJECTS=1", "GIT_ADVICE=0",
		"GIT_AUTHOR_NAME=agentgate", "GIT_AUTHOR_EMAIL=snapshot@agentgate", "GIT_AUTHOR_DATE=@0 +0000",
		"GIT_COMMITTER_NAME=agentgate", "GIT_COMMITTER_EMAIL=snapshot@agentgate", "GIT_COMMITTER_DATE=@0 +0000"}
}

// git runs a git command on the project's snapshot directory and work
// tree, hardened: no hooks, no fsmonitor, no line-ending conversion, no
// pager, no external diff.
func (p *project) git(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	full := append([]string{"--git-dir", p.dir, "--work-tree", p.root, "--no-pager", "--literal-pathspecs",
		"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.autocrlf=false",
		"-c", "core.quotepath=false", "-c", "core.safecrlf=false"}, args...)
	return p.m.cfg.Exec(ctx, p.m.cfg.Git, Cmd{Args: full, Env: p.m.env(), Dir: p.root, Stdin: stdin})
}

// config is the snapshot directory's own configuration (the only one git
// reads: the system's and the user's are off).
const config = `[core]
	repositoryformatversion = 0
	filemode = true
	bare = false
	logallrefupdates = false
	autocrlf = false
	safecrlf = false
	symlinks = true
	ignorecase = false
	fsmonitor = false
	untrackedCache = true
	splitIndex = true
	quotepath = false
	hooksPath = /dev/null
	preloadIndex = true
	checkStat = default
[gc]
	auto = 0
[index]
	version = 4
[advice]
	detachedHead = false
`

// attributes make every file's bytes go in and out unchanged, whatever
// the project's .gitattributes say (info/attributes wins over them): no
// line-ending conversion, no filters, no ident expansion, no encodings.
const attributes = "* -text -filter -ident -working-tree-encoding !eol !diff !merge\n"

// readAll reads a small file, "" when missing.
func readSmall(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, max))
	return string(b)
}

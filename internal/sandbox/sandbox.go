// Package sandbox runs what the coding agent runs — its shell commands and
// its plugin host — confined by the kernel: a user namespace mapping the
// server's user to root inside, a mount namespace holding only the system
// (read-only), the session's project and a private temporary directory, a
// PID namespace with a fresh /proc whose first process is ours, a network
// namespace with its own loopback only, IPC and UTS namespaces. On top of
// them: no capabilities, no_new_privs, Landlock over the same paths and a
// seccomp filter against the calls namespaces do not cover (ptrace,
// io_uring, nested namespaces, mounts, keyrings, BPF).
//
// The helper that sets a sandbox up is this binary itself: Command re-runs
// /proc/self/exe with the first argument "agentgate-sandbox", which init
// (below) dispatches before Caddy or a test starts. So every build of the
// binary, `go run` and xcaddy included, carries its sandbox.
package sandbox

import (
	"errors"
	"fmt"
	"github.com/agentgate/agentgate/internal/sandbox/sbinit"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Config is how an operator configures the sandbox (the instance's
// `sandbox` block).
type Config struct {
	// Off runs commands and plugins without a sandbox: the operator's
	// explicit choice, shown by GET /api/info.
	Off bool
	// ReadOnly are paths bound read-only into every sandbox (language
	// caches such as the Go module cache, toolchains outside /usr).
	ReadOnly []string
	// Writable are paths bound read-write into every sandbox (a build
	// cache the operator shares with the agent).
	Writable []string
	// Env names variables passed from the server's environment ("GOFLAGS")
	// or set ("GOPROXY=off").
	Env []string
	// Network gives sandboxes the host's network (outside access and the
	// host's loopback). Default: a network namespace with its own
	// loopback only.
	Network bool
	// Limits bound each sandbox.
	Limits Limits
	// Hidden are paths that are never reachable from a sandbox, even when
	// they lie inside a bound path (the server's data directory, its
	// configuration): an empty directory or file covers them.
	Hidden []string
	// Unavailable, when set, is taken as the reason namespaces cannot be
	// made (tests simulate a host without them).
	Unavailable string
}

// Limits bound one sandbox: what the kernel gives per call. A zero field
// takes DefaultLimits' value; a negative one means no limit.
type Limits struct {
	// Memory in bytes for everything in the sandbox (cgroup).
	Memory int64
	// Processes alive at once in the sandbox (cgroup).
	Processes int
	// CPU time per process (RLIMIT_CPU).
	CPU time.Duration
	// Files open per process (RLIMIT_NOFILE).
	Files int
}

// DefaultLimits bound a sandbox when the operator names none.
var DefaultLimits = Limits{Memory: 4 << 30, Processes: 1024, CPU: 10 * time.Minute, Files: 4096}

// Spec is one run in a sandbox.
type Spec struct {
	// Argv is the program and its arguments (the program is looked up in
	// the sandbox's PATH when it has no slash).
	Argv []string
	// Dir is the working directory (inside a bound path).
	Dir string
	// Env is the whole environment (see Env for building it).
	Env []string
	// Writable are the directories the run may change: the session's
	// project roots. Their protected paths stay read-only and their
	// sensitive files are masked (see Scan).
	Writable []string
	// ReadOnly are further paths the run may read (a plugin host's
	// runtime and modules).
	ReadOnly []string
	// LongLived runs without the per-process CPU time limit (a plugin
	// host lives as long as its location; its memory and process limits
	// still hold).
	LongLived bool
}

// Status is what GET /api/info and the start-up log say about the sandbox.
type Status struct {
	// Mode is "enforced", "off" (the operator wrote `sandbox off`) or
	// "unavailable" (bash and plugins are refused).
	Mode string `json:"mode"`
	// Reason says why the sandbox is unavailable.
	Reason string `json:"reason,omitempty"`
	// Layers are the confinements in force.
	Layers []string `json:"layers,omitempty"`
	// Network is "loopback only" or "host".
	Network string `json:"network,omitempty"`
	// Limits are each limit and how it is enforced, or why it is not.
	Limits map[string]string `json:"limits,omitempty"`
}

// ErrUnavailable is a run refused because the host cannot make a sandbox
// and the operator did not turn it off.
var ErrUnavailable = errors.New("the sandbox is unavailable")

// Sandbox makes sandboxes with one configuration.
type Sandbox struct {
	cfg Config

	once   sync.Once
	status Status
	cg     *cgroups
}

// New returns a sandbox maker; the host is probed on first use.
func New(cfg Config) *Sandbox {
	cfg.ReadOnly, cfg.Writable, cfg.Hidden = resolved(cfg.ReadOnly), resolved(cfg.Writable), resolved(cfg.Hidden)
	return &Sandbox{cfg: cfg}
}

// resolved is paths with their links resolved, in a new slice (the
// caller's configuration is left as it was).
func resolved(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = realOrClean(p)
	}
	return out
}

func realOrClean(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// Config is the configuration the sandbox was made with.
func (s *Sandbox) Config() Config { return s.cfg }

// Status probes the host once (a sandbox is made and torn down) and says
// what is enforced.
func (s *Sandbox) Status() Status {
	s.once.Do(s.probe)
	return s.status
}

func (s *Sandbox) probe() {
	if s.cfg.Off {
		s.status = Status{Mode: "off", Reason: "the operator turned the sandbox off (sandbox off): commands and plugins run with the server's privileges"}
		return
	}
	if s.cfg.Unavailable != "" {
		s.status = Status{Mode: "unavailable", Reason: s.cfg.Unavailable}
		return
	}
	lim := s.limits()
	s.cg = newCgroups(lim)
	st := Status{Mode: "enforced", Network: "loopback only", Limits: map[string]string{}}
	if s.cfg.Network {
		st.Network = "host"
	}
	if err := probe(s); err != nil {
		s.status = Status{Mode: "unavailable", Reason: "cannot make a sandbox on this host: " + err.Error() +
			" (unprivileged user namespaces must be allowed; see the README's host requirements)"}
		return
	}
	st.Layers = layers()
	if lim.Memory > 0 {
		st.Limits["memory"] = s.cg.describe("memory", fmt.Sprintf("%d MiB", lim.Memory>>20))
	}
	if lim.Processes > 0 {
		st.Limits["processes"] = s.cg.describe("pids", fmt.Sprintf("%d", lim.Processes))
	}
	if lim.CPU > 0 {
		st.Limits["cpu"] = fmt.Sprintf("%s per process (RLIMIT_CPU)", lim.CPU)
	}
	if lim.Files > 0 {
		st.Limits["files"] = fmt.Sprintf("%d open per process (RLIMIT_NOFILE)", lim.Files)
	}
	s.status = st
}

func (s *Sandbox) limits() Limits {
	l, d := s.cfg.Limits, DefaultLimits
	pick := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return Limits{Memory: pick(l.Memory, d.Memory), Processes: int(pick(int64(l.Processes), int64(d.Processes))),
		CPU: time.Duration(pick(int64(l.CPU), int64(d.CPU))), Files: int(pick(int64(l.Files), int64(d.Files)))}
}

// Env builds a sandboxed run's environment from an allow-list, never from
// the server's environment minus a list: PATH, LANG and the LC_ variables
// and TERM from the server's environment, HOME and TMPDIR inside the
// sandbox, the operator's named variables, then extra ("NAME=value", a
// plugin's shell.env) — extra never overrides PATH or HOME.
func (s *Sandbox) Env(extra ...string) []string {
	host := os.Environ()
	get := func(name string) (string, bool) {
		for _, kv := range host {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				return v, true
			}
		}
		return "", false
	}
	out := []string{}
	set := map[string]int{}
	put := func(k, v string) {
		if i, ok := set[k]; ok {
			out[i] = k + "=" + v
			return
		}
		set[k] = len(out)
		out = append(out, k+"="+v)
	}
	path, ok := get("PATH")
	if !ok || path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	put("PATH", path)
	home, tmp := Home, "/tmp"
	if s.cfg.Off {
		home, _ = os.UserHomeDir()
		tmp = os.TempDir()
	}
	put("HOME", home)
	put("TMPDIR", tmp)
	put("USER", "agent")
	term, ok := get("TERM")
	if !ok || term == "" {
		term = "dumb"
	}
	put("TERM", term)
	for _, kv := range host {
		k, v, _ := strings.Cut(kv, "=")
		if k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") {
			put(k, v)
		}
	}
	for _, e := range s.cfg.Env {
		if k, v, ok := strings.Cut(e, "="); ok {
			put(k, v)
		} else if v, ok := get(e); ok {
			put(e, v)
		}
	}
	for _, kv := range extra {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || k == "PATH" || k == "HOME" {
			continue
		}
		put(k, v)
	}
	return out
}

// Home is HOME inside a sandbox: a directory of its private /tmp.
const Home = sbinit.Home

var (
	defaultOnce sync.Once
	defaultSB   *Sandbox
)

// Default is the sandbox of the default configuration (enforced, the
// default limits, loopback-only network): what runs commands when a caller
// names no sandbox of its own.
func Default() *Sandbox {
	defaultOnce.Do(func() { defaultSB = New(Config{}) })
	return defaultSB
}

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentgate/agentgate/internal/sandbox/sbinit"
)

// Cmd is a run in a sandbox: an exec.Cmd whose Stdin, Stdout and Stderr
// the caller sets (or takes pipes of) before Start.
type Cmd struct {
	*exec.Cmd
	plain   bool
	pol     []byte
	network bool
	polW    *os.File
	group   *group
	hit     string
	waitErr error
	waited  bool
}

// Command prepares a run of spec in a new sandbox. With the sandbox off it
// is a plain process group; when the host cannot make one it fails with
// ErrUnavailable.
func (s *Sandbox) Command(spec Spec) (*Cmd, error) {
	st := s.Status()
	if len(spec.Argv) == 0 {
		return nil, errors.New("sandbox: nothing to run")
	}
	switch st.Mode {
	case "off":
		c := exec.Command(spec.Argv[0], spec.Argv[1:]...)
		c.Dir, c.Env = spec.Dir, spec.Env
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		return &Cmd{Cmd: c, plain: true}, nil
	case "unavailable":
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, st.Reason)
	}
	c, err := s.command(spec, false)
	if err != nil {
		return nil, err
	}
	if s.cg != nil {
		c.group = s.cg.create()
	}
	return c, nil
}

func (s *Sandbox) command(spec Spec, probe bool) (*Cmd, error) {
	for _, w := range spec.Writable {
		if err := CheckRoot(w, s.cfg.Hidden); err != nil {
			return nil, err
		}
	}
	p := sbinit.Policy{Argv: spec.Argv, Dir: spec.Dir, Env: spec.Env, Network: s.cfg.Network, Probe: probe}
	lim := s.limits()
	if !spec.LongLived {
		p.CPU = int64(lim.CPU / time.Second)
	}
	if lim.Files > 0 {
		p.Files = uint64(lim.Files)
	}
	// The operator's paths were resolved by New; the run's are here, once.
	writable, readOnly := resolved(spec.Writable), resolved(spec.ReadOnly)
	p.Writable = append(append([]string(nil), s.cfg.Writable...), writable...)
	p.ReadOnly = append(append([]string(nil), s.cfg.ReadOnly...), readOnly...)
	for _, w := range writable {
		sc := Scan(w)
		p.Protect = append(p.Protect, sc.Protect...)
		p.MaskFiles = append(p.MaskFiles, sc.MaskFiles...)
		p.MaskDirs = append(p.MaskDirs, sc.MaskDirs...)
	}
	for _, r := range readOnly {
		sc := Scan(r)
		p.MaskFiles = append(p.MaskFiles, sc.MaskFiles...)
		p.MaskDirs = append(p.MaskDirs, sc.MaskDirs...)
	}
	// A hidden path is covered where it lies inside a bound path (never
	// where a bound path lies inside it: that one was bound on purpose).
	for _, h := range s.cfg.Hidden {
		for _, b := range append(append([]string(nil), p.Writable...), p.ReadOnly...) {
			if within(b, h) && b != h {
				p.Hidden = append(p.Hidden, h)
				break
			}
		}
	}
	c := &exec.Cmd{Path: "/proc/self/exe", Args: []string{sbinit.Name, "init"}, Env: []string{}}
	if os.Geteuid() != 0 {
		// A server that is not root cannot write the user-namespace map of
		// a child it forked while non-dumpable: a first helper, dumpable
		// again after its exec, makes the namespaces.
		c.Args = []string{sbinit.Name, "spawn"}
	}
	return &Cmd{Cmd: c, pol: p.Encode(), network: p.Network}, nil
}

// spawn starts processes from one OS thread that never exits, so that
// Pdeathsig (which fires when the creating thread ends) fires only when
// the server dies.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			for r := range spawnCh {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd, done}
	return <-done
}

// Start starts the run and returns once the command runs inside its
// sandbox (or the sandbox could not be set up: the error says why).
func (c *Cmd) Start() error {
	if c.plain {
		return spawn(c.Cmd)
	}
	polR, polW, err := os.Pipe()
	if err != nil {
		return err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		polR.Close()
		polW.Close()
		return err
	}
	c.Cmd.ExtraFiles = []*os.File{polR, stW}
	if c.Args[1] == "init" {
		c.Cmd.SysProcAttr = sbinit.NSAttr(c.network)
	} else {
		c.Cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	}
	err = spawn(c.Cmd)
	polR.Close()
	stW.Close()
	if err != nil {
		polW.Close()
		stR.Close()
		return fmt.Errorf("sandbox: cannot start the helper: %w", err)
	}
	if c.group != nil {
		// Placed before it reads its policy: nothing runs unlimited.
		if err := c.group.add(c.Process.Pid); err != nil {
			c.group = nil
		}
	}
	_, werr := polW.Write(c.pol)
	polW.Close()
	line, rerr := bufio.NewReader(io.LimitReader(stR, 4096)).ReadString('\n')
	stR.Close()
	line = strings.TrimSpace(line)
	if werr == nil && line == "ok" {
		return nil
	}
	c.Process.Kill()
	c.Wait()
	switch {
	case strings.HasPrefix(line, "error: "):
		return errors.New("sandbox: " + strings.TrimPrefix(line, "error: "))
	case rerr != nil:
		return fmt.Errorf("sandbox: the helper ended before the sandbox was set up (%v)", c.ProcessState)
	}
	return fmt.Errorf("sandbox: unexpected answer from the helper: %q", line)
}

// Kill ends the run and everything it started: the sandbox's first
// process dies, and with it every process of its PID namespace.
func (c *Cmd) Kill() {
	if c.Process == nil {
		return
	}
	if c.plain {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		return
	}
	c.Process.Kill()
}

// Wait waits for the run to end and releases its limits.
func (c *Cmd) Wait() error {
	if c.waited {
		return c.waitErr
	}
	c.waited = true
	c.waitErr = c.Cmd.Wait()
	if c.plain && c.Process != nil {
		// What the command left behind in its group ends with it.
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	if c.group != nil {
		c.hit = c.group.hit()
		// The kernel releases the namespace's last processes a moment
		// later: the groups go then, off the call's path.
		go c.group.remove()
	}
	return c.waitErr
}

// LimitHit names the limit the run hit ("memory", "processes"), if any
// (known after Wait).
func (c *Cmd) LimitHit() string { return c.hit }

func probe(s *Sandbox) error {
	c, err := s.command(Spec{Argv: []string{"/bin/true"}, Dir: "/"}, true)
	if err != nil {
		return err
	}
	c.Stdout, c.Stderr = io.Discard, io.Discard
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// layers describes the confinements a sandbox gets on this host.
func layers() []string {
	out := []string{"namespaces: user, mount, pid (fresh /proc), network, ipc, uts", "no capabilities, no_new_privs"}
	if sbinit.Seccomp() {
		out = append(out, "seccomp: ptrace, process_vm, io_uring, namespaces, mounts, keyrings, bpf, perf, vsock refused")
	} else {
		out = append(out, "seccomp: no filter for this architecture")
	}
	if abi := sbinit.LandlockABI(); abi > 0 {
		out = append(out, fmt.Sprintf("landlock ABI %d: file system, and from ABI 6 signals and abstract sockets scoped", abi))
	} else {
		out = append(out, "landlock: not in this kernel")
	}
	return out
}

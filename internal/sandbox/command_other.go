//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"os/exec"
)

// Off Linux there are no namespaces to make a sandbox of: commands and
// plugins are refused unless the operator writes `sandbox off`.

// Cmd is a run: with the sandbox off, a plain process.
type Cmd struct {
	*exec.Cmd
}

type cgroups struct{}

func newCgroups(Limits) *cgroups               { return nil }
func (c *cgroups) describe(_, _ string) string { return "not enforced: not on Linux" }

func probe(*Sandbox) error { return errors.New("sandboxes need Linux namespaces") }

func layers() []string { return nil }

// Command prepares a run: a plain process with the sandbox off, else
// ErrUnavailable.
func (s *Sandbox) Command(spec Spec) (*Cmd, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("sandbox: nothing to run")
	}
	if st := s.Status(); st.Mode != "off" {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, st.Reason)
	}
	c := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	c.Dir, c.Env = spec.Dir, spec.Env
	return &Cmd{Cmd: c}, nil
}

// Kill ends the run.
func (c *Cmd) Kill() {
	if c.Process != nil {
		c.Process.Kill()
	}
}

// LimitHit is always "": there are no limits off Linux.
func (c *Cmd) LimitHit() string { return "" }

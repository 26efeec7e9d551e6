package agentgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentgate/agentgate/internal/sandbox"
)

// sandboxCommand is `caddy agentgate sandbox`: what an operator uses to
// check the sandbox the instance's commands and plugins run in, on this
// host, without a running server.
func sandboxCommand() *cobra.Command {
	sb := &cobra.Command{Use: "sandbox", Short: "Checks the sandbox of the agent's commands and plugins on this host"}
	var read, write, env []string
	var network bool
	config := func() sandbox.Config {
		return sandbox.Config{ReadOnly: read, Writable: write, Env: env, Network: network}
	}
	flags := func(c *cobra.Command) {
		c.Flags().StringSliceVar(&read, "read", nil, "Paths bound read-only (as the sandbox block's read)")
		c.Flags().StringSliceVar(&write, "write", nil, "Paths bound read-write (as the sandbox block's write)")
		c.Flags().StringSliceVar(&env, "env", nil, "Variables passed (NAME) or set (NAME=value)")
		c.Flags().BoolVar(&network, "network-host", false, "Give the sandbox the host's network")
	}
	status := &cobra.Command{Use: "status", Short: "Print what confines commands on this host (mode, layers, network, limits)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b, _ := json.MarshalIndent(sandbox.New(config()).Status(), "", "  ")
			fmt.Println(string(b))
			return nil
		}}
	flags(status)
	var dir string
	run := &cobra.Command{Use: "run [flags] -- <command> [args...]", Short: "Run a command in a sandbox whose project is --dir (default: the working directory)",
		Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if dir == "" {
				dir, _ = os.Getwd()
			}
			s := sandbox.New(config())
			c, err := s.Command(sandbox.Spec{Argv: args, Dir: dir, Writable: []string{dir}, Env: s.Env()})
			if err != nil {
				return err
			}
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := c.Start(); err != nil {
				return err
			}
			err = c.Wait()
			if hit := c.LimitHit(); hit != "" {
				fmt.Fprintf(os.Stderr, "the command reached the sandbox's %s limit\n", hit)
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			return err
		}}
	flags(run)
	run.Flags().StringVar(&dir, "dir", "", "The project directory (writable inside)")
	var n int
	bench := &cobra.Command{Use: "bench", Short: "Time bash -c true in a sandbox and plainly, in turn, from this binary; print the medians and what the sandbox adds",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			r, err := benchSandbox(config(), n)
			if err != nil {
				return err
			}
			b, _ := json.MarshalIndent(r, "", "  ")
			fmt.Println(string(b))
			return nil
		}}
	flags(bench)
	bench.Flags().IntVarP(&n, "calls", "n", 200, "Calls of each kind")
	sb.AddCommand(status, run, bench)
	return sb
}

// SandboxBench is what `caddy agentgate sandbox bench` prints: the time of
// one bash call (start to exit, as the bash tool runs it) in a sandbox
// and plainly, in milliseconds.
type SandboxBench struct {
	Calls            int     `json:"calls"`
	SandboxedP50     float64 `json:"sandboxed_p50_ms"`
	SandboxedP90     float64 `json:"sandboxed_p90_ms"`
	PlainP50         float64 `json:"plain_p50_ms"`
	PlainP90         float64 `json:"plain_p90_ms"`
	AddedP50         float64 `json:"added_p50_ms"`
	SandboxedCommand string  `json:"command"`
}

func benchSandbox(cfg sandbox.Config, n int) (*SandboxBench, error) {
	if n < 1 || n > 10000 {
		return nil, errors.New("--calls: 1 to 10000")
	}
	s := sandbox.New(cfg)
	if st := s.Status(); st.Mode != "enforced" {
		return nil, fmt.Errorf("the sandbox is %s: %s", st.Mode, st.Reason)
	}
	dir, err := os.MkdirTemp("", "agentgate-sandbox-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, err
	}
	argv := []string{"/bin/bash", "-c", "true"}
	var boxed, plain []float64
	for i := 0; i < n+5; i++ {
		t0 := time.Now()
		c, err := s.Command(sandbox.Spec{Argv: argv, Dir: dir, Writable: []string{dir}, Env: s.Env()})
		if err != nil {
			return nil, err
		}
		if err := c.Start(); err != nil {
			return nil, err
		}
		c.Wait()
		d1 := time.Since(t0)
		t0 = time.Now()
		p := exec.Command(argv[0], argv[1:]...)
		p.Dir, p.Env = dir, s.Env()
		p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := p.Run(); err != nil {
			return nil, err
		}
		d2 := time.Since(t0)
		if i >= 5 { // the first calls warm caches up
			boxed = append(boxed, float64(d1.Microseconds())/1000)
			plain = append(plain, float64(d2.Microseconds())/1000)
		}
	}
	q := func(v []float64, f float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[int(f*float64(len(s)-1))]
	}
	r := &SandboxBench{Calls: n, SandboxedP50: q(boxed, .5), SandboxedP90: q(boxed, .9), PlainP50: q(plain, .5), PlainP90: q(plain, .9),
		SandboxedCommand: "bash -c true"}
	r.AddedP50 = r.SandboxedP50 - r.PlainP50
	return r, nil
}

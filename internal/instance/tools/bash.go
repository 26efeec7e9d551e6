package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/sandbox"
)

// The command limits.
const (
	defaultBashTimeout = 2 * time.Minute
	maxBashTimeout     = 10 * time.Minute
	maxBashOutput      = 50 << 10 // bytes of output the model reads (the tail)
	progressEvery      = 250 * time.Millisecond
)

var _ = register(&Tool{
	Name: "bash",
	Description: "Run a shell command in the project directory (or workdir). stdout and stderr are merged; the last " +
		"50 KB are returned with the exit code. The command, and every process it starts, is killed at its timeout " +
		"(default 2 minutes, at most 10) and when the session is interrupted. Use the read, grep, glob and edit tools " +
		"rather than cat, grep, find or sed.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"command":{"type":"string","description":"The command to execute"},` +
		`"timeout":{"type":"number","description":"Optional timeout in milliseconds"},` +
		`"workdir":{"type":"string","description":"The working directory to run the command in. Defaults to the project directory. Use this instead of 'cd' commands."},` +
		`"description":{"type":"string","description":"Clear, concise description of what this command does in 5-10 words"}},` +
		`"required":["command"]}`),
	Required:  []string{"command"},
	Exclusive: true,
	Run:       runBash,
})

func runBash(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Command     string  `json:"command"`
		Timeout     float64 `json:"timeout"`
		Workdir     string  `json:"workdir"`
		Description string  `json:"description"`
	}
	if err := decode("bash", args, &in); err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return Result{}, &ArgumentError{Tool: "bash", Reason: "command must not be empty"}
	}
	if in.Timeout < 0 {
		return Result{}, &ArgumentError{Tool: "bash", Reason: fmt.Sprintf("Invalid timeout value: %v. Timeout must be a positive number", in.Timeout)}
	}
	timeout := env.BashTimeout
	if timeout <= 0 {
		timeout = defaultBashTimeout
	}
	limit := env.MaxBashTimeout
	if limit <= 0 {
		limit = maxBashTimeout
	}
	if in.Timeout > 0 {
		timeout = time.Duration(in.Timeout) * time.Millisecond
	}
	timeout = min(timeout, limit)
	dir, err := env.path(ctx, in.Workdir, true)
	if err != nil {
		return Result{}, err
	}
	cmdText := strings.TrimSpace(in.Command)
	if err := env.permitBash(ctx, cmdText, dir, in.Description); err != nil {
		return Result{}, err
	}
	title := in.Description
	if title == "" {
		title = cmdText
	}
	out, exit, why, err := runCommand(ctx, env, dir, cmdText, timeout)
	if err != nil {
		return Result{}, err
	}
	text, truncated := out.text()
	if text == "" {
		text = "(no output)"
	}
	switch why {
	case "timeout":
		text += fmt.Sprintf("\n\n(Command timed out after %d ms; it and every process it started were killed)", timeout.Milliseconds())
	case "aborted":
		text += "\n\n(Command was aborted)"
	case "memory", "processes":
		text += fmt.Sprintf("\n\n(Command was killed: it reached the sandbox's %s limit; the server is unaffected)", why)
	}
	meta := map[string]any{"exit": exit, "description": in.Description, "truncated": truncated}
	if exit != nil {
		text += fmt.Sprintf("\n\n(exit code %d)", *exit)
	}
	meta["output"] = tailString(text, 30000)
	return Result{Title: title, Output: text, Metadata: meta}, nil
}

// runCommand runs a command in a new sandbox (see package sandbox): the
// session's roots writable, the system read-only, a private /tmp, its own
// loopback, an environment built from an allow-list. It returns the
// output's tail and the exit code (nil when it was killed), and why it
// stopped early ("timeout", "aborted", or the limit it hit: "memory",
// "processes"). When the call ends, times out or ctx ends, the sandbox
// dies and every process in it: none outlives the call.
func runCommand(ctx context.Context, env *Env, dir, command string, timeout time.Duration) (*tailBuffer, *int, string, error) {
	shell := env.Shell
	if shell == "" {
		shell = "/bin/bash"
		if _, err := os.Stat(shell); err != nil {
			shell = "/bin/sh"
		}
	}
	sb := env.Sandbox
	if sb == nil {
		sb = sandbox.Default()
	}
	var extra []string
	if env.ShellEnv != nil {
		for k, v := range env.ShellEnv(ctx, dir) {
			extra = append(extra, k+"="+v)
		}
		sort.Strings(extra)
	}
	writable := env.Roots
	if len(writable) == 0 {
		writable = []string{env.project()}
	}
	cmd, err := sb.Command(sandbox.Spec{Argv: []string{shell, "-c", command}, Dir: dir, Env: sb.Env(extra...), Writable: writable})
	if err != nil {
		if errors.Is(err, sandbox.ErrUnavailable) {
			return nil, nil, "", fmt.Errorf("bash is refused: %v. The operator can write `sandbox off` to run commands unconfined", err)
		}
		return nil, nil, "", fmt.Errorf("cannot run the command: %v", err)
	}
	out := &tailBuffer{max: maxBashOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Stdin = nil
	// Output pipes held open by a process the command left behind must
	// not keep the call waiting once the sandbox is killed.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, nil, "", fmt.Errorf("cannot start the command: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	why := ""
	var werr error
wait:
	for {
		select {
		case werr = <-done:
			break wait
		case <-timer.C:
			why = "timeout"
			cmd.Kill()
		case <-ctx.Done():
			why = "aborted"
			cmd.Kill()
		case <-tick.C:
			if env.Progress != nil {
				if s, changed := out.snapshot(); changed {
					env.Progress(map[string]any{"output": tailString(s, 30000)})
				}
			}
		}
	}
	// Whatever the command started in the background ends with it.
	cmd.Kill()
	if why != "" {
		return out, nil, why, nil
	}
	if hit := cmd.LimitHit(); hit != "" {
		return out, nil, hit, nil
	}
	code := 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			if errors.Is(werr, exec.ErrWaitDelay) {
				code = cmd.ProcessState.ExitCode()
				return out, &code, "", nil
			}
			return nil, nil, "", werr
		}
		code = ee.ExitCode()
		if code < 0 {
			return out, nil, "aborted", nil
		}
	}
	return out, &code, "", nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int64
	version int64
	seen    int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.version++
	n := len(p)
	if len(p) >= t.max {
		t.dropped += int64(len(t.buf) + len(p) - t.max)
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.dropped += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// text is the kept output, marked when the start was dropped.
func (t *tailBuffer) text() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.ToValidUTF8(string(t.buf), "\uFFFD")
	if t.dropped > 0 {
		return fmt.Sprintf("...output truncated (%d bytes dropped)...\n\n%s", t.dropped, s), true
	}
	return s, false
}

// snapshot returns the output so far and whether it changed since the
// last snapshot.
func (t *tailBuffer) snapshot() (string, bool) {
	t.mu.Lock()
	changed := t.version != t.seen
	t.seen = t.version
	t.mu.Unlock()
	s, _ := t.text()
	return s, changed
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stackTrace matches the marks of a Go panic or fatal error.
var stackTrace = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[)`)

// runMustFail runs `caddy run` on a config whose data directory cannot be
// used and checks that it exits non-zero, soon, with a clear error naming
// wantPath and no Go stack trace.
// With cred, caddy runs as that user.
func runMustFail(t *testing.T, s *server, wantPath string, cred *syscall.Credential) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testContext(t, 2*time.Minute), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "run", "--config", s.cfgPath, "--adapter", "caddyfile")
	cmd.Env, cmd.Dir = s.env, s.dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	log := out.String()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("caddy run did not exit within a minute with an unusable data directory; output:\n%s", log)
	case err == nil:
		t.Fatalf("caddy run exited 0 with an unusable data directory; output:\n%s", log)
	case !errors.As(err, &exit):
		t.Fatalf("caddy run: %v", err)
	}
	t.Logf("caddy run exited with status %d", exit.ExitCode())
	if !strings.Contains(log, wantPath) {
		t.Errorf("the error does not name %s; output:\n%s", wantPath, log)
	}
	if stackTrace.MatchString(log) {
		t.Errorf("the output has a Go panic or stack trace:\n%s", log)
	}
	// The last line is the error the operator reads.
	lines := strings.Split(strings.TrimSpace(log), "\n")
	t.Logf("last line: %s", lines[len(lines)-1])
	if last := lines[len(lines)-1]; !strings.Contains(last, "agentgate") || !strings.Contains(last, wantPath) {
		t.Errorf("the final error line should say agentgate cannot use %s; it is: %s", wantPath, last)
	}
}

func TestUnusableDataDir(t *testing.T) {
	bin := caddyBinary(t)

	t.Run("ParentIsAFile", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "not-a-directory")
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(file, "data")
		runMustFail(t, newServer(t, bin, config{DataDir: data}), data, nil)
	})

	// A 0500 data directory. Root writes there all the same, so as root the
	// server runs as the unprivileged user nobody (owner of the directory),
	// when there is one; otherwise the case is skipped.
	t.Run("ReadOnlyDirectory", func(t *testing.T) {
		var cred *syscall.Credential
		if os.Getuid() == 0 {
			cred = nobody(t)
		}
		s := newServer(t, bin, config{})
		dir := filepath.Join(s.dir, "read-only")
		s.writeConfig(config{DataDir: dir})
		if err := os.Mkdir(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o700) }) // so that t.TempDir can remove it
		if cred != nil {
			// nobody must reach the binary and the config, own its XDG
			// directories (under s.dir) and the read-only data directory.
			for _, d := range []string{filepath.Dir(s.bin), filepath.Dir(s.dir), s.dir} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range []string{s.dir, dir} {
				if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(s.cfgPath, 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			probe := filepath.Join(dir, "probe")
			if f, err := os.Create(probe); err == nil {
				f.Close()
				os.Remove(probe)
				t.Skipf("a 0500 directory is writable for this user (uid %d): the case cannot be made here", os.Getuid())
			}
		}
		runMustFail(t, s, dir, cred)
	})
}

// nobody is the credential of the unprivileged user nobody, or skips the test.
func nobody(t *testing.T) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("running as root, which writes into a 0500 directory, and there is no user nobody to run as: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || uid == 0 {
		t.Skipf("running as root and user nobody has unusable ids %s:%s", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

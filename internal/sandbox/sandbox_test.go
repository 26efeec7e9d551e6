package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/testenv"
)

// run runs a bash script in a sandbox of s with dir writable and returns
// its output and exit code.
func run(t *testing.T, s *Sandbox, dir, script string, ro ...string) (string, int, *Cmd) {
	t.Helper()
	c, err := s.Command(Spec{Argv: []string{"/bin/bash", "-c", script}, Dir: dir, Writable: []string{dir}, ReadOnly: ro, Env: s.Env()})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	code := 0
	if err := c.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return out.String(), code, c
}

func enforced(t *testing.T, s *Sandbox) {
	t.Helper()
	if st := s.Status(); st.Mode != "enforced" {
		if os.Getenv("CI") != "" {
			t.Fatalf("the sandbox is %s: %s", st.Mode, st.Reason)
		}
		t.Skipf("the sandbox is %s on this host: %s", st.Mode, st.Reason)
	}
}

func tempDir(t *testing.T) string {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSandboxSecretsUnreachable: the server's environment (through
// /proc), its data directory, files outside the project and a home's
// credentials are out of reach; inside, no capabilities and no_new_privs.
func TestSandboxSecretsUnreachable(t *testing.T) {
	t.Setenv("AGENTGATE_PROBE_SECRET", "probe-secret-value-93")
	base := tempDir(t)
	proj := filepath.Join(base, "proj")
	data := filepath.Join(base, "data") // the server's data directory, bound nowhere
	shared := filepath.Join(base, "shared")
	inShared := filepath.Join(shared, "agentgate") // hidden inside a path bound read-only: covered
	outside := filepath.Join(base, "outside")
	home := filepath.Join(base, "home")
	for _, d := range []string{proj, data, inShared, outside, filepath.Join(home, ".ssh")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, v := range map[string]string{filepath.Join(data, "master.key"): "master-key-value", filepath.Join(inShared, "master.key"): "shared-key-value", filepath.Join(outside, "secret"): "outside-value",
		filepath.Join(home, ".ssh", "id_ed25519"): "ssh-key-value", filepath.Join(proj, "main.go"): "package main"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Config{Hidden: []string{data, inShared}})
	enforced(t, s)
	script := fmt.Sprintf(`cat /proc/%d/environ; for p in /proc/[0-9]*; do cat $p/environ; done; echo; cat %s/master.key %s/master.key %s/secret %s/.ssh/id_ed25519 /etc/shadow; ls /proc | grep -c '^[0-9]'; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status; cat main.go`,
		os.Getpid(), data, inShared, outside, home)
	out, _, _ := run(t, s, proj, script, shared)
	for _, leaked := range []string{"probe-secret-value-93", "master-key-value", "shared-key-value", "outside-value", "ssh-key-value", "root:"} {
		if strings.Contains(out, leaked) {
			t.Fatalf("the sandbox read %q:\n%s", leaked, out)
		}
	}
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "package main"} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
	// Only the sandbox's own processes are in its /proc: bash, its
	// subshell and commands, the helper.
	for _, line := range strings.Split(out, "\n") {
		if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && n > 10 {
			t.Fatalf("/proc lists %d processes:\n%s", n, out)
		}
	}
}

// TestSandboxProtectsAndMasks: .git/hooks and .git/config (nested
// repositories too), opencode.json and .opencode/ are read-only; .env
// and keys are masked; the rest of the project is writable.
func TestSandboxProtectsAndMasks(t *testing.T) {
	proj := tempDir(t)
	for f, v := range map[string]string{".git/config": "[core]\n", ".git/HEAD": "ref: refs/heads/main\n", "vendor/x/.git/config": "[core]\n",
		"opencode.json": "{}", ".opencode/plugin/p.js": "x", ".env": "SECRET=dotenv-value", "tls/server.key": "key-value",
		".env.example": "EXAMPLE=1", "src/a.txt": "a"} {
		p := filepath.Join(proj, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := Default()
	enforced(t, s)
	out, _, _ := run(t, s, proj, `for f in .git/hooks/pre-commit vendor/x/.git/hooks/post-checkout .opencode/plugin/evil.js; do echo evil > $f && echo "WROTE $f"; done
echo '[core] fsmonitor=evil' >> .git/config && echo WROTE config; echo '{"permission":{"bash":"allow"}}' > opencode.json && echo WROTE opencode.json
echo '[core]' >> vendor/x/.git/config && echo WROTE nested-config
cat .env tls/server.key; echo x > .env && echo WROTE .env; cat .env.example; echo b > src/a.txt && echo WROTE src; echo new > new.txt && echo WROTE new
mount -t tmpfs x src 2>&1 || echo MOUNT-REFUSED; umount /proc 2>&1 || echo UMOUNT-REFUSED; unshare -U true 2>&1 || echo UNSHARE-REFUSED`)
	for _, bad := range []string{"WROTE .git", "WROTE vendor", "WROTE .opencode", "WROTE config", "WROTE opencode.json", "WROTE nested-config",
		"dotenv-value", "key-value", "WROTE .env"} {
		if strings.Contains(out, bad) {
			t.Fatalf("%q in:\n%s", bad, out)
		}
	}
	for _, want := range []string{"EXAMPLE=1", "WROTE src", "WROTE new", "MOUNT-REFUSED", "UMOUNT-REFUSED", "UNSHARE-REFUSED"} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
	for f, want := range map[string]string{".git/config": "[core]\n", "opencode.json": "{}", ".env": "SECRET=dotenv-value", "src/a.txt": "b\n"} {
		if b, _ := os.ReadFile(filepath.Join(proj, f)); string(b) != want {
			t.Fatalf("%s holds %q, want %q", f, b, want)
		}
	}
	if _, err := os.Stat(filepath.Join(proj, ".git/hooks/pre-commit")); err == nil {
		t.Fatal("a hook was planted")
	}
}

// TestSandboxNetwork: the host's loopback (and so the server's API) is
// unreachable; the sandbox's own loopback works.
func TestSandboxNetwork(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host-answer") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	s := Default()
	enforced(t, s)
	proj := tempDir(t)
	exe, _ := os.Executable()
	out, _, _ := run(t, s, proj, fmt.Sprintf(`(exec 3<>/dev/tcp/127.0.0.1/%d && echo CONNECTED-HOST) 2>&1; (exec 3<>/dev/tcp/1.1.1.1/443 && echo CONNECTED-OUT) 2>&1
AGENTGATE_SANDBOX_LOOPBACK=1 %s -test.run='^TestLoopbackInside$' -test.v 2>&1 | grep -E 'LOOPBACK|FAIL'`, port, exe), filepath.Dir(exe))
	if strings.Contains(out, "CONNECTED") {
		t.Fatalf("the sandbox reached the host's network:\n%s", out)
	}
	if !strings.Contains(out, "LOOPBACK-OK") {
		t.Fatalf("the sandbox's own loopback does not work:\n%s", out)
	}
}

// TestSandboxSeccomp runs this test binary inside a sandbox
// (TestSeccompInside): the calls the filter refuses answer EPERM, and
// clone3 and io_uring answer ENOSYS.
func TestSandboxSeccomp(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the probe's system call numbers are x86-64's")
	}
	s := Default()
	enforced(t, s)
	exe, _ := os.Executable()
	out, _, _ := run(t, s, tempDir(t), fmt.Sprintf(`AGENTGATE_SANDBOX_SECCOMP=1 %s -test.run='^TestSeccompInside$' -test.v 2>&1 | grep -E '^(CALL|FAIL)'`, exe), filepath.Dir(exe))
	for _, want := range []string{"CALL ptrace operation not permitted", "CALL unshare operation not permitted", "CALL mount operation not permitted",
		"CALL vsock operation not permitted", "CALL bpf operation not permitted", "CALL clone3 function not implemented",
		"CALL io_uring_setup function not implemented"} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
}

// TestSeccompInside runs inside a sandbox (TestSandboxSeccomp) and prints
// what each refused call answered.
func TestSeccompInside(t *testing.T) {
	if os.Getenv("AGENTGATE_SANDBOX_SECCOMP") == "" {
		t.Skip("runs inside a sandbox only")
	}
	try := func(name string, nr, a1, a2, a3 uintptr) {
		_, _, e := syscall.RawSyscall(nr, a1, a2, a3)
		fmt.Println("CALL", name, e.Error())
	}
	try("ptrace", syscall.SYS_PTRACE, syscall.PTRACE_TRACEME, 0, 0)
	try("unshare", syscall.SYS_UNSHARE, syscall.CLONE_NEWUSER, 0, 0)
	try("mount", syscall.SYS_MOUNT, 0, 0, 0)
	try("vsock", syscall.SYS_SOCKET, 40, syscall.SOCK_STREAM, 0)
	try("bpf", 321, 0, 0, 0)
	try("clone3", 435, 0, 0, 0)
	try("io_uring_setup", 425, 0, 0, 0)
}

// TestSandboxForwardsSignals: a signal to the sandbox's first process
// reaches the command.
func TestSandboxForwardsSignals(t *testing.T) {
	s := Default()
	enforced(t, s)
	dir := tempDir(t)
	c, err := s.Command(Spec{Argv: []string{"/bin/bash", "-c", "trap 'echo got-term; exit 3' TERM; echo ready > ready; sleep 100 & wait"},
		Dir: dir, Writable: []string{dir}, Env: s.Env()})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGTERM)
	err = c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(out.String(), "got-term") {
		t.Fatalf("SIGTERM to the sandbox: %v %q", err, out.String())
	}
}

// TestSandboxSignalAtStart: a signal sent the moment Start returns reaches
// the command (killed by it, or its trap), never ending the sandbox's
// first process on its own before it forwards signals.
func TestSandboxSignalAtStart(t *testing.T) {
	s := Default()
	enforced(t, s)
	dir := tempDir(t)
	for i := 0; i < 20; i++ {
		c, err := s.Command(Spec{Argv: []string{"/bin/bash", "-c", "trap 'exit 3' TERM; sleep 100 & wait"},
			Dir: dir, Writable: []string{dir}, Env: s.Env()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		c.Process.Signal(syscall.SIGTERM)
		err = c.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || (ee.ExitCode() != 3 && ee.ExitCode() != 128+int(syscall.SIGTERM)) {
			t.Fatalf("run %d: SIGTERM at start: %v", i, err)
		}
	}
}

// TestLoopbackInside runs inside a sandbox (TestSandboxNetwork): it
// serves and dials on the sandbox's own loopback.
func TestLoopbackInside(t *testing.T) {
	if os.Getenv("AGENTGATE_SANDBOX_LOOPBACK") == "" {
		t.Skip("runs inside a sandbox only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "inside") }))
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("LOOPBACK-OK")
}

// gone waits (bounded) until no host process holds s.
func gone(t *testing.T, s string) {
	t.Helper()
	var left []string
	for i := 0; i < 100; i++ {
		if left = testenv.HostProcesses(s); len(left) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("processes outlived their sandbox: %v", left)
}

// TestSandboxNothingOutlivesTheCall: setsid, a double fork and nohup … &
// end with the call.
func TestSandboxNothingOutlivesTheCall(t *testing.T) {
	s := Default()
	enforced(t, s)
	proj := tempDir(t)
	out, code, _ := run(t, s, proj, `setsid -f sleep 987651; (sleep 987652 &) ; nohup sleep 987653 >/dev/null 2>&1 & bash -c '(setsid sleep 987654 &)'; sleep 0.2; echo started`)
	if code != 0 || !strings.Contains(out, "started") {
		t.Fatalf("exit %d: %s", code, out)
	}
	gone(t, "sleep 98765")
}

// TestSandboxDiesWithTheServer: a server killed with SIGKILL takes its
// sandboxes and everything in them along.
func TestSandboxDiesWithTheServer(t *testing.T) {
	if os.Getenv("AGENTGATE_SANDBOX_SERVER") != "" {
		// The "server": a sandbox whose command leaves daemons behind.
		s := Default()
		proj := os.Getenv("AGENTGATE_SANDBOX_SERVER")
		c, err := s.Command(Spec{Argv: []string{"/bin/bash", "-c", "setsid -f sleep 876541; nohup sleep 876542 >/dev/null 2>&1 & sleep 876543"},
			Dir: proj, Writable: []string{proj}, Env: s.Env()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		fmt.Println("SERVER-READY")
		c.Wait()
		return
	}
	enforced(t, Default())
	exe, _ := os.Executable()
	srv := exec.Command(exe, "-test.run=^TestSandboxDiesWithTheServer$")
	srv.Env = append(os.Environ(), "AGENTGATE_SANDBOX_SERVER="+tempDir(t))
	var out bytes.Buffer
	srv.Stdout = &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500 && len(testenv.HostProcesses("sleep 876543")) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if len(testenv.HostProcesses("sleep 87654")) < 3 {
		srv.Process.Kill()
		t.Fatalf("the sandboxed processes did not start: %v\n%s", testenv.HostProcesses("sleep 87654"), out.String())
	}
	srv.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	gone(t, "sleep 87654")
}

// TestSandboxLimits: the memory and process limits end the run, and say
// which limit it hit, where the host has the controllers.
func TestSandboxLimits(t *testing.T) {
	s := New(Config{Limits: Limits{Memory: 64 << 20, Processes: 32}})
	enforced(t, s)
	st := s.Status()
	proj := tempDir(t)
	if strings.HasPrefix(st.Limits["memory"], "not enforced") {
		t.Logf("memory: %s", st.Limits["memory"])
	} else {
		out, code, c := run(t, s, proj, `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo survived ${#x}`)
		if c.LimitHit() != "memory" || strings.Contains(out, "survived") {
			t.Fatalf("memory: hit %q, exit %d, %s", c.LimitHit(), code, out)
		}
	}
	if strings.HasPrefix(st.Limits["processes"], "not enforced") {
		t.Logf("processes: %s", st.Limits["processes"])
	} else {
		// bash retries a fork that fails, for a while: timeout bounds it.
		out, _, c := run(t, s, proj, `timeout 1 bash -c 'for i in $(seq 100); do sleep 31.4159 >/dev/null 2>&1 & done; wait'; echo done`)
		if c.LimitHit() != "processes" {
			t.Fatalf("processes: hit %q: %s", c.LimitHit(), out)
		}
	}
	gone(t, "sleep 31.4159")
}

// TestSandboxRefusals: a host without namespaces (simulated) refuses,
// `off` says so, and / or a home directory or one holding the server's
// data is no project.
func TestSandboxRefusals(t *testing.T) {
	s := New(Config{Unavailable: "user namespaces are disabled (simulated)"})
	if _, err := s.Command(Spec{Argv: []string{"true"}, Dir: "/"}); !errors.Is(err, ErrUnavailable) || s.Status().Mode != "unavailable" {
		t.Fatalf("unavailable: %v %+v", err, s.Status())
	}
	off := New(Config{Off: true})
	if st := off.Status(); st.Mode != "off" || st.Reason == "" {
		t.Fatalf("off: %+v", st)
	}
	c, err := off.Command(Spec{Argv: []string{"/bin/true"}, Dir: "/", Env: off.Env()})
	if err != nil || c.Start() != nil || c.Wait() != nil {
		t.Fatalf("off runs plainly: %v", err)
	}
	data := tempDir(t)
	for _, dir := range []string{"/", "/root", filepath.Dir(data)} {
		if err := CheckRoot(dir, []string{data}); !errors.Is(err, ErrRefusedRoot) {
			t.Fatalf("%s: %v", dir, err)
		}
	}
	if err := CheckRoot(tempDir(t), []string{data}); err != nil {
		t.Fatal(err)
	}
	if _, err := Default().Command(Spec{Argv: []string{"true"}, Dir: "/", Writable: []string{"/"}}); !errors.Is(err, ErrRefusedRoot) {
		t.Fatalf("a project at /: %v", err)
	}
}

// TestSandboxEnvIsAnAllowList: nothing of the server's environment passes
// but PATH, the locale, TERM and what the operator names.
func TestSandboxEnvIsAnAllowList(t *testing.T) {
	t.Setenv("BEARER", "x")
	t.Setenv("GOFLAGS", "-mod=mod")
	env := New(Config{Env: []string{"GOFLAGS", "GOPROXY=off"}}).Env("PLUGIN_VAR=1", "PATH=/evil")
	joined := strings.Join(env, "\n")
	if strings.Contains(joined, "BEARER") || strings.Contains(joined, "/evil") || !strings.Contains(joined, "GOFLAGS=-mod=mod") ||
		!strings.Contains(joined, "GOPROXY=off") || !strings.Contains(joined, "PLUGIN_VAR=1") || !strings.Contains(joined, "HOME="+Home) {
		t.Fatalf("env: %v", env)
	}
}

// BenchmarkSandboxedCall and BenchmarkPlainCall time the same command
// (bash -c true) in a sandbox and plainly: their difference is what the
// sandbox adds to a bash call.
func BenchmarkSandboxedCall(b *testing.B) {
	s := Default()
	if s.Status().Mode != "enforced" {
		b.Skip(s.Status().Reason)
	}
	dir := b.TempDir()
	for b.Loop() {
		c, err := s.Command(Spec{Argv: []string{"/bin/bash", "-c", "true"}, Dir: dir, Writable: []string{dir}, Env: s.Env()})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		c.Wait()
	}
}

func BenchmarkPlainCall(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		c := exec.Command("/bin/bash", "-c", "true")
		c.Dir = dir
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSandboxAsAnUnprivilegedServer: a server that is not root (here uid
// 65534) makes its sandboxes through the first helper stage (a server
// that is non-dumpable cannot write its child's user-namespace map), with
// the same confinement; and, non-dumpable, its environment is unreadable
// to the same user's other processes.
func TestSandboxAsAnUnprivilegedServer(t *testing.T) {
	if proj := os.Getenv("AGENTGATE_SANDBOX_NONROOT"); proj != "" {
		s := Default()
		if st := s.Status(); st.Mode != "enforced" {
			fmt.Println("NOT-ENFORCED", st.Reason)
			return
		}
		out, code, _ := run(t, s, proj, `id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; echo written > f && echo WROTE; ls /proc | grep -c '^[0-9]'`)
		fmt.Printf("EXIT %d\n%s", code, out)
		// The server is non-dumpable: a process of the same user outside
		// any sandbox cannot read its environment either.
		b, err := exec.Command("cat", fmt.Sprintf("/proc/%d/environ", os.Getpid())).CombinedOutput()
		fmt.Printf("ENVIRON %v %s\n", err, b)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to become another user")
	}
	enforced(t, Default())
	base, err := os.MkdirTemp("", "agentgate-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	proj := filepath.Join(base, "proj")
	if err := os.Mkdir(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	bin := filepath.Join(base, "sandbox.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{base, proj} {
		os.Chmod(p, 0o755)
	}
	os.Chown(proj, 65534, 65534)
	cmd := exec.Command(bin, "-test.run=^TestSandboxAsAnUnprivilegedServer$", "-test.v")
	cmd.Dir = base
	cmd.Env = []string{"AGENTGATE_SANDBOX_NONROOT=" + proj, "PATH=" + os.Getenv("PATH"), "HOME=" + base}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	t.Logf("as uid 65534:\n%s", s)
	if strings.Contains(s, "NOT-ENFORCED") {
		t.Fatalf("an unprivileged server cannot make a sandbox here:\n%s", s)
	}
	if strings.Contains(s, "AGENTGATE_SANDBOX_NONROOT=") || !strings.Contains(s, "Permission denied") {
		t.Fatalf("a same-user process read the server's environment:\n%s", s)
	}
	for _, want := range []string{"EXIT 0", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "WROTE"} {
		if !strings.Contains(s, want) {
			t.Fatalf("want %q in:\n%s", want, s)
		}
	}
	if fi, err := os.Stat(filepath.Join(proj, "f")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Fatalf("the file the sandbox wrote: %v", err)
	}
}

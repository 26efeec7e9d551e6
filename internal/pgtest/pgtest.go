// Package pgtest runs a throwaway PostgreSQL server for tests.
//
// Shared starts one cluster per test binary the first time a test asks for
// it: initdb in a temporary directory, postgres listening on 127.0.0.1 only
// on a free port (its Unix socket inside the directory, fsync off). A
// package that uses it calls Run from its TestMain, which stops the server
// and removes the directory when the tests end; a watchdog process does the
// same if the test binary dies without getting there (a timeout, a kill).
//
// initdb and postgres refuse to run as root: as root, they run as the
// `postgres` system user, in a directory owned by it.
//
// With AGENTGATE_TEST_POSTGRES_DSN set, that server is used instead of
// starting one (it cannot be stopped, so fault tests skip). When no
// PostgreSQL is available the tests that need it skip, unless CI is set:
// then they fail, so that CI really runs them.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the variable that points the tests at an existing server.
const EnvDSN = "AGENTGATE_TEST_POSTGRES_DSN"

// Server is a PostgreSQL server for tests.
type Server struct {
	// DSN connects to the server's maintenance database as a superuser.
	DSN string

	external bool
	bin      string // directory of initdb, postgres
	base     string // temporary directory: data/, sock/, postgres.log
	port     int
	cred     *syscall.Credential // run as this user (when we are root)

	mu       sync.Mutex
	proc     *exec.Cmd
	exited   chan struct{}
	watchdog *exec.Cmd
	wdPipe   *os.File
	closed   bool
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared returns the test binary's server, starting it on first use. It
// skips the test when no PostgreSQL can be found or started, and fails it
// instead when the environment variable CI is set.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		if dsn := os.Getenv(EnvDSN); dsn != "" {
			shared, sharedErr = External(dsn)
			return
		}
		shared, sharedErr = Start()
	})
	if sharedErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("pgtest: PostgreSQL is required in CI: %v", sharedErr)
		}
		t.Skipf("pgtest: no PostgreSQL for this test (%v); install the postgresql package or set %s", sharedErr, EnvDSN)
	}
	return shared
}

// Run runs a package's tests and then stops the shared server, if one was
// started. Call it from TestMain: os.Exit(pgtest.Run(m)).
func Run(m *testing.M) int {
	code := m.Run()
	Teardown()
	return code
}

// Teardown stops the shared server, if one was started, and removes its
// directory. Run calls it.
func Teardown() {
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: closing the server: %v\n", err)
		}
	}
}

// External uses an existing server; Stop and Start are not available.
func External(dsn string) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", EnvDSN, err)
	}
	conn.Close(ctx)
	return &Server{DSN: dsn, external: true}, nil
}

// BinDir finds the directory of initdb and postgres: PATH first, then the
// newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("initdb not found (not on PATH, not in /usr/lib/postgresql/*/bin)")
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start creates a new cluster in a temporary directory and starts it.
func Start() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	parent := "" // os.TempDir()
	if s.cred != nil {
		// The postgres user must reach the directory: $TMPDIR may be
		// under a home it cannot enter.
		parent = "/tmp"
	}
	if s.base, err = os.MkdirTemp(parent, "agentgate-pgtest-"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	for _, d := range []string{s.base, filepath.Join(s.base, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if s.cred != nil {
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	if err := s.startWatchdog(); err != nil {
		return nil, fmt.Errorf("starting the watchdog: %w", err)
	}
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	s.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	if err := s.Start(); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.base, "data") }

// command prepares a PostgreSQL program run as the server's user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.base
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a ^C in the terminal goes to go test, not postgres
	if s.cred != nil {
		cmd.SysProcAttr.Credential = s.cred
		cmd.Env = append(cmd.Env, "HOME="+s.base, "USER=postgres", "LOGNAME=postgres")
	}
	return cmd
}

// startWatchdog starts a shell that waits for this process to end (its
// stdin, a pipe whose write end only this process holds, reaches EOF),
// then stops postgres at once and removes the directory. Close does the
// same in order; the watchdog then finds nothing left to do.
func (s *Server) startWatchdog() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	pidFile := filepath.Join(s.dataDir(), "postmaster.pid")
	script := `read _ignored
if [ -f "$1" ]; then
	pid=$(head -n 1 "$1")
	kill -QUIT "$pid" 2>/dev/null
	i=0
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
	kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$2"
`
	cmd := exec.Command("/bin/sh", "-c", script, "pgtest-watchdog", pidFile, s.base)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return err
	}
	r.Close()
	s.watchdog, s.wdPipe = cmd, w
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts the server on its data directory and port (again, after
// Stop) and waits until it accepts connections.
func (s *Server) Start() error {
	if s.external {
		return errors.New("pgtest: an external server cannot be started")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pgtest: server is closed")
	}
	if s.proc != nil {
		return errors.New("pgtest: server is already running")
	}
	logf, err := os.OpenFile(filepath.Join(s.base, "postgres.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := s.command(filepath.Join(s.bin, "postgres"), "-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-k", filepath.Join(s.base, "sock"),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
		"-c", "shared_buffers=32MB",
		"-c", "max_pred_locks_per_transaction=256",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.proc, s.exited = cmd, exited

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.DSN)
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-exited:
			s.proc = nil
			return fmt.Errorf("postgres exited at start: %v\n%s", err, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("postgres did not accept connections within 30s: %v\n%s", err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.base, "postgres.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Stop shuts the server down (fast shutdown: sessions are disconnected),
// keeping its data for Start.
func (s *Server) Stop() error {
	if s.external {
		return errors.New("pgtest: an external server cannot be stopped")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.proc == nil {
		return nil
	}
	s.proc.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.proc.Process.Kill()
		<-s.exited
	}
	s.proc = nil
	return nil
}

// Restart stops the server and starts it again on the same data and port.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// CanStop reports whether Stop and Start work (not on an external server).
func (s *Server) CanStop() bool { return !s.external }

// Close stops the server and removes its directory. It is safe to call
// more than once.
func (s *Server) Close() error {
	if s.external {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stopLocked()
	if s.base != "" {
		if rmErr := os.RemoveAll(s.base); rmErr != nil && err == nil {
			err = rmErr
		}
	}
	if s.wdPipe != nil {
		s.wdPipe.Close()
		s.watchdog.Wait()
	}
	return err
}

// Dir is the server's temporary directory ("" for an external server).
func (s *Server) Dir() string { return s.base }

var createMu sync.Mutex

// NewDatabase creates an empty database for one test and returns its DSN.
// The database is dropped when the test ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "agentgate_test_" + hex.EncodeToString(b[:])
	if err := s.exec(fmt.Sprintf("CREATE DATABASE %s", name)); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Logf("pgtest: dropping %s: %v", name, err)
		}
	})
	dsn, err := WithDatabase(s.DSN, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// exec runs one statement on the maintenance database.
func (s *Server) exec(sql string) error {
	createMu.Lock()
	defer createMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// WithDatabase returns dsn (a URL or key=value DSN) pointing at database name.
func WithDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil
}

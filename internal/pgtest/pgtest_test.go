package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	if os.Getenv("PGTEST_CHILD") != "" {
		child()
		return
	}
	os.Exit(Run(m))
}

// child starts the shared server in a test binary run by TestNoLeftovers,
// reports its directory and postmaster pid, then ends as told.
func child() {
	var t fakeT
	s := Shared(&t)
	if t.failed {
		os.Exit(3)
	}
	pid, err := postmasterPID(s.Dir())
	if err != nil {
		os.Exit(4)
	}
	os.Stdout.WriteString(s.Dir() + "\n" + strconv.Itoa(pid) + "\n")
	switch os.Getenv("PGTEST_CHILD") {
	case "run":
		Teardown()
		os.Exit(0)
	case "kill":
		time.Sleep(time.Hour) // the parent kills us
	}
}

type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Fatalf(string, ...any) { f.failed = true }
func (f *fakeT) Skipf(string, ...any)  { f.failed = true }

func postmasterPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func query(t *testing.T, dsn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var out string
	if err := conn.QueryRow(ctx, sql).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDatabaseStopRestart(t *testing.T) {
	s := Shared(t)
	a, b := s.NewDatabase(t), s.NewDatabase(t)
	if a == b {
		t.Fatal("two databases with one DSN")
	}
	if got := query(t, a, "SELECT current_database()"); !strings.Contains(a, got) {
		t.Fatalf("DSN %s connects to %s", a, got)
	}
	if !s.CanStop() {
		t.Skip("external server")
	}
	if got := query(t, a, "SHOW listen_addresses"); got != "127.0.0.1" {
		t.Fatalf("listen_addresses = %q", got)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if c, err := pgx.Connect(cctx, a); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
	cancel()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got := query(t, a, "SELECT x::text FROM kept"); got != "42" {
		t.Fatalf("after restart: %q", got)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	query(t, b, "SELECT 'ok'")
}

// No postgres process and no directory remain after a test binary ends,
// whether it ends normally (Run tears down) or is killed (the watchdog does).
func TestNoLeftovers(t *testing.T) {
	if os.Getenv(EnvDSN) != "" {
		t.Skip("external server")
	}
	Shared(t) // skips (or fails in CI) when there is no PostgreSQL
	for _, mode := range []string{"run", "kill"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "PGTEST_CHILD="+mode)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			var got string
			for !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") < 2 {
				n, err := out.Read(buf)
				if err != nil {
					t.Fatalf("child output %q: %v", got, err)
				}
				got += string(buf[:n])
			}
			lines := strings.Fields(got)
			dir := lines[0]
			pid, _ := strconv.Atoi(lines[1])
			if !alive(pid) {
				t.Fatalf("postmaster %d of the child is not running", pid)
			}
			if mode == "kill" {
				cmd.Process.Kill()
			}
			cmd.Wait()
			deadline := time.Now().Add(20 * time.Second)
			for alive(pid) || exists(dir) {
				if time.Now().After(deadline) {
					t.Fatalf("after the child ended: postmaster alive %v, directory %s exists %v", alive(pid), dir, exists(dir))
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

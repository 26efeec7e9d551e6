package snapshot

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

func newManager(t *testing.T, mod func(*Config)) *Manager {
	t.Helper()
	cfg := Config{Dir: filepath.Join(t.TempDir(), "snapshots")}
	if mod != nil {
		mod(&cfg)
	}
	m := New(cfg)
	if !m.Enabled() {
		t.Fatalf("snapshots unavailable: %+v", m.Status())
	}
	t.Cleanup(m.Wait)
	return m
}

func write(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func track(t *testing.T, m *Manager, root string) Tree {
	t.Helper()
	tr, err := m.Track(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// userGit runs git for a test's own repository, without the machine's
// configuration.
func userGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+t.TempDir(),
		"GIT_AUTHOR_NAME=u", "GIT_AUTHOR_EMAIL=u@example.com", "GIT_COMMITTER_NAME=u", "GIT_COMMITTER_EMAIL=u@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// treeDigest is a digest of every file under dir: names, modes and bytes.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d\n", strings.TrimPrefix(p, dir), fi.Mode(), fi.ModTime().UnixNano())
		if os.Getenv("SNAP_DEBUG") != "" {
			fmt.Println(strings.TrimPrefix(p, dir), fi.Mode(), fi.ModTime().UnixNano())
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestTrackChangedRestore(t *testing.T) {
	m := newManager(t, nil)
	root := t.TempDir()
	write(t, root, "a.txt", "one\n")
	write(t, root, "dir/b.txt", "bee\n")
	write(t, root, "weird [*?] name.txt", "glob\n")
	start := track(t, m, root)
	if again := track(t, m, root); again.Hash != start.Hash {
		t.Fatalf("unchanged project, new tree: %s vs %s", again.Hash, start.Hash)
	}
	write(t, root, "a.txt", "two\n")
	write(t, root, "new/c.txt", "sea\n")
	os.Remove(filepath.Join(root, "dir", "b.txt"))
	write(t, root, "weird [*?] name.txt", "glob 2\n")
	end := track(t, m, root)
	changed, err := m.Changed(context.Background(), root, start.Hash, end.Hash)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(changed)
	if want := []string{"a.txt", "dir/b.txt", "new/c.txt", "weird [*?] name.txt"}; !slices.Equal(changed, want) {
		t.Fatalf("changed %q, want %q", changed, want)
	}
	before, err := m.Lookup(context.Background(), root, start.Hash, changed)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := before["new/c.txt"]; ok || before["a.txt"].Absent() || before["weird [*?] name.txt"].Absent() {
		t.Fatalf("lookup in the first tree: %+v", before)
	}
	disk, err := m.Disk(root, changed)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := m.Lookup(context.Background(), root, end.Hash, changed)
	for _, f := range changed {
		if disk[f].Entry != after[f] {
			t.Fatalf("%s: on disk %+v, in the last tree %+v", f, disk[f].Entry, after[f])
		}
	}
	var changes []Change
	for _, f := range changed {
		changes = append(changes, Change{File: f, Tree: start.Hash, Entry: before[f]})
	}
	if err := m.Apply(context.Background(), root, changes); err != nil {
		t.Fatal(err)
	}
	if read(t, root, "a.txt") != "one\n" || read(t, root, "dir/b.txt") != "bee\n" || read(t, root, "weird [*?] name.txt") != "glob\n" {
		t.Fatal("files not restored")
	}
	if _, err := os.Stat(filepath.Join(root, "new", "c.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a file the step added is still there: %v", err)
	}
	if back := track(t, m, root); back.Hash != start.Hash {
		t.Fatalf("restored project's tree %s, the first was %s", back.Hash, start.Hash)
	}
}

func TestBytesAreKeptWhateverTheAttributes(t *testing.T) {
	m := newManager(t, nil)
	root := t.TempDir()
	write(t, root, ".gitattributes", "* text eol=crlf filter=evil ident\n")
	write(t, root, "unix.txt", "line one\nline two $Id$\n")
	write(t, root, "dos.txt", "a\r\nb\r\n")
	start := track(t, m, root)
	write(t, root, "unix.txt", "changed\n")
	write(t, root, "dos.txt", "changed\n")
	track(t, m, root)
	before, _ := m.Lookup(context.Background(), root, start.Hash, []string{"unix.txt", "dos.txt"})
	err := m.Apply(context.Background(), root, []Change{{"unix.txt", start.Hash, before["unix.txt"]}, {"dos.txt", start.Hash, before["dos.txt"]}})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, "unix.txt"); got != "line one\nline two $Id$\n" {
		t.Fatalf("unix.txt restored as %q", got)
	}
	if got := read(t, root, "dos.txt"); got != "a\r\nb\r\n" {
		t.Fatalf("dos.txt restored as %q", got)
	}
}

func TestLeftOut(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxFileSize = 1000 })
	root := t.TempDir()
	write(t, root, ".gitignore", "build/\n*.log\n")
	write(t, root, "build/out.bin", "built")
	write(t, root, "x.log", "log")
	write(t, root, "src/main.go", "package main\n")
	write(t, root, ".env", "SECRET=1\n")
	write(t, root, "config/.env.production", "SECRET=2\n")
	write(t, root, ".env.example", "SECRET=\n")
	write(t, root, ".ssh/id_ed25519", "key")
	write(t, root, "big.dat", strings.Repeat("x", 2000))
	write(t, root, "nested/file.txt", "n")
	userGit(t, filepath.Join(root, "nested"), "init", "-q")
	tr := track(t, m, root)
	got := map[string]string{}
	for _, s := range tr.Skipped {
		got[s.File] = s.Reason
	}
	want := map[string]string{".env": SkipSensitive, "config/.env.production": SkipSensitive, ".ssh": SkipSensitive,
		"big.dat": SkipTooLarge, "nested": SkipNested}
	for f, r := range want {
		if got[f] != r {
			t.Errorf("%s: skipped as %q, want %q (all: %v)", f, got[f], r, got)
		}
	}
	if tr.Incomplete != "" {
		t.Errorf("incomplete: %s", tr.Incomplete)
	}
	in, _ := m.Lookup(context.Background(), root, tr.Hash, []string{"src/main.go", ".env.example", "build/out.bin", "x.log", ".env", "big.dat"})
	for _, f := range []string{"src/main.go", ".env.example"} {
		if in[f].Absent() {
			t.Errorf("%s is not in the snapshot", f)
		}
	}
	for _, f := range []string{"build/out.bin", "x.log", ".env", "big.dat"} {
		if !in[f].Absent() {
			t.Errorf("%s is in the snapshot", f)
		}
	}
	// A tracked file that grows past the limit leaves the snapshot.
	write(t, root, "src/main.go", strings.Repeat("y", 2000))
	tr2 := track(t, m, root)
	in, _ = m.Lookup(context.Background(), root, tr2.Hash, []string{"src/main.go"})
	if !in["src/main.go"].Absent() {
		t.Error("a file over the limit kept its old content in the snapshot")
	}
	d, _ := m.Disk(root, []string{"src/main.go", ".env", "gone"})
	if d["src/main.go"].Reason != SkipTooLarge || d[".env"].Reason != SkipSensitive || !d["gone"].Absent() {
		t.Errorf("disk: %+v", d)
	}
}

func TestFileCapAndQuota(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxFiles = 3 })
	root := t.TempDir()
	for i := 0; i < 5; i++ {
		write(t, root, fmt.Sprintf("f%d", i), "x")
	}
	tr := track(t, m, root)
	if tr.Incomplete == "" || len(tr.Skipped) != 2 || tr.Skipped[0].Reason != SkipFileCap {
		t.Fatalf("file cap: %+v", tr)
	}
	q := newManager(t, func(c *Config) { c.Quota = 1 })
	tr = track(t, q, root)
	if tr.Incomplete == "" || len(tr.Skipped) != 4 || tr.Skipped[0].Reason != SkipQuota {
		t.Fatalf("quota: %+v", tr)
	}
}

func TestGitProjectUntouched(t *testing.T) {
	m := newManager(t, nil)
	root := t.TempDir()
	write(t, root, "a.txt", "one\n")
	write(t, root, "b.txt", "bee\n")
	write(t, root, ".env", "TOKEN=committed\n")
	write(t, root, "ignored.txt", "mine\n")
	userGit(t, root, "init", "-q")
	os.WriteFile(filepath.Join(root, ".git", "info", "exclude"), []byte("ignored.txt\n"), 0o644)
	userGit(t, root, "add", "a.txt", "b.txt", ".env")
	userGit(t, root, "commit", "-qm", "first")
	write(t, root, "a.txt", "one, changed before the session\n")
	userGit(t, root, "add", "a.txt") // staged in the user's index
	write(t, root, "c.txt", "untracked\n")
	// Hooks and an fsmonitor that would leave a mark if git ran them.
	mark := filepath.Join(t.TempDir(), "ran")
	hook := "#!/bin/sh\ntouch " + mark + "\n"
	for _, h := range []string{"post-checkout", "post-index-change", "pre-commit", "reference-transaction"} {
		os.WriteFile(filepath.Join(root, ".git", "hooks", h), []byte(hook), 0o755)
	}
	fsmon := filepath.Join(t.TempDir(), "fsmon.sh")
	os.WriteFile(fsmon, []byte(hook), 0o755)
	userGit(t, root, "config", "core.fsmonitor", fsmon)
	userGit(t, root, "config", "core.hooksPath", filepath.Join(root, ".git", "hooks"))
	before := treeDigest(t, filepath.Join(root, ".git"))

	start := track(t, m, root)
	if packs, _ := filepath.Glob(filepath.Join(m.cfg.Dir, Key(root), "objects", "pack", "*.pack")); len(packs) != 1 {
		t.Errorf("the first snapshot did not start from the repository's commit: packs %q", packs)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.Dir, Key(root), "objects", "info", "alternates")); err == nil {
		t.Error("the snapshot directory still borrows the repository's objects")
	}
	in, _ := m.Lookup(context.Background(), root, start.Hash, []string{"a.txt", "b.txt", "c.txt", ".env", "ignored.txt"})
	if in["a.txt"].Absent() || in["b.txt"].Absent() || in["c.txt"].Absent() || !in[".env"].Absent() || !in["ignored.txt"].Absent() {
		t.Fatalf("first snapshot of a git project: %+v", in)
	}
	if d, _ := m.Disk(root, []string{"a.txt"}); d["a.txt"].Entry != in["a.txt"] {
		t.Fatal("the snapshot holds the committed a.txt, not the one on disk")
	}
	write(t, root, "b.txt", "bee 2\n")
	os.Remove(filepath.Join(root, "c.txt"))
	end := track(t, m, root)
	changed, _ := m.Changed(context.Background(), root, start.Hash, end.Hash)
	sort.Strings(changed)
	if !slices.Equal(changed, []string{"b.txt", "c.txt"}) {
		t.Fatalf("changed: %q", changed)
	}
	prev, _ := m.Lookup(context.Background(), root, start.Hash, changed)
	if err := m.Apply(context.Background(), root, []Change{{"b.txt", start.Hash, prev["b.txt"]}, {"c.txt", start.Hash, prev["c.txt"]}}); err != nil {
		t.Fatal(err)
	}
	if read(t, root, "b.txt") != "bee\n" || read(t, root, "c.txt") != "untracked\n" {
		t.Fatal("not restored")
	}
	if after := treeDigest(t, filepath.Join(root, ".git")); after != before {
		t.Fatal("the user's .git changed")
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a hook or the user's fsmonitor ran")
	}
	userGit(t, root, "config", "--unset", "core.fsmonitor")
	if st := userGit(t, root, "status", "--porcelain"); !strings.Contains(st, "M  a.txt") {
		t.Fatalf("the user's index lost its staged change: %q", st)
	}
}

func TestFailureIsAnError(t *testing.T) {
	fail := false
	m := newManager(t, func(c *Config) {
		c.Exec = func(ctx context.Context, git string, cmd Cmd) ([]byte, error) {
			if fail && slices.Contains(cmd.Args, "update-index") {
				return nil, errors.New("git update-index: exit status 128: fatal: unable to write new index file: No space left on device")
			}
			return RealExec(ctx, git, cmd)
		}
	})
	root := t.TempDir()
	write(t, root, "a.txt", "one\n")
	first := track(t, m, root)
	fail = true
	write(t, root, "a.txt", "two\n")
	if _, err := m.Track(context.Background(), root); err == nil || !strings.Contains(err.Error(), "No space left") {
		t.Fatalf("track on a full disk: %v", err)
	}
	fail = false
	next := track(t, m, root)
	if next.Hash == first.Hash {
		t.Fatal("the snapshot after the failure missed the change")
	}
}

func TestUnavailable(t *testing.T) {
	m := New(Config{Dir: t.TempDir(), Git: "no-such-git-here"})
	if m.Enabled() || m.Status().Mode != "unavailable" || !strings.Contains(m.Status().Reason, "git is not installed") {
		t.Fatalf("status: %+v", m.Status())
	}
	if _, err := m.Track(context.Background(), t.TempDir()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("track: %v", err)
	}
	if off := New(Config{Dir: t.TempDir(), Off: true}); off.Status().Mode != "off" {
		t.Fatalf("off: %+v", off.Status())
	}
}

func TestCollect(t *testing.T) {
	var keep []string
	clk := clock.NewFake(time.Now())
	m := newManager(t, func(c *Config) {
		c.Clock = clk
		c.Keep = func(context.Context, string) ([]string, error) { return keep, nil }
	})
	root := t.TempDir()
	write(t, root, "a.txt", "one\n")
	first := track(t, m, root)
	write(t, root, "a.txt", "two\n")
	second := track(t, m, root)
	write(t, root, "a.txt", "three\n")
	track(t, m, root)
	keep = []string{first.Hash}
	clk.Advance(48 * time.Hour)
	if err := m.Collect(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	p, _ := m.project(root)
	// Collect's prune uses the wall clock: objects written just now stay;
	// what matters is that kept trees are packed and readable.
	if _, err := p.git(context.Background(), nil, "cat-file", "-e", first.Hash); err != nil {
		t.Fatalf("a kept tree is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.dir, "objects", "pack")); err != nil {
		t.Fatal(err)
	}
	_ = second
	// No session uses the project: its directory goes once not used lately.
	keep = nil
	os.Chtimes(filepath.Join(p.dir, "index"), clk.Now().Add(-72*time.Hour), clk.Now().Add(-72*time.Hour))
	os.Chtimes(filepath.Join(p.dir, "HEAD"), clk.Now().Add(-72*time.Hour), clk.Now().Add(-72*time.Hour))
	if err := m.Collect(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p.dir, "HEAD")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the unused snapshot directory is still there: %v", err)
	}
	// It is made again on the next use.
	if tr := track(t, m, root); tr.Hash == "" {
		t.Fatal("no tree")
	}
}

// A watched project's snapshots ask git only about the paths changed
// since the last one: each must still be the tree a snapshot of every
// file gives.
func TestWatchedSnapshotsMatchFullOnes(t *testing.T) {
	if !watchSupported {
		t.Skip("no file watching here")
	}
	m := newManager(t, nil)
	root := t.TempDir()
	write(t, root, ".gitignore", "node_modules/\n*.log\n")
	write(t, root, "a.txt", "a\n")
	write(t, root, "dir/b.txt", "b\n")
	write(t, root, "dir/sub/c.txt", "c\n")
	write(t, root, "node_modules/pkg/index.js", "x")
	track(t, m, root)
	p, _ := m.project(root)
	if p.watch == nil {
		t.Fatalf("no watcher: %s", p.noWatch)
	}
	full := func() string {
		t.Helper()
		f := New(Config{Dir: filepath.Join(t.TempDir(), "full")})
		defer f.Close()
		return track(t, f, root).Hash
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"nothing", func() {}},
		{"edit", func() { write(t, root, "a.txt", "a2\n") }},
		{"new file in a new directory tree", func() { write(t, root, "new/deep/er/d.txt", "d\n") }},
		{"delete", func() { os.Remove(filepath.Join(root, "dir", "b.txt")) }},
		{"rename a directory", func() { os.Rename(filepath.Join(root, "dir"), filepath.Join(root, "moved")) }},
		{"edit in the renamed directory", func() { write(t, root, "moved/sub/c.txt", "c2\n") }},
		{"ignored files", func() { write(t, root, "node_modules/pkg/index.js", "y"); write(t, root, "x.log", "log") }},
		{"new ignored directory", func() { write(t, root, "node_modules/other/a.js", "z") }},
		{".gitignore changed", func() { write(t, root, ".gitignore", "*.log\n") }},
		{"edit under the formerly ignored directory", func() { write(t, root, "node_modules/pkg/index.js", "w") }},
		{"mode", func() { os.Chmod(filepath.Join(root, "a.txt"), 0o755) }},
		{"symlink", func() { os.Symlink("a.txt", filepath.Join(root, "link")) }},
		{"remove a directory tree", func() { os.RemoveAll(filepath.Join(root, "new")) }},
		{"a file becomes a directory", func() { os.Remove(filepath.Join(root, "a.txt")); write(t, root, "a.txt/inner", "i\n") }},
	}
	for _, s := range steps {
		s.do()
		if got, want := track(t, m, root).Hash, full(); got != want {
			t.Fatalf("after %s: watched snapshot %s, full snapshot %s", s.name, got, want)
		}
	}
	// An overflowing event queue makes the next snapshot read everything.
	for i := 0; i < 20000; i++ {
		os.Chtimes(filepath.Join(root, fmt.Sprintf("f%d", i%2)), time.Now(), time.Now())
		if i < 2 {
			write(t, root, fmt.Sprintf("f%d", i), "f")
		}
	}
	write(t, root, "moved/sub/c.txt", "after the flood\n")
	if got, want := track(t, m, root).Hash, full(); got != want {
		t.Fatalf("after an overflow: watched snapshot %s, full snapshot %s", got, want)
	}
}

package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentgate/agentgate/internal/instance/snapshot"
)

// runSnapshotBench measures what file snapshots add to the agent's
// steps, on a generated project of `files` files: the first snapshot
// (of a plain directory, and of a git repository, which starts from its
// commit), then `steps` steps as the agent loop takes them — a snapshot
// before the step's tools, the tools' change (not timed), a snapshot
// after and the list of changed files — and a revert's file work. It
// writes bench/results/<stamp>-snapshot.md.
func runSnapshotBench(ctx context.Context, out, stamp string, files, steps int) (string, error) {
	work, err := os.MkdirTemp("", "agentgate-snapbench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	var md strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	gitv, _ := exec.Command("git", "--version").Output()
	fmt.Fprintf(&md, "# File snapshots: the cost per step, %s\n\n", time.Now().Format("2006-01-02"))
	fmt.Fprintf(&md, "`go run ./bench -snapshot`: a generated project of %d files in %d directories (Go-like text files of 20 to 200 lines), "+
		"the snapshot calls the agent loop makes around a step's tools (`internal/instance/loop/filesnap.go`: `Track` before the calls, "+
		"`Track` and `Changed` after) timed around an edit that is not timed, %d steps per case. %s, %d CPUs, load average at the start: %s. "+
		"Milliseconds.\n\n", files, files/10, steps, strings.TrimSpace(string(gitv)), runtime.NumCPU(), strings.TrimSpace(string(load)))

	type result struct {
		name                 string
		first                time.Duration
		p50, p95, max, noop  time.Duration
		cpu50                time.Duration
		revert               time.Duration
		objects, objectFiles int64
	}
	var results []result
	for _, kind := range []string{"plain directory", "git repository"} {
		proj := filepath.Join(work, strings.ReplaceAll(kind, " ", "-"))
		if err := generateProject(proj, files); err != nil {
			return "", err
		}
		if kind == "git repository" {
			// Committed and packed, as a cloned repository is.
			for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "gc.auto=0", "commit", "-qm", "initial"}, {"gc", "-q"}} {
				cmd := exec.CommandContext(ctx, "git", args...)
				cmd.Dir = proj
				cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+work,
					"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com")
				if b, err := cmd.CombinedOutput(); err != nil {
					return "", fmt.Errorf("git %v: %v %s", args, err, b)
				}
			}
		}
		m := snapshot.New(snapshot.Config{Dir: filepath.Join(work, "snapshots-"+strings.ReplaceAll(kind, " ", "-"))})
		if !m.Enabled() {
			return "", fmt.Errorf("snapshots unavailable: %s", m.Status().Reason)
		}
		r := result{name: kind}
		t0 := time.Now()
		if _, err := m.Track(ctx, proj); err != nil {
			return "", err
		}
		r.first = time.Since(t0)
		t0 = time.Now()
		if _, err := m.Track(ctx, proj); err != nil {
			return "", err
		}
		r.noop = time.Since(t0)
		rng := rand.New(rand.NewSource(1))
		var added, cpu []time.Duration
		var lastStart string
		var lastFile string
		for i := 0; i < steps; i++ {
			c0 := usedCPU()
			t0 := time.Now()
			start, err := m.Track(ctx, proj)
			if err != nil {
				return "", err
			}
			d := time.Since(t0)
			c := usedCPU() - c0
			// The step's tools: an edit of one file (every fifth step also
			// adds a file in a new directory).
			f := fileName(rng.Intn(files))
			fh, err := os.OpenFile(filepath.Join(proj, f), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(fh, "// step %d\n", i)
			fh.Close()
			if i%5 == 4 {
				os.MkdirAll(filepath.Join(proj, "new", fmt.Sprint(i)), 0o755)
				os.WriteFile(filepath.Join(proj, "new", fmt.Sprint(i), "x.go"), []byte("package x\n"), 0o644)
			}
			c0 = usedCPU()
			t0 = time.Now()
			end, err := m.Track(ctx, proj)
			if err != nil {
				return "", err
			}
			changed, err := m.Changed(ctx, proj, start.Hash, end.Hash)
			if err != nil {
				return "", err
			}
			if len(changed) == 0 {
				return "", fmt.Errorf("step %d: no change recorded", i)
			}
			added = append(added, d+time.Since(t0))
			cpu = append(cpu, c+usedCPU()-c0)
			lastStart, lastFile = start.Hash, f
		}
		// A revert's file work for the last step: read its entry, hash the
		// file on disk, write it back.
		t0 = time.Now()
		e, err := m.Lookup(ctx, proj, lastStart, []string{lastFile})
		if err != nil {
			return "", err
		}
		if _, err := m.Disk(proj, []string{lastFile}); err != nil {
			return "", err
		}
		if err := m.Apply(ctx, proj, []snapshot.Change{{File: lastFile, Tree: lastStart, Entry: e[lastFile]}}); err != nil {
			return "", err
		}
		r.revert = time.Since(t0)
		slices.Sort(added)
		slices.Sort(cpu)
		r.p50, r.p95, r.max = added[len(added)/2], added[len(added)*95/100], added[len(added)-1]
		r.cpu50 = cpu[len(cpu)/2]
		filepath.Walk(filepath.Join(work, "snapshots-"+strings.ReplaceAll(kind, " ", "-"), snapshot.Key(realPath(proj)), "objects"),
			func(_ string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					r.objects += fi.Size()
					r.objectFiles++
				}
				return nil
			})
		results = append(results, r)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
	md.WriteString("| project | first snapshot | unchanged snapshot | added per step p50 | p95 | max | CPU per step p50 | one file reverted | snapshot store |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&md, "| %s | %s | %s | **%s** | %s | %s | %s | %s | %.1f MB in %d files |\n", r.name, ms(r.first), ms(r.noop), ms(r.p50), ms(r.p95), ms(r.max),
			ms(r.cpu50), ms(r.revert), float64(r.objects)/1e6, r.objectFiles)
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&md, "\nLoad average at the end: %s. *CPU per step* is the CPU time (user and system) of this process and of the git "+
		"processes it ran during the step's snapshots: what a step costs on an idle machine, where the wall time comes close to it.\n",
		strings.TrimSpace(string(load)))
	fmt.Fprintf(&md, "\nTarget: at most 30 ms added per step (p50) after the first snapshot.\n\n"+
		"- *first snapshot*: the session's first step that may change files pays it once per project (git hashes and stores every file; "+
		"a git repository, here committed and packed as a cloned one is, starts from its checked-out commit: its objects are copied as a pack "+
		"and its files are hashed to check them, not stored again).\n"+
		"- *added per step*: two snapshots and `diff-tree`. An inotify watch tells each snapshot which paths changed since the last one: "+
		"the one before the tools finds none and runs no git; the one after runs `git status` on the changed paths, `update-index` "+
		"and `write-tree` (the snapshot index is split, so each write is small). Steps whose calls cannot change files (read, grep, glob, list, webfetch, todo, question) take none.\n"+
		"- *unchanged snapshot*: a snapshot when nothing changed since the last one.\n"+
		"- *one file reverted*: `ls-tree`, hashing the file on disk, `checkout` of the file.\n")
	if out == "" {
		fmt.Print(md.String())
		return "", nil
	}
	path := filepath.Join(out, stamp+"-snapshot.md")
	return path, os.WriteFile(path, []byte(md.String()), 0o644)
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func fileName(i int) string {
	return fmt.Sprintf("d%02d/e%02d/f%05d.go", i%100, (i/100)%10, i)
}

// generateProject writes n Go-like files under dir.
func generateProject(dir string, n int) error {
	rng := rand.New(rand.NewSource(42))
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fileName(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "package p%d\n\n", i%100)
		for l := 0; l < 20+rng.Intn(180); l++ {
			fmt.Fprintf(&b, "// line %d of file %d: %x\n", l, i, rng.Int63())
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// usedCPU is the CPU time (user and system) used so far by this process
// and its waited-for children.
func usedCPU() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

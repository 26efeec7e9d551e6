package snapshot

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// recentUse is how long a snapshot directory, or an object no session
// uses, is kept after it was last written: a step in progress has taken
// its first snapshot but not stored it yet.
const recentUse = 24 * time.Hour

// maybeGC starts a collection of the project's snapshot directory in the
// background when the last one is older than GCEvery. The first use of a
// directory in a process only notes the time (a start never collects).
func (m *Manager) maybeGC(p *project) {
	if m.cfg.Keep == nil {
		return
	}
	m.mu.Lock()
	now := m.cfg.Clock.Now()
	if p.lastGC.IsZero() {
		p.lastGC = now
		if fi, err := os.Stat(filepath.Join(p.dir, "agentgate-gc")); err == nil {
			p.lastGC = fi.ModTime()
		}
	}
	if p.collecting || now.Sub(p.lastGC) < m.cfg.GCEvery {
		m.mu.Unlock()
		return
	}
	p.collecting, p.lastGC = true, now
	m.mu.Unlock()
	m.gcs.Add(1)
	go func() {
		defer m.gcs.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		if err := m.Collect(ctx, p.root); err != nil {
			m.cfg.Logger.Warn("snapshot: collection failed", zap.String("project", p.root), zap.Error(err))
		}
		m.mu.Lock()
		p.collecting = false
		m.mu.Unlock()
	}()
}

// Collect prunes a project's snapshot directory down to the trees live
// sessions use (Config.Keep), packing them (and the objects they borrow
// from the user's repository, so that they outlive its own pruning); a
// directory no session uses, and not written lately, is removed.
func (m *Manager) Collect(ctx context.Context, root string) error {
	if m.cfg.Keep == nil {
		return nil
	}
	p, err := m.project(root)
	if err != nil {
		return err
	}
	keep, err := m.cfg.Keep(ctx, p.root)
	if err != nil {
		return err
	}
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	seen := map[string]bool{}
	var ids []string
	for _, t := range keep {
		if _, err := hex.DecodeString(t); err == nil && len(t) == 40 && !seen[t] {
			seen[t] = true
			ids = append(ids, t)
		}
	}
	now := m.cfg.Clock.Now()
	if len(ids) == 0 {
		last := time.Time{}
		for _, f := range []string{"index", "HEAD"} {
			if fi, err := os.Stat(filepath.Join(p.dir, f)); err == nil && fi.ModTime().After(last) {
				last = fi.ModTime()
			}
		}
		if now.Sub(last) < recentUse {
			return nil
		}
		m.cfg.Logger.Info("snapshot: no session uses the project's snapshots any more; removing them", zap.String("project", p.root))
		if err := removeSnapshotDir(p.dir); err != nil {
			return err
		}
		p.ready, p.tree, p.dirty, p.usage = false, "", false, -1
		if p.watch != nil {
			p.watch.invalidate() // the next snapshot starts the directory afresh
		}
		return nil
	}
	if err := p.init(ctx); err != nil {
		return err
	}
	// Only the trees that still exist can be kept.
	var in bytes.Buffer
	for _, id := range ids {
		in.WriteString(id + "\n")
	}
	out, err := p.git(ctx, in.Bytes(), "cat-file", "--batch-check")
	if err != nil {
		return err
	}
	var tree bytes.Buffer
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "tree" {
			fmt.Fprintf(&tree, "040000 tree %s\t%d\n", f[0], n)
			n++
		}
	}
	keepTree, err := p.git(ctx, tree.Bytes(), "mktree")
	if err != nil {
		return err
	}
	commit, err := p.git(ctx, []byte("kept snapshots\n"), "commit-tree", strings.TrimSpace(string(keepTree)))
	if err != nil {
		return err
	}
	if _, err := p.git(ctx, nil, "update-ref", "refs/agentgate/keep", strings.TrimSpace(string(commit))); err != nil {
		return err
	}
	if _, err := p.git(ctx, nil, "repack", "-a", "-d", "-q"); err != nil {
		return err
	}
	if _, err := p.git(ctx, nil, "prune", "--expire="+fmt.Sprint(now.Add(-recentUse).Unix())); err != nil {
		return err
	}
	// Temporary packs of an interrupted repack.
	if tmps, err := filepath.Glob(filepath.Join(p.dir, "objects", "pack", "tmp_*")); err == nil {
		for _, f := range tmps {
			if fi, err := os.Stat(f); err == nil && now.Sub(fi.ModTime()) > recentUse {
				os.Remove(f)
			}
		}
	}
	p.usage = dirSize(filepath.Join(p.dir, "objects"))
	return writeFile(filepath.Join(p.dir, "agentgate-gc"), now.Format(time.RFC3339)+"\n")
}

// removeSnapshotDir removes a snapshot directory but its lock file (held
// now).
func removeSnapshotDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "agentgate.lock" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

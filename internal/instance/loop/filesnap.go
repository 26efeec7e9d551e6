package loop

import (
	"context"
	"path/filepath"
	"sort"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/location"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/snapshot"
	"github.com/agentgate/agentgate/internal/instance/tools"
)

// fileSnap records a step's files around its tool calls: a snapshot of
// the project just before they run and one just after, stored on the
// step's message (its "snapshot": trees, changed files, what was left
// out), so that a revert can put back what the step changed. Only steps
// whose calls may change files take them. A snapshot that fails never
// fails the step: the record says it is incomplete and why.
type fileSnap struct {
	m     *snapshot.Manager
	root  string
	start snapshot.Tree
	rec   session.StepSnapshot
}

// projectRoot is the root of a session's project: the directory the
// snapshots cover, whatever subdirectory the session works in.
func projectRoot(s svc, info *session.Info) string {
	if loc, err := s.Locations.Get(info.Location.Directory); err == nil {
		return loc.Project.Directory
	}
	dir := info.Location.Directory
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return location.DetectProject(dir).Directory
}

// beginSnapshot takes the snapshot before a step's calls run, when one
// of them may change files (nil otherwise).
func beginSnapshot(ctx context.Context, s svc, info *session.Info, msg *assistantMsg) *fileSnap {
	writes := false
	for _, p := range msg.tools {
		if !p.settled() && tools.ChangesFiles(p.Name) {
			writes = true
		}
	}
	if !writes {
		return nil
	}
	f := &fileSnap{m: s.Snapshots, root: projectRoot(s, info)}
	f.rec.Root = f.root
	if !f.m.Enabled() {
		f.rec.Incomplete = "no snapshot was taken: " + f.m.Status().Reason
		return f
	}
	t, err := f.m.Track(context.WithoutCancel(ctx), f.root)
	if err != nil {
		s.Logger.Warn("snapshot before a step's tools failed; the step goes on without one", zap.String("session", info.ID), zap.Error(err))
		f.rec.Incomplete = "the snapshot before the step's tools failed: " + err.Error()
		return f
	}
	f.start, f.rec.Start = t, t.Hash
	return f
}

// end takes the snapshot after the calls and completes the record.
func (f *fileSnap) end(ctx context.Context, s svc, sid string) {
	if f.rec.Start == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	t, err := f.m.Track(ctx, f.root)
	if err == nil {
		f.rec.Files, err = f.m.Changed(ctx, f.root, f.start.Hash, t.Hash)
	}
	if err != nil {
		s.Logger.Warn("snapshot after a step's tools failed", zap.String("session", sid), zap.Error(err))
		f.rec.Start, f.rec.Files = "", nil
		f.rec.Incomplete = "the snapshot after the step's tools failed: " + err.Error()
		return
	}
	f.rec.End = t.Hash
	sort.Strings(f.rec.Files)
	// What the snapshots left out and changed during the step (new, or
	// another size or time than before the calls).
	before := map[string]snapshot.Skip{}
	for _, sk := range f.start.Skipped {
		before[sk.File] = sk
	}
	for _, sk := range t.Skipped {
		if b, ok := before[sk.File]; !ok || b.Size != sk.Size || b.MTime != sk.MTime {
			f.rec.Skipped = append(f.rec.Skipped, session.SkippedFile{File: sk.File, Reason: sk.Reason})
		}
	}
	for _, inc := range []string{f.start.Incomplete, t.Incomplete} {
		if inc != "" {
			f.rec.Incomplete = inc
		}
	}
}

package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/snapshot"
	"github.com/agentgate/agentgate/internal/store"
)

// RevertState is Session.Info.revert while a revert is staged: the
// messages from MessageID on are hidden, and the files the session's
// steps changed from there on are put back as they were before them.
//
//   - Snapshot is the project's tree just before the first revert of this
//     revert state (the redo point); Root the project it is of.
//   - Restored lists the files the revert has written (or removed), each
//     with what it wrote: redo puts back only files that are still so.
//   - Files and Diff describe the change from the redo point to the files
//     as the revert left them (the released TUI lists Diff's files).
//   - Skipped lists the files the revert did not put back, and why: a
//     file changed since by someone else (the user, another session) is
//     left as it is and reported, never overwritten.
type RevertState struct {
	MessageID  string       `json:"messageID"`
	PartID     string       `json:"partID,omitempty"`
	Snapshot   string       `json:"snapshot,omitempty"`
	Root       string       `json:"root,omitempty"`
	Diff       string       `json:"diff,omitempty"`
	Files      []FileChange `json:"files,omitempty"`
	Skipped    []RevertSkip `json:"skipped,omitempty"`
	Incomplete string       `json:"incomplete,omitempty"`
	Restored   []Restored   `json:"restored,omitempty"`
	// NoFiles: the revert hides messages only (files: false); it writes
	// no file.
	NoFiles bool `json:"noFiles,omitempty"`
}

// FileChange is a file a revert changed: from its content at the redo
// point to what the revert wrote (additions and deletions in lines;
// Binary when git sees no lines).
type FileChange struct {
	File      string `json:"file"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
	Status    string `json:"status"`
	Binary    bool   `json:"binary,omitempty"`
}

// RevertSkip is a file a revert or redo did not change, and why.
type RevertSkip struct {
	File    string `json:"file"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Restored is a file a revert wrote: its entry then (absent when the
// revert removed it).
type Restored struct {
	File string `json:"file"`
	snapshot.Entry
}

// Reasons a file is not put back.
const (
	SkipChanged      = "changed" // changed since the session's last step that touched it
	SkipDeleted      = "deleted" // deleted since
	SkipBetween      = "changed-between-steps"
	SkipUndone       = "changed-since-revert" // redo: changed since the revert wrote it
	SkipNotSnapshot  = "not-in-snapshot"      // the step's snapshots left it out
	SkipSnapshotGone = "snapshot-missing"
)

// RevertInput is a revert request.
type RevertInput struct {
	MessageID string
	PartID    string
	// Files false hides the messages without touching files.
	Files *bool
}

// beginRevert marks a session as being reverted (a prompt meanwhile is
// refused as busy); false when its agent loop runs or another revert
// works on it.
func (s *Service) beginRevert(sid string) bool {
	if s.Drains != nil && s.Drains.IsActive(sid) {
		return false
	}
	_, taken := s.reverting.LoadOrStore(sid, true)
	return !taken
}

func (s *Service) endRevert(sid string) { s.reverting.Delete(sid) }

// Reverting reports whether a revert, redo or commit works on the
// session now.
func (s *Service) Reverting(sid string) bool {
	_, ok := s.reverting.Load(sid)
	return ok
}

// RevertOf decodes a session's staged revert (nil when none).
func RevertOf(info *Info) *RevertState {
	if len(info.Revert) == 0 || string(info.Revert) == "null" {
		return nil
	}
	var r RevertState
	if json.Unmarshal(info.Revert, &r) != nil || r.MessageID == "" {
		return nil
	}
	return &r
}

// step is an assistant message of the session with its snapshot.
type step struct {
	id     string
	snap   *StepSnapshot
	writes bool
}

// stepsFrom lists the assistant steps from message index i on.
func stepsFrom(msgs []Message, i int) []step {
	var out []step
	for _, m := range msgs[i:] {
		if m.Header.Type != "assistant" {
			continue
		}
		snap, writes := stepOf(m.Raw)
		out = append(out, step{id: m.Header.ID, snap: snap, writes: writes})
	}
	return out
}

// revertPoint resolves a revert's message to the message the revert
// hides from, as the released server does: the last user message at or
// before it (the message itself when none is).
func revertPoint(msgs []Message, mid string) (int, bool) {
	at := -1
	for i, m := range msgs {
		if m.Header.ID == mid {
			at = i
			break
		}
	}
	if at < 0 {
		return 0, false
	}
	for i := at; i >= 0; i-- {
		if msgs[i].Header.Type == "user" {
			return i, true
		}
	}
	return at, true
}

// hiddenFrom is the index of the first message a staged revert hides
// (len(msgs) when none is hidden).
func hiddenFrom(info *Info, msgs []Message) int {
	r := RevertOf(info)
	if r == nil {
		return len(msgs)
	}
	for i, m := range msgs {
		if m.Header.ID == r.MessageID {
			return i
		}
	}
	return len(msgs)
}

// Visible is the messages a staged revert does not hide.
func Visible(info *Info, msgs []Message) []Message { return msgs[:hiddenFrom(info, msgs)] }

// noSnapshot is the error of a revert whose steps changed files without
// a snapshot.
func noSnapshot(st step, status snapshot.Status) error {
	why := "no snapshot was recorded"
	if st.snap != nil && st.snap.Incomplete != "" {
		why = st.snap.Incomplete
	}
	msg := fmt.Sprintf("Cannot revert the files: step %s ran tools that may have changed files, and it has no snapshot (%s). "+
		"Nothing was changed. Revert to a later message, or stage the revert with files: false to hide the messages only.", st.id, why)
	if status.Mode != "on" {
		msg += " File snapshots: " + status.Reason + "."
	}
	return errs.InvalidRequest("no_snapshot", msg)
}

// Revert stages a revert of the session to a message (see RevertState):
// the messages from the last user message at or before it are hidden,
// and the files the session's steps changed from there on are put back
// as they were before the first of those steps, each only when it is
// still as the session's last step left it. A staged revert moves (the
// TUI's undo twice, redo one step) from where it is: files the new point
// no longer reverts are put back as they were before the revert, when
// nobody changed them since. A busy session answers 409
// SessionBusyError, as the released server does.
func (s *Service) Revert(ctx context.Context, sid string, in RevertInput) (*Info, error) {
	if err := CheckMessageID("messageID", in.MessageID); err != nil {
		return nil, err
	}
	if in.PartID != "" && (len(in.PartID) > 200 || strings.ContainsAny(in.PartID, "/\\")) {
		return nil, errs.Field("partID", "partID must be a part id")
	}
	if _, err := s.Get(ctx, sid); err != nil {
		return nil, err
	}
	if !s.beginRevert(sid) {
		return nil, errs.SessionBusy(sid)
	}
	defer s.endRevert(sid)
	info, msgs, err := s.Read(ctx, sid)
	if err != nil {
		return nil, err
	}
	at, ok := revertPoint(msgs, in.MessageID)
	if !ok {
		return nil, errs.MessageNotFound(sid, in.MessageID)
	}
	old := RevertOf(info)
	state := &RevertState{MessageID: msgs[at].Header.ID, PartID: in.PartID}
	if in.Files != nil && !*in.Files {
		if old != nil && len(old.Restored) > 0 {
			return nil, errs.InvalidRequest("files", "The staged revert changed files: redo it (or commit it) before staging a revert without files")
		}
		state.NoFiles = true
	} else {
		if err := s.revertFiles(ctx, msgs, at, old, state); err != nil {
			return nil, err
		}
	}
	return s.storeRevert(ctx, sid, state)
}

// storeRevert records a staged revert and announces it.
func (s *Service) storeRevert(ctx context.Context, sid string, state *RevertState) (*Info, error) {
	raw, err := json.Marshal(state)
	if err != nil {
		return nil, err
	}
	var info *Info
	err = s.WriteTx(context.WithoutCancel(ctx), func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		info.Revert = raw
		info.Time.Updated = max(s.NowMS(), info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return nil, err
	}
	diff := s.revertedDiff(ctx, info)
	evs := []Ev{{"session.next.revert.staged", map[string]any{"revert": state}},
		{"session.diff", map[string]any{"diff": diff}}, {"session.updated", map[string]any{"info": info}}}
	if t := skippedToast("not reverted", state.Skipped); t != nil {
		evs = append(evs, *t)
	}
	s.PublishEvents(info, evs...)
	return info, nil
}

// skippedToast is a tui.toast.show event naming the files a revert or
// redo left, and why (the released TUI shows it; it lists only the
// files a revert changed).
func skippedToast(what string, skipped []RevertSkip) *Ev {
	if len(skipped) == 0 {
		return nil
	}
	var b strings.Builder
	for i, sk := range skipped {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(skipped)-3)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(sk.File + " " + sk.Message)
	}
	noun := "files"
	if len(skipped) == 1 {
		noun = "file"
	}
	return &Ev{"tui.toast.show", map[string]any{"title": fmt.Sprintf("%d %s %s", len(skipped), noun, what),
		"message": b.String(), "variant": "warning", "duration": 15000}}
}

// revertedDiff is the change the hidden steps made (session.diff after a
// revert, as the released server announces it).
func (s *Service) revertedDiff(ctx context.Context, info *Info) []FileDiff {
	_, msgs, err := s.Read(ctx, info.ID)
	if err != nil {
		return []FileDiff{}
	}
	from := hiddenFrom(info, msgs)
	d, err := s.diffOf(ctx, stepsFrom(msgs, from))
	if err != nil {
		return []FileDiff{}
	}
	return d
}

// revertFiles works out and makes the file changes of moving the
// session's revert state from old (nil: none) to the steps from message
// index at on, into state.
func (s *Service) revertFiles(ctx context.Context, msgs []Message, at int, old *RevertState, state *RevertState) error {
	steps := stepsFrom(msgs, at)
	var usable []step
	for _, st := range steps {
		switch {
		case st.snap.Usable():
			usable = append(usable, st)
		case st.writes:
			return noSnapshot(st, s.Snapshots.Status())
		}
	}
	var oldW map[string]snapshot.Entry
	root := ""
	if old != nil {
		state.Snapshot, root = old.Snapshot, old.Root
		oldW = map[string]snapshot.Entry{}
		for _, r := range old.Restored {
			oldW[r.File] = r.Entry
		}
	}
	for _, st := range usable {
		if root == "" {
			root = st.snap.Root
		}
		if st.snap.Root != root {
			return errs.InvalidRequest("moved", fmt.Sprintf("Cannot revert the files: step %s changed files of %s, and the revert's are of %s "+
				"(the session moved between projects). Revert to a message after the move.", st.id, st.snap.Root, root))
		}
	}
	if len(usable) == 0 && len(oldW) == 0 {
		return nil // no step changed files
	}
	m := s.Snapshots
	if !m.Enabled() {
		return errs.Unavailable("snapshot", "Cannot revert the files: "+m.Status().Reason)
	}
	state.Root = root
	// The files the steps changed, each with its first and last step.
	first, last := map[string]int{}, map[string]int{}
	var files []string
	for i, st := range usable {
		for _, f := range st.snap.Files {
			if _, ok := first[f]; !ok {
				first[f] = i
				files = append(files, f)
			}
			last[f] = i
		}
		for _, sk := range st.snap.Skipped {
			state.Skipped = append(state.Skipped, RevertSkip{File: sk.File, Reason: SkipNotSnapshot,
				Message: fmt.Sprintf("changed by step %s but left out of its snapshots (%s): not restorable", st.id, sk.Reason)})
		}
		if st.snap.Incomplete != "" {
			state.Incomplete = st.snap.Incomplete
		}
	}
	all := append([]string(nil), files...)
	for f := range oldW {
		if _, ok := first[f]; !ok {
			all = append(all, f)
		}
	}
	sort.Strings(all)
	// The redo point: the files as they were before this revert state
	// wrote any (taken now when none is recorded yet).
	if state.Snapshot == "" {
		t, err := m.Track(ctx, root)
		if err != nil {
			return errs.Unavailable("snapshot", "Cannot revert the files: the snapshot of the files now failed: "+err.Error())
		}
		state.Snapshot = t.Hash
	}
	read := map[string]map[string]snapshot.Entry{} // a step's end is often the next one's start
	lookup := func(tree string) (map[string]snapshot.Entry, error) {
		if e, ok := read[tree]; ok {
			return e, nil
		}
		e, err := m.Lookup(ctx, root, tree, all)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", tree, err)
		}
		read[tree] = e
		return e, nil
	}
	redo, err := lookup(state.Snapshot)
	if err != nil {
		return errs.Unavailable("snapshot", "Cannot revert the files: the redo point's snapshot is unreadable: "+err.Error())
	}
	starts, ends := make([]map[string]snapshot.Entry, len(usable)), make([]map[string]snapshot.Entry, len(usable))
	for i, st := range usable {
		if starts[i], err = lookup(st.snap.Start); err == nil {
			ends[i], err = lookup(st.snap.End)
		}
		if err != nil {
			return errs.Unavailable("snapshot", fmt.Sprintf("Cannot revert the files: the snapshots of step %s are unreadable (%v); nothing was changed", st.id, err))
		}
	}
	disk, err := m.Disk(root, all)
	if err != nil {
		return errs.Unavailable("snapshot", "Cannot revert the files: the project's files are unreadable: "+err.Error())
	}
	reported := map[string]bool{}
	for _, sk := range state.Skipped {
		reported[sk.File] = true
	}
	skip := func(f, reason, msg string) {
		if !reported[f] {
			reported[f] = true
			state.Skipped = append(state.Skipped, RevertSkip{File: f, Reason: reason, Message: msg})
		}
	}
	var changes []snapshot.Change
	for _, f := range all {
		cur := disk[f]
		w, inOld := oldW[f]
		i, inNew := first[f]
		if !inNew {
			// The revert no longer covers the file: put back what the
			// revert replaced, if the file is still as the revert left it.
			if cur.Reason == "" && cur.Entry == w {
				if cur.Entry != redo[f] {
					changes = append(changes, snapshot.Change{File: f, Tree: state.Snapshot, Entry: redo[f]})
				}
			} else {
				skip(f, SkipUndone, "changed since the revert put it back: left as it is")
			}
			continue
		}
		j := last[f]
		target, end := starts[i][f], ends[j][f]
		expect := redo[f]
		if inOld {
			expect = w
		}
		chain := true
		for k := i; k < j; k++ {
			if ends[k][f] != starts[k+1][f] {
				chain = false
			}
		}
		switch {
		case cur.Reason != "":
			skip(f, cur.Reason, fmt.Sprintf("is %s now: not restorable", describe(cur.Reason)))
		case (cur.Entry != expect || redo[f] != end) && cur.Absent():
			skip(f, SkipDeleted, "deleted since the session's last change to it: left deleted")
		case cur.Entry != expect || redo[f] != end:
			skip(f, SkipChanged, "changed since the session's last change to it (by hand or by another session): left as it is")
		case !chain:
			skip(f, SkipBetween, "changed by someone else between this session's steps: left as it is")
		default:
			if cur.Entry != target {
				changes = append(changes, snapshot.Change{File: f, Tree: usable[i].snap.Start, Entry: target})
			}
			state.Restored = append(state.Restored, Restored{File: f, Entry: target})
			continue
		}
		if inOld && cur.Reason == "" && cur.Entry == w {
			// Not reverted further, but still as the earlier revert wrote
			// it: a redo puts it back.
			state.Restored = append(state.Restored, Restored{File: f, Entry: w})
		}
	}
	if err := m.Apply(ctx, root, changes); err != nil {
		return errs.Unavailable("snapshot", "Reverting the files failed part way ("+err.Error()+"); check the project's files")
	}
	s.describeRevert(ctx, state)
	return nil
}

func describe(reason string) string {
	switch reason {
	case snapshot.SkipTooLarge:
		return "larger than the snapshot size limit"
	case snapshot.SkipSensitive:
		return "a file that holds secrets (snapshots leave those out)"
	case snapshot.SkipSpecial:
		return "not a regular file"
	}
	return reason
}

// describeRevert fills the revert's Files and Diff: the restored files
// from the redo point to as they are now.
func (s *Service) describeRevert(ctx context.Context, state *RevertState) {
	state.Files, state.Diff = nil, ""
	if len(state.Restored) == 0 {
		return
	}
	m := s.Snapshots
	now, err := m.Track(ctx, state.Root)
	if err != nil {
		return
	}
	files := make([]string, 0, len(state.Restored))
	for _, r := range state.Restored {
		files = append(files, r.File)
	}
	stats, err := m.NumStat(ctx, state.Root, state.Snapshot, now.Hash, files)
	if err != nil {
		return
	}
	before, err1 := m.Lookup(ctx, state.Root, state.Snapshot, files)
	after, err2 := m.Lookup(ctx, state.Root, now.Hash, files)
	if err1 != nil || err2 != nil {
		return
	}
	for _, f := range files {
		st, ok := stats[f]
		if !ok {
			continue // unchanged
		}
		state.Files = append(state.Files, FileChange{File: f, Additions: st.Additions, Deletions: st.Deletions,
			Status: status(before[f], after[f]), Binary: st.Binary})
	}
	state.Diff, _ = m.Patch(ctx, state.Root, state.Snapshot, now.Hash, files)
}

func status(before, after snapshot.Entry) string {
	switch {
	case before.Absent():
		return "added"
	case after.Absent():
		return "deleted"
	}
	return "modified"
}

// RedoReport is what a redo (unrevert) did: the files it put back and
// those it left.
type RedoReport struct {
	Files   []string     `json:"files"`
	Skipped []RevertSkip `json:"skipped,omitempty"`
}

// Unrevert ends a staged revert: the hidden messages show again, and the
// files the revert put back return to their content before it (the redo
// point), each only when it is still as the revert left it. A session
// with no staged revert is answered as it is.
func (s *Service) Unrevert(ctx context.Context, sid string) (*Info, *RedoReport, error) {
	if _, err := s.Get(ctx, sid); err != nil {
		return nil, nil, err
	}
	if !s.beginRevert(sid) {
		return nil, nil, errs.SessionBusy(sid)
	}
	defer s.endRevert(sid)
	info, err := s.Get(ctx, sid)
	if err != nil {
		return nil, nil, err
	}
	old := RevertOf(info)
	report := &RedoReport{Files: []string{}}
	if old == nil {
		return info, report, nil
	}
	if len(old.Restored) > 0 {
		m := s.Snapshots
		if !m.Enabled() {
			return nil, nil, errs.Unavailable("snapshot", "Cannot put the files back: "+m.Status().Reason)
		}
		files := make([]string, 0, len(old.Restored))
		for _, r := range old.Restored {
			files = append(files, r.File)
		}
		redo, err := m.Lookup(ctx, old.Root, old.Snapshot, files)
		if err != nil {
			return nil, nil, errs.Unavailable("snapshot", "Cannot put the files back: the redo point's snapshot is unreadable: "+err.Error())
		}
		disk, err := m.Disk(old.Root, files)
		if err != nil {
			return nil, nil, errs.Unavailable("snapshot", "Cannot put the files back: the project's files are unreadable: "+err.Error())
		}
		var changes []snapshot.Change
		for _, r := range old.Restored {
			cur := disk[r.File]
			if cur.Reason != "" || cur.Entry != r.Entry {
				report.Skipped = append(report.Skipped, RevertSkip{File: r.File, Reason: SkipUndone,
					Message: "changed since the revert put it back: left as it is"})
				continue
			}
			report.Files = append(report.Files, r.File)
			if cur.Entry != redo[r.File] {
				changes = append(changes, snapshot.Change{File: r.File, Tree: old.Snapshot, Entry: redo[r.File]})
			}
		}
		if err := m.Apply(ctx, old.Root, changes); err != nil {
			return nil, nil, errs.Unavailable("snapshot", "Putting the files back failed part way ("+err.Error()+"); check the project's files")
		}
	}
	err = s.WriteTx(context.WithoutCancel(ctx), func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		info.Revert = nil
		info.Time.Updated = max(s.NowMS(), info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return nil, nil, err
	}
	evs := []Ev{{"session.next.revert.cleared", map[string]any{"redo": report}}, {"session.updated", map[string]any{"info": info}}}
	if t := skippedToast("not put back", report.Skipped); t != nil {
		evs = append(evs, *t)
	}
	s.PublishEvents(info, evs...)
	return info, report, nil
}

// CommitRevert drops the messages a staged revert hides and ends it (the
// files stay as they are). The next prompt does it, as the released
// server does. A session with no staged revert is left as it is.
func (s *Service) CommitRevert(ctx context.Context, sid string) (*Info, error) {
	if _, err := s.Get(ctx, sid); err != nil {
		return nil, err
	}
	if !s.beginRevert(sid) {
		return nil, errs.SessionBusy(sid)
	}
	defer s.endRevert(sid)
	var info *Info
	var removed []string
	var point string
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		removed, point, err = s.commitRevertTx(tx, info)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.publishCommit(info, point, removed)
	return info, nil
}

// commitRevertTx drops the hidden messages of a staged revert and clears
// it, in tx; it returns the removed message ids and the revert point.
func (s *Service) commitRevertTx(tx store.Tx, info *Info) (removed []string, point string, err error) {
	r := RevertOf(info)
	if r == nil {
		if info.Revert != nil {
			info.Revert = nil
			return nil, "", s.PutInfo(tx, info, false)
		}
		return nil, "", nil
	}
	hidden := false
	err = tx.SessionItems(s.InstanceName(), info.ID, store.ItemMessage, func(raw []byte) (bool, error) {
		var h struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &h) != nil {
			return true, nil
		}
		if h.ID == r.MessageID {
			hidden = true
		}
		if hidden {
			removed = append(removed, h.ID)
		}
		return true, nil
	})
	if err != nil {
		return nil, "", err
	}
	for _, id := range removed {
		if err := tx.DeleteSessionItem(s.InstanceName(), info.ID, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, "", err
		}
	}
	info.Revert = nil
	info.Time.Updated = max(s.NowMS(), info.Time.Updated)
	return removed, r.MessageID, s.PutInfo(tx, info, false)
}

// publishCommit announces a committed revert: each removed message and
// the session's new record.
func (s *Service) publishCommit(info *Info, point string, removed []string) {
	if point == "" {
		return
	}
	evs := make([]Ev, 0, len(removed)+2)
	for _, id := range removed {
		evs = append(evs, Ev{"message.removed", map[string]any{"messageID": id}})
	}
	evs = append(evs, Ev{"session.next.revert.committed", map[string]any{"messageID": point}},
		Ev{"session.updated", map[string]any{"info": info}})
	s.PublishEvents(info, evs...)
}

// FileDiff is a file's change over some of a session's steps: its
// content before the first and after the last (empty for a binary file
// or one that does not exist), line counts and status.
type FileDiff struct {
	File      string `json:"file"`
	Before    string `json:"before"`
	After     string `json:"after"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
	Status    string `json:"status"`
	Binary    bool   `json:"binary,omitempty"`
}

// Diff is the session's file changes: those of one message's turn (a
// user message: the steps that answered it; an assistant message: its
// own), or of all its visible steps when messageID is empty.
func (s *Service) Diff(ctx context.Context, sid, messageID string) ([]FileDiff, error) {
	if messageID != "" {
		if err := CheckMessageID("messageID", messageID); err != nil {
			return nil, err
		}
	}
	info, msgs, err := s.Read(ctx, sid)
	if err != nil {
		return nil, err
	}
	msgs = Visible(info, msgs)
	var steps []step
	if messageID == "" {
		steps = stepsFrom(msgs, 0)
	} else {
		at := -1
		for i, m := range msgs {
			if m.Header.ID == messageID {
				at = i
			}
		}
		if at < 0 {
			return nil, errs.MessageNotFound(sid, messageID)
		}
		end := at + 1
		if msgs[at].Header.Type != "assistant" {
			for end < len(msgs) && msgs[end].Header.Type != "user" {
				end++
			}
		}
		steps = stepsFrom(msgs[:end], at)
	}
	return s.diffOf(ctx, steps)
}

// maxDiffContent bounds the before and after texts of a FileDiff.
const maxDiffContent = 1 << 20

// maxDiffSpans bounds the step spans a diff reads file by file.
const maxDiffSpans = 4

// diffOf is the change of the usable steps: each file from the start of
// the first step that changed it to the end of the last.
func (s *Service) diffOf(ctx context.Context, steps []step) ([]FileDiff, error) {
	out := []FileDiff{}
	type span struct{ from, to string }
	first, last := map[string]string{}, map[string]string{}
	var files []string
	root := ""
	for _, st := range steps {
		if !st.snap.Usable() || (root != "" && st.snap.Root != root) {
			continue
		}
		root = st.snap.Root
		for _, f := range st.snap.Files {
			if _, ok := first[f]; !ok {
				first[f] = st.snap.Start
				files = append(files, f)
			}
			last[f] = st.snap.End
		}
	}
	if len(files) == 0 || !s.Snapshots.Enabled() {
		return out, nil
	}
	m := s.Snapshots
	groups := map[span][]string{}
	for _, f := range files {
		k := span{first[f], last[f]}
		groups[k] = append(groups[k], f)
	}
	if len(groups) > maxDiffSpans {
		// Many steps: every file from the first step's start to the last
		// one's end, in three git calls rather than three per span.
		var from, to string
		for _, st := range steps {
			if st.snap.Usable() && st.snap.Root == root {
				if from == "" {
					from = st.snap.Start
				}
				to = st.snap.End
			}
		}
		groups = map[span][]string{{from, to}: files}
	}
	var blobs []string
	for k, list := range groups {
		stats, err := m.NumStat(ctx, root, k.from, k.to, list)
		if err != nil {
			return nil, err
		}
		before, err := m.Lookup(ctx, root, k.from, list)
		if err != nil {
			return nil, err
		}
		after, err := m.Lookup(ctx, root, k.to, list)
		if err != nil {
			return nil, err
		}
		for _, f := range list {
			st, ok := stats[f]
			if !ok {
				continue // changed and changed back
			}
			d := FileDiff{File: f, Additions: st.Additions, Deletions: st.Deletions, Status: status(before[f], after[f]), Binary: st.Binary,
				Before: before[f].Blob, After: after[f].Blob}
			for _, id := range []string{d.Before, d.After} {
				if id != "" && !st.Binary {
					blobs = append(blobs, id)
				}
			}
			out = append(out, d)
		}
	}
	contents, err := m.Blobs(ctx, root, blobs)
	if err != nil {
		return nil, err
	}
	text := func(id string, binary bool) string {
		b := contents[id]
		if binary || len(b) > maxDiffContent {
			return ""
		}
		return string(b)
	}
	for i := range out {
		out[i].Before, out[i].After = text(out[i].Before, out[i].Binary), text(out[i].After, out[i].Binary)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

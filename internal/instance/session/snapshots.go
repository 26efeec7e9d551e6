package session

import (
	"context"
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/instance/tools"
	"github.com/agentgate/agentgate/internal/store"
)

// StepSnapshot is what an assistant message records of the project's
// files around its tool calls (its "snapshot" field): the trees before
// (Start) and after (End) the calls, the files that differ between them
// (relative to Root, the project root), the files the snapshots left out
// that changed meanwhile, and why the snapshot is incomplete. Without
// both trees the step's changes cannot be reverted.
type StepSnapshot struct {
	Start      string        `json:"start,omitempty"`
	End        string        `json:"end,omitempty"`
	Files      []string      `json:"files,omitempty"`
	Root       string        `json:"root,omitempty"`
	Skipped    []SkippedFile `json:"skipped,omitempty"`
	Incomplete string        `json:"incomplete,omitempty"`
}

// SkippedFile is a file the step's snapshots left out, and why.
type SkippedFile struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// Usable reports whether the step's changes can be reverted.
func (s *StepSnapshot) Usable() bool { return s != nil && s.Start != "" && s.End != "" && s.Root != "" }

// stepOf reads an assistant message's snapshot and whether the step made
// calls that may have changed files.
func stepOf(raw json.RawMessage) (snap *StepSnapshot, writes bool) {
	r := gjson.ParseBytes(raw)
	for _, c := range r.Get("content").Array() {
		if c.Get("type").String() == "tool" && tools.ChangesFiles(c.Get("name").String()) {
			writes = true
		}
	}
	if v := r.Get("snapshot"); v.Exists() {
		var s StepSnapshot
		if json.Unmarshal([]byte(v.Raw), &s) == nil {
			snap = &s
		}
	}
	return snap, writes
}

// SnapshotTrees lists the snapshot trees of a project root that the
// instance's sessions still use: their steps' trees and their staged
// reverts' redo points (a collection of the project's snapshots keeps
// these and prunes the rest).
func (s *Service) SnapshotTrees(ctx context.Context, root string) ([]string, error) {
	var out []string
	err := s.ReadTx(ctx, func(tx store.Tx) error {
		out = out[:0]
		var ids []string
		err := tx.ListInstanceSessions(s.InstanceName(), store.SessionScan{}, func(rec *store.InstanceSession) (bool, error) {
			ids = append(ids, rec.ID)
			if info, err := decodeInfo(rec); err == nil {
				if r := RevertOf(info); r != nil && r.Root == root && r.Snapshot != "" {
					out = append(out, r.Snapshot)
				}
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, id := range ids {
			err := tx.SessionItems(s.InstanceName(), id, store.ItemMessage, func(raw []byte) (bool, error) {
				snap := gjson.GetBytes(raw, "snapshot")
				if snap.Exists() && snap.Get("root").String() == root {
					for _, k := range []string{"start", "end"} {
						if t := snap.Get(k).String(); t != "" {
							out = append(out, t)
						}
					}
				}
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

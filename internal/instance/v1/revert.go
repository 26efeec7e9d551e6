package v1

import (
	"path"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/instance/session"
)

// revert is a v1 Session's revert field: {messageID, partID?, snapshot?,
// diff?} as the released server has it, and what this server adds: the
// files the revert changed and those it left, and why.
func revert(info *session.Info) map[string]any {
	r := session.RevertOf(info)
	if r == nil {
		return nil
	}
	out := map[string]any{"messageID": r.MessageID}
	if r.PartID != "" {
		out["partID"] = r.PartID
	}
	if r.Snapshot != "" {
		out["snapshot"] = r.Snapshot
	}
	if r.Diff != "" {
		out["diff"] = r.Diff
	}
	if len(r.Files) > 0 {
		out["files"] = r.Files
	}
	if len(r.Skipped) > 0 {
		out["skipped"] = r.Skipped
	}
	if r.Incomplete != "" {
		out["incomplete"] = r.Incomplete
	}
	return out
}

// patchPart is the v1 PatchPart of a step whose snapshots recorded file
// changes: {hash: the tree before the step's tools, files: absolute
// paths}, as the released server adds after a step's step-finish (nil
// when the step changed no file).
func patchPart(sid, id string, snap gjson.Result) map[string]any {
	files := snap.Get("files").Array()
	start, root := snap.Get("start").String(), snap.Get("root").String()
	if len(files) == 0 || start == "" || !snap.Get("end").Exists() {
		return nil
	}
	abs := make([]string, 0, len(files))
	for _, f := range files {
		abs = append(abs, path.Join(root, f.String()))
	}
	return map[string]any{"id": PartID(id, "p"), "sessionID": sid, "messageID": id, "type": "patch", "hash": start, "files": abs}
}

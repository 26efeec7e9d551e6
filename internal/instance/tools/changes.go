package tools

// ChangesFiles reports whether a call of the tool may change the
// project's files: write, edit, bash, task (its subagent may) and any
// tool that is not built in (a plugin's). Steps that make such calls are
// snapshotted before and after, so that they can be reverted.
func ChangesFiles(name string) bool {
	switch name {
	case "write", "edit", "bash", "task":
		return true
	}
	_, builtin := Lookup(name)
	return !builtin
}

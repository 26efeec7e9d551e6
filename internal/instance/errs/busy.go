package errs

// SessionBusy: the session's agent is working (a turn runs, or a revert
// is being made), so the operation cannot run now.
func SessionBusy(id string) *Error {
	return New(409, "SessionBusyError", "Session is busy: "+id, "sessionID", id)
}

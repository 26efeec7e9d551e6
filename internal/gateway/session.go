package gateway

import (
	"net/http"

	"github.com/agentgate/agentgate/internal/store"
)

// sessionHeaders are the request headers in which coding agents name their
// session, in their canonical form (http.CanonicalHeaderKey), in order of
// precedence: the first one present decides. Agents'
// own headers come before the generic names, so that a request carrying
// both is attributed by the more specific one.
//
//   - x-opencode-session: OpenCode.
//   - x-claude-code-session-id: Claude Code.
//   - x-qwen-code-session-id: Qwen Code.
//   - x-kilocode-taskid: Kilo Code (a task is its session).
//   - x-session-id: newer OpenCode versions and other clients.
//   - session_id, session-id: Codex. Go canonicalises the first as
//     "Session_id" and the second as "Session-Id": they are two names.
//
// Gemini CLI names no session on Gemini API requests (its
// x-gemini-api-privileged-user-id is an installation id, the same for
// every session), so its requests are recorded without one.
var sessionHeaders = []string{
	"X-Opencode-Session",
	"X-Claude-Code-Session-Id",
	"X-Qwen-Code-Session-Id",
	"X-Kilocode-Taskid",
	"X-Session-Id",
	"Session_id",
	"Session-Id",
}

// requestSession returns the agent session a request names, for its usage
// record, or "". The first header of sessionHeaders with a non-empty value
// decides; a value longer than store.MaxSessionLen bytes or with a byte
// outside printable ASCII (space to tilde) is not recorded at all, rather
// than cut or cleaned: a shortened id could merge two sessions that share a
// prefix, and a session that cannot be recorded faithfully is better
// missing than wrong. The headers themselves go upstream unchanged.
func requestSession(h http.Header) string {
	for _, name := range sessionHeaders {
		// The names are canonical already: a map lookup, as Get's after
		// it canonicalises the name.
		vs := h[name]
		if len(vs) == 0 || vs[0] == "" {
			continue
		}
		v := vs[0]
		if len(v) > store.MaxSessionLen {
			return ""
		}
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return ""
			}
		}
		return v
	}
	return ""
}

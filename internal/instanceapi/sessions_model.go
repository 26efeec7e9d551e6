package instanceapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/store"
)

func (m *ModelRef) validate(field string) error {
	if m == nil {
		return nil
	}
	if m.ID == "" || m.ProviderID == "" {
		return fieldErr(field, field+" needs id and providerID")
	}
	return nil
}

func validateRules(rules []PermissionRule) error {
	for i, r := range rules {
		switch r.Effect {
		case "allow", "deny", "ask":
		default:
			return fieldErr("permissions", fmt.Sprintf("permissions[%d].effect must be allow, deny or ask", i))
		}
	}
	return nil
}

// TokenUsage is TokenUsage.Info.
type TokenUsage struct {
	Input     float64 `json:"input"`
	Output    float64 `json:"output"`
	Reasoning float64 `json:"reasoning"`
	Cache     struct {
		Read  float64 `json:"read"`
		Write float64 `json:"write"`
	} `json:"cache"`
	Context *float64 `json:"context,omitempty"`
}

// SessionFork is Session.Info.fork.
type SessionFork struct {
	SessionID string `json:"sessionID"`
	Boundary  struct {
		Type      string `json:"type"`
		MessageID string `json:"messageID"`
	} `json:"boundary"`
}

// SessionTime is Session.Info.time (epoch ms).
type SessionTime struct {
	Created  int64  `json:"created"`
	Updated  int64  `json:"updated"`
	Idle     *int64 `json:"idle,omitempty"`
	Viewed   *int64 `json:"viewed,omitempty"`
	Archived *int64 `json:"archived,omitempty"`
}

// SessionInfo is Session.Info's wire record.
type SessionInfo struct {
	ID          string                     `json:"id"`
	ParentID    string                     `json:"parentID,omitempty"`
	Fork        *SessionFork               `json:"fork,omitempty"`
	ProjectID   string                     `json:"projectID"`
	Agent       string                     `json:"agent,omitempty"`
	Model       *ModelRef                  `json:"model,omitempty"`
	Cost        float64                    `json:"cost"`
	Tokens      TokenUsage                 `json:"tokens"`
	Steps       *int64                     `json:"steps,omitempty"`
	Outcome     string                     `json:"outcome,omitempty"`
	Time        SessionTime                `json:"time"`
	Title       string                     `json:"title,omitempty"`
	Location    LocationRef                `json:"location"`
	Subpath     string                     `json:"subpath,omitempty"`
	Metadata    map[string]json.RawMessage `json:"metadata,omitempty"`
	Permissions []PermissionRule           `json:"permissions,omitempty"`
	Revert      json.RawMessage            `json:"revert,omitempty"`
}

// Errors of the session operations.
func sessionNotFound(id string) *Error {
	return newErr(404, "SessionNotFoundError", "Session not found: "+id, "sessionID", id)
}

func messageNotFound(sid, mid string) *Error {
	return newErr(404, "MessageNotFoundError", "Message not found: "+mid, "sessionID", sid, "messageID", mid)
}

func conflict(msg, resource string) *Error {
	return newErr(409, "ConflictError", msg, "resource", resource)
}

func invalidCursor() *Error { return newErr(400, "InvalidCursorError", "Invalid cursor") }

func fieldErr(field, msg string) *Error {
	e := invalidRequest("payload", msg)
	e.Fields["field"] = field
	return e
}

// unknownErr is a 500 whose cause goes to the log under the ref it answers.
func (s *Server) unknownErr(what string, err error) *Error {
	ref := "err_" + randomID(8)
	s.opts.Logger.Error(what, zap.Error(err), zap.String("ref", ref))
	return newErr(500, "UnknownError", "Unexpected server error. Check server logs for details.", "ref", ref)
}

// checkSessionID applies the API's rule for session ids (starts with "ses") and refuses
// what no id can hold.
func checkSessionID(field, id string) error {
	if !strings.HasPrefix(id, "ses") {
		return invalidRequest(field, fmt.Sprintf("%s must be a session id starting with \"ses\", got %q", field, id))
	}
	return checkIDChars(field, id)
}

func checkMessageID(field, id string) error {
	if !strings.HasPrefix(id, "msg_") {
		return invalidRequest(field, fmt.Sprintf("%s must be a message id starting with \"msg_\", got %q", field, id))
	}
	return checkIDChars(field, id)
}

func checkIDChars(field, id string) error {
	if len(id) > 200 {
		return invalidRequest(field, field+" is longer than 200 characters")
	}
	for _, c := range id {
		if c < 0x20 || c == 0x7f || c == '/' || c == '\\' {
			return invalidRequest(field, field+" contains a control character or a slash")
		}
	}
	return nil
}

// sessionStore returns the app's store.
func (s *Server) sessionStore(ctx context.Context) (store.Store, error) {
	if s.opts.Store == nil {
		return nil, unavailable("store", "sessions are not available: no store configured")
	}
	st, err := s.opts.Store(ctx)
	if err != nil {
		if ae := apierr.As(err); ae != nil && ae.Status == 503 {
			return nil, unavailable("store", ae.Message)
		}
		return nil, err
	}
	return st, nil
}

// mapStoreErr turns store failures into wire errors.
func mapStoreErr(err error) error {
	var u interface{ Unavailable() bool }
	if errors.As(err, &u) && u.Unavailable() {
		return unavailable("store", "the store is not available")
	}
	return err
}

func (s *Server) instanceName() string {
	if s.opts.Instance == "" {
		return "default"
	}
	return s.opts.Instance
}

func (s *Server) nowMS() int64 { return s.opts.Clock.Now().UnixMilli() }

func decodeInfo(rec *store.InstanceSession) (*SessionInfo, error) {
	var info SessionInfo
	if err := json.Unmarshal(rec.Info, &info); err != nil {
		return nil, fmt.Errorf("session %s: stored record: %w", rec.ID, err)
	}
	return &info, nil
}

// record builds the stored form of info.
func (s *Server) record(info *SessionInfo) (*store.InstanceSession, error) {
	raw, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	return &store.InstanceSession{Instance: s.instanceName(), ID: info.ID, ParentID: info.ParentID,
		Directory: info.Location.Directory, ProjectID: info.ProjectID, Subpath: info.Subpath,
		Updated: info.Time.Updated, Info: raw}, nil
}

// getInfo reads a session inside a transaction: 404 when missing.
func (s *Server) getInfo(tx store.Tx, id string) (*SessionInfo, error) {
	rec, err := tx.InstanceSession(s.instanceName(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, sessionNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	return decodeInfo(rec)
}

func (s *Server) putInfo(tx store.Tx, info *SessionInfo, create bool) error {
	rec, err := s.record(info)
	if err != nil {
		return err
	}
	return tx.PutInstanceSession(rec, create)
}

// placement resolves a directory to the location fields of a session.
func (s *Server) placement(dir string) (clean, projectID, subpath string, err error) {
	clean, canonical, err := s.checkDirectory(dir)
	if err != nil {
		return "", "", "", err
	}
	p := detectProject(canonical)
	rel, rerr := filepath.Rel(p.Directory, canonical)
	if rerr == nil && rel != "." {
		subpath = filepath.ToSlash(rel)
	}
	return clean, p.ID, subpath, nil
}

func defaultTitle(prefix string, ms int64) string {
	return prefix + " - " + time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// view runs a read transaction on the app store.
func (s *Server) view(ctx context.Context, fn func(tx store.Tx) error) error {
	st, err := s.sessionStore(ctx)
	if err != nil {
		return err
	}
	return mapStoreErr(st.View(ctx, fn))
}

// update runs a read-write transaction (retried on conflict).
func (s *Server) update(ctx context.Context, fn func(tx store.Tx) error) error {
	st, err := s.sessionStore(ctx)
	if err != nil {
		return err
	}
	return mapStoreErr(st.Update(ctx, fn))
}

// Active drains: the agent loop marks sessions whose foreground
// drain runs in this process.

// SetActive marks or clears a running drain of a session.
func (s *Server) SetActive(sessionID string, running bool) {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	if running {
		s.active[sessionID] = struct{}{}
	} else {
		delete(s.active, sessionID)
	}
}

// IsActive reports whether a drain of the session runs.
func (s *Server) IsActive(sessionID string) bool {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	_, ok := s.active[sessionID]
	return ok || (s.opts.Runner != nil && s.opts.Runner.isActive(sessionID))
}

// interruptSession stops the session's running turn (outcome
// "interrupted"); inputs admitted but not yet taken stay admitted and are
// processed afterwards. 204 whether or not a turn was running.
func (s *Server) interruptSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	if err := s.view(r.Context(), func(tx store.Tx) error {
		_, err := s.getInfo(tx, sid)
		return err
	}); err != nil {
		return err
	}
	if s.opts.Runner != nil {
		s.opts.Runner.Interrupt(sid)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

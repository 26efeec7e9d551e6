// Package session holds the sessions of an instance: their records and
// messages in the store, and every operation on them (create, update,
// remove, list, fork, switch, move, prompt admission, import, export,
// stats), each a method that takes typed input and returns a record or a
// tagged error (package errs). It publishes the events of what it changes
// and wakes the agent loop through Drains; it knows nothing of HTTP.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/ids"
	"github.com/agentgate/agentgate/internal/instance/location"
	"github.com/agentgate/agentgate/internal/instance/snapshot"
	"github.com/agentgate/agentgate/internal/store"
)

// Service runs the session operations of one instance.
type Service struct {
	// Store returns the store that keeps sessions (the app's store).
	Store func(ctx context.Context) (store.Store, error)
	// Instance names this instance; sessions are scoped by it. Default
	// "default".
	Instance  string
	Clock     clock.Clock
	Bus       *events.Bus
	Locations *location.Locations
	// Drains, when set, runs the sessions' agent loops: admitted prompts
	// wake it, removal and interrupt stop it.
	Drains Drains
	Logger *zap.Logger
	// EventRetention is how long reconnecting event streams can replay
	// durable events (default DefaultEventRetention).
	EventRetention time.Duration
	// Snapshots records the projects' files before and after the steps
	// that may change them, for revert and the file diffs (nil: none).
	Snapshots *snapshot.Manager
	// reverting holds the sessions a revert works on (revert.go).
	reverting sync.Map
}

// Drains is what the session operations need of the agent loop.
type Drains interface {
	// Schedule wakes the drain of a session.
	Schedule(sessionID string)
	// Interrupt stops the session's running step; it reports whether one
	// was running.
	Interrupt(sessionID string) bool
	// Active lists the sessions whose drain runs; IsActive asks for one.
	Active() []string
	IsActive(sessionID string) bool
	// Wait returns when the session's drain is idle (at once when none
	// runs) or ctx ends.
	Wait(ctx context.Context, sessionID string) error
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

// Add adds b's counts to a's.
func (a *TokenUsage) Add(b TokenUsage) {
	a.Input += b.Input
	a.Output += b.Output
	a.Reasoning += b.Reasoning
	a.Cache.Read += b.Cache.Read
	a.Cache.Write += b.Cache.Write
}

// Fork is Session.Info.fork.
type Fork struct {
	SessionID string `json:"sessionID"`
	Boundary  struct {
		Type      string `json:"type"`
		MessageID string `json:"messageID"`
	} `json:"boundary"`
}

// Time is Session.Info.time (epoch ms).
type Time struct {
	Created  int64  `json:"created"`
	Updated  int64  `json:"updated"`
	Idle     *int64 `json:"idle,omitempty"`
	Viewed   *int64 `json:"viewed,omitempty"`
	Archived *int64 `json:"archived,omitempty"`
}

// Info is Session.Info's wire record.
type Info struct {
	ID          string                     `json:"id"`
	ParentID    string                     `json:"parentID,omitempty"`
	Fork        *Fork                      `json:"fork,omitempty"`
	ProjectID   string                     `json:"projectID"`
	Agent       string                     `json:"agent,omitempty"`
	Model       *agents.ModelRef           `json:"model,omitempty"`
	Cost        float64                    `json:"cost"`
	Tokens      TokenUsage                 `json:"tokens"`
	Steps       *int64                     `json:"steps,omitempty"`
	Outcome     string                     `json:"outcome,omitempty"`
	Time        Time                       `json:"time"`
	Title       string                     `json:"title,omitempty"`
	Location    events.LocationRef         `json:"location"`
	Subpath     string                     `json:"subpath,omitempty"`
	Metadata    map[string]json.RawMessage `json:"metadata,omitempty"`
	Permissions []agents.PermissionRule    `json:"permissions,omitempty"`
	Revert      json.RawMessage            `json:"revert,omitempty"`
	Share       *Share                     `json:"share,omitempty"`
}

// Share is the session's share link (the released OpenCode session's
// share.url): set by the v1 share route, removed by unshare.
type Share struct {
	URL string `json:"url"`
}

func validateModel(m *agents.ModelRef, field string) error {
	if m == nil {
		return nil
	}
	if m.ID == "" || m.ProviderID == "" {
		return errs.Field(field, field+" needs id and providerID")
	}
	return nil
}

func validateRules(rules []agents.PermissionRule) error {
	for i, r := range rules {
		switch r.Effect {
		case "allow", "deny", "ask":
		default:
			return errs.Field("permissions", fmt.Sprintf("permissions[%d].effect must be allow, deny or ask", i))
		}
	}
	return nil
}

// CheckID applies the API's rule for session ids (starts with "ses") and
// refuses what no id can hold; field names the id in the error.
func CheckID(field, id string) error {
	if !strings.HasPrefix(id, "ses") {
		return errs.InvalidRequest(field, fmt.Sprintf("%s must be a session id starting with \"ses\", got %q", field, id))
	}
	return checkIDChars(field, id)
}

// CheckMessageID is CheckID for message ids ("msg_").
func CheckMessageID(field, id string) error {
	if !strings.HasPrefix(id, "msg_") {
		return errs.InvalidRequest(field, fmt.Sprintf("%s must be a message id starting with \"msg_\", got %q", field, id))
	}
	return checkIDChars(field, id)
}

func checkIDChars(field, id string) error {
	if len(id) > 200 {
		return errs.InvalidRequest(field, field+" is longer than 200 characters")
	}
	for _, c := range id {
		if c < 0x20 || c == 0x7f || c == '/' || c == '\\' {
			return errs.InvalidRequest(field, field+" contains a control character or a slash")
		}
	}
	return nil
}

// InstanceName is the instance the sessions belong to.
func (s *Service) InstanceName() string {
	if s.Instance == "" {
		return "default"
	}
	return s.Instance
}

// NowMS is the time now in epoch milliseconds.
func (s *Service) NowMS() int64 { return s.Clock.Now().UnixMilli() }

// NewID makes an ascending id with the prefix (msg, evt, …).
func (s *Service) NewID(prefix string) string { return ids.New(prefix, false, s.Clock.Now()) }

// store returns the app's store, or 503.
func (s *Service) store(ctx context.Context) (store.Store, error) {
	if s.Store == nil {
		return nil, errs.Unavailable("store", "sessions are not available: no store configured")
	}
	st, err := s.Store(ctx)
	if err != nil {
		if ae := apierr.As(err); ae != nil && ae.Status == 503 {
			return nil, errs.Unavailable("store", ae.Message)
		}
		return nil, err
	}
	return st, nil
}

// mapStoreErr turns store failures into wire errors.
func mapStoreErr(err error) error {
	var u interface{ Unavailable() bool }
	if errors.As(err, &u) && u.Unavailable() {
		return errs.Unavailable("store", "the store is not available")
	}
	return err
}

// ReadTx runs a read transaction on the app store.
func (s *Service) ReadTx(ctx context.Context, fn func(tx store.Tx) error) error {
	st, err := s.store(ctx)
	if err != nil {
		return err
	}
	return mapStoreErr(st.View(ctx, fn))
}

// WriteTx runs a read-write transaction (retried on conflict).
func (s *Service) WriteTx(ctx context.Context, fn func(tx store.Tx) error) error {
	st, err := s.store(ctx)
	if err != nil {
		return err
	}
	return mapStoreErr(st.Update(ctx, fn))
}

// Shared reports whether other processes may drain this store's sessions
// too (a store that reports Shared, as PostgreSQL does).
func (s *Service) Shared(ctx context.Context) bool {
	st, err := s.store(ctx)
	if err != nil {
		return false
	}
	sh, ok := st.(interface{ Shared() bool })
	return ok && sh.Shared()
}

func decodeInfo(rec *store.InstanceSession) (*Info, error) {
	var info Info
	if err := json.Unmarshal(rec.Info, &info); err != nil {
		return nil, fmt.Errorf("session %s: stored record: %w", rec.ID, err)
	}
	return &info, nil
}

// record builds the stored form of info.
func (s *Service) record(info *Info) (*store.InstanceSession, error) {
	raw, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	return &store.InstanceSession{Instance: s.InstanceName(), ID: info.ID, ParentID: info.ParentID,
		Directory: info.Location.Directory, ProjectID: info.ProjectID, Subpath: info.Subpath,
		Updated: info.Time.Updated, Info: raw}, nil
}

// Info reads a session inside a transaction: SessionNotFoundError when
// missing.
func (s *Service) Info(tx store.Tx, id string) (*Info, error) {
	rec, err := tx.InstanceSession(s.InstanceName(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errs.SessionNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	return decodeInfo(rec)
}

// PutInfo writes a session's record; create refuses an existing one.
func (s *Service) PutInfo(tx store.Tx, info *Info, create bool) error {
	rec, err := s.record(info)
	if err != nil {
		return err
	}
	return tx.PutInstanceSession(rec, create)
}

// Gone reports an error that means the session was removed.
func Gone(err error) bool { return errs.Is(err, 404, "SessionNotFoundError") }

// PublishStatus announces that a session's drain runs or went idle.
// It carries the session's location (none once the session is gone), so
// that a directory's stream sees its own sessions' status only.
func (s *Service) PublishStatus(sid, status string) {
	var loc *events.LocationRef
	if info, err := s.Get(context.Background(), sid); err == nil {
		loc = &info.Location
	}
	s.Bus.Publish("session.status", loc, map[string]any{"sessionID": sid, "status": map[string]any{"type": status}})
}

func defaultTitle(prefix string, ms int64) string {
	return prefix + " - " + time.UnixMilli(ms).UTC().Format(titleTime)
}

const titleTime = "2006-01-02T15:04:05.000Z"

// IsDefaultTitle reports whether a title is the placeholder a session is
// created with ("New session - <time>", "Child session - <time>"): the
// session was never named, by its user or by the title agent.
func IsDefaultTitle(title string) bool {
	for _, prefix := range []string{"New session - ", "Child session - "} {
		if rest, ok := strings.CutPrefix(title, prefix); ok {
			_, err := time.Parse(titleTime, rest)
			return err == nil && len(rest) == len(titleTime)
		}
	}
	return false
}

// MessageHeader is what the server reads of a stored Session.Message.Info.
type MessageHeader struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status"`
	Time   struct {
		Created   *float64 `json:"created"`
		Completed *float64 `json:"completed"`
	} `json:"time"`
}

var messageTypes = map[string]bool{"agent-switched": true, "model-switched": true, "location-switched": true,
	"user": true, "synthetic": true, "system": true, "skill": true, "shell": true, "assistant": true,
	"compaction": true, "idle": true}

func parseHeader(raw []byte) (MessageHeader, error) {
	var h MessageHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, err
	}
	if !messageTypes[h.Type] {
		return h, fmt.Errorf("unknown message type %q", h.Type)
	}
	if CheckMessageID("id", h.ID) != nil {
		return h, fmt.Errorf("bad message id %q", h.ID)
	}
	if h.Time.Created == nil {
		return h, errors.New("message has no time.created")
	}
	return h, nil
}

// Settled reports whether a message is final (an assistant message that
// completed, a shell or compaction that stopped running, any other).
func (h MessageHeader) Settled() bool {
	switch h.Type {
	case "assistant":
		return h.Time.Completed != nil
	case "shell", "compaction":
		return h.Status != "running"
	}
	return true
}

// Message is a stored message: its header and its raw record.
type Message struct {
	Header MessageHeader
	Raw    json.RawMessage
}

// errUndecodable marks a stored message that cannot be read.
var errUndecodable = errors.New("stored message cannot be decoded")

// Messages reads a session's messages, oldest first.
func (s *Service) Messages(tx store.Tx, sid string) ([]Message, error) {
	var out []Message
	err := tx.SessionItems(s.InstanceName(), sid, store.ItemMessage, func(raw []byte) (bool, error) {
		h, err := parseHeader(raw)
		if err != nil {
			return false, fmt.Errorf("%w: session %s: %v", errUndecodable, sid, err)
		}
		out = append(out, Message{h, raw})
		return true, nil
	})
	return out, err
}

// AppendMessage stores a message record after the session's others.
func (s *Service) AppendMessage(tx store.Tx, sid string, msg map[string]any) error {
	raw, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return tx.AppendSessionItem(s.InstanceName(), sid, store.ItemMessage, msg["id"].(string), raw)
}

// NewMessage is a message record of a type, created now.
func (s *Service) NewMessage(typ string, now int64) map[string]any {
	return map[string]any{"id": s.NewID("msg"), "type": typ, "time": map[string]any{"created": now}}
}

package permission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Request is a pending permission request, PermissionRequest on the wire:
// a tool call of a session waits on it until a person replies.
type Request struct {
	ID         string         `json:"id"`
	SessionID  string         `json:"sessionID"`
	Permission string         `json:"permission"`
	Patterns   []string       `json:"patterns"`
	Metadata   map[string]any `json:"metadata"`
	// Always are the patterns an "always" reply allows for the rest of the
	// session.
	Always []string `json:"always"`
	Tool   *ToolRef `json:"tool,omitempty"`
	// Unknown are those of Patterns that stand for resources not known
	// before the call runs (see EvaluateAny); a recheck after another
	// request's "always" reply allows them only as EvaluateRequest does.
	Unknown []string `json:"-"`
}

// ToolRef is the tool call a request or form belongs to.
type ToolRef struct {
	MessageID string `json:"messageID"`
	CallID    string `json:"callID"`
}

// The replies to a permission request.
const (
	Once   = "once"
	Always = "always"
	Reject = "reject"
)

// Reply is how a request was settled. Cancelled, when set, says why no
// one answered it (the session was interrupted or removed, or its
// location reloaded); such a reply rejects.
type Reply struct {
	Kind      string
	Message   string
	Cancelled string
}

// Question is one question of a form.
type Question struct {
	Question string   `json:"question"`
	Header   string   `json:"header"`
	Options  []Option `json:"options"`
	Multiple bool     `json:"multiple,omitempty"`
	// Custom allows a typed answer besides the options (default true).
	Custom *bool `json:"custom,omitempty"`
}

// Option is a choice of a question.
type Option struct {
	Label       string `json:"label"`
	Description string `json:"description"`
}

// Form is a pending form, QuestionRequest on the wire: a question tool
// call waits on it until it is answered or rejected.
type Form struct {
	ID        string     `json:"id"`
	SessionID string     `json:"sessionID"`
	Questions []Question `json:"questions"`
	Tool      *ToolRef   `json:"tool,omitempty"`
}

// The broker's errors.
var (
	// ErrNotFound: no pending request or form has the id (for the
	// session, when one is named).
	ErrNotFound = errors.New("not found")
	// ErrSettled: the request or form was already answered, rejected or
	// cancelled.
	ErrSettled = errors.New("already settled")
)

// InvalidAnswerError is an answer that does not fit its form.
type InvalidAnswerError struct{ Reason string }

func (e *InvalidAnswerError) Error() string { return e.Reason }

// Broker holds the pending requests and forms of an instance's sessions
// in this process. They are not stored: a restart, like a reload of their
// location, cancels them and the tool call that waited fails.
type Broker struct {
	// Publish announces an event of a session in a location directory.
	Publish func(sessionID, directory, typ string, data map[string]any)
	// NewID returns a new id with the prefix ("per" or "que").
	NewID func(prefix string) string

	mu      sync.Mutex
	perms   map[string]*pendingPerm
	forms   map[string]*pendingForm
	settled map[string]string // settled id → its session
	order   []string          // settled ids, oldest first (bounded)
}

type pendingPerm struct {
	req  Request
	dir  string
	done chan Reply
}

type pendingForm struct {
	form Form
	dir  string
	done chan formResult
}

type formResult struct {
	answers   [][]string
	rejected  bool
	cancelled string
}

const maxSettled = 4096

// NewBroker returns an empty broker.
func NewBroker(publish func(sessionID, directory, typ string, data map[string]any), newID func(prefix string) string) *Broker {
	return &Broker{Publish: publish, NewID: newID, perms: map[string]*pendingPerm{}, forms: map[string]*pendingForm{}, settled: map[string]string{}}
}

func (b *Broker) publish(sid, dir, typ string, data map[string]any) {
	if b.Publish != nil {
		b.Publish(sid, dir, typ, data)
	}
}

// settleLocked remembers a settled id, so that a late answer is told it
// came too late rather than that the id is unknown.
func (b *Broker) settleLocked(id, sessionID string) {
	b.settled[id] = sessionID
	b.order = append(b.order, id)
	if len(b.order) > maxSettled {
		delete(b.settled, b.order[0])
		b.order = b.order[1:]
	}
}

// missingLocked is why an id is not pending: ErrSettled when it was
// settled (for the session named, if any), else ErrNotFound.
func (b *Broker) missingLocked(id, sessionID string) error {
	if sid, ok := b.settled[id]; ok && (sessionID == "" || sid == sessionID) {
		return ErrSettled
	}
	return ErrNotFound
}

// Ask registers a request of a session in directory and waits for its
// reply; ctx ending (an interrupt) cancels it.
func (b *Broker) Ask(ctx context.Context, directory string, req Request) Reply {
	req.ID = b.NewID("per")
	if req.Metadata == nil {
		req.Metadata = map[string]any{}
	}
	if req.Always == nil {
		req.Always = []string{}
	}
	p := &pendingPerm{req: req, dir: directory, done: make(chan Reply, 1)}
	b.mu.Lock()
	b.perms[req.ID] = p
	b.mu.Unlock()
	b.publish(req.SessionID, directory, "permission.asked", requestEvent(req))
	select {
	case r := <-p.done:
		return r
	case <-ctx.Done():
		b.cancelPerm(req.ID, "interrupted")
		return <-p.done
	}
}

func requestEvent(r Request) map[string]any {
	m := map[string]any{"id": r.ID, "permission": r.Permission, "patterns": r.Patterns, "metadata": r.Metadata, "always": r.Always}
	if r.Tool != nil {
		m["tool"] = r.Tool
	}
	return m
}

// cancelPerm settles a pending request as cancelled (no-op when it is
// settled already).
func (b *Broker) cancelPerm(id, why string) {
	b.mu.Lock()
	p, ok := b.perms[id]
	if ok {
		delete(b.perms, id)
		b.settleLocked(id, p.req.SessionID)
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	p.done <- Reply{Kind: Reject, Cancelled: why}
	b.publish(p.req.SessionID, p.dir, "permission.replied", map[string]any{"requestID": id, "reply": Reject, "cancelled": why})
}

// Reply settles a pending request: once, always or reject (with an
// optional message for the model). A reject rejects the session's other
// pending requests too. sessionID, when set, must be the request's.
func (b *Broker) Reply(id, sessionID, kind, message string) error {
	if kind != Once && kind != Always && kind != Reject {
		return &InvalidAnswerError{Reason: "reply must be once, always or reject"}
	}
	b.mu.Lock()
	p, ok := b.perms[id]
	if !ok || (sessionID != "" && p.req.SessionID != sessionID) {
		err := b.missingLocked(id, sessionID)
		b.mu.Unlock()
		return err
	}
	delete(b.perms, id)
	b.settleLocked(id, p.req.SessionID)
	var others []*pendingPerm
	if kind == Reject {
		for oid, o := range b.perms {
			if o.req.SessionID == p.req.SessionID {
				delete(b.perms, oid)
				b.settleLocked(oid, o.req.SessionID)
				others = append(others, o)
			}
		}
	}
	b.mu.Unlock()
	p.done <- Reply{Kind: kind, Message: message}
	b.publish(p.req.SessionID, p.dir, "permission.replied", map[string]any{"requestID": id, "reply": kind})
	for _, o := range others {
		o.done <- Reply{Kind: Reject}
		b.publish(o.req.SessionID, o.dir, "permission.replied", map[string]any{"requestID": o.req.ID, "reply": Reject})
	}
	return nil
}

// Recheck settles, with "always", the session's pending requests that
// allowed now says may run (after an "always" reply added rules).
func (b *Broker) Recheck(sessionID string, allowed func(Request) bool) {
	b.mu.Lock()
	var ok []*pendingPerm
	for id, p := range b.perms {
		if p.req.SessionID == sessionID && allowed(p.req) {
			delete(b.perms, id)
			b.settleLocked(id, sessionID)
			ok = append(ok, p)
		}
	}
	b.mu.Unlock()
	for _, p := range ok {
		p.done <- Reply{Kind: Always}
		b.publish(p.req.SessionID, p.dir, "permission.replied", map[string]any{"requestID": p.req.ID, "reply": Always})
	}
}

// Permissions lists the pending requests, of one session when sessionID
// is set, oldest first.
func (b *Broker) Permissions(sessionID string) []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return listPending(b.perms, sessionID, func(p *pendingPerm) (Request, string, string) { return p.req, p.req.SessionID, p.req.ID })
}

// listPending returns the records of pending entries of one session (all
// when sessionID is empty), in id order (ids ascend with time).
func listPending[P, R any](m map[string]P, sessionID string, record func(P) (r R, sid, id string)) []R {
	type entry struct {
		r  R
		id string
	}
	entries := []entry{}
	for _, p := range m {
		if r, sid, id := record(p); sessionID == "" || sid == sessionID {
			entries = append(entries, entry{r, id})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.id, b.id) })
	out := make([]R, len(entries))
	for i, e := range entries {
		out[i] = e.r
	}
	return out
}

// AskForm registers a form of a session in directory and waits for its
// answers (one list of chosen labels or typed text per question).
// Rejected reports a dismissal; cancelled says why no one answered.
func (b *Broker) AskForm(ctx context.Context, directory string, f Form) (answers [][]string, rejected bool, cancelled string) {
	f.ID = b.NewID("que")
	p := &pendingForm{form: f, dir: directory, done: make(chan formResult, 1)}
	b.mu.Lock()
	b.forms[f.ID] = p
	b.mu.Unlock()
	ev := map[string]any{"id": f.ID, "questions": f.Questions}
	if f.Tool != nil {
		ev["tool"] = f.Tool
	}
	b.publish(f.SessionID, directory, "question.asked", ev)
	var r formResult
	select {
	case r = <-p.done:
	case <-ctx.Done():
		b.cancelForm(f.ID, "interrupted")
		r = <-p.done
	}
	return r.answers, r.rejected, r.cancelled
}

func (b *Broker) cancelForm(id, why string) {
	b.mu.Lock()
	p, ok := b.forms[id]
	if ok {
		delete(b.forms, id)
		b.settleLocked(id, p.form.SessionID)
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	p.done <- formResult{rejected: true, cancelled: why}
	b.publish(p.form.SessionID, p.dir, "question.rejected", map[string]any{"requestID": id, "cancelled": why})
}

// takeForm removes a pending form for an answer or a rejection.
func (b *Broker) takeForm(id, sessionID string, check func(Form) error) (*pendingForm, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.forms[id]
	if !ok || (sessionID != "" && p.form.SessionID != sessionID) {
		return nil, b.missingLocked(id, sessionID)
	}
	if check != nil {
		if err := check(p.form); err != nil {
			return nil, err
		}
	}
	delete(b.forms, id)
	b.settleLocked(id, p.form.SessionID)
	return p, nil
}

// Answer settles a pending form with its answers: one list per question,
// each a choice's label or (when the question allows it) typed text; a
// question that is not multiple takes at most one.
func (b *Broker) Answer(id, sessionID string, answers [][]string) error {
	p, err := b.takeForm(id, sessionID, func(f Form) error { return validAnswers(f, answers) })
	if err != nil {
		return err
	}
	p.done <- formResult{answers: answers}
	b.publish(p.form.SessionID, p.dir, "question.replied", map[string]any{"requestID": id, "answers": answers})
	return nil
}

// RejectForm dismisses a pending form.
func (b *Broker) RejectForm(id, sessionID string) error {
	p, err := b.takeForm(id, sessionID, nil)
	if err != nil {
		return err
	}
	p.done <- formResult{rejected: true}
	b.publish(p.form.SessionID, p.dir, "question.rejected", map[string]any{"requestID": id})
	return nil
}

func validAnswers(f Form, answers [][]string) error {
	if len(answers) != len(f.Questions) {
		return &InvalidAnswerError{Reason: fmt.Sprintf("expected %d answers (one per question), got %d", len(f.Questions), len(answers))}
	}
	for i, q := range f.Questions {
		a := answers[i]
		if len(a) > 1 && !q.Multiple {
			return &InvalidAnswerError{Reason: fmt.Sprintf("question %d takes one answer, got %d", i+1, len(a))}
		}
		for _, v := range a {
			if v == "" {
				return &InvalidAnswerError{Reason: fmt.Sprintf("question %d has an empty answer", i+1)}
			}
			if q.Custom != nil && !*q.Custom && !slices.ContainsFunc(q.Options, func(o Option) bool { return o.Label == v }) {
				return &InvalidAnswerError{Reason: fmt.Sprintf("question %d allows only its options, not %q", i+1, v)}
			}
		}
	}
	return nil
}

// Forms lists the pending forms, of one session when sessionID is set,
// oldest first.
func (b *Broker) Forms(sessionID string) []Form {
	b.mu.Lock()
	defer b.mu.Unlock()
	return listPending(b.forms, sessionID, func(p *pendingForm) (Form, string, string) { return p.form, p.form.SessionID, p.form.ID })
}

// Cancel cancels the pending requests and forms of a session (sessionID
// set) or of every session in a location directory (directory set), or
// all of them (neither): why is "interrupted", "removed", "reloaded" or
// "shutdown", and each cancellation is published.
func (b *Broker) Cancel(sessionID, directory, why string) {
	match := func(sid, dir string) bool {
		return (sessionID == "" || sid == sessionID) && (directory == "" || dir == directory)
	}
	b.mu.Lock()
	var perms, forms []string
	for id, p := range b.perms {
		if match(p.req.SessionID, p.dir) {
			perms = append(perms, id)
		}
	}
	for id, p := range b.forms {
		if match(p.form.SessionID, p.dir) {
			forms = append(forms, id)
		}
	}
	b.mu.Unlock()
	for _, id := range perms {
		b.cancelPerm(id, why)
	}
	for _, id := range forms {
		b.cancelForm(id, why)
	}
}

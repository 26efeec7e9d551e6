// Package loop runs the agent of an instance's sessions: one drain per
// session takes admitted inputs at their delivery boundaries, runs
// provider turns through the formats client and stores what they produce;
// drain leases keep one drain per session across processes sharing a
// store.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/ids"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/instance/plugins"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/tools"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// ProviderConfig is where the session drain sends provider turns.
type ProviderConfig struct {
	// BaseURL is the OpenAI-style base URL; a Chat Completions turn posts
	// to BaseURL + "/chat/completions" (for the workspace gateway:
	// http://host:port/custom/<connection>).
	BaseURL string
	// Connection, when BaseURL is empty, names a gateway connection of the
	// same process: the base URL becomes http://<local address>/custom/<id>
	// once the server has learnt its own address (LearnAddr).
	Connection string
	// APIKey is sent as "Authorization: Bearer <key>". Never logged.
	APIKey string
	// Format is the wire format; only "chat" (Chat Completions) is made.
	Format string
	// Model is the model id used when neither the session nor its agent
	// names one.
	Model string
	// TitleModel, when set, is the model that titles sessions (a small,
	// cheap one) unless the title agent names its own; by default the
	// session's model does. In a workspace it is a workspace model id.
	TitleModel string
	// InputPrice and OutputPrice are USD per million tokens; a turn's cost
	// is 0 when they are 0.
	InputPrice, OutputPrice money.Micros
	// Client sends the requests (default: no overall timeout).
	Client *http.Client
	// Limits are models' token limits by model id: a request's output
	// limit, and when to compact the conversation.
	Limits map[string]ModelLimits
	// Workspace, when set, makes the instance a member of a workspace:
	// turns go to its models through the gateway in-process, and the
	// fields above but Model (the default model) are set per step from
	// the model the session uses.
	Workspace Workspace
	// Pricing, when set, prices turns instead of InputPrice and
	// OutputPrice (a workspace model's full pricing).
	Pricing *store.Pricing

	// fail is why the step cannot be sent (resolveProvider).
	fail *StructuredError
}

// Runner owns the session drains of one instance in this process: at most
// one drain per session. It outlives configuration reloads: Attach hands
// it the current session service, and each step reads fresh services
// from it.
type Runner struct {
	mu      sync.Mutex
	srv     *session.Service
	prov    ProviderConfig
	cfgGen  uint64 // counts the changes of srv, prov, tools and plugins (Snapshot)
	drains  map[string]*drain
	ctx     context.Context
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup
	resumed bool
	closed  bool
	addr    string // learnt local address, for Connection
	node    string // this process's drain-lease holder id
	tools   ToolConfig
	broker  *permission.Broker
	plugins *plugins.Manager
	// waiters are closed when the session's drain ends (a task tool
	// waiting on its child session).
	waiters map[string][]chan struct{}
	// titling counts the title requests running, by session.
	titling map[string]int
}

type drain struct {
	pending     bool               // a wake arrived since the drain last looked
	cancelTurn  context.CancelFunc // cancels the running turn
	interrupted bool
}

// NewRunner returns a runner with no server yet.
func NewRunner() *Runner {
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &Runner{drains: map[string]*drain{}, ctx: ctx, cancel: cancel, node: newNodeID(), waiters: map[string][]chan struct{}{},
		titling: map[string]int{}}
	r.broker = permission.NewBroker(r.publishPending, func(prefix string) string { return ids.New(prefix, false, time.Now()) })
	return r
}

// publishPending announces a permission or form event on the bus of the
// attached session service.
func (r *Runner) publishPending(sessionID, directory, typ string, data map[string]any) {
	s := r.server()
	if s.Service == nil || s.Bus == nil {
		return
	}
	data["sessionID"] = sessionID
	s.Bus.Publish(typ, &events.LocationRef{Directory: directory}, data)
}

// SetProvider replaces the provider configuration; turns that start later
// use it.
func (r *Runner) SetProvider(p ProviderConfig) {
	r.mu.Lock()
	r.prov = p
	r.cfgGen++
	r.mu.Unlock()
}

// Provider is the provider configuration turns use now, its base URL
// resolved from the connection once the local address is known.
func (r *Runner) Provider() ProviderConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.prov
	if p.BaseURL == "" && p.Connection != "" && r.addr != "" {
		p.BaseURL = "http://" + r.addr + "/custom/" + url.PathEscape(p.Connection)
	}
	return p
}

// ProviderBaseURL is the base URL turns go to now ("" when not known yet).
func (r *Runner) ProviderBaseURL() string { return r.Provider().BaseURL }

// Addr is the instance's own address as learnt from a request ("" until
// one came).
func (r *Runner) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// LearnAddr records the local address (host:port) the instance is served
// on; a provider given by connection id needs it. The first call with
// a loopback-reachable address wins.
func (r *Runner) LearnAddr(addr string) {
	r.mu.Lock()
	if r.addr != "" || addr == "" {
		r.mu.Unlock()
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		r.mu.Unlock()
		return
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	r.addr = net.JoinHostPort(host, port)
	r.mu.Unlock()
	r.tryResume()
}

// ready reports whether turns have an endpoint.
func (r *Runner) readyLocked() bool {
	return r.srv != nil && (r.prov.BaseURL != "" || r.prov.Connection == "" || r.addr != "")
}

// Attach makes s the session service the drains use; the first attach
// with a usable endpoint resumes admitted but unprocessed inputs.
func (r *Runner) Attach(s *session.Service) {
	r.mu.Lock()
	r.srv = s
	r.cfgGen++
	r.mu.Unlock()
	r.tryResume()
}

func (r *Runner) tryResume() {
	r.mu.Lock()
	if r.resumed || r.closed || !r.readyLocked() {
		r.mu.Unlock()
		return
	}
	r.resumed = true
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.Resume()
		r.sweep()
	}()
}

// sweep resumes, every LeaseTTL, the sessions with work left whose drain
// lease has expired (their node died); only when other processes share
// the store.
func (r *Runner) sweep() {
	t := time.NewTicker(LeaseTTL)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			if s := r.server(); s.Service != nil && s.Shared(r.ctx) {
				r.Resume()
			}
		}
	}
}

// svc is the session service with the loop's steps on it.
type svc struct{ *session.Service }

func (r *Runner) server() svc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return svc{r.srv}
}

// Close stops every drain (running turns end as interrupted, without
// being stored) and waits for them.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel(errShutdown)
	r.broker.Cancel("", "", "shutdown")
	r.wg.Wait()
}

// Resume schedules every session that has pending inbox items or an
// unanswered user message.
func (r *Runner) Resume() {
	s := r.server()
	var todo []string
	for attempt := 0; attempt < 50; attempt++ {
		todo = todo[:0]
		err := s.ReadTx(r.ctx, func(tx store.Tx) error {
			todo = todo[:0]
			return tx.ListInstanceSessions(s.InstanceName(), store.SessionScan{}, func(rec *store.InstanceSession) (bool, error) {
				w, err := s.nextWork(tx, rec.ID, true)
				if err != nil {
					s.Logger.Warn("drain: cannot read session", zap.String("session", rec.ID), zap.Error(err))
					return true, nil
				}
				if w != nil {
					todo = append(todo, rec.ID)
				}
				return true, nil
			})
		})
		if err == nil {
			break
		}
		if r.ctx.Err() != nil {
			return
		}
		select { // the store may not be open yet
		case <-time.After(100 * time.Millisecond):
		case <-r.ctx.Done():
			return
		}
	}
	for _, id := range todo {
		r.Schedule(id)
	}
}

// Schedule wakes the drain of a session, starting it when none runs.
func (r *Runner) Schedule(sid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.srv == nil {
		return
	}
	if d, ok := r.drains[sid]; ok {
		d.pending = true
		return
	}
	d := &drain{pending: true}
	r.drains[sid] = d
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.loop(sid, d)
	}()
}

// Interrupt stops the running turn of a session, if any; it reports
// whether one was running.
func (r *Runner) Interrupt(sid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.drains[sid]
	if !ok || d.cancelTurn == nil {
		return false
	}
	d.interrupted = true
	d.cancelTurn()
	return true
}

// Active lists the sessions whose drain runs.
func (r *Runner) Active() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.drains))
	for id := range r.drains {
		out = append(out, id)
	}
	return out
}

// IsActive reports whether the session's drain runs.
func (r *Runner) IsActive(sid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.drains[sid]
	return ok
}

// Wait returns when the session's drain in this process has ended (at
// once when none runs), or with ctx's error.
func (r *Runner) Wait(ctx context.Context, sid string) error {
	r.mu.Lock()
	if _, ok := r.drains[sid]; !ok {
		r.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	r.waiters[sid] = append(r.waiters[sid], done)
	r.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Runner) loop(sid string, d *drain) {
	s := r.server()
	defer func() {
		if v := recover(); v != nil {
			s.Logger.Error("drain panicked", zap.String("session", sid), zap.Any("panic", v))
			r.mu.Lock()
			r.endLocked(sid)
			r.mu.Unlock()
		}
	}()
	end := func() {
		r.mu.Lock()
		r.endLocked(sid)
		r.mu.Unlock()
	}
	// Another node may hold the session: it drains what this one stored.
	if ok, err := s.claimDrain(r.ctx, sid, r.node); err != nil || !ok {
		if err != nil && r.ctx.Err() == nil {
			s.Logger.Warn("drain: cannot claim the session", zap.String("session", sid), zap.Error(err))
		}
		end()
		return
	}
	renewDone := make(chan struct{})
	defer close(renewDone)
	go r.renew(sid, renewDone)
	s.PublishStatus(sid, "busy")
	for {
		r.mu.Lock()
		d.pending = false
		r.mu.Unlock()
		ran, err := r.run(sid, d)
		if err != nil && r.ctx.Err() == nil {
			s.Logger.Warn("drain stopped", zap.String("session", sid), zap.Error(err))
		}
		if r.ctx.Err() == nil && err == nil && !ran {
			// Give the lease up only if nothing was stored meanwhile (here
			// or by another node); otherwise keep draining.
			pending, rerr := r.server().releaseDrain(r.ctx, sid, r.node)
			if rerr == nil && pending {
				continue
			}
		}
		r.mu.Lock()
		if r.ctx.Err() != nil || err != nil || (!ran && !d.pending) {
			r.endLocked(sid)
			r.mu.Unlock()
			if r.ctx.Err() != nil || err != nil {
				// Stopping or failing: let another node take over at once.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r.server().releaseLease(ctx, sid, r.node)
				cancel()
			}
			r.server().PublishStatus(sid, "idle")
			return
		}
		r.mu.Unlock()
		// A local wake after the lease was given up: take it again.
		if ok, err := r.server().claimDrain(r.ctx, sid, r.node); err != nil || !ok {
			end()
			r.server().PublishStatus(sid, "idle")
			return
		}
	}
}

// endLocked forgets a session's drain and wakes those waiting for it.
func (r *Runner) endLocked(sid string) {
	delete(r.drains, sid)
	for _, ch := range r.waiters[sid] {
		close(ch)
	}
	delete(r.waiters, sid)
}

// renew keeps a running drain's lease until done is closed.
func (r *Runner) renew(sid string, done chan struct{}) {
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
			if ok, err := r.server().claimDrain(r.ctx, sid, r.node); err == nil && !ok {
				r.server().Logger.Warn("drain: the session's lease was taken by another node", zap.String("session", sid))
			}
		}
	}
}

// work is the next thing a drain does.
type work struct {
	kind  string // "user", "move", "turn" (a step awaiting its answer) or "tools" (a step's tool calls)
	id    string
	raw   json.RawMessage
	steer bool
}

// A "turn" inbox item marks a provider step in progress: it is written
// with the user message it answers and replaced by the assistant message
// (same id) when the step settles, so a restart re-runs exactly the steps
// that never settled. A "tools" item marks a settled step's tool calls
// being run: written with the step's message (its calls stored as
// running), it becomes the "turn" of the next step once they settle, or
// the run's idle message when the run stops there. A restart that finds
// one settles the calls still running as interrupted: no call runs twice.

// nextWork finds the next work item: a step in progress first; then, when
// idle, the oldest inbox item; in a running turn (idle false), the oldest
// steer item only.
func (s svc) nextWork(tx store.Tx, sid string, idle bool) (*work, error) {
	var next, turn *work
	err := tx.SessionItems(s.InstanceName(), sid, store.ItemInbox, func(raw []byte) (bool, error) {
		var h struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal(raw, &h); err != nil {
			return true, nil // unreadable: skip
		}
		steer := h.Delivery != "queue"
		switch {
		case h.Type == "turn" || h.Type == "tools":
			turn = &work{kind: h.Type, id: h.ID, raw: raw}
			return false, nil
		case h.Type != "user" && h.Type != "move" && h.Type != "compaction":
		case next == nil && (idle || steer):
			next = &work{kind: h.Type, id: h.ID, raw: raw, steer: steer}
		}
		return true, nil
	})
	if turn != nil {
		return turn, err
	}
	return next, err
}

// run performs one run: an idle-time input and the steer inputs taken at
// its step boundaries, and the steps and tool calls that answer them. It
// reports whether there was anything to do.
func (r *Runner) run(sid string, d *drain) (bool, error) {
	ctx := r.ctx
	outcome := ""
	steps := 0
	idleID := "" // a tools marker that becomes the run's idle message
loop:
	for {
		s := r.server() // fresh services at every step boundary
		var w *work
		if err := s.ReadTx(ctx, func(tx store.Tx) (err error) {
			if _, err = s.Info(tx, sid); err != nil {
				return err
			}
			w, err = s.nextWork(tx, sid, outcome == "")
			return err
		}); session.Gone(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if w == nil {
			break
		}
		if outcome == "" {
			outcome = "succeeded"
			if w.kind == "turn" || w.kind == "tools" {
				// A run resumed after a restart: the title request of its
				// first prompt may have been cut by the stop.
				r.startTitle(sid, "")
			}
		}
		stepID := w.id
		switch w.kind {
		case "move":
			if err := s.applyMove(ctx, sid, w); session.Gone(err) {
				return true, nil
			} else if err != nil {
				return true, err
			}
			continue
		case "user":
			var err error
			if stepID, err = s.deliverUser(ctx, sid, w); session.Gone(err) {
				return true, nil
			} else if err != nil {
				return true, err
			}
			r.chatMessage(ctx, s, sid, w.raw)
			r.startTitle(sid, w.id)
		case "compaction":
			if interrupted, err := r.compactNow(ctx, d, s, sid, w.id); session.Gone(err) {
				return true, nil
			} else if err != nil {
				return true, err
			} else if interrupted {
				outcome = "interrupted"
				break loop
			}
			continue
		case "tools":
			// A restart met calls that were running: they are not run again.
			if err := s.settleInterrupted(ctx, sid, w); session.Gone(err) {
				return true, nil
			} else if err != nil {
				return true, err
			}
			if err := s.nextStep(ctx, sid, w.id); err != nil {
				return true, err
			}
			continue
		}
		turnCtx, cancel := context.WithCancel(ctx)
		r.mu.Lock()
		d.cancelTurn, d.interrupted = cancel, false
		r.mu.Unlock()
		res, batch, stop, err := r.step(turnCtx, s, sid, stepID, steps)
		r.mu.Lock()
		interrupted := d.interrupted
		d.cancelTurn = nil
		r.mu.Unlock()
		cancel()
		if session.Gone(err) {
			return true, nil
		}
		if err != nil {
			return true, err
		}
		steps++
		if r.ctx.Err() != nil {
			return true, nil // shutting down: the next start resumes
		}
		if batch != nil {
			next := !interrupted && !stop
			if err := s.settleTools(ctx, batch, res.toolsMarker, next); session.Gone(err) {
				return true, nil
			} else if err != nil {
				return true, err
			}
			if !next {
				idleID = res.toolsMarker // the run ends here
			}
		}
		if interrupted {
			outcome = "interrupted"
			break
		}
		if res.outcome == "failed" {
			outcome = "failed"
			break
		}
		if stop {
			break
		}
	}
	if outcome == "" {
		return false, nil
	}
	return true, r.server().settleRun(ctx, sid, outcome, idleID)
}

// compactNow runs a requested compaction (the inbox item id), which the
// session's interrupt stops like a step.
func (r *Runner) compactNow(ctx context.Context, d *drain, s svc, sid, id string) (interrupted bool, err error) {
	st, err := s.readStep(ctx, sid)
	if err != nil {
		return false, err
	}
	turnCtx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	d.cancelTurn, d.interrupted = cancel, false
	r.mu.Unlock()
	prov := s.resolveProvider(turnCtx, r.Provider(), st.info)
	sp := r.sessionPlugins(s, st.info)
	if sp != nil {
		sp.model = modelInfo(prov, modelOf(prov, st.info, s.resolveAgent(st.info)))
	}
	_, interrupted, err = s.compact(turnCtx, prov, sid, st.info, st.msgs, "manual", id, sp)
	r.mu.Lock()
	interrupted = interrupted || d.interrupted
	d.cancelTurn = nil
	r.mu.Unlock()
	cancel()
	if interrupted && err == nil {
		// The request is dropped: an interrupted compaction is not retried.
		err = s.WriteTx(context.WithoutCancel(ctx), func(tx store.Tx) error {
			return tx.MoveSessionItem(s.InstanceName(), sid, id, store.ItemMessage, mustJSON(map[string]any{"id": id, "type": "compaction",
				"reason": "manual", "status": "failed", "error": StructuredError{Type: "MessageAbortedError", Message: "The compaction was interrupted"},
				"time": map[string]any{"created": s.NowMS(), "completed": s.NowMS()}}))
		})
	}
	return interrupted, err
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// step compacts the conversation when the next request would not fit,
// runs one provider step and then the tool calls it made (batch, whose
// results settleTools stores). stop reports that the user rejected a
// permission or dismissed a question: the run ends there.
func (r *Runner) step(ctx context.Context, s svc, sid, stepID string, done int) (res stepResult, batch *toolBatch, stop bool, err error) {
	st, err := s.readStep(ctx, sid)
	if err != nil {
		return stepResult{}, nil, false, err
	}
	prov := s.resolveProvider(ctx, r.Provider(), st.info)
	sp := r.sessionPlugins(s, st.info)
	if sp != nil {
		sp.model = modelInfo(prov, modelOf(prov, st.info, s.resolveAgent(st.info)))
	}
	compacted, interrupted, err := s.compactIfNeeded(ctx, prov, sid, st.info, st.msgs, sp)
	if err != nil || interrupted {
		return stepResult{outcome: "interrupted"}, nil, false, err
	}
	if compacted {
		// The turn reads the session again, the summary included.
		if st, err = s.readStep(ctx, sid); err != nil {
			return stepResult{}, nil, false, err
		}
	}
	info := st.info
	agent := s.resolveAgent(info)
	limit := agent.Steps
	if limit <= 0 {
		limit = r.toolConfig().MaxSteps
	}
	if limit <= 0 {
		limit = defaultMaxSteps
	}
	env := r.toolEnv(s, info, agent)
	policy := r.rulePolicy(s, env.Project, agent)
	var offered []formats.Tool
	hidden := hiddenTools(policy.With(permission.Set{Source: permission.Trusted, Rules: info.Permissions}))
	for _, t := range tools.Definitions(env, hidden) {
		offered = append(offered, formats.Tool{Name: t.Name, Description: t.Description, Schema: t.Schema})
	}
	offered = sp.offer(ctx, offered, hidden)
	offered = sp.definitions(ctx, offered)
	opts := stepOptions{last: done+1 >= limit, tools: offered}
	if sp != nil {
		opts.transform = func(units []convUnit, model agents.ModelRef, conv *formats.Conversation) {
			sp.transformMessages(ctx, info, units, model, conv)
		}
		opts.prepare = func(conv *formats.Conversation, model agents.ModelRef) {
			sp.systemTransform(ctx, sid, conv)
			sp.chatParams(ctx, sid, agent.ID, model, conv)
		}
		opts.textComplete = func(msgID, text string) string { return sp.textComplete(ctx, sid, msgID, text) }
	}
	res, err = s.turn(ctx, prov, sid, stepID, opts, st)
	if err != nil || res.toolsMarker == "" || ctx.Err() != nil {
		return res, nil, false, err
	}
	snap := beginSnapshot(ctx, s, info, res.msg)
	batch, stop = r.runTools(ctx, s, info, stepID, res.msg, env, policy, sp)
	if snap != nil && !errors.Is(context.Cause(ctx), errShutdown) {
		snap.end(ctx, s, sid)
		batch.snap = &snap.rec
	}
	return res, batch, stop, nil
}

// defaultMaxSteps bounds a run's provider steps when neither the agent
// nor the instance sets a limit.
const defaultMaxSteps = 100

// nextStep turns a settled step's tools marker into the marker of the
// step that reads their results (same id: the next assistant message's).
func (s svc) nextStep(ctx context.Context, sid, marker string) error {
	raw, err := json.Marshal(map[string]any{"id": marker, "sessionID": sid, "type": "turn", "time": map[string]any{"created": s.NowMS()}})
	if err != nil {
		return err
	}
	return s.WriteTx(ctx, func(tx store.Tx) error {
		return tx.MoveSessionItem(s.InstanceName(), sid, marker, store.ItemInbox, raw)
	})
}

// settleInterrupted settles, as interrupted, the tool calls of a tools
// marker's message that were running when the process stopped.
func (s svc) settleInterrupted(ctx context.Context, sid string, w *work) error {
	var m struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(w.raw, &m); err != nil {
		return err
	}
	var info *session.Info
	var changed *assistantMsg
	var failed []*toolPart
	now := s.NowMS()
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		var raw []byte
		err = tx.SessionItems(s.InstanceName(), sid, store.ItemMessage, func(r []byte) (bool, error) {
			var h session.MessageHeader
			if json.Unmarshal(r, &h) == nil && h.ID == m.Message {
				raw = r
				return false, nil
			}
			return true, nil
		})
		if err != nil || raw == nil {
			return err
		}
		msg, err := decodeAssistant(raw)
		if err != nil {
			return err
		}
		failed = failed[:0]
		for _, p := range msg.tools {
			if !p.settled() {
				p.fail("ToolInterruptedError", "The server stopped while this tool call ran; it was not run again and its effects, if any, are unknown", now)
				failed = append(failed, p)
			}
		}
		if len(failed) == 0 {
			return nil
		}
		out, err := msg.encode()
		if err != nil {
			return err
		}
		changed = msg
		return tx.MoveSessionItem(s.InstanceName(), sid, m.Message, store.ItemMessage, out)
	})
	if err == nil && changed != nil {
		evs := make([]session.Ev, 0, len(failed))
		for _, p := range failed {
			typ, data := settledEvent(m.Message, p)
			evs = append(evs, session.Ev{Type: typ, Data: data})
		}
		s.PublishEvents(info, evs...)
	}
	return err
}

// settleTools stores a step's tool results in one write. With next, the
// same write delivers the steer inputs admitted meanwhile as user
// messages (read with the results) and turns the tools marker into the
// marker of the step that reads them; without, the marker stays for the
// run's idle message.
func (s svc) settleTools(ctx context.Context, b *toolBatch, marker string, next bool) error {
	b.flush()
	b.mu.Lock()
	if b.snap != nil {
		b.msg.fields["snapshot"] = mustJSON(b.snap)
	}
	raw, err := b.msg.encode()
	b.mu.Unlock()
	if err != nil {
		return err
	}
	now := s.NowMS()
	var info *session.Info
	var delivered []*session.InboxUser
	err = s.WriteTx(context.WithoutCancel(ctx), func(tx store.Tx) (err error) {
		delivered = delivered[:0]
		if info, err = s.Info(tx, b.sid); err != nil {
			return err
		}
		if err := tx.MoveSessionItem(s.InstanceName(), b.sid, b.msgID, store.ItemMessage, raw); err != nil {
			return err
		}
		if !next {
			return nil
		}
		var steers []session.InboxUser
		err = tx.SessionItems(s.InstanceName(), b.sid, store.ItemInbox, func(item []byte) (bool, error) {
			var u session.InboxUser
			if json.Unmarshal(item, &u) == nil && u.Type == "user" && u.Delivery != "queue" {
				steers = append(steers, u)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		for i := range steers {
			u := &steers[i]
			m, err := json.Marshal(userMessage(u, now))
			if err != nil {
				return err
			}
			if err := tx.MoveSessionItem(s.InstanceName(), b.sid, u.ID, store.ItemMessage, m); err != nil {
				return err
			}
			delivered = append(delivered, u)
		}
		turn, err := json.Marshal(map[string]any{"id": marker, "sessionID": b.sid, "type": "turn", "time": map[string]any{"created": now}})
		if err != nil {
			return err
		}
		if err := tx.MoveSessionItem(s.InstanceName(), b.sid, marker, store.ItemInbox, turn); err != nil {
			return err
		}
		info.Time.Updated = max(now, info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return err
	}
	if b.snap != nil {
		s.Publish("session.next.step.snapshot", info, map[string]any{"assistantMessageID": b.msgID, "snapshot": b.snap})
	}
	if len(delivered) > 0 {
		evs := make([]session.Ev, 0, len(delivered))
		for _, u := range delivered {
			evs = append(evs, promptedEvent(u))
		}
		s.PublishEvents(info, evs...)
	}
	return nil
}

// promptedEvent announces an admitted prompt delivered as a user message.
func promptedEvent(u *session.InboxUser) session.Ev {
	return session.Ev{Type: "session.next.prompted", Data: map[string]any{"messageID": u.ID, "prompt": session.PromptOf(u), "delivery": u.Delivery}}
}

// userMessage is the user message of an admitted input.
func userMessage(item *session.InboxUser, now int64) map[string]any {
	msg := map[string]any{"id": item.ID, "type": "user", "text": item.Payload.Text,
		"time": map[string]any{"created": now}}
	if len(item.Payload.Files) > 0 {
		msg["files"] = item.Payload.Files
	}
	if len(item.Payload.Agents) > 0 {
		msg["agents"] = item.Payload.Agents
	}
	if len(item.Payload.Metadata) > 0 {
		msg["metadata"] = item.Payload.Metadata
	}
	return msg
}

// deliverUser turns an admitted user input into a user message (same id)
// and marks the step that answers it; it returns the step's message id.
func (s svc) deliverUser(ctx context.Context, sid string, w *work) (string, error) {
	var item session.InboxUser
	if err := json.Unmarshal(w.raw, &item); err != nil {
		return "", err
	}
	now := s.NowMS()
	raw, err := json.Marshal(userMessage(&item, now))
	if err != nil {
		return "", err
	}
	stepID := s.NewID("msg")
	marker, err := json.Marshal(map[string]any{"id": stepID, "sessionID": sid, "type": "turn", "time": map[string]any{"created": now}})
	if err != nil {
		return "", err
	}
	var info *session.Info
	err = s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		if err := tx.MoveSessionItem(s.InstanceName(), sid, item.ID, store.ItemMessage, raw); err != nil {
			return err
		}
		if err := tx.AppendSessionItem(s.InstanceName(), sid, store.ItemInbox, stepID, marker); err != nil {
			return err
		}
		info.Time.Updated = max(now, info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return "", err
	}
	s.PublishEvents(info, promptedEvent(&item))
	return stepID, nil
}

// applyMove applies an inbox move at its boundary.
func (s svc) applyMove(ctx context.Context, sid string, w *work) error {
	var mv struct {
		ID        string             `json:"id"`
		Location  events.LocationRef `json:"location"`
		ProjectID string             `json:"projectID"`
		Subpath   string             `json:"subpath"`
	}
	if err := json.Unmarshal(w.raw, &mv); err != nil {
		return err
	}
	now := s.NowMS()
	var info *session.Info
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		raw, err := json.Marshal(session.SwitchLocation(info, mv.ID, now, mv.Location, mv.ProjectID, mv.Subpath))
		if err != nil {
			return err
		}
		if err := tx.MoveSessionItem(s.InstanceName(), sid, mv.ID, store.ItemMessage, raw); err != nil {
			return err
		}
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return err
	}
	moved := map[string]any{"location": mv.Location}
	if mv.Subpath != "" {
		moved["subdirectory"] = mv.Subpath
	}
	s.PublishEvents(info, session.Ev{Type: "session.next.moved", Data: moved}, session.Ev{Type: "session.updated", Data: map[string]any{"info": info}})
	return nil
}

// settleRun records the end of a run: an idle marker (in the place of
// the tools marker idleID, when the run stopped at one), the session's
// outcome and time.idle.
func (s svc) settleRun(ctx context.Context, sid, outcome, idleID string) error {
	now := s.NowMS()
	var info *session.Info
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		msg := s.NewMessage("idle", now)
		msg["outcome"] = outcome
		if idleID != "" {
			msg["id"] = idleID
			raw, err := json.Marshal(msg)
			if err != nil {
				return err
			}
			if err := tx.MoveSessionItem(s.InstanceName(), sid, idleID, store.ItemMessage, raw); err != nil {
				return err
			}
		} else if err := s.AppendMessage(tx, sid, msg); err != nil {
			return err
		}
		info.Outcome = outcome
		info.Time.Idle = &now
		info.Time.Updated = max(now, info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if session.Gone(err) {
		return nil
	}
	if err != nil {
		return err
	}
	s.PublishEvents(info, session.Ev{Type: "session.idle", Data: map[string]any{"outcome": outcome}},
		session.Ev{Type: "session.updated", Data: map[string]any{"info": info}})
	return nil
}

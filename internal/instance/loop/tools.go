package loop

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/permission"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/tools"
	"github.com/agentgate/agentgate/internal/sandbox"
	"github.com/agentgate/agentgate/internal/store"
)

// ToolConfig is how the loop runs tools.
type ToolConfig struct {
	// Rules are the instance's permission rules (after the defaults,
	// before the project's opencode.json, the agent's and the session's);
	// a call they deny is denied whatever the later rules say.
	Rules []permission.Rule
	// TrustProjectPermissions lets the rules a project ships (its
	// opencode.json "permission", the agents its files define) turn the
	// guarded asks (commands, web fetches, paths outside the project,
	// files holding secrets) into allows; by default they can only make
	// calls stricter.
	TrustProjectPermissions bool
	// Roots are the directories tools may touch (default: each session's
	// location only).
	Roots []string
	// FetchPrivate lets webfetch reach private and loopback addresses.
	FetchPrivate bool
	// BashTimeout is a command's default time limit.
	BashTimeout time.Duration
	// MaxSteps bounds the provider steps of one run when the agent sets no
	// steps (default 100).
	MaxSteps int
	// Secrets never reach a command's environment (the instance password,
	// the provider key, pairing tokens).
	Secrets func() []string
	// Sandbox confines commands (default: sandbox.Default()).
	Sandbox *sandbox.Sandbox
}

// SetTools replaces the tool configuration; calls that start later use
// it.
func (r *Runner) SetTools(c ToolConfig) {
	r.mu.Lock()
	r.tools = c
	r.cfgGen++
	r.mu.Unlock()
}

func (r *Runner) toolConfig() ToolConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tools
}

// Broker is the instance's pending permission requests and forms.
func (r *Runner) Broker() *permission.Broker { return r.broker }

// CancelPending cancels the pending requests and forms of a session, or
// of every session of a location directory.
func (r *Runner) CancelPending(sessionID, directory, why string) {
	r.broker.Cancel(sessionID, directory, why)
}

// toolPart is a tool call in an assistant message's content.
type toolPart struct {
	Type  string    `json:"type"`
	ID    string    `json:"id"`
	Name  string    `json:"name"`
	State toolState `json:"state"`
	Time  partTime  `json:"time"`
}

type toolState struct {
	Status   string           `json:"status"`
	Input    json.RawMessage  `json:"input"`
	Content  []toolContent    `json:"content,omitempty"`
	Metadata map[string]any   `json:"metadata,omitempty"`
	Error    *StructuredError `json:"error,omitempty"`
}

type toolContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type partTime struct {
	Created   int64  `json:"created"`
	Ran       *int64 `json:"ran,omitempty"`
	Completed *int64 `json:"completed,omitempty"`
}

// newToolPart is a call the model made, durable as "running" before it
// runs; malformed arguments make it an error at once.
func newToolPart(tc formats.ToolCall, now int64) toolPart {
	p := toolPart{Type: "tool", ID: tc.ID, Name: tc.Name, Time: partTime{Created: now}}
	args := strings.TrimSpace(tc.Arguments)
	if args == "" {
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		p.State = toolState{Status: "error", Input: json.RawMessage(`{}`), Metadata: map[string]any{"raw": tc.Arguments},
			Error: &StructuredError{Type: "InvalidToolInputError", Message: (&tools.ArgumentError{Tool: tc.Name, Reason: "the arguments are not a JSON object"}).Error()}}
		p.Time.Completed = &now
		return p
	}
	p.State = toolState{Status: "running", Input: json.RawMessage(args), Metadata: map[string]any{}}
	return p
}

// settled reports whether a part is completed or failed.
func (p *toolPart) settled() bool { return p.State.Status == "completed" || p.State.Status == "error" }

func (p *toolPart) fail(typ, msg string, now int64) {
	p.State.Status = "error"
	p.State.Content = nil
	p.State.Error = &StructuredError{Type: typ, Message: msg}
	p.Time.Completed = &now
}

// assistantMsg is a stored assistant message with its content kept as
// raw entries, the tool parts decoded.
type assistantMsg struct {
	fields map[string]json.RawMessage
	// content keeps every entry; tools indexes the tool parts in it.
	content []json.RawMessage
	tools   map[int]*toolPart
}

func decodeAssistant(raw []byte) (*assistantMsg, error) {
	m := &assistantMsg{tools: map[int]*toolPart{}}
	if err := json.Unmarshal(raw, &m.fields); err != nil {
		return nil, err
	}
	if c, ok := m.fields["content"]; ok {
		if err := json.Unmarshal(c, &m.content); err != nil {
			return nil, err
		}
	}
	for i, c := range m.content {
		var h struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(c, &h) == nil && h.Type == "tool" {
			var p toolPart
			if json.Unmarshal(c, &p) == nil {
				m.tools[i] = &p
			}
		}
	}
	return m, nil
}

func (m *assistantMsg) encode() ([]byte, error) {
	for i, p := range m.tools {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		m.content[i] = b
	}
	c, err := json.Marshal(m.content)
	if err != nil {
		return nil, err
	}
	m.fields["content"] = c
	return json.Marshal(m.fields)
}

// part returns the tool part of a call id.
func (m *assistantMsg) part(callID string) *toolPart {
	for _, p := range m.tools {
		if p.ID == callID {
			return p
		}
	}
	return nil
}

// toolBatch is the tool calls of one step being run: the assistant
// message they belong to, updated in the store as each settles.
type toolBatch struct {
	s     svc
	sid   string
	msgID string
	mu    sync.Mutex
	msg   *assistantMsg
	info  *session.Info
	// policy is the rule sets before the session's own, read once for
	// the step (the session's are read live from info: "always" adds to
	// them).
	policy permission.Policy
	// plugins are the session's plugins (nil: none).
	plugins *sessionPlugins
	// snap is the step's file snapshot record (nil: its calls change no
	// files), stored with the results.
	snap *session.StepSnapshot
	// writing is set while persistSoon stores the running parts; dirty
	// asks it for one more write; written is closed when it is done.
	writing, dirty bool
	written        chan struct{}
}

// persistSoon stores the step's message with its running parts as they
// are now (a plugin tool's metadata), off the caller's path: updates that
// come while a write is under way are stored by one more write.
// settleTools waits for it (flush) before it stores the results.
func (b *toolBatch) persistSoon(s svc) {
	b.mu.Lock()
	if b.writing {
		b.dirty = true
		b.mu.Unlock()
		return
	}
	b.writing = true
	b.written = make(chan struct{})
	done := b.written
	b.mu.Unlock()
	go func() {
		defer close(done)
		for {
			b.mu.Lock()
			raw, err := b.msg.encode()
			b.dirty = false
			b.mu.Unlock()
			if err == nil {
				err = s.WriteTx(context.Background(), func(tx store.Tx) error {
					return tx.MoveSessionItem(s.InstanceName(), b.sid, b.msgID, store.ItemMessage, raw)
				})
			}
			if err != nil {
				s.Logger.Warn("tool metadata: cannot store the running part")
			}
			b.mu.Lock()
			if !b.dirty {
				b.writing = false
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
		}
	}()
}

// flush waits for persistSoon's write, if one is under way.
func (b *toolBatch) flush() {
	b.mu.Lock()
	ch := b.written
	b.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// update changes a part under the batch's lock and returns a copy of it.
// Results are kept in memory and announced; settleTools stores them all
// in one write when the calls are done.
func (b *toolBatch) update(callID string, change func(p *toolPart)) *toolPart {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.msg.part(callID)
	if p == nil {
		return nil
	}
	change(p)
	cp := *p
	return &cp
}

// runTools runs the running tool parts of a step's assistant message (as
// the step stored it): the calls that only read run together, the others
// one at a time in the model's order. It reports whether a permission was
// rejected without a message or a question dismissed (the run then stops
// for the user).
func (r *Runner) runTools(ctx context.Context, s svc, info *session.Info, msgID string, msg *assistantMsg, env *tools.Env, policy permission.Policy, sp *sessionPlugins) (b *toolBatch, stop bool) {
	b = &toolBatch{s: s, sid: info.ID, msgID: msgID, msg: msg, info: info, policy: policy, plugins: sp}
	var pending []toolPart
	idx := make([]int, 0, len(msg.tools))
	for i := range msg.tools {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		if p := msg.tools[i]; !p.settled() {
			pending = append(pending, *p)
		}
	}
	var once sync.Once
	runOne := func(p toolPart) {
		if r.runTool(ctx, b, env, p) {
			once.Do(func() { stop = true })
		}
	}
	for i := 0; i < len(pending); {
		if exclusive(pending[i].Name) {
			runOne(pending[i])
			i++
			continue
		}
		j := i
		var wg sync.WaitGroup
		for ; j < len(pending); j++ {
			if exclusive(pending[j].Name) {
				break
			}
			wg.Add(1)
			go func(p toolPart) {
				defer wg.Done()
				runOne(p)
			}(pending[j])
		}
		wg.Wait()
		i = j
	}
	return b, stop
}

// exclusive reports whether a call runs alone: an exclusive built-in tool,
// or a tool that is not built in (a plugin's, which may change anything).
func exclusive(name string) bool {
	t, ok := tools.Lookup(name)
	return !ok || t.Exclusive
}

// rejection is a permission the user rejected.
type rejection struct {
	typ, msg string
	stop     bool
}

func (e *rejection) Error() string { return e.msg }

// runTool runs one call and settles its part; it reports whether the
// user rejected a permission without a message.
func (r *Runner) runTool(ctx context.Context, b *toolBatch, env *tools.Env, p toolPart) bool {
	s := b.s
	callEnv := *env
	callEnv.Progress = func(meta map[string]any) {
		s.Publish("session.next.tool.progress", b.info, map[string]any{"assistantMessageID": b.msgID, "callID": p.ID, "structured": meta, "content": []toolContent{}})
	}
	callEnv.Permit = func(ctx context.Context, a tools.Ask) error { return r.permit(ctx, s, b, p, a) }
	if b.plugins != nil {
		callEnv.ShellEnv = func(ctx context.Context, cwd string) map[string]string {
			return b.plugins.shellEnv(ctx, cwd, env.Secrets)
		}
	}
	ran := s.NowMS()
	b.update(p.ID, func(tp *toolPart) { tp.Time.Ran = &ran })
	s.Publish("session.next.tool.called", b.info, map[string]any{"assistantMessageID": b.msgID, "callID": p.ID, "tool": p.Name, "input": p.State.Input,
		"provider": notExecuted})
	res, err := r.callTool(ctx, b, &callEnv, p)
	if errors.Is(context.Cause(ctx), errShutdown) {
		return false // left running: the next start settles it as interrupted
	}
	now := s.NowMS()
	stop := false
	part := b.update(p.ID, func(tp *toolPart) {
		if err == nil && ctx.Err() != nil {
			// Interrupted while it ran (a command killed): what it wrote
			// so far stays with the error.
			tp.fail("MessageAbortedError", "Tool execution aborted: the session was interrupted", now)
			if res.Output != "" {
				tp.State.Content = []toolContent{{Type: "text", Text: res.Output}}
			}
			return
		}
		if err != nil {
			typ := "ToolExecutionError"
			var ae *tools.ArgumentError
			var ue *tools.UnknownToolError
			var rj *rejection
			switch {
			case ctx.Err() != nil:
				typ = "MessageAbortedError"
				err = errors.New("Tool execution aborted: the session was interrupted")
			case errors.As(err, &ae):
				typ = "InvalidToolInputError"
			case errors.As(err, &ue):
				typ = "UnknownToolError"
			case errors.As(err, &rj):
				typ, stop = rj.typ, rj.stop
			case errors.Is(err, tools.ErrDismissed):
				typ, stop = "QuestionRejectedError", true
			}
			tp.fail(typ, err.Error(), now)
			return
		}
		tp.State.Status = "completed"
		text := res.Output
		if text == "" {
			text = "(no output)"
		}
		tp.State.Content = []toolContent{{Type: "text", Text: text}}
		meta := res.Metadata
		if meta == nil {
			meta = map[string]any{}
		}
		if res.Title != "" {
			meta["title"] = res.Title
		} else if t, ok := tp.State.Metadata["title"].(string); ok && t != "" {
			// The title a plugin tool gave itself while it ran.
			meta["title"] = t
		}
		tp.State.Metadata = meta
		tp.Time.Completed = &now
	})
	if part == nil {
		return stop
	}
	typ, data := settledEvent(b.msgID, part)
	s.Publish(typ, b.info, data)
	return stop
}

// notExecuted is the provider field of tool events: the agent ran the
// call, not the provider.
var notExecuted = map[string]any{"executed": false}

// settledEvent is session.next.tool.success or .failed for a settled call.
func settledEvent(msgID string, part *toolPart) (string, map[string]any) {
	if part.State.Status == "error" {
		return "session.next.tool.failed", map[string]any{"assistantMessageID": msgID, "callID": part.ID, "error": part.State.Error,
			"provider": notExecuted}
	}
	structured := part.State.Metadata
	if structured == nil {
		structured = map[string]any{}
	}
	content := part.State.Content
	if content == nil {
		content = []toolContent{}
	}
	return "session.next.tool.success", map[string]any{"assistantMessageID": msgID, "callID": part.ID, "structured": structured,
		"content": content, "provider": notExecuted}
}

// permit decides a permission a call asks for: the step's policy with
// the session's rules last (permission.Policy.Decide: last match wins,
// the instance's deny is final, the project's rules only narrow guarded
// calls). An ask waits for the user.
func (r *Runner) permit(ctx context.Context, s svc, b *toolBatch, p toolPart, a tools.Ask) error {
	b.mu.Lock()
	sessionRules := append([]permission.Rule(nil), b.info.Permissions...)
	b.mu.Unlock()
	d := b.policy.With(permission.Set{Source: permission.Trusted, Rules: sessionRules}).DecideRequest(a.Permission, a.Patterns, len(a.Unknown) > 0)
	switch d.Effect {
	case permission.Allow:
		return nil
	case permission.Deny:
		rule := "a deny rule"
		if d.Rule != nil {
			rule = "the rule " + d.Rule.Action + " " + d.Rule.Resource + " deny"
		}
		return &rejection{typ: "PermissionDeniedError", msg: "The user has specified a rule which prevents you from using this specific tool call (" +
			rule + " matches " + a.Permission + " " + strings.Join(a.Patterns, ", ") + ")."}
	}
	switch b.plugins.permissionAsk(ctx, b.sid, p.ID, a) {
	case "allow":
		return nil
	case "deny":
		return &rejection{typ: "PermissionDeniedError", msg: "A plugin denied this tool call (" + a.Permission + " " + strings.Join(a.Patterns, ", ") + ")."}
	}
	reply := r.broker.Ask(ctx, b.info.Location.Directory, permission.Request{SessionID: b.sid, Permission: a.Permission, Patterns: a.Patterns,
		Always: a.Always, Metadata: a.Metadata, Tool: &permission.ToolRef{MessageID: b.msgID, CallID: p.ID}, Unknown: a.Unknown})
	switch {
	case reply.Cancelled != "":
		return &rejection{typ: "PermissionRejectedError", msg: "The permission request was cancelled (" + reply.Cancelled + ") before anyone answered it.", stop: true}
	case reply.Kind == permission.Reject && reply.Message != "":
		return &rejection{typ: "PermissionCorrectedError", msg: "The user rejected permission to use this specific tool call with the following feedback: " + reply.Message}
	case reply.Kind == permission.Reject:
		return &rejection{typ: "PermissionRejectedError", msg: "The user rejected permission to use this specific tool call.", stop: true}
	case reply.Kind == permission.Always:
		if err := r.allowAlways(ctx, s, b, a); err != nil {
			s.Logger.Warn("permission: cannot store the session's new rules")
		}
	}
	return nil
}

// allowAlways adds the session rules an "always" reply grants and lets
// the session's other pending requests that they now allow run.
func (r *Runner) allowAlways(ctx context.Context, s svc, b *toolBatch, a tools.Ask) error {
	add := make([]permission.Rule, 0, len(a.Always))
	for _, pat := range a.Always {
		add = append(add, permission.Rule{Action: a.Permission, Resource: pat, Effect: permission.Allow})
	}
	var info *session.Info
	err := s.WriteTx(context.WithoutCancel(ctx), func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, b.sid); err != nil {
			return err
		}
		info.Permissions = append(info.Permissions, add...)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.info.Permissions = info.Permissions
	b.mu.Unlock()
	s.Publish("session.updated", info, map[string]any{"info": info})
	r.broker.Recheck(b.sid, func(req permission.Request) bool {
		return permission.EvaluateRequest(req.Permission, req.Patterns, len(req.Unknown) > 0, info.Permissions).Effect == permission.Allow
	})
	return nil
}

// rulePolicy is the rule sets before the session's, by source: the
// defaults (trusted), the instance's (the operator's), the project's
// opencode.json "permission" (the project's), the agent's rules from the
// built-in definition and the server config (trusted), then those from
// the location's files (the project's); and whether the operator trusts
// the project's.
func (r *Runner) rulePolicy(s svc, project string, agent *agents.Agent) permission.Policy {
	cfg := r.toolConfig()
	p := permission.Policy{TrustProject: cfg.TrustProjectPermissions, Sets: []permission.Set{
		{Source: permission.Trusted, Rules: permission.Defaults},
		{Source: permission.Operator, Rules: cfg.Rules},
	}}
	if rules, err := agents.ProjectPermissions(project); err == nil {
		p.Sets = append(p.Sets, permission.Set{Source: permission.Project, Rules: rules})
	} else {
		s.Logger.Warn("permission: the project's opencode.json permission is unreadable; ignored")
	}
	trusted, fromProject := agent.RuleSources()
	return p.With(permission.Set{Source: permission.Trusted, Rules: trusted}).
		With(permission.Set{Source: permission.Project, Rules: fromProject})
}

// hiddenTools are the tools the rules deny outright
// (permission.Policy.Hidden of the tool's permission): they are not
// offered to the model.
func hiddenTools(policy permission.Policy) func(string) bool {
	return func(name string) bool { return policy.Hidden(tools.Permission(name)) }
}

// toolEnv is where a session's calls run: its location directory (and
// subpath), confined to the instance's roots.
func (r *Runner) toolEnv(s svc, info *session.Info, agent *agents.Agent) *tools.Env {
	cfg := r.toolConfig()
	dir := info.Location.Directory
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	cwd := dir
	if info.Subpath != "" {
		if sub, err := filepath.EvalSymlinks(filepath.Join(dir, info.Subpath)); err == nil && strings.HasPrefix(sub, dir) {
			cwd = sub
		}
	}
	roots := make([]string, 0, len(cfg.Roots))
	for _, root := range cfg.Roots {
		if real, err := filepath.EvalSymlinks(root); err == nil {
			roots = append(roots, real)
		}
	}
	if len(roots) == 0 {
		roots = []string{dir}
	}
	env := &tools.Env{Dir: cwd, Project: dir, Roots: roots, SessionID: info.ID, Agent: agent.ID, BashTimeout: cfg.BashTimeout,
		Fetch: tools.FetchPolicy{AllowPrivate: cfg.FetchPrivate}, Sandbox: cfg.Sandbox}
	if cfg.Secrets != nil {
		env.Secrets = cfg.Secrets()
	}
	if p := r.Provider(); p.APIKey != "" {
		env.Secrets = append(env.Secrets, p.APIKey)
	}
	env.Subagents = map[string]string{}
	list := s.Locations.AgentsOf(info.Location.Directory)
	if list == nil {
		list = agents.Builtin()
	}
	for _, a := range list {
		if (a.Mode == "subagent" || a.Mode == "all") && !a.Hidden && a.ID != agent.ID {
			env.Subagents[a.ID] = a.Description
		}
	}
	sid := info.ID
	parent := info
	env.Todos = func(ctx context.Context) ([]tools.Todo, error) { return s.Todos(ctx, sid) }
	env.Task = func(ctx context.Context, agentID, description, prompt string) (string, string, error) {
		return r.runChild(ctx, parent, agentID, description, prompt)
	}
	env.Question = func(ctx context.Context, qs []tools.Question) ([][]string, error) {
		form := permission.Form{SessionID: sid, Questions: make([]permission.Question, len(qs))}
		for i, q := range qs {
			pq := permission.Question{Question: q.Question, Header: q.Header, Multiple: q.Multiple, Options: make([]permission.Option, len(q.Options))}
			for j, o := range q.Options {
				pq.Options[j] = permission.Option{Label: o.Label, Description: o.Description}
			}
			form.Questions[i] = pq
		}
		answers, rejected, cancelled := r.broker.AskForm(ctx, info.Location.Directory, form)
		switch {
		case cancelled != "":
			return nil, errors.New("The question was cancelled (" + cancelled + ") before anyone answered it")
		case rejected:
			return nil, tools.ErrDismissed
		}
		return answers, nil
	}
	return env
}

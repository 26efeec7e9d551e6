package loop

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	"github.com/agentgate/agentgate/internal/instance/plugins"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/instance/tools"
)

// SetPlugins sets the plugins whose tools and hooks the agent loop uses
// (nil: none).
func (r *Runner) SetPlugins(m *plugins.Manager) {
	r.mu.Lock()
	r.plugins = m
	r.cfgGen++
	r.mu.Unlock()
}

func (r *Runner) pluginSet() *plugins.Manager {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plugins
}

// pluginLoc is where a session's plugins load: its location and project.
func pluginLoc(s svc, info *session.Info) (plugins.Location, bool) {
	if s.Locations == nil {
		return plugins.Location{}, false
	}
	loc, err := s.Locations.Get(info.Location.Directory)
	if err != nil {
		return plugins.Location{}, false
	}
	return plugins.Location{Dir: loc.Directory, ProjectDir: loc.Project.Directory, ProjectID: loc.Project.ID}, true
}

// sessionPlugins are a step's plugins: the manager and the location, or
// nil when the session has none.
type sessionPlugins struct {
	m     *plugins.Manager
	loc   plugins.Location
	tools map[string]plugins.Tool // offered plugin tools by name
	// model is the step's model as hooks get it (see modelInfo).
	model map[string]any
}

func (r *Runner) sessionPlugins(s svc, info *session.Info) *sessionPlugins {
	m := r.pluginSet()
	if m == nil {
		return nil
	}
	loc, ok := pluginLoc(s, info)
	if !ok {
		return nil
	}
	return &sessionPlugins{m: m, loc: loc, tools: map[string]plugins.Tool{}}
}

// offer adds the plugins' tools to a step's offer: a built-in tool's name
// wins over a plugin's, and a tool the rules deny outright is not offered.
func (sp *sessionPlugins) offer(ctx context.Context, offered []formats.Tool, hidden func(string) bool) []formats.Tool {
	if sp == nil {
		return offered
	}
	for _, t := range sp.m.Tools(ctx, sp.loc) {
		if _, builtin := tools.Lookup(t.Name); builtin || (hidden != nil && hidden(t.Name)) {
			continue
		}
		sp.tools[t.Name] = t
		offered = append(offered, formats.Tool{Name: t.Name, Description: t.Description, Schema: t.Schema})
	}
	return offered
}

func (sp *sessionPlugins) trigger(ctx context.Context, hook string, input, output map[string]any) map[string]any {
	if sp == nil {
		return output
	}
	return sp.m.Trigger(ctx, sp.loc, hook, input, output)
}

// callTool runs one call: tool.execute.before may change its arguments
// (the part keeps the changed ones), a plugin tool runs in the plugin host
// under the permission of its name, a built-in one here, and
// tool.execute.after may change the result.
func (r *Runner) callTool(ctx context.Context, b *toolBatch, env *tools.Env, p toolPart) (tools.Result, error) {
	sp := b.plugins
	args := p.State.Input
	if sp != nil {
		out := sp.trigger(ctx, "tool.execute.before", map[string]any{"tool": p.Name, "sessionID": b.sid, "callID": p.ID},
			map[string]any{"args": json.RawMessage(nonEmptyArgs(args))})
		if a, ok := out["args"]; ok {
			if changed, err := json.Marshal(a); err == nil && string(changed) != string(nonEmptyArgs(args)) {
				args = changed
				b.update(p.ID, func(tp *toolPart) { tp.State.Input = changed })
			}
		}
	}
	var res tools.Result
	var err error
	if t, ok := sp.tool(p.Name); ok {
		res, err = sp.run(ctx, b, env, t, p, args)
	} else {
		res, err = tools.Call(ctx, env, p.Name, args)
	}
	if err == nil && sp != nil {
		out := sp.trigger(ctx, "tool.execute.after", map[string]any{"tool": p.Name, "sessionID": b.sid, "callID": p.ID, "args": json.RawMessage(nonEmptyArgs(args))},
			map[string]any{"title": res.Title, "output": res.Output, "metadata": res.Metadata})
		if v, ok := out["output"].(string); ok {
			res.Output = v
		}
		if v, ok := out["title"].(string); ok {
			res.Title = v
		}
		if v, ok := out["metadata"].(map[string]any); ok {
			res.Metadata = v
		}
	}
	return res, err
}

func nonEmptyArgs(a json.RawMessage) json.RawMessage {
	if len(strings.TrimSpace(string(a))) == 0 {
		return json.RawMessage(`{}`)
	}
	return a
}

func (sp *sessionPlugins) tool(name string) (plugins.Tool, bool) {
	if sp == nil {
		return plugins.Tool{}, false
	}
	t, ok := sp.tools[name]
	return t, ok
}

// run runs a plugin tool: the arguments must be an object with the
// schema's required members; the call asks the permission named after
// the tool (allowed unless a rule says otherwise).
func (sp *sessionPlugins) run(ctx context.Context, b *toolBatch, env *tools.Env, t plugins.Tool, p toolPart, args json.RawMessage) (tools.Result, error) {
	args = nonEmptyArgs(args)
	if !json.Valid(args) || !gjson.ParseBytes(args).IsObject() {
		return tools.Result{}, &tools.ArgumentError{Tool: t.Name, Reason: "the arguments are not a JSON object"}
	}
	for _, req := range gjson.GetBytes(t.Schema, "required").Array() {
		if !gjson.GetBytes(args, gjson.Escape(req.String())).Exists() {
			return tools.Result{}, &tools.ArgumentError{Tool: t.Name, Reason: req.String() + " is required"}
		}
	}
	c := &pluginCall{b: b, s: b.s, part: p, permit: env.Permit}
	if c.permit == nil {
		c.permit = func(context.Context, tools.Ask) error { return nil }
	}
	first := tools.Ask{Permission: t.Name, Patterns: []string{"*"}, Always: []string{"*"}}
	if err := c.permit(ctx, first); err != nil {
		return tools.Result{}, err
	}
	c.granted = append(c.granted, first)
	res, err := sp.m.RunTool(ctx, sp.loc, t.Plugin, t.Name, args, pluginhost.ToolContext{SessionID: b.sid, MessageID: b.msgID, Agent: env.Agent, CallID: p.ID,
		Ask: c.ask, Metadata: c.metadata})
	if err != nil {
		b.mu.Lock()
		rj := c.refused
		b.mu.Unlock()
		if rj != nil {
			// The tool failed after an ask of it was refused: the part
			// shows the refusal's type with what the tool threw, and a
			// rejection stops the run as a built-in tool's does.
			return tools.Result{}, &rejection{typ: rj.typ, msg: err.Error(), stop: rj.stop}
		}
		return tools.Result{}, err
	}
	return tools.Result{Title: res.Title, Output: res.Output, Metadata: res.Metadata}, nil
}

// chatParams lets chat.params adjust a step's temperature, topP, topK and
// provider options, and chat.headers its request headers.
func (sp *sessionPlugins) chatParams(ctx context.Context, sid, agent string, model agents.ModelRef, conv *formats.Conversation) {
	if sp == nil {
		return
	}
	in := map[string]any{"sessionID": sid, "agent": agent, "model": map[string]any{"providerID": model.ProviderID, "id": model.ID}}
	if sp.model != nil {
		in["model"] = sp.model
	}
	out := map[string]any{"options": map[string]any{}}
	for _, k := range []string{"temperature", "topP", "topK"} {
		if v, ok := conv.Settings[k]; ok {
			out[k] = v
		}
	}
	if v, ok := conv.Settings["maxTokens"]; ok {
		out["maxOutputTokens"] = v
	}
	out = sp.trigger(ctx, "chat.params", in, out)
	if v, ok := out["maxOutputTokens"].(float64); ok && v >= 1 && v == float64(int64(v)) {
		if conv.Settings == nil {
			conv.Settings = map[string]any{}
		}
		conv.Settings["maxTokens"] = int64(v)
	}
	for _, k := range []string{"temperature", "topP", "topK"} {
		if v, ok := out[k]; ok && v != nil {
			if conv.Settings == nil {
				conv.Settings = map[string]any{}
			}
			conv.Settings[k] = v
		}
	}
	if opts, ok := out["options"].(map[string]any); ok && len(opts) > 0 {
		if conv.Body == nil {
			conv.Body = map[string]any{}
		}
		for k, v := range opts {
			conv.Body[k] = v
		}
	}
	headers := map[string]any{}
	for k, v := range conv.Headers {
		headers[k] = v
	}
	out = sp.trigger(ctx, "chat.headers", in, map[string]any{"headers": headers})
	if hs, ok := out["headers"].(map[string]any); ok {
		for k, v := range hs {
			if s, ok := v.(string); ok && validHeader(k, s) {
				if conv.Headers == nil {
					conv.Headers = map[string]string{}
				}
				conv.Headers[k] = s
			}
		}
	}
}

// validHeader refuses header names and values that would break the
// request, and the credential headers (the transport sets those).
func validHeader(k, v string) bool {
	switch strings.ToLower(k) {
	case "", "authorization", "x-api-key", "x-goog-api-key", "host", "content-length":
		return false
	}
	return !strings.ContainsAny(k, " :\r\n") && !strings.ContainsAny(v, "\r\n")
}

// permissionAsk lets permission.ask decide an ask: "allow" or "deny";
// anything else leaves it to the user.
func (sp *sessionPlugins) permissionAsk(ctx context.Context, sid, callID string, a tools.Ask) string {
	if sp == nil {
		return ""
	}
	out := sp.trigger(ctx, "permission.ask", map[string]any{"type": a.Permission, "pattern": a.Patterns, "sessionID": sid, "callID": callID,
		"metadata": a.Metadata}, map[string]any{"status": "ask"})
	s, _ := out["status"].(string)
	return s
}

// shellEnv is what shell.env adds to a command's environment; a value
// holding a secret is dropped.
func (sp *sessionPlugins) shellEnv(ctx context.Context, cwd string, secrets []string) map[string]string {
	if sp == nil {
		return nil
	}
	out := sp.trigger(ctx, "shell.env", map[string]any{"cwd": cwd}, map[string]any{"env": map[string]any{}})
	env, _ := out["env"].(map[string]any)
	res := map[string]string{}
	for k, v := range env {
		s, ok := v.(string)
		if !ok || k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(s, 0) {
			continue
		}
		leak := false
		for _, sec := range secrets {
			if sec != "" && strings.Contains(s, sec) {
				leak = true
			}
		}
		if !leak {
			res[k] = s
		}
	}
	return res
}

// chatMessage shows the plugins a user message as it enters the session.
func (r *Runner) chatMessage(ctx context.Context, s svc, sid string, raw []byte) {
	var item session.InboxUser
	if json.Unmarshal(raw, &item) != nil {
		return
	}
	info, err := s.Get(ctx, sid)
	if err != nil {
		return
	}
	sp := r.sessionPlugins(s, info)
	if sp == nil {
		return
	}
	sp.trigger(ctx, "chat.message", map[string]any{"sessionID": sid, "agent": info.Agent, "messageID": item.ID},
		map[string]any{"message": map[string]any{"id": item.ID, "sessionID": sid, "role": "user"},
			"parts": []any{map[string]any{"type": "text", "text": item.Payload.Text}}})
}

package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/pluginhost"
	"github.com/agentgate/agentgate/internal/instance/tools"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
)

// The hooks of the plugin contract beyond tools (see docs/instance.md,
// "Plugins run"). Each leaves the step as it was when its plugins fail or
// leave garbage; the failure is in the plugins' status and the log.

// modelInfo is the model record hooks get (the released Model's fields a
// plugin reads: id, providerID, name and limit).
func modelInfo(prov ProviderConfig, model agents.ModelRef) map[string]any {
	lim := prov.Limits[model.ID]
	return map[string]any{"id": model.ID, "providerID": model.ProviderID, "name": model.ID,
		"limit": map[string]any{"context": lim.Context, "output": lim.Output}}
}

// maxDescription bounds a tool description tool.definition leaves.
const maxDescription = 64 << 10

// definitions lets tool.definition change the description and the
// parameters of the tools a step offers; a definition whose parameters
// are not an object schema ({"type": "object", …}) stays as it was.
func (sp *sessionPlugins) definitions(ctx context.Context, offered []formats.Tool) []formats.Tool {
	if sp == nil || len(offered) == 0 || !sp.m.HasHook(ctx, sp.loc, "tool.definition") {
		return offered
	}
	defs := make([]pluginhost.Definition, len(offered))
	for i, t := range offered {
		defs[i] = pluginhost.Definition{ID: t.Name, Description: t.Description, Parameters: t.Schema}
	}
	out := sp.m.Definitions(ctx, sp.loc, defs)
	res := make([]formats.Tool, len(offered))
	for i, t := range offered {
		res[i] = t
		d := out[i]
		var schema struct {
			Type string `json:"type"`
		}
		if len(d.Description) > maxDescription || json.Unmarshal(d.Parameters, &schema) != nil || schema.Type != "object" {
			sp.m.HookFailed(ctx, sp.loc, "tool.definition", "returned garbage for "+t.Name+": parameters must be an object schema and the description at most 64 KB")
			continue
		}
		res[i].Description, res[i].Schema = d.Description, d.Parameters
	}
	return res
}

// systemTransform lets experimental.chat.system.transform change the
// system prompt: output.system starts as [the agent's prompt]; the strings
// it leaves are sent joined by a blank line.
func (sp *sessionPlugins) systemTransform(ctx context.Context, sid string, conv *formats.Conversation) {
	const hook = "experimental.chat.system.transform"
	if sp == nil || !sp.m.HasHook(ctx, sp.loc, hook) {
		return
	}
	system := []string{}
	if conv.System != "" {
		system = append(system, conv.System)
	}
	out := sp.trigger(ctx, hook, map[string]any{"sessionID": sid, "model": sp.model}, map[string]any{"system": system})
	list, ok := out["system"].([]any)
	if !ok {
		sp.m.HookFailed(ctx, sp.loc, hook, "returned garbage: output.system is not an array")
		return
	}
	texts := make([]string, 0, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			sp.m.HookFailed(ctx, sp.loc, hook, "returned garbage: output.system holds a non-string")
			return
		}
		if s != "" {
			texts = append(texts, s)
		}
	}
	conv.System = strings.Join(texts, "\n\n")
}

// textComplete lets experimental.text.complete change a step's text once
// it is complete, before it is stored (the text.ended event carries the
// changed text; the deltas went out as the model wrote them).
func (sp *sessionPlugins) textComplete(ctx context.Context, sid, msgID, text string) string {
	const hook = "experimental.text.complete"
	if sp == nil || text == "" || !sp.m.HasHook(ctx, sp.loc, hook) {
		return text
	}
	out := sp.trigger(ctx, hook, map[string]any{"sessionID": sid, "messageID": msgID, "partID": v1.PartID(msgID, "t0")},
		map[string]any{"text": text})
	s, ok := out["text"].(string)
	if !ok {
		sp.m.HookFailed(ctx, sp.loc, hook, "returned garbage: output.text is not a string")
		return text
	}
	return s
}

// compacting lets experimental.session.compacting change the compaction's
// prompt: output.prompt replaces it, output.context is appended to it.
func (sp *sessionPlugins) compacting(ctx context.Context, sid, prompt string) string {
	const hook = "experimental.session.compacting"
	if sp == nil || !sp.m.HasHook(ctx, sp.loc, hook) {
		return prompt
	}
	out := sp.trigger(ctx, hook, map[string]any{"sessionID": sid}, map[string]any{"context": []string{}, "prompt": nil})
	if p, ok := out["prompt"].(string); ok && p != "" {
		prompt = p
	}
	if list, ok := out["context"].([]any); ok {
		for _, v := range list {
			if s, ok := v.(string); ok && s != "" {
				prompt += "\n\n" + s
			}
		}
	}
	return prompt
}

// autocontinue asks experimental.compaction.autocontinue whether the
// conversation after an automatic compaction goes on with the prompt to
// continue (default yes).
func (sp *sessionPlugins) autocontinue(ctx context.Context, sid, agent, msgID string) bool {
	const hook = "experimental.compaction.autocontinue"
	if sp == nil || !sp.m.HasHook(ctx, sp.loc, hook) {
		return true
	}
	out := sp.trigger(ctx, hook, map[string]any{"sessionID": sid, "agent": agent, "model": sp.model,
		"provider": map[string]any{"source": "config", "info": map[string]any{"id": ProviderID}, "options": map[string]any{}},
		"message":  map[string]any{"id": msgID, "sessionID": sid, "role": "user"}, "overflow": false}, map[string]any{"enabled": true})
	enabled, ok := out["enabled"].(bool)
	return !ok || enabled
}

// pluginCall is a plugin tool call's side of its context: the asks it
// made that were granted (the same ask again is not asked twice), the
// refusal the last refused one got, and its metadata updates.
type pluginCall struct {
	b       *toolBatch
	s       svc
	part    toolPart
	permit  func(context.Context, tools.Ask) error
	granted []tools.Ask
	refused *rejection
}

// ask decides a permission the tool asks for with the call's rules, the
// plugins' permission.ask and the user (see permit); a refusal reaches
// the tool as a thrown error of its type (PermissionRejectedError …).
func (c *pluginCall) ask(ctx context.Context, in pluginhost.AskInput) error {
	a := tools.Ask{Permission: in.Permission, Patterns: in.Patterns, Always: in.Always, Metadata: in.Metadata}
	if len(a.Always) == 0 {
		a.Always = a.Patterns
	}
	c.b.mu.Lock()
	for _, g := range c.granted {
		if g.Permission == a.Permission && covers(g.Patterns, a.Patterns) {
			c.b.mu.Unlock()
			return nil
		}
	}
	c.b.mu.Unlock()
	err := c.permit(ctx, a)
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	var rj *rejection
	switch {
	case err == nil:
		c.granted = append(c.granted, a)
		return nil
	case errors.As(err, &rj):
		c.refused = rj
		return rj
	}
	return &rejection{typ: "PermissionRejectedError", msg: err.Error()}
}

func covers(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w || h == "*" {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// AskErrorName is the name of the error a refused ask throws in the tool.
func (e *rejection) AskErrorName() string { return e.typ }

// metadata updates the running part with a tool's metadata({title,
// metadata}) — metadata replaces the part's, a title is kept as its
// metadata.title — announces it (session.next.tool.progress, in v1 a
// running part with its title and metadata) and has it stored.
func (c *pluginCall) metadata(title string, meta map[string]any) {
	var structured map[string]any
	part := c.b.update(c.part.ID, func(tp *toolPart) {
		if tp.settled() {
			return
		}
		next := map[string]any{}
		if meta != nil {
			for k, v := range meta {
				next[k] = v
			}
		} else {
			for k, v := range tp.State.Metadata {
				next[k] = v
			}
		}
		if title != "" {
			next["title"] = title
		} else if t, ok := tp.State.Metadata["title"]; ok && meta != nil {
			next["title"] = t
		}
		tp.State.Metadata = next
		structured = next
	})
	if part == nil || structured == nil {
		return
	}
	c.s.Publish("session.next.tool.progress", c.b.info, map[string]any{"assistantMessageID": c.b.msgID, "callID": c.part.ID,
		"structured": structured, "content": []toolContent{}})
	c.b.persistSoon(c.s)
}

package loop

import (
	"context"
	"encoding/json"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/store"
)

// ModelLimits are a model's limits in tokens: its context window and the
// most it writes in one answer (0: unknown).
type ModelLimits struct {
	Context int64
	Output  int64
}

// compactionPrompt asks the model for the summary that replaces the
// conversation before it.
const compactionPrompt = "Provide a detailed summary for continuing our conversation above. Focus on what would help " +
	"continue it: what we did, what we are doing, which files we are working on, and what we are going to do next. " +
	"Another agent will read the summary and continue the work. Do not call any tools; respond only with the summary, " +
	"under the headings Goal, Instructions, Discoveries, Accomplished, Relevant files."

// reservedOutput is the output room kept free below the context limit
// when the model's output limit is unknown or larger.
const reservedOutput = 32000

// needsCompaction reports whether the conversation's next request would
// pass the model's context limit: the tokens of the latest step that
// reported usage (what it sent and wrote) reach the context limit less
// the room for an answer.
func needsCompaction(lim ModelLimits, msgs []session.Message) bool {
	if lim.Context <= 0 {
		return false
	}
	room := int64(reservedOutput)
	if lim.Output > 0 {
		room = min(lim.Output, reservedOutput)
	}
	usable := lim.Context - room
	for i := len(msgs) - 1; i >= 0; i-- {
		switch msgs[i].Header.Type {
		case "compaction":
			return false // nothing measured since the last summary
		case "assistant":
			var m struct {
				Tokens *session.TokenUsage `json:"tokens"`
			}
			if json.Unmarshal(msgs[i].Raw, &m) != nil || m.Tokens == nil {
				continue
			}
			t := m.Tokens
			return int64(t.Input+t.Output+t.Cache.Read+t.Cache.Write) >= usable
		}
	}
	return false
}

// compactIfNeeded summarises the session's conversation (info and msgs,
// as read for the step) with the model when its next request would not
// fit, and records the compaction message; later requests start from its
// summary. It reports whether it compacted, and whether the run was
// interrupted meanwhile.
func (s svc) compactIfNeeded(ctx context.Context, prov ProviderConfig, sid string, info *session.Info, msgs []session.Message, sp *sessionPlugins) (compacted, interrupted bool, err error) {
	agent := s.resolveAgent(info)
	model := modelOf(prov, info, agent)
	if !needsCompaction(prov.Limits[model.ID], msgs) {
		return false, false, nil
	}
	return s.compact(ctx, prov, sid, info, msgs, "auto", "", sp)
}

// compact summarises the conversation and records the compaction message
// (in the place of the inbox item inboxID of a requested compaction).
// reason is "auto" or "manual". The plugins' experimental.session.compacting
// may change the prompt, their experimental.chat.messages.transform the
// conversation summarised, and (after an automatic one)
// experimental.compaction.autocontinue turn off the prompt to continue
// that follows the summary.
func (s svc) compact(ctx context.Context, prov ProviderConfig, sid string, info *session.Info, msgs []session.Message, reason, inboxID string, sp *sessionPlugins) (compacted, interrupted bool, err error) {
	agent := s.resolveAgent(info)
	model := modelOf(prov, info, agent)
	id := inboxID
	if id == "" {
		id = s.NewID("msg")
	}
	created := s.NowMS()
	s.Publish("session.next.compaction.started", info, map[string]any{"messageID": id, "reason": reason})
	conv, units := conversationUnits(agent, model.ID, msgs)
	sp.transformMessages(ctx, info, units, model, conv)
	conv.Headers = withSession(conv.Headers, sid)
	conv.Messages = append(conv.Messages, formats.Text(formats.RoleUser, sp.compacting(ctx, sid, compactionPrompt)))
	step, serr := providerStep(ctx, prov, conv, nil)
	if ctx.Err() != nil {
		return false, true, nil
	}
	msg := map[string]any{"id": id, "type": "compaction", "reason": reason, "model": model}
	switch {
	case serr != nil:
		msg["status"], msg["error"] = "failed", serr
	case step.Text == "":
		msg["status"], msg["error"] = "failed", StructuredError{Type: "CompactionError", Message: "The model returned no summary"}
	default:
		msg["status"], msg["summary"], msg["recent"] = "completed", step.Text, []string{}
		if reason == "auto" && !sp.autocontinue(ctx, sid, agent.ID, id) {
			msg["continue"] = false
		}
	}
	var usage *session.TokenUsage
	var cost float64
	if step != nil {
		usage, cost = tokensOf(prov, step.Usage)
	}
	if usage != nil {
		msg["tokens"], msg["cost"] = usage, cost
	}
	now := s.NowMS()
	msg["time"] = map[string]any{"created": created, "completed": now}
	err = s.WriteTx(context.WithoutCancel(ctx), func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		if inboxID != "" {
			raw, err := json.Marshal(msg)
			if err != nil {
				return err
			}
			if err := tx.MoveSessionItem(s.InstanceName(), sid, inboxID, store.ItemMessage, raw); err != nil {
				return err
			}
		} else if err := s.AppendMessage(tx, sid, msg); err != nil {
			return err
		}
		info.Cost += cost
		if usage != nil {
			info.Tokens.Add(*usage)
		}
		info.Time.Updated = max(now, info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return false, false, err
	}
	ended := session.Ev{Type: "session.next.compaction.ended", Data: map[string]any{"messageID": id, "reason": reason,
		"text": msg["summary"], "recent": ""}}
	if msg["status"] != "completed" {
		ended = session.Ev{Type: "session.next.compaction.failed", Data: map[string]any{"messageID": id, "reason": reason, "error": msg["error"]}}
	}
	s.PublishEvents(info, ended, session.Ev{Type: "session.updated", Data: map[string]any{"info": info}})
	return msg["status"] == "completed", false, nil
}

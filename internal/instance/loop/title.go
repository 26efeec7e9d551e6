package loop

import (
	"context"
	"maps"
	"regexp"
	"strings"
	"unicode"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/session"
)

// A root session is titled after its first prompt: beside the run that
// answers the prompt (never delaying or failing it), the hidden title
// agent is asked for a title, with no tools and a small output bound,
// through the same provider path as a turn (in a workspace, the gateway
// in-process: its budgets and policies apply, and its usage record names
// the session). The session's own cost and tokens stay the sum of its
// messages', which the title request has none of. The cleaned answer
// replaces the placeholder title only if the session still has it; a
// failed request or an empty answer leaves the placeholder.

// titleOutputTokens bounds the title agent's answer when its definition
// sets no output limit of its own.
const titleOutputTokens = 64

// titleMaxRunes bounds a stored title; a longer answer is cut with "...".
const titleMaxRunes = 100

// titleInstruction precedes the conversation the title agent names.
const titleInstruction = "Generate a title for this conversation:\n"

// startTitle titles the session in the background when userID, the user
// message just delivered, is the first of a root session that keeps its
// placeholder title; with userID "" (a run resumed after a restart), when
// the session has one user message only.
func (r *Runner) startTitle(sid, userID string) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.titling[sid]++
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			if r.titling[sid]--; r.titling[sid] <= 0 {
				delete(r.titling, sid)
			}
			r.mu.Unlock()
		}()
		r.title(r.ctx, sid, userID)
	}()
}

// Titling reports whether a title request of the session runs: started
// when a run delivers the session's first prompt, before its first step,
// it may outlast the run.
func (r *Runner) Titling(sid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.titling[sid] > 0
}

// title asks the title agent for the session's title and records it.
func (r *Runner) title(ctx context.Context, sid, userID string) {
	s := r.server()
	st, err := s.readStep(ctx, sid)
	if err != nil || st.info.ParentID != "" || !session.IsDefaultTitle(st.info.Title) {
		return
	}
	first, users := -1, 0
	for i, m := range st.msgs {
		if m.Header.Type == "user" {
			if users++; first < 0 {
				first = i
			}
		}
	}
	if first < 0 || (userID != "" && st.msgs[first].Header.ID != userID) || (userID == "" && users != 1) {
		return // not the session's first prompt
	}
	agent := s.locationAgent(st.info, "title")
	if agent == nil {
		return // the title agent is disabled
	}
	prov, model := s.titleProvider(ctx, r.Provider(), st.info, agent)
	conv := conversation(agent, model.ID, st.msgs[:first+1])
	conv.Messages = append([]formats.Message{formats.Text(formats.RoleUser, titleInstruction)}, conv.Messages...)
	conv.Headers = withSession(conv.Headers, sid)
	conv.Settings = titleSettings(conv.Settings)
	step, serr := providerStep(ctx, prov, conv, nil)
	if ctx.Err() != nil {
		return // shutting down
	}
	// The prompt's and the answer's text stay out of the log.
	if serr != nil {
		s.Logger.Debug("session title: the request failed; the session keeps its title", zap.String("session", sid),
			zap.String("model", model.ID), zap.String("error", serr.Type), zap.Int("status", serr.Status))
		return
	}
	title := ""
	if step != nil {
		title = cleanTitle(step.Text)
	}
	if title == "" {
		s.Logger.Debug("session title: the answer held no title; the session keeps its title", zap.String("session", sid), zap.String("model", model.ID))
		return
	}
	set, err := s.SetGeneratedTitle(context.WithoutCancel(ctx), sid, title)
	switch {
	case err != nil && !session.Gone(err):
		s.Logger.Debug("session title: cannot store it", zap.String("session", sid), zap.Error(err))
	case err == nil && !set:
		s.Logger.Debug("session title: the session was named meanwhile; its name is kept", zap.String("session", sid))
	}
}

// locationAgent is the agent id of the session's location, nil when the
// location has none (a disabled agent).
func (s svc) locationAgent(info *session.Info, id string) *agents.Agent {
	list := s.Locations.AgentsOf(info.Location.Directory)
	if list == nil {
		list = agents.Builtin()
	}
	for i := range list {
		if list[i].ID == id {
			return &list[i]
		}
	}
	return nil
}

// titleProvider is the provider configuration and the model of a title
// request: the title agent's model, else the configured title model,
// else the model the session's turns use.
func (s svc) titleProvider(ctx context.Context, prov ProviderConfig, info *session.Info, agent *agents.Agent) (ProviderConfig, agents.ModelRef) {
	var model *agents.ModelRef
	switch {
	case agent.Model != nil:
		model = agent.Model
	case prov.TitleModel != "":
		model = &agents.ModelRef{ID: prov.TitleModel, ProviderID: ProviderID}
	}
	if model == nil {
		prov = s.resolveProvider(ctx, prov, info)
		return prov, modelOf(prov, info, s.resolveAgent(info))
	}
	titled := *info
	titled.Model = model
	return s.resolveProvider(ctx, prov, &titled), *model
}

// titleOutputNames are the names an agent's settings give the output
// limit.
var titleOutputNames = []string{"maxTokens", "max_tokens", "maxOutputTokens"}

// titleSettings are the title agent's request settings with the output
// bound: its own, when its definition sets one, else titleOutputTokens.
func titleSettings(settings map[string]any) map[string]any {
	out := maps.Clone(settings)
	if out == nil {
		out = map[string]any{}
	}
	for _, n := range titleOutputNames {
		if _, ok := out[n]; ok {
			return out
		}
	}
	out["maxTokens"] = titleOutputTokens
	return out
}

// thinkBlock is reasoning some models write inline before their answer;
// an unclosed one (the answer cut by the output bound) runs to the end.
var thinkBlock = regexp.MustCompile(`(?s)<think>.*?(</think>|$)`)

// titleLabel is a "Title:" label before the title, plain or emphasised.
var titleLabel = regexp.MustCompile(`(?i)^[*_]{0,2}title[*_]{0,2}\s*:\s*[*_]{0,2}`)

// titleWrappers are the marks a model may put around a whole title.
var titleWrappers = [][2]string{{`"`, `"`}, {`'`, `'`}, {"“", "”"}, {"‘", "’"}, {"«", "»"}, {"`", "`"},
	{"**", "**"}, {"__", "__"}, {"*", "*"}, {"_", "_"}}

// cleanTitle is the title in a title agent's answer: its first non-empty
// line, without inline reasoning, markdown (heading marks, a list bullet,
// emphasis or code marks around it), a "Title:" label or quotes around
// it, with its spaces collapsed, and at most titleMaxRunes long ("" when
// nothing is left).
func cleanTitle(answer string) string {
	answer = thinkBlock.ReplaceAllString(answer, "")
	line := ""
	for l := range strings.SplitSeq(answer, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line = l
			break
		}
	}
	line = strings.Join(strings.FieldsFunc(line, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	for changed := true; changed && line != ""; {
		changed = false
		before := line
		line = strings.TrimSpace(strings.TrimLeft(line, "#"))
		for _, b := range []string{"- ", "+ ", "* "} {
			line = strings.TrimPrefix(line, b)
		}
		line = strings.TrimSpace(titleLabel.ReplaceAllString(line, ""))
		for _, w := range titleWrappers {
			if len(line) > len(w[0])+len(w[1]) && strings.HasPrefix(line, w[0]) && strings.HasSuffix(line, w[1]) {
				line = strings.TrimSpace(line[len(w[0]) : len(line)-len(w[1])])
				break
			}
		}
		changed = line != before
	}
	if r := []rune(line); len(r) > titleMaxRunes {
		line = strings.TrimSpace(string(r[:titleMaxRunes-3])) + "..."
	}
	return line
}

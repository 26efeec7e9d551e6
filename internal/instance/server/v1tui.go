package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/loop"
	v1 "github.com/agentgate/agentgate/internal/instance/v1"
	"github.com/agentgate/agentgate/internal/router"
)

// v1TUIRoutes are the first routes the released TUI (`opencode attach`)
// reads as it starts and drives a session, besides v1Routes: the
// project, paths, the v1 provider and agent catalogues, commands, the
// global event stream, and the features this server does not have
// (formatters, LSP, MCP, workspaces, provider sign-in), answered empty.
func (s *Server) v1TUIRoutes(rt *router.Router) {
	rt.Handle("GET", "/project/current", s.v1Project)
	rt.Handle("GET", "/project/{projectID}/directories", staticJSON([]any{}))
	rt.Handle("GET", "/session/{sessionID}/diff", s.v1Diff)
	rt.Handle("GET", "/path", s.v1Path)
	rt.Handle("GET", "/vcs", s.v1VCS)
	rt.Handle("GET", "/config/providers", s.v1ConfigProviders)
	rt.Handle("GET", "/provider", s.v1Providers)
	rt.Handle("GET", "/provider/auth", staticJSON(map[string]any{}))
	rt.Handle("GET", "/agent", s.v1Agents)
	rt.Handle("GET", "/command", s.v1Commands)
	rt.Handle("GET", "/formatter", staticJSON([]any{}))
	rt.Handle("GET", "/lsp", staticJSON([]any{}))
	rt.Handle("GET", "/mcp", staticJSON(map[string]any{}))
	rt.Handle("GET", "/experimental/capabilities", staticJSON(map[string]any{"backgroundSubagents": false}))
	rt.Handle("GET", "/experimental/console", staticJSON(map[string]any{"consoleManagedProviders": []any{}, "switchableOrgCount": 0}))
	rt.Handle("GET", "/experimental/workspace", staticJSON([]any{}))
	rt.Handle("GET", "/experimental/workspace/status", staticJSON([]any{}))
	rt.Handle("GET", "/experimental/resource", staticJSON(map[string]any{}))
	rt.Handle("GET", "/api/reference", s.emptyInLocation)
	rt.Handle("GET", "/api/integration", s.emptyInLocation)
	rt.Handle("GET", "/global/event", s.v1GlobalEvents)
	rt.Handle("POST", "/tui/show-toast", s.v1ShowToast)
}

// v1ShowToast asks the TUIs attached to a location to show a toast
// (client.tui.showToast, which plugins call): a tui.toast.show event on
// the location's stream, {title?, message, variant, duration?}.
func (s *Server) v1ShowToast(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.v1Location(r)
	if err != nil {
		return err
	}
	var in struct {
		Title    *string  `json:"title"`
		Message  string   `json:"message"`
		Variant  string   `json:"variant"`
		Duration *float64 `json:"duration"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	switch in.Variant {
	case "info", "success", "warning", "error":
	default:
		return errs.Field("variant", "variant must be info, success, warning or error")
	}
	if in.Message == "" || len(in.Message) > 4096 || (in.Title != nil && len(*in.Title) > 256) {
		return errs.Field("message", "a toast needs a message of at most 4 KB and a title of at most 256 bytes")
	}
	if in.Duration != nil && (*in.Duration < 0 || *in.Duration > 600000) {
		return errs.Field("duration", "duration is 0 to 600000 ms")
	}
	data := map[string]any{"message": in.Message, "variant": in.Variant}
	if in.Title != nil {
		data["title"] = *in.Title
	}
	if in.Duration != nil {
		data["duration"] = *in.Duration
	}
	s.opts.Bus.Publish("tui.toast.show", &events.LocationRef{Directory: loc.Directory}, data)
	writeJSON(w, http.StatusOK, true)
	return nil
}

func staticJSON(v any) router.Handler {
	return func(w http.ResponseWriter, _ *http.Request, _ router.Params) error {
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}

func (s *Server) emptyInLocation(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	return s.inLocation(w, r, func(string, string) (any, error) { return []any{}, nil })
}

func (s *Server) v1Project(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.v1Location(r)
	if err != nil {
		return err
	}
	p := map[string]any{"id": loc.Project.ID, "worktree": loc.Project.Directory, "sandboxes": []any{},
		"time": map[string]any{"created": 0, "updated": 0}}
	if _, err := os.Stat(filepath.Join(loc.Project.Directory, ".git")); err == nil {
		p["vcs"] = "git"
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// v1Path names the location's directories; home is the project's, and
// state and config are empty: the server keeps no files of a user's.
func (s *Server) v1Path(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.v1Location(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"home": loc.Project.Directory, "state": "", "config": "",
		"worktree": loc.Project.Directory, "directory": loc.Directory})
	return nil
}

// v1VCS is the project's git branch, from .git/HEAD.
func (s *Server) v1VCS(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.v1Location(r)
	if err != nil {
		return err
	}
	out := map[string]any{"default_branch": nil}
	if head, err := os.ReadFile(filepath.Join(loc.Project.Directory, ".git", "HEAD")); err == nil {
		if ref, ok := strings.CutPrefix(strings.TrimSpace(string(head)), "ref: refs/heads/"); ok {
			out["branch"] = ref
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// v1Provider is the v1 Provider record of the instance's provider.
func (s *Server) v1Provider() (map[string]any, bool) {
	providers, models := s.catalog()
	if len(providers) == 0 {
		return nil, false
	}
	ms := map[string]any{}
	for _, m := range models {
		cost := m.Cost[0]
		ms[m.ID] = map[string]any{"id": m.ID, "providerID": loop.ProviderID, "name": m.Name, "family": "",
			"api": map[string]any{"id": m.ID, "url": "", "npm": "@ai-sdk/openai-compatible"},
			"capabilities": map[string]any{"temperature": m.Temperature, "reasoning": m.Reasoning, "attachment": m.Attachment,
				"toolcall": m.Capabilities.Tools, "input": modalities(m.Capabilities.Input), "output": modalities(m.Capabilities.Output),
				"interleaved": false},
			"cost":   map[string]any{"input": cost.Input, "output": cost.Output, "cache": map[string]any{"read": cost.Cache.Read, "write": cost.Cache.Write}},
			"limit":  map[string]any{"context": m.Limit.Context, "output": m.Limit.Output},
			"status": "active", "options": map[string]any{}, "headers": map[string]any{}, "release_date": "", "variants": map[string]any{}}
	}
	return map[string]any{"id": loop.ProviderID, "name": providers[0].Name, "source": "config", "env": []any{},
		"options": map[string]any{}, "models": ms}, true
}

// modalities is a v1 record's modality flags for a model's list of
// modalities (text when the list is empty).
func modalities(list []string) map[string]any {
	out := map[string]any{"text": len(list) == 0, "audio": false, "image": false, "video": false, "pdf": false}
	for _, m := range list {
		if _, ok := out[m]; ok {
			out[m] = true
		}
	}
	return out
}

func (s *Server) v1Defaults() map[string]any {
	out := map[string]any{}
	if d := s.defaultModel(); d != "" {
		out[loop.ProviderID] = d
	}
	return out
}

func (s *Server) v1ConfigProviders(w http.ResponseWriter, _ *http.Request, _ router.Params) error {
	list := []any{}
	if p, ok := s.v1Provider(); ok {
		list = append(list, p)
	}
	writeJSON(w, http.StatusOK, map[string]any{"providers": list, "default": s.v1Defaults()})
	return nil
}

func (s *Server) v1Providers(w http.ResponseWriter, _ *http.Request, _ router.Params) error {
	list, connected := []any{}, []string{}
	if p, ok := s.v1Provider(); ok {
		list, connected = append(list, p), append(connected, loop.ProviderID)
	}
	writeJSON(w, http.StatusOK, map[string]any{"all": list, "default": s.v1Defaults(), "connected": connected})
	return nil
}

// v1Agents lists the location's agents as v1 Agent records.
func (s *Server) v1Agents(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.v1Location(r)
	if err != nil {
		return err
	}
	builtin := map[string]bool{}
	for _, a := range agents.Builtin() {
		builtin[a.ID] = true
	}
	out := make([]map[string]any, 0, len(loc.Agents))
	for _, a := range loc.Agents {
		rules := make([]v1.Rule, 0, len(a.Permissions))
		for _, p := range a.Permissions {
			rules = append(rules, v1.Rule{Permission: p.Action, Pattern: p.Resource, Action: p.Effect})
		}
		rec := map[string]any{"name": a.ID, "mode": a.Mode, "native": builtin[a.ID], "permission": rules, "options": map[string]any{}}
		if a.Description != "" {
			rec["description"] = a.Description
		}
		if a.Hidden {
			rec["hidden"] = true
		}
		if a.Model != nil {
			rec["model"] = map[string]any{"providerID": a.Model.ProviderID, "modelID": a.Model.ID}
		}
		if a.Color != "" {
			rec["color"] = a.Color
		}
		if a.Steps > 0 {
			rec["steps"] = a.Steps
		}
		out = append(out, rec)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) v1Commands(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.v1Location(r)
	if err != nil {
		return err
	}
	cmds, err := s.v1CommandList(loc.Project.Directory, loc.Canonical)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(cmds))
	for _, c := range cmds {
		rec := map[string]any{"name": c.Name, "source": "command", "template": c.Template, "hints": commandHints(c.Template)}
		if c.Description != "" {
			rec["description"] = c.Description
		}
		if c.Agent != "" {
			rec["agent"] = c.Agent
		}
		if c.Model != nil {
			rec["model"] = c.Model.ProviderID + "/" + c.Model.ID
		}
		if c.Subtask != nil {
			rec["subtask"] = *c.Subtask
		}
		out = append(out, rec)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

var hintPattern = regexp.MustCompile(`\$\d+`)

// commandHints are the placeholders a command's template takes ($1, $2,
// …, then $ARGUMENTS), which the TUI shows beside the command.
func commandHints(template string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, m := range hintPattern.FindAllString(template, -1) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	sort.Strings(out)
	if strings.Contains(template, "$ARGUMENTS") {
		out = append(out, "$ARGUMENTS")
	}
	return out
}

// v1GlobalEvents is the v1 stream of every location: each event as
// {directory, payload: {id, type, properties}}.
func (s *Server) v1GlobalEvents(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	tr := &v1.Translator{Root: s.v1Root, DefaultModel: s.defaultModel}
	s.opts.Bus.Serve(w, r, events.Stream{Heartbeat: s.opts.Heartbeat, Transform: func(rec []byte) [][]byte {
		evs, dir := tr.Translate(rec)
		out := make([][]byte, 0, len(evs))
		for _, ev := range evs {
			wrapped := map[string]any{"payload": ev}
			if dir != "" {
				wrapped["directory"] = dir
			}
			if b, err := json.Marshal(wrapped); err == nil {
				out = append(out, b)
			}
		}
		return out
	}})
	return nil
}

// v1Diff is a session's file changes as v1 FileDiff records, from its
// steps' snapshots: those of one message's turn (?messageID=), or of the
// whole session.
func (s *Server) v1Diff(w http.ResponseWriter, r *http.Request, p router.Params) error {
	sid, err := pathSession(p)
	if err != nil {
		return err
	}
	d, err := s.sessions.Diff(r.Context(), sid, r.URL.Query().Get("messageID"))
	return jsonOf(w, d, err)
}

package webapp

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/session"
)

// listPage is how many root sessions one page of the list shows; each
// shows up to maxChildren of its children.
const (
	listPage    = 25
	maxChildren = 20
)

type sessionsData struct {
	Search         string
	Project        string
	Sessions       []sessionView
	Previous, Next string
	Agents         []agents.Agent
	Models         []Model
}

// sessionsPage is the session list: root sessions by last update (the
// default project's first on each page), each with its children, a
// search over titles, and the API's cursors for paging.
func (a *App) sessionsPage(w http.ResponseWriter, r *http.Request) {
	sess := a.opts.Backend.Sessions()
	qv := r.URL.Query()
	q := &session.ListQuery{ParentID: "null", Search: strings.TrimSpace(qv.Get("search"))}
	var cursor *string
	if c := qv.Get("cursor"); c != "" {
		cursor = &c
	}
	page, err := sess.List(ctx(r), q, cursor, listPage)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if cursor != nil {
		// the filters come from the cursor; show its search in the box
		var cq struct {
			Search string `json:"search"`
		}
		if b, err := decodeB64(*cursor); err == nil {
			json.Unmarshal(b, &cq)
		}
		q.Search = cq.Search
	}
	running := map[string]bool{}
	for _, id := range sess.Active() {
		running[id] = true
	}
	project := a.opts.Backend.DefaultDirectory()
	d := sessionsData{Search: q.Search, Project: project, Models: a.opts.Backend.Models()}
	d.Agents, _ = a.opts.Backend.Agents()
	d.Agents = primaryAgents(d.Agents)
	for _, raw := range page.Data {
		v, err := a.view(r, raw, running)
		if err != nil {
			continue
		}
		kids, err := sess.List(ctx(r), &session.ListQuery{ParentID: v.ID}, nil, maxChildren)
		if err == nil {
			for _, k := range kids.Data {
				if kv, err := a.view(r, k, running); err == nil {
					v.Children = append(v.Children, kv)
				}
			}
		}
		d.Sessions = append(d.Sessions, v)
	}
	// The default project's sessions first, each group by last update.
	slices.SortStableFunc(d.Sessions, func(x, y sessionView) int {
		return boolRank(!within(x.Location.Directory, project)) - boolRank(!within(y.Location.Directory, project))
	})
	if len(page.Data) > 0 {
		if cursor != nil || len(page.Data) == listPage {
			d.Next = page.Cursor["next"]
		}
		if cursor != nil {
			d.Previous = page.Cursor["previous"]
		}
	}
	pd := a.data(r, "Sessions", "sessions")
	pd.Data = d
	a.render(w, http.StatusOK, "sessions", pd)
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// within reports whether dir is root or below it.
func within(dir, root string) bool {
	if root == "" {
		return false
	}
	rel, err := filepath.Rel(root, dir)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// primaryAgents are the agents a person picks for a session (not the
// subagents a session starts, not hidden ones).
func primaryAgents(list []agents.Agent) []agents.Agent {
	var out []agents.Agent
	for _, ag := range list {
		if !ag.Hidden && ag.Mode != "subagent" {
			out = append(out, ag)
		}
	}
	return out
}

func (a *App) view(r *http.Request, raw json.RawMessage, running map[string]bool) (sessionView, error) {
	info := new(session.Info)
	if err := json.Unmarshal(raw, info); err != nil {
		return sessionView{}, err
	}
	v := sessionView{Info: info, Running: running[info.ID]}
	if !v.Running {
		v.LastRun = lastRun(ctx(r), a.opts.Backend.Sessions(), info)
	}
	return v, nil
}

// createSession makes a root session in the default location with the
// form's title, agent and model, and opens it.
func (a *App) createSession(w http.ResponseWriter, r *http.Request) {
	in := session.CreateInput{Directory: a.opts.Backend.DefaultDirectory()}
	if t := strings.TrimSpace(r.PostForm.Get("title")); t != "" {
		in.Title = &t
	}
	if ag := r.PostForm.Get("agent"); ag != "" {
		in.Agent = &ag
	}
	if m := r.PostForm.Get("model"); m != "" {
		ref, err := a.model(m)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		in.Model = ref
	}
	info, err := a.opts.Backend.Sessions().Create(ctx(r), in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "")
}

// model resolves a "provider/model" form value against the catalog.
func (a *App) model(v string) (*agents.ModelRef, error) {
	for _, m := range a.opts.Backend.Models() {
		if m.Ref() == v {
			return &agents.ModelRef{ProviderID: m.ProviderID, ID: m.ID}, nil
		}
	}
	return nil, errs.Field("model", "unknown model "+v)
}

func (a *App) renameSession(w http.ResponseWriter, r *http.Request, info *session.Info) {
	t := strings.TrimSpace(r.PostForm.Get("title"))
	if t == "" {
		a.fail(w, r, errs.Field("title", "a title must not be empty"))
		return
	}
	if _, err := a.opts.Backend.Sessions().Update(ctx(r), info.ID, session.UpdateInput{Title: &t}); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(info.ID), "renamed")
}

func (a *App) forkSession(w http.ResponseWriter, r *http.Request, info *session.Info) {
	fork, err := a.opts.Backend.Sessions().Fork(ctx(r), info.ID, nil)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, sessionPath(fork.ID), "forked")
}

// deletePage asks before a session (and its children) is deleted.
func (a *App) deletePage(w http.ResponseWriter, r *http.Request, info *session.Info) {
	d := a.data(r, "Delete "+sessionView{Info: info}.Name(), "sessions")
	d.Data = sessionView{Info: info}
	a.render(w, http.StatusOK, "delete", d)
}

func (a *App) deleteSession(w http.ResponseWriter, r *http.Request, info *session.Info) {
	if err := a.opts.Backend.Sessions().Remove(ctx(r), info.ID); err != nil {
		a.fail(w, r, err)
		return
	}
	redirect(w, r, "/", "deleted")
}

// exportSession downloads the session and its settled messages as the
// export route gives them.
func (a *App) exportSession(w http.ResponseWriter, r *http.Request, info *session.Info) {
	ex, err := a.opts.Backend.Sessions().Export(ctx(r), info.ID, false)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	b, err := json.MarshalIndent(map[string]any{"data": ex}, "", "  ")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="`+info.ID+`.json"`)
	w.Write(b)
}

package instanceapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/store"
)

// Session list limits.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

func (s *Server) sessionRoutes(rt *router.Router) {
	rt.Handle("GET", "/api/session", s.listSessions)
	rt.Handle("POST", "/api/session", s.createSession)
	rt.Handle("GET", "/api/session/active", s.activeSessions)
	rt.Handle("GET", "/api/session/{sessionID}", s.getSession)
	rt.Handle("PATCH", "/api/session/{sessionID}", s.updateSession)
	rt.Handle("DELETE", "/api/session/{sessionID}", s.removeSession)
	rt.Handle("POST", "/api/session/{sessionID}/prompt", s.promptSession)
	rt.Handle("POST", "/api/session/{sessionID}/fork", s.forkSession)
	rt.Handle("POST", "/api/session/{sessionID}/agent", s.switchAgent)
	rt.Handle("POST", "/api/session/{sessionID}/model", s.switchModel)
	rt.Handle("POST", "/api/session/{sessionID}/move", s.moveSession)
	rt.Handle("POST", "/api/session/{sessionID}/interrupt", s.interruptSession)
	rt.Handle("POST", "/api/experimental/session/import", s.importSession)
	rt.Handle("GET", "/api/experimental/session/stats", s.sessionStats)
	rt.Handle("GET", "/api/experimental/session/{sessionID}/export", s.exportSession)
}

// pathSession validates the {sessionID} path parameter.
func pathSession(p router.Params) (string, error) {
	id := p["sessionID"]
	if err := checkSessionID("sessionID", id); err != nil {
		e := err.(*Error)
		e.Fields["kind"] = "params"
		return "", e
	}
	return id, nil
}

func (s *Server) publishSession(typ string, info *SessionInfo, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["sessionID"] = info.ID
	loc := info.Location
	s.opts.Bus.Publish(typ, &loc, data)
}

// ---- create ----

type locationBody struct {
	Directory *string `json:"directory"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	var in struct {
		ID          *string                    `json:"id"`
		ParentID    *string                    `json:"parentID"`
		Title       *string                    `json:"title"`
		Agent       *string                    `json:"agent"`
		Model       *ModelRef                  `json:"model"`
		Location    *locationBody              `json:"location"`
		Metadata    map[string]json.RawMessage `json:"metadata"`
		Permissions []PermissionRule           `json:"permissions"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	now := s.nowMS()
	info := &SessionInfo{Time: SessionTime{Created: now, Updated: now}, Metadata: in.Metadata, Permissions: in.Permissions, Model: in.Model}
	if in.ID != nil {
		if err := checkSessionID("id", *in.ID); err != nil {
			return err
		}
		info.ID = *in.ID
	} else {
		info.ID = ids.next("ses", true, s.opts.Clock.Now())
	}
	if in.ParentID != nil {
		if err := checkSessionID("parentID", *in.ParentID); err != nil {
			return err
		}
		info.ParentID = *in.ParentID
	}
	if err := errors.Join(in.Model.validate("model"), validateRules(in.Permissions)); err != nil {
		return err
	}
	if in.Agent != nil {
		info.Agent = *in.Agent
	}
	if in.Title != nil && *in.Title != "" {
		info.Title = *in.Title
	} else if info.ParentID != "" {
		info.Title = defaultTitle("Child session", now)
	} else {
		info.Title = defaultTitle("New session", now)
	}
	if info.ParentID == "" {
		dir := ""
		if in.Location != nil && in.Location.Directory != nil {
			dir = *in.Location.Directory
		} else {
			d, err := locationQuery(r)
			if err != nil {
				return err
			}
			dir = d
		}
		clean, pid, sub, err := s.placement(dir)
		if err != nil {
			return err
		}
		info.Location, info.ProjectID, info.Subpath = LocationRef{Directory: clean}, pid, sub
	}
	err := s.update(r.Context(), func(tx store.Tx) error {
		if info.ParentID != "" {
			parent, err := s.getInfo(tx, info.ParentID)
			if err != nil {
				return err
			}
			info.Location, info.ProjectID, info.Subpath = parent.Location, parent.ProjectID, parent.Subpath
			if in.Metadata == nil {
				info.Metadata = parent.Metadata
			}
		}
		err := s.putInfo(tx, info, true)
		if errors.Is(err, store.ErrExists) {
			return conflict("Session already exists: "+info.ID, info.ID)
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.created(w, info)
}

// created announces a new session (create, fork, import) and answers it.
func (s *Server) created(w http.ResponseWriter, info *SessionInfo) error {
	s.publishSession("session.created", info, map[string]any{"info": info})
	writeJSON(w, http.StatusOK, map[string]any{"data": info})
	return nil
}

// updated announces a changed session and answers 204.
func (s *Server) updated(w http.ResponseWriter, info *SessionInfo) error {
	s.publishSession("session.updated", info, map[string]any{"info": info})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ---- get / update / remove ----

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	id, err := pathSession(p)
	if err != nil {
		return err
	}
	var info *SessionInfo
	if err := s.view(r.Context(), func(tx store.Tx) (err error) {
		info, err = s.getInfo(tx, id)
		return err
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": info})
	return nil
}

func (s *Server) updateSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	id, err := pathSession(p)
	if err != nil {
		return err
	}
	var in struct {
		Title       *string                    `json:"title"`
		Metadata    map[string]json.RawMessage `json:"metadata"`
		Permissions []PermissionRule           `json:"permissions"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := validateRules(in.Permissions); err != nil {
		return err
	}
	var info *SessionInfo
	err = s.update(r.Context(), func(tx store.Tx) (err error) {
		info, err = s.getInfo(tx, id)
		if err != nil {
			return err
		}
		if in.Title != nil {
			info.Title = *in.Title
			if info.Title == "" {
				if info.Title, err = s.generateTitle(tx, info); err != nil {
					return err
				}
			}
		}
		if in.Metadata != nil {
			info.Metadata = in.Metadata
		}
		if in.Permissions != nil {
			info.Permissions = in.Permissions
		}
		info.Time.Updated = max(s.nowMS(), info.Time.Updated)
		return s.putInfo(tx, info, false)
	})
	if err != nil {
		return err
	}
	return s.updated(w, info)
}

// generateTitle makes a title from the first line of the session's first
// user input, or the default title when it has none.
func (s *Server) generateTitle(tx store.Tx, info *SessionInfo) (string, error) {
	text := ""
	find := func(raw []byte) (bool, error) {
		var m struct {
			Type    string `json:"type"`
			Text    string `json:"text"`
			Payload struct {
				Text string `json:"text"`
			} `json:"payload"`
		}
		if json.Unmarshal(raw, &m) != nil || m.Type != "user" {
			return true, nil
		}
		text = m.Text + m.Payload.Text
		return text == "", nil
	}
	inst := s.instanceName()
	if err := tx.SessionItems(inst, info.ID, store.ItemMessage, find); err != nil {
		return "", err
	}
	if text == "" {
		if err := tx.SessionItems(inst, info.ID, store.ItemInbox, find); err != nil {
			return "", err
		}
	}
	text = strings.TrimSpace(strings.SplitN(strings.TrimSpace(text), "\n", 2)[0])
	if text == "" {
		return defaultTitle("New session", info.Time.Created), nil
	}
	if r := []rune(text); len(r) > 50 {
		text = strings.TrimSpace(string(r[:50])) + "…"
	}
	return text, nil
}

func (s *Server) removeSession(w http.ResponseWriter, r *http.Request, p router.Params) error {
	id, err := pathSession(p)
	if err != nil {
		return err
	}
	var info *SessionInfo
	var removed []string
	err = s.update(r.Context(), func(tx store.Tx) (err error) {
		if info, err = s.getInfo(tx, id); err != nil {
			return err
		}
		removed, err = tx.DeleteInstanceSessionTree(s.instanceName(), id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return sessionNotFound(id)
	}
	if err != nil {
		return err
	}
	for _, rid := range removed {
		s.SetActive(rid, false)
		if s.opts.Runner != nil {
			s.opts.Runner.Interrupt(rid) // its drain ends: the session is gone
		}
		s.opts.Bus.Publish("session.deleted", &info.Location, map[string]any{"sessionID": rid})
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) activeSessions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	s.activeMu.Lock()
	data := make(map[string]any, len(s.active))
	for id := range s.active {
		data[id] = map[string]string{"type": "running"}
	}
	s.activeMu.Unlock()
	if s.opts.Runner != nil {
		for _, id := range s.opts.Runner.Active() {
			data[id] = map[string]string{"type": "running"}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
	return nil
}

// ---- list ----

// listQuery is a session list query as carried in a cursor (without limit).
type listQuery struct {
	Directory *string     `json:"directory,omitempty"`
	Project   *string     `json:"project,omitempty"`
	Subpath   *string     `json:"subpath,omitempty"`
	Order     string      `json:"order,omitempty"`
	Search    string      `json:"search,omitempty"`
	ParentID  string      `json:"parentID,omitempty"`
	Anchor    *listAnchor `json:"anchor,omitempty"`
}

// listAnchor is Session.ListAnchor.
type listAnchor struct {
	ID        string `json:"id"`
	Time      int64  `json:"time"`
	Direction string `json:"direction"`
}

func (q *listQuery) validate(cursor bool) error {
	bad := func(kind, msg string) error {
		if cursor {
			return invalidCursor()
		}
		return invalidRequest(kind, msg)
	}
	switch q.Order {
	case "", "asc", "desc":
	default:
		return bad("query", `order must be "asc" or "desc"`)
	}
	if q.ParentID != "" && q.ParentID != "null" {
		if err := checkSessionID("parentID", q.ParentID); err != nil {
			return bad("query", err.(*Error).Fields["message"].(string))
		}
	}
	if q.Directory != nil && q.Project != nil {
		return bad("query", "give directory or project, not both")
	}
	if q.Subpath != nil && q.Project == nil {
		return bad("query", "subpath needs project")
	}
	if q.Directory != nil {
		d := *q.Directory
		if !filepath.IsAbs(d) || strings.ContainsRune(d, 0) {
			return bad("query", "directory must be an absolute path")
		}
		d = filepath.Clean(d)
		q.Directory = &d
	}
	if q.Project != nil && (*q.Project == "" || strings.ContainsRune(*q.Project, 0)) {
		return bad("query", "project must not be empty")
	}
	if q.Subpath != nil {
		sp := strings.Trim(filepath.ToSlash(filepath.Clean("/"+*q.Subpath)), "/")
		if strings.ContainsRune(sp, 0) {
			return bad("query", "bad subpath")
		}
		q.Subpath = &sp
	}
	if cursor {
		a := q.Anchor
		if a == nil || a.Time < 0 || (a.Direction != "next" && a.Direction != "previous") || checkSessionID("id", a.ID) != nil {
			return invalidCursor()
		}
	}
	return nil
}

func encodeCursor(q listQuery, a listAnchor) string {
	q.Anchor = &a
	b, _ := json.Marshal(q)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(c string) (*listQuery, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(c, "="))
	if err != nil {
		return nil, invalidCursor()
	}
	var q listQuery
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil || dec.More() {
		return nil, invalidCursor()
	}
	if err := q.validate(true); err != nil {
		return nil, err
	}
	return &q, nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	qv := r.URL.Query()
	one := func(name string) (*string, error) {
		v, ok := qv[name]
		if !ok {
			return nil, nil
		}
		if len(v) != 1 {
			return nil, invalidRequest("query", name+" is repeated")
		}
		return &v[0], nil
	}
	var q *listQuery
	limit := defaultListLimit
	if l, err := one("limit"); err != nil {
		return err
	} else if l != nil {
		n, err := strconv.Atoi(*l)
		if err != nil || n < 1 || n > maxListLimit {
			return invalidRequest("query", "limit must be an integer from 1 to "+strconv.Itoa(maxListLimit))
		}
		limit = n
	}
	if c, err := one("cursor"); err != nil {
		return err
	} else if c != nil {
		if q, err = decodeCursor(*c); err != nil {
			return err
		}
	} else {
		q = &listQuery{}
		for name, dst := range map[string]**string{"directory": &q.Directory, "project": &q.Project, "subpath": &q.Subpath} {
			if *dst, err = one(name); err != nil {
				return err
			}
		}
		for name, dst := range map[string]*string{"order": &q.Order, "search": &q.Search, "parentID": &q.ParentID} {
			v, err := one(name)
			if err != nil {
				return err
			}
			if v != nil {
				*dst = *v
			}
		}
		if err := q.validate(false); err != nil {
			return err
		}
	}
	scan := store.SessionScan{Desc: q.Order != "asc"}
	if q.Directory != nil {
		scan.Directory = *q.Directory
	}
	if q.Project != nil {
		scan.Project = *q.Project
		if q.Subpath != nil {
			scan.Subpath, scan.HasSubpath = *q.Subpath, true
		}
	}
	switch q.ParentID {
	case "":
	case "null":
		scan.ParentMode = store.ParentRoot
	default:
		scan.ParentMode, scan.Parent = store.ParentIs, q.ParentID
	}
	previous := false
	if q.Anchor != nil {
		scan.After = &store.SessionAnchor{Updated: q.Anchor.Time, ID: q.Anchor.ID}
		if q.Anchor.Direction == "previous" {
			// walk backwards from the anchor, then restore the order
			previous, scan.Desc = true, !scan.Desc
		}
	}
	search := strings.ToLower(q.Search)
	var page []*store.InstanceSession
	err := s.view(r.Context(), func(tx store.Tx) error {
		page = page[:0]
		return tx.ListInstanceSessions(s.instanceName(), scan, func(rec *store.InstanceSession) (bool, error) {
			if search != "" {
				var t struct {
					Title string `json:"title"`
				}
				if json.Unmarshal(rec.Info, &t) != nil || !strings.Contains(strings.ToLower(t.Title), search) {
					return true, nil
				}
			}
			page = append(page, rec)
			return len(page) < limit, nil
		})
	})
	if err != nil {
		return err
	}
	if previous {
		for i, j := 0, len(page)-1; i < j; i, j = i+1, j-1 {
			page[i], page[j] = page[j], page[i]
		}
	}
	data := make([]json.RawMessage, len(page))
	for i, rec := range page {
		data[i] = rec.Info
	}
	cursor := map[string]string{}
	if len(page) > 0 {
		base := *q
		base.Anchor = nil
		first, last := page[0], page[len(page)-1]
		cursor["previous"] = encodeCursor(base, listAnchor{ID: first.ID, Time: first.Updated, Direction: "previous"})
		cursor["next"] = encodeCursor(base, listAnchor{ID: last.ID, Time: last.Updated, Direction: "next"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "cursor": cursor})
	return nil
}

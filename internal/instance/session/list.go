package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/store"
)

// Session list limits.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// ListQuery is a session list query: the filters, as carried in a cursor.
type ListQuery struct {
	Directory *string `json:"directory,omitempty"`
	Project   *string `json:"project,omitempty"`
	Subpath   *string `json:"subpath,omitempty"`
	// Order is "asc" or "desc" (the default) by time updated.
	Order  string `json:"order,omitempty"`
	Search string `json:"search,omitempty"`
	// ParentID filters children of a session; "null" lists root sessions.
	ParentID string      `json:"parentID,omitempty"`
	Anchor   *listAnchor `json:"anchor,omitempty"`
}

// listAnchor is Session.ListAnchor.
type listAnchor struct {
	ID        string `json:"id"`
	Time      int64  `json:"time"`
	Direction string `json:"direction"`
}

func (q *ListQuery) validate(cursor bool) error {
	bad := func(kind, msg string) error {
		if cursor {
			return errs.InvalidCursor()
		}
		return errs.InvalidRequest(kind, msg)
	}
	switch q.Order {
	case "", "asc", "desc":
	default:
		return bad("query", `order must be "asc" or "desc"`)
	}
	if q.ParentID != "" && q.ParentID != "null" {
		if err := CheckID("parentID", q.ParentID); err != nil {
			return bad("query", err.(*errs.Error).Fields["message"].(string))
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
		if a == nil || a.Time < 0 || (a.Direction != "next" && a.Direction != "previous") || CheckID("id", a.ID) != nil {
			return errs.InvalidCursor()
		}
	}
	return nil
}

func encodeCursor(q ListQuery, a listAnchor) string {
	q.Anchor = &a
	b, _ := json.Marshal(q)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(c string) (*ListQuery, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(c, "="))
	if err != nil {
		return nil, errs.InvalidCursor()
	}
	var q ListQuery
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil || dec.More() {
		return nil, errs.InvalidCursor()
	}
	if err := q.validate(true); err != nil {
		return nil, err
	}
	return &q, nil
}

// Page is one page of a session list: the records as stored, and the
// cursors of the pages before and after it (none when it is empty).
type Page struct {
	Data   []json.RawMessage `json:"data"`
	Cursor map[string]string `json:"cursor"`
}

// List pages through the instance's sessions: by the query's filters, or
// from a cursor a previous page issued (which carries them); limit is
// 1 to MaxListLimit.
func (s *Service) List(ctx context.Context, q *ListQuery, cursor *string, limit int) (*Page, error) {
	if cursor != nil {
		var err error
		if q, err = decodeCursor(*cursor); err != nil {
			return nil, err
		}
	} else if err := q.validate(false); err != nil {
		return nil, err
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
	err := s.ReadTx(ctx, func(tx store.Tx) error {
		page = page[:0]
		return tx.ListInstanceSessions(s.InstanceName(), scan, func(rec *store.InstanceSession) (bool, error) {
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
		return nil, err
	}
	if previous {
		for i, j := 0, len(page)-1; i < j; i, j = i+1, j-1 {
			page[i], page[j] = page[j], page[i]
		}
	}
	out := &Page{Data: make([]json.RawMessage, len(page)), Cursor: map[string]string{}}
	for i, rec := range page {
		out.Data[i] = rec.Info
	}
	if len(page) > 0 {
		base := *q
		base.Anchor = nil
		first, last := page[0], page[len(page)-1]
		out.Cursor["previous"] = encodeCursor(base, listAnchor{ID: first.ID, Time: first.Updated, Direction: "previous"})
		out.Cursor["next"] = encodeCursor(base, listAnchor{ID: last.ID, Time: last.Updated, Direction: "next"})
	}
	return out, nil
}

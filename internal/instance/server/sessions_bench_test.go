package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/store"
)

// BenchmarkSessionList lists 50-session pages of a store holding 100,000
// sessions: the first page and the 100th (reached through cursor.next)
// should cost about the same.
func BenchmarkSessionList(b *testing.B) {
	dir := b.TempDir()
	st := openTestStore(b, dir)
	defer st.Close()
	srv := New(Options{Auth: &Auth{}, DefaultDirectory: dir, Clock: clock.Real{},
		Store: func(context.Context) (store.Store, error) { return st, nil }})
	const total, batch = 100_000, 1000
	for i := 0; i < total; i += batch {
		err := st.Update(context.Background(), func(tx store.Tx) error {
			for j := i; j < i+batch; j++ {
				info := &session.Info{ID: fmt.Sprintf("ses_%08d", j), ProjectID: "p", Title: fmt.Sprint("Session ", j),
					Time: session.Time{Created: int64(j), Updated: int64(j)}, Location: events.LocationRef{Directory: dir}}
				if err := srv.Sessions().PutInfo(tx, info, true); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	get := func(q string) listReply {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest("GET", "/api/session"+q, nil))
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
		var out listReply
		json.Unmarshal(w.Body.Bytes(), &out)
		return out
	}
	// page 100 is reached by following cursor.next 99 times
	cursor := ""
	var page listReply
	for range 99 {
		page = get("?limit=50" + cursorParam(cursor))
		cursor = page.Cursor.Next
	}
	if p := get("?limit=50" + cursorParam(cursor)); len(p.Data) != 50 || p.Data[0].ID != fmt.Sprintf("ses_%08d", total-1-99*50) {
		b.Fatalf("page 100 starts at %v", p.Data[0].ID)
	}
	b.Run("first-page", func(b *testing.B) {
		for b.Loop() {
			get("?limit=50")
		}
	})
	b.Run("page-100", func(b *testing.B) {
		for b.Loop() {
			get("?limit=50&cursor=" + cursor)
		}
	})
}

func cursorParam(c string) string {
	if c == "" {
		return ""
	}
	return "&cursor=" + c
}

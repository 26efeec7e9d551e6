package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

func session(inst, id, parent, dir, project, subpath string, updated int64) *InstanceSession {
	return &InstanceSession{Instance: inst, ID: id, ParentID: parent, Directory: dir, ProjectID: project,
		Subpath: subpath, Updated: updated, Info: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id))}
}

func putSessions(t *testing.T, s Store, create bool, list ...*InstanceSession) {
	t.Helper()
	update(t, s, func(tx Tx) error {
		for _, ses := range list {
			if err := tx.PutInstanceSession(ses, create); err != nil {
				return err
			}
		}
		return nil
	})
}

// listSessions returns the ids of a scan, stopping after limit (0: all).
func listSessions(t *testing.T, tx Tx, inst string, q SessionScan, limit int) []string {
	t.Helper()
	out := []string{}
	err := tx.ListInstanceSessions(inst, q, func(s *InstanceSession) (bool, error) {
		out = append(out, s.ID)
		return limit == 0 || len(out) < limit, nil
	})
	if err != nil {
		t.Fatalf("ListInstanceSessions(%s, %+v): %v", inst, q, err)
	}
	return out
}

func testInstanceSessions(t *testing.T, s Store) {
	a := session("i", "ses_a", "", "/d1", "p1", "", 100)
	b := session("i", "ses_b", "", "/d1", "p1", "x", 300)
	c := session("i", "ses_c", "ses_a", "/d2", "p2", "", 200)
	d := session("i", "ses_d", "ses_c", "/d1", "p1", "", 300)
	other := session("j", "ses_a", "", "/d1", "p1", "", 50) // another instance, same id
	putSessions(t, s, true, a, b, c, d, other)

	err := s.Update(ctx, func(tx Tx) error { return tx.PutInstanceSession(session("i", "ses_a", "", "/x", "px", "", 1), true) })
	if !errors.Is(err, ErrExists) {
		t.Fatalf("create twice: %v, want ErrExists", err)
	}
	for _, bad := range []*InstanceSession{session("", "ses_z", "", "/", "p", "", 1), session("i", "", "", "/", "p", "", 1), session("i", "a\x00b", "", "/", "p", "", 1)} {
		if err := s.Update(ctx, func(tx Tx) error { return tx.PutInstanceSession(bad, true) }); err == nil {
			t.Fatalf("session with instance %q id %q accepted", bad.Instance, bad.ID)
		}
	}

	view(t, s, func(tx Tx) error {
		got, err := tx.InstanceSession("i", "ses_c")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "InstanceSession", got, c)
		got, _ = tx.InstanceSession("j", "ses_a")
		equal(t, "other instance's session", got, other)
		_, err = tx.InstanceSession("i", "ses_z")
		isNotFound(t, "missing session", err)
		_, err = tx.InstanceSession("k", "ses_a")
		isNotFound(t, "missing instance", err)

		for _, tc := range []struct {
			name string
			q    SessionScan
			want []string
		}{
			{"all", SessionScan{}, []string{"ses_a", "ses_c", "ses_b", "ses_d"}},
			{"all desc", SessionScan{Desc: true}, []string{"ses_d", "ses_b", "ses_c", "ses_a"}},
			{"directory", SessionScan{Directory: "/d1"}, []string{"ses_a", "ses_b", "ses_d"}},
			{"directory prefix", SessionScan{Directory: "/d"}, []string{}},
			{"project", SessionScan{Project: "p1", Desc: true}, []string{"ses_d", "ses_b", "ses_a"}},
			{"project root subpath", SessionScan{Project: "p1", HasSubpath: true}, []string{"ses_a", "ses_d"}},
			{"project subpath", SessionScan{Project: "p1", HasSubpath: true, Subpath: "x"}, []string{"ses_b"}},
			{"roots", SessionScan{ParentMode: ParentRoot}, []string{"ses_a", "ses_b"}},
			{"children of a", SessionScan{ParentMode: ParentIs, Parent: "ses_a"}, []string{"ses_c"}},
			{"children of c in d1", SessionScan{Directory: "/d1", ParentMode: ParentIs, Parent: "ses_c"}, []string{"ses_d"}},
			{"roots of p2", SessionScan{Project: "p2", ParentMode: ParentRoot}, []string{}},
			{"after", SessionScan{After: &SessionAnchor{Updated: 200, ID: "ses_c"}}, []string{"ses_b", "ses_d"}},
			{"after desc", SessionScan{Desc: true, After: &SessionAnchor{Updated: 300, ID: "ses_d"}}, []string{"ses_b", "ses_c", "ses_a"}},
			{"after a position between", SessionScan{After: &SessionAnchor{Updated: 250, ID: ""}}, []string{"ses_b", "ses_d"}},
			{"after desc a position between", SessionScan{Desc: true, After: &SessionAnchor{Updated: 300, ID: "ses_c"}}, []string{"ses_b", "ses_c", "ses_a"}},
			{"after the end", SessionScan{After: &SessionAnchor{Updated: 300, ID: "ses_d"}}, []string{}},
		} {
			equal(t, tc.name, listSessions(t, tx, "i", tc.q, 0), tc.want)
		}
		equal(t, "stopped early", listSessions(t, tx, "i", SessionScan{Desc: true}, 2), []string{"ses_d", "ses_b"})
		equal(t, "other instance", listSessions(t, tx, "j", SessionScan{}, 0), []string{"ses_a"})
		equal(t, "instance prefix", listSessions(t, tx, "", SessionScan{}, 0), []string{})
		boom := errors.New("boom")
		if err := tx.ListInstanceSessions("i", SessionScan{}, func(*InstanceSession) (bool, error) { return true, boom }); !errors.Is(err, boom) {
			t.Fatalf("callback error: %v", err)
		}
		return nil
	})

	// Updating moves the index entries: a session is listed once, at its
	// new position, under its new scopes and parent.
	a.Updated, a.Directory = 400, "/d3"
	b.ParentID = "ses_a"
	putSessions(t, s, false, a, b)
	view(t, s, func(tx Tx) error {
		equal(t, "after update", listSessions(t, tx, "i", SessionScan{}, 0), []string{"ses_c", "ses_b", "ses_d", "ses_a"})
		equal(t, "old directory", listSessions(t, tx, "i", SessionScan{Directory: "/d1"}, 0), []string{"ses_b", "ses_d"})
		equal(t, "new directory", listSessions(t, tx, "i", SessionScan{Directory: "/d3"}, 0), []string{"ses_a"})
		equal(t, "roots", listSessions(t, tx, "i", SessionScan{ParentMode: ParentRoot}, 0), []string{"ses_a"})
		equal(t, "children of a", listSessions(t, tx, "i", SessionScan{ParentMode: ParentIs, Parent: "ses_a"}, 0), []string{"ses_c", "ses_b"})
		got, _ := tx.InstanceSession("i", "ses_a")
		equal(t, "updated session", got, a)
		return nil
	})
}

// Paging through many sessions with anchors, both ways, sees each once.
func testInstanceSessionPaging(t *testing.T, s Store) {
	const n = 257
	var all []*InstanceSession
	for i := 0; i < n; i++ {
		// Several sessions share an updated time, so ids break ties.
		all = append(all, session("i", fmt.Sprintf("ses_%03d", i), "", "/d", "p", "", int64(1000+i/3)))
	}
	putSessions(t, s, true, all...)
	for _, desc := range []bool{false, true} {
		for _, size := range []int{1, 40, 99, 100, 101, 300} {
			var seen []string
			var after *SessionAnchor
			view(t, s, func(tx Tx) error {
				for pages := 0; ; pages++ {
					if pages > n+1 {
						t.Fatal("paging does not end")
					}
					var page []*InstanceSession
					err := tx.ListInstanceSessions("i", SessionScan{Desc: desc, After: after, Directory: "/d"}, func(s *InstanceSession) (bool, error) {
						page = append(page, s)
						return len(page) < size, nil
					})
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range page {
						seen = append(seen, p.ID)
					}
					if len(page) < size {
						return nil
					}
					last := page[len(page)-1]
					after = &SessionAnchor{Updated: last.Updated, ID: last.ID}
				}
			})
			var want []string
			for i := 0; i < n; i++ {
				j := i
				if desc {
					j = n - 1 - i
				}
				want = append(want, fmt.Sprintf("ses_%03d", j))
			}
			equal(t, fmt.Sprintf("desc %v, pages of %d", desc, size), seen, want)
		}
	}
}

func testInstanceSessionTreeDelete(t *testing.T, s Store) {
	putSessions(t, s, true,
		session("i", "ses_root", "", "/d", "p", "", 1),
		session("i", "ses_c1", "ses_root", "/d", "p", "", 2),
		session("i", "ses_c2", "ses_root", "/d", "p", "", 3),
		session("i", "ses_g1", "ses_c1", "/d", "p", "", 4),
		session("i", "ses_other", "", "/d", "p", "", 5),
		session("j", "ses_root", "", "/d", "p", "", 1),
	)
	update(t, s, func(tx Tx) error {
		for _, sid := range []string{"ses_root", "ses_g1", "ses_other"} {
			if err := tx.AppendSessionItem("i", sid, ItemMessage, "msg_"+sid, []byte(`"m"`)); err != nil {
				return err
			}
			if err := tx.AppendSessionItem("i", sid, ItemInbox, "in_"+sid, []byte(`"x"`)); err != nil {
				return err
			}
		}
		return tx.AppendSessionItem("j", "ses_root", ItemMessage, "msg_j", []byte(`"j"`))
	})
	var deleted []string
	update(t, s, func(tx Tx) error {
		var err error
		deleted, err = tx.DeleteInstanceSessionTree("i", "ses_root")
		return err
	})
	if len(deleted) != 4 || deleted[0] != "ses_root" {
		t.Fatalf("deleted %v, want ses_root first and its 3 descendants", deleted)
	}
	equal(t, "deleted set", sortedCopy(deleted), []string{"ses_c1", "ses_c2", "ses_g1", "ses_root"})
	view(t, s, func(tx Tx) error {
		for _, sid := range deleted {
			_, err := tx.InstanceSession("i", sid)
			isNotFound(t, "deleted "+sid, err)
			n := 0
			for _, kind := range []byte{ItemMessage, ItemInbox} {
				tx.SessionItems("i", sid, kind, func([]byte) (bool, error) { n++; return true, nil })
			}
			if n != 0 {
				t.Fatalf("%d items of deleted %s remain", n, sid)
			}
			_, err = tx.SessionItemKind("i", sid, "msg_"+sid)
			isNotFound(t, "item index of deleted "+sid, err)
		}
		equal(t, "remaining", listSessions(t, tx, "i", SessionScan{}, 0), []string{"ses_other"})
		equal(t, "remaining children", listSessions(t, tx, "i", SessionScan{ParentMode: ParentIs, Parent: "ses_root"}, 0), []string{})
		equal(t, "other instance", listSessions(t, tx, "j", SessionScan{}, 0), []string{"ses_root"})
		if k, err := tx.SessionItemKind("i", "ses_other", "in_ses_other"); err != nil || k != ItemInbox {
			t.Fatalf("items of a kept session: %c, %v", k, err)
		}
		if k, err := tx.SessionItemKind("j", "ses_root", "msg_j"); err != nil || k != ItemMessage {
			t.Fatalf("items of the other instance: %c, %v", k, err)
		}
		return nil
	})
	// The ids are free again: appending starts a new sequence.
	putSessions(t, s, true, session("i", "ses_root", "", "/d", "p", "", 9))
	update(t, s, func(tx Tx) error {
		return tx.AppendSessionItem("i", "ses_root", ItemMessage, "msg_ses_root", []byte(`"again"`))
	})
	_, err := deletedTree(s, "i", "ses_missing")
	isNotFound(t, "deleting a missing tree", err)
}

func deletedTree(s Store, inst, id string) ([]string, error) {
	var out []string
	err := s.Update(ctx, func(tx Tx) error {
		var err error
		out, err = tx.DeleteInstanceSessionTree(inst, id)
		return err
	})
	return out, err
}

func sortedCopy(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func items(t *testing.T, tx Tx, inst, sid string, kind byte) []string {
	t.Helper()
	out := []string{}
	if err := tx.SessionItems(inst, sid, kind, func(raw []byte) (bool, error) { out = append(out, string(raw)); return true, nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func testSessionItems(t *testing.T, s Store) {
	putSessions(t, s, true, session("i", "ses_1", "", "/d", "p", "", 1), session("i", "ses_10", "", "/d", "p", "", 1))
	const n = 230 // several pages of a paged backend
	var wantMsgs, wantInbox []string
	update(t, s, func(tx Tx) error {
		for i := 0; i < n; i++ {
			kind, id := ItemMessage, fmt.Sprintf("msg_%03d", n-i) // ids do not follow the append order
			if i%5 == 0 {
				kind = ItemInbox
			}
			raw := fmt.Sprintf(`{"n":%d}`, i)
			if err := tx.AppendSessionItem("i", "ses_1", kind, id, []byte(raw)); err != nil {
				return err
			}
			if kind == ItemMessage {
				wantMsgs = append(wantMsgs, raw)
			} else {
				wantInbox = append(wantInbox, raw)
			}
		}
		return tx.AppendSessionItem("i", "ses_10", ItemMessage, "msg_x", []byte(`"other"`))
	})
	view(t, s, func(tx Tx) error {
		equal(t, "messages", items(t, tx, "i", "ses_1", ItemMessage), wantMsgs)
		equal(t, "inbox", items(t, tx, "i", "ses_1", ItemInbox), wantInbox)
		equal(t, "other session", items(t, tx, "i", "ses_10", ItemMessage), []string{`"other"`})
		equal(t, "no items", items(t, tx, "i", "ses_2", ItemMessage), []string{})
		var first []string
		tx.SessionItems("i", "ses_1", ItemMessage, func(raw []byte) (bool, error) { first = append(first, string(raw)); return len(first) < 3, nil })
		equal(t, "stopped early", first, wantMsgs[:3])
		// From an item, both ways; from nothing, from either end.
		from := func(id string, reverse bool, n int) []string {
			out := []string{}
			err := tx.SessionItemsFrom("i", "ses_1", ItemMessage, id, reverse, func(raw []byte) (bool, error) {
				out = append(out, string(raw))
				return len(out) < n, nil
			})
			if err != nil {
				t.Fatalf("SessionItemsFrom(%q, %v): %v", id, reverse, err)
			}
			return out
		}
		// wantMsgs[1] is the message appended at i=2, id msg_228.
		equal(t, "after msg_228", from("msg_228", false, 2), wantMsgs[2:4])
		equal(t, "before msg_228", from("msg_228", true, 5), []string{wantMsgs[0]})
		equal(t, "from the start", from("", false, 2), wantMsgs[:2])
		equal(t, "from the end", from("", true, 2), []string{wantMsgs[len(wantMsgs)-1], wantMsgs[len(wantMsgs)-2]})
		last := "msg_001" // appended at i=229, the last message
		equal(t, "after the last", from(last, false, 5), []string{})
		err := tx.SessionItemsFrom("i", "ses_1", ItemMessage, fmt.Sprintf("msg_%03d", n), false, func([]byte) (bool, error) { return true, nil })
		isNotFound(t, "from an inbox item", err)
		err = tx.SessionItemsFrom("i", "ses_1", ItemMessage, "msg_999", false, func([]byte) (bool, error) { return true, nil })
		isNotFound(t, "from a missing item", err)
		if k, err := tx.SessionItemKind("i", "ses_1", fmt.Sprintf("msg_%03d", n)); err != nil || k != ItemInbox {
			t.Fatalf("SessionItemKind: %c, %v", k, err)
		}
		_, err = tx.SessionItemKind("i", "ses_1", "msg_999")
		isNotFound(t, "SessionItemKind missing", err)
		return nil
	})
	// An id is unique in its session across both kinds, not across sessions.
	for _, kind := range []byte{ItemMessage, ItemInbox} {
		err := s.Update(ctx, func(tx Tx) error { return tx.AppendSessionItem("i", "ses_1", kind, "msg_001", nil) })
		if !errors.Is(err, ErrExists) {
			t.Fatalf("id reused as %c: %v", kind, err)
		}
	}
	update(t, s, func(tx Tx) error { return tx.AppendSessionItem("i", "ses_10", ItemMessage, "msg_001", []byte(`"ok"`)) })
	if err := s.Update(ctx, func(tx Tx) error { return tx.AppendSessionItem("i", "ses_1", ItemMessage, "", nil) }); err == nil {
		t.Fatal("empty item id accepted")
	}
	// Item values are copies: they stay valid after the transaction.
	var kept [][]byte
	view(t, s, func(tx Tx) error {
		return tx.SessionItems("i", "ses_10", ItemMessage, func(raw []byte) (bool, error) { kept = append(kept, raw); return true, nil })
	})
	if len(kept) != 2 || string(kept[0]) != `"other"` || string(kept[1]) != `"ok"` {
		t.Fatalf("kept items: %q", kept)
	}
}

// The callbacks of a scan may query the same transaction (the session
// statistics list sessions and read each one's items), in View and Update,
// over more sessions than one page of a paged backend.
func testQueriesInsideIteration(t *testing.T, s Store) {
	const n = 150
	var list []*InstanceSession
	for i := 0; i < n; i++ {
		list = append(list, session("i", fmt.Sprintf("ses_%03d", i), "", "/d", "p", "", int64(i)))
	}
	putSessions(t, s, true, list...)
	update(t, s, func(tx Tx) error {
		for i := 0; i < n; i++ {
			for j := 0; j < 3; j++ {
				if err := tx.AppendSessionItem("i", fmt.Sprintf("ses_%03d", i), ItemMessage, fmt.Sprintf("m%d", j), []byte(fmt.Sprint(i*10+j))); err != nil {
					return err
				}
			}
		}
		return nil
	})
	check := func(tx Tx) error {
		seen, total := 0, 0
		err := tx.ListInstanceSessions("i", SessionScan{Desc: true}, func(rec *InstanceSession) (bool, error) {
			seen++
			if _, err := tx.InstanceSession("i", rec.ID); err != nil {
				return false, err
			}
			if _, err := tx.SessionItemKind("i", rec.ID, "m1"); err != nil {
				return false, err
			}
			return true, tx.SessionItems("i", rec.ID, ItemMessage, func(raw []byte) (bool, error) {
				total++
				return true, tx.Usage("ws", "", func(*UsageRecord) (bool, error) { return true, nil })
			})
		})
		if err != nil {
			return err
		}
		if seen != n || total != 3*n {
			t.Fatalf("saw %d sessions and %d items, want %d and %d", seen, total, n, 3*n)
		}
		return nil
	}
	view(t, s, check)
	update(t, s, check)
}

// The durable event journal: per-session sequence numbers from 1, the
// session log read after a seq, the instance log read after an id, pruning
// by id, and the session's log deleted with its tree.
func testSessionEvents(t *testing.T, s Store) {
	putSessions(t, s, true, session("j", "ses_a", "", "/d", "p", "", 1), session("j", "ses_b", "ses_a", "/d", "p", "", 1))
	const n = 130 // more than a page of a paged backend
	update(t, s, func(tx Tx) error {
		for i := 1; i <= n; i++ {
			sid := "ses_a"
			if i%2 == 0 {
				sid = "ses_b"
			}
			id := fmt.Sprintf("evt_%04d", i)
			seq, err := tx.AppendSessionEvent("j", sid, id, func(seq uint64) ([]byte, error) {
				return []byte(fmt.Sprintf(`{"id":%q,"seq":%d}`, id, seq)), nil
			})
			if err != nil {
				return err
			}
			if want := uint64((i + 1) / 2); seq != want {
				t.Fatalf("event %d: seq %d, want %d", i, seq, want)
			}
		}
		return nil
	})
	sessionLog := func(tx Tx, sid string, after uint64) []string {
		out := []string{}
		if err := tx.SessionEvents("j", sid, after, func(seq uint64, raw []byte) (bool, error) {
			out = append(out, fmt.Sprintf("%d:%s", seq, raw))
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	instanceLog := func(tx Tx, after string) []string {
		out := []string{}
		if err := tx.InstanceEventsAfter("j", after, func(id string, _ []byte) (bool, error) {
			out = append(out, id)
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	view(t, s, func(tx Tx) error {
		got := sessionLog(tx, "ses_b", 63)
		equal(t, "session log after 63", got, []string{`64:{"id":"evt_0128","seq":64}`, `65:{"id":"evt_0130","seq":65}`})
		if all := sessionLog(tx, "ses_a", 0); len(all) != 65 || all[0] != `1:{"id":"evt_0001","seq":1}` {
			t.Fatalf("whole session log: %d %q", len(all), all[:1])
		}
		equal(t, "instance log after evt_0127", instanceLog(tx, "evt_0127"), []string{"evt_0128", "evt_0129", "evt_0130"})
		equal(t, "instance log after an id that is not there", instanceLog(tx, "evt_0127x"), []string{"evt_0128", "evt_0129", "evt_0130"})
		if all := instanceLog(tx, ""); len(all) != n {
			t.Fatalf("instance log: %d", len(all))
		}
		return nil
	})
	var pruned int
	update(t, s, func(tx Tx) error {
		var err error
		pruned, err = tx.PruneInstanceEvents("j", "evt_0101", 1000)
		return err
	})
	if pruned != 100 {
		t.Fatalf("pruned %d, want 100", pruned)
	}
	view(t, s, func(tx Tx) error {
		if all := instanceLog(tx, ""); len(all) != 30 || all[0] != "evt_0101" {
			t.Fatalf("after prune: %d %v", len(all), all[:1])
		}
		if all := sessionLog(tx, "ses_a", 0); len(all) != 65 {
			t.Fatalf("pruning touched the session log: %d", len(all))
		}
		return nil
	})
	if _, err := deletedTree(s, "j", "ses_a"); err != nil {
		t.Fatal(err)
	}
	putSessions(t, s, true, session("j", "ses_a", "", "/d", "p", "", 1))
	update(t, s, func(tx Tx) error {
		seq, err := tx.AppendSessionEvent("j", "ses_a", "evt_0200", func(uint64) ([]byte, error) { return []byte(`{}`), nil })
		if err == nil && seq != 1 {
			t.Fatalf("a recreated session's journal starts at %d", seq)
		}
		return err
	})
	view(t, s, func(tx Tx) error {
		equal(t, "deleted child's log", sessionLog(tx, "ses_b", 0), []string{})
		return nil
	})
}

package api_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/store"
)

// listRoute is one paged list of the Console API and the field that
// identifies its items.
type listRoute struct{ name, path, id string }

// cursorFixture is two workspaces with at least three items in every list
// (usage too), so that every list has more than one page at limit=1.
func cursorFixture(e *env) (f, other *fixture, routes func(f *fixture) []listRoute) {
	f, other = e.fixture("acme"), e.fixture("other")
	for _, x := range []*fixture{f, other} {
		e.serviceAccount(x.ws)
		e.serviceAccount(x.ws)
		e.key(x.ws, x.sa, store.PermissionInference)
		e.connection(x.ws, store.KindOpenAICompatible, nil)
		e.connection(x.ws, store.KindOpenAICompatible, nil)
		e.connection(x.ws, store.KindOpenAICompatible, nil)
		for i, m := range []string{x.member, x.admin, x.owner, x.member} {
			e.spend(x.ws, m, store.MemberPerson, "conn_a", "m1", t0.Add(time.Duration(i+1)*time.Minute), usdMicros(1))
		}
	}
	routes = func(f *fixture) []listRoute {
		return []listRoute{
			{"service accounts", "/api/v1/service-accounts", "id"},
			{"keys", "/api/v1/service-accounts/" + f.sa + "/keys", "id"},
			{"members", "/api/v1/members", "member_id"},
			{"connections", "/api/v1/connections", "id"},
			{"budgets", "/api/v1/budgets/members", "member_id"},
			{"usage", "/api/v1/usage", "id"},
		}
	}
	return f, other, routes
}

func withQuery(path, query string) string {
	if strings.Contains(path, "?") {
		return path + "&" + query
	}
	return path + "?" + query
}

// walkList pages through a list one item at a time and returns the ids.
func walkList(t *testing.T, e *env, cred string, lr listRoute) []string {
	t.Helper()
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 50 {
			t.Fatalf("%s: paging does not end", lr.name)
		}
		path := withQuery(lr.path, "limit=1")
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.do(req{method: "GET", path: path, cred: cred})
		wantStatus(t, lr.name+" page", r, 200, "")
		got = append(got, ids(r.list(), lr.id)...)
		next, present := r.json["next_cursor"]
		if !present {
			t.Fatalf("%s: no next_cursor member: %s", lr.name, r.raw)
		}
		if next == nil {
			return got
		}
		cursor = next.(string)
	}
}

// firstCursor is the next_cursor of a list's first page at limit=1.
func firstCursor(t *testing.T, e *env, cred string, lr listRoute) string {
	t.Helper()
	r := e.do(req{method: "GET", path: withQuery(lr.path, "limit=1"), cred: cred})
	wantStatus(t, lr.name, r, 200, "")
	c, _ := r.json["next_cursor"].(string)
	if c == "" {
		t.Fatalf("%s: no cursor after a first page of one: %s", lr.name, r.raw)
	}
	return c
}

// A real cursor pages through every list, item by item, to the same items
// the whole list holds.
func TestCursorsPageEveryList(t *testing.T) {
	e := newEnv(t)
	f, _, routes := cursorFixture(e)
	for _, lr := range routes(f) {
		t.Run(lr.name, func(t *testing.T) {
			r := e.do(req{method: "GET", path: withQuery(lr.path, "limit=1000"), cred: f.ownTok})
			wantStatus(t, lr.name, r, 200, "")
			all := ids(r.list(), lr.id)
			if len(all) < 3 {
				t.Fatalf("the fixture has %d items, want at least 3", len(all))
			}
			if got := walkList(t, e, f.ownTok, lr); strings.Join(got, ",") != strings.Join(all, ",") {
				t.Fatalf("paged %v, want %v", got, all)
			}
			// A cursor is opaque: it does not show the id it continues after.
			if c := firstCursor(t, e, f.ownTok, lr); strings.Contains(c, all[0]) {
				t.Fatalf("cursor %q shows the id %s", c, all[0])
			}
		})
	}
	// Cursors do not depend on the process: another service over the same
	// store and master key honours them (a restart, another node).
	lr := routes(f)[0]
	c := firstCursor(t, e, f.ownTok, lr)
	e2 := newEnvWithService(t, e)
	r := e2.do(req{method: "GET", path: withQuery(lr.path, "limit=1&cursor="+url.QueryEscape(c)), cred: f.ownTok})
	wantStatus(t, "cursor on another service", r, 200, "")
}

// Every list answers 400 InvalidCursor to a cursor it did not issue:
// garbage, a bare id, a truncated or altered cursor, and cursors of other
// lists, other workspaces and other service accounts.
func TestCursorsRefused(t *testing.T) {
	e := newEnv(t)
	f, other, routes := cursorFixture(e)
	secondSA := e.serviceAccount(f.ws)
	e.key(f.ws, secondSA, store.PermissionInference)
	e.key(f.ws, secondSA, store.PermissionInference)
	mine, theirs := routes(f), routes(other)
	for i, lr := range mine {
		t.Run(lr.name, func(t *testing.T) {
			real := firstCursor(t, e, f.ownTok, lr)
			flip := func(s string, i int) string {
				b := []byte(s)
				if b[i] == 'A' {
					b[i] = 'B'
				} else {
					b[i] = 'A'
				}
				return string(b)
			}
			all := ids(e.do(req{method: "GET", path: lr.path, cred: f.ownTok}).list(), lr.id)
			bad := map[string]string{
				"garbage":          "garbage",
				"not base64":       "%%%***",
				"bare id":          all[0],
				"truncated":        real[:len(real)-2],
				"one char short":   real[:len(real)-1],
				"first half":       real[:len(real)/2],
				"altered middle":   flip(real, len(real)/2),
				"altered first":    flip(real, 0),
				"altered last":     flip(real, len(real)-1),
				"padded":           real + "==",
				"other list":       firstCursor(t, e, f.ownTok, mine[(i+1)%len(mine)]),
				"other workspace":  firstCursor(t, e, other.ownTok, theirs[i]),
				"very long":        strings.Repeat("A", 4000),
				"whitespace added": real + " ",
			}
			if lr.name == "keys" {
				bad["other service account"] = firstCursor(t, e, f.ownTok,
					listRoute{"keys of another", "/api/v1/service-accounts/" + secondSA + "/keys", "id"})
			}
			for what, c := range bad {
				r := e.do(req{method: "GET", path: withQuery(lr.path, "limit=1&cursor="+url.QueryEscape(c)), cred: f.ownTok})
				wantStatus(t, lr.name+" with a "+what+" cursor", r, 400, "InvalidCursor")
				if !strings.Contains(r.raw, `"message"`) {
					t.Fatalf("%s: no message: %s", what, r.raw)
				}
			}
			// The real one still works.
			r := e.do(req{method: "GET", path: withQuery(lr.path, "limit=1&cursor="+url.QueryEscape(real)), cred: f.ownTok})
			wantStatus(t, lr.name+" with its own cursor", r, 200, "")
		})
	}
}

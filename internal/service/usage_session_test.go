package service_test

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/pgtest"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var sessionT0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

func TestUsageBySessionBadger(t *testing.T) {
	testUsageBySession(t, testenv.New(t, sessionT0).Service)
}

func TestUsageBySessionPostgres(t *testing.T) {
	srv := pgtest.Shared(t)
	st, err := store.OpenPostgres(context.Background(), store.PostgresOptions{DSN: srv.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	master := make([]byte, secrets.MasterKeySize)
	rand.Read(master)
	keys, err := secrets.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(st, keys, clock.NewFake(sessionT0), nil)
	t.Cleanup(svc.Ledger.Close)
	testUsageBySession(t, svc)
}

// testUsageBySession: the usage listing filters by agent session (exact
// match) with the other filters, pages within a session across more
// records than a page of the store, and limits a member to their own.
func testUsageBySession(t *testing.T, svc *service.Service) {
	ctx := context.Background()
	w, err := svc.CreateWorkspace(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	ws := w.ID
	op := service.Operator(ws)
	member := &service.Principal{Kind: service.KindPerson, Workspace: ws, PersonID: "usr_m", Role: store.RoleMember}
	// 300 records: sessions cycle A, B, none; every fifth is the member's.
	const n = 300
	session := func(i int) string { return [...]string{"ses_A", "ses_B", ""}[i%3] }
	owner := func(i int) string {
		if i%5 == 0 {
			return "usr_m"
		}
		return "sa_x"
	}
	var ids []string
	for i := range n {
		at := sessionT0.Add(time.Duration(i-n) * time.Second)
		u := &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: ws, MemberID: owner(i), MemberKind: store.MemberServiceAccount,
			Connection: "conn_" + string(rune('a'+i%2)), Model: "m", Cost: money.Pico(i), Status: 200, Session: session(i)}
		if err := svc.Ledger.Record(ctx, u); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, u.ID)
	}
	pick := func(keep func(i int) bool) []string {
		var out []string
		for i := range n {
			if keep(i) {
				out = append(out, ids[i])
			}
		}
		return out
	}
	list := func(p *service.Principal, q service.UsageQuery) []string {
		t.Helper()
		var out []string
		for page := 0; ; page++ {
			if page > n {
				t.Fatal("paging does not end")
			}
			recs, next, err := svc.Usage(ctx, p, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				out = append(out, r.ID)
			}
			if next == "" {
				return out
			}
			q.Cursor = next
		}
	}
	check := func(what string, got, want []string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %d records %v…, want %d", what, len(got), got[:min(len(got), 3)], len(want))
		}
	}
	check("session A", list(op, service.UsageQuery{Session: "ses_A", Limit: 1000}), pick(func(i int) bool { return i%3 == 0 }))
	check("session A, 7 a page", list(op, service.UsageQuery{Session: "ses_A", Limit: 7}), pick(func(i int) bool { return i%3 == 0 }))
	check("session B on conn_a", list(op, service.UsageQuery{Session: "ses_B", Connection: "conn_a", Limit: 10}),
		pick(func(i int) bool { return i%3 == 1 && i%2 == 0 }))
	check("session B from record 150", list(op, service.UsageQuery{Session: "ses_B", From: sessionT0.Add(-150 * time.Second), Limit: 10}),
		pick(func(i int) bool { return i%3 == 1 && i >= 150 }))
	check("a prefix is not a session", list(op, service.UsageQuery{Session: "ses_", Limit: 10}), nil)
	check("the member's own of session A", list(member, service.UsageQuery{Session: "ses_A", Limit: 4}),
		pick(func(i int) bool { return i%3 == 0 && i%5 == 0 }))
}

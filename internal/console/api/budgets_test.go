package api_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// usdMicros is an amount of whole micro-dollars as pico-dollars.
func usdMicros(m int64) money.Pico { return money.Pico(m * money.PicoPerMicro) }

// spend settles one usage record through the service's ledger, as the
// gateway does: reserve (nothing), then settle with the actual cost.
func (e *env) spend(ws, member, kind, conn, model string, at time.Time, cost money.Pico) *store.UsageRecord {
	e.t.Helper()
	r, err := e.svc.Ledger.Reserve(ctx, ws, member, 0)
	if err != nil {
		e.t.Fatalf("Reserve: %v", err)
	}
	rec := &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: ws, MemberID: member, MemberKind: kind,
		Connection: conn, Model: model, UpstreamModel: model, Cost: cost, Status: 200}
	if err := r.Settle(ctx, rec); err != nil {
		e.t.Fatalf("Settle: %v", err)
	}
	return rec
}

// exact decodes an answer keeping numbers as written (json.Number).
func exact(t *testing.T, r resp) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decoding %s: %v", r.raw, err)
	}
	return m
}

// budgetList is the data of GET /api/v1/budgets/members, numbers exact.
func budgetList(t *testing.T, r resp) []map[string]any {
	t.Helper()
	items, ok := exact(t, r)["data"].([]any)
	if !ok {
		t.Fatalf("budgets answer without a data list: %s", r.raw)
	}
	var out []map[string]any
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			t.Fatalf("budget entry is not an object: %s", r.raw)
		}
		out = append(out, m)
	}
	return out
}

func (e *env) budgets(cred string) []map[string]any {
	e.t.Helper()
	r := e.do(req{method: "GET", path: "/api/v1/budgets/members", cred: cred})
	wantStatus(e.t, "GET budgets", r, 200, "")
	return budgetList(e.t, r)
}

// budgetOf returns the entry of member in a budgets list.
func budgetOf(t *testing.T, list []map[string]any, member string) map[string]any {
	t.Helper()
	for _, b := range list {
		if b["member_id"] == member {
			return b
		}
	}
	t.Fatalf("no budget entry for %s in %v", member, list)
	return nil
}

// putBudget sets a budget over HTTP as the owner credential given.
func (e *env) putBudget(cred, member, body string) map[string]any {
	e.t.Helper()
	r := e.do(req{method: "PUT", path: "/api/v1/budgets/members/" + member, cred: cred, body: body})
	wantStatus(e.t, "PUT budget "+body, r, 200, "")
	d, ok := exact(e.t, r)["data"].(map[string]any)
	if !ok {
		e.t.Fatalf("PUT budget answer without a data object: %s", r.raw)
	}
	return d
}

// wantFields checks the entry's amounts and times: each want value is the
// exact JSON text of the field ("null" for null).
func wantFields(t *testing.T, what string, b map[string]any, want map[string]string) {
	t.Helper()
	for k, w := range want {
		v, ok := b[k]
		if !ok {
			t.Errorf("%s: no field %s in %v", what, k, b)
			continue
		}
		var got string
		switch v := v.(type) {
		case nil:
			got = "null"
		case json.Number:
			got = v.String()
		case string:
			got = v
		default:
			got = fmt.Sprintf("%T %v", v, v)
		}
		if got != w {
			t.Errorf("%s: %s = %s, want %s", what, k, got, w)
		}
	}
}

func ids(list []map[string]any, field string) []string {
	var out []string
	for _, m := range list {
		s, _ := m[field].(string)
		out = append(out, s)
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return strings.Join(a, ",") == strings.Join(b, ",")
}

// TestBudgetsPermissionWalk walks the two budget rows of the matrix with
// every credential kind over HTTP.
func TestBudgetsPermissionWalk(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other") // its people and robot must never appear
	everyone := []string{f.sa, f.member, f.admin, f.owner}

	for i, k := range f.kinds() {
		r := e.do(req{method: "GET", path: "/api/v1/budgets/members", cred: k.cred})
		switch i {
		case 0: // inference key
			wantStatus(t, "GET budgets by "+k.name, r, 403, "Forbidden")
			continue
		default:
			wantStatus(t, "GET budgets by "+k.name, r, 200, "")
		}
		got := ids(budgetList(t, r), "member_id")
		want := everyone
		if i == 2 { // member: own only
			want = []string{f.member}
		}
		if !sameSet(got, want) || len(got) != len(want) {
			t.Errorf("GET budgets by %s: members %v, want %v", k.name, got, want)
		}
		for _, id := range []string{other.sa, other.member, other.admin, other.owner} {
			for _, g := range got {
				if g == id {
					t.Errorf("GET budgets by %s shows %s of another workspace", k.name, id)
				}
			}
		}
	}

	// PUT: inference key and member 403 (and nothing changes); all key,
	// admin and owner 200.
	allow := [5]bool{false, true, false, true, true}
	for i, k := range f.kinds() {
		body := fmt.Sprintf(`{"limit_usd": %d, "period": "monthly"}`, i+1)
		r := e.do(req{method: "PUT", path: "/api/v1/budgets/members/" + f.member, cred: k.cred, body: body})
		what := "PUT budget by " + k.name
		if !allow[i] {
			wantStatus(t, what, r, 403, "Forbidden")
			continue
		}
		wantStatus(t, what, r, 200, "")
		wantFields(t, what, exact(t, r)["data"].(map[string]any), map[string]string{
			"member_id": f.member, "limit_usd": fmt.Sprint(i + 1), "period": "monthly"})
	}
	// The last allowed PUT (owner: 5) stands; the refused ones changed nothing.
	wantFields(t, "after the walk", budgetOf(t, e.budgets(f.ownTok), f.member), map[string]string{"limit_usd": "5"})
	// A member cannot set their own budget either, nor remove it.
	r := e.do(req{method: "PUT", path: "/api/v1/budgets/members/" + f.member, cred: f.memberTok, body: `{"limit_usd": null}`})
	wantStatus(t, "member removes own budget", r, 403, "Forbidden")
	// An All key can budget its own service account and a person.
	e.putBudget(f.all, f.sa, `{"limit_usd": 1, "period": "total"}`)
	// And the member sees their own budget as set.
	wantFields(t, "member's view", budgetOf(t, e.budgets(f.memberTok), f.member), map[string]string{"limit_usd": "5", "period": "monthly"})
}

// TestUsagePermissionWalk: inference 403; a member reads their own records
// only; the others read the whole workspace.
func TestUsagePermissionWalk(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other")
	e.spend(f.ws, f.member, store.MemberPerson, "conn_a", "m1", t0.Add(1*time.Minute), usdMicros(1))
	e.spend(f.ws, f.admin, store.MemberPerson, "conn_a", "m1", t0.Add(2*time.Minute), usdMicros(2))
	e.spend(f.ws, f.sa, store.MemberServiceAccount, "conn_a", "m1", t0.Add(3*time.Minute), usdMicros(3))
	e.spend(f.ws, f.member, store.MemberPerson, "conn_a", "m1", t0.Add(4*time.Minute), usdMicros(4))
	e.spend(other.ws, other.member, store.MemberPerson, "conn_x", "m1", t0.Add(5*time.Minute), usdMicros(5))

	all := []string{f.member, f.admin, f.sa, f.member}
	for i, k := range f.kinds() {
		r := e.do(req{method: "GET", path: "/api/v1/usage", cred: k.cred})
		what := "GET usage by " + k.name
		if i == 0 {
			wantStatus(t, what, r, 403, "Forbidden")
			continue
		}
		wantStatus(t, what, r, 200, "")
		got := ids(r.list(), "member_id")
		want := all
		if i == 2 {
			want = []string{f.member, f.member}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: members %v, want %v", what, got, want)
		}
		if r.json["next_cursor"] != nil {
			t.Errorf("%s: next_cursor %v, want null", what, r.json["next_cursor"])
		}
	}

	// A member asking for someone else's records: 403, for any other member.
	for _, m := range []string{f.admin, f.owner, f.sa, other.member} {
		r := e.do(req{method: "GET", path: "/api/v1/usage?member=" + m, cred: f.memberTok})
		wantStatus(t, "member asks for "+m, r, 403, "Forbidden")
	}
	// Naming themselves is fine.
	r := e.do(req{method: "GET", path: "/api/v1/usage?member=" + f.member, cred: f.memberTok})
	wantStatus(t, "member asks for self", r, 200, "")
	if n := len(r.list()); n != 2 {
		t.Errorf("member asks for self: %d records, want 2", n)
	}
	// Inference key is refused whatever it asks.
	r = e.do(req{method: "GET", path: "/api/v1/usage?member=" + f.sa, cred: f.inference})
	wantStatus(t, "inference key asks for its own service account", r, 403, "Forbidden")
	// Admin filters by any member.
	r = e.do(req{method: "GET", path: "/api/v1/usage?member=" + f.sa, cred: f.adminTok})
	wantStatus(t, "admin filters by sa", r, 200, "")
	if got := ids(r.list(), "member_id"); strings.Join(got, ",") != f.sa {
		t.Errorf("admin filters by sa: %v", got)
	}
	// Another workspace's member id yields nothing (not their records).
	r = e.do(req{method: "GET", path: "/api/v1/usage?member=" + other.member, cred: f.adminTok})
	wantStatus(t, "admin filters by other workspace's member", r, 200, "")
	if n := len(r.list()); n != 0 {
		t.Errorf("admin sees %d records of another workspace", n)
	}
}

// TestSetBudgetValidation: unknown and foreign members, bad bodies.
func TestSetBudgetValidation(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other")

	put := func(member, body string) resp {
		return e.do(req{method: "PUT", path: "/api/v1/budgets/members/" + member, cred: f.ownTok, body: body})
	}
	good := `{"limit_usd": 10, "period": "daily"}`
	wantStatus(t, "unknown member", put("usr_doesnotexist", good), 404, "MemberNotFound")
	wantStatus(t, "unknown service account", put("sa_doesnotexist", good), 404, "MemberNotFound")
	wantStatus(t, "person of another workspace", put(other.member, good), 404, "MemberNotFound")
	wantStatus(t, "service account of another workspace", put(other.sa, good), 404, "MemberNotFound")
	wantStatus(t, "person of another workspace, null limit", put(other.owner, `{"limit_usd": null}`), 404, "MemberNotFound")

	for _, c := range []struct{ what, body string }{
		{"negative limit", `{"limit_usd": -1, "period": "daily"}`},
		{"negative tiny limit", `{"limit_usd": -0.000001, "period": "daily"}`},
		{"bad period", `{"limit_usd": 10, "period": "yearly"}`},
		{"period in capitals", `{"limit_usd": 10, "period": "Daily"}`},
		{"missing period", `{"limit_usd": 10}`},
		{"period not a string", `{"limit_usd": 10, "period": 1}`},
		{"limit as a string", `{"limit_usd": "10", "period": "daily"}`},
		{"unknown field", `{"limit_usd": 10, "period": "daily", "currency": "EUR"}`},
		{"more than 6 decimals", `{"limit_usd": 1.0000001, "period": "daily"}`},
		{"exponent", `{"limit_usd": 1e2, "period": "daily"}`},
		{"above one million", `{"limit_usd": 1000000.000001, "period": "daily"}`},
		{"not an object", `[]`},
		{"empty", ``},
		{"trailing data", good + `{}`},
	} {
		body := c.body
		r := e.do(req{method: "PUT", path: "/api/v1/budgets/members/" + f.member, cred: f.ownTok, body: body,
			contentType: "application/json"})
		wantStatus(t, c.what, r, 400, "InvalidRequest")
	}
	// None of the refused bodies set anything.
	wantFields(t, "after refusals", budgetOf(t, e.budgets(f.ownTok), f.member), map[string]string{"limit_usd": "null", "period": "null"})

	// Bounds that are fine: zero and exactly one million.
	wantFields(t, "zero", e.putBudget(f.ownTok, f.member, `{"limit_usd": 0, "period": "total"}`), map[string]string{"limit_usd": "0", "remaining_usd": "0"})
	wantFields(t, "one million", e.putBudget(f.ownTok, f.member, `{"limit_usd": 1000000, "period": "total"}`), map[string]string{"limit_usd": "1000000"})

	// A null limit removes the budget; the period is then irrelevant.
	e.putBudget(f.ownTok, f.sa, `{"limit_usd": 3.5, "period": "weekly"}`)
	e.putBudget(f.ownTok, f.sa, `{"limit_usd": null}`)
	wantFields(t, "removed", budgetOf(t, e.budgets(f.ownTok), f.sa), map[string]string{
		"limit_usd": "null", "period": "null", "remaining_usd": "null", "resets_at": "null", "spent_usd": "0", "reserved_usd": "0"})
	// Removing a budget that does not exist is fine too.
	e.putBudget(f.ownTok, f.admin, `{"limit_usd": null, "period": "daily"}`)
	wantFields(t, "removed twice", budgetOf(t, e.budgets(f.ownTok), f.admin), map[string]string{"limit_usd": "null"})
}

// TestSetBudgetLimitOverflow: a limit far above the one-million cap must be
// refused, not wrapped around into a tiny limit.
func TestSetBudgetLimitOverflow(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	// 18446744.07371 USD = 18446744073710 micros; ×1e6 wraps int64 past 2^64
	// to 448384 pico-dollars, which is below the cap.
	for _, limit := range []string{"18446744.07371", "10000000", "999999999999"} {
		r := e.do(req{method: "PUT", path: "/api/v1/budgets/members/" + f.member, cred: f.ownTok,
			body: `{"limit_usd": ` + limit + `, "period": "daily"}`})
		if r.status == 200 {
			t.Errorf("limit %s: accepted as limit_usd %v", limit, exact(t, r)["data"].(map[string]any)["limit_usd"])
			continue
		}
		wantStatus(t, "limit "+limit, r, 400, "InvalidRequest")
	}
}

// TestBudgetShape: exact fields, exact decimal amounts, resets_at per
// period, reservations.
func TestBudgetShape(t *testing.T) {
	e := newEnv(t)
	wed := time.Date(2025, 6, 4, 10, 0, 0, 0, time.UTC) // a Wednesday
	e.clk.Set(wed)
	f := e.fixture("acme") // access tokens live an hour: issue them now

	fields := []string{"member_id", "kind", "name", "limit_usd", "period", "spent_usd", "reserved_usd", "remaining_usd", "resets_at"}
	list := e.budgets(f.ownTok)
	if len(list) != 4 {
		t.Fatalf("%d entries, want 4: %v", len(list), list)
	}
	for _, b := range list {
		var keys []string
		for k := range b {
			keys = append(keys, k)
		}
		if !sameSet(keys, fields) {
			t.Errorf("entry fields %v, want exactly %v", keys, fields)
		}
		wantFields(t, "no budget", b, map[string]string{"limit_usd": "null", "period": "null", "remaining_usd": "null",
			"resets_at": "null", "spent_usd": "0", "reserved_usd": "0"})
	}
	wantFields(t, "sa", budgetOf(t, list, f.sa), map[string]string{"kind": "service_account", "name": "robot"})
	for _, p := range []string{f.member, f.admin, f.owner} {
		wantFields(t, "person", budgetOf(t, list, p), map[string]string{"kind": "person", "name": "Person " + p})
	}

	// Exact decimals: 12.345678 − 3 × 0.000001.
	put := e.putBudget(f.ownTok, f.member, `{"limit_usd": 12.345678, "period": "daily"}`)
	wantFields(t, "PUT answer", put, map[string]string{"member_id": f.member, "kind": "person", "limit_usd": "12.345678",
		"period": "daily", "spent_usd": "0", "reserved_usd": "0", "remaining_usd": "12.345678", "resets_at": "2025-06-05T00:00:00Z"})
	for i := 1; i <= 3; i++ {
		e.spend(f.ws, f.member, store.MemberPerson, "conn_a", "m", wed.Add(-time.Duration(i)*time.Minute), usdMicros(1))
	}
	want := map[string]string{"limit_usd": "12.345678", "period": "daily", "spent_usd": "0.000003", "reserved_usd": "0",
		"remaining_usd": "12.345675", "resets_at": "2025-06-05T00:00:00Z"}
	wantFields(t, "after spending", budgetOf(t, e.budgets(f.ownTok), f.member), want)
	wantFields(t, "after spending, member's own view", budgetOf(t, e.budgets(f.memberTok), f.member), want)
	// Sub-micro costs are kept exactly (pico-dollars).
	e.spend(f.ws, f.member, store.MemberPerson, "conn_a", "m", wed.Add(-10*time.Second), money.Pico(1))
	wantFields(t, "pico spend", budgetOf(t, e.budgets(f.ownTok), f.member), map[string]string{
		"spent_usd": "0.000003000001", "remaining_usd": "12.345674999999"})

	// An open reservation shows as reserved and is taken off remaining.
	res, err := e.svc.Ledger.Reserve(ctx, f.ws, f.member, usdMicros(5))
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	wantFields(t, "reserved", budgetOf(t, e.budgets(f.ownTok), f.member), map[string]string{
		"spent_usd": "0.000003000001", "reserved_usd": "0.000005", "remaining_usd": "12.345669999999"})
	res.Release()
	wantFields(t, "released", budgetOf(t, e.budgets(f.ownTok), f.member), map[string]string{
		"reserved_usd": "0", "remaining_usd": "12.345674999999"})
	// A reservation of a member without budget is shown as well.
	res2, err := e.svc.Ledger.Reserve(ctx, f.ws, f.admin, usdMicros(250_000))
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	wantFields(t, "reserved, no budget", budgetOf(t, e.budgets(f.ownTok), f.admin), map[string]string{
		"reserved_usd": "0.25", "remaining_usd": "null", "limit_usd": "null"})
	res2.Release()
	// Remaining never goes negative.
	e.putBudget(f.ownTok, f.owner, `{"limit_usd": 0.000001, "period": "monthly"}`)
	e.spend(f.ws, f.owner, store.MemberPerson, "conn_a", "m", wed.Add(-time.Second), usdMicros(3))
	wantFields(t, "overspent", budgetOf(t, e.budgets(f.ownTok), f.owner), map[string]string{
		"spent_usd": "0.000003", "remaining_usd": "0"})

	// resets_at: the next calendar boundary in UTC.
	for _, c := range []struct {
		now           time.Time
		period, reset string
	}{
		{wed, "daily", "2025-06-05T00:00:00Z"},
		{wed, "weekly", "2025-06-09T00:00:00Z"},
		{wed, "monthly", "2025-07-01T00:00:00Z"},
		{wed, "total", "null"},
		{time.Date(2025, 6, 8, 23, 59, 59, 0, time.UTC), "weekly", "2025-06-09T00:00:00Z"}, // Sunday
		{time.Date(2025, 6, 9, 0, 0, 0, 0, time.UTC), "weekly", "2025-06-16T00:00:00Z"},    // Monday, midnight
		{time.Date(2025, 6, 9, 0, 0, 0, 0, time.UTC), "daily", "2025-06-10T00:00:00Z"},
		{time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC), "monthly", "2026-01-01T00:00:00Z"},
		{time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC), "daily", "2026-01-01T00:00:00Z"},
		{time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), "monthly", "2028-03-01T00:00:00Z"},
	} {
		e.clk.Set(c.now)
		what := fmt.Sprintf("%s at %s", c.period, c.now.Format(time.RFC3339))
		wantFields(t, what+" (PUT)", e.putBudget(f.all, f.sa, `{"limit_usd": 1, "period": "`+c.period+`"}`),
			map[string]string{"period": c.period, "resets_at": c.reset})
		wantFields(t, what+" (GET)", budgetOf(t, e.budgets(f.all), f.sa), map[string]string{"period": c.period, "resets_at": c.reset})
	}
}

// TestBudgetSpendWithoutBudgetIsTheMonth: a member without a budget shows
// their spend of the current calendar month.
func TestBudgetSpendWithoutBudgetIsTheMonth(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	e.spend(f.ws, f.admin, store.MemberPerson, "c", "m", t0.Add(-11*time.Hour), usdMicros(7)) // May 31st
	e.spend(f.ws, f.admin, store.MemberPerson, "c", "m", t0.Add(-time.Minute), usdMicros(11))
	e.spend(f.ws, f.owner, store.MemberPerson, "c", "m", t0.Add(-time.Minute), usdMicros(13))
	wantFields(t, "month spend", budgetOf(t, e.budgets(f.ownTok), f.admin), map[string]string{"spent_usd": "0.000011"})
}

// TestSetBudgetStartsFromRealSpend: a budget set mid-period counts what the
// member already spent in the period, and nothing before it.
func TestSetBudgetStartsFromRealSpend(t *testing.T) {
	e := newEnv(t)
	now := time.Date(2025, 6, 18, 15, 0, 0, 0, time.UTC) // Wednesday
	e.clk.Set(now)
	f := e.fixture("acme")
	day := time.Date(2025, 6, 18, 0, 0, 0, 0, time.UTC)
	week := time.Date(2025, 6, 16, 0, 0, 0, 0, time.UTC)
	month := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	m := f.member
	sp := func(at time.Time, micros int64) {
		e.spend(f.ws, m, store.MemberPerson, "c", "x", at, usdMicros(micros))
	}
	sp(month.Add(-time.Nanosecond), 1)                                                         // May: before every period but total
	sp(month, 10)                                                                              // first instant of the month
	sp(week.Add(-time.Nanosecond), 100)                                                        // Sunday, last instant
	sp(week, 1_000)                                                                            // Monday 00:00
	sp(day.Add(-time.Second), 10_000)                                                          // yesterday
	sp(day, 100_000)                                                                           // today 00:00
	sp(now.Add(-time.Minute), 1_000_000)                                                       // today
	e.spend(f.ws, f.admin, store.MemberPerson, "c", "x", now.Add(-time.Minute), usdMicros(99)) // someone else
	for period, spent := range map[string]string{
		"daily":   "1.1",
		"weekly":  "1.111",
		"monthly": "1.11111",
		"total":   "1.111111",
	} {
		b := e.putBudget(f.ownTok, m, `{"limit_usd": 5, "period": "`+period+`"}`)
		wantFields(t, period+" (PUT)", b, map[string]string{"spent_usd": spent})
		wantFields(t, period+" (GET)", budgetOf(t, e.budgets(f.ownTok), m), map[string]string{"spent_usd": spent})
	}
	// Changing the limit recomputes too: nothing is counted twice.
	e.putBudget(f.ownTok, m, `{"limit_usd": 5, "period": "daily"}`)
	e.putBudget(f.ownTok, m, `{"limit_usd": 6, "period": "daily"}`)
	sp(now, 2)
	wantFields(t, "after re-setting", budgetOf(t, e.budgets(f.ownTok), m), map[string]string{"spent_usd": "1.100002", "remaining_usd": "4.899998"})
}

// TestBudgetPeriodRollover: the fake clock crosses midnight; a daily budget
// starts again from zero, a monthly one does not.
func TestBudgetPeriodRollover(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	// t0 is Sunday 2025-06-01 10:00 UTC.
	e.putBudget(f.ownTok, f.member, `{"limit_usd": 1, "period": "daily"}`)
	e.putBudget(f.ownTok, f.admin, `{"limit_usd": 1, "period": "weekly"}`)
	e.putBudget(f.ownTok, f.owner, `{"limit_usd": 1, "period": "monthly"}`)
	e.putBudget(f.ownTok, f.sa, `{"limit_usd": 1, "period": "total"}`)
	for _, m := range []string{f.member, f.admin, f.owner} {
		e.spend(f.ws, m, store.MemberPerson, "c", "x", t0.Add(time.Hour), usdMicros(250_000))
		e.spend(f.ws, m, store.MemberPerson, "c", "x", t0.Add(2*time.Hour), usdMicros(250_000))
	}
	e.spend(f.ws, f.sa, store.MemberServiceAccount, "c", "x", t0.Add(time.Hour), usdMicros(500_000))
	// Access tokens live an hour: from here on, read with the All key.
	e.clk.Set(t0.Add(13 * time.Hour))
	list := e.budgets(f.all)
	wantFields(t, "daily, same day", budgetOf(t, list, f.member), map[string]string{"spent_usd": "0.5", "remaining_usd": "0.5", "resets_at": "2025-06-02T00:00:00Z"})
	wantFields(t, "weekly, Sunday", budgetOf(t, list, f.admin), map[string]string{"spent_usd": "0.5", "resets_at": "2025-06-02T00:00:00Z"})

	midnight := time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC)
	e.clk.Set(midnight.Add(-time.Nanosecond))
	wantFields(t, "daily, last instant", budgetOf(t, e.budgets(f.all), f.member), map[string]string{"spent_usd": "0.5"})

	e.clk.Set(midnight)
	list = e.budgets(f.all)
	wantFields(t, "daily, next day", budgetOf(t, list, f.member), map[string]string{
		"spent_usd": "0", "remaining_usd": "1", "reserved_usd": "0", "resets_at": "2025-06-03T00:00:00Z"})
	wantFields(t, "weekly, Monday", budgetOf(t, list, f.admin), map[string]string{"spent_usd": "0", "resets_at": "2025-06-09T00:00:00Z"})
	wantFields(t, "monthly", budgetOf(t, list, f.owner), map[string]string{"spent_usd": "0.5", "resets_at": "2025-07-01T00:00:00Z"})
	wantFields(t, "total", budgetOf(t, list, f.sa), map[string]string{"spent_usd": "0.5", "resets_at": "null"})

	// Spend on the new day counts from zero, in memory and in the store
	// (re-setting the budget recomputes it from the records).
	e.clk.Advance(time.Hour)
	e.spend(f.ws, f.member, store.MemberPerson, "c", "x", e.clk.Now(), usdMicros(100_000))
	wantFields(t, "daily, new spend", budgetOf(t, e.budgets(f.all), f.member), map[string]string{"spent_usd": "0.1", "remaining_usd": "0.9"})
	e.putBudget(f.all, f.member, `{"limit_usd": 1, "period": "daily"}`)
	wantFields(t, "daily, re-set", budgetOf(t, e.budgets(f.all), f.member), map[string]string{"spent_usd": "0.1"})
	// Days later, with no traffic at all.
	e.clk.Advance(72 * time.Hour)
	wantFields(t, "daily, three days later", budgetOf(t, e.budgets(f.all), f.member), map[string]string{
		"spent_usd": "0", "resets_at": "2025-06-06T00:00:00Z"})
}

// TestRemoveBudgetAnswerMatchesList: the PUT answer of a removal describes
// the member as GET then lists them.
func TestRemoveBudgetAnswerMatchesList(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	e.putBudget(f.ownTok, f.member, `{"limit_usd": 1, "period": "daily"}`)
	e.spend(f.ws, f.member, store.MemberPerson, "c", "x", t0.Add(-time.Minute), usdMicros(42))
	put := e.putBudget(f.ownTok, f.member, `{"limit_usd": null}`)
	got := budgetOf(t, e.budgets(f.ownTok), f.member)
	for k, v := range got {
		if fmt.Sprint(put[k]) != fmt.Sprint(v) {
			t.Errorf("removal answer %s = %v, GET lists %v", k, put[k], v)
		}
	}
}

// TestUsageListing: filters, time range, paging and bad queries.
func TestUsageListing(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other")
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	type rec struct{ member, kind, conn, model string }
	recs := []rec{
		{f.member, store.MemberPerson, "conn_a", "m1"},
		{f.admin, store.MemberPerson, "conn_b", "m1"},
		{f.sa, store.MemberServiceAccount, "conn_a", "m2"},
		{f.member, store.MemberPerson, "conn_b", "m2"},
		{f.member, store.MemberPerson, "conn_a", "m1"},
		{f.sa, store.MemberServiceAccount, "conn_b", "m1"},
		{f.owner, store.MemberPerson, "conn_a", "m3"},
	}
	var made []*store.UsageRecord
	for i, r := range recs {
		made = append(made, e.spend(f.ws, r.member, r.kind, r.conn, r.model, at(i+1), usdMicros(int64(i+1))))
	}
	// Noise in another workspace, with the same connection and model names.
	e.spend(other.ws, other.member, store.MemberPerson, "conn_a", "m1", at(3), usdMicros(1))

	list := func(query string) resp {
		t.Helper()
		r := e.do(req{method: "GET", path: "/api/v1/usage" + query, cred: f.adminTok})
		wantStatus(t, "GET usage"+query, r, 200, "")
		return r
	}
	want := func(query string, idx ...int) {
		t.Helper()
		r := list(query)
		var wantIDs []string
		for _, i := range idx {
			wantIDs = append(wantIDs, made[i].ID)
		}
		if got := ids(r.list(), "id"); strings.Join(got, ",") != strings.Join(wantIDs, ",") {
			t.Errorf("GET usage%s: ids %v, want records %v", query, got, idx)
		}
		if r.json["next_cursor"] != nil {
			t.Errorf("GET usage%s: next_cursor %v, want null", query, r.json["next_cursor"])
		}
	}
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return "?" + v.Encode()
	}
	ts := func(i int) string { return at(i).Format(time.RFC3339) }

	want("", 0, 1, 2, 3, 4, 5, 6)
	want(q("member", f.member), 0, 3, 4)
	want(q("member", f.sa), 2, 5)
	want(q("member", "usr_nobody"))
	want(q("model", "m1"), 0, 1, 4, 5)
	want(q("model", "m3"), 6)
	want(q("model", "M1"))
	want(q("connection", "conn_b"), 1, 3, 5)
	want(q("connection", "conn_a", "model", "m1"), 0, 4)
	want(q("member", f.member, "connection", "conn_b"), 3)
	want(q("from", ts(3)), 2, 3, 4, 5, 6) // record 2 is at minute 3: inclusive
	want(q("to", ts(3)), 0, 1)            // exclusive
	want(q("from", ts(2), "to", ts(5)), 1, 2, 3)
	want(q("from", ts(3), "to", ts(3))) // empty range
	want(q("from", ts(5), "to", ts(2))) // reversed range
	want(q("from", at(3).Add(time.Nanosecond).Format(time.RFC3339Nano)), 3, 4, 5, 6)
	want(q("to", at(3).Add(time.Nanosecond).Format(time.RFC3339Nano)), 0, 1, 2)
	want(q("from", ts(100)))
	want(q("to", ts(0)))
	want(q("from", "2025-06-01T12:03:00+02:00"), 2, 3, 4, 5, 6) // same instant as ts(3)
	want(q("from", ts(2), "to", ts(7), "model", "m1", "member", f.member), 4)

	// Record shape: cost is an exact JSON number.
	r := list(q("from", ts(4), "to", ts(5)))
	d := exact(t, r)["data"].([]any)[0].(map[string]any)
	wantFields(t, "record", d, map[string]string{"id": made[3].ID, "member_id": f.member, "connection": "conn_b", "model": "m2",
		"cost_usd": "0.000004", "time": ts(4)})

	// Paging: limit=2 walks everything in time order, then null.
	walk := func(query string) []string {
		t.Helper()
		var got []string
		cursor := ""
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatalf("paging %s does not end", query)
			}
			qq := query
			if cursor != "" {
				qq += "&cursor=" + url.QueryEscape(cursor)
			}
			r := list(qq)
			items := r.list()
			if len(items) > 2 || (len(items) == 0 && page > 0) {
				t.Fatalf("page %d of %s: %d items", page, qq, len(items))
			}
			got = append(got, ids(items, "id")...)
			nc, isString := r.json["next_cursor"].(string)
			if r.json["next_cursor"] == nil {
				return got
			}
			if !isString || nc == "" {
				t.Fatalf("next_cursor %v", r.json["next_cursor"])
			}
			cursor = nc
		}
	}
	var allIDs []string
	for _, m := range made {
		allIDs = append(allIDs, m.ID)
	}
	if got := walk("?limit=2"); strings.Join(got, ",") != strings.Join(allIDs, ",") {
		t.Errorf("paging: %v, want %v", got, allIDs)
	}
	if got := walk("?limit=2&member=" + f.member); strings.Join(got, ",") != strings.Join([]string{made[0].ID, made[3].ID, made[4].ID}, ",") {
		t.Errorf("paging by member: %v", got)
	}
	if got := walk("?limit=2&from=" + url.QueryEscape(ts(2)) + "&to=" + url.QueryEscape(ts(6))); strings.Join(got, ",") != strings.Join(allIDs[1:5], ",") {
		t.Errorf("paging in a range: %v, want %v", got, allIDs[1:5])
	}
	// A full last page says null, not a cursor to an empty page.
	r = list("?limit=7")
	if len(r.list()) != 7 || r.json["next_cursor"] != nil {
		t.Errorf("limit=7: %d items, next_cursor %v", len(r.list()), r.json["next_cursor"])
	}
	r = list("?limit=6")
	if nc, _ := r.json["next_cursor"].(string); len(r.list()) != 6 || nc == "" {
		t.Errorf("limit=6: %d items, next_cursor %v", len(r.list()), r.json["next_cursor"])
	} else if got := ids(list("?cursor="+url.QueryEscape(nc)).list(), "id"); strings.Join(got, ",") != made[6].ID {
		t.Errorf("after limit=6: %v, want %s", got, made[6].ID)
	}

	// A member pages through their own records only.
	r = e.do(req{method: "GET", path: "/api/v1/usage?limit=1", cred: f.memberTok})
	wantStatus(t, "member page", r, 200, "")
	if got := ids(r.list(), "id"); len(got) != 1 || got[0] != made[0].ID || r.json["next_cursor"] == nil {
		t.Errorf("member page: %v, next %v", got, r.json["next_cursor"])
	}
	// The member's cursor goes on with the member's records only.
	nc, _ := r.json["next_cursor"].(string)
	r = e.do(req{method: "GET", path: "/api/v1/usage?limit=1&cursor=" + url.QueryEscape(nc), cred: f.memberTok})
	if got := ids(r.list(), "id"); len(got) != 1 || got[0] != made[3].ID {
		t.Errorf("member's second page: %v, want %s", got, made[3].ID)
	}

	for _, bad := range []string{"?limit=0", "?limit=abc", "?limit=-1", "?limit=1001", "?limit=1.5",
		"?from=garbage", "?to=garbage", "?from=2025-06-01", "?to=1717236000"} {
		r := e.do(req{method: "GET", path: "/api/v1/usage" + bad, cred: f.adminTok})
		wantStatus(t, "GET usage"+bad, r, 400, "InvalidRequest")
	}
}

// TestUsageSessionFilter: ?session= selects one agent session's records
// (exact match), combines with the other filters and pages; a member
// sees only their own records of a session, even one another member's
// requests named too.
func TestUsageSessionFilter(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other")
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	type rec struct{ member, kind, conn, model, session string }
	recs := []rec{
		{f.member, store.MemberPerson, "conn_a", "m1", "ses_A"},
		{f.member, store.MemberPerson, "conn_a", "m1", ""},
		{f.sa, store.MemberServiceAccount, "conn_b", "m2", "ses_B"},
		{f.member, store.MemberPerson, "conn_b", "m2", "ses_A"},
		{f.admin, store.MemberPerson, "conn_a", "m1", "ses_A"}, // another member naming the same session
		{f.member, store.MemberPerson, "conn_a", "m1", "ses_A"},
		{f.member, store.MemberPerson, "conn_a", "m1", "ses_AB"},
		{f.member, store.MemberPerson, "conn_a", "m1", "SES_A"},
	}
	var made []*store.UsageRecord
	for i, r := range recs {
		at := at(i + 1)
		res, err := e.svc.Ledger.Reserve(ctx, f.ws, r.member, 0)
		if err != nil {
			t.Fatal(err)
		}
		u := &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: f.ws, MemberID: r.member, MemberKind: r.kind,
			Connection: r.conn, Model: r.model, UpstreamModel: r.model, Cost: usdMicros(int64(i + 1)), Status: 200, Session: r.session}
		if err := res.Settle(ctx, u); err != nil {
			t.Fatal(err)
		}
		made = append(made, u)
	}
	// The same session id in another workspace is not this one's.
	res, _ := e.svc.Ledger.Reserve(ctx, other.ws, other.member, 0)
	res.Settle(ctx, &store.UsageRecord{ID: ledger.UsageID(at(3)), Time: at(3), Workspace: other.ws, MemberID: other.member,
		MemberKind: store.MemberPerson, Status: 200, Session: "ses_A"})

	want := func(cred, query string, idx ...int) {
		t.Helper()
		r := e.do(req{method: "GET", path: "/api/v1/usage" + query, cred: cred})
		wantStatus(t, "GET usage"+query, r, 200, "")
		var wantIDs []string
		for _, i := range idx {
			wantIDs = append(wantIDs, made[i].ID)
		}
		if got := ids(r.list(), "id"); strings.Join(got, ",") != strings.Join(wantIDs, ",") {
			t.Errorf("GET usage%s: ids %v, want records %v", query, got, idx)
		}
	}
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return "?" + v.Encode()
	}
	want(f.adminTok, q("session", "ses_A"), 0, 3, 4, 5)
	want(f.adminTok, q("session", "ses_B"), 2)
	want(f.adminTok, q("session", "ses_"))
	want(f.adminTok, q("session", "ses_none"))
	want(f.adminTok, q("session", "ses_A", "member", f.member), 0, 3, 5)
	want(f.adminTok, q("session", "ses_A", "connection", "conn_b"), 3)
	want(f.adminTok, q("session", "ses_A", "model", "m1", "from", at(2).Format(time.RFC3339), "to", at(6).Format(time.RFC3339)), 4)
	want(f.adminTok, q("session", ""), 0, 1, 2, 3, 4, 5, 6, 7) // empty: no filter
	// A member: their own records of the session, not the admin's one.
	want(f.memberTok, q("session", "ses_A"), 0, 3, 5)
	want(f.memberTok, q("session", "ses_B"))
	r := e.do(req{method: "GET", path: "/api/v1/usage" + q("session", "ses_A", "member", f.admin), cred: f.memberTok})
	wantStatus(t, "member asks for the admin's session records", r, 403, "Forbidden")

	// The record carries its session; none means no field.
	r = e.do(req{method: "GET", path: "/api/v1/usage" + q("limit", "2"), cred: f.adminTok})
	wantStatus(t, "GET usage", r, 200, "")
	if l := r.list(); l[0]["session"] != "ses_A" {
		t.Errorf("record 0: session %v", l[0]["session"])
	} else if _, ok := l[1]["session"]; ok {
		t.Errorf("record 1 has no session but the field is there: %v", l[1])
	}

	// Paging through one session, one record a page.
	var got []string
	cursor := ""
	for page := 0; page < 10; page++ {
		qq := q("session", "ses_A", "limit", "1", "cursor", cursor)
		if cursor == "" {
			qq = q("session", "ses_A", "limit", "1")
		}
		r := e.do(req{method: "GET", path: "/api/v1/usage" + qq, cred: f.adminTok})
		wantStatus(t, "page", r, 200, "")
		got = append(got, ids(r.list(), "id")...)
		nc, _ := r.json["next_cursor"].(string)
		if nc == "" {
			break
		}
		cursor = nc
	}
	if w := []string{made[0].ID, made[3].ID, made[4].ID, made[5].ID}; strings.Join(got, ",") != strings.Join(w, ",") {
		t.Errorf("paging a session: %v, want %v", got, w)
	}
}

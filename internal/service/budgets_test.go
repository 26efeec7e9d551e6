package service_test

import (
	"context"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// settle records one request of member through the service's ledger.
func (e *env) settle(ws, member, kind string, at time.Time, cost money.Pico) *store.UsageRecord {
	e.t.Helper()
	r, err := e.svc.Ledger.Reserve(ctx, ws, member, 0)
	if err != nil {
		e.t.Fatalf("Reserve: %v", err)
	}
	rec := &store.UsageRecord{ID: ledger.UsageID(at), Time: at, Workspace: ws, MemberID: member, MemberKind: kind,
		Connection: "conn_a", Model: "m", UpstreamModel: "m", Cost: cost, Status: 200}
	if err := r.Settle(ctx, rec); err != nil {
		e.t.Fatalf("Settle: %v", err)
	}
	return rec
}

func budgetIDs(bs []service.BudgetView) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.MemberID)
	}
	return out
}

func usageMembers(rs []*store.UsageRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.MemberID)
	}
	return out
}

func sortedJoin(s []string) string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// TestBudgetAndUsagePermissions checks the two budget rows of the matrix in
// the service, for every credential kind and for the operator.
func TestBudgetAndUsagePermissions(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other")
	e.settle(f.ws, f.member, store.MemberPerson, t0.Add(-3*time.Minute), money.Pico(1))
	e.settle(f.ws, f.sa, store.MemberServiceAccount, t0.Add(-2*time.Minute), money.Pico(2))
	e.settle(f.ws, f.admin, store.MemberPerson, t0.Add(-time.Minute), money.Pico(3))
	e.settle(other.ws, other.member, store.MemberPerson, t0.Add(-time.Minute), money.Pico(4))

	everyone := sortedJoin([]string{f.sa, f.member, f.admin, f.owner})
	allRecords := strings.Join([]string{f.member, f.sa, f.admin}, ",")
	limit := money.Micros(1_000_000)

	type principal struct {
		name string
		p    *service.Principal
		read service.Access
		set  bool
	}
	ps := []principal{
		{"operator", service.Operator(f.ws), service.Allow, true},
	}
	for i, k := range f.kinds() {
		read := []service.Access{service.Deny, service.Allow, service.OwnOnly, service.Allow, service.Allow}[i]
		set := []bool{false, true, false, true, true}[i]
		ps = append(ps, principal{k.name, e.principal(k.cred, ""), read, set})
	}
	for _, c := range ps {
		if got := service.Check(c.p, service.OpReadSpend); got != c.read {
			t.Errorf("Check(%s, read spend) = %v, want %v", c.name, got, c.read)
		}

		bs, err := e.svc.Budgets(ctx, c.p)
		recs, next, uerr := e.svc.Usage(ctx, c.p, service.UsageQuery{})
		switch c.read {
		case service.Deny:
			wantErr(t, c.name+": Budgets", err, 403, "Forbidden")
			wantErr(t, c.name+": Usage", uerr, 403, "Forbidden")
		case service.OwnOnly:
			noErr(t, c.name+": Budgets", err)
			noErr(t, c.name+": Usage", uerr)
			if got := strings.Join(budgetIDs(bs), ","); got != c.p.MemberID() {
				t.Errorf("%s: Budgets lists %s, want only %s", c.name, got, c.p.MemberID())
			}
			if got := strings.Join(usageMembers(recs), ","); got != c.p.MemberID() {
				t.Errorf("%s: Usage lists records of %s, want only %s", c.name, got, c.p.MemberID())
			}
			_, _, err := e.svc.Usage(ctx, c.p, service.UsageQuery{Member: f.admin})
			wantErr(t, c.name+": Usage of another member", err, 403, "Forbidden")
			_, _, err = e.svc.Usage(ctx, c.p, service.UsageQuery{Member: other.member})
			wantErr(t, c.name+": Usage of another workspace's member", err, 403, "Forbidden")
		default:
			noErr(t, c.name+": Budgets", err)
			noErr(t, c.name+": Usage", uerr)
			if got := sortedJoin(budgetIDs(bs)); got != everyone {
				t.Errorf("%s: Budgets lists %s, want %s", c.name, got, everyone)
			}
			if got := strings.Join(usageMembers(recs), ","); got != allRecords {
				t.Errorf("%s: Usage lists records of %s, want %s", c.name, got, allRecords)
			}
			if next != "" {
				t.Errorf("%s: Usage next cursor %q, want none", c.name, next)
			}
		}

		v, err := e.svc.SetBudget(ctx, c.p, f.member, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodDaily})
		if !c.set {
			wantErr(t, c.name+": SetBudget", err, 403, "Forbidden")
			// Nor may it remove one.
			_, err = e.svc.SetBudget(ctx, c.p, f.member, service.BudgetInput{})
			wantErr(t, c.name+": SetBudget (remove)", err, 403, "Forbidden")
			continue
		}
		noErr(t, c.name+": SetBudget", err)
		if v.MemberID != f.member || v.LimitUSD == nil || *v.LimitUSD != money.PicoOf(limit) || v.Period == nil || *v.Period != store.PeriodDaily {
			t.Errorf("%s: SetBudget answered %+v", c.name, v)
		}
		// Removing it again leaves the next principal a clean slate.
		v, err = e.svc.SetBudget(ctx, c.p, f.member, service.BudgetInput{})
		noErr(t, c.name+": SetBudget (remove)", err)
		if v.LimitUSD != nil || v.Period != nil || v.RemainingUSD != nil || v.ResetsAt != nil {
			t.Errorf("%s: removal answered %+v", c.name, v)
		}
	}

	// The operator of one workspace cannot budget another's members.
	_, err := e.svc.SetBudget(ctx, service.Operator(f.ws), other.member, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodDaily})
	wantErr(t, "operator, foreign member", err, 404, "MemberNotFound")
}

// TestSetBudgetService covers validation and the views SetBudget and
// Budgets return.
func TestSetBudgetService(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	op := service.Operator(f.ws)
	lim := func(m money.Micros) *money.Micros { return &m }

	for _, c := range []struct {
		what   string
		member string
		in     service.BudgetInput
		status int
		tag    string
	}{
		{"unknown member", "usr_nobody", service.BudgetInput{LimitUSD: lim(1), Period: "daily"}, 404, "MemberNotFound"},
		{"negative", f.member, service.BudgetInput{LimitUSD: lim(-1), Period: "daily"}, 400, "InvalidRequest"},
		{"above the cap", f.member, service.BudgetInput{LimitUSD: lim(1_000_000_000_001), Period: "daily"}, 400, "InvalidRequest"},
		{"no period", f.member, service.BudgetInput{LimitUSD: lim(1)}, 400, "InvalidRequest"},
		{"bad period", f.member, service.BudgetInput{LimitUSD: lim(1), Period: "hourly"}, 400, "InvalidRequest"},
		// PicoOf overflows int64 here: 18446744073710 × 1e6 − 2^64 = 448384.
		{"wraps to a tiny limit", f.member, service.BudgetInput{LimitUSD: lim(18_446_744_073_710), Period: "daily"}, 400, "InvalidRequest"},
		// 1e13 × 1e6 wraps to a negative number, which means "remove".
		{"wraps to a removal", f.member, service.BudgetInput{LimitUSD: lim(10_000_000_000_000), Period: "daily"}, 400, "InvalidRequest"},
	} {
		v, err := e.svc.SetBudget(ctx, op, c.member, c.in)
		if err == nil {
			t.Errorf("%s: accepted, limit_usd %v", c.what, v.LimitUSD)
			continue
		}
		wantErr(t, c.what, err, c.status, c.tag)
	}

	// A workspace that is gone answers WorkspaceNotFound.
	_, err := e.svc.SetBudget(ctx, service.Operator("wrk_nothere"), f.member, service.BudgetInput{LimitUSD: lim(1), Period: "daily"})
	wantErr(t, "unknown workspace", err, 404, "WorkspaceNotFound")
	_, err = e.svc.Budgets(ctx, service.Operator("wrk_nothere"))
	wantErr(t, "Budgets of an unknown workspace", err, 404, "WorkspaceNotFound")
	_, _, err = e.svc.Usage(ctx, service.Operator("wrk_nothere"), service.UsageQuery{})
	wantErr(t, "Usage of an unknown workspace", err, 404, "WorkspaceNotFound")

	// Set mid-period: only the period's spend counts; reservations show.
	e.settle(f.ws, f.sa, store.MemberServiceAccount, t0.Add(-11*time.Hour), money.PicoOf(5)) // yesterday
	e.settle(f.ws, f.sa, store.MemberServiceAccount, t0.Add(-time.Hour), money.PicoOf(7))
	res, err := e.svc.Ledger.Reserve(ctx, f.ws, f.sa, money.PicoOf(3))
	noErr(t, "Reserve", err)
	v, err := e.svc.SetBudget(ctx, op, f.sa, service.BudgetInput{LimitUSD: lim(100), Period: store.PeriodDaily})
	noErr(t, "SetBudget", err)
	if v.Kind != store.MemberServiceAccount || v.SpentUSD != money.PicoOf(7) || v.ReservedUSD != money.PicoOf(3) ||
		*v.RemainingUSD != money.PicoOf(90) || !v.ResetsAt.Equal(time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("SetBudget view %+v", v)
	}
	res.Release()
	bs, err := e.svc.Budgets(ctx, op)
	noErr(t, "Budgets", err)
	for _, b := range bs {
		if b.MemberID == f.sa && (b.ReservedUSD != 0 || *b.RemainingUSD != money.PicoOf(93)) {
			t.Errorf("after release: %+v", b)
		}
	}
}

// TestUsageQueryService: filters and paging in the service.
func TestUsageQueryService(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	op := service.Operator(f.ws)
	var made []*store.UsageRecord
	for i := 0; i < 5; i++ {
		m := f.member
		if i%2 == 1 {
			m = f.admin
		}
		made = append(made, e.settle(f.ws, m, store.MemberPerson, t0.Add(time.Duration(i)*time.Second), money.Pico(i+1)))
	}
	idsOf := func(rs []*store.UsageRecord) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.ID)
		}
		return strings.Join(s, ",")
	}
	want := func(idx ...int) string {
		var s []string
		for _, i := range idx {
			s = append(s, made[i].ID)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct {
		what string
		q    service.UsageQuery
		want string
	}{
		{"all", service.UsageQuery{}, want(0, 1, 2, 3, 4)},
		{"member", service.UsageQuery{Member: f.admin}, want(1, 3)},
		{"from inclusive", service.UsageQuery{From: made[2].Time}, want(2, 3, 4)},
		{"to exclusive", service.UsageQuery{To: made[2].Time}, want(0, 1)},
		{"cursor", service.UsageQuery{Cursor: made[1].ID}, want(2, 3, 4)},
		{"cursor before from", service.UsageQuery{Cursor: made[0].ID, From: made[3].Time}, want(3, 4)},
		{"cursor after from", service.UsageQuery{Cursor: made[3].ID, From: made[1].Time}, want(4)},
		{"model", service.UsageQuery{Model: "m"}, want(0, 1, 2, 3, 4)},
		{"other model", service.UsageQuery{Model: "n"}, ""},
		{"connection", service.UsageQuery{Connection: "conn_b"}, ""},
	} {
		rs, next, err := e.svc.Usage(ctx, op, c.q)
		noErr(t, c.what, err)
		if got := idsOf(rs); got != c.want || next != "" {
			t.Errorf("%s: %s next %q, want %s", c.what, got, next, c.want)
		}
	}
	// Paging by two.
	var all []string
	q := service.UsageQuery{Limit: 2}
	for page := 0; page < 10; page++ {
		rs, next, err := e.svc.Usage(ctx, op, q)
		noErr(t, "page", err)
		all = append(all, idsOf(rs))
		if next == "" {
			break
		}
		if next != rs[len(rs)-1].ID {
			t.Errorf("next %q is not the last id of the page", next)
		}
		q.Cursor = next
	}
	if got := strings.Join(all, "|"); got != want(0, 1)+"|"+want(2, 3)+"|"+want(4) {
		t.Errorf("pages %s", got)
	}
}

// usageScans counts the scans of usage records its transactions make.
type usageScans struct {
	store.Store
	n *atomic.Int64
}

func (s usageScans) View(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.View(ctx, func(tx store.Tx) error { return fn(usageScansTx{tx, s.n}) })
}

type usageScansTx struct {
	store.Tx
	n *atomic.Int64
}

func (t usageScansTx) Usage(ws, after string, fn func(*store.UsageRecord) (bool, error)) error {
	t.n.Add(1)
	return t.Tx.Usage(ws, after, fn)
}

// TestBudgetsScanUsageOnlyWhenUnbudgeted: a member without a budget shows
// the month's spend, summed from the usage records; once every member has
// a budget (which carries its period's spend) listing the budgets reads no
// usage record, a scan as long as the month's traffic, and shows the same
// spend.
func TestBudgetsScanUsageOnlyWhenUnbudgeted(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	e.settle(f.ws, f.member, store.MemberPerson, t0.Add(-2*time.Minute), money.Pico(5))
	e.settle(f.ws, f.sa, store.MemberServiceAccount, t0.Add(-time.Minute), money.Pico(7))
	var scans atomic.Int64
	e.svc.Store = usageScans{Store: e.svc.Store, n: &scans}
	op := service.Operator(f.ws)
	spent := func() map[string]money.Pico {
		bs, err := e.svc.Budgets(ctx, op)
		noErr(t, "Budgets", err)
		out := map[string]money.Pico{}
		for _, b := range bs {
			out[b.MemberID] = b.SpentUSD
		}
		return out
	}
	if got := spent(); got[f.member] != 5 || got[f.sa] != 7 || got[f.admin] != 0 || scans.Load() != 1 {
		t.Fatalf("without budgets: spent %v after %d scans; want %s 5, %s 7, one scan", got, scans.Load(), f.member, f.sa)
	}
	limit := money.Micros(1_000_000)
	for _, m := range []string{f.member, f.sa, f.admin, f.owner} {
		_, err := e.svc.SetBudget(ctx, op, m, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly})
		noErr(t, "SetBudget", err)
	}
	before := scans.Load()
	if got := spent(); got[f.member] != 5 || got[f.sa] != 7 || scans.Load() != before {
		t.Fatalf("every member budgeted: spent %v after %d more scans; want %s 5, %s 7, no scan", got, scans.Load()-before, f.member, f.sa)
	}
}

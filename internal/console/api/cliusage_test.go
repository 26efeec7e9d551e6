package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// cliUsage is GET /api/oauth/usage as Claude Code reads it; pointers tell
// null from absent where it matters.
type cliUsage struct {
	ExtraUsage struct {
		MonthlyLimit *int64 `json:"monthly_limit"`
		UsedCredits  *int64 `json:"used_credits"`
		Utilization  *int64 `json:"utilization"`
		Currency     string `json:"currency"`
		Daily        *struct {
			Limit       *int64 `json:"limit"`
			UsedCredits int64  `json:"used_credits"`
		} `json:"daily"`
		Weekly *struct {
			Limit       *int64 `json:"limit"`
			UsedCredits int64  `json:"used_credits"`
		} `json:"weekly"`
	} `json:"extra_usage"`
	Limits []struct {
		Group    string  `json:"group"`
		ResetsAt *string `json:"resets_at"`
		IsActive bool    `json:"is_active"`
	} `json:"limits"`
}

func (e *env) cliUsage(cred string) (cliUsage, map[string]json.RawMessage) {
	e.t.Helper()
	r := e.do(req{method: "GET", path: "/api/oauth/usage", cred: cred})
	wantStatus(e.t, "GET /api/oauth/usage", r, 200, "")
	var u cliUsage
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.raw), &u); err != nil {
		e.t.Fatal(err)
	}
	var top map[string]json.RawMessage
	json.Unmarshal([]byte(r.raw), &top)
	json.Unmarshal(top["extra_usage"], &raw)
	if string(top["limits"]) == "null" || len(top) != 2 {
		e.t.Fatalf("answer %s: want exactly extra_usage and a limits list", r.raw)
	}
	return u, raw
}

func cents(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// GET /api/oauth/usage: the caller's own budget in whole cents, or without
// one the spend of today, this week and this month (UTC calendar periods,
// as budgets use).
func TestCLIUsage(t *testing.T) {
	e := newEnv(t) // t0 is Sunday 2025-06-01 10:00 UTC: the week began on Monday 26 May
	ws := e.workspace("W")
	ann := e.person(ws, store.RoleMember)
	bob := e.person(ws, store.RoleMember)
	tok := e.token(ann, ws)
	e.spend(ws, ann, store.MemberPerson, "", "m", time.Date(2025, 5, 20, 12, 0, 0, 0, time.UTC), usdMicros(9_000_000)) // last week
	e.spend(ws, ann, store.MemberPerson, "", "m", time.Date(2025, 5, 27, 12, 0, 0, 0, time.UTC), usdMicros(1_000_000)) // this week, last month
	e.spend(ws, ann, store.MemberPerson, "", "m", time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC), usdMicros(500_000))     // today
	e.spend(ws, ann, store.MemberPerson, "", "m", time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC), usdMicros(9_999))       // under a cent
	e.spend(ws, bob, store.MemberPerson, "", "m", time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC), usdMicros(5_000_000))   // someone else

	u, raw := e.cliUsage(tok)
	x := u.ExtraUsage
	if string(raw["monthly_limit"]) != "null" || string(raw["utilization"]) != "null" || cents(x.UsedCredits) != int64(50) ||
		x.Currency != "USD" || x.Daily == nil || x.Daily.Limit != nil || x.Daily.UsedCredits != 50 ||
		x.Weekly == nil || x.Weekly.Limit != nil || x.Weekly.UsedCredits != 150 || len(u.Limits) != 0 {
		t.Fatalf("without a budget: %+v %s", u, raw)
	}

	op := service.Operator(ws)
	set := func(limit money.Micros, period string) {
		t.Helper()
		if _, err := e.svc.SetBudget(ctx, op, ann, service.BudgetInput{LimitUSD: &limit, Period: period}); err != nil {
			t.Fatal(err)
		}
	}
	set(2_000_000, store.PeriodMonthly)
	u, raw = e.cliUsage(tok)
	x = u.ExtraUsage
	if cents(x.MonthlyLimit) != int64(200) || cents(x.UsedCredits) != int64(50) || cents(x.Utilization) != int64(25) || x.Currency != "USD" ||
		raw["daily"] != nil || raw["weekly"] != nil || len(u.Limits) != 1 || u.Limits[0].Group != "monthly" || !u.Limits[0].IsActive ||
		u.Limits[0].ResetsAt == nil || *u.Limits[0].ResetsAt != "2025-07-01T00:00:00Z" {
		t.Fatalf("monthly budget: %+v %s", u, raw)
	}
	// The binding limit is the budget's, whatever its period.
	set(400_000, store.PeriodDaily)
	u, _ = e.cliUsage(tok)
	if cents(u.ExtraUsage.MonthlyLimit) != int64(40) || cents(u.ExtraUsage.Utilization) != int64(127) || u.Limits[0].Group != "daily" ||
		*u.Limits[0].ResetsAt != "2025-06-02T00:00:00Z" {
		t.Fatalf("daily budget: %+v", u)
	}
	set(0, store.PeriodTotal)
	u, _ = e.cliUsage(tok)
	if cents(u.ExtraUsage.MonthlyLimit) != int64(0) || cents(u.ExtraUsage.UsedCredits) != int64(1050) || cents(u.ExtraUsage.Utilization) != int64(100) ||
		u.Limits[0].Group != "total" || u.Limits[0].ResetsAt != nil {
		t.Fatalf("total budget of zero: %+v", u)
	}

	// Bob reads his own; an admin reads their own, not Ann's.
	u, _ = e.cliUsage(e.token(bob, ws))
	if cents(u.ExtraUsage.UsedCredits) != int64(500) || u.ExtraUsage.MonthlyLimit != nil {
		t.Fatalf("Bob's: %+v", u)
	}

	// Refused: an Inference key, no credential, a revoked sign-in.
	sa := e.serviceAccount(ws)
	wantStatus(t, "inference key", e.do(req{method: "GET", path: "/api/oauth/usage", cred: e.key(ws, sa, store.PermissionInference)}), 403, "Forbidden")
	r := e.do(req{method: "GET", path: "/api/oauth/usage"})
	wantStatus(t, "no credential", r, 401, "Unauthorized")
	if r.header.Get("X-Should-Retry") != "false" {
		t.Fatalf("401 with x-should-retry %q", r.header.Get("X-Should-Retry"))
	}
	p, err := e.svc.Authenticate(ctx, tok, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.RevokeSignIn(ctx, p, p.FamilyID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "revoked sign-in", e.do(req{method: "GET", path: "/api/oauth/usage", cred: tok}), 401, "Unauthorized")
}

package service

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// BudgetView is a member's budget on the wire (GET /api/v1/budgets/members).
// A member without a budget has null limit, period, remaining and
// resets_at, and spent_usd is their spend of the current calendar month.
type BudgetView struct {
	MemberID     string      `json:"member_id"`
	Kind         string      `json:"kind"`
	Name         string      `json:"name"`
	LimitUSD     *money.Pico `json:"limit_usd"`
	Period       *string     `json:"period"`
	SpentUSD     money.Pico  `json:"spent_usd"`
	ReservedUSD  money.Pico  `json:"reserved_usd"`
	RemainingUSD *money.Pico `json:"remaining_usd"`
	ResetsAt     *time.Time  `json:"resets_at"`
}

type budgetMember struct{ id, kind, name string }

// budgetMembers lists the people and service accounts of a workspace.
func budgetMembers(tx store.Tx, ws string) ([]budgetMember, error) {
	var out []budgetMember
	ms, err := tx.Members(ws)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		name := m.PersonID
		if p, err := tx.Person(m.PersonID); err == nil {
			name = p.Name
		}
		out = append(out, budgetMember{m.PersonID, store.MemberPerson, name})
	}
	sas, err := tx.ServiceAccounts(ws)
	if err != nil {
		return nil, err
	}
	for _, sa := range sas {
		out = append(out, budgetMember{sa.ID, store.MemberServiceAccount, sa.Name})
	}
	return out, nil
}

// Budgets lists the budgets of the workspace's members; a member (role)
// sees only their own.
func (s *Service) Budgets(ctx context.Context, p *Principal) ([]BudgetView, error) {
	access := Check(p, OpReadSpend)
	if access == Deny {
		return nil, forbidden(p, OpReadSpend)
	}
	var members []budgetMember
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		var err error
		members, err = budgetMembers(tx, p.Workspace)
		return err
	})
	if err != nil {
		return nil, err
	}
	listed := members[:0:0]
	var statuses []ledger.Status
	unbudgeted := false
	for _, m := range members {
		if access == OwnOnly && m.id != p.MemberID() {
			continue
		}
		st, err := s.Ledger.Status(ctx, p.Workspace, m.id)
		if err != nil {
			return nil, err
		}
		listed, statuses = append(listed, m), append(statuses, st)
		unbudgeted = unbudgeted || st.Budget == nil
	}
	// A member without a budget shows what it spent this calendar month,
	// summed from the month's usage records: a scan as long as the month's
	// traffic, so it is made only when a member listed has no budget (a
	// budget carries its period's spend).
	var monthSpend map[string]money.Pico
	if unbudgeted {
		if err := s.Store.View(ctx, func(tx store.Tx) error {
			var err error
			monthSpend, err = s.monthSpend(tx, p.Workspace)
			return err
		}); err != nil {
			return nil, err
		}
	}
	out := []BudgetView{}
	for i, m := range listed {
		out = append(out, budgetView(m, statuses[i], monthSpend[m.id]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MemberID < out[j].MemberID })
	return out, nil
}

// monthSpend sums each member's spend of the current calendar month.
func (s *Service) monthSpend(tx store.Tx, ws string) (map[string]money.Pico, error) {
	out := map[string]money.Pico{}
	start := ledger.PeriodStart(store.PeriodMonthly, s.Clock.Now())
	err := tx.Usage(ws, ledger.UsageCursor(start), func(u *store.UsageRecord) (bool, error) {
		out[u.MemberID] = money.Charge(out[u.MemberID], u.Cost)
		return true, nil
	})
	return out, err
}

func budgetView(m budgetMember, st ledger.Status, monthSpend money.Pico) BudgetView {
	v := BudgetView{MemberID: m.id, Kind: m.kind, Name: m.name, ReservedUSD: st.Reserved, SpentUSD: monthSpend}
	if b := st.Budget; b != nil {
		limit, period := b.Limit, b.Period
		// Spend may be saturated (ledger: a sum past int64): the room
		// is clamped, never wrapped.
		rem := max(money.SubSat(money.SubSat(b.Limit, b.Spent), st.Reserved), 0)
		v.LimitUSD, v.Period, v.SpentUSD, v.RemainingUSD = &limit, &period, b.Spent, &rem
		if end := ledger.PeriodEnd(b.Period, b.PeriodStart); !end.IsZero() {
			v.ResetsAt = &end
		}
	}
	return v
}

// BudgetInput is the body of PUT /api/v1/budgets/members/{member_id}: a null
// limit removes the budget.
type BudgetInput struct {
	LimitUSD *money.Micros `json:"limit_usd"`
	Period   string        `json:"period,omitempty"`
}

// SetBudget sets or removes a member's budget ("Set budgets" row).
func (s *Service) SetBudget(ctx context.Context, p *Principal, memberID string, in BudgetInput) (*BudgetView, error) {
	if err := Require(p, OpManageConnections); err != nil {
		return nil, err
	}
	limit := money.Pico(-1)
	if in.LimitUSD != nil {
		if *in.LimitUSD < 0 || *in.LimitUSD > money.Micros(money.MaxSpend/money.PicoPerMicro) {
			return nil, apierr.BadRequest("limit_usd must be from 0 to %s", money.MaxSpend)
		}
		if !store.ValidPeriod(in.Period) {
			return nil, apierr.BadRequest("period must be daily, weekly, monthly or total")
		}
		limit = money.PicoOf(*in.LimitUSD)
	}
	var m *budgetMember
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		ms, err := budgetMembers(tx, p.Workspace)
		for i := range ms {
			if ms[i].id == memberID {
				m = &ms[i]
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, apierr.NotFound("MemberNotFound", "%s is not a person or service account of this workspace", memberID)
	}
	if _, err := s.Ledger.SetBudget(ctx, p.Workspace, memberID, m.kind, limit, in.Period); err != nil {
		return nil, err
	}
	st, err := s.Ledger.Status(ctx, p.Workspace, memberID)
	if err != nil {
		return nil, err
	}
	var spend map[string]money.Pico
	if err := s.Store.View(ctx, func(tx store.Tx) (err error) { spend, err = s.monthSpend(tx, p.Workspace); return err }); err != nil {
		return nil, err
	}
	v := budgetView(*m, st, spend[memberID])
	return &v, nil
}

// UsageQuery filters usage records. Zero values do not filter.
type UsageQuery struct {
	Member, Model, Connection string
	Session                   string    // the agent session, exact match
	From, To                  time.Time // [From, To)
	Cursor                    string    // the last id of the previous page
	Limit                     int
}

// Usage lists usage records, oldest first, one page at a time. A member
// (role) sees only their own. next is the cursor of the next page, or "".
func (s *Service) Usage(ctx context.Context, p *Principal, q UsageQuery) (records []*store.UsageRecord, next string, err error) {
	access := Check(p, OpReadSpend)
	if access == Deny {
		return nil, "", forbidden(p, OpReadSpend)
	}
	if access == OwnOnly {
		if q.Member != "" && q.Member != p.MemberID() {
			return nil, "", apierr.Forbidden("members can read their own usage only")
		}
		q.Member = p.MemberID()
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	after := q.Cursor
	if c := ledger.UsageCursor(q.From); c > after {
		after = c
	}
	records = []*store.UsageRecord{}
	err = s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		return tx.Usage(p.Workspace, after, func(u *store.UsageRecord) (bool, error) {
			if !q.To.IsZero() && !u.Time.Before(q.To) {
				return false, nil
			}
			if (q.Member != "" && u.MemberID != q.Member) || (q.Model != "" && u.Model != q.Model) ||
				(q.Connection != "" && u.Connection != q.Connection) || (q.Session != "" && u.Session != q.Session) {
				return true, nil
			}
			if len(records) == q.Limit {
				next = records[len(records)-1].ID
				return false, nil
			}
			records = append(records, u)
			return true, nil
		})
	})
	if errors.Is(err, store.ErrNotFound) {
		err = nil
	}
	return records, next, err
}

package service

import (
	"context"
	"math/big"
	"time"

	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// CLIUsage is the answer of GET /api/oauth/usage: the caller's own budget
// in the shape Claude Code's usage display reads. Amounts are whole US
// cents (rounded down); periods are the budgets' calendar periods in UTC.
//
// With a budget, ExtraUsage holds its limit, the spend of its current
// period and the share of the limit spent, and Limits has one entry for
// the budget (its period and next reset). Without one, ExtraUsage has no
// limit and says what was spent today, this week and this month, and
// Limits is empty.
type CLIUsage struct {
	ExtraUsage CLISpend   `json:"extra_usage"`
	Limits     []CLILimit `json:"limits"`
}

// CLISpend is CLIUsage's extra_usage. The name monthly_limit is Claude
// Code's: it holds the limit of the budget whatever its period.
type CLISpend struct {
	MonthlyLimit *int64 `json:"monthly_limit"` // null without a budget
	UsedCredits  int64  `json:"used_credits"`  // spent in the budget's period (this month without a budget)
	Utilization  *int64 `json:"utilization"`   // percent of the limit spent, rounded down; null without a budget
	Currency     string `json:"currency"`
	// Daily and Weekly, without a budget only: today's and this week's
	// spend, with no limit.
	Daily  *CLIPeriodSpend `json:"daily,omitempty"`
	Weekly *CLIPeriodSpend `json:"weekly,omitempty"`
}

// CLIPeriodSpend is one period's spend without a limit.
type CLIPeriodSpend struct {
	Limit       *int64 `json:"limit"`
	UsedCredits int64  `json:"used_credits"`
}

// CLILimit is the budget as one of CLIUsage's limits.
type CLILimit struct {
	Group    string     `json:"group"`     // the budget's period: daily, weekly, monthly or total
	ResetsAt *time.Time `json:"resets_at"` // null for a total budget, which never resets
	IsActive bool       `json:"is_active"` // always true: the one budget is the one that binds
}

// picoPerCent is how many money.Pico make a US cent.
const picoPerCent = money.Pico(10_000_000_000)

func cents(p money.Pico) int64 { return int64(max(p, 0) / picoPerCent) }

// percentSpent is spent as a share of limit in percent, rounded down; a
// zero limit counts as all spent.
func percentSpent(spent, limit money.Pico) int64 {
	if limit <= 0 {
		return 100
	}
	n := new(big.Int).Mul(big.NewInt(int64(max(spent, 0))), big.NewInt(100))
	return n.Quo(n, big.NewInt(int64(limit))).Int64()
}

// CLIUsageOf answers GET /api/oauth/usage for the principal's own member:
// its budget, or its spend by calendar period when it has none. A credential
// that may not read spend (an Inference key) is refused.
func (s *Service) CLIUsageOf(ctx context.Context, p *Principal) (*CLIUsage, error) {
	if Check(p, OpReadSpend) == Deny {
		return nil, forbidden(p, OpReadSpend)
	}
	member := p.MemberID()
	if err := s.Store.View(ctx, func(tx store.Tx) error { _, err := workspace(tx, p.Workspace); return err }); err != nil {
		return nil, err
	}
	st, err := s.Ledger.Status(ctx, p.Workspace, member)
	if err != nil {
		return nil, err
	}
	out := &CLIUsage{ExtraUsage: CLISpend{Currency: "USD"}, Limits: []CLILimit{}}
	if b := st.Budget; b != nil {
		limit, used := cents(b.Limit), cents(b.Spent)
		util := percentSpent(b.Spent, b.Limit)
		out.ExtraUsage.MonthlyLimit, out.ExtraUsage.UsedCredits, out.ExtraUsage.Utilization = &limit, used, &util
		l := CLILimit{Group: b.Period, IsActive: true}
		if end := ledger.PeriodEnd(b.Period, b.PeriodStart); !end.IsZero() {
			l.ResetsAt = &end
		}
		out.Limits = append(out.Limits, l)
		return out, nil
	}
	now := s.Clock.Now()
	day, week, month := ledger.PeriodStart(store.PeriodDaily, now), ledger.PeriodStart(store.PeriodWeekly, now), ledger.PeriodStart(store.PeriodMonthly, now)
	from := week
	if month.Before(week) {
		from = month
	}
	var daily, weekly, monthly money.Pico
	err = s.Store.View(ctx, func(tx store.Tx) error {
		return tx.Usage(p.Workspace, ledger.UsageCursor(from), func(u *store.UsageRecord) (bool, error) {
			if u.MemberID != member {
				return true, nil
			}
			if !u.Time.Before(month) {
				monthly = money.Charge(monthly, u.Cost)
			}
			if !u.Time.Before(week) {
				weekly = money.Charge(weekly, u.Cost)
			}
			if !u.Time.Before(day) {
				daily = money.Charge(daily, u.Cost)
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	out.ExtraUsage.UsedCredits = cents(monthly)
	out.ExtraUsage.Daily = &CLIPeriodSpend{UsedCredits: cents(daily)}
	out.ExtraUsage.Weekly = &CLIPeriodSpend{UsedCredits: cents(weekly)}
	return out, nil
}

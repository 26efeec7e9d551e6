package ledger

import (
	"time"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// fits decides an admission: a reservation of amount fits a budget of
// limit with spent settled and held in flight (reservations, holds or
// slices) when spent + held + amount ≤ limit, computed exactly. A sum past
// int64 is more than any limit, so a huge amount is refused instead of
// wrapping into a small one. money.Saturated stands for such a sum, and a
// negative amount, spend or sum of holds is what only an overflow gives:
// either never fits, whatever the limit. remaining is
// limit − spent − held, at least 0, for the refusal.
func fits(limit, spent, held, amount money.Pico) (ok bool, remaining money.Pico) {
	if spent < 0 || held < 0 || spent == money.Saturated || held == money.Saturated {
		return false, 0
	}
	// Both subtrahends are not negative: SubSat only clamps a room below
	// MinInt64, which max makes 0 anyway.
	remaining = max(money.SubSat(money.SubSat(limit, spent), held), 0)
	if amount < 0 || amount == money.Saturated {
		return false, remaining
	}
	sum, ok1 := money.Add(spent, held)
	sum, ok2 := money.Add(sum, amount)
	return ok1 && ok2 && sum <= limit, remaining
}

// exceeded is the refusal of amount by budget b with remaining room.
func exceeded(b *store.Budget, remaining, amount money.Pico) *ExceededError {
	return &ExceededError{Limit: b.Limit, Remaining: remaining, Needed: amount, ResetsAt: PeriodEnd(b.Period, b.PeriodStart)}
}

// uncountable refuses a reservation of a member without a budget whose
// reservations in flight would pass what an int64 counts: the ledger keeps
// its sums exact rather than wrap them.
func uncountable(reserved, amount money.Pico) *ExceededError {
	return &ExceededError{Limit: money.Saturated, Remaining: max(money.Saturated-reserved, 0), Needed: amount, ResetsAt: time.Time{}}
}

package store

import (
	"math"
	"testing"

	"github.com/agentgate/agentgate/internal/money"
)

// A saturated spend, a saturated or floor cost and extreme token counts
// are stored and read back exactly, so that a member's records never
// become unreadable and a saturated spend stays saturated.
func testExtremeAmounts(t *testing.T, s Store) {
	b := &Budget{Workspace: "wsx", MemberID: "p1", MemberKind: MemberPerson, Limit: money.MaxSpend, Period: PeriodTotal,
		Spent: money.Saturated, PeriodStart: t0, Updated: t0}
	h := &Hold{ID: "h1", Workspace: "wsx", MemberID: "p1", Amount: money.Saturated, ExpiresAt: t0}
	var us []*UsageRecord
	for i, c := range []money.Pico{money.Saturated, math.MinInt64, -1} {
		us = append(us, &UsageRecord{ID: usageID(i), Time: t0, Workspace: "wsx", MemberID: "p1", Cost: c,
			Tokens: Tokens{Input: math.MaxInt64, Output: math.MaxInt64, Reasoning: math.MinInt64}})
	}
	update(t, s, func(tx Tx) error {
		if err := tx.PutBudget(b); err != nil {
			return err
		}
		if err := tx.PutHold(h); err != nil {
			return err
		}
		for _, u := range us {
			if err := tx.PutUsage(u); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx Tx) error {
		got, err := tx.Budget("wsx", "p1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Budget", got, b)
		hs, err := tx.Holds("wsx", "p1")
		if err != nil || len(hs) != 1 || hs[0].Amount != money.Saturated {
			t.Fatalf("Holds: %+v, %v", hs, err)
		}
		var n int
		err = tx.Usage("wsx", "", func(u *UsageRecord) (bool, error) {
			if u.Cost != us[n].Cost || u.Tokens != us[n].Tokens {
				t.Errorf("usage %d: cost %d, tokens %+v", n, int64(u.Cost), u.Tokens)
			}
			n++
			return true, nil
		})
		if err != nil || n != len(us) {
			t.Fatalf("Usage: %d records, %v", n, err)
		}
		return nil
	})
}

func TestTokensTotalSaturates(t *testing.T) {
	for _, tt := range []struct {
		in   Tokens
		want int64
	}{
		{Tokens{Input: 1, CacheRead: 2, CacheWrite: 3, Output: 4, Reasoning: 5}, 15},
		{Tokens{Input: 100, Output: math.MaxInt64 - 50}, math.MaxInt64},
		{Tokens{Output: math.MaxInt64, Reasoning: math.MaxInt64}, math.MaxInt64},
		{Tokens{Input: math.MaxInt64 / 2, CacheRead: math.MaxInt64 / 2, CacheWrite: 2}, math.MaxInt64},
	} {
		if got := tt.in.Total(); got != tt.want {
			t.Errorf("%+v.Total() = %d, want %d", tt.in, got, tt.want)
		}
	}
}

package ledger

import (
	"fmt"
	"time"

	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// PeriodStart is the start of the budget period that contains t: calendar
// periods in UTC (weeks start on Monday); the total period never resets.
func PeriodStart(period string, t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case store.PeriodDaily:
		return day
	case store.PeriodWeekly:
		wd := (int(day.Weekday()) + 6) % 7 // Monday = 0
		return day.AddDate(0, 0, -wd)
	case store.PeriodMonthly:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// PeriodEnd is when the period that starts at start ends (the next reset),
// or the zero time for the total period.
func PeriodEnd(period string, start time.Time) time.Time {
	switch period {
	case store.PeriodDaily:
		return start.AddDate(0, 0, 1)
	case store.PeriodWeekly:
		return start.AddDate(0, 0, 7)
	case store.PeriodMonthly:
		return start.AddDate(0, 1, 0)
	}
	return time.Time{}
}

// UsageID makes a usage record id that sorts by time: 16 hex digits of the
// Unix time in nanoseconds, then random characters.
func UsageID(t time.Time) string {
	n := t.UnixNano()
	if n < 0 {
		return fmt.Sprintf("%016x", n) + secrets.RandomString(8)
	}
	var b [24]byte
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		b[i] = hex[n&15]
		n >>= 4
	}
	return string(secrets.AppendRandom(b[:16], 8))
}

// UsageCursor is the Usage cursor that starts at time t.
func UsageCursor(t time.Time) string {
	if t.IsZero() || t.Unix() <= 0 {
		return ""
	}
	return fmt.Sprintf("%016x", t.UnixNano())
}

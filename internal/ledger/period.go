package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
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
// Unix time in nanoseconds, then 8 base62 characters that are the next
// number of usageSeq. Two ids one process makes are never equal, whatever
// its clock says (a fake clock stands still, a real one can be set back):
// the store appends the records of fresh ids without looking for the id
// first (store.Tx.AppendUsage).
func UsageID(t time.Time) string {
	var b [24]byte
	seq := usageSeq.Add(1) % usageSeqSpan
	for i := 23; i >= 16; i-- {
		b[i] = secrets.Base62[seq%62]
		seq /= 62
	}
	n := t.UnixNano()
	if n < 0 {
		return fmt.Sprintf("%016x", n) + string(b[16:])
	}
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		b[i] = hex[n&15]
		n >>= 4
	}
	return string(b[:])
}

// usageSeqSpan is the count of 8-character base62 numbers, about 2^47.6.
const usageSeqSpan = 62 * 62 * 62 * 62 * 62 * 62 * 62 * 62

// usageSeq numbers the usage ids of this process from a random start, so
// that the ids of two processes (one restarted with its clock set back,
// or two nodes of a fleet) are equal only when both the nanosecond and a
// number drawn from 2^47.6 are.
var usageSeq = func() *atomic.Uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	s := new(atomic.Uint64)
	s.Store(binary.LittleEndian.Uint64(b[:]) % usageSeqSpan)
	return s
}()

// UsageCursor is the Usage cursor that starts at time t.
func UsageCursor(t time.Time) string {
	if t.IsZero() || t.Unix() <= 0 {
		return ""
	}
	return fmt.Sprintf("%016x", t.UnixNano())
}

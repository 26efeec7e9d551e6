// Package quota enforces per-minute request and token limits: each
// counter is a fixed one-minute window (aligned to the clock's minutes).
// A request is admitted with an upper bound of its tokens reserved, and
// settled with what it used, so limits hold exactly under concurrency in
// one process. Time is the caller's (injected).
package quota

import (
	"math"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

// Limit is one counter's bounds; 0 means no bound.
type Limit struct {
	Requests int64 // per minute
	Tokens   int64 // per minute
}

// Limiter holds the counters, keyed by whatever the caller scopes them to
// (a policy and a key, member or workspace). The caller passes the time
// (its clock's). The zero Limiter is ready to use.
type Limiter struct {
	mu sync.Mutex
	m  map[string]*window
}

type window struct {
	start    time.Time
	requests int64
	// tokens is settled tokens plus outstanding reservations. A sum past
	// int64 saturates at math.MaxInt64 and stays there for the rest of
	// the window: more than any limit, never wrapped to a small count.
	tokens int64
}

// maxKeys bounds the counters kept; past it, windows that ended are swept.
const maxKeys = 100_000

// Ticket is an admitted request's hold on its counters.
type Ticket struct {
	holds []hold
}

type hold struct {
	key      string
	start    time.Time
	reserved int64
}

// Refusal says which counter refused a request and when it has room again.
type Refusal struct {
	Key       string
	Limit     Limit
	Requests  int64 // counted in the window, this request excluded
	Tokens    int64
	RetryAt   time.Time
	ByTokens  bool // the token bound refused (else the request bound)
	Requested int64
}

// Admit counts a request against every key's limit at once: all or none.
// reserve is the upper bound of the request's tokens; a negative one
// (only an overflowing bound is negative) counts as more than any limit.
// Counts are summed exactly: a sum past int64 is refused by any bound.
func (l *Limiter) Admit(now time.Time, keys []string, limits []Limit, reserve int64) (*Ticket, *Refusal) {
	over := reserve < 0
	if over {
		reserve = math.MaxInt64
	}
	start := now.Truncate(time.Minute)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*window{}
	}
	if len(l.m) > maxKeys {
		for k, w := range l.m {
			if w.start.Before(start) {
				delete(l.m, k)
			}
		}
	}
	ws := make([]*window, len(keys))
	for i, k := range keys {
		w := l.m[k]
		if w == nil || !w.start.Equal(start) {
			w = &window{start: start}
			l.m[k] = w
		}
		ws[i] = w
		lim := limits[i]
		refuse := func(byTokens bool) (*Ticket, *Refusal) {
			return nil, &Refusal{Key: k, Limit: lim, Requests: w.requests, Tokens: w.tokens, RetryAt: start.Add(time.Minute),
				ByTokens: byTokens, Requested: reserve}
		}
		if n, ok := money.Add(w.requests, 1); lim.Requests > 0 && (!ok || n > lim.Requests) {
			return refuse(false)
		}
		if n, ok := money.Add(w.tokens, reserve); lim.Tokens > 0 && (over || !ok || n > lim.Tokens) {
			return refuse(true)
		}
	}
	t := &Ticket{holds: make([]hold, len(keys))}
	for i, w := range ws {
		w.requests = money.AddSat(w.requests, 1)
		w.tokens = money.AddSat(w.tokens, reserve)
		t.holds[i] = hold{key: keys[i], start: start, reserved: reserve}
	}
	return t, nil
}

// Settle replaces the ticket's reservation with the tokens the request
// used, in the windows it was admitted in (a window that has ended since
// is left as it was). A nil ticket is a no-op; settling twice is too. A
// negative count (only an overflowing sum is negative) counts as more than
// any limit, and a window whose count saturated stays saturated.
func (l *Limiter) Settle(t *Ticket, used int64) {
	if t == nil {
		return
	}
	if used < 0 {
		used = math.MaxInt64
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range t.holds {
		if w := l.m[h.key]; w != nil && w.start.Equal(h.start) && w.tokens != math.MaxInt64 {
			// Below the saturation the count is exact and holds the
			// reservation: taking it out never goes below 0.
			w.tokens = money.AddSat(w.tokens-h.reserved, used)
		}
	}
	t.holds = nil
}

// Package quota enforces per-minute request and token limits: each
// counter is a fixed one-minute window (aligned to the clock's minutes).
// A request is admitted with an upper bound of its tokens reserved, and
// settled with what it used, so limits hold exactly under concurrency in
// one process. Time is the caller's (injected).
package quota

import (
	"sync"
	"time"
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
	tokens   int64 // settled tokens plus outstanding reservations
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
// reserve is the upper bound of the request's tokens.
func (l *Limiter) Admit(now time.Time, keys []string, limits []Limit, reserve int64) (*Ticket, *Refusal) {
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
		if lim.Requests > 0 && w.requests+1 > lim.Requests {
			return refuse(false)
		}
		if lim.Tokens > 0 && w.tokens+reserve > lim.Tokens {
			return refuse(true)
		}
	}
	t := &Ticket{holds: make([]hold, len(keys))}
	for i, w := range ws {
		w.requests++
		w.tokens += reserve
		t.holds[i] = hold{key: keys[i], start: start, reserved: reserve}
	}
	return t, nil
}

// Settle replaces the ticket's reservation with the tokens the request
// used, in the windows it was admitted in (a window that has ended since
// is left as it was). A nil ticket is a no-op; settling twice is too.
func (l *Limiter) Settle(t *Ticket, used int64) {
	if t == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range t.holds {
		if w := l.m[h.key]; w != nil && w.start.Equal(h.start) {
			w.tokens += used - h.reserved
		}
	}
	t.holds = nil
}

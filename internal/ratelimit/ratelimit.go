// Package ratelimit counts failures per key in a sliding window, to slow
// down password and user-code guessing. Time is injected.
package ratelimit

import (
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

// Limiter allows at most Max failures per key within Window. A success does
// not reset the count (a guesser must not be able to buy more attempts).
type Limiter struct {
	Max    int
	Window time.Duration
	Clock  clock.Clock

	mu   sync.Mutex
	hits map[string][]time.Time
}

// New returns a limiter.
func New(max int, window time.Duration, clk clock.Clock) *Limiter {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Limiter{Max: max, Window: window, Clock: clk, hits: map[string][]time.Time{}}
}

func (l *Limiter) recent(key string, now time.Time) []time.Time {
	h := l.hits[key]
	i := 0
	for i < len(h) && !h[i].After(now.Add(-l.Window)) {
		i++
	}
	h = h[i:]
	if len(h) == 0 {
		delete(l.hits, key)
	} else {
		l.hits[key] = h
	}
	return h
}

// Blocked reports whether key has used up its failures.
func (l *Limiter) Blocked(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recent(key, l.Clock.Now())) >= l.Max
}

// Fail counts a failure for key.
func (l *Limiter) Fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.Clock.Now()
	l.hits[key] = append(l.recent(key, now), now)
	if len(l.hits) > 100_000 { // bound memory under a flood of keys
		for k := range l.hits {
			l.recent(k, now)
		}
	}
}

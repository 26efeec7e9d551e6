// Package ratelimit counts failures per key in a sliding window, to slow
// down password and user-code guessing. Time is injected.
package ratelimit

import (
	"container/list"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

// DefaultCap is the number of keys a limiter made by New tracks at most.
const DefaultCap = 100_000

// Limiter allows at most Max failures per key within Window. A success does
// not reset the count (a guesser must not be able to buy more attempts).
//
// Memory is bounded: a key keeps at most Max failure times, and at most Cap
// keys are tracked. Keys are kept in the order of their latest failure, so
// the ones whose failures all left the window are dropped first, and when a
// flood of new keys still exceeds Cap the key that failed least recently is
// forgotten (its count starts again from zero).
type Limiter struct {
	Max    int
	Window time.Duration
	Clock  clock.Clock
	Cap    int // at most this many keys; 0 means DefaultCap

	mu    sync.Mutex
	keys  map[string]*list.Element // key → element of order holding *entry
	order list.List                // least recently failed first
}

type entry struct {
	key  string
	hits []time.Time // oldest first, at most Max
}

// New returns a limiter.
func New(max int, window time.Duration, clk clock.Clock) *Limiter {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Limiter{Max: max, Window: window, Clock: clk, Cap: DefaultCap}
}

// recent returns key's failures still inside the window, dropping the key
// when none are.
func (l *Limiter) recent(key string, now time.Time) *list.Element {
	el := l.keys[key]
	if el == nil {
		return nil
	}
	e := el.Value.(*entry)
	i := 0
	for i < len(e.hits) && !e.hits[i].After(now.Add(-l.Window)) {
		i++
	}
	e.hits = e.hits[i:]
	if len(e.hits) == 0 {
		delete(l.keys, key)
		l.order.Remove(el)
		return nil
	}
	return el
}

// RetryAfter is how long key stays blocked: zero when it is not blocked,
// otherwise the time until its oldest counted failure leaves the window.
func (l *Limiter) RetryAfter(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.Clock.Now()
	el := l.recent(key, now)
	if el == nil {
		return 0
	}
	e := el.Value.(*entry)
	if len(e.hits) < l.Max {
		return 0
	}
	return e.hits[len(e.hits)-l.Max].Add(l.Window).Sub(now)
}

// Blocked reports whether key has used up its failures.
func (l *Limiter) Blocked(key string) bool { return l.RetryAfter(key) > 0 }

// Fail counts a failure for key.
func (l *Limiter) Fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*list.Element{}
	}
	now := l.Clock.Now()
	// Keys whose latest failure left the window come first: drop them.
	for f := l.order.Front(); f != nil; f = l.order.Front() {
		e := f.Value.(*entry)
		if e.hits[len(e.hits)-1].After(now.Add(-l.Window)) {
			break
		}
		delete(l.keys, e.key)
		l.order.Remove(f)
	}
	el := l.recent(key, now)
	if el == nil {
		el = l.order.PushBack(&entry{key: key})
		l.keys[key] = el
	} else {
		l.order.MoveToBack(el)
	}
	e := el.Value.(*entry)
	e.hits = append(e.hits, now)
	if keep := max(l.Max, 1); len(e.hits) > keep {
		e.hits = append(e.hits[:0], e.hits[len(e.hits)-keep:]...)
	}
	limit := l.Cap
	if limit <= 0 {
		limit = DefaultCap
	}
	for len(l.keys) > limit {
		f := l.order.Front()
		delete(l.keys, f.Value.(*entry).key)
		l.order.Remove(f)
	}
}

// Len is the number of keys tracked.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

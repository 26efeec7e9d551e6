package ratelimit

import (
	"container/list"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

// Backoff delays attempts per key after failures, instead of blocking a key
// for a fixed window: the first Free failures cost nothing, and after that
// every further attempt must wait a delay after the key's latest failure
// that doubles every Step failures, from Base up to Max:
//
//	delay(n) = min(Max, Base · 2^((n−Free)/Step))   for n ≥ Free failures
//
// (integer division; Step 0 counts as 1). A key with no failure for Forget
// is forgotten (Forget 0: never), and Reset forgets it at once. Attempts made while a key
// waits are refused by the caller and are not failures, so they neither
// count nor extend the wait.
//
// Memory is bounded as for Limiter: at most Cap keys, the one that failed
// least recently forgotten first.
type Backoff struct {
	Free   int
	Step   int
	Base   time.Duration
	Max    time.Duration
	Forget time.Duration
	Clock  clock.Clock
	Cap    int // 0 means DefaultCap

	mu    sync.Mutex
	keys  map[string]*list.Element // key → element of order holding *bentry
	order list.List                // least recently failed first
}

type bentry struct {
	key  string
	n    int
	last time.Time
}

// Delay is the wait that n failures impose after the latest of them.
func (b *Backoff) Delay(n int) time.Duration {
	if n < b.Free || n <= 0 {
		return 0
	}
	step := max(b.Step, 1)
	d := b.Base
	for i := 0; i < (n-b.Free)/step && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

func (b *Backoff) clk() clock.Clock {
	if b.Clock == nil {
		return clock.Real{}
	}
	return b.Clock
}

func (b *Backoff) forgotten(e *bentry, now time.Time) bool {
	return b.Forget > 0 && now.Sub(e.last) >= b.Forget
}

// live returns key's entry unless it is forgotten (dropping it then).
func (b *Backoff) live(key string, now time.Time) *bentry {
	el := b.keys[key]
	if el == nil {
		return nil
	}
	e := el.Value.(*bentry)
	if b.forgotten(e, now) {
		delete(b.keys, key)
		b.order.Remove(el)
		return nil
	}
	return e
}

// Failures is the number of failures counted for key.
func (b *Backoff) Failures(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.live(key, b.clk().Now()); e != nil {
		return e.n
	}
	return 0
}

// Wait is how long key must still wait before its next attempt (zero: it
// may try now).
func (b *Backoff) Wait(key string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk().Now()
	e := b.live(key, now)
	if e == nil {
		return 0
	}
	return max(e.last.Add(b.Delay(e.n)).Sub(now), 0)
}

// Fail counts a failure for key and returns how many it now has.
func (b *Backoff) Fail(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keys == nil {
		b.keys = map[string]*list.Element{}
	}
	now := b.clk().Now()
	// Forgotten keys come first in the order: drop them.
	for f := b.order.Front(); f != nil; f = b.order.Front() {
		e := f.Value.(*bentry)
		if !b.forgotten(e, now) {
			break
		}
		delete(b.keys, e.key)
		b.order.Remove(f)
	}
	e := b.live(key, now)
	if e == nil {
		e = &bentry{key: key}
		b.keys[key] = b.order.PushBack(e)
	} else {
		b.order.MoveToBack(b.keys[key])
	}
	e.n++
	e.last = now
	limit := b.Cap
	if limit <= 0 {
		limit = DefaultCap
	}
	for len(b.keys) > limit {
		f := b.order.Front()
		delete(b.keys, f.Value.(*bentry).key)
		b.order.Remove(f)
	}
	return e.n
}

// Reset forgets key's failures.
func (b *Backoff) Reset(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if el := b.keys[key]; el != nil {
		delete(b.keys, key)
		b.order.Remove(el)
	}
}

// Len is the number of keys tracked.
func (b *Backoff) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys)
}

package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

func TestLimiter(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(3, time.Minute, clk)
	for i := 0; i < 3; i++ {
		if l.Blocked("a") {
			t.Fatalf("blocked after %d failures", i)
		}
		l.Fail("a")
		clk.Advance(10 * time.Second)
	}
	if !l.Blocked("a") || l.Blocked("b") {
		t.Fatal("limits are per key")
	}
	clk.Advance(31 * time.Second) // the first failure left the window
	if l.Blocked("a") {
		t.Fatal("the window does not slide")
	}
	l.Fail("a")
	if !l.Blocked("a") {
		t.Fatal("a new failure did not count")
	}
}

func TestRetryAfter(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(2, time.Minute, clk)
	l.Fail("a")
	if d := l.RetryAfter("a"); d != 0 {
		t.Fatalf("one failure of two: RetryAfter %v", d)
	}
	clk.Advance(20 * time.Second)
	l.Fail("a")
	if d := l.RetryAfter("a"); d != 40*time.Second {
		t.Fatalf("RetryAfter %v, want the first failure's 40 s left in the window", d)
	}
	clk.Advance(40 * time.Second)
	if l.Blocked("a") || l.RetryAfter("a") != 0 {
		t.Fatal("still blocked once the first failure left the window")
	}
}

// A flood of keys never grows the limiter past its cap, and a key never
// keeps more failure times than Max.
func TestLimiterBounded(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(3, time.Minute, clk)
	l.Cap = 100
	for i := 0; i < 10_000; i++ {
		l.Fail(fmt.Sprint("k", i))
		if n := l.Len(); n > 100 {
			t.Fatalf("%d keys tracked after %d failures, cap 100", n, i+1)
		}
	}
	if l.Len() != 100 {
		t.Fatalf("tracked %d keys, want the cap", l.Len())
	}
	// The most recent keys are the ones kept.
	for i := 0; i < 5; i++ {
		l.Fail("k9999")
	}
	if !l.Blocked("k9999") {
		t.Fatal("a recent key was forgotten")
	}
	l.mu.Lock()
	hits := len(l.keys["k9999"].Value.(*entry).hits)
	l.mu.Unlock()
	if hits != 3 {
		t.Fatalf("a key keeps %d failure times, want Max (3)", hits)
	}
	// Keys whose failures left the window go on the next failure.
	clk.Advance(2 * time.Minute)
	l.Fail("fresh")
	if n := l.Len(); n != 1 {
		t.Fatalf("%d keys tracked after the window passed, want 1", n)
	}
}

package ratelimit

import (
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

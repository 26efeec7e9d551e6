package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

func TestBackoffDelays(t *testing.T) {
	b := &Backoff{Free: 5, Step: 1, Base: time.Second, Max: 15 * time.Minute, Forget: time.Hour}
	want := map[int]time.Duration{0: 0, 4: 0, 5: time.Second, 6: 2 * time.Second, 10: 32 * time.Second,
		14: 512 * time.Second, 15: 15 * time.Minute, 1000: 15 * time.Minute}
	for n, d := range want {
		if got := b.Delay(n); got != d {
			t.Errorf("Delay(%d) = %v, want %v", n, got, d)
		}
	}
	slow := &Backoff{Free: 10, Step: 5, Base: time.Second, Max: 30 * time.Second}
	for n, d := range map[int]time.Duration{9: 0, 10: time.Second, 14: time.Second, 15: 2 * time.Second, 30: 16 * time.Second, 35: 30 * time.Second} {
		if got := slow.Delay(n); got != d {
			t.Errorf("slow Delay(%d) = %v, want %v", n, got, d)
		}
	}
}

func TestBackoff(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := &Backoff{Free: 2, Step: 1, Base: time.Second, Max: time.Minute, Forget: time.Hour, Clock: clk}
	b.Fail("a")
	if w := b.Wait("a"); w != 0 {
		t.Fatalf("one free failure: Wait %v", w)
	}
	b.Fail("a")
	if w := b.Wait("a"); w != time.Second {
		t.Fatalf("two failures: Wait %v, want 1s", w)
	}
	if b.Wait("b") != 0 {
		t.Fatal("delays are per key")
	}
	clk.Advance(time.Second)
	if w := b.Wait("a"); w != 0 {
		t.Fatalf("after the delay: Wait %v", w)
	}
	b.Fail("a")
	if w := b.Wait("a"); w != 2*time.Second {
		t.Fatalf("three failures: Wait %v, want 2s", w)
	}
	b.Reset("a")
	if b.Wait("a") != 0 || b.Failures("a") != 0 {
		t.Fatal("Reset did not forget")
	}
	for i := 0; i < 20; i++ {
		b.Fail("c")
	}
	if w := b.Wait("c"); w != time.Minute {
		t.Fatalf("capped: Wait %v", w)
	}
	clk.Advance(time.Hour)
	if b.Failures("c") != 0 || b.Wait("c") != 0 {
		t.Fatal("a quiet key is not forgotten")
	}
}

func TestBackoffBounded(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := &Backoff{Free: 1, Base: time.Second, Max: time.Minute, Forget: time.Hour, Clock: clk, Cap: 10}
	for i := 0; i < 100; i++ {
		b.Fail(fmt.Sprint("k", i))
	}
	if b.Len() != 10 {
		t.Fatalf("Len %d, want 10", b.Len())
	}
	if b.Failures("k99") != 1 || b.Failures("k0") != 0 {
		t.Fatal("the least recently failed keys are not the ones forgotten")
	}
}

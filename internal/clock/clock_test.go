package clock

import (
	"sync"
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	f := NewFake(start)
	var _ Clock = f

	steps := []struct {
		name string
		do   func()
		want time.Time
	}{
		{"initial", func() {}, start},
		{"now does not move", func() { time.Sleep(time.Millisecond) }, start},
		{"advance", func() { f.Advance(90 * time.Second) }, start.Add(90 * time.Second)},
		{"advance zero", func() { f.Advance(0) }, start.Add(90 * time.Second)},
		{"advance backwards", func() { f.Advance(-30 * time.Second) }, start.Add(60 * time.Second)},
		{"set", func() { f.Set(start.Add(24 * time.Hour)) }, start.Add(24 * time.Hour)},
		{"set earlier", func() { f.Set(start) }, start},
	}
	for _, s := range steps {
		s.do()
		if got := f.Now(); !got.Equal(s.want) {
			t.Fatalf("%s: Now() = %v, want %v", s.name, got, s.want)
		}
	}
}

func TestFakeUTC(t *testing.T) {
	loc := time.FixedZone("UTC+5", 5*3600)
	local := time.Date(2025, 3, 1, 17, 0, 0, 0, loc)
	f := NewFake(local)
	if got := f.Now(); got.Location() != time.UTC || !got.Equal(local) {
		t.Fatalf("NewFake: Now() = %v, want %v in UTC", got, local.UTC())
	}
	f.Set(local.Add(time.Hour))
	if got := f.Now(); got.Location() != time.UTC || !got.Equal(local.Add(time.Hour)) {
		t.Fatalf("Set: Now() = %v, want UTC", got)
	}
}

func TestFakeConcurrent(t *testing.T) {
	start := time.Unix(0, 0).UTC()
	f := NewFake(start)
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.Advance(time.Second)
			_ = f.Now()
		}()
	}
	wg.Wait()
	if got := f.Now(); !got.Equal(start.Add(100 * time.Second)) {
		t.Fatalf("after 100 concurrent advances: %v", got)
	}
}

func TestReal(t *testing.T) {
	before := time.Now()
	got := Real{}.Now()
	after := time.Now()
	if got.Location() != time.UTC {
		t.Fatalf("Real.Now() location %v, want UTC", got.Location())
	}
	if got.Before(before.Add(-time.Second)) || got.After(after.Add(time.Second)) {
		t.Fatalf("Real.Now() = %v, not between %v and %v", got, before, after)
	}
}

package quota

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
)

var t0 = time.Date(2026, 11, 25, 10, 0, 5, 0, time.UTC)

func TestRequestsPerMinuteExactUnderConcurrency(t *testing.T) {
	l := new(Limiter)
	clk := clock.NewFake(t0)
	const room = 17
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if tk, r := l.Admit(clk.Now(), []string{"k"}, []Limit{{Requests: room}}, 0); r == nil && tk != nil {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != room {
		t.Fatalf("admitted %d of 200, want exactly %d", admitted.Load(), room)
	}
}

func TestTokensReserveThenSettle(t *testing.T) {
	clk := clock.NewFake(t0)
	l := new(Limiter)
	lim := []Limit{{Tokens: 1000}}
	a, r := l.Admit(clk.Now(), []string{"k"}, lim, 600)
	if r != nil {
		t.Fatal(r)
	}
	// 600 reserved: a second request of 600 does not fit...
	if _, r := l.Admit(clk.Now(), []string{"k"}, lim, 600); r == nil || !r.ByTokens || !r.RetryAt.Equal(t0.Truncate(time.Minute).Add(time.Minute)) {
		t.Fatalf("second reservation: %+v", r)
	}
	// ...until the first settles at what it used.
	l.Settle(a, 100)
	l.Settle(a, 100) // twice is a no-op
	b, r := l.Admit(clk.Now(), []string{"k"}, lim, 600)
	if r != nil {
		t.Fatalf("after settling: %+v", r)
	}
	// 100 settled + 600 held: 300 left, so 301 does not fit.
	if _, r := l.Admit(clk.Now(), []string{"k"}, lim, 301); r == nil || r.Tokens != 700 {
		t.Fatalf("301 more tokens: %+v, want refused with 700 counted", r)
	}
	// A new minute starts empty; settling into the ended window changes
	// nothing in the new one.
	clk.Advance(time.Minute)
	l.Settle(b, 999)
	if _, r := l.Admit(clk.Now(), []string{"k"}, lim, 1000); r != nil {
		t.Fatalf("new window: %+v, want the whole room", r)
	}
}

func TestAdmitIsAllOrNone(t *testing.T) {
	l := new(Limiter)
	clk := clock.NewFake(t0)
	keys := []string{"key", "member", "workspace"}
	lims := []Limit{{Requests: 10}, {Requests: 10}, {Requests: 1}}
	if _, r := l.Admit(clk.Now(), keys, lims, 0); r != nil {
		t.Fatal(r)
	}
	r2, r := l.Admit(clk.Now(), keys, lims, 0)
	if r2 != nil || r == nil || r.Key != "workspace" {
		t.Fatalf("workspace limit: %+v", r)
	}
	// The refused request left no count on the others.
	if _, r := l.Admit(clk.Now(), []string{"key"}, []Limit{{Requests: 2}}, 0); r != nil {
		t.Fatalf("key: %+v, want its second request admitted", r)
	}
	if _, r := l.Admit(clk.Now(), []string{"key"}, []Limit{{Requests: 2}}, 0); r == nil || r.Requests != 2 {
		t.Fatalf("key: %+v, want its third refused at 2", r)
	}
}

package gateway

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
)

type ctxKey struct{}

// A detached upstream context keeps the client request's values, is not
// cancelled when the client leaves, is cancelled grace after the watcher
// saw the client gone, and is cancelled on release; the watcher ends once
// nothing is detached, and starts again for the next request.
func TestDetachedRequests(t *testing.T) {
	const grace = 150 * time.Millisecond
	p := &Pipeline{DisconnectGrace: grace, Logger: zap.NewNop()}

	client, leave := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	up, d := p.detach(client, "req", "ses")
	stay, ds := p.detach(context.Background(), "req2", "ses2")
	if up.Value(ctxKey{}) != "v" {
		t.Fatal("the client's values are not kept")
	}
	left := time.Now()
	leave()
	select {
	case <-up.Done():
		t.Fatal("cancelled with its client")
	case <-time.After(grace / 3):
	}
	<-up.Done()
	if waited := time.Since(left); waited < grace {
		t.Fatalf("cancelled %s after the client left, before the grace", waited)
	}
	if context.Cause(up) != context.Canceled || stay.Err() != nil {
		t.Fatalf("cause %v, the staying request's %v", context.Cause(up), stay.Err())
	}
	p.release(d)
	p.release(ds)
	if stay.Err() == nil {
		t.Fatal("release does not end the upstream context")
	}
	waitFor(t, "the watcher ends", func() bool {
		p.detached.mu.Lock()
		defer p.detached.mu.Unlock()
		return !p.detached.watching && p.detached.head == nil
	})

	// A new request starts the watcher again.
	client, leave = context.WithCancel(context.Background())
	up, d = p.detach(client, "req3", "ses3")
	leave()
	<-up.Done()
	p.release(d)
}

// The set's list stays whole whichever request is released first.
func TestDetachedReleaseOrder(t *testing.T) {
	p := &Pipeline{DisconnectGrace: time.Hour, Logger: zap.NewNop()}
	var ds []*detached
	for range 5 {
		_, d := p.detach(context.Background(), "", "")
		ds = append(ds, d)
	}
	count := func() (n int) {
		p.detached.mu.Lock()
		defer p.detached.mu.Unlock()
		for d := p.detached.head; d != nil; d = d.next {
			if d.next != nil && d.next.prev != d {
				t.Fatal("broken list")
			}
			n++
		}
		return n
	}
	for i, j := range []int{2, 0, 4, 3, 1} {
		p.release(ds[j])
		if n := count(); n != 4-i {
			t.Fatalf("after %d releases: %d detached", i+1, n)
		}
	}
}

func TestWatchInterval(t *testing.T) {
	for _, c := range []struct{ grace, want time.Duration }{
		{10 * time.Minute, time.Second}, {5 * time.Second, 500 * time.Millisecond}, {30 * time.Millisecond, 10 * time.Millisecond},
	} {
		if got := watchInterval(c.grace); got != c.want {
			t.Errorf("grace %s: every %s, want %s", c.grace, got, c.want)
		}
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
	}
}

package gateway

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A client that goes away does not take the provider's answer with it. A
// non-stream request that was handed to the forwarder is one the provider
// answers, and bills, whether or not the client is still there: its
// upstream request runs under a context detached from the client's
// cancellation, the answer is read to its end through the meter (writes
// to the gone client are dropped, see meterWriter) and the usage record
// gets the provider's tokens and cost, with client_disconnected set. The
// wait is bounded: DisconnectGrace after the client left (and at most two
// watch intervals more, see detached), the upstream request is cancelled
// as if the client had cancelled it. A client gone
// before its request is forwarded is not forwarded to.
//
// A stream is not detached: when its client leaves, the upstream request
// is cancelled at once (the provider stops producing) and the meter
// charges what it saw, estimating what was not reported. A token count is
// never charged and is not detached either.

// DefaultDisconnectGrace is the Pipeline's DisconnectGrace when it sets
// none: the reverse proxy's default response header timeout, so that a
// provider is given as long to answer after its client left as before.
const DefaultDisconnectGrace = 10 * time.Minute

// detached is a non-stream request whose upstream request is not
// cancelled with its client: its upstream context, not cancelled with the
// client request's (but grace after it, or when released), and its place
// among the pipeline's detached requests.
//
// The client's leaving is noticed by a watcher that looks over the
// pipeline's detached requests every watchInterval of the grace, not by
// a callback on each client request's context: such a callback is a
// registration on the client's context and its removal per request, the
// costliest part of a request's detachment under load. The grace is thus
// kept to within two intervals: the watcher sees the client gone at most
// one interval after it left, and cancels at the first look a grace after
// that; the upstream request is cancelled between grace and grace plus
// two intervals after the client left.
type detached struct {
	client             context.Context
	cancel             context.CancelFunc
	requestID, session string
	// The set's list, and when the watcher first saw the client gone;
	// guarded by the set's mu.
	prev, next *detached
	left       time.Time
}

// detachedSet is a pipeline's detached requests and their watcher.
type detachedSet struct {
	mu       sync.Mutex
	head     *detached
	watching bool // a watcher runs; it ends when it finds the set empty
}

// watchDivisor sets the watcher's interval to the grace over it, within
// [minWatch, maxWatch].
const (
	watchDivisor = 10
	minWatch     = 10 * time.Millisecond
	maxWatch     = time.Second
)

// watchInterval is how often the watcher looks at the detached requests.
func watchInterval(grace time.Duration) time.Duration {
	return min(max(grace/watchDivisor, minWatch), maxWatch)
}

// detach returns the context for a non-stream request's upstream request
// (its values are the client request's: Caddy's vars, the replacer, the
// member), and the detachment, to release once the forwarder returned.
// requestID and session only name the request in the debug log entry
// written when the client is seen gone.
func (p *Pipeline) detach(client context.Context, requestID, session string) (context.Context, *detached) {
	d := &detached{client: client, requestID: requestID, session: session}
	ctx, cancel := context.WithCancel(context.WithoutCancel(client))
	d.cancel = cancel
	s := &p.detached
	s.mu.Lock()
	d.next = s.head
	if s.head != nil {
		s.head.prev = d
	}
	s.head = d
	if !s.watching {
		s.watching = true
		go p.watchDetached()
	}
	s.mu.Unlock()
	return ctx, d
}

// release ends the upstream context: the forwarder returned, so nothing
// reads the provider's answer any more.
func (p *Pipeline) release(d *detached) {
	s := &p.detached
	s.mu.Lock()
	if d.prev != nil {
		d.prev.next = d.next
	} else {
		s.head = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	}
	d.prev, d.next = nil, nil
	s.mu.Unlock()
	d.cancel()
}

// watchDetached notes when each detached request's client left and
// cancels its upstream request grace after; it ends when no request is
// detached.
func (p *Pipeline) watchDetached() {
	grace := p.grace()
	t := time.NewTicker(watchInterval(grace))
	defer t.Stop()
	s := &p.detached
	for range t.C {
		s.mu.Lock()
		if s.head == nil {
			s.watching = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		for d := s.head; d != nil; d = d.next {
			if d.left.IsZero() {
				if d.client.Err() == nil {
					continue
				}
				d.left = now
				if ce := p.Logger.Check(zap.DebugLevel, "the client left: the provider's answer is still read and metered"); ce != nil {
					ce.Write(zap.String("request_id", d.requestID), zap.String("session", d.session), zap.Duration("grace", grace))
				}
			}
			if now.Sub(d.left) >= grace {
				d.cancel()
			}
		}
		s.mu.Unlock()
	}
}

// grace is the pipeline's DisconnectGrace, or its default.
func (p *Pipeline) grace() time.Duration {
	if p.DisconnectGrace > 0 {
		return p.DisconnectGrace
	}
	return DefaultDisconnectGrace
}

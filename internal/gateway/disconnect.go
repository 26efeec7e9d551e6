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
// wait is bounded: DisconnectGrace after the client left, the upstream
// request is cancelled as if the client had cancelled it. A client gone
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

// detached is the upstream context of a non-stream request: not cancelled
// with the client's request, but grace after it.
type detached struct {
	mu     sync.Mutex
	timer  *time.Timer
	ended  bool
	cancel context.CancelFunc
	stop   func() bool
}

// detach returns the context for a non-stream request's upstream request
// (its values are the client request's: Caddy's vars, the replacer, the
// member), and release, to call once the forwarder returned. requestID
// and session only name the request in the debug log entry written when
// the client leaves.
func (p *Pipeline) detach(client context.Context, requestID, session string) (ctx context.Context, release func()) {
	grace := p.DisconnectGrace
	if grace <= 0 {
		grace = DefaultDisconnectGrace
	}
	d := new(detached)
	ctx, d.cancel = context.WithCancel(context.WithoutCancel(client))
	logger := p.Logger
	d.stop = context.AfterFunc(client, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.ended {
			return // the answer ended as the client left
		}
		d.timer = time.AfterFunc(grace, d.cancel)
		if ce := logger.Check(zap.DebugLevel, "the client left: the provider's answer is still read and metered"); ce != nil {
			ce.Write(zap.String("request_id", requestID), zap.String("session", session), zap.Duration("grace", grace))
		}
	})
	return ctx, d.release
}

// release ends the upstream context: the forwarder returned, so nothing
// reads the provider's answer any more.
func (d *detached) release() {
	d.stop()
	d.mu.Lock()
	d.ended = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
	d.cancel()
}

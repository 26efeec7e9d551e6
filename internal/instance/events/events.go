// Package events is the instance server's event bus: operations publish
// events, and each subscriber of the event stream gets them as SSE frames.
package events

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/instance/ids"
)

// Event is one frame of the event stream.
type Event struct {
	ID       string         `json:"id"`
	Created  int64          `json:"created,omitempty"`
	Type     string         `json:"type"`
	Location *LocationRef   `json:"location,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	Data     any            `json:"data"`
}

// LocationRef is Location.PublicRef.
type LocationRef struct {
	Directory string `json:"directory"`
}

// Bus fans events out to subscribers. Each subscriber has a bounded queue;
// one that falls behind is disconnected (its stream ends) rather than
// slowing anyone else. There is no replay.
type Bus struct {
	QueueSize int
	Clock     clock.Clock

	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

type subscriber struct {
	ch     chan []byte
	closed chan struct{}
	once   sync.Once
}

func (s *subscriber) close() { s.once.Do(func() { close(s.closed) }) }

// NewBus returns a bus with queues of queueSize frames.
func NewBus(queueSize int, clk clock.Clock) *Bus {
	if queueSize <= 0 {
		queueSize = 4096
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &Bus{QueueSize: queueSize, Clock: clk, subs: map[*subscriber]struct{}{}}
}

// Publish sends an event to every subscriber; it never blocks.
func (b *Bus) Publish(typ string, loc *LocationRef, data any) {
	if data == nil {
		data = map[string]any{}
	}
	now := b.Clock.Now()
	frame, err := json.Marshal(Event{ID: ids.Event(now), Created: now.UnixMilli(), Type: typ, Location: loc, Data: data})
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- frame:
		default: // queue full: this subscriber is too slow
			delete(b.subs, s)
			s.close()
		}
	}
}

// Subscribers is the number of live subscribers.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

func (b *Bus) subscribe() *subscriber {
	s := &subscriber{ch: make(chan []byte, b.QueueSize), closed: make(chan struct{})}
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s
}

func (b *Bus) unsubscribe(s *subscriber) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
	s.close()
}

// Serve streams events to one client as SSE: first server.connected, then
// every event, with a heartbeat comment every heartbeat interval.
func (b *Bus) Serve(w http.ResponseWriter, r *http.Request, heartbeat time.Duration) {
	s := b.subscribe()
	defer b.unsubscribe(s)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	first, _ := json.Marshal(Event{ID: ids.Event(b.Clock.Now()), Type: "server.connected", Data: map[string]any{}})
	if !writeFrame(w, rc, first) {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.closed:
			// Dropped for falling behind: end the stream with an error so the
			// client reconnects and resyncs.
			panic(http.ErrAbortHandler)
		case frame := <-s.ch:
			if !writeFrame(w, rc, frame) {
				return
			}
		case <-tick.C:
			if _, err := w.Write([]byte(": heartbeat\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

func writeFrame(w http.ResponseWriter, rc *http.ResponseController, frame []byte) bool {
	if _, err := w.Write([]byte("data: ")); err != nil {
		return false
	}
	w.Write(frame)
	if _, err := w.Write([]byte("\n\n")); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// Package events is the instance server's event bus: operations publish
// events, and each subscriber of the event stream gets them as SSE frames.
// Durable events are written to a journal before they are sent, carry
// `durable {aggregateID, seq, version}` and an SSE `id:` line, and are
// replayed to a stream that reconnects with Last-Event-ID.
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
	Durable  *Durable       `json:"durable,omitempty"`
	Location *LocationRef   `json:"location,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	Data     any            `json:"data"`
}

// Durable places a durable event in its aggregate (a session): its
// sequence number there, from 1, and the version of the event's payload.
type Durable struct {
	AggregateID string `json:"aggregateID"`
	Seq         uint64 `json:"seq"`
	Version     int    `json:"version"`
}

// LocationRef is Location.PublicRef.
type LocationRef struct {
	Directory string `json:"directory"`
}

// Bus fans events out to subscribers. Each subscriber has a bounded queue;
// one that falls behind is disconnected (its stream ends) rather than
// slowing anyone else; it reconnects and replays what it missed.
type Bus struct {
	QueueSize int
	Clock     clock.Clock

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	// durable serialises durable batches: ids are taken, journaled and
	// sent in one order, so a stream that has seen an id has seen every
	// durable event journaled before it.
	durable sync.Mutex
}

// frame is an encoded event as a subscriber queue holds it.
type frame struct {
	id      string // the event id of a durable event, else ""
	session string // the aggregate of a durable event
	b       []byte // the whole SSE frame
}

type subscriber struct {
	ch     chan frame
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

// Encode is the SSE frame of an event: an `id:` line for a durable event,
// then its data line.
func Encode(ev *Event) ([]byte, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(ev.ID)+16)
	if ev.Durable != nil {
		out = append(append(append(out, "id: "...), ev.ID...), '\n')
	}
	out = append(append(append(out, "data: "...), body...), "\n\n"...)
	return out, nil
}

// Publish sends an ephemeral event to every subscriber; it never blocks.
func (b *Bus) Publish(typ string, loc *LocationRef, data any) {
	if data == nil {
		data = map[string]any{}
	}
	now := b.Clock.Now()
	f, err := Encode(&Event{ID: ids.Event(now), Created: now.UnixMilli(), Type: typ, Location: loc, Data: data})
	if err != nil {
		return
	}
	b.send(frame{b: f})
}

// PublishBatch gives each event an id and a time, lets journal write the
// durable ones (it sets their Durable field; an error leaves them
// ephemeral) and sends them all in order. Batches are serialised so that
// durable ids reach every stream in ascending order.
func (b *Bus) PublishBatch(evs []*Event, journal func([]*Event) error) error {
	b.durable.Lock()
	defer b.durable.Unlock()
	now := b.Clock.Now()
	for _, ev := range evs {
		ev.ID, ev.Created = ids.Event(now), now.UnixMilli()
		if ev.Data == nil {
			ev.Data = map[string]any{}
		}
	}
	var jerr error
	if journal != nil {
		if jerr = journal(evs); jerr != nil {
			for _, ev := range evs {
				ev.Durable = nil
			}
		}
	}
	for _, ev := range evs {
		f, err := Encode(ev)
		if err != nil {
			continue
		}
		fr := frame{b: f}
		if ev.Durable != nil {
			fr.id, fr.session = ev.ID, ev.Durable.AggregateID
		}
		b.send(fr)
	}
	return jerr
}

func (b *Bus) send(f frame) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- f:
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
	s := &subscriber{ch: make(chan frame, b.QueueSize), closed: make(chan struct{})}
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

// Stored is a journaled event as a replay returns it.
type Stored struct {
	ID  string
	Raw []byte // the event record (JSON)
}

// Stream configures one event stream.
type Stream struct {
	// Heartbeat is the interval of `: heartbeat` comments (one is sent at
	// connect).
	Heartbeat time.Duration
	// Session, when set, limits the stream to that session's durable
	// events (a session's own stream); otherwise every event is sent.
	Session string
	// Replay, when set, reads the journaled events the client missed; it
	// runs after the stream subscribed, so nothing falls between the
	// replay and the live events. ok false means the client's position is
	// outside what the journal keeps: server.connected then carries
	// resync: true and nothing is replayed.
	Replay func() (events []Stored, ok bool)
}

// Serve streams events to one client as SSE: server.connected, a
// heartbeat, the replayed events, then live ones, with a heartbeat every
// interval.
func (b *Bus) Serve(w http.ResponseWriter, r *http.Request, st Stream) {
	if st.Heartbeat <= 0 {
		st.Heartbeat = 15 * time.Second
	}
	s := b.subscribe()
	defer b.unsubscribe(s)
	var replay []Stored
	resync := false
	if st.Replay != nil {
		var ok bool
		replay, ok = st.Replay()
		resync = !ok
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	data := map[string]any{}
	if resync {
		data["resync"] = true
	}
	first, _ := Encode(&Event{ID: ids.Event(b.Clock.Now()), Type: "server.connected", Data: data})
	if !write(w, rc, first) || !write(w, rc, heartbeat) {
		return
	}
	last := ""
	for _, ev := range replay {
		f := make([]byte, 0, len(ev.Raw)+len(ev.ID)+16)
		f = append(append(append(f, "id: "...), ev.ID...), "\ndata: "...)
		f = append(append(f, ev.Raw...), "\n\n"...)
		if !write(w, rc, f) {
			return
		}
		last = ev.ID
	}
	tick := time.NewTicker(st.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.closed:
			// Dropped for falling behind: end the stream with an error so the
			// client reconnects and replays.
			panic(http.ErrAbortHandler)
		case f := <-s.ch:
			if f.id != "" && f.id <= last {
				continue // already replayed
			}
			if st.Session != "" && f.session != st.Session {
				continue
			}
			if !write(w, rc, f.b) {
				return
			}
		case <-tick.C:
			if !write(w, rc, heartbeat) {
				return
			}
		}
	}
}

var heartbeat = []byte(": heartbeat\n\n")

func write(w http.ResponseWriter, rc *http.ResponseController, f []byte) bool {
	if _, err := w.Write(f); err != nil {
		return false
	}
	return rc.Flush() == nil
}

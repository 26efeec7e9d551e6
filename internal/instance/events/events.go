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
	"sync/atomic"
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
//
// Events pass through one ordered queue: they get their ids (ascending)
// as they enter it, and a single worker writes the durable ones of
// everything queued to the journal in one call before it sends them. A
// publisher does not wait for the journal unless it asks to, and a stream
// that has seen an event id has seen every durable event journaled before
// it.
//
// A subscriber gets the events queued after it subscribed, and only those:
// an event queued earlier but still waiting in the queue (or being
// journaled) when it subscribes is not sent to it. Each event is numbered
// as it enters the queue, and a subscriber records the next number when
// it subscribes.
type Bus struct {
	QueueSize int
	Clock     clock.Clock

	mu   sync.Mutex
	subs map[*subscriber]struct{}

	qmu     sync.Mutex // held before mu when both are
	queue   []*batch
	next    uint64 // the number of the next event to enter the queue
	running bool
	journal atomic.Pointer[Journal]
}

// Journal writes durable events (those whose Durable names an aggregate)
// in order, setting each one's Durable.Seq and Version, or clearing
// Durable for one it does not keep. An error leaves the whole call's
// events ephemeral.
type Journal func(evs []*Event) error

type batch struct {
	evs  []*Event
	seq  uint64        // the number of evs[0]; the others follow it
	done chan struct{} // closed once sent, when the publisher waits
	err  error
}

// SetJournal sets the journal durable events are written to (nil: none,
// every event is ephemeral).
func (b *Bus) SetJournal(j Journal) {
	if j == nil {
		b.journal.Store(nil)
		return
	}
	b.journal.Store(&j)
}

// frame is an encoded event as a subscriber queue holds it.
type frame struct {
	seq     uint64 // the event's number in the queue
	id      string // the event id of a durable event, else ""
	session string // the aggregate of a durable event
	b       []byte // the whole SSE frame
	body    []byte // the event record inside b
}

type subscriber struct {
	from   uint64 // the first event number queued after it subscribed
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

// encode is the SSE frame of an event (an `id:` line for a durable
// event, then its data line) and the record inside it.
func encode(ev *Event) (frame, body []byte, err error) {
	body, err = json.Marshal(ev)
	if err != nil {
		return nil, nil, err
	}
	out := make([]byte, 0, len(body)+len(ev.ID)+16)
	if ev.Durable != nil {
		out = append(append(append(out, "id: "...), ev.ID...), '\n')
	}
	out = append(out, "data: "...)
	start := len(out)
	out = append(append(out, body...), "\n\n"...)
	return out, out[start : start+len(body)], nil
}

// Publish sends an ephemeral event to every subscriber; it never blocks.
func (b *Bus) Publish(typ string, loc *LocationRef, data any) {
	b.enqueue(&batch{evs: []*Event{{Type: typ, Location: loc, Data: data}}})
}

// PublishBatch queues events to be sent in order; those whose Durable
// names an aggregate are journaled first. With wait it returns once they
// were sent, with the journal's error (the events then went out
// ephemeral); Durable.Seq is then set on the journaled ones.
func (b *Bus) PublishBatch(evs []*Event, wait bool) error {
	bt := &batch{evs: evs}
	if wait {
		bt.done = make(chan struct{})
	}
	b.enqueue(bt)
	if !wait {
		return nil
	}
	<-bt.done
	return bt.err
}

// Flush returns once every event queued before it was sent.
func (b *Bus) Flush() { b.PublishBatch(nil, true) }

func (b *Bus) enqueue(bt *batch) {
	// The data is encoded now, in the publisher's goroutine: what it
	// refers to may change once Publish returns.
	for _, ev := range bt.evs {
		if _, raw := ev.Data.(json.RawMessage); !raw {
			if ev.Data == nil {
				ev.Data = map[string]any{}
			}
			enc, err := json.Marshal(ev.Data)
			if err != nil {
				enc = []byte("{}")
			}
			ev.Data = json.RawMessage(enc)
		}
	}
	b.qmu.Lock()
	now := b.Clock.Now()
	for _, ev := range bt.evs {
		ev.ID, ev.Created = ids.Event(now), now.UnixMilli()
	}
	bt.seq = b.next
	b.next += uint64(len(bt.evs))
	b.queue = append(b.queue, bt)
	start := !b.running
	b.running = true
	b.qmu.Unlock()
	if start {
		go b.work()
	}
}

// work sends what is queued, journaling each round's durable events in
// one call, until the queue is empty.
func (b *Bus) work() {
	for {
		b.qmu.Lock()
		take := b.queue
		b.queue = nil
		if len(take) == 0 {
			b.running = false
			b.qmu.Unlock()
			return
		}
		b.qmu.Unlock()
		var durable []*Event
		for _, bt := range take {
			for _, ev := range bt.evs {
				if ev.Durable != nil {
					durable = append(durable, ev)
				}
			}
		}
		var jerr error
		if len(durable) > 0 {
			j := b.journal.Load()
			if j != nil {
				jerr = (*j)(durable)
			}
			if j == nil || jerr != nil {
				for _, ev := range durable {
					ev.Durable = nil
				}
			}
		}
		for _, bt := range take {
			for i, ev := range bt.evs {
				f, body, err := encode(ev)
				if err != nil {
					continue
				}
				fr := frame{seq: bt.seq + uint64(i), b: f, body: body}
				if ev.Durable != nil {
					fr.id, fr.session = ev.ID, ev.Durable.AggregateID
				}
				b.send(fr)
			}
			if bt.done != nil {
				if len(bt.evs) > 0 {
					bt.err = jerr
				}
				close(bt.done)
			}
		}
	}
}

func (b *Bus) send(f frame) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if f.seq < s.from {
			continue // queued before s subscribed
		}
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

// subscribe registers a subscriber for the events queued from now on.
// Reading the next event number and registering happen under qmu, so
// every event is either queued before (a lower number, not sent to s) or
// after (sent to s, which the worker then finds registered).
func (b *Bus) subscribe() *subscriber {
	s := &subscriber{ch: make(chan frame, b.QueueSize), closed: make(chan struct{})}
	b.qmu.Lock()
	s.from = b.next
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	b.qmu.Unlock()
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
	// Transform, when set, rewrites each event record sent (the first
	// server.connected included) into the records written in its place,
	// each as a data-only frame; replayed events are not transformed.
	Transform func(record []byte) [][]byte
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
	first, firstBody, _ := encode(&Event{ID: ids.Event(b.Clock.Now()), Type: "server.connected", Data: data})
	send := func(f, body []byte) bool {
		if st.Transform == nil {
			return write(w, rc, f)
		}
		for _, rec := range st.Transform(body) {
			out := make([]byte, 0, len(rec)+8)
			out = append(append(append(out, "data: "...), rec...), "\n\n"...)
			if _, err := w.Write(out); err != nil {
				return false
			}
		}
		return rc.Flush() == nil
	}
	if !send(first, firstBody) || !write(w, rc, heartbeat) {
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
			if !send(f.b, f.body) {
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

// Tap calls fn with the record of every event sent from now on (fn runs
// on one goroutine, in order) until stop is called. A tap that falls
// behind misses events, as a slow stream would, and goes on with the next
// ones. The tap has subscribed when Tap returns.
func (b *Bus) Tap(fn func(record []byte)) (stop func()) {
	done := make(chan struct{})
	s := b.subscribe()
	go func() {
		for {
			for lost := false; !lost; {
				select {
				case f := <-s.ch:
					fn(f.body)
				case <-s.closed:
					lost = true
				case <-done:
					b.unsubscribe(s)
					return
				}
			}
			s = b.subscribe()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

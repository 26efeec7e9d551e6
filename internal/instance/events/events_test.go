package events

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// stream serves one stream and returns a reader of its frames.
func stream(t *testing.T, b *Bus, st Stream) func() string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { b.Serve(w, r, st) }))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close(); srv.Close() })
	br := bufio.NewReader(resp.Body)
	frames := make(chan string, 64)
	go func() {
		var f strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				close(frames)
				return
			}
			f.WriteString(line)
			if line == "\n" {
				if s := f.String(); s != ": heartbeat\n\n" {
					frames <- s
				}
				f.Reset()
			}
		}
	}()
	return func() string {
		select {
		case f := <-frames:
			return f
		case <-time.After(5 * time.Second):
			t.Fatal("no frame")
		}
		return ""
	}
}

// A journal that numbers events per aggregate, as the store does.
type journal struct {
	mu   sync.Mutex
	seqs map[string]uint64
	fail bool
}

func (j *journal) write(evs []*Event) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail {
		return errors.New("store down")
	}
	for _, ev := range evs {
		j.seqs[ev.Durable.AggregateID]++
		ev.Durable.Seq, ev.Durable.Version = j.seqs[ev.Durable.AggregateID], 1
	}
	return nil
}

func TestDurableFramesInOrderAndJournalFailure(t *testing.T) {
	b := NewBus(0, nil)
	j := &journal{seqs: map[string]uint64{}}
	b.SetJournal(j.write)
	next := stream(t, b, Stream{})
	if f := next(); !strings.Contains(f, `"type":"server.connected"`) {
		t.Fatalf("first %q", f)
	}
	evs := []*Event{{Type: "a", Durable: &Durable{AggregateID: "s1"}}, {Type: "delta"}, {Type: "b", Durable: &Durable{AggregateID: "s1"}}}
	if err := b.PublishBatch(evs, true); err != nil {
		t.Fatal(err)
	}
	if evs[2].Durable.Seq != 2 || !(evs[0].ID < evs[1].ID && evs[1].ID < evs[2].ID) {
		t.Fatalf("seq %d, ids %s %s %s", evs[2].Durable.Seq, evs[0].ID, evs[1].ID, evs[2].ID)
	}
	for i, want := range []string{"id: " + evs[0].ID + "\ndata: ", "data: ", "id: " + evs[2].ID + "\ndata: "} {
		if f := next(); !strings.HasPrefix(f, want) || !strings.Contains(f, `"type":"`+evs[i].Type+`"`) {
			t.Fatalf("frame %d %q, want prefix %q", i, f, want)
		}
	}
	// The journal fails: the events go out ephemeral, and the waiting
	// publisher is told.
	j.mu.Lock()
	j.fail = true
	j.mu.Unlock()
	failed := []*Event{{Type: "c", Durable: &Durable{AggregateID: "s1"}}}
	if err := b.PublishBatch(failed, true); err == nil || failed[0].Durable != nil {
		t.Fatalf("journal failure: %v %+v", err, failed[0].Durable)
	}
	if f := next(); !strings.HasPrefix(f, "data: ") || strings.Contains(f, `"durable"`) {
		t.Fatalf("ephemeral frame %q", f)
	}
	// Without a journal every event is ephemeral.
	b.SetJournal(nil)
	none := []*Event{{Type: "d", Durable: &Durable{AggregateID: "s1"}}}
	b.PublishBatch(none, true)
	if none[0].Durable != nil {
		t.Fatal("durable without a journal")
	}
}

// An event journaled while a stream replays reaches the stream once: in
// the replay, not again live.
func TestReplayAndLiveNotTwice(t *testing.T) {
	b := NewBus(0, nil)
	j := &journal{seqs: map[string]uint64{}}
	b.SetJournal(j.write)
	var replayed *Event
	next := stream(t, b, Stream{Replay: func() ([]Stored, bool) {
		replayed = &Event{Type: "during", Durable: &Durable{AggregateID: "s"}}
		b.PublishBatch([]*Event{replayed}, true) // journaled and queued to this stream too
		return []Stored{{ID: replayed.ID, Raw: []byte(`{"type":"during"}`)}}, true
	}})
	if f := next(); !strings.Contains(f, "server.connected") || strings.Contains(f, "resync") {
		t.Fatalf("connected %q", f)
	}
	if f := next(); f != "id: "+replayed.ID+"\ndata: {\"type\":\"during\"}\n\n" {
		t.Fatalf("replayed %q", f)
	}
	b.Publish("after", nil, nil)
	if f := next(); !strings.Contains(f, `"type":"after"`) {
		t.Fatalf("the replayed event came again, or not the next one: %q", f)
	}
	// A position the journal no longer holds: resync, nothing replayed.
	next2 := stream(t, b, Stream{Replay: func() ([]Stored, bool) { return nil, false }})
	if f := next2(); !strings.Contains(f, `"data":{"resync":true}`) {
		t.Fatalf("resync %q", f)
	}
}

// A session's stream gets that session's durable events only; a
// transform rewrites every record it sends.
func TestSessionStreamAndTransform(t *testing.T) {
	b := NewBus(0, nil)
	b.SetJournal((&journal{seqs: map[string]uint64{}}).write)
	next := stream(t, b, Stream{Session: "s1"})
	next()
	b.PublishBatch([]*Event{{Type: "other", Durable: &Durable{AggregateID: "s2"}}, {Type: "eph"}, {Type: "mine", Durable: &Durable{AggregateID: "s1"}}}, true)
	if f := next(); !strings.Contains(f, `"type":"mine"`) {
		t.Fatalf("session stream got %q", f)
	}
	// The transform writes each record's type twice; it drops "skip".
	tr := stream(t, b, Stream{Transform: func(rec []byte) [][]byte {
		var e struct{ Type string }
		json.Unmarshal(rec, &e)
		if e.Type == "skip" {
			return nil
		}
		out := []byte(`{"t":"` + e.Type + `"}`)
		return [][]byte{out, out}
	}})
	for _, want := range []string{"server.connected", "server.connected"} {
		if f := tr(); f != "data: {\"t\":\""+want+"\"}\n\n" {
			t.Fatalf("transformed %q, want %s", f, want)
		}
	}
	b.Publish("skip", nil, nil)
	b.Publish("x", nil, nil)
	for i := 0; i < 2; i++ {
		if f := tr(); f != "data: {\"t\":\"x\"}\n\n" {
			t.Fatalf("after a dropped record: %q", f)
		}
	}
}

// A stream gets the events queued after it subscribed, and only those:
// not one the worker is journaling when it subscribes, nor one still
// waiting in the queue behind it. The journal holds the worker, so the
// order is fixed.
func TestNoEventQueuedBeforeSubscribe(t *testing.T) {
	b := NewBus(0, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	b.SetJournal(func(evs []*Event) error {
		if evs[0].Type == "held" {
			close(entered)
			<-release
		}
		return (&journal{seqs: map[string]uint64{}}).write(evs)
	})
	b.PublishBatch([]*Event{{Type: "held", Durable: &Durable{AggregateID: "s"}}}, false)
	<-entered                     // the worker took "held" and journals it
	b.Publish("queued", nil, nil) // waits in the queue behind it
	// The stream has subscribed once its response starts.
	next := stream(t, b, Stream{})
	if f := next(); !strings.Contains(f, `"type":"server.connected"`) {
		t.Fatalf("first %q", f)
	}
	b.Publish("after", nil, nil)
	close(release)
	if f := next(); !strings.Contains(f, `"type":"after"`) {
		t.Fatalf("got %q, want the event published after subscribing", f)
	}
	b.Publish("later", nil, nil)
	if f := next(); !strings.Contains(f, `"type":"later"`) {
		t.Fatalf("got %q, want the next live event", f)
	}
}

// A tap gets the events published once Tap returned, and none before.
func TestTapFromReturn(t *testing.T) {
	b := NewBus(0, nil)
	b.Publish("before", nil, nil)
	got := make(chan string, 4)
	stop := b.Tap(func(rec []byte) {
		var e struct{ Type string }
		json.Unmarshal(rec, &e)
		got <- e.Type
	})
	defer stop()
	b.Publish("after", nil, nil)
	b.Flush()
	select {
	case typ := <-got:
		if typ != "after" {
			t.Fatalf("tap got %q first, want after", typ)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tap missed an event published after Tap returned")
	}
}

package server

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/loop"
	"github.com/agentgate/agentgate/internal/store"
)

// sharedStore makes the harness's store report that several processes
// share it, as PostgreSQL does, so that drains take leases.
type sharedStore struct{ store.Store }

func (sharedStore) Shared() bool { return true }

// Two nodes on one shared store: a prompt queued through node B while node
// A runs a turn of the same session is answered by A's drain after its
// turn, never by a second drain on B at the same time.
func TestDrainLeaseOneDrainAcrossNodes(t *testing.T) {
	h := newDrainHarness(t)
	h.mu.Lock()
	h.st = sharedStore{h.st}
	h.mu.Unlock()
	runnerB := loop.NewRunner()
	runnerB.SetProvider(h.runner.Provider())
	t.Cleanup(runnerB.Close)
	b := newSrvHarness(t, func(o *Options) {
		o.Store = h.opts.Store
		o.Runner = runnerB
	})

	h.send("POST", "/api/session", map[string]any{"id": "ses_l"})
	h.fake.SetBehavior(fakeprovider.Behavior{Delay: 300 * time.Millisecond})
	h.prompt("ses_l", "one", nil)
	deadline := time.Now().Add(5 * time.Second)
	for len(turns(h.fake)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("node A's turn never reached the provider")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := b.send("POST", "/api/session/ses_l/prompt", map[string]any{"text": "two", "delivery": "queue"}); r.status != 200 {
		t.Fatalf("prompt through node B: %d %s", r.status, r.body)
	}
	time.Sleep(50 * time.Millisecond)
	if runnerB.IsActive("ses_l") {
		t.Fatal("node B runs a drain of a session that node A drains")
	}
	msgs := h.waitIdle("ses_l", 2)
	if got := len(turns(h.fake)); got != 2 {
		t.Fatalf("the provider got %d requests for 2 prompts", got)
	}
	var order []string
	for _, m := range msgs {
		order = append(order, m["type"].(string)+":"+text(m))
	}
	want := "[user:one assistant:" + fakeprovider.Text + " idle: user:two assistant:" + fakeprovider.Text + " idle:]"
	if fmt.Sprint(order) != want {
		t.Fatalf("transcript:\n got  %v\n want %s", order, want)
	}

	// The lease is free again: node B drains the next prompt itself.
	h.fake.SetBehavior(fakeprovider.Behavior{})
	if r := b.send("POST", "/api/session/ses_l/prompt", map[string]any{"text": "three"}); r.status != 200 {
		t.Fatalf("prompt through node B: %d %s", r.status, r.body)
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(ofType(h.messages("ses_l"), "assistant")) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the third prompt was never answered: %v", h.messages("ses_l"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A node that died holding a session's lease blocks its drain only until
// the lease expires; the next sweep (resume) of another node takes over.
func TestDrainLeaseOfADeadNodeExpires(t *testing.T) {
	h := newDrainHarness(t)
	h.mu.Lock()
	h.st = sharedStore{h.st}
	h.mu.Unlock()
	h.send("POST", "/api/session", map[string]any{"id": "ses_d"})
	raw, _ := json.Marshal(map[string]any{"node": "dead-node", "until": h.clk.Now().Add(loop.LeaseTTL)})
	if err := h.store().Update(h.t.Context(), func(tx store.Tx) error { return tx.PutMeta(loop.LeaseKey("default", "ses_d"), raw) }); err != nil {
		t.Fatal(err)
	}
	h.prompt("ses_d", "anyone there", nil)
	time.Sleep(100 * time.Millisecond)
	if n := len(turns(h.fake)); n != 0 || len(ofType(h.messages("ses_d"), "assistant")) != 0 {
		t.Fatalf("drained while a live lease of another node held the session (%d provider calls)", n)
	}
	h.clk.Advance(loop.LeaseTTL)
	h.runner.Resume()
	msgs := h.waitIdle("ses_d", 1)
	if len(ofType(msgs, "assistant")) != 1 || len(turns(h.fake)) != 1 {
		t.Fatalf("after the dead node's lease expired: %v", msgs)
	}
}

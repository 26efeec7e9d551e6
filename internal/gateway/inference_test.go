package gateway

import (
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func TestCooldownOrdersFailedTargetsLast(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := []service.Target{
		{Conn: &store.Connection{ID: "conn_a"}, ModelID: "m"},
		{Conn: &store.Connection{ID: "conn_b"}, ModelID: "m"},
		{Conn: &store.Connection{ID: "conn_c"}, ModelID: "m"},
	}
	ids := func(ts []service.Target) string {
		s := ""
		for _, t := range ts {
			s += t.Conn.ID[5:]
		}
		return s
	}
	var c cooldowns
	if got := ids(c.order(ts, t0)); got != "abc" {
		t.Fatalf("no failures: %s", got)
	}
	c.fail(ts[0], t0.Add(30*time.Second))
	c.fail(ts[1], t0.Add(10*time.Second))
	if got := ids(c.order(ts, t0)); got != "cab" {
		t.Fatalf("a and b cooling: %s", got)
	}
	if got := ids(c.order(ts, t0.Add(10*time.Second))); got != "bca" {
		t.Fatalf("b's cool-down over: %s", got)
	}
	c.ok(ts[0])
	if got := ids(c.order(ts, t0)); got != "acb" {
		t.Fatalf("a answered again: %s", got)
	}
	// The caller's slice is not reordered in place.
	if ids(ts) != "abc" {
		t.Fatalf("input reordered: %s", ids(ts))
	}
}

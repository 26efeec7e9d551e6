package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestSmoke is the CI-sized run of the harness (a few seconds after the
// build): lanes (b), (c) and (i) interleaved three times at c=32, a short
// invalid-key flood and a few streams. It fails only on gross regressions
// — agentgate below a tenth of plain reverse_proxy throughput (the issue's
// 0.25 once settlement is batched: today's full run measures 0.16–0.5× on
// a shared two-core machine, so 0.25 would flake), a lost or
// stalled stream event, an invalid key reaching the provider, or usage that
// does not add up — not on noise. AGENTGATE_BENCH_BIN skips the build.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the real binary")
	}
	o := options{reps: 3, conc: []int{32}, thrDur: 500 * time.Millisecond, streamConc: 50,
		floodDur: 300 * time.Millisecond, floodConc: 16, pin: false, portkey: false,
		bin: os.Getenv("AGENTGATE_BENCH_BIN")}
	if testing.Verbose() {
		o.progressOut = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", res.summary())

	cond := res.conds[0]
	b, c := median(res.thr[cond]["b"]), median(res.thr[cond]["c"])
	t.Logf("throughput c=32: (b) %.0f req/s, (c) %.0f req/s = %.2f×", b, c, c/b)
	// Gross regressions only: quiet runs measure 0.7–0.9×, and this runs
	// beside every other package's tests.
	if c < 0.25*b {
		t.Errorf("agentgate throughput %.0f req/s is below a quarter of plain reverse_proxy's %.0f req/s", c, b)
	}
	for _, id := range []string{"b", "c", "i"} {
		if e := res.thrErrs[cond][id]; e > 0 {
			t.Errorf("lane (%s): %d failed requests (%s)", id, e, res.thrFirst[cond][id])
		}
	}
	for _, s := range res.str["c"] {
		if s.complete != s.streams || s.lost != 0 {
			t.Errorf("streams through agentgate: %d/%d complete, %d events lost (%s)", s.complete, s.streams, s.lost, s.firstErr)
		}
	}
	if res.floodHits != 0 || res.floodWrong != 0 {
		t.Errorf("invalid-key flood: %d requests reached the provider, %d answers were not 401", res.floodHits, res.floodWrong)
	}
	if res.usageSpent != res.usageWant || res.usageReserved != 0 {
		t.Errorf("usage: %d answers should cost %s USD; the ledger has %s USD spent and %s USD reserved",
			res.usageCount, res.usageWant, res.usageSpent, res.usageReserved)
	}
}

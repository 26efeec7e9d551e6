package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoak is the two-minute soak: the same process, load and checks as
// `go run ./bench -soak 1h` (gateway traffic in every format at half the
// measured capacity, instance sessions with tool calls and compaction,
// reloads every 30 s, event clients that come and go and two that stay),
// sampled every 5 s, with the short soak's limits (shortLimits: a leak
// per request, session or event client fails them, a minute's noise does
// not). No durable event may be lost, usage must be exact and no request
// may fail unexpectedly. AGENTGATE_BENCH_BIN skips the build.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the real binary and runs for two minutes")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	o := soakDefaults(2 * time.Minute)
	o.sample, o.reload, o.capDur, o.limits = 5*time.Second, 30*time.Second, 3*time.Second, shortLimits
	o.pin, o.bin, o.root = false, os.Getenv("AGENTGATE_BENCH_BIN"), root
	o.logf = func(format string, a ...any) {
		if testing.Verbose() {
			t.Logf(format, a...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := runSoak(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", res.summary())
	for _, v := range res.verdicts() {
		if !v.met {
			t.Errorf("%s: %s, want %s", v.name, v.got, v.want)
		}
	}
	if res.sessions.turns == 0 || res.sessions.compactions == 0 || res.reloads == 0 || res.churned == 0 || res.tally.bad == 0 || res.tally.slowCut == 0 {
		t.Errorf("some traffic did not run: %d turns, %d compactions, %d reloads, %d short-lived event clients, %d fallbacks, %d disconnects",
			res.sessions.turns, res.sessions.compactions, res.reloads, res.churned, res.tally.bad, res.tally.slowCut)
	}
	if t.Failed() {
		t.Logf("report:\n%s", res.markdown(""))
	}
}

// TestSoakSlopes: the fit over the second half finds a leak's slope per
// hour and ignores the first half's warm-up; a flat series is flat.
func TestSoakSlopes(t *testing.T) {
	res := &soakResult{o: soakOptions{limits: shortLimits}, loadFor: 2 * time.Minute, sessions: &sessionStats{}, counts: map[string]*soakCounts{}}
	for i := range 25 {
		at := time.Duration(i) * 5 * time.Second
		s := soakSample{at: at, goroutines: 40, fds: 25, heapInuse: 40 << 20}
		if at < time.Minute {
			s.goroutines += int64(i * 10) // warm-up: ignored
		}
		if at >= time.Minute {
			// One goroutine and one descriptor left per 100 ms: 36,000 an hour.
			s.goroutines += int64(at/(100*time.Millisecond)) - 600
			s.fds += int(at/(100*time.Millisecond)) - 600
		}
		res.samples = append(res.samples, s)
	}
	g := res.fit(func(s soakSample) float64 { return float64(s.goroutines) })
	f := res.fit(func(s soakSample) float64 { return float64(s.fds) })
	h := res.fit(func(s soakSample) float64 { return float64(s.heapInuse) })
	if g.n != 13 || g.slope < 35999 || g.slope > 36001 || g.robust < 35999 || g.robust > 36001 || f.robust < 35999 || h.robust != 0 {
		t.Fatalf("fits: goroutines %+v, fds %+v, heap %+v", g, f, h)
	}
	// One sample caught in a transient (60 MB more heap) tilts the least
	// squares line, not the robust one.
	res.samples[20].heapInuse += 60 << 20
	if h := res.fit(func(s soakSample) float64 { return float64(s.heapInuse) / (1 << 20) }); h.robust != 0 || h.slope == 0 {
		t.Fatalf("a transient: %+v", h)
	}
	res.samples[20].heapInuse -= 60 << 20
	var failed []string
	for _, v := range res.verdicts() {
		if !v.met {
			failed = append(failed, v.name)
		}
	}
	if got := strings.Join(failed, "; "); !strings.Contains(got, "Goroutines slope") || !strings.Contains(got, "Open descriptors") || strings.Contains(got, "heap") {
		t.Fatalf("verdicts not met: %s", got)
	}

	// The same descriptors, all of them the store's tables (whose number
	// follows the store's size): reported, not judged.
	for i := range res.samples {
		res.samples[i].goroutines = 40
		res.samples[i].storeFiles = res.samples[i].fds - 25
	}
	for _, v := range res.verdicts() {
		if !v.met && strings.Contains(v.name, "slope") {
			t.Errorf("store tables alone fail a verdict: %s (%s)", v.name, v.got)
		}
	}
}

// TestSoakHeapJudged: with heap profiles, the judged heap is the live heap
// outside the store: the store's memtables and compactions raising the
// heap in use fail nothing, while a leak outside the store fails the
// heap's verdict; without profiles, the heap in use is judged.
func TestSoakHeapJudged(t *testing.T) {
	res := &soakResult{o: soakOptions{limits: hourLimits}, loadFor: time.Hour, sessions: &sessionStats{}, counts: map[string]*soakCounts{}}
	for i := range 61 {
		at := time.Duration(i) * time.Minute
		store := float64(40<<20) + float64(i%3)*(20<<20) + float64(i)*(1<<20) // memtables come and go; the block cache fills
		res.samples = append(res.samples, soakSample{at: at, goroutines: 40, fds: 25, profiled: true,
			heapOurs: 30 << 20, heapStore: store, heapInuse: int64(30<<20 + store)})
	}
	heapVerdict := func() soakVerdict {
		for _, v := range res.verdicts() {
			if strings.Contains(v.name, "heap") {
				return v
			}
		}
		t.Fatal("no heap verdict")
		return soakVerdict{}
	}
	if v := heapVerdict(); !v.met || !strings.Contains(v.name, "outside the store") {
		t.Fatalf("the store's heap judged: %+v", v)
	}
	for i := range res.samples {
		res.samples[i].heapOurs += float64(i) * (100 << 10) // 6 MB an hour
	}
	if v := heapVerdict(); v.met {
		t.Fatalf("a leak outside the store passes: %+v", v)
	}
	for i := range res.samples {
		res.samples[i].heapOurs -= float64(i) * (100 << 10)
		res.samples[i].profiled = i%2 == 0
	}
	if v := heapVerdict(); v.met || !strings.Contains(v.name, "in use") {
		t.Fatalf("without every profile, the heap in use (rising) is not what failed: %+v", v)
	}
}

// TestSoakCPUPerRequest: each sample's CPU per gateway request is the
// server's CPU since the sample before over the requests sent meanwhile;
// a cost that grows with the store shows as a slope (reported, never a
// failed verdict), and the chart draws the figure without the first
// sample, which has none.
func TestSoakCPUPerRequest(t *testing.T) {
	if got := cpuPerRequest(soakSample{cpu: time.Second, sent: 1000}, soakSample{cpu: 3 * time.Second, sent: 11000}); got != 200 {
		t.Fatalf("2 s of CPU over 10,000 requests: %v µs, want 200", got)
	}
	for _, c := range [][2]soakSample{
		{{cpu: time.Second, sent: 10}, {cpu: 2 * time.Second, sent: 10}}, // no request between
		{{cpu: 2 * time.Second, sent: 10}, {cpu: time.Second, sent: 20}}, // a restarted process
	} {
		if got := cpuPerRequest(c[0], c[1]); got != 0 {
			t.Fatalf("%+v: %v, want 0", c, got)
		}
	}
	res := &soakResult{o: soakOptions{limits: hourLimits, dur: time.Hour}, loadFor: time.Hour, sessions: &sessionStats{}, counts: map[string]*soakCounts{}, rig: &soakRig{}}
	var prev soakSample
	for i := range 61 {
		// 2,000 requests a second, each costing 150 µs plus 1 µs for every
		// 10 minutes the store has grown: 6 µs an hour.
		s := soakSample{at: time.Duration(i) * time.Minute, goroutines: 40, fds: 25, profiled: true, heapOurs: 30 << 20,
			sent: int64(i) * 120_000}
		s.cpu = prev.cpu + time.Duration(120_000*(150+float64(i)/10)*float64(time.Microsecond))
		if i > 0 {
			s.cpuPerReq = cpuPerRequest(prev, s)
		}
		res.samples = append(res.samples, s)
		prev = s
	}
	var m soakMeasure
	for _, x := range res.measures() {
		if strings.Contains(x.name, "CPU per gateway request") {
			m = x
		}
	}
	if m.of == nil || m.limit != 0 {
		t.Fatalf("CPU per request measure: %+v", m)
	}
	if f := res.fit(m.of); f.robust < 5.9 || f.robust > 6.1 {
		t.Fatalf("slope %+v, want 6 µs an hour", f)
	}
	for _, v := range res.verdicts() {
		if strings.Contains(v.name, "CPU") {
			t.Fatalf("CPU per request judged: %+v", v)
		}
	}
	svg := res.svg()
	if !strings.Contains(svg, "Server CPU per gateway request") || strings.Contains(svg, "NaN") {
		t.Fatalf("chart: panel missing or NaN drawn:\n%s", svg)
	}
	if md := res.markdown(""); !strings.Contains(md, "| 156 µs |") || !strings.Contains(md, "| – |") {
		t.Fatalf("samples table lacks the figure:\n%s", md)
	}
}

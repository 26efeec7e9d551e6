package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

func moneyN(n int) money.Pico { return money.Pico(n) }

// latStats are one repetition's latency percentiles.
type latStats struct {
	p50, p90, p99, max time.Duration
	n, errs            int
}

type streamStats struct {
	ttfe50, ttfe99, gap50, gap99, gapMax time.Duration
	complete, streams, lost, stalls      int
	providerLate                         int // stalls the provider caused (wrote the event late)
	errs                                 int
	firstErr                             string
}

type bodyStats struct {
	rps             float64
	ok, errs        int64
	firstErr        string
	rssBefore, peak int64 // KB
}

type results struct {
	tailResults
	o        options
	r        *rig
	laneIDs  []string
	names    map[string]string
	conds    []string
	thr      map[string]map[string][]float64 // condition → lane → rps per repetition
	thrErrs  map[string]map[string]int64
	thrFirst map[string]map[string]string
	thrCPU   map[string]map[string][]float64 // condition → lane → server CPU µs per request
	thrFront map[string]map[string][]float64 // condition → lane → load balancer CPU µs per request (lane (p2))
	thrP50   map[string]map[string][]time.Duration
	thrP99   map[string]map[string][]time.Duration // closed-loop latency of the answered requests
	trips    map[string]map[string][]float64       // condition → lane → database round trips per request (lanes (p), (p2))
	lat      map[string][]latStats
	latRaw   map[string][]time.Duration // every repetition's samples, for the chart
	str      map[string][]streamStats
	big      map[string]streamStats
	bigRSS   map[string]int64
	bodies   map[int]map[string]bodyStats

	floodValid, floodInvalid []float64
	floodWrong               int64
	floodHits                int

	rssIdle, rssAfter, rssIdlePeer, rssAfterPeer int64
	usageCount                                   int
	usageWant, usageSpent, usageReserved         money.Pico
	pgCount                                      int
	pgWant, pgSpent, pgReserved                  money.Pico
	race                                         *raceResult // the budget race across lane (p2)'s nodes; nil when not run
	elapsed                                      time.Duration
}

func newResults(r *rig, o options) *results {
	res := &results{o: o, r: r, names: map[string]string{}, thr: map[string]map[string][]float64{},
		thrErrs: map[string]map[string]int64{}, thrFirst: map[string]map[string]string{},
		thrCPU: map[string]map[string][]float64{}, thrFront: map[string]map[string][]float64{}, thrP50: map[string]map[string][]time.Duration{},
		thrP99: map[string]map[string][]time.Duration{}, trips: map[string]map[string][]float64{}, lat: map[string][]latStats{}, latRaw: map[string][]time.Duration{}, str: map[string][]streamStats{},
		big: map[string]streamStats{}, bigRSS: map[string]int64{}, bodies: map[int]map[string]bodyStats{}}
	for _, l := range r.lanes {
		res.laneIDs = append(res.laneIDs, l.id)
		res.names[l.id] = l.name
	}
	return res
}

func (res *results) addThroughput(cond, lane string, cr closedResult) {
	if res.thr[cond] == nil {
		res.conds = append(res.conds, cond)
		res.thr[cond], res.thrErrs[cond], res.thrFirst[cond] = map[string][]float64{}, map[string]int64{}, map[string]string{}
		res.thrCPU[cond], res.thrFront[cond] = map[string][]float64{}, map[string][]float64{}
		res.thrP50[cond], res.thrP99[cond] = map[string][]time.Duration{}, map[string][]time.Duration{}
	}
	if cr.cpuPerOp > 0 {
		res.thrCPU[cond][lane] = append(res.thrCPU[cond][lane], float64(cr.cpuPerOp)/float64(time.Microsecond))
	}
	if cr.frontCPUPerOp > 0 {
		res.thrFront[cond][lane] = append(res.thrFront[cond][lane], float64(cr.frontCPUPerOp)/float64(time.Microsecond))
	}
	if cr.ok > 0 {
		res.thrP50[cond][lane] = append(res.thrP50[cond][lane], cr.p50)
		res.thrP99[cond][lane] = append(res.thrP99[cond][lane], cr.p99)
	}
	res.thr[cond][lane] = append(res.thr[cond][lane], cr.rps)
	res.thrErrs[cond][lane] += cr.errs
	if cr.firstErr != "" && res.thrFirst[cond][lane] == "" {
		res.thrFirst[cond][lane] = cr.firstErr
	}
}

// addTrips notes one repetition's database round trips per request.
func (res *results) addTrips(cond, lane string, perRequest float64) {
	if res.trips[cond] == nil {
		res.trips[cond] = map[string][]float64{}
	}
	res.trips[cond][lane] = append(res.trips[cond][lane], perRequest)
}

func (res *results) addLatency(lane string, lat []time.Duration, errs int) {
	res.latRaw[lane] = append(res.latRaw[lane], lat...)
	res.lat[lane] = append(res.lat[lane], latStats{pct(lat, 50), pct(lat, 90), pct(lat, 99), pct(lat, 100), len(lat), errs})
}

func toStats(sr streamResult) streamStats {
	return streamStats{pct(sr.ttfe, 50), pct(sr.ttfe, 99), pct(sr.gaps, 50), pct(sr.gaps, 99), sr.maxGap,
		sr.complete, sr.streams, sr.lostEvents, sr.stalls, sr.providerLate, sr.errs, sr.firstErr}
}

func (res *results) addStreams(lane string, sr streamResult) {
	res.str[lane] = append(res.str[lane], toStats(sr))
}

func (res *results) addBigStreams(lane string, sr streamResult, peakKB int64) {
	res.big[lane] = toStats(sr)
	res.bigRSS[lane] = peakKB
}

func (res *results) addBody(size int, lane string, cr closedResult, before, peak int64) {
	if res.bodies[size] == nil {
		res.bodies[size] = map[string]bodyStats{}
	}
	res.bodies[size][lane] = bodyStats{cr.rps, cr.ok, cr.errs, cr.firstErr, before, peak}
}

func (res *results) addFlood(valid float64, invalid floodResult, hits int) {
	res.floodValid = append(res.floodValid, valid)
	res.floodInvalid = append(res.floodInvalid, invalid.rps)
	res.floodWrong += invalid.wrong
	res.floodHits += hits
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianLat(ls []latStats, f func(latStats) time.Duration) time.Duration {
	xs := make([]time.Duration, len(ls))
	for i, l := range ls {
		xs[i] = f(l)
	}
	return median(xs)
}

func medianStr(ss []streamStats, f func(streamStats) time.Duration) time.Duration {
	xs := make([]time.Duration, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return median(xs)
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func mb(kb int64) string { return fmt.Sprintf("%.1f MB", float64(kb)/1024) }

func ratio(x, y float64) string {
	if y == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x/y)
}

func signedUS(d time.Duration) string {
	return fmt.Sprintf("%+.0f µs", float64(d)/float64(time.Microsecond))
}

// target is one row of the report's Targets table.
type target struct {
	name, want, got string
	met             *bool // nil: not measured
}

func yes(b bool) *bool { return &b }

func (res *results) has(lane string) bool { return slices.Contains(res.laneIDs, lane) }

// cond32 is the condition of the throughput targets (1 KB, 0 ms provider,
// c=32); "" when not measured.
func (res *results) cond32() string {
	for _, c := range res.conds {
		if strings.HasSuffix(c, " 0 ms provider, c=32") {
			return c
		}
	}
	return ""
}

func (res *results) targets() []target {
	var ts []target
	c32 := res.cond32()
	ts = append(ts, res.tailTargets()...)
	if c32 != "" && res.has("i") {
		c, i := median(res.thr[c32]["c"]), median(res.thr[c32]["i"])
		ts = append(ts, target{"Inference API 1 KB c=32", "(i) ≥ 0.95 × (c)", fmt.Sprintf("%.0f vs %.0f req/s = %s", i, c, ratio(i, c)), yes(i >= 0.95*c)})
	}
	if len(res.str["c"]) > 0 {
		a := medianStr(res.str["a"], func(s streamStats) time.Duration { return s.ttfe99 })
		c := medianStr(res.str["c"], func(s streamStats) time.Duration { return s.ttfe99 })
		ts = append(ts, target{"Streaming TTFE p99", "(c) − (a) ≤ 1 ms", signedUS(c - a), yes(c-a <= time.Millisecond)})
		ga := medianStr(res.str["a"], func(s streamStats) time.Duration { return s.gap99 })
		gc := medianStr(res.str["c"], func(s streamStats) time.Duration { return s.gap99 })
		ts = append(ts, target{"Streaming inter-event p99", "(c) − (a) ≤ 50 µs", signedUS(gc - ga), yes(gc-ga <= 50*time.Microsecond)})
	}
	if s, ok := res.big["c"]; ok {
		// The proxy's stalls: those the provider did not cause, beyond
		// what the harness alone shows when nothing is in between (lane a).
		own := s.stalls - s.providerLate
		base := 0
		if a, ok := res.big["a"]; ok {
			base = a.stalls - a.providerLate
		}
		ts = append(ts, target{fmt.Sprintf("%d concurrent streams", s.streams), "no lost event, no stall of the proxy's",
			fmt.Sprintf("%d/%d complete, %d lost events, %d stalls (%d the provider's own, %d in transit; lane (a) %d in transit), max gap %s",
				s.complete, s.streams, s.lost, s.stalls, s.providerLate, own, base, ms(s.gapMax)),
			yes(s.complete == s.streams && s.lost == 0 && own <= base)})
		ts = append(ts, target{"RSS, 1,000 streams", "≤ 250 MB", mb(res.bigRSS["c"]) + " (whole caddy process)", yes(res.bigRSS["c"] <= 250*1024)})
	}
	ts = append(ts, target{"Idle RSS", "≤ 60 MB", mb(res.rssIdle), yes(res.rssIdle <= 60*1024)})
	if b, ok := res.bodies[10<<20]["c"]; ok {
		added := b.peak - b.rssBefore
		ts = append(ts, target{"10 MB body", "adds ≤ 3× its size (30 MB)", fmt.Sprintf("RSS +%s (peak %s)", mb(added), mb(b.peak)),
			yes(added <= 30*1024 && b.errs == 0)})
	}
	if len(res.floodValid) > 0 {
		v, inv := median(res.floodValid), median(res.floodInvalid)
		ts = append(ts, target{"Invalid-key flood", "≥ 2× valid throughput, 0 reach the provider",
			fmt.Sprintf("%.0f vs %.0f req/s = %s; %d reached the provider; %d not 401", inv, v, ratio(inv, v), res.floodHits, res.floodWrong),
			yes(inv >= 2*v && res.floodHits == 0 && res.floodWrong == 0)})
	}
	if res.has("d") && c32 != "" {
		c, d := median(res.thr[c32]["c"]), median(res.thr[c32]["d"])
		ts = append(ts, target{"Peer throughput c=32", "(c) ≥ 3 × (d)", fmt.Sprintf("%.0f vs %.0f req/s = %s", c, d, ratio(c, d)), yes(c >= 3*d)})
		if len(res.lat["d"]) > 0 {
			pc, pd := medianLat(res.lat["c"], p99), medianLat(res.lat["d"], p99)
			ts = append(ts, target{"Peer p99", "(c) below (d)", us(pc) + " vs " + us(pd), yes(pc < pd)})
		}
	} else {
		ts = append(ts, target{"Peer (d)", "(c) ≥ 3 × (d) throughput, lower p99", res.r.portkeyMsg, nil})
	}
	if res.has("p") && c32 != "" {
		c, p := median(res.thr[c32]["c"]), median(res.thr[c32]["p"])
		lat := ""
		if len(res.lat["p"]) > 0 {
			lat = fmt.Sprintf("; p99 %s vs %s", us(medianLat(res.lat["p"], p99)), us(medianLat(res.lat["c"], p99)))
		}
		ts = append(ts, target{"PostgreSQL", "(p) vs (c): the cost of a shared store", fmt.Sprintf("%.0f vs %.0f req/s = %s%s", p, c, ratio(p, c), lat), nil})
		if v := res.trips[c32]["p"]; len(v) > 0 {
			trips := median(v)
			ts = append(ts, target{"Round trips (p)", "≤ 0.1 database round trips per request, c=32", fmt.Sprintf("%.1f per request", trips), yes(trips <= 0.1)})
		}
		ts = append(ts, target{"Usage exactness (p)", "spend on PostgreSQL = counts × price",
			fmt.Sprintf("%d answers × %s USD = %s USD; spend %s USD, reserved %s USD", res.pgCount, costPerAnswer, res.pgWant, res.pgSpent, res.pgReserved),
			yes(res.pgSpent == res.pgWant && res.pgReserved == 0)})
	} else if res.r.pgMsg != "" {
		ts = append(ts, target{"PostgreSQL", "(p) vs (c): the cost of a shared store", res.r.pgMsg, nil})
	}
	ts = append(ts, target{"Usage exactness", "ledger = provider's counts × price",
		fmt.Sprintf("%d answers × %s USD = %s USD; spend %s USD, reserved %s USD", res.usageCount, costPerAnswer, res.usageWant, res.usageSpent, res.usageReserved),
		yes(res.usageExact())})
	return ts
}

func p99(l latStats) time.Duration { return l.p99 }

func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "-C", root, "status", "--porcelain").Output(); len(st) > 0 {
		rev += " (with uncommitted changes)"
	}
	return rev
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// markdown renders the report.
func (res *results) markdown(svgName string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	reps := fmt.Sprintf("median of %d repetitions", res.o.reps)
	if res.o.reps == 1 {
		reps = "one repetition (quick run: not a median)"
	}
	mode := "full"
	if res.o.quick {
		mode = "quick (`go run ./bench -quick`)"
	}
	w("# agentgate benchmark, %s\n\n", time.Now().Format("2006-01-02 15:04 MST"))
	w("Run: %s; %s; total time %s. Produced by `go run ./bench` (see bench/main.go).\n\n", mode, reps, res.elapsed.Round(time.Second))
	w("## Machine\n\n| | |\n|---|---|\n")
	w("| CPUs (nproc) | %d |\n| CPU model | %s |\n| Go | %s |\n| Caddy | %s |\n| Commit | %s |\n", cpuCount(), cpuModel(), runtime.Version(), res.r.caddyVersion, gitDescribe(res.r.root))
	pin := "none (taskset missing or fewer than 2 CPUs)"
	if res.r.pin {
		pin = "servers (caddy, Node) on core 1, caddy with GOMAXPROCS=" + serverProcs() + "; load generator and fake provider on core 0"
	}
	w("| Pinning | %s |\n| Load average at the end | %s |\n\n", pin, loadAvg())
	w("Lanes, interleaved (a b c …, a b c …) against the same in-process fake provider (`internal/fakeprovider`):\n\n")
	for _, id := range res.laneIDs {
		w("- **(%s) %s**\n", id, res.names[id])
	}
	w("\nLane (i) is lane (c)'s process and connections reached through the Inference API (`/v1/chat/completions`, routed by a workspace model with one target): the cost of routing by model. ")
	w("Lane (c) runs with the workspace key checked on every request, a budget on the key's service account (so each request is reserved and settled in the ledger), the usage tee parsing every answer, and the gateway's Prometheus metrics. Lanes (b) and (c) are two processes of the same binary (so each lane's RSS is its own), pinned to the same core; no access logs. ")
	if res.has("p") {
		w("Lane (p) is the same `llm_gateway` site in a third process that stores in PostgreSQL (`storage postgres`), as every node of a fleet does: a throwaway cluster on loopback started by `internal/pgtest` (fsync off, on the load generator's core). On PostgreSQL nothing is cached, so each request reads its key, service account, workspace and connection from the database, and its reservation and settlement take the member's lock there: lane (p) measures that cost, in throughput and latency only, and counts its database round trips per request from its `agentgate_store_round_trips_total` metric. ")
	}
	if res.has("p2") {
		w("Lane (p2) is a fleet: two such nodes on one PostgreSQL database behind a third process balancing round robin (see its section below for its setup, pinning and capacity figures). ")
	} else if res.r.fleetMsg != "" {
		w("%s. ", res.r.fleetMsg)
	}
	if res.r.portkeyMsg != "" {
		w("%s.", res.r.portkeyMsg)
	}
	for _, m := range res.r.peerMsgs {
		w(" %s.", m)
	}
	for _, id := range res.laneIDs {
		if isPeer(id) {
			w(" Lane (%s) is another gateway given with -peer, pointed at the 0 ms provider (throughput at that provider, the wrk lane and the fixed rates only).", id)
		}
	}
	w("\n\nOn two cores, lane (a) has the load generator and the fake provider on one core while (b), (c), (d) get a second core for the proxy: throughput of (b)/(c) can exceed (a), and the ratios that matter are against (b).\n\n")

	w("## Targets\n\n| Figure | Target | Measured | Met |\n|---|---|---|---|\n")
	for _, t := range res.targets() {
		m := "not measured"
		if t.met != nil {
			m = map[bool]string{true: "yes", false: "**no**"}[*t.met]
		}
		w("| %s | %s | %s | %s |\n", t.name, t.want, t.got, m)
	}

	if len(res.conds) > 0 {
		w("\n## Throughput, non-streaming (req/s, closed loop, %s each, %s)\n\n", res.o.thrDur, reps)
		w("Server CPU per request is the proxy process's user + system time over the run divided by the answered requests (from /proc; less sensitive to a noisy machine than req/s).\n\n")
		w("p50 and p99 are the closed loop's latencies of the answered requests (wall clock).\n\n")
		w("| Condition | Lane | req/s | vs (a) | vs (b) | p50 | p99 | server CPU per request | errors |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range res.conds {
			a, bb := median(res.thr[c]["a"]), median(res.thr[c]["b"])
			for _, id := range res.laneIDs {
				v := median(res.thr[c][id])
				e := fmt.Sprint(res.thrErrs[c][id])
				if f := res.thrFirst[c][id]; f != "" {
					e += " (" + f + ")"
				}
				cpu := "–"
				if u := res.thrCPU[c][id]; len(u) > 0 {
					cpu = fmt.Sprintf("%.0f µs", median(u))
				}
				w("| %s | (%s) | %.0f | %s | %s | %s | %s | %s | %s |\n", c, id, v, ratio(v, a), ratio(v, bb),
					ms(median(res.thrP50[c][id])), ms(median(res.thrP99[c][id])), cpu, e)
			}
		}
	}
	b.WriteString(res.tailMarkdown())
	b.WriteString(res.fleetMarkdown())
	if len(res.lat) > 0 {
		w("\n## Latency, open loop at %d req/s (1 KB, 0 ms provider; %s of %s each, %s)\n\n", res.o.latRate, reps, res.o.latDur, reps)
		w("Measured from each request's scheduled start (no coordinated omission). At this rate, concurrency is about 1.\n\n")
		w("| Lane | p50 | p90 | p99 | max | p99 − (a) | p99 − (b) | samples | errors |\n|---|---|---|---|---|---|---|---|---|\n")
		pa, pb := medianLat(res.lat["a"], p99), medianLat(res.lat["b"], p99)
		for _, id := range res.laneIDs {
			ls := res.lat[id]
			n, e := 0, 0
			for _, l := range ls {
				n, e = n+l.n, e+l.errs
			}
			pp := medianLat(ls, p99)
			w("| (%s) | %s | %s | %s | %s | %s | %s | %d | %d |\n", id,
				us(medianLat(ls, func(l latStats) time.Duration { return l.p50 })),
				us(medianLat(ls, func(l latStats) time.Duration { return l.p90 })), us(pp),
				us(medianLat(ls, func(l latStats) time.Duration { return l.max })), signedUS(pp-pa), signedUS(pp-pb), n, e)
		}
		if svgName != "" {
			w("\n![latency percentiles per lane](%s)\n", svgName)
		}
	}
	if len(res.str) > 0 {
		w("\n## Streaming (%d concurrent streams, %d events each at a %v pace; %s)\n\n", res.o.streamConc, streamEvents, pace, reps)
		w("| Lane | TTFE p50 | TTFE p99 | TTFE p99 − (a) | gap p50 | gap p99 | gap p99 − (a) | max gap | complete |\n|---|---|---|---|---|---|---|---|---|\n")
		ta := medianStr(res.str["a"], func(s streamStats) time.Duration { return s.ttfe99 })
		ga := medianStr(res.str["a"], func(s streamStats) time.Duration { return s.gap99 })
		for _, id := range res.laneIDs {
			ss := res.str[id]
			if len(ss) == 0 {
				continue // lane (p) measures throughput and latency only
			}
			t99 := medianStr(ss, func(s streamStats) time.Duration { return s.ttfe99 })
			g99 := medianStr(ss, func(s streamStats) time.Duration { return s.gap99 })
			comp, tot := 0, 0
			for _, s := range ss {
				comp, tot = comp+s.complete, tot+s.streams
			}
			w("| (%s) | %s | %s | %s | %s | %s | %s | %s | %d/%d |\n", id,
				ms(medianStr(ss, func(s streamStats) time.Duration { return s.ttfe50 })), ms(t99), signedUS(t99-ta),
				ms(medianStr(ss, func(s streamStats) time.Duration { return s.gap50 })), ms(g99), signedUS(g99-ga),
				ms(medianStr(ss, func(s streamStats) time.Duration { return s.gapMax })), comp, tot)
		}
	}
	if len(res.big) > 0 {
		w("\n## %d concurrent streams (one run per lane)\n\n", res.o.bigStreams)
		w("A stall is a gap over 10× the pace (%v). The provider records when it wrote each event: a stall is *the provider's own* when it wrote that event late (its core was busy), else *in transit* — the proxy's, or the load generator reading late, which lane (a), with nothing in between, measures alone.\n\n", 10*pace)
		w("| Lane | complete | lost events | stalls (provider's own / in transit) | TTFE p99 | gap p99 | max gap | peak RSS of the server | errors |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, id := range res.laneIDs {
			s, ok := res.big[id]
			if !ok {
				continue
			}
			rss := "–"
			if res.bigRSS[id] > 0 {
				rss = mb(res.bigRSS[id])
			}
			e := fmt.Sprint(s.errs)
			if s.firstErr != "" {
				e += " (" + s.firstErr + ")"
			}
			w("| (%s) | %d/%d | %d | %d (%d / %d) | %s | %s | %s | %s | %s |\n", id, s.complete, s.streams, s.lost, s.stalls, s.providerLate, s.stalls-s.providerLate,
				ms(s.ttfe99), ms(s.gap99), ms(s.gapMax), rss, e)
		}
	}
	if len(res.bodies) > 0 {
		w("\n## Request body sizes (non-streaming, c=1, %s per lane, one run)\n\n", res.o.bodyDur)
		w("| Body | Lane | req/s | MB/s | vs (a) | vs (b) | server RSS before → peak | errors |\n|---|---|---|---|---|---|---|---|\n")
		for _, size := range res.o.bodySizes {
			bs := res.bodies[size]
			for _, id := range res.laneIDs {
				s, ok := bs[id]
				if !ok {
					continue
				}
				rss := "–"
				if s.peak > 0 {
					rss = mb(s.rssBefore) + " → " + mb(s.peak)
				}
				e := fmt.Sprint(s.errs)
				if s.firstErr != "" {
					e += " (" + s.firstErr + ")"
				}
				w("| %s | (%s) | %.1f | %.1f | %s | %s | %s | %s |\n", sizeName(size), id, s.rps, s.rps*float64(size)/(1<<20),
					ratio(s.rps, bs["a"].rps), ratio(s.rps, bs["b"].rps), rss, e)
			}
		}
	}
	if len(res.floodValid) > 0 {
		v, inv := median(res.floodValid), median(res.floodInvalid)
		w("\n## Invalid-key flood (lane (c), c=%d, %s each, %s)\n\n", res.o.floodConc, res.o.floodDur, reps)
		w("| Requests | req/s | ratio |\n|---|---|---|\n| valid key | %.0f | 1.00× |\n| invalid key (401) | %.0f | %s |\n\n", v, inv, ratio(inv, v))
		w("Requests with the invalid key that reached the provider: **%d**; answers other than 401: %d.\n", res.floodHits, res.floodWrong)
	}
	w("\n## Memory (VmRSS from /proc/<pid>/status)\n\n| Process | idle | 1,000 streams (peak) | after the run |\n|---|---|---|---|\n")
	w("| caddy (lanes b and c) | %s | (b) %s, (c) %s | %s |\n", mb(res.rssIdle), mb(res.bigRSS["b"]), mb(res.bigRSS["c"]), mb(res.rssAfter))
	if res.has("d") {
		w("| node (lane d) | %s | %s | %s |\n", mb(res.rssIdlePeer), mb(res.bigRSS["d"]), mb(res.rssAfterPeer))
	}
	w("\nAllocations per request of the gateway hot path: `go test ./modules/gateway -run '^$' -bench BenchmarkGatewayChat -benchmem` (guarded by TestGatewayAllocsCeiling).\n")
	w("\n## Usage exactness\n\nAfter the run, the fake provider had answered **%d** lane-(c) requests; at %s USD each (21 input tokens at $%d/M, 12 output at $%d/M) that is **%s USD**. The service account's spend read back from `GET /agentgate/workspaces/{wrk}/budgets` is **%s USD** with %s USD still reserved: %s.\n",
		res.usageCount, costPerAnswer, priceIn, priceOut, res.usageWant, res.usageSpent, res.usageReserved,
		map[bool]string{true: "exact", false: "**mismatch**"}[res.usageExact()])
	return b.String()
}

// svg is a bar chart of the latency percentiles per lane (log scale).
func (res *results) svg() string {
	type bar struct {
		label string
		vals  [4]time.Duration
	}
	var bars []bar
	for _, id := range res.laneIDs {
		ls := res.lat[id]
		if len(ls) == 0 {
			continue
		}
		bars = append(bars, bar{fmt.Sprintf("(%s) %s", id, res.names[id]), [4]time.Duration{
			medianLat(ls, func(l latStats) time.Duration { return l.p50 }),
			medianLat(ls, func(l latStats) time.Duration { return l.p90 }),
			medianLat(ls, p99),
			medianLat(ls, func(l latStats) time.Duration { return l.max })}})
	}
	const W, H, left, top, bottom = 860, 420, 70, 50, 70
	plotW, plotH := float64(W-left-20), float64(H-top-bottom)
	lo, hi := 10.0, 10.0 // µs, log scale
	for _, b := range bars {
		for _, v := range b.vals {
			hi = math.Max(hi, float64(v)/1e3)
		}
	}
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	y := func(v float64) float64 {
		v = math.Max(v, lo)
		return float64(top) + plotH*(1-(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo)))
	}
	colors := []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2"}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&s, `<text x="%d" y="22" font-size="15">Latency percentiles per lane, open loop %d req/s, 1 KB, 0 ms provider (µs, log scale)</text>`+"\n", left, res.o.latRate)
	for v := lo; v <= hi; v *= 10 {
		fmt.Fprintf(&s, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, W-20, y(v), y(v), left-6, y(v)+4, v)
	}
	names := []string{"p50", "p90", "p99", "max"}
	groupW := plotW / 4
	barW := (groupW - 20) / float64(max(len(bars), 1))
	for g := range 4 {
		gx := float64(left) + float64(g)*groupW + 10
		for i, b := range bars {
			v := float64(b.vals[g]) / 1e3
			x := gx + float64(i)*barW
			fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y(v), barW-2, float64(top)+plotH-y(v), colors[i%len(colors)])
			fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.0f</text>`+"\n", x+barW/2-1, y(v)-3, v)
		}
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" font-size="13">%s</text>`+"\n", gx+(groupW-20)/2, H-bottom+18, names[g])
	}
	for i, b := range bars {
		x := left + i*200
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, H-28, colors[i%len(colors)], x+16, H-18, b.label)
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// write puts the report and chart under o.out.
func (res *results) write(o options) (string, string, error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return "", "", err
	}
	svgName := o.stamp + "-latency.svg"
	md := filepath.Join(o.out, o.stamp+".md")
	svg := filepath.Join(o.out, svgName)
	if err := os.WriteFile(svg, []byte(res.svg()), 0o644); err != nil {
		return "", "", err
	}
	return md, svg, os.WriteFile(md, []byte(res.markdown(svgName)), 0o644)
}

// summary is the target table as plain text.
func (res *results) summary() string {
	var b strings.Builder
	for _, t := range res.targets() {
		m := "n/a"
		if t.met != nil {
			m = map[bool]string{true: "MET", false: "NOT MET"}[*t.met]
		}
		fmt.Fprintf(&b, "%-8s %-28s %-40s %s\n", m, t.name, t.want, t.got)
	}
	return b.String()
}

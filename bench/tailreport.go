package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// fixedRun is the open loop at one fixed rate: the fraction of lane (b)'s
// capacity, the rate, and each lane's repetitions.
type fixedRun struct {
	frac  float64
	rate  int
	lanes map[string][]fixedStats
}

type fixedStats struct {
	p50, p99, p999, max time.Duration
	n, errs             int
	achieved            float64
	firstErr            string
}

// tailResults are the wrk lane and the fixed-rate open loop.
type tailResults struct {
	wrk       map[string][]wrkResult // lane → repetitions
	wrkMsg    string                 // why the wrk lane did not run
	fixed     []*fixedRun
	fixedCap  float64 // lane (b)'s capacity the rates derive from
	fixedBase string  // where fixedCap was measured
	fixedMsg  string
}

func (res *results) addWrk(lane string, wr wrkResult) {
	if res.wrk == nil {
		res.wrk = map[string][]wrkResult{}
	}
	res.wrk[lane] = append(res.wrk[lane], wr)
}

func (res *results) addFixed(frac float64, rate int, lane string, or openResult) {
	var fr *fixedRun
	for _, f := range res.fixed {
		if f.frac == frac {
			fr = f
		}
	}
	if fr == nil {
		fr = &fixedRun{frac: frac, rate: rate, lanes: map[string][]fixedStats{}}
		res.fixed = append(res.fixed, fr)
	}
	fr.lanes[lane] = append(fr.lanes[lane], fixedStats{pct(or.lat, 50), pct(or.lat, 99), pct(or.lat, 99.9), pct(or.lat, 100),
		len(or.lat), or.errs, or.achieved, or.firstErr})
}

// wrkMedian is the median over a lane's wrk repetitions of f.
func (res *results) wrkMedian(lane string, f func(wrkResult) float64) float64 {
	var xs []float64
	for _, w := range res.wrk[lane] {
		xs = append(xs, f(w))
	}
	return median(xs)
}

func wrkP99(w wrkResult) float64 { return float64(w.p99) }

// fixedMedian is the median over a lane's repetitions at one rate of f.
func (fr *fixedRun) median(lane string, f func(fixedStats) float64) float64 {
	var xs []float64
	for _, s := range fr.lanes[lane] {
		xs = append(xs, f(s))
	}
	return median(xs)
}

func fixedP99(s fixedStats) float64 { return float64(s.p99) }

// fixedAt is the run at fraction frac of (b)'s capacity (nil: none).
func (res *results) fixedAt(frac float64) *fixedRun {
	for _, f := range res.fixed {
		if f.frac == frac {
			return f
		}
	}
	return nil
}

// tailLanes are the lanes of the wrk lane, in the run's order.
func (res *results) tailLanes() []string {
	return slices.DeleteFunc(slices.Clone(res.laneIDs), func(id string) bool { return !wrkLane(id) })
}

// fixedLanes are the lanes of the fixed rates, in the run's order.
func (res *results) fixedLanes() []string {
	return slices.DeleteFunc(slices.Clone(res.laneIDs), func(id string) bool { return !fixedLane(id) })
}

// fixedLane reports whether a lane runs at the fixed rates: the wrk
// lane's, and lane (a), the load generator and the fake provider with
// nothing between them, which shows whether the rig itself keeps up
// with a rate.
func fixedLane(id string) bool { return id == "a" || wrkLane(id) }

// rigShort is why a fixed rate's comparison does not hold, "" when it
// does: lane (a), the rig alone, answered less than 95% of the rate, so
// the load side, not the servers, set the pace.
func (fr *fixedRun) rigShort() string {
	if len(fr.lanes["a"]) == 0 {
		return ""
	}
	if a := fr.median("a", func(s fixedStats) float64 { return s.achieved }); a < 0.95*float64(fr.rate) {
		return fmt.Sprintf("the rig alone (lane (a)) answered %.0f of %d req/s: the load side, not the servers, set the pace", a, fr.rate)
	}
	return ""
}

func fms(v float64) string { return ms(time.Duration(v)) }

// tailMarkdown is the wrk lane's and the fixed rates' sections.
func (res *results) tailMarkdown() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	if len(res.wrk) > 0 || res.wrkMsg != "" {
		w("\n## wrk lane (1 KB, 0 ms provider, `wrk -t1 -c%d`, %s each, median of %d)\n\n", res.o.wrkConc, res.o.wrkDur, res.o.wrkReps)
		if res.wrkMsg != "" {
			w("%s.\n", res.wrkMsg)
		} else {
			w("wrk, an event loop in C, pinned to core 0 beside the fake provider; the servers on core 1 with GOMAXPROCS=%s. A closed loop like the bench's own, but its client costs far less per request, so it drives the servers harder: its req/s is closer to the servers' capacity and its p99 shows their queueing. Answers with a status above 399 and socket errors count as errors. Latencies are wrk's (from each request's send on its connection).\n\n", serverProcs())
			w("Per request, the server's CPU (user + system, from /proc/<pid>/stat), of it the system's, its read and write system calls (/proc/<pid>/io) and its threads' context switches (/proc/<pid>/task/*/status).\n\n")
			w("| Lane | req/s | vs (b) | p50 | p90 | p99 | p99 vs (b) | p99.9 | server CPU per request | of it system | syscalls | context switches | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			rb, pb := res.wrkMedian("b", func(x wrkResult) float64 { return x.rps }), res.wrkMedian("b", wrkP99)
			for _, id := range res.tailLanes() {
				ws := res.wrk[id]
				if len(ws) == 0 {
					continue
				}
				rps := res.wrkMedian(id, func(x wrkResult) float64 { return x.rps })
				p99v := res.wrkMedian(id, wrkP99)
				var errs int64
				first := ""
				for _, x := range ws {
					errs += x.errs
					if first == "" {
						first = x.firstErr
					}
				}
				e := fmt.Sprint(errs)
				if first != "" {
					e += " (" + first + ")"
				}
				w("| (%s) | %.0f | %s | %s | %s | %s | %s | %s | %.0f µs | %.0f µs | %.1f | %.1f | %s |\n", id, rps, ratio(rps, rb),
					fms(res.wrkMedian(id, func(x wrkResult) float64 { return float64(x.p50) })),
					fms(res.wrkMedian(id, func(x wrkResult) float64 { return float64(x.p90) })),
					fms(p99v), ratio(p99v, pb),
					fms(res.wrkMedian(id, func(x wrkResult) float64 { return float64(x.p999) })),
					res.wrkMedian(id, func(x wrkResult) float64 { return float64(x.cpuPerOp) / float64(time.Microsecond) }),
					res.wrkMedian(id, func(x wrkResult) float64 { return x.sysPerOp }),
					res.wrkMedian(id, func(x wrkResult) float64 { return x.syscallsPerOp }),
					res.wrkMedian(id, func(x wrkResult) float64 { return x.switchesPerOp }), e)
			}
		}
	}
	if len(res.fixed) > 0 || res.fixedMsg != "" {
		w("\n## Open loop at fixed rates (1 KB, 0 ms provider, %s each, median of %d)\n\n", res.o.fixedDur, res.o.reps)
		if res.fixedMsg != "" {
			w("%s.\n", res.fixedMsg)
		} else {
			w("The rates are fractions of lane (b)'s capacity as %s measured it in this run (%.0f req/s). Lane (a) is the load generator and the fake provider with nothing between them: when it cannot answer a rate, the rig, not the servers, is what that rate measures. Requests go out on up to %d keep-alive connections through a minimal HTTP/1.1 client (a few µs of the load side's core per request, where net/http's client takes tens). Each request starts at its scheduled time whatever the others do, and its latency is taken from that time (coordinated omission corrected): the tail users feel at a given load. Achieved is answered requests per second, from the first scheduled start to the last answer.\n\n", res.fixedBase, res.fixedCap, openConns)
			w("| Rate | Lane | achieved req/s | p50 | p99 | p99 vs (b) | p99.9 | max | errors |\n|---|---|---|---|---|---|---|---|---|\n")
			for _, fr := range res.fixed {
				pb := fr.median("b", fixedP99)
				for _, id := range res.fixedLanes() {
					ss := fr.lanes[id]
					if len(ss) == 0 {
						continue
					}
					errs, first := 0, ""
					for _, s := range ss {
						errs += s.errs
						if first == "" {
							first = s.firstErr
						}
					}
					e := fmt.Sprint(errs)
					if first != "" {
						e += " (" + first + ")"
					}
					p := fr.median(id, fixedP99)
					w("| %.0f%% = %d req/s | (%s) | %.0f | %s | %s | %s | %s | %s | %s |\n", 100*fr.frac, fr.rate, id,
						fr.median(id, func(s fixedStats) float64 { return s.achieved }),
						fms(fr.median(id, func(s fixedStats) float64 { return float64(s.p50) })), fms(p), ratio(p, pb),
						fms(fr.median(id, func(s fixedStats) float64 { return float64(s.p999) })),
						fms(fr.median(id, func(s fixedStats) float64 { return float64(s.max) })), e)
				}
			}
		}
	}
	return b.String()
}

// usageExact is the usage check: the ledger's spend is the provider's
// answers × the price, the answers to requests whose client left (those
// wrk cuts off when it stops) included, and nothing stays reserved.
func (res *results) usageExact() bool {
	return res.usageReserved == 0 && res.usageSpent == res.usageWant
}

// tailTargets are the throughput, CPU and tail targets, from this
// run.
func (res *results) tailTargets() []target {
	var ts []target
	for _, conc := range []int{32, 256} {
		cond := res.condAt(conc)
		if cond == "" {
			continue
		}
		b, c := median(res.thr[cond]["b"]), median(res.thr[cond]["c"])
		ts = append(ts, target{fmt.Sprintf("Throughput 1 KB c=%d", conc), "(c) ≥ 0.85 × (b)", fmt.Sprintf("%.0f vs %.0f req/s = %s", c, b, ratio(c, b)), yes(c >= 0.85*b)})
	}
	if c32 := res.cond32(); c32 != "" {
		if ub, uc := median(res.thrCPU[c32]["b"]), median(res.thrCPU[c32]["c"]); ub > 0 && uc > 0 {
			ts = append(ts, target{"Server CPU per request c=32", "(c) ≤ 1.25 × (b)", fmt.Sprintf("%.0f vs %.0f µs = %s", uc, ub, ratio(uc, ub)), yes(uc <= 1.25*ub)})
		}
		if pb, pc := median(res.thrP99[c32]["b"]), median(res.thrP99[c32]["c"]); pb > 0 && pc > 0 {
			n := len(res.thrP99[c32]["c"])
			ts = append(ts, target{"p99 c=32, bench closed loop", "(c) ≤ 1.5 × (b), median of ≥ 3",
				fmt.Sprintf("%s vs %s = %s (median of %d)", ms(pc), ms(pb), ratio(float64(pc), float64(pb)), n), yes(pc*2 <= pb*3 && n >= 3)})
		}
	}
	switch {
	case len(res.wrk["c"]) > 0 && len(res.wrk["b"]) > 0:
		pb, pc := res.wrkMedian("b", wrkP99), res.wrkMedian("c", wrkP99)
		n := len(res.wrk["c"])
		ts = append(ts, target{"p99 c=32, wrk lane", "(c) ≤ 1.5 × (b), median of ≥ 3",
			fmt.Sprintf("%s vs %s = %s (median of %d)", fms(pc), fms(pb), ratio(pc, pb), n), yes(pc <= 1.5*pb && n >= 3)})
	case res.wrkMsg != "":
		ts = append(ts, target{"p99 c=32, wrk lane", "(c) ≤ 1.5 × (b), median of ≥ 3", res.wrkMsg, nil})
	}
	if fr := res.fixedAt(0.8); fr != nil && len(fr.lanes["c"]) > 0 {
		pb, pc := fr.median("b", fixedP99), fr.median("c", fixedP99)
		got := fmt.Sprintf("%s vs %s = %s", fms(pc), fms(pb), ratio(pc, pb))
		met := yes(pc <= 1.5*pb)
		if why := fr.rigShort(); why != "" {
			got, met = got+"; "+why, nil
		}
		ts = append(ts, target{fmt.Sprintf("p99 at 80%% of (b)'s capacity (%d req/s)", fr.rate), "(c) ≤ 1.5 × (b), open loop", got, met})
	} else if res.fixedMsg != "" {
		ts = append(ts, target{"p99 at 80% of (b)'s capacity", "(c) ≤ 1.5 × (b), open loop", res.fixedMsg, nil})
	}
	if c32 := res.cond32(); c32 != "" && res.has("p") {
		c, p := median(res.thr[c32]["c"]), median(res.thr[c32]["p"])
		ts = append(ts, target{"PostgreSQL node c=32", "(p) ≥ 0.8 × (c)", fmt.Sprintf("%.0f vs %.0f req/s = %s", p, c, ratio(p, c)), yes(p >= 0.8*c)})
	}
	return ts
}

// condAt is the condition at concurrency conc against the 0 ms provider
// with 1 KB bodies; "" when not measured.
func (res *results) condAt(conc int) string {
	for _, c := range res.conds {
		if strings.HasSuffix(c, fmt.Sprintf(" 0 ms provider, c=%d", conc)) {
			return c
		}
	}
	return ""
}

// tailSummary is the wrk lane's and the fixed rates' medians as plain
// text (for -only).
func (res *results) tailSummary() string {
	var b strings.Builder
	for _, id := range res.tailLanes() {
		if len(res.wrk[id]) == 0 {
			continue
		}
		var errs int64
		for _, x := range res.wrk[id] {
			errs += x.errs
		}
		fmt.Fprintf(&b, "wrk  (%s) %6.0f req/s  p50 %s  p99 %s  p99.9 %s  cpu %.0f µs (sys %.0f)  syscalls %.1f  switches %.1f  errors %d\n", id,
			res.wrkMedian(id, func(x wrkResult) float64 { return x.rps }),
			fms(res.wrkMedian(id, func(x wrkResult) float64 { return float64(x.p50) })),
			fms(res.wrkMedian(id, wrkP99)),
			fms(res.wrkMedian(id, func(x wrkResult) float64 { return float64(x.p999) })),
			res.wrkMedian(id, func(x wrkResult) float64 { return float64(x.cpuPerOp) / float64(time.Microsecond) }),
			res.wrkMedian(id, func(x wrkResult) float64 { return x.sysPerOp }),
			res.wrkMedian(id, func(x wrkResult) float64 { return x.syscallsPerOp }),
			res.wrkMedian(id, func(x wrkResult) float64 { return x.switchesPerOp }), errs)
	}
	for _, fr := range res.fixed {
		for _, id := range res.tailLanes() {
			if len(fr.lanes[id]) == 0 {
				continue
			}
			errs, first := 0, ""
			for _, s := range fr.lanes[id] {
				errs += s.errs
				if first == "" {
					first = s.firstErr
				}
			}
			fmt.Fprintf(&b, "open %3.0f%% %5d req/s (%s) achieved %6.0f  p50 %s  p99 %s  p99.9 %s  errors %d %s\n", 100*fr.frac, fr.rate, id,
				fr.median(id, func(s fixedStats) float64 { return s.achieved }),
				fms(fr.median(id, func(s fixedStats) float64 { return float64(s.p50) })),
				fms(fr.median(id, fixedP99)),
				fms(fr.median(id, func(s fixedStats) float64 { return float64(s.p999) })), errs, first)
		}
	}
	return b.String()
}

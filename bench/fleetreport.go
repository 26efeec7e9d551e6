package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

// Bases of the fleet's capacity figures: a ratio is measured in wall-clock
// throughput or latency, or derived from the server CPU per request.
const (
	basisWall = "wall clock"
	basisCPU  = "derived from CPU"
)

// capacityTarget is one row of the fleet's Targets table.
type capacityTarget struct {
	name     string
	basis    string // basisWall or basisCPU
	measured string // the figures the ratio comes from
	ratio    string
	want     string
	met      *bool // nil: not a target (shown for context), or not measured
}

// capacityTargets are the capacity figures of a PostgreSQL fleet,
// at 1 KB, 0 ms provider, c=32: a PostgreSQL node's server CPU per request
// against the Badger node's, the two-node capacity that implies, one
// PostgreSQL node's throughput against the Badger node's, the Badger node's
// against plain reverse_proxy's, and the gateway's p99 against plain
// reverse_proxy's.
func (res *results) capacityTargets() []capacityTarget {
	c32 := res.cond32()
	if c32 == "" || !res.has("p2") && !res.has("p") {
		return nil
	}
	var ts []capacityTarget
	cpu := func(lane string) float64 { return median(res.thrCPU[c32][lane]) }
	thr := func(lane string) float64 { return median(res.thr[c32][lane]) }
	p99 := func(lane string) time.Duration { return median(res.thrP99[c32][lane]) }
	notMeasured := func(name, want, why string) capacityTarget {
		return capacityTarget{name: name, basis: "–", measured: why, ratio: "–", want: want}
	}

	// Per-node CPU: lane (p2)'s CPU summed over both nodes divided by its
	// requests is what one node spends on a request it serves.
	const cpuName, capName = "Server CPU per request, one PostgreSQL node vs the Badger node (c)", "Two-node capacity vs one Badger node, ≈ 2 / the ratio above"
	if res.has("p2") && cpu("p2") > 0 && cpu("c") > 0 {
		x := cpu("p2") / cpu("c")
		ts = append(ts, capacityTarget{cpuName, basisCPU,
			fmt.Sprintf("(p2) %.0f µs (both nodes' CPU / requests) vs (c) %.0f µs", cpu("p2"), cpu("c")),
			fmt.Sprintf("%.2f×", x), "≤ 1.8×", yes(x <= 1.8)})
		ts = append(ts, capacityTarget{capName, basisCPU,
			fmt.Sprintf("2 / %.2f; each node on a core of its own, the database keeping up, the balancer not counted", x),
			fmt.Sprintf("%.2f×", 2/x), "≥ 1.1×", yes(2/x >= 1.1)})
	} else {
		why := "lane (p2) did not run"
		if res.has("p2") {
			why = "no CPU figure (no /proc?)"
		}
		ts = append(ts, notMeasured(cpuName, "≤ 1.8×", why), notMeasured(capName, "≥ 1.1×", why))
	}
	if res.has("p") && cpu("p") > 0 && cpu("c") > 0 {
		ts = append(ts, capacityTarget{"Server CPU per request, lane (p) single node vs (c)", basisCPU,
			fmt.Sprintf("(p) %.0f µs vs (c) %.0f µs", cpu("p"), cpu("c")), ratio(cpu("p"), cpu("c")), "context", nil})
	}
	if res.has("p") {
		p, c := thr("p"), thr("c")
		ts = append(ts, capacityTarget{"Throughput, one PostgreSQL node (p) vs (c)", basisWall,
			fmt.Sprintf("%.0f vs %.0f req/s", p, c), ratio(p, c), "≥ 0.6×", yes(c > 0 && p >= 0.6*c)})
	} else {
		ts = append(ts, notMeasured("Throughput, one PostgreSQL node (p) vs (c)", "≥ 0.6×", "lane (p) did not run"))
	}
	if res.has("p2") {
		p2, c := thr("p2"), thr("c")
		ts = append(ts, capacityTarget{"Throughput, the fleet (p2) through its balancer vs (c)", basisWall,
			fmt.Sprintf("%.0f vs %.0f req/s; both nodes and the balancer share the servers' core", p2, c), ratio(p2, c), "context", nil})
	}
	b, c := thr("b"), thr("c")
	ts = append(ts, capacityTarget{"Throughput, Badger node (c) vs plain reverse_proxy (b)", basisWall,
		fmt.Sprintf("%.0f vs %.0f req/s", c, b), ratio(c, b), "≥ 0.8×", yes(b > 0 && c >= 0.8*b)})
	for _, id := range []string{"c", "p2"} {
		if !res.has(id) {
			continue
		}
		name := "p99 at c=32 (closed loop), the gateway (c) vs (b)"
		if id == "p2" {
			name = "p99 at c=32 (closed loop), the fleet (p2) vs (b)"
		}
		g, pb := p99(id), p99("b")
		t := capacityTarget{name, basisWall, ms(g) + " vs " + ms(pb), ratio(float64(g), float64(pb)), "≤ 1.5×", nil}
		if g > 0 && pb > 0 {
			t.met = yes(float64(g) <= 1.5*float64(pb))
		}
		ts = append(ts, t)
	}
	return ts
}

// raceLine is the budget race's report, one paragraph.
func (rr *raceResult) line() string {
	if rr == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Budget race across the fleet's nodes: a budget with room for exactly **%d** requests (limit %s USD = spent %s + %d × %s + half of one; each request reserves what it costs), %d requests fired at once, alternating node 1 and node 2 directly: ",
		rr.admit, rr.limit, rr.spentBefore, rr.admit, raceCost, rr.total)
	if rr.err != "" {
		fmt.Fprintf(&b, "**did not run to the end**: %s.", rr.err)
		return b.String()
	}
	fmt.Fprintf(&b, "**%d admitted** (node 1: %d, node 2: %d) vs %d, %d refused (402 BudgetExceeded), %d other answers",
		rr.admitted(), rr.ok[0], rr.ok[1], rr.admit, rr.refused, rr.other)
	if rr.firstOther != "" {
		fmt.Fprintf(&b, " (%s)", rr.firstOther)
	}
	fmt.Fprintf(&b, "; the provider answered %d. Once settled: spent %s USD (+%s = %d × %s: %s), %s USD still reserved; node 2 reads spent %s, reserved %s. ",
		rr.answered, rr.spentAfter, rr.spentAfter-rr.spentBefore, rr.admitted(), raceCost,
		eq(rr.spentAfter-rr.spentBefore == money.Pico(rr.admitted())*raceCost), rr.reservedAfter, rr.node2Spent, rr.node2Reserved)
	if rr.usageErr != "" {
		fmt.Fprintf(&b, "Usage records not read: %s. ", rr.usageErr)
	} else {
		fmt.Fprintf(&b, "Usage records of the member: %d, summing to %s USD vs spent %s USD (%s); the race's own: %s USD (%d answered) vs +%s (%s). ",
			rr.usageRecords, rr.usageSum, rr.spentAfter, eq(rr.usageSum == rr.spentAfter),
			rr.raceUsage, rr.raceUsageOK, rr.spentAfter-rr.spentBefore, eq(rr.raceUsage == rr.spentAfter-rr.spentBefore))
	}
	fmt.Fprintf(&b, "Before the race, lane (p2)'s spend was %s USD for %d answers × %s USD (%s). Verdict: %s.",
		rr.spentBefore, rr.throughputCount, costPerAnswer, eq(rr.throughputExact()),
		map[bool]string{true: "exact", false: "**not exact**"}[rr.exact() && rr.throughputExact()])
	return b.String()
}

func eq(ok bool) string {
	if ok {
		return "equal"
	}
	return "**differ**"
}

// fleetMarkdown is the report's section on lane (p2): its throughput
// table beside lane (p)'s, the capacity Targets table and the budget race.
func (res *results) fleetMarkdown() string {
	if !res.has("p2") && !res.has("p") && (res.r == nil || res.r.fleetMsg == "") {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("\n## PostgreSQL fleet, lane (p2)\n\n")
	if !res.has("p2") {
		if res.r != nil && res.r.fleetMsg != "" {
			w("%s.\n", res.r.fleetMsg)
		}
		res.capacityMarkdown(w)
		return b.String()
	}
	pin := "unpinned"
	if res.r != nil && res.r.pin {
		pin = "all three on core 1, where the other server lanes run (GOMAXPROCS=" + serverProcs() + " each), so the two nodes and the balancer share one core; PostgreSQL runs beside the load generator on core 0"
	}
	w("Two `llm_gateway` nodes on one PostgreSQL database (lane (p)'s cluster, a database of their own) with one master key, as `examples/multi-node` runs them, each with its own admin listener and site, bootstrapped once through node 1's admin API; a third process of the same binary balances between them (`reverse_proxy` with `lb_policy round_robin`), and the load goes to it. Pinning: %s. ", pin)
	w("req/s and latency are wall clock (closed loop); the node CPU per request is both nodes' user + system time over the run (from /proc) divided by the answered requests, that is what one node spends per request it serves; the balancer's is apart; PostgreSQL's own CPU is counted in neither. Round trips are the sum of both nodes' `agentgate_store_round_trips_total` over the run divided by the answered requests.\n\n")
	w("| Condition | Lane | req/s | vs (c) | p50 | p99 | node CPU per request | balancer CPU per request | database round trips per request | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range res.conds {
		for _, id := range []string{"p", "p2"} {
			if !res.has(id) {
				continue
			}
			v := median(res.thr[c][id])
			e := fmt.Sprint(res.thrErrs[c][id])
			if f := res.thrFirst[c][id]; f != "" {
				e += " (" + f + ")"
			}
			w("| %s | (%s) | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", c, id, v, ratio(v, median(res.thr[c]["c"])),
				ms(median(res.thrP50[c][id])), ms(median(res.thrP99[c][id])),
				perReq(res.thrCPU[c][id], "%.0f µs"), perReq(res.thrFront[c][id], "%.0f µs"), perReq(res.trips[c][id], "%.2f"), e)
		}
	}
	res.capacityMarkdown(w)
	if res.race != nil {
		w("\n### Budget exactness across nodes\n\n%s\n", res.race.line())
	}
	return b.String()
}

// capacityMarkdown writes the fleet's capacity Targets table.
func (res *results) capacityMarkdown(w func(string, ...any)) {
	if ts := res.capacityTargets(); len(ts) > 0 {
		w("\n### Targets: fleet capacity (1 KB, 0 ms provider, c=32, same run)\n\n")
		w("Wall-clock ratios are measured; the capacity of two nodes is derived from CPU per request (what two nodes on two cores would serve if the database kept up), since here both nodes and the balancer share one core.\n\n")
		w("| Figure | Basis | Measured | Ratio | Target | Met |\n|---|---|---|---|---|---|\n")
		for _, t := range ts {
			w("| %s | %s | %s | %s | %s | %s |\n", t.name, t.basis, t.measured, t.ratio, t.want, metCell(t))
		}
	}
}

func metCell(t capacityTarget) string {
	switch {
	case t.met != nil:
		return map[bool]string{true: "met", false: "**not met**"}[*t.met]
	case t.want == "context":
		return "–"
	default:
		return "not measured"
	}
}

// fleetSummary is the fleet's figures as plain text ("" without lane (p2)
// or the capacity figures).
func (res *results) fleetSummary() string {
	var b strings.Builder
	if res.has("p2") {
		for _, c := range res.conds {
			fmt.Fprintf(&b, "(p2) %-32s %6.0f req/s  p50 %s  p99 %s  nodes %s  balancer %s  round trips %s\n", c, median(res.thr[c]["p2"]),
				ms(median(res.thrP50[c]["p2"])), ms(median(res.thrP99[c]["p2"])),
				perReq(res.thrCPU[c]["p2"], "%.0fµs"), perReq(res.thrFront[c]["p2"], "%.0fµs"), perReq(res.trips[c]["p2"], "%.2f"))
		}
	}
	for _, t := range res.capacityTargets() {
		m := map[bool]string{true: "MET", false: "NOT MET"}
		met := "n/a"
		if t.met != nil {
			met = m[*t.met]
		}
		fmt.Fprintf(&b, "%-8s %-70s %-7s %-8s (%s) %s\n", met, t.name, t.ratio, t.want, t.basis, t.measured)
	}
	if res.race != nil {
		b.WriteString(strings.ReplaceAll(res.race.line(), "**", "") + "\n")
	}
	return b.String()
}

func perReq(xs []float64, format string) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf(format, median(xs))
}

package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// linFit is a line through the second half's samples, x in hours.
// robust is the slope the soak judges: Theil–Sen's, the median of the
// slopes between every two samples, which a few samples caught in a
// transient do not tilt (the store holding a second memtable while it
// flushes one adds some 60 MB of heap to the sample that catches it) while
// a leak, growing between every two samples, sets it. slope and resid are
// the least-squares line's slope and its residuals' standard deviation,
// reported beside it.
type linFit struct {
	robust, intercept float64 // the robust line: y = intercept + robust·x
	slope, resid      float64
	n                 int
}

// fitLine fits y = a + b·x (x in hours) by least squares.
func fitLine(xs, ys []float64) linFit {
	n := float64(len(xs))
	if len(xs) < 2 {
		return linFit{n: len(xs)}
	}
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return linFit{n: len(xs)}
	}
	b := sxy / sxx
	a := my - b*mx
	var ss float64
	for i := range xs {
		d := ys[i] - (a + b*xs[i])
		ss += d * d
	}
	var pair []float64
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if xs[j] != xs[i] {
				pair = append(pair, (ys[j]-ys[i])/(xs[j]-xs[i]))
			}
		}
	}
	rb := medianOf(pair)
	off := make([]float64, len(xs))
	for i := range xs {
		off[i] = ys[i] - rb*xs[i]
	}
	return linFit{robust: rb, intercept: medianOf(off), slope: b, resid: math.Sqrt(ss / n), n: len(xs)}
}

// medianOf is the median of vs (which it sorts); 0 when empty.
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	sort.Float64s(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

// secondHalf are the samples taken in the run's second half (after the
// warm-up).
func (res *soakResult) secondHalf() []soakSample {
	var out []soakSample
	for _, s := range res.samples {
		if s.at >= res.loadFor/2 {
			out = append(out, s)
		}
	}
	return out
}

// profiled reports whether every sample of the second half has the heap
// profile's split of the heap.
func (res *soakResult) profiled() bool {
	half := res.secondHalf()
	for _, s := range half {
		if !s.profiled {
			return false
		}
	}
	return len(half) > 0
}

// fit is the slope per hour of one measure over the second half.
func (res *soakResult) fit(of func(soakSample) float64) linFit {
	var xs, ys []float64
	for _, s := range res.secondHalf() {
		xs = append(xs, s.at.Hours())
		ys = append(ys, of(s))
	}
	return fitLine(xs, ys)
}

// soakMeasure is one sampled figure: how to read it, its unit, and its
// limit per hour (0: reported, not judged).
type soakMeasure struct {
	name, unit string
	of         func(soakSample) float64
	limit      float64
}

func (res *soakResult) measures() []soakMeasure {
	l := res.o.limits
	// The heap judged is the live heap outside the store, from the heap
	// profile read with each sample: the store's memtables, block cache and
	// compactions come and go in steps of tens of MB, bounded by its
	// options, and would swamp a slope of 1 MB an hour; they are reported
	// beside it. Without profiles, the whole heap in use is judged.
	ours, inuse := l.heapMB, 0.0
	if !res.profiled() {
		ours, inuse = 0, l.heapMB
	}
	return []soakMeasure{
		{"Go heap live outside the store (heap profile after GC)", "MB", func(s soakSample) float64 { return s.heapOurs / (1 << 20) }, ours},
		{"Go heap in use (after GC)", "MB", func(s soakSample) float64 { return float64(s.heapInuse) / (1 << 20) }, inuse},
		{"Go heap live in the store (memtables, block cache, compactions; heap profile after GC)", "MB", func(s soakSample) float64 { return s.heapStore / (1 << 20) }, 0},
		{"Goroutines", "", func(s soakSample) float64 { return float64(s.goroutines) }, l.goroutines},
		{"Open descriptors, the store's tables and value logs apart", "", func(s soakSample) float64 { return float64(s.otherFDs()) }, l.fds},
		{"RSS, anonymous (the process's own memory)", "MB", func(s soakSample) float64 { return float64(s.rssAnonKB) / 1024 }, 0},
		{"RSS, all (with the store's tables, which Badger maps: they follow the store's size)", "MB", func(s soakSample) float64 { return float64(s.rssKB) / 1024 }, 0},
		{"Go heap live (after GC)", "MB", func(s soakSample) float64 { return float64(s.heapLive) / (1 << 20) }, 0},
		{"Open descriptors, all", "", func(s soakSample) float64 { return float64(s.fds) }, 0},
		{"Open files that are files (not sockets or pipes)", "", func(s soakSample) float64 { return float64(s.files) }, 0},
		{"The store's open tables and value logs (grow with the store, by design)", "", func(s soakSample) float64 { return float64(s.storeFiles) }, 0},
		{"Store on disk (grows by design)", "MB", func(s soakSample) float64 { return float64(s.storeBytes) / (1 << 20) }, 0},
		{"Server CPU per gateway request since the sample before (instance work and the store's background work included)", "µs", func(s soakSample) float64 { return s.cpuPerReq }, 0},
	}
}

// soakVerdict is one check of the soak.
type soakVerdict struct {
	name, want, got string
	met             bool
}

func (res *soakResult) verdicts() []soakVerdict {
	var out []soakVerdict
	for _, m := range res.measures() {
		if m.limit == 0 {
			continue
		}
		f := res.fit(m.of)
		out = append(out, soakVerdict{m.name + " slope, second half", fmt.Sprintf("≤ %g%s/h", m.limit, unitSp(m.unit)),
			fmt.Sprintf("%+.2f%s/h (least squares %+.2f, residual σ %.2f%s; %d samples)", f.robust, unitSp(m.unit), f.slope, f.resid, unitSp(m.unit), f.n), f.n >= 2 && f.robust <= m.limit})
	}
	var durable, gaps, dups, resyncs, reconnects int
	for _, c := range res.long {
		durable += c.durable
		gaps += c.gaps
		dups += c.dups
		resyncs += c.resyncs
		reconnects += c.reconnects
	}
	out = append(out, soakVerdict{"Durable events lost by the long-lived event clients", "0",
		fmt.Sprintf("%d lost (%d gaps), %d repeated, %d resyncs; %d durable events received by %d clients, %d reconnections",
			res.lost, gaps, dups, resyncs, durable, len(res.long), reconnects), res.lost == 0 && dups == 0 && resyncs == 0 && durable > 0})
	out = append(out, soakVerdict{"Usage exact, gateway key", "spend = answers × price, 0 reserved",
		fmt.Sprintf("%d answers (%s USD each, Anthropic's %s) = %s USD; ledger %s spent, %s reserved", res.tally.main, costPerAnswer, anthropicCost, res.want, res.spent, res.reserved),
		res.spent == res.want && res.reserved == 0 && res.tally.main > 0})
	out = append(out, soakVerdict{"Usage exact, the instance's account (turns, titles, compactions)", "spend = answers × price, 0 reserved",
		fmt.Sprintf("%d answers × %s = %s USD; ledger %s spent, %s reserved", res.tally.agent, costPerAnswer, res.instW, res.instSpent, res.instRes),
		res.instSpent == res.instW && res.instRes == 0 && res.tally.agent > 0})
	out = append(out, soakVerdict{"Disconnect lane: nothing left reserved", "0 reserved",
		fmt.Sprintf("%s spent, %s reserved (%d streams, %d left mid-stream at the provider)", res.cancelSpent, res.cancelRes, res.tally.slow, res.tally.slowCut),
		res.cancelRes == 0})
	out = append(out, soakVerdict{"Invalid keys reaching a provider", "0", fmt.Sprint(res.tally.invalid), res.tally.invalid == 0})
	var unexpected int64
	for _, k := range res.kinds {
		unexpected += res.counts[k].errs.Load()
	}
	unexpected += int64(res.sessions.errs + res.reloadErrs)
	out = append(out, soakVerdict{"Unexpected errors (gateway, sessions, reloads)", "0", fmt.Sprint(unexpected), unexpected == 0})
	return out
}

func unitSp(u string) string {
	if u == "" {
		return ""
	}
	return " " + u
}

// ok is true when every verdict is met.
func (res *soakResult) ok() bool {
	for _, v := range res.verdicts() {
		if !v.met {
			return false
		}
	}
	return true
}

func (res *soakResult) summary() string {
	var b strings.Builder
	for _, v := range res.verdicts() {
		m := map[bool]string{true: "MET", false: "NOT MET"}[v.met]
		fmt.Fprintf(&b, "%-8s %-62s %-36s %s\n", m, v.name, v.want, v.got)
	}
	return b.String()
}

func (res *soakResult) markdown(svgName string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	r := res.rig
	w("# agentgate soak, %s\n\n", res.started.Format("2006-01-02 15:04 MST"))
	w("`go run ./bench -soak %v`: one agentgate process (an `llm_gateway` site and an `agent_instance` site bound to its workspace, Badger store) "+
		"under steady mixed load for %v; total time %v. See docs/performance.md, \"Soak\".\n\n", res.o.dur, res.loadFor.Round(time.Second), res.elapsed.Round(time.Second))
	w("## Machine\n\n| | |\n|---|---|\n")
	w("| CPUs (nproc) | %d |\n| CPU model | %s |\n| Go | %s |\n| Caddy | %s |\n| Commit | %s |\n", cpuCount(), cpuModel(), runtime.Version(), r.caddyVersion, gitDescribe(res.o.root))
	pin := "none (taskset missing or fewer than 2 CPUs)"
	if r.pin {
		pin = "caddy on core 1 with GOMAXPROCS=" + serverProcs() + "; load generator and fake providers on core 0"
	}
	w("| Pinning | %s |\n| Load average at the end | %s |\n\n", pin, loadAvg())

	w("## Load\n\n")
	if res.capacity > 0 {
		w("Gateway capacity, the regular mix closed loop at c=16 for %v: **%.0f req/s**; the soak sends half: **%d req/s** open loop ", res.o.capDur, res.capacity, res.rate)
	} else {
		w("Gateway rate given with -soak-rate: **%d req/s** open loop ", res.rate)
	}
	achieved := float64(res.sent) / (res.loadFor - res.paused).Seconds()
	missed := int64(float64(res.rate)*res.loadFor.Seconds()) - res.rig.q.ticks.Load()
	w("(a ticker that drops missed ticks; at most 512 in flight). Achieved: **%.1f req/s** while the load ran (%d sent; %d ticks dropped because "+
		"the load generator's core was too busy to take them, %d skipped for want of room; the load paused %v in all for the %d samples, see Samples).\n\n",
		achieved, res.sent, max(0, missed), res.skipped, res.paused.Round(100*time.Millisecond), len(res.samples))
	w("| Gateway traffic | Sent | Answered as expected | Errors | First error | Cut by a reload (expected) |\n|---|---|---|---|---|---|\n")
	for _, k := range res.kinds {
		c := res.counts[k]
		w("| %s | %d | %d | %d | %s | %d%s |\n", k, c.sent.Load(), c.ok.Load(), c.errs.Load(), mdCell(c.firstErr), c.cut.Load(), errSuffix(c.firstCut))
	}
	w("\nCut by a reload: the connection closed under a request within %v of a config reload (a reload closes the old server's idle keep-alive "+
		"connections; a client that had just picked one for a POST sees EOF or a reset and does not retry it).\n", reloadGrace)
	w("\nExpected errors, counted apart: invalid keys answer 401 and never reach a provider (%d did); the disconnect lane's clients leave "+
		"after the first event (%d of its %d streams were cut at the provider; the rest had finished). The Inference API model `%s` has a first "+
		"target that always answers 503: the provider behind it answered %d times (each a fallback to the second target; `cooldown` 1–2 s "+
		"puts it last between tries).\n\n", res.tally.invalid, res.tally.slowCut, res.tally.slow, soakFallback, res.tally.bad)
	s := res.sessions
	var churn string
	if res.o.churnGap > 0 {
		churn = fmt.Sprintf("one short-lived event client every %v (reading 0–3 s, then dropping its connection): %d", res.o.churnGap, res.churned)
	}
	w("Instance: %d workers, each creating a session in one of %d project directories, prompting it (the scripted model reads, lists, globs "+
		"and greps in one step, edits the file the prompt names in the next, then answers; a title is asked for each session), waiting for "+
		"it, compacting every third session, and deleting its sessions beyond the newest %d. Sessions created **%d**, turns %d (edits on disk "+
		"%d), compactions %d, deleted %d, errors %d%s; %d requests sent again after a reload closed their idle connection under them. Bash is not called (it needs the sandbox). Event streams: %d long-lived clients, %s. "+
		"Config reloads (POST /load with a changed `cooldown`) every %v: **%d**, %d failed%s.\n\n",
		res.o.workers, len(r.projects), res.o.keep, s.created, s.turns, s.edited, s.compactions, s.deleted, s.errs, errSuffix(s.firstErr), res.instRetried,
		len(res.long), churn, res.o.reload, res.reloads, res.reloadErrs, errSuffix(res.reloadErr))

	w("## Verdicts\n\nLimits: %s.\n\n| Check | Target | Measured | Met |\n|---|---|---|---|\n", res.o.limits.why)
	for _, v := range res.verdicts() {
		w("| %s | %s | %s | %s |\n", v.name, v.want, mdCell(v.got), map[bool]string{true: "met", false: "**not met**"}[v.met])
	}
	w("\n## Slopes over the second half, per hour\n\nJudged: the robust slope (Theil–Sen: the median of the slopes between every two samples of the half), which a sample caught in a transient " +
		"(the store holding a second memtable while it flushes one) does not tilt; beside it the least-squares slope and its residuals.\n\n" +
		"| Measure | Slope per hour (robust) | Least squares | Residual σ | First sample of the half | Last |\n|---|---|---|---|---|---|\n")
	half := res.secondHalf()
	for _, m := range res.measures() {
		f := res.fit(m.of)
		first, last := 0.0, 0.0
		if len(half) > 0 {
			first, last = m.of(half[0]), m.of(half[len(half)-1])
		}
		w("| %s | %+.2f%s | %+.2f | %.2f | %.1f | %.1f |\n", m.name, f.robust, unitSp(m.unit), f.slope, f.resid, first, last)
	}
	if svgName != "" {
		w("\n![RSS, heap, goroutines and open files over the soak](%s)\n", svgName)
	}
	w("\n## Samples\n\nAt each sample the load pauses: no new gateway request, session or short-lived event client starts; the work in flight "+
		"finishes (the Drain column: how long it took); the idle connections on both sides of the server are closed; then readings 300 ms "+
		"apart (three or more, until two agree, at most six), each after a forced GC (the admin API's `/debug/pprof/heap?gc=1`), keep each figure's lowest. Heap and goroutines from Caddy's `/metrics`, "+
		"RSS and descriptors from /proc. The two long-lived event clients and the sessions kept stay throughout. "+
		"CPU per gateway request is the server's user + system time (from /proc) since the sample before over the gateway requests sent meanwhile, "+
		"the instance's work, the pause's readings and the store's background work included: at a steady rate it stays flat unless a request's cost grows with what the store holds. "+
		"After the readings, a heap profile (after a GC; the server runs with GODEBUG=memprofilerate=%d, one sampled allocation per %d KiB) splits the live heap: "+
		"allocations with a frame of the store (Badger and its cache) on their stack, and the rest.\n\n", soakProfileRate, soakProfileRate>>10)
	w("| Time | Drain | RSS MB | RSS anonymous MB | Heap in use MB | Heap live MB | Live outside the store MB | Live in the store MB | Goroutines | Open fds | Of which files | Of which the store's tables | Store MB | CPU per gateway request |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range res.samples {
		drain := x.quiet.Round(10 * time.Millisecond).String()
		if !x.drained {
			drain += " (not drained)"
		}
		perReq := "–"
		if x.cpuPerReq > 0 {
			perReq = fmt.Sprintf("%.0f µs", x.cpuPerReq)
		}
		w("| %v | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %d | %d | %d | %d | %.1f | %s |\n", x.at.Round(time.Second), drain, float64(x.rssKB)/1024, float64(x.rssAnonKB)/1024, float64(x.heapInuse)/(1<<20),
			float64(x.heapLive)/(1<<20), x.heapOurs/(1<<20), x.heapStore/(1<<20), x.goroutines, x.fds, x.files, x.storeFiles, float64(x.storeBytes)/(1<<20), perReq)
	}
	if res.heapDiff != "" {
		w("\n## What the heap gained over the second half\n\nHeap profiles (after a GC) at the half's first sample and at the last, written beside this report; "+
			"the heap profile samples allocations (one per %d KiB on average), so small figures are estimates.\n\n%s\n", soakProfileRate>>10, res.heapDiff)
	}
	if res.goroutineDump != "" {
		w("\n## Goroutines at the end (the slope failed)\n\n```\n%s\n```\n", tail(res.goroutineDump, 20000))
	}
	return b.String()
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (first: " + mdCell(e) + ")"
}

func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// svg charts RSS, heap, goroutines and open descriptors over the run,
// each on its own panel (its own scale), the second half shaded.
func (res *soakResult) svg() string {
	const W, H, left, top, panelH, gap = 860, 940, 70, 50, 120, 30
	plotW := float64(W - left - 20)
	type series struct {
		name  string
		color string
		of    func(soakSample) float64
	}
	panels := []series{
		{"RSS, anonymous (MB)", "#4e79a7", func(s soakSample) float64 { return float64(s.rssAnonKB) / 1024 }},
		{"Go heap in use after GC (MB)", "#f28e2b", func(s soakSample) float64 { return float64(s.heapInuse) / (1 << 20) }},
		{"Go heap live outside the store, from the heap profile (MB)", "#59a14f", func(s soakSample) float64 { return s.heapOurs / (1 << 20) }},
		{"Goroutines", "#e15759", func(s soakSample) float64 { return float64(s.goroutines) }},
		{"Open descriptors, the store's tables apart", "#76b7b2", func(s soakSample) float64 { return float64(s.otherFDs()) }},
		{"Server CPU per gateway request since the sample before (µs)", "#b07aa1", func(s soakSample) float64 {
			if s.cpuPerReq <= 0 {
				return math.NaN() // the first sample, or a run without the figure
			}
			return s.cpuPerReq
		}},
	}
	span := res.loadFor.Minutes()
	if span <= 0 {
		span = 1
	}
	x := func(at time.Duration) float64 { return float64(left) + plotW*at.Minutes()/span }
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&s, `<text x="%d" y="22" font-size="15">Soak %v: the server process over time (minutes); second half shaded (the fit)</text>`+"\n", left, res.o.dur)
	for i, p := range panels {
		y0 := float64(top + i*(panelH+gap))
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range res.samples {
			if v := p.of(x); !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		if math.IsInf(lo, 1) {
			lo, hi = 0, 1
		}
		lo = math.Max(0, lo-(hi-lo)*0.2-1)
		hi = hi + (hi-lo)*0.1 + 1
		y := func(v float64) float64 { return y0 + panelH*(1-(v-lo)/(hi-lo)) }
		fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#f4f4f4"/>`+"\n", x(res.loadFor/2), y0, x(res.loadFor)-x(res.loadFor/2), panelH)
		fmt.Fprintf(&s, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#ccc"/>`+"\n", left, y0, plotW, panelH)
		for _, v := range []float64{lo, (lo + hi) / 2, hi} {
			fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" font-size="10">%.0f</text>`+"\n", left-6, y(v)+4, v)
		}
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" fill="%s">%s</text>`+"\n", left+6, y0+14, p.color, p.name)
		var pts []string
		for _, smp := range res.samples {
			if v := p.of(smp); !math.IsNaN(v) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(smp.at), y(v)))
				fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>`+"\n", x(smp.at), y(v), p.color)
			}
		}
		fmt.Fprintf(&s, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", p.color, strings.Join(pts, " "))
		// The fitted line over the second half.
		if half := res.secondHalf(); len(half) >= 2 {
			f := res.fit(p.of)
			if math.IsNaN(f.robust) || math.IsNaN(f.intercept) {
				continue // a figure some samples of the half lack
			}
			at := func(d time.Duration) float64 { return f.intercept + f.robust*d.Hours() }
			a, b := half[0].at, half[len(half)-1].at
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", x(a), y(at(a)), x(b), y(at(b)))
		}
	}
	// Time axis under the last panel.
	yAxis := float64(top + len(panels)*(panelH+gap) - gap + 14)
	step := niceStep(span)
	for m := 0.0; m <= span+1e-9; m += step {
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%g</text>`+"\n", x(time.Duration(m*float64(time.Minute))), yAxis, m)
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// niceStep is a tick spacing giving 5–12 ticks over span.
func niceStep(span float64) float64 {
	steps := []float64{0.25, 0.5, 1, 2, 5, 10, 15, 30, 60}
	sort.Float64s(steps)
	for _, st := range steps {
		if span/st <= 12 {
			return st
		}
	}
	return 120
}

// write puts <stamp>-soak.md and <stamp>-soak.svg under o.out.
func (res *soakResult) write() (string, string, error) {
	o := res.o
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return "", "", err
	}
	svgName := o.stamp + "-soak.svg"
	md := filepath.Join(o.out, o.stamp+"-soak.md")
	svg := filepath.Join(o.out, svgName)
	if err := os.WriteFile(svg, []byte(res.svg()), 0o644); err != nil {
		return "", "", err
	}
	res.heapDiff = res.writeHeapProfiles()
	return md, svg, os.WriteFile(md, []byte(res.markdown(svgName)), 0o644)
}

// writeHeapProfiles writes the heap profiles of the second half's first
// and last samples beside the report and returns the top of their
// difference (in-use bytes, `go tool pprof -diff_base`), or why there is
// none.
func (res *soakResult) writeHeapProfiles() string {
	if res.heapHalf == nil || res.heapEnd == nil {
		return "no heap profiles (the admin API gave none)"
	}
	half := filepath.Join(res.o.out, res.o.stamp+"-soak-heap-half.pprof")
	end := filepath.Join(res.o.out, res.o.stamp+"-soak-heap-end.pprof")
	if err := os.WriteFile(half, res.heapHalf, 0o644); err != nil {
		return err.Error()
	}
	if err := os.WriteFile(end, res.heapEnd, 0o644); err != nil {
		return err.Error()
	}
	// First what the judged figure counts (the heap outside the store:
	// samples with no store frame), then the whole heap.
	var b strings.Builder
	for _, v := range []struct{ what, ignore string }{
		{"Outside the store (the judged figure)", "-ignore=" + storeFramePrefix[0]},
		{"The whole heap", ""},
	} {
		args := []string{"tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount=25"}
		if v.ignore != "" {
			args = append(args, v.ignore)
		}
		args = append(args, "-diff_base", half, end)
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("go tool pprof failed: %v: %s", err, tail(string(out), 500))
		}
		fmt.Fprintf(&b, "%s, `go %s`:\n\n```\n%s```\n\n", v.what, strings.Join(append(args[:len(args)-3], "-diff_base", filepath.Base(half), filepath.Base(end)), " "), out)
	}
	return strings.TrimSuffix(b.String(), "\n\n")
}

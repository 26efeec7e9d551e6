// Command bench is agentgate's side-by-side benchmark harness. It
// builds the caddy binary, starts the fake provider (no delay, and 20 ms
// delay with 64-delta streams at a 20 ms pace), starts the binary with a
// plain reverse_proxy site and an llm_gateway site, bootstraps a workspace,
// a keyed service account with a budget and two connections through the
// admin API, and measures, interleaved lane by lane:
//
//	(a) direct to the fake provider
//	(b) Caddy's plain reverse_proxy (same binary)
//	(c) agentgate's llm_gateway: auth, budget reservation, usage tee, metrics
//	(i) lane (c)'s process through the Inference API
//	(p) llm_gateway on PostgreSQL (when PostgreSQL is installed)
//	(p2) two llm_gateway nodes on one PostgreSQL database behind a third
//	     caddy balancing round robin (-fleet), followed at the end by a
//	     budget race of 200 requests across the two nodes
//	(d) Portkey's open-source gateway on Node (optional; skipped with a message)
//	(peer-<name>) another gateway's binary, given with -peer name=command
//
// Beside the bench's own closed loop, lanes (b), (c), (i) and the peers
// are measured by wrk (the wrk lane, wrk.go; skipped when wrk is not
// installed) and by an open loop at fixed fractions of lane (b)'s capacity
// (-fixed, tailreport.go).
//
// Run it from the repository root:
//
//	go run ./bench -quick   # about a minute, one repetition
//	go run ./bench          # the full run, three repetitions (a few minutes)
//	go run ./bench -sandbox # what the sandbox adds to a bash call, p50
//	go run ./bench -snapshot # what file snapshots add to an agent step
//	go run ./bench -soak 1h  # an hour of steady mixed load: leaks, lost events, usage (soak.go)
//
// It writes bench/results/<date>.md and bench/results/<date>-latency.svg.
// With taskset available and two or more CPUs, the servers (caddy, Node)
// run on core 1 and the load generator and the fake provider on core 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options sizes a run; a zero or empty field skips its figure.
type options struct {
	quick       bool
	reps        int
	conc        []int         // throughput concurrencies against the 0 ms provider
	slowConc    int           // throughput concurrency against the 20 ms provider
	thrDur      time.Duration // per lane, per concurrency, per repetition
	latRate     int           // open-loop requests per second
	latDur      time.Duration
	streamConc  int // concurrent streams for time-to-first-event and gaps
	bigStreams  int // the stall-free concurrent-streams figure
	bodySizes   []int
	bodyDur     time.Duration
	floodDur    time.Duration
	floodConc   int
	pin         bool
	bin         string // a prebuilt binary; "" builds ./cmd/caddy
	portkey     bool
	postgres    bool   // lane (p): llm_gateway on PostgreSQL
	fleet       bool   // lane (p2) and the budget race: two nodes on PostgreSQL behind a balancer (needs postgres)
	out         string // results directory; "" writes nothing
	profile     string // write a CPU profile of caddy during lane (c) at profileConc here
	profileConc int
	trace       string // write an execution trace of caddy during lane (c) at profileConc here
	traceWrk    string // write an execution trace of caddy during lane (c) on the wrk lane here
	profileWrk  string // write a CPU profile of caddy during lane (c) on the wrk lane here
	wrk         bool   // the wrk lane (when wrk is installed)
	wrkReps     int    // its repetitions (each lane once per repetition, interleaved)
	wrkConc     int    // its connections
	wrkDur      time.Duration
	fixed       []float64 // open-loop rates, as fractions of lane (b)'s closed-loop capacity at c=32
	fixedDur    time.Duration
	fixedBase   string     // "open": (b)'s capacity in the open loop itself; "bench": from the bench's closed loop; "wrk": from the wrk lane
	peers       []peerSpec // other gateways' binaries, run as lanes
	stamp       string     // file name stem
	progressOut *os.File
}

func quickOptions() options {
	return options{quick: true, reps: 1, conc: []int{1, 32, 256}, slowConc: 256, thrDur: time.Second,
		latRate: 200, latDur: 2 * time.Second, streamConc: 16, bigStreams: 1000,
		bodySizes: []int{1 << 10, 100 << 10, 1 << 20, 10 << 20}, bodyDur: time.Second,
		floodDur: time.Second, floodConc: 32, pin: true, portkey: true, postgres: true, fleet: true,
		wrk: true, wrkReps: 1, wrkConc: 32, wrkDur: 2 * time.Second, fixed: []float64{0.5, 0.8}, fixedDur: 2 * time.Second}
}

func fullOptions() options {
	return options{reps: 3, conc: []int{1, 32, 256}, slowConc: 256, thrDur: 2 * time.Second,
		latRate: 500, latDur: 4 * time.Second, streamConc: 32, bigStreams: 1000,
		bodySizes: []int{1 << 10, 100 << 10, 1 << 20, 10 << 20}, bodyDur: 2 * time.Second,
		floodDur: 2 * time.Second, floodConc: 32, pin: true, portkey: true, postgres: true, fleet: true,
		wrk: true, wrkReps: 3, wrkConc: 32, wrkDur: 4 * time.Second, fixed: []float64{0.5, 0.8}, fixedDur: 4 * time.Second}
}

func main() {
	quick := flag.Bool("quick", false, "a short run: one repetition, shorter phases")
	portkey := flag.Bool("portkey", true, "run lane (d), Portkey's gateway on Node, when Node is available")
	postgres := flag.Bool("postgres", true, "run lane (p), llm_gateway on PostgreSQL, when PostgreSQL is installed")
	fleet := flag.Bool("fleet", true, "run lane (p2), two llm_gateway nodes on one PostgreSQL database behind a load balancer, and the budget race across them (with -postgres)")
	pin := flag.Bool("pin", true, "pin the servers to core 1 and the load to core 0 with taskset")
	bin := flag.String("bin", "", "use this caddy binary instead of building ./cmd/caddy")
	out := flag.String("out", "", "results directory (default: bench/results in the module)")
	profile := flag.String("profile", "", "write a CPU profile of caddy, taken while lane (c) runs at -profile-conc, to this file")
	profileConc := flag.Int("profile-conc", 32, "the concurrency at which -profile and -trace are taken")
	traceFile := flag.String("trace", "", "write an execution trace of caddy, taken while lane (c) runs at -profile-conc (in the last repetition), to this file")
	profileWrk := flag.String("profile-wrk", "", "write a CPU profile of caddy, taken while the wrk lane runs lane (c) (in its last repetition), to this file, and one of lane (b)'s to the same name with -plain before the extension")
	traceWrk := flag.String("trace-wrk", "", "write an execution trace of caddy, taken while the wrk lane runs lane (c) (in its last repetition), to this file, and one of lane (b)'s to the same name with -plain before the extension")
	wrk := flag.Bool("wrk", true, "run the wrk lane (wrk -t1 against lanes (b), (c), (i) and the peers) when wrk is installed")
	wrkDur := flag.Duration("wrk-dur", 0, "the length of each wrk run, whole seconds (default 2s with -quick, else 4s)")
	wrkReps := flag.Int("wrk-reps", 0, "repetitions of the wrk lane (default 1 with -quick, else 3)")
	fixed := flag.String("fixed", "", "open-loop rates as fractions of lane (b)'s closed-loop capacity at c=32, comma-separated (default 0.5,0.8; none: off)")
	fixedBase := flag.String("fixed-base", "open", "what the -fixed fractions are of: lane (b)'s capacity in the open loop itself (open: the rate it answers when sent 1.5× the larger of its closed-loop capacities), in the bench's closed loop at c=32 (bench) or on the wrk lane (wrk; the bench's closed loop when the wrk lane did not run)")
	var peers peerFlags
	flag.Var(&peers, "peer", "another gateway as a lane, name=command (repeatable; e.g. gomodel=/path/to/gomodel); see bench/peers.go")
	dur := flag.Duration("dur", 0, "the length of each throughput measurement (default 1s with -quick, else 2s)")
	only := flag.String("only", "", "measure only this figure (throughput, streams, or tail: c=32 closed loop, the wrk lane and the fixed-rate open loop); for tuning, the report is not written")
	sandboxOnly := flag.Bool("sandbox", false, "measure only what the sandbox adds to a bash call (through the binary's `agentgate sandbox bench`) and write <date>-sandbox.md")
	soakDur := flag.Duration("soak", 0, "run the soak for this long (e.g. 1h) and write <date>-soak.md and <date>-soak.svg; 0: no soak")
	soakRate := flag.Int("soak-rate", 0, "the soak's gateway rate, requests per second (default: half the capacity measured at its start)")
	snapshotOnly := flag.Bool("snapshot", false, "measure only what file snapshots add to an agent step on a generated 10,000-file project and write <date>-snapshot.md")
	flag.Parse()

	o := fullOptions()
	if *quick {
		o = quickOptions()
	}
	o.portkey, o.postgres, o.fleet, o.pin, o.bin, o.profile, o.profileConc = *portkey, *postgres, *fleet, *pin, *bin, *profile, *profileConc
	o.profileWrk = *profileWrk
	o.trace, o.traceWrk, o.wrk, o.peers, o.fixedBase = *traceFile, *traceWrk, *wrk, peers, *fixedBase
	if o.fixedBase != "open" && o.fixedBase != "bench" && o.fixedBase != "wrk" {
		fmt.Fprintln(os.Stderr, "bench: -fixed-base takes open, bench or wrk")
		os.Exit(2)
	}
	if *wrkDur > 0 {
		o.wrkDur = *wrkDur
	}
	if *wrkReps > 0 {
		o.wrkReps = *wrkReps
	}
	if *fixed != "" {
		o.fixed = nil
		for _, f := range strings.Split(*fixed, ",") {
			if f = strings.TrimSpace(f); f == "" || f == "none" {
				continue
			}
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || v <= 0 || v > 2 {
				fmt.Fprintf(os.Stderr, "bench: -fixed takes fractions such as 0.5,0.8 (got %q)\n", f)
				os.Exit(2)
			}
			o.fixed = append(o.fixed, v)
		}
	}
	if *dur > 0 {
		o.thrDur = *dur
	}
	switch *only {
	case "":
	case "throughput": // lanes (p) and (p2) and the budget race still run
		o.latRate, o.streamConc, o.bigStreams, o.bodySizes, o.floodDur = 0, 0, 0, nil, 0
		o.wrk, o.fixed = false, nil
	case "tail": // lane (b)'s capacity at c=32, the wrk lane, the fixed-rate open loop
		o.conc, o.slowConc, o.latRate, o.streamConc, o.bigStreams, o.bodySizes, o.floodDur = []int{32}, 0, 0, 0, 0, nil, 0
	case "streams":
		o.conc, o.slowConc, o.latRate, o.bigStreams, o.bodySizes, o.floodDur = nil, 0, 0, 0, nil, 0
		o.wrk, o.fixed = false, nil
	default:
		fmt.Fprintln(os.Stderr, "bench: -only takes throughput, streams or tail")
		os.Exit(2)
	}
	o.progressOut = os.Stderr

	// Pin this process (load generator and fake provider) to core 0 by
	// running it again under taskset.
	if o.pin && !*snapshotOnly && tasksetAvailable() && os.Getenv("AGENTGATE_BENCH_PINNED") == "" {
		self, err := os.Executable()
		if err == nil {
			args := append([]string{"taskset", "-c", "0", self}, os.Args[1:]...)
			ts, _ := exec.LookPath("taskset")
			err = syscall.Exec(ts, args, append(os.Environ(), "AGENTGATE_BENCH_PINNED=1"))
		}
		fmt.Fprintf(os.Stderr, "bench: cannot re-run under taskset (%v); running unpinned\n", err)
	}

	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	o.out = *out
	if o.out == "" {
		o.out = filepath.Join(root, "bench", "results")
	}
	o.stamp = time.Now().Format("2006-01-02")
	if o.quick {
		o.stamp += "-quick"
	}
	ctx := context.Background()
	if *soakDur > 0 {
		os.Exit(soakMain(ctx, o, root, *soakDur, *soakRate))
	}
	if *sandboxOnly {
		calls, reps := 300, 5
		if o.quick {
			calls, reps = 100, 3
		}
		path, err := runSandboxBench(ctx, root, o.bin, o.out, o.stamp, calls, reps)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", path)
		return
	}
	if *snapshotOnly {
		steps := 200
		if o.quick {
			steps = 50
		}
		path, err := runSnapshotBench(ctx, o.out, o.stamp, 10000, steps)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", path)
		return
	}
	res, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if *only != "" {
		for _, c := range res.conds {
			fmt.Printf("%-32s", c)
			for _, l := range res.laneIDs {
				if v := res.thr[c][l]; len(v) > 0 {
					fmt.Printf("  (%s) %6.0f", l, median(v))
					if u := res.thrCPU[c][l]; len(u) > 0 {
						fmt.Printf(" %4.0fµs", median(u))
					}
				}
			}
			fmt.Println("  req/s, server CPU per request")
		}
		fmt.Print(res.tailSummary())
		fmt.Println(res.summary())
		if s := res.fleetSummary(); s != "" {
			fmt.Println(s)
		}
		return
	}
	md, svg, err := res.write(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s and %s\n", md, svg)
	fmt.Println(res.summary())
	if s := res.fleetSummary(); s != "" {
		fmt.Println(s)
	}
}

// run starts the rig and measures every figure that o asks for.
func run(ctx context.Context, o options) (*results, error) {
	logf := func(format string, a ...any) {
		if o.progressOut != nil {
			fmt.Fprintf(o.progressOut, "bench: "+format+"\n", a...)
		}
	}
	started := time.Now()
	r, err := startRig(ctx, o, logf)
	if err != nil {
		return nil, err
	}
	defer r.close()
	res := newResults(r, o)
	for _, l := range r.lanes {
		if err := ping(ctx, l); err != nil {
			return nil, err
		}
	}
	time.Sleep(time.Second)
	res.rssIdle = rssKB(r.caddy.Process.Pid)
	if r.portkey != nil {
		res.rssIdlePeer = rssKB(r.portkey.Process.Pid)
	}

	// Warm up every lane (connections, JIT for Node, the key cache).
	for _, l := range r.lanes {
		closed(ctx, l, 0, chatBody(1024, false), 8, 500*time.Millisecond, 0)
	}
	r.resetProviders()

	body1k := chatBody(1024, false)
	type cond struct {
		name       string
		slow, conc int
	}
	var conds []cond
	for _, c := range o.conc {
		conds = append(conds, cond{fmt.Sprintf("1 KB, 0 ms provider, c=%d", c), 0, c})
	}
	if o.slowConc > 0 {
		conds = append(conds, cond{fmt.Sprintf("1 KB, 20 ms provider, c=%d", o.slowConc), 1, o.slowConc})
	}
	for _, c := range conds {
		logf("throughput %s", c.name)
		for rep := range o.reps {
			for _, l := range r.lanes {
				if peerSkips(l.id, c.slow) {
					continue
				}
				var prof, trace chan error
				if l.id == "c" && c.conc == o.profileConc && c.slow == 0 {
					if o.profile != "" && rep == 0 {
						prof = r.profile(ctx, "profile", o.thrDur, o.profile)
					}
					if o.trace != "" && rep == o.reps-1 {
						trace = r.profile(ctx, "trace", o.thrDur, o.trace)
					}
				}
				trips0, tripsOK := r.roundTrips(ctx, l)
				cr := closed(ctx, l, c.slow, body1k, c.conc, o.thrDur, 0)
				if trips1, ok := r.roundTrips(ctx, l); ok && tripsOK && cr.ok > 0 {
					res.addTrips(c.name, l.id, float64(trips1-trips0)/float64(cr.ok))
				}
				for _, ch := range []chan error{prof, trace} {
					if ch == nil {
						continue
					}
					if err := <-ch; err != nil {
						logf("profile: %v", err)
					}
				}
				res.addThroughput(c.name, l.id, cr)
			}
			r.resetProviders()
		}
	}

	if o.wrk {
		if err := runWrkPhase(ctx, r, res, o, logf); err != nil {
			return nil, err
		}
	}
	if len(o.fixed) > 0 {
		runFixedRates(ctx, r, res, o, body1k, logf)
	}

	if o.latRate > 0 {
		logf("open-loop latency at %d req/s", o.latRate)
		for range o.reps {
			for _, l := range r.lanes {
				lat, errs := open(ctx, l, 0, body1k, o.latRate, o.latDur)
				res.addLatency(l.id, lat, errs)
			}
			r.resetProviders()
		}
	}

	if o.streamConc > 0 {
		logf("streams: %d concurrent, %d events at %v", o.streamConc, streamEvents, pace)
		for range o.reps {
			for _, l := range r.lanes {
				if throughputOnly(l.id) {
					continue
				}
				res.addStreams(l.id, streams(ctx, l, o.streamConc, r.providers[1].SentTimes))
			}
			r.resetProviders()
		}
	}

	if o.bigStreams > 0 {
		logf("streams: %d concurrent", o.bigStreams)
		for _, l := range r.lanes {
			if throughputOnly(l.id) {
				continue
			}
			stop := rssPeak(l.pid())
			sr := streams(ctx, l, o.bigStreams, r.providers[1].SentTimes)
			res.addBigStreams(l.id, sr, stop())
			r.resetProviders()
		}
	}

	for _, size := range o.bodySizes {
		logf("request body %s", sizeName(size))
		body := chatBody(size, false)
		for _, l := range r.lanes {
			if throughputOnly(l.id) {
				continue
			}
			pid := l.pid()
			before := rssKB(pid)
			stop := rssPeak(pid)
			cr := closed(ctx, l, 0, body, 1, o.bodyDur, 0)
			res.addBody(size, l.id, cr, before, stop())
			r.resetProviders()
		}
	}

	if o.floodDur > 0 {
		logf("invalid-key flood")
		gw := r.lanes[2]
		bad := &lane{id: "c-invalid", name: "agentgate, invalid key", client: newClient(), url: gw.url,
			want: 401,
			hdr:  [2]http.Header{{"Authorization": {"Bearer " + r.gw.key[:len(r.gw.key)-4] + "AAAA"}}, {}}}
		for range o.reps {
			r.resetProviders()
			valid := closed(ctx, gw, 0, body1k, o.floodConc, o.floodDur, 0)
			r.resetProviders()
			invalid := floodRun(ctx, bad, body1k, o.floodConc, o.floodDur)
			hits := r.resetProviders()
			res.addFlood(valid.rps, invalid, hits)
		}
	}

	time.Sleep(2 * time.Second)
	res.rssAfter = rssKB(r.caddy.Process.Pid)
	if r.portkey != nil {
		res.rssAfterPeer = rssKB(r.portkey.Process.Pid)
	}

	// Usage exactness: the provider's answers to lane (c) × the price must
	// equal the service account's settled spend.
	r.resetProviders()
	res.usageCount = r.answered["c"]
	res.usageWant = costPerAnswer * moneyN(r.answered["c"])
	deadline := time.Now().Add(20 * time.Second)
	for {
		spent, reserved, err := r.gw.spend(ctx)
		if err != nil {
			return nil, err
		}
		res.usageSpent, res.usageReserved = spent, reserved
		if (spent == res.usageWant && reserved == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.pg != nil {
		res.pgCount = r.answered["p"]
		res.pgWant = costPerAnswer * moneyN(r.answered["p"])
		deadline := time.Now().Add(20 * time.Second)
		for {
			spent, reserved, err := r.pg.spend(ctx)
			if err != nil {
				return nil, err
			}
			res.pgSpent, res.pgReserved = spent, reserved
			if (spent == res.pgWant && reserved == 0) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if r.fleet != nil && len(o.conc) > 0 {
		logf("budget race: %d requests across the fleet's two nodes, room for %d", raceTotal, raceAdmit)
		rr := r.budgetRace(ctx)
		res.race = &rr
	}
	res.elapsed = time.Since(started)
	return res, nil
}

// throughputOnly is true of the lanes measured in throughput and latency
// only (not streams, big streams or body sizes): (i) is lane (c)'s process
// through the Inference API, (p) and (p2) measure the PostgreSQL store.
func throughputOnly(id string) bool {
	return id == "i" || id == "p" || id == "p2" || isPeer(id)
}

// runWrkPhase is the wrk lane: wrk against lanes (b), (c), (i) and the
// peers, interleaved, o.wrkReps times; with o.traceWrk and o.profileWrk,
// an execution trace and a CPU profile of lane (c)'s process (and of lane
// (b)'s) in the last repetition.
func runWrkPhase(ctx context.Context, r *rig, res *results, o options, logf func(string, ...any)) error {
	wrk := wrkPath()
	if wrk == "" {
		res.wrkMsg = "wrk lane skipped: wrk is not installed (apt-get install wrk)"
		logf("%s", res.wrkMsg)
		return nil
	}
	logf("wrk lane: wrk -t1 -c%d, %s each, %d repetitions", o.wrkConc, o.wrkDur, o.wrkReps)
	body := chatBody(1024, false)
	for rep := range o.wrkReps {
		for _, l := range r.lanes {
			if !wrkLane(l.id) {
				continue
			}
			var taken []chan error
			if rep == o.wrkReps-1 {
				for kind, file := range map[string]string{"trace": o.traceWrk, "profile": o.profileWrk} {
					if file == "" {
						continue
					}
					switch l.id {
					case "c":
						taken = append(taken, r.profile(ctx, kind, o.wrkDur, file))
					case "b": // plain Caddy's, to compare with
						taken = append(taken, r.profileOf(ctx, &gwNode{adminAddr: r.plainAdmin}, kind, o.wrkDur, plainTraceFile(file)))
					}
				}
			}
			wr, err := runWrk(ctx, wrk, r.work, l, body, o.wrkConc, o.wrkDur, r.pin)
			for _, t := range taken {
				if err := <-t; err != nil {
					logf("profile: %v", err)
				}
			}
			if err != nil {
				return fmt.Errorf("wrk lane (%s): %v", l.id, err)
			}
			res.addWrk(l.id, wr)
		}
		r.resetProviders()
	}
	if o.profileWrk != "" {
		if bs, cs := res.wrk["b"], res.wrk["c"]; len(bs) > 0 && len(cs) > 0 {
			table, err := wrkProfileReport(ctx, r.bin, plainTraceFile(o.profileWrk), o.profileWrk, bs[len(bs)-1].ok, cs[len(cs)-1].ok)
			if err != nil {
				logf("profile breakdown: %v", err)
			} else {
				md := strings.TrimSuffix(o.profileWrk, filepath.Ext(o.profileWrk)) + ".md"
				logf("CPU per request on the wrk lane, from the profiles (also in %s):\n%s", md, table)
				if err := os.WriteFile(md, []byte(wrkProfileIntro(o)+table), 0o644); err != nil {
					logf("profile breakdown: %v", err)
				}
			}
		}
	}
	// wrk stops at its deadline with a request in flight on each
	// connection. The gateway still reads and meters the provider's
	// answers to those (non-stream) requests, so they count in the usage
	// check like any other: let them reach the provider before counting.
	time.Sleep(time.Second)
	r.resetProviders()
	return nil
}

// plainTraceFile is where -trace-wrk and -profile-wrk write lane (b)'s
// trace or profile: beside lane (c)'s, "-plain" before the extension.
func plainTraceFile(file string) string {
	ext := filepath.Ext(file)
	return strings.TrimSuffix(file, ext) + "-plain" + ext
}

// runFixedRates is the open loop at fixed rates: each a fraction of lane
// (b)'s capacity (by default as the open loop itself measures it, the
// median of this run's probes), against lane (a), the rig alone, and
// lanes (b), (c), (i) and the peers, interleaved.
func runFixedRates(ctx context.Context, r *rig, res *results, o options, body []byte, logf func(string, ...any)) {
	c32 := res.cond32()
	capacity := median(res.thr[c32]["b"])
	if c32 == "" || capacity <= 0 {
		res.fixedMsg = "fixed-rate open loop skipped: lane (b)'s capacity at c=32 was not measured"
		logf("%s", res.fixedMsg)
		return
	}
	res.fixedBase = "the bench's closed loop at c=32"
	var wrkCap float64
	if len(res.wrk["b"]) > 0 {
		wrkCap = res.wrkMedian("b", func(x wrkResult) float64 { return x.rps })
	}
	switch {
	case o.fixedBase == "wrk" && wrkCap > 0:
		capacity = wrkCap
		res.fixedBase = fmt.Sprintf("the wrk lane (-c%d)", o.wrkConc)
	case o.fixedBase == "open":
		// A closed loop's capacity is not what the server sustains under
		// the open loop's client and its many connections (it can be far
		// more): the rates are fractions of what lane (b) answers in the
		// open loop itself when sent more than it can take.
		if b := r.lane("b"); b != nil {
			probe := int(1.5 * max(capacity, wrkCap))
			logf("open loop: lane (b)'s capacity, sent %d req/s, %s each", probe, o.fixedDur)
			var got []float64
			for range o.reps {
				got = append(got, openRun(ctx, b, 0, body, probe, o.fixedDur).achieved)
				r.resetProviders()
			}
			if m := median(got); m > 0 {
				capacity = m
				res.fixedBase = fmt.Sprintf("the open loop itself (the rate it answered when sent %d req/s, median of %d)", probe, len(got))
			}
		}
	}
	res.fixedCap = capacity
	for _, f := range o.fixed {
		rate := int(f * capacity)
		if rate < 1 {
			continue
		}
		logf("open loop at %.0f%% of (b)'s capacity: %d req/s, %s each", 100*f, rate, o.fixedDur)
		for range o.reps {
			for _, l := range r.lanes {
				if !fixedLane(l.id) {
					continue
				}
				or := openRun(ctx, l, 0, body, rate, o.fixedDur)
				res.addFixed(f, rate, l.id, or)
			}
			r.resetProviders()
		}
	}
}

// floodRun sends requests with an invalid key; answers other than 401 count
// as errors.
func floodRun(ctx context.Context, l *lane, body []byte, conc int, dur time.Duration) floodResult {
	cr := closed(ctx, l, 0, body, conc, dur, 0)
	return floodResult{rps: cr.rps, wrong: cr.errs}
}

type floodResult struct {
	rps   float64
	wrong int64 // answers other than 401
}

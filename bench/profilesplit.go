package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// cpuBucket is a share of a CPU profile: the samples with a frame matching
// focus on their stack and none matching ignore (pprof's -focus and
// -ignore).
type cpuBucket struct {
	name, focus, ignore string
}

// wrkBuckets are where a request's CPU goes on the wrk lane, for plain
// Caddy's reverse_proxy and for the gateway side by side. They overlap
// (a system call is also in the handler that made it); each is read on
// its own.
var wrkBuckets = []cpuBucket{
	{"All samples", "", ""},
	{"System calls (reads and writes on the sockets, the store's syncs)", `linux\.Syscall6`, ""},
	{"GC (mark workers, sweeping, assists)", `gcBgMarkWorker|bgsweep|gcAssistAlloc|bgscavenge`, ""},
	{"Allocation outside the GC", `runtime\.mallocgc`, `gcBgMarkWorker|bgsweep`},
	{"Gateway: the request path outside the reverse proxy (authentication, body, admission, accounting), no system calls", `gateway\.\(\*Pipeline\)\.Serve`, `reverseproxy\.\(\*Handler\)\.ServeHTTP|linux\.Syscall6`},
	{"Gateway: metering the answer, in the proxy's copy", `meterWriter\)\.Write`, ""},
	{"Gateway: the settlement writer (usage records and budgets into the store)", `ledger\.\(\*Ledger\)\.writer`, ""},
	{"Store in the background (memtable flushes, compactions)", `dgraph-io/badger`, `ledger\.|gateway\.|service\.`},
	{"Caddy's reverse proxy handler, without metering and system calls", `reverseproxy\.\(\*Handler\)\.ServeHTTP`, `meterWriter|linux\.Syscall6`},
	{"net/http's transport loops (to the provider), no system calls", `persistConn\)\.(writeLoop|readLoop)`, `linux\.Syscall6`},
	{"net/http's server connection outside Caddy's handler, no system calls", `http\.\(\*conn\)\.serve`, `caddyhttp\.\(\*Server\)\.ServeHTTP|linux\.Syscall6`},
	{"Caddy's server handler outside the site's routes, no system calls", `caddyhttp\.\(\*Server\)\.ServeHTTP`, `Subroute|linux\.Syscall6`},
	{"Logging (zap: the proxy's request logger, the access log)", `go\.uber\.org/zap`, ""},
	{"Scheduler", `runtime\.schedule|runtime\.mcall`, `linux\.Syscall6`},
}

var pprofShowing = regexp.MustCompile(`Showing nodes accounting for ([0-9.]+)(ms|s|us|µs|m|h)?`)

// profileShare is the CPU time of one bucket of a CPU profile, through go
// tool pprof.
func profileShare(ctx context.Context, bin, profile string, b cpuBucket) (time.Duration, error) {
	args := []string{"tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0"}
	if b.focus != "" {
		args = append(args, "-focus="+b.focus)
	}
	if b.ignore != "" {
		args = append(args, "-ignore="+b.ignore)
	}
	args = append(args, bin, profile)
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("go tool pprof: %v: %s", err, tail(string(out), 300))
	}
	m := pprofShowing.FindStringSubmatch(string(out))
	if m == nil {
		return 0, nil // no sample matched
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	unit := map[string]time.Duration{"": time.Second, "s": time.Second, "ms": time.Millisecond, "us": time.Microsecond, "µs": time.Microsecond, "m": time.Minute, "h": time.Hour}[m[2]]
	return time.Duration(v * float64(unit)), nil
}

// wrkProfileReport is the table of wrkBuckets in µs per answered request
// for lane (b)'s profile and lane (c)'s, taken over the same wrk run as
// their answered requests.
func wrkProfileReport(ctx context.Context, bin, plainProfile, gwProfile string, plainReqs, gwReqs int64) (string, error) {
	if plainReqs <= 0 || gwReqs <= 0 {
		return "", fmt.Errorf("no requests answered")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| Where the CPU goes (samples with it on the stack) | (b) plain reverse_proxy, µs per request | (c) gateway, µs per request | (c) − (b) |\n|---|---|---|---|\n")
	for _, bk := range wrkBuckets {
		p, err := profileShare(ctx, bin, plainProfile, bk)
		if err != nil {
			return "", err
		}
		g, err := profileShare(ctx, bin, gwProfile, bk)
		if err != nil {
			return "", err
		}
		pu := float64(p) / float64(time.Microsecond) / float64(plainReqs)
		gu := float64(g) / float64(time.Microsecond) / float64(gwReqs)
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %+.1f |\n", bk.name, pu, gu, gu-pu)
	}
	return b.String(), nil
}

// wrkProfileIntro heads the breakdown's file: what was profiled, how.
func wrkProfileIntro(o options) string {
	return fmt.Sprintf("# CPU per request on the wrk lane, plain reverse_proxy (b) and the gateway (c)\n\n"+
		"CPU profiles of the server (the admin API's /debug/pprof/profile, %s each) taken while `wrk -t1 -c%d` ran lane (b) and lane (c) in the wrk lane's last repetition "+
		"(servers on core 1 with GOMAXPROCS=%s, wrk and the fake provider on core 0), divided by the requests wrk had answered in that run. "+
		"The profiles are beside this file (the gateway's, and plain Caddy's with -plain before the extension); each row is `go tool pprof -top -focus=… -ignore=…` over them "+
		"(the expressions are in bench/profilesplit.go). Rows overlap: a system call made by the proxy is in both rows.\n\n", o.wrkDur, o.wrkConc, serverProcs())
}

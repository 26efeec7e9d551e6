package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The wrk lane measures lanes (b), (c), (i) and the peers with wrk
// (`wrk -t1 -c32 --latency`), an event-loop load generator in C whose
// client costs far less per request than the bench's Go client: on two
// cores the Go client and the fake provider share core 0, so the bench's
// own closed loop runs the servers below their capacity, while wrk
// saturates them. wrk is pinned to core 0 like the rest of the load side.

// wrkResult is one wrk run against one lane.
type wrkResult struct {
	rps                 float64 // answered requests (2xx/3xx) per second
	ok, errs            int64   // answered; socket errors, timeouts and non-2xx/3xx answers
	p50, p90, p99, p999 time.Duration
	cpuPerOp            time.Duration // server CPU per answered request
	// per answered request: the servers' system CPU (µs, part of
	// cpuPerOp), read and write system calls, and context switches
	sysPerOp, syscallsPerOp, switchesPerOp float64
	firstErr, rawSummary                   string
}

// wrkPath is the wrk binary, "" when it is not installed.
func wrkPath() string {
	p, err := exec.LookPath("wrk")
	if err != nil {
		return ""
	}
	return p
}

// wrkScript is the Lua script of a lane: POST, the lane's headers and the
// body read from bodyFile, and a done function printing the exact figures
// the bench parses (wrk's own --latency lines round them).
func wrkScript(l *lane, bodyFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "wrk.method = \"POST\"\n")
	fmt.Fprintf(&b, "local f = assert(io.open(%q, \"rb\"))\nwrk.body = f:read(\"*a\")\nf:close()\n", bodyFile)
	fmt.Fprintf(&b, "wrk.headers[\"Content-Type\"] = \"application/json\"\n")
	for k, vs := range l.hdr[0] {
		if len(vs) > 0 {
			fmt.Fprintf(&b, "wrk.headers[%q] = %q\n", k, vs[0])
		}
	}
	// summary.duration is in µs, latency percentiles in µs; errors.status
	// counts answers with a status above 399.
	b.WriteString(`done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("AGENTGATE-WRK %d %d %d %d %d %d %d %d %d %d %d\n",
    summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
`)
	return b.String()
}

// runWrk runs wrk against lane l (the 0 ms provider) with conc connections
// on one thread for dur. work is a directory for the script and body.
func runWrk(ctx context.Context, wrk, work string, l *lane, body []byte, conc int, dur time.Duration, pin bool) (wrkResult, error) {
	body = l.body(0, body)
	bodyFile := filepath.Join(work, "wrk-body-"+l.id+".json")
	script := filepath.Join(work, "wrk-"+l.id+".lua")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return wrkResult{}, err
	}
	if err := os.WriteFile(script, []byte(wrkScript(l, bodyFile)), 0o600); err != nil {
		return wrkResult{}, err
	}
	secs := max(1, int((dur+time.Second/2)/time.Second))
	args := []string{"-t1", "-c" + strconv.Itoa(conc), "-d" + strconv.Itoa(secs) + "s", "--timeout", "10s", "--latency", "-s", script, l.url[0]}
	name := wrk
	if pin {
		name, args = "taskset", append([]string{"-c", "0", wrk}, args...)
	}
	servers := l.serverPids()
	c0 := countsOf(servers)
	cctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, name, args...).CombinedOutput()
	used := countsOf(servers).sub(c0)
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, tail(string(out), 500))
	}
	res, err := parseWrk(string(out))
	if err != nil {
		return res, err
	}
	if len(servers) > 0 && res.ok > 0 {
		res.cpuPerOp = (used.user + used.sys) / time.Duration(res.ok)
		res.sysPerOp = perOp(used.sys, res.ok)
		res.syscallsPerOp, res.switchesPerOp = perOp(used.syscalls, res.ok), perOp(used.switches, res.ok)
	}
	return res, nil
}

// parseWrk reads the line of wrkScript's done function; the rest of wrk's
// output is kept for the first error's message.
func parseWrk(out string) (wrkResult, error) {
	var res wrkResult
	sc := bufio.NewScanner(strings.NewReader(out))
	found := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 12 || f[0] != "AGENTGATE-WRK" {
			continue
		}
		var v [11]int64
		for i := range v {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return res, fmt.Errorf("wrk: bad summary line %q", sc.Text())
			}
			v[i] = n
		}
		durUS, reqs := v[0], v[1]
		connect, read, write, status, timeout := v[2], v[3], v[4], v[5], v[6]
		res.ok = reqs - status
		res.errs = connect + read + write + status + timeout
		if durUS > 0 {
			res.rps = float64(res.ok) / (float64(durUS) / 1e6)
		}
		res.p50, res.p90, res.p99, res.p999 = time.Duration(v[7])*time.Microsecond, time.Duration(v[8])*time.Microsecond,
			time.Duration(v[9])*time.Microsecond, time.Duration(v[10])*time.Microsecond
		switch {
		case status > 0:
			res.firstErr = fmt.Sprintf("%d answers with a status above 399", status)
		case connect+read+write+timeout > 0:
			res.firstErr = fmt.Sprintf("socket errors: connect %d, read %d, write %d, timeout %d", connect, read, write, timeout)
		}
		found = true
	}
	if !found {
		return res, errors.New("wrk printed no summary (is its Lua support missing?): " + tail(out, 500))
	}
	res.rawSummary = out
	return res, nil
}

// wrkLane is true of the lanes the wrk lane measures: plain Caddy, the
// gateway on both routes, and the peers.
func wrkLane(id string) bool {
	return id == "b" || id == "c" || id == "i" || isPeer(id)
}

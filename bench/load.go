package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
)

// chatBody is a Chat Completions request of about size bytes.
func chatBody(size int, stream bool) []byte {
	head := `{"model":"` + model + `","max_tokens":64,`
	if stream {
		head += `"stream":true,"stream_options":{"include_usage":true},`
	}
	head += `"messages":[{"role":"user","content":"`
	tailStr := `"}]}`
	n := size - len(head) - len(tailStr)
	if n < 1 {
		n = 1
	}
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(head)
	const words = "lorem ipsum dolor sit amet consectetur adipiscing elit "
	for b.Len()-len(head) < n {
		b.WriteString(words[:min(len(words), n-(b.Len()-len(head)))])
	}
	b.WriteString(tailStr)
	return b.Bytes()
}

// do sends one non-streaming request and reads the answer to the end.
func do(ctx context.Context, l *lane, slow int, body []byte) error {
	resp, err := l.client.Do(l.request(ctx, slow, body))
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	want := l.want
	if want == 0 {
		want = 200
	}
	if resp.StatusCode != want {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// closedResult is a fixed-concurrency run.
type closedResult struct {
	ok, errs int64
	rps      float64
	firstErr string
	cpuPerOp time.Duration // server CPU (user + system) per answered request; 0 for lane (a)
	// frontCPUPerOp is the load balancer's CPU per answered request (lane
	// (p2) only).
	frontCPUPerOp time.Duration
	p50, p99      time.Duration // latency of the answered requests
}

// closed runs conc workers sending back to back for dur (or until each has
// sent max requests, when max > 0).
func closed(ctx context.Context, l *lane, slow int, body []byte, conc int, dur time.Duration, max int) closedResult {
	body = l.body(slow, body)
	var ok, errs atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(dur)
	servers, front := l.serverPids(), l.frontPid()
	cpu0, front0 := cpuTimes(servers), cpuTime(front)
	lats := make([][]time.Duration, conc) // per worker, merged at the end
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; (max == 0 || i < max) && time.Now().Before(deadline); i++ {
				t0 := time.Now()
				if err := do(ctx, l, slow, body); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(time.Millisecond)
					continue
				}
				lats[w] = append(lats[w], time.Since(t0))
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	res := closedResult{ok: ok.Load(), errs: errs.Load(), rps: float64(ok.Load()) / el.Seconds()}
	if len(servers) > 0 && res.ok > 0 {
		res.cpuPerOp = (cpuTimes(servers) - cpu0) / time.Duration(res.ok)
	}
	if front != 0 && res.ok > 0 {
		res.frontCPUPerOp = (cpuTime(front) - front0) / time.Duration(res.ok)
	}
	all := slices.Concat(lats...)
	res.p50, res.p99 = pct(all, 50), pct(all, 99)
	if v, _ := firstErr.Load().(string); v != "" {
		res.firstErr = v
	}
	return res
}

// open sends at a fixed rate for dur (open loop: each request starts at
// its scheduled time whatever the others do) and returns latencies
// measured from the scheduled start, so queueing is not hidden.
func open(ctx context.Context, l *lane, slow int, body []byte, rate int, dur time.Duration) (lat []time.Duration, errs int) {
	or := openRun(ctx, l, slow, body, rate, dur)
	return or.lat, or.errs
}

// openResult is one open-loop run.
type openResult struct {
	lat      []time.Duration // answered requests, from their scheduled start
	errs     int
	firstErr string
	// achieved is the answered requests per second, from the first
	// scheduled start to the last answer: below the rate asked for when
	// the server (or the sender) fell behind.
	achieved float64
}

// openConns bounds the connections of the open loop: requests are sent
// at their scheduled times on whichever of openConns connections is free
// (a request finding none free waits, and its wait counts in its latency).
// Without a bound, a server falling behind would make the client open a
// connection per late request, until the load side runs out of files.
const openConns = 128

// openRun is open with the achieved rate and the first error. Requests go
// through rawConn (a lane whose URL it cannot reach goes through the
// lane's net/http client). Latency is
// taken from each request's intended send time (coordinated omission
// corrected): a request the sender could only start late, because every
// connection was busy or the core was, counts its wait too.
func openRun(ctx context.Context, l *lane, slow int, body []byte, rate int, dur time.Duration) openResult {
	body = l.body(slow, body)
	n := int(float64(rate) * dur.Seconds())
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	failed := make([]error, n)
	type job struct {
		i  int
		at time.Time
	}
	jobs := make(chan job, n)
	var wg sync.WaitGroup
	for range min(openConns, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send := func() error { return do(ctx, l, slow, body) }
			if rc, err := newRawConn(l, slow, body); err == nil {
				defer rc.close()
				send = func() error { return rc.do(ctx) }
			}
			for j := range jobs {
				failed[j.i] = send()
				lat[j.i] = time.Since(j.at)
			}
		}()
	}
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		jobs <- job{i, at}
	}
	close(jobs)
	wg.Wait()
	el := time.Since(start)
	res := openResult{lat: lat[:0]}
	for i, d := range lat {
		if failed[i] != nil {
			res.errs++
			if res.firstErr == "" {
				res.firstErr = failed[i].Error()
			}
			continue
		}
		res.lat = append(res.lat, d)
	}
	res.achieved = float64(len(res.lat)) / el.Seconds()
	return res
}

// streamResult is a set of concurrent streams against the paced provider.
type streamResult struct {
	ttfe, gaps []time.Duration
	streams    int
	complete   int // streams that delivered every event
	lostEvents int // events missing from incomplete streams
	stalls     int // gaps over 10× the pace
	// providerLate counts the stalls the provider caused itself: it
	// wrote the event late (the harness's core was busy), so the proxy
	// had nothing to pass on.
	providerLate int
	errs         int
	firstErr     string
	maxGap       time.Duration
	totalElapsed time.Duration
}

// streams opens n concurrent streams at once and reads each to the end.
//
// sent, when not nil, gives the provider's write times of a stream named
// by fakeprovider.StreamIDHeader: a stall is the provider's own when it
// wrote that event late.
func streams(ctx context.Context, l *lane, n int, sent func(id string) []time.Time) streamResult {
	streamRun++
	run := streamRun
	body := chatBody(1024, true)
	type one struct {
		ttfe   time.Duration
		gaps   []time.Duration
		events int
		err    error
	}
	res := make([]one, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			o := &res[i]
			o.gaps = make([]time.Duration, 0, streamEvents)
			t0 := time.Now()
			req := l.request(ctx, 1, body)
			req.Header.Set(fakeprovider.StreamIDHeader, streamID(l.id, run, i))
			resp, err := l.client.Do(req)
			if err != nil {
				o.err = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				o.err = fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
				return
			}
			br := bufio.NewReaderSize(resp.Body, 16<<10)
			last := t0
			for {
				line, err := br.ReadSlice('\n')
				if len(line) > 0 && bytes.HasPrefix(line, []byte("data:")) {
					now := time.Now()
					if o.events == 0 {
						o.ttfe = now.Sub(t0)
					} else {
						o.gaps = append(o.gaps, now.Sub(last))
					}
					last = now
					o.events++
				}
				if err != nil {
					if err != io.EOF {
						o.err = err
					}
					return
				}
			}
		}()
	}
	close(gate)
	wg.Wait()
	out := streamResult{streams: n, totalElapsed: time.Since(start)}
	for i, o := range res {
		var at []time.Time
		if sent != nil {
			at = sent(streamID(l.id, run, i))
		}
		if o.err != nil {
			out.errs++
			if out.firstErr == "" {
				out.firstErr = o.err.Error()
			}
		}
		if o.events == streamEvents {
			out.complete++
		} else {
			out.lostEvents += streamEvents - o.events
		}
		if o.events > 0 {
			out.ttfe = append(out.ttfe, o.ttfe)
		}
		for j, g := range o.gaps {
			if g > 10*pace {
				out.stalls++
				// gaps[j] is between events j and j+1.
				if j+1 < len(at) && at[j+1].Sub(at[j]) > 10*pace {
					out.providerLate++
				}
			}
			out.maxGap = max(out.maxGap, g)
		}
		out.gaps = append(out.gaps, o.gaps...)
	}
	return out
}

// streamRun numbers the runs of streams, so that stream ids never repeat.
var streamRun int

func streamID(lane string, run, i int) string { return fmt.Sprintf("%s-%d-%d", lane, run, i) }

// pct is the p-th percentile (0..100) of ds, which it sorts.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	i := int(p / 100 * float64(len(ds)-1))
	return ds[i]
}

// ping checks that a lane answers a chat request; used before measuring.
func ping(ctx context.Context, l *lane) error {
	if err := do(ctx, l, 0, l.body(0, chatBody(1024, false))); err != nil {
		return fmt.Errorf("lane (%s) %s: %v", l.id, l.name, err)
	}
	return nil
}

// sizeName is 1 KB, 100 KB, 1 MB, 10 MB.
func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MB", n>>20)
	default:
		return fmt.Sprintf("%d KB", n>>10)
	}
}

// cpuTime is the user + system CPU time a process has used so far, from
// /proc/<pid>/stat (0 when unknown).
func cpuTime(pid int) time.Duration {
	user, sys := statCPU(pid)
	return user + sys
}

// statCPU is a process's user and system CPU time so far, from
// /proc/<pid>/stat (0 when unknown).
func statCPU(pid int) (user, sys time.Duration) {
	if pid == 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command name (which may hold spaces) start at ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut) * time.Second / clockTicks, time.Duration(st) * time.Second / clockTicks
}

// cpuTimes is the CPU time of several processes, summed.
func cpuTimes(pids []int) (sum time.Duration) {
	for _, p := range pids {
		sum += cpuTime(p)
	}
	return sum
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

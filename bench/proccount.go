package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procCounts are what a server process has spent so far, summed over
// several processes: CPU time split into user and system, the read and
// write system calls (/proc/<pid>/io), and its threads' context switches
// (/proc/<pid>/task/*/status; a thread that has exited no longer counts,
// which the Go runtime rarely does). The wrk lane reports them per request:
// where a lane's CPU goes when it costs more than another's.
type procCounts struct {
	user, sys time.Duration
	syscalls  int64 // syscr + syscw
	switches  int64 // voluntary + involuntary
}

func (a procCounts) sub(b procCounts) procCounts {
	return procCounts{user: a.user - b.user, sys: a.sys - b.sys, syscalls: a.syscalls - b.syscalls, switches: a.switches - b.switches}
}

// perOp is a per-request figure: µs of CPU, or a count per request.
func perOp[T time.Duration | int64](v T, n int64) float64 {
	if n <= 0 {
		return 0
	}
	if d, ok := any(v).(time.Duration); ok {
		return float64(d) / float64(time.Microsecond) / float64(n)
	}
	return float64(v) / float64(n)
}

// countsOf sums procCounts over pids (what cannot be read counts 0).
func countsOf(pids []int) (c procCounts) {
	for _, pid := range pids {
		if pid == 0 {
			continue
		}
		user, sys := statCPU(pid)
		c.user, c.sys = c.user+user, c.sys+sys
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
			c.syscalls += procField(string(b), "syscr:") + procField(string(b), "syscw:")
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		for _, t := range tasks {
			if b, err := os.ReadFile(t); err == nil {
				c.switches += procField(string(b), "voluntary_ctxt_switches:") + procField(string(b), "nonvoluntary_ctxt_switches:")
			}
		}
	}
	return c
}

// procField is the integer after name at the start of a line of a /proc
// file (0 when absent).
func procField(s, name string) int64 {
	for line := range strings.Lines(s) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			v, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return v
		}
	}
	return 0
}

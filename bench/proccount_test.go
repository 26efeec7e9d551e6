package main

import (
	"os"
	"testing"
	"time"
)

// TestCountsOf: this process's counters rise with CPU burned, a file read
// and a sleep (a voluntary context switch), and the CPU agrees with
// cpuTime's.
func TestCountsOf(t *testing.T) {
	pid := os.Getpid()
	c0 := countsOf([]int{pid})
	burnCPU(120 * time.Millisecond)
	for range 20 {
		os.ReadFile("/proc/self/stat")
	}
	time.Sleep(20 * time.Millisecond)
	d := countsOf([]int{pid}).sub(c0)
	if d.user+d.sys < 100*time.Millisecond || d.syscalls < 20 || d.switches < 1 {
		t.Fatalf("counts over the work: %+v", d)
	}
	if got := cpuTime(pid); got < c0.user+c0.sys {
		t.Fatalf("cpuTime %v below the earlier counts' %v", got, c0.user+c0.sys)
	}
	if perOp(d.syscalls, 0) != 0 || perOp(time.Duration(3000), 3) != 1 || perOp(int64(9), 3) != 3 {
		t.Fatal("perOp")
	}
}

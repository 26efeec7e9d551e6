package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"
)

// burnCPU burns until this process has used d more CPU, not for a
// wall-clock time: beside other packages' tests a burn of d gets as little
// as a third of a core (bounded at 30 s).
func burnCPU(d time.Duration) {
	pid := os.Getpid()
	start := cpuTime(pid)
	for deadline := time.Now().Add(30 * time.Second); cpuTime(pid)-start < d && time.Now().Before(deadline); {
		burnForProfile(20 * time.Millisecond)
	}
}

//go:noinline
func burnForProfile(d time.Duration) (x uint64) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 10000 {
			x += uint64(i) * x
		}
	}
	return x
}

// TestProfileShare: the buckets of a CPU profile, read through go tool
// pprof: the samples of a function that burned most of the profile's time
// are most of all its samples, and a focus nothing matches is 0.
func TestProfileShare(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a CPU profile and runs go tool pprof")
	}
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(prof)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	burnCPU(600 * time.Millisecond)
	pprof.StopCPUProfile()
	f.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	all, err := profileShare(ctx, exe, prof, cpuBucket{name: "all"})
	if err != nil {
		t.Fatal(err)
	}
	burn, err := profileShare(ctx, exe, prof, cpuBucket{name: "burn", focus: `burnForProfile`})
	if err != nil {
		t.Fatal(err)
	}
	none, err := profileShare(ctx, exe, prof, cpuBucket{name: "none", focus: `noSuchFunctionAnywhere`})
	if err != nil {
		t.Fatal(err)
	}
	if all < 300*time.Millisecond || burn < all/2 || burn > all || none != 0 {
		t.Fatalf("all %v, burn %v, none %v", all, burn, none)
	}
	table, err := wrkProfileReport(ctx, exe, prof, prof, 1000, 1000)
	if err != nil || len(table) == 0 {
		t.Fatalf("report: %v", err)
	}
}

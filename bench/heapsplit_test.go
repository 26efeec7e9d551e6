package main

import (
	"bytes"
	"math"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

// TestHeapSplit: a text heap profile's in-use bytes, scaled as pprof scales
// them, go to the store when a Badger or ristretto frame is on the stack
// and to the rest otherwise; the alloc figures and the MemStats trailer are
// not counted.
func TestHeapSplit(t *testing.T) {
	const text = `heap profile: 3: 3145728 [9: 9437184] @ heap/1048576
1: 1048576 [4: 4194304] @ 0x1 0x2
#	0x1	github.com/dgraph-io/badger/v4/skl.newArena+0x10	/x/arena.go:10
#	0x2	github.com/dgraph-io/badger/v4.(*DB).openMemTable+0x20	/x/db.go:20

2: 2048 [5: 5242880] @ 0x3 0x4
#	0x3	github.com/agentgate/agentgate/internal/gateway.(*call).serve+0x30	/x/pipeline.go:30
#	0x4	net/http.(*conn).serve+0x40	/x/server.go:40

0: 0 [1: 64] @ 0x5
#	0x5	github.com/dgraph-io/ristretto/v2.(*Cache).Set+0x50	/x/cache.go:50

# runtime.MemStats
# Alloc = 123456789
`
	ours, store, ok := heapSplit([]byte(text))
	if !ok {
		t.Fatal("not read")
	}
	// rate 524288: a 1 MiB object is sampled with probability 1-e^-2; two
	// 1 KiB objects with 1-e^-(1024/524288) each.
	wantStore := 1048576 / (1 - math.Exp(-2))
	wantOurs := 2048 / (1 - math.Exp(-1024.0/524288))
	if math.Abs(store-wantStore) > 1 || math.Abs(ours-wantOurs) > 1 {
		t.Fatalf("ours %.0f (want %.0f), store %.0f (want %.0f)", ours, wantOurs, store, wantStore)
	}
	for _, bad := range []string{"", "not a profile\n", "heap profile: 1: 1 [1: 1] @ heap/x\n"} {
		if _, _, ok := heapSplit([]byte(bad)); ok {
			t.Errorf("%q read as a heap profile", bad)
		}
	}
}

// TestHeapSplitReal reads this process's own heap profile: 32 MiB kept
// alive in 64 KiB pieces are found outside the store, within the
// sampling's error.
func TestHeapSplitReal(t *testing.T) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 4096
	defer func() { runtime.MemProfileRate = old }()
	keep := make([][]byte, 512)
	for i := range keep {
		keep[i] = make([]byte, 64<<10)
	}
	runtime.GC()
	var b bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	ours, store, ok := heapSplit(b.Bytes())
	runtime.KeepAlive(keep)
	if !ok || !strings.Contains(b.String(), "@ heap/8192") {
		t.Fatalf("not read (ok %v): %.200s", ok, b.String())
	}
	// This binary links the store, whose packages allocate a little at init.
	if ours < 31<<20 || ours > 40<<20 || store > 1<<20 {
		t.Fatalf("ours %.1f MiB, store %.1f MiB; 32 MiB kept", ours/(1<<20), store/(1<<20))
	}
}

// TestWriteHeapProfiles: the soak's two heap profiles are written beside
// its report, and their difference is read both outside the store (the
// judged figure) and whole.
func TestWriteHeapProfiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	take := func() []byte {
		var b bytes.Buffer
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(&b, 0); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	res := &soakResult{o: soakOptions{out: t.TempDir(), stamp: "2026-01-02"}}
	res.heapHalf = take()
	keep := make([][]byte, 64)
	for i := range keep {
		keep[i] = make([]byte, 64<<10)
	}
	res.heapEnd = take()
	runtime.KeepAlive(keep)
	got := res.writeHeapProfiles()
	if !strings.Contains(got, "Outside the store (the judged figure), `go tool pprof -top -sample_index=inuse_space -nodecount=25 -ignore=github.com/dgraph-io/ -diff_base 2026-01-02-soak-heap-half.pprof 2026-01-02-soak-heap-end.pprof`") ||
		!strings.Contains(got, "The whole heap, `go tool pprof") || !strings.Contains(got, "TestWriteHeapProfiles") {
		t.Fatalf("report:\n%s", got)
	}
}

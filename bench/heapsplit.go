package main

import (
	"bufio"
	"bytes"
	"math"
	"strconv"
	"strings"
)

// soakProfileRate is the heap profile's sampling rate in the soak's
// server (GODEBUG=memprofilerate): one allocation per 16 KiB on average
// instead of Go's 512 KiB, so that a profile's estimate of a few tens of
// MB is good to a few hundred KB, while the sampling costs the server
// little.
const soakProfileRate = 16 << 10

// storeFramePrefix marks a heap profile sample as the store's: an
// allocation with a frame of Badger (or of ristretto, its cache) on its
// stack.
var storeFramePrefix = []string{"github.com/dgraph-io/"}

// heapSplit is the live heap of a text heap profile (debug=1, taken after a
// GC) split into what the store holds (memtables, block cache, tables
// being built by compactions: bounded by its options, and coming and going
// in steps of a memtable) and all the rest: the figure a leak in the
// server's own code raises. Each record's in-use bytes are scaled as pprof
// scales them (the profile samples one allocation per rate bytes on
// average). ok is false when the text is not such a profile.
func heapSplit(text []byte) (ours, store float64, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	rate := 0.0
	var objs, size float64 // the current record's in-use figures
	inRecord, isStore := false, false
	flush := func() {
		if !inRecord {
			return
		}
		v := scaleHeap(objs, size, rate)
		if isStore {
			store += v
		} else {
			ours += v
		}
		inRecord, isStore = false, false
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "heap profile:"):
			_, r, found := strings.Cut(line, "@ heap/")
			if !found {
				return 0, 0, false
			}
			n, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
			if err != nil || n <= 0 {
				return 0, 0, false
			}
			rate = n / 2 // the header gives twice the rate, as pprof expects
		case strings.HasPrefix(line, "#"):
			if strings.HasPrefix(line, "# runtime.MemStats") {
				flush()
				return ours, store, rate > 0
			}
			f := strings.Fields(line)
			if inRecord && len(f) >= 3 {
				for _, p := range storeFramePrefix {
					if strings.HasPrefix(f[2], p) {
						isStore = true
					}
				}
			}
		default:
			// "inuseObjects: inuseBytes [allocObjects: allocBytes] @ pcs"
			head, _, found := strings.Cut(line, " [")
			if !found || rate == 0 {
				continue
			}
			o, b, found := strings.Cut(head, ": ")
			if !found {
				continue
			}
			no, err1 := strconv.ParseFloat(strings.TrimSpace(o), 64)
			nb, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
			if err1 != nil || err2 != nil {
				continue
			}
			flush()
			objs, size, inRecord = no, nb, true
		}
	}
	flush()
	return ours, store, rate > 0 && sc.Err() == nil
}

// scaleHeap is the estimate of a record's in-use bytes from its sampled
// count and size, as the runtime and pprof compute it: an allocation of
// average size s is sampled with probability 1 - exp(-s/rate).
func scaleHeap(count, size, rate float64) float64 {
	if count == 0 || size == 0 {
		return 0
	}
	if rate <= 1 {
		return size
	}
	avg := size / count
	return size / (1 - math.Exp(-avg/rate))
}

// withGODEBUG adds setting to a GODEBUG value (settings are
// comma-separated; a later one wins).
func withGODEBUG(cur, setting string) string {
	if cur == "" {
		return setting
	}
	return cur + "," + setting
}

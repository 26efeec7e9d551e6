// Package ids makes the instance server's ids: prefix_ + 14 hex digits of
// (ms×4096 + counter) + 12 base62 characters, ascending by creation time
// or, for descending ids, newest first.
package ids

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Random is n random base62 characters.
func Random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = base62[int(b[i])%62]
	}
	return string(b)
}

// gen is the process's id generator; descending ids complement the time
// value so that newer ids sort first.
type gen struct {
	mu      sync.Mutex
	lastMS  int64
	counter int64
}

var ids gen

func (g *gen) next(prefix string, descending bool, now time.Time) string {
	g.mu.Lock()
	ms := now.UnixMilli()
	if ms == g.lastMS {
		g.counter++
	} else {
		g.lastMS, g.counter = ms, 0
	}
	v := uint64(ms)*4096 + uint64(g.counter)
	g.mu.Unlock()
	if descending {
		v = ^v
	}
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return prefix + "_" + hex.EncodeToString(b[1:]) + Random(12)
}

// New makes an id with the prefix: ascending, or newest first when
// descending.
func New(prefix string, descending bool, now time.Time) string {
	return ids.next(prefix, descending, now)
}

// Event makes an ascending evt_ id.
func Event(now time.Time) string { return ids.next("evt", false, now) }

// Floor is the smallest ascending id with the prefix made at or after t:
// every id made before t sorts below it.
func Floor(prefix string, t time.Time) string {
	v := uint64(t.UnixMilli()) * 4096
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return prefix + "_" + hex.EncodeToString(b[1:])
}

// Time is the creation time of an ascending id with the prefix; ok is
// false when id is not one.
func Time(prefix, id string) (time.Time, bool) {
	if len(id) < len(prefix)+15 || id[:len(prefix)+1] != prefix+"_" {
		return time.Time{}, false
	}
	raw, err := hex.DecodeString(id[len(prefix)+1 : len(prefix)+15])
	if err != nil {
		return time.Time{}, false
	}
	var v uint64
	for _, c := range raw {
		v = v<<8 | uint64(c)
	}
	return time.UnixMilli(int64(v / 4096)), true
}

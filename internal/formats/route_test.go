package formats

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// encodedSlashOrDot finds what lowering the path and searching it found.
func TestEncodedSlashOrDot(t *testing.T) {
	old := func(p string) bool {
		l := strings.ToLower(p)
		return strings.Contains(l, "%2f") || strings.Contains(l, "%5c") || strings.Contains(l, "%2e")
	}
	r := rand.New(rand.NewPCG(5, 6))
	parts := []string{"%", "2", "5", "f", "F", "e", "E", "c", "C", "a", "/", "\u212a", "\xff", "%%", "%2", "x"}
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for n := r.IntN(8); n > 0; n-- {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		if p := b.String(); encodedSlashOrDot(p) != old(p) {
			t.Fatalf("encodedSlashOrDot(%q) = %v", p, !old(p))
		}
	}
}

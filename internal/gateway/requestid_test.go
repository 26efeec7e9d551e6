package gateway

import (
	"regexp"
	"sync"
	"testing"
)

// Request ids are UUID-shaped and never repeat, from any goroutine.
func TestRequestIDs(t *testing.T) {
	shape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	const workers, each = 4, 2000
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ids[w] = append(ids[w], NewRequestID())
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, list := range ids {
		for _, id := range list {
			if !shape.MatchString(id) {
				t.Fatalf("id %q is not UUID-shaped", id)
			}
			if seen[id] {
				t.Fatalf("id %q repeats", id)
			}
			seen[id] = true
		}
	}
	if a, b := NewRequestID(), NewRequestID(); a[:18] != b[:18] {
		t.Errorf("ids of one process do not share their prefix: %s %s", a, b)
	}
}

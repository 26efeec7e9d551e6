package store

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

// TestUsageAppendJSONMatchesEncodingJSON pins the hand-written encoding of
// usage records to encoding/json's, byte for byte, over records with every
// optional field set and unset and strings that need escaping.
func TestUsageAppendJSONMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "u_01HZX", "gpt-4o-mini", "a\"b", `back\slash`, "<script>&", "tab\there", "nl\n",
		"\x00\x1f", "é ü 日本", "line\u2028sep\u2029", "bad\xffutf8", "~ ok !#$%'()*+,-./:;=?@[]^_`{|}"}
	pick := func(r *rand.Rand) string { return strs[r.IntN(len(strs))] }
	r := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{{}, time.Unix(1764000000, 0).UTC(), time.Unix(1764000000, 123456789).UTC(),
		time.Unix(1764000000, 120000000).In(time.FixedZone("x", -5*3600-30*60)), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)}
	costs := []money.Pico{0, 1, -10, 52_500_000, money.Pico(math.MaxInt64), money.Pico(math.MinInt64)}
	for i := 0; i < 2000; i++ {
		u := &UsageRecord{ID: pick(r), Time: times[r.IntN(len(times))], Workspace: pick(r), MemberID: pick(r),
			MemberKind: pick(r), KeyID: pick(r), FamilyID: pick(r), Connection: pick(r), Format: pick(r),
			Operation: pick(r), Model: pick(r), UpstreamModel: pick(r),
			Tokens: Tokens{Input: r.Int64() - math.MaxInt64/2, CacheRead: r.Int64N(10), CacheWrite: -1, Output: r.Int64(), Reasoning: 0},
			Cost:   costs[r.IntN(len(costs))], Status: r.IntN(600) - 1, Streamed: r.IntN(2) == 0,
			ClientDisconnected: r.IntN(2) == 0, Estimated: r.IntN(2) == 0, RequestID: pick(r), Session: pick(r)}
		for range r.IntN(3) {
			u.Attempts = append(u.Attempts, Attempt{Connection: pick(r), Status: r.IntN(3) * 250, Error: pick(r)})
		}
		want, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		got, err := u.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
	// A time encoding/json refuses is refused too.
	if _, err := (&UsageRecord{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}).AppendJSON(nil); err == nil {
		t.Fatal("a year past 9999 encoded")
	}
}

package store

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

// randomUsage is a record with every optional field set or unset at random,
// strings that need escaping in JSON or are not UTF-8, and extreme numbers.
func randomUsage(r *rand.Rand) *UsageRecord {
	strs := []string{"", "u_01HZX", "gpt-4o-mini", "a\"b", `back\slash`, "<script>&", "tab\there", "nl\n",
		"\x00\x1f", "é ü 日本", "line\u2028sep\u2029", "bad\xffutf8", "\xe6\x97", "~ ok !#$%'()*+,-./:;=?@[]^_`{|}"}
	pick := func() string { return strs[r.IntN(len(strs))] }
	times := []time.Time{{}, time.Unix(1764000000, 0).UTC(), time.Unix(1764000000, 123456789).UTC(),
		time.Unix(1764000000, 120000000).In(time.FixedZone("x", -5*3600-30*60)), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", 14*3600))}
	costs := []money.Pico{0, 1, -10, 52_500_000, money.Pico(math.MaxInt64), money.Pico(math.MinInt64)}
	u := &UsageRecord{Time: times[r.IntN(len(times))], MemberID: pick(),
		MemberKind: pick(), KeyID: pick(), FamilyID: pick(), Connection: pick(), Format: pick(),
		Operation: pick(), Model: pick(), UpstreamModel: pick(),
		Tokens: Tokens{Input: r.Int64() - math.MaxInt64/2, CacheRead: r.Int64N(10), CacheWrite: -1, Output: r.Int64(), Reasoning: math.MinInt64},
		Cost:   costs[r.IntN(len(costs))], Status: r.IntN(600) - 1, Streamed: r.IntN(2) == 0,
		ClientDisconnected: r.IntN(2) == 0, Estimated: r.IntN(2) == 0, RequestID: pick(), Session: pick()}
	for range r.IntN(3) {
		u.Attempts = append(u.Attempts, Attempt{Connection: pick(), Status: r.IntN(3) * 250, Error: pick()})
	}
	return u
}

// TestUsageBinaryReadsAsJSON: a record read back from its stored form is
// the record encoding/json would give back from its JSON (the form of
// earlier versions), times, zones, strings that are not UTF-8 and the
// extremes of every number included.
func TestUsageBinaryReadsAsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		u := randomUsage(r)
		js, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		want := new(UsageRecord)
		if err := json.Unmarshal(js, want); err != nil {
			t.Fatal(err)
		}
		b, err := appendUsage(nil, u)
		if err != nil {
			t.Fatal(err)
		}
		got := new(UsageRecord)
		if err := decodeUsage(b, got); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got, want)
		}
		// An earlier version's JSON reads as it did.
		old := new(UsageRecord)
		if err := decodeUsage(js, old); err != nil || !reflect.DeepEqual(old, want) {
			t.Fatalf("record %d as JSON: %+v, %v", i, old, err)
		}
	}
	// A time encoding/json refuses is refused too: the API could not show it.
	if _, err := appendUsage(nil, &UsageRecord{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Fatal("a year past 9999 stored")
	}
}

// The stored form names every field of UsageRecord: a field added to the
// record must be added to appendUsage and decodeUsage (and to this list).
func TestUsageBinaryCoversEveryField(t *testing.T) {
	var names []string
	for f := range reflect.TypeFor[UsageRecord]().Fields() {
		names = append(names, f.Name)
	}
	want := "ID Time Workspace MemberID MemberKind KeyID FamilyID Connection Format Operation Model UpstreamModel " +
		"Tokens Cost Status Streamed ClientDisconnected Estimated RequestID Session Attempts"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("UsageRecord's fields are\n%s\nthe stored form (usage_bin.go) knows\n%s", got, want)
	}
	var tok []string
	for f := range reflect.TypeFor[Tokens]().Fields() {
		tok = append(tok, f.Name)
	}
	if got := strings.Join(tok, " "); got != "Input CacheRead CacheWrite Output Reasoning" {
		t.Fatalf("Tokens' fields are %s", got)
	}
	var att []string
	for f := range reflect.TypeFor[Attempt]().Fields() {
		att = append(att, f.Name)
	}
	if got := strings.Join(att, " "); got != "Connection Status Error" {
		t.Fatalf("Attempt's fields are %s", got)
	}
}

// A stored record cut short, with bytes after its end, of an unknown
// version or with impossible counts is an error, never a panic or a
// record.
func TestUsageBinaryMalformed(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		b, err := appendUsage(nil, randomUsage(r))
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(b) {
			if err := decodeUsage(b[:n], new(UsageRecord)); err == nil {
				t.Fatalf("%q, cut to %d of %d bytes, read", b[:n], n, len(b))
			}
		}
		if err := decodeUsage(append(b, 0), new(UsageRecord)); err == nil {
			t.Fatal("a record with a byte after its end read")
		}
	}
	for _, bad := range [][]byte{{2, 0}, {0xff}, {'[', ']'}, {1, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0}} {
		if err := decodeUsage(bad, new(UsageRecord)); err == nil {
			t.Fatalf("%q read", bad)
		}
	}
	// An attempt count far beyond the bytes left is refused before
	// anything is made for it.
	b, _ := appendUsage(nil, &UsageRecord{})
	b = append(b[:len(b)-1], 0xff, 0xff, 0xff, 0xff, 0x0f)
	if err := decodeUsage(b, new(UsageRecord)); err == nil {
		t.Fatal("four billion attempts read")
	}
}

// A gateway request's record is stored in about a third of its JSON.
func TestUsageBinarySize(t *testing.T) {
	u := &UsageRecord{ID: "0187a8b0c1d2e3f4AbCdEfGh", Time: time.Unix(1764000000, 123456789).UTC(), Workspace: "wrk_abcdefghijkl",
		MemberID: "sa_abcdefghijkl", MemberKind: MemberServiceAccount, KeyID: "key_abcdefghijkl", Connection: "conn_abcdefghijkl",
		Format: "chat", Model: "gpt-4o-mini", UpstreamModel: "gpt-4o-mini", Tokens: Tokens{Input: 20, Output: 10, CacheRead: 5, Reasoning: 2},
		Cost: 45_000_000, Status: 200, RequestID: "req_abcdefghijklmnop"}
	js, _ := json.Marshal(u)
	b, err := appendUsage(nil, u)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)*100 > len(js)*40 {
		t.Fatalf("stored in %d bytes, its JSON %d", len(b), len(js))
	}
	t.Logf("stored in %d bytes, its JSON %d", len(b), len(js))
}

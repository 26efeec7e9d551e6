package secrets

import (
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
)

var prefixes = []string{PrefixServiceKey, PrefixAccessToken, PrefixRefreshToken}

func TestTokenLayoutConstants(t *testing.T) {
	if tokenLen != 57 {
		t.Fatalf("tokenLen = %d, want 57", tokenLen)
	}
	for _, p := range prefixes {
		if len(p) != 6 || !strings.HasPrefix(p, "ag_") || p[5] != '_' {
			t.Fatalf("prefix %q does not have the shape ag_xx_", p)
		}
	}
}

func TestNewTokenRoundTrip(t *testing.T) {
	for _, prefix := range prefixes {
		seen := map[string]bool{}
		for i := 0; i < 200; i++ {
			tok, id := NewToken(prefix)
			if len(tok) != tokenLen {
				t.Fatalf("len(%q) = %d, want %d", tok, len(tok), tokenLen)
			}
			if !strings.HasPrefix(tok, prefix+id+"_") {
				t.Fatalf("token %q does not start with %q", tok, prefix+id+"_")
			}
			if len(id) != IDLen || !isBase62(id) {
				t.Fatalf("id %q is not %d base62 characters", id, IDLen)
			}
			parsed, ok := ParseToken(tok)
			if !ok {
				t.Fatalf("ParseToken(%q) rejected a fresh token", tok)
			}
			if parsed.Prefix != prefix || parsed.ID != id || parsed.Secret != tok {
				t.Fatalf("ParseToken(%q) = %+v", tok, parsed)
			}
			if seen[tok] || seen[id] {
				t.Fatalf("duplicate token or id after %d tokens", i)
			}
			seen[tok], seen[id] = true, true
		}
	}
}

// Every single-character substitution of a valid token must be rejected.
func TestParseTokenRejectsEverySingleMutation(t *testing.T) {
	alphabet := base62 + "_-+/=. \x00\xff"
	for _, prefix := range prefixes {
		for n := 0; n < 5; n++ {
			tok, _ := NewToken(prefix)
			for i := 0; i < len(tok); i++ {
				for j := 0; j < len(alphabet); j++ {
					c := alphabet[j]
					if c == tok[i] {
						continue
					}
					mut := tok[:i] + string([]byte{c}) + tok[i+1:]
					if _, ok := ParseToken(mut); ok {
						t.Fatalf("mutation of %q at %d to %q accepted: %q", tok, i, c, mut)
					}
				}
			}
		}
	}
}

func TestParseTokenRejectsTranspositions(t *testing.T) {
	for n := 0; n < 20; n++ {
		tok, _ := NewToken(PrefixServiceKey)
		for i := 0; i+1 < len(tok); i++ {
			if tok[i] == tok[i+1] {
				continue
			}
			b := []byte(tok)
			b[i], b[i+1] = b[i+1], b[i]
			if _, ok := ParseToken(string(b)); ok {
				t.Fatalf("transposition of %q at %d accepted", tok, i)
			}
		}
	}
}

// withCRC returns body with a correct checksum, so that a test reaches the
// shape checks rather than failing on the checksum alone.
func withCRC(body string) string { return body + crc6(body) }

func TestParseTokenRejectsMalformed(t *testing.T) {
	valid, _ := NewToken(PrefixServiceKey)
	id := strings.Repeat("a", IDLen)
	secret := strings.Repeat("b", SecretLen)
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"prefix only", PrefixServiceKey},
		{"one char short", valid[:len(valid)-1]},
		{"one char long", valid + "0"},
		{"doubled", valid + valid},
		{"leading space", " " + valid[1:]},
		{"trailing newline", valid[:len(valid)-1] + "\n"},
		{"unknown kind with crc", withCRC("ag_xx_" + id + "_" + secret)},
		{"upper-case prefix with crc", withCRC("AG_SK_" + id + "_" + secret)},
		{"other vendor prefix with crc", withCRC("sk_ab_" + id + "_" + secret)},
		{"no underscore after prefix with crc", withCRC("ag_skx" + id + "_" + secret)},
		{"missing id separator with crc", withCRC(PrefixServiceKey + id + "x" + secret)},
		{"id separator moved with crc", withCRC(PrefixServiceKey + id[:11] + "_a" + secret)},
		{"dash in id with crc", withCRC(PrefixServiceKey + id[:11] + "-" + "_" + secret)},
		{"underscore in secret with crc", withCRC(PrefixServiceKey + id + "_" + secret[:31] + "_")},
		{"non-ascii in secret with crc", withCRC(PrefixServiceKey + id + "_" + secret[:30] + "é")},
		{"space in id with crc", withCRC(PrefixServiceKey + " " + id[1:] + "_" + secret)},
		{"bad crc", PrefixServiceKey + id + "_" + secret + "000000"},
		{"crc of other body", PrefixServiceKey + id + "_" + secret + crc6(PrefixAccessToken+id+"_"+secret)},
		{"prefix swapped keeps crc", PrefixAccessToken + valid[6:]},
		{"crc with non-base62", PrefixServiceKey + id + "_" + secret + "!!!!!!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := ParseToken(tt.in); ok || got != (Token{}) {
				t.Fatalf("ParseToken(%q) = %+v, %v; want rejection", tt.in, got, ok)
			}
		})
	}
}

func TestParseTokenAcceptsHandBuilt(t *testing.T) {
	for _, prefix := range prefixes {
		id := "AbC123xyz789"
		tok := withCRC(prefix + id + "_" + strings.Repeat("Z", SecretLen))
		got, ok := ParseToken(tok)
		if !ok || got.Prefix != prefix || got.ID != id || got.Secret != tok {
			t.Fatalf("ParseToken(%q) = %+v, %v", tok, got, ok)
		}
	}
}

func TestCRC6(t *testing.T) {
	for _, s := range []string{"", "a", "ag_sk_AbC123xyz789_" + strings.Repeat("Z", SecretLen)} {
		c := crc6(s)
		if len(c) != CRCLen || !isBase62(c) {
			t.Fatalf("crc6(%q) = %q", s, c)
		}
		// Decoding the base62 digits gives back the CRC32: no bits are lost.
		var v uint64
		for i := 0; i < len(c); i++ {
			v = v*62 + uint64(strings.IndexByte(base62, c[i]))
		}
		if v != uint64(crc32.ChecksumIEEE([]byte(s))) {
			t.Fatalf("crc6(%q) = %q decodes to %d, want %d", s, c, v, crc32.ChecksumIEEE([]byte(s)))
		}
	}
	if crc6("") != "000000" {
		t.Fatalf("crc6(\"\") = %q, want 000000", crc6(""))
	}
}

func TestRandomString(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 12, 16, 32, 100, 1000} {
		s := RandomString(n)
		if len(s) != n {
			t.Fatalf("len(RandomString(%d)) = %d", n, len(s))
		}
		if !isBase62(s) {
			t.Fatalf("RandomString(%d) = %q has non-base62 characters", n, s)
		}
	}
	if RandomString(32) == RandomString(32) {
		t.Fatal("two random strings are equal")
	}
	// Every character of the alphabet shows up, and none dominates.
	counts := map[byte]int{}
	const total = 62 * 500
	s := RandomString(total)
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	if len(counts) != 62 {
		t.Fatalf("%d distinct characters in %d, want 62", len(counts), total)
	}
	for c, n := range counts {
		if n < 300 || n > 700 { // expected 500, sd about 22
			t.Fatalf("character %q appears %d times in %d, want about 500", c, n, total)
		}
	}
}

func TestNewID(t *testing.T) {
	id := NewID("wrk_")
	if !strings.HasPrefix(id, "wrk_") || len(id) != 4+16 || !isBase62(id[4:]) {
		t.Fatalf("NewID = %q", id)
	}
	if NewID("x") == NewID("x") {
		t.Fatal("NewID repeated")
	}
}

func TestIsBase62(t *testing.T) {
	if !isBase62(base62) || !isBase62("") {
		t.Fatal("isBase62 rejects the alphabet")
	}
	for c := 0; c < 256; c++ {
		want := strings.IndexByte(base62, byte(c)) >= 0
		if got := isBase62(string([]byte{byte(c)})); got != want {
			t.Fatalf("isBase62(%q) = %v, want %v", byte(c), got, want)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	for _, p := range prefixes {
		tok, _ := NewToken(p)
		f.Add(tok)
		f.Add(tok[:len(tok)-1])
		f.Add(tok + "x")
	}
	f.Add("")
	f.Add("ag_sk_")
	f.Add(strings.Repeat("_", tokenLen))
	f.Add(withCRC("ag_xx_" + strings.Repeat("a", IDLen) + "_" + strings.Repeat("b", SecretLen)))
	f.Fuzz(func(t *testing.T, s string) {
		tok, ok := ParseToken(s)
		if !ok {
			if tok != (Token{}) {
				t.Fatalf("rejected %q but returned %+v", s, tok)
			}
			return
		}
		if tok.Secret != s || len(s) != tokenLen {
			t.Fatalf("accepted %q as %+v", s, tok)
		}
		if tok.Prefix != PrefixServiceKey && tok.Prefix != PrefixAccessToken && tok.Prefix != PrefixRefreshToken {
			t.Fatalf("accepted %q with prefix %q", s, tok.Prefix)
		}
		if len(tok.ID) != IDLen || !isBase62(tok.ID) || !strings.HasPrefix(s, tok.Prefix+tok.ID+"_") {
			t.Fatalf("accepted %q with id %q", s, tok.ID)
		}
		if !isBase62(s[6+IDLen+1:]) || crc6(s[:len(s)-CRCLen]) != s[len(s)-CRCLen:] {
			t.Fatalf("accepted %q with a bad secret or checksum", s)
		}
		again, ok := ParseToken(tok.Secret)
		if !ok || again != tok {
			t.Fatalf("re-parse of %q = %+v, %v", s, again, ok)
		}
	})
}

// Random mutations (insertions, deletions, substitutions) of valid tokens.
func TestParseTokenRandomMutations(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 20000; n++ {
		tok, _ := NewToken(prefixes[n%3])
		b := []byte(tok)
		switch r.IntN(3) {
		case 0: // substitution by any byte
			i := r.IntN(len(b))
			c := byte(r.IntN(256))
			if c == b[i] {
				continue
			}
			b[i] = c
		case 1: // deletion
			i := r.IntN(len(b))
			b = append(b[:i], b[i+1:]...)
		case 2: // insertion
			i := r.IntN(len(b) + 1)
			b = append(b[:i], append([]byte{base62[r.IntN(62)]}, b[i:]...)...)
		}
		if _, ok := ParseToken(string(b)); ok {
			t.Fatalf("mutation %q of %q accepted", b, tok)
		}
	}
}

package secrets

import (
	"crypto/rand"
	"hash/crc32"
	"strings"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Base62 is the alphabet of the ids and tokens made here, in ASCII order:
// fixed-width numbers written in it sort as their values do.
const Base62 = base62

// Token kinds: the fixed prefixes of agentgate's credentials.
const (
	PrefixServiceKey   = "ag_sk_" // service-account API key
	PrefixAccessToken  = "ag_at_" // device-flow or operator-issued access token
	PrefixRefreshToken = "ag_rt_" // refresh token, single use
	PrefixWebSession   = "ag_ws_" // Console web session (cookie)
)

// Sizes of the parts of a token: <prefix><id12>_<secret32><crc6>.
const (
	IDLen     = 12
	SecretLen = 32
	CRCLen    = 6
	tokenLen  = 6 + IDLen + 1 + SecretLen + CRCLen
)

// RandomString returns n random base62 characters (about 5.95 bits each).
func RandomString(n int) string { return string(AppendRandom(make([]byte, 0, n), n)) }

// AppendRandom appends n random base62 characters to b.
func AppendRandom(b []byte, n int) []byte {
	const max = 248 // largest multiple of 62 below 256: no modulo bias
	var small [48]byte
	buf := small[:]
	if need := n + n/4 + 8; need > len(small) {
		buf = make([]byte, need)
	} else {
		buf = small[:need]
	}
	for added := 0; added < n; {
		if _, err := rand.Read(buf); err != nil {
			panic(err)
		}
		for _, c := range buf {
			if c < max {
				b = append(b, base62[c%62])
				if added++; added == n {
					break
				}
			}
		}
	}
	return b
}

// NewID returns a prefixed random identifier such as "wrk_3fK9…".
func NewID(prefix string) string { return prefix + RandomString(16) }

// Token is a parsed credential.
type Token struct {
	Prefix string // one of the Prefix constants
	ID     string // the public key id (12 base62 characters)
	Secret string // the whole token, the input of MAC
}

// NewToken makes a fresh token of the given prefix. It returns the token
// string, shown once, and its id.
func NewToken(prefix string) (token, id string) {
	id = RandomString(IDLen)
	body := prefix + id + "_" + RandomString(SecretLen)
	return body + crc6(body), id
}

// ParseToken checks the shape and checksum of a credential without any
// store access. ok is false for anything malformed.
func ParseToken(s string) (Token, bool) {
	if len(s) != tokenLen || !strings.HasPrefix(s, "ag_") || s[5] != '_' {
		return Token{}, false
	}
	prefix := s[:6]
	switch prefix {
	case PrefixServiceKey, PrefixAccessToken, PrefixRefreshToken, PrefixWebSession:
	default:
		return Token{}, false
	}
	id := s[6 : 6+IDLen]
	if s[6+IDLen] != '_' {
		return Token{}, false
	}
	rest := s[6+IDLen+1:]
	if !isBase62(id) || !isBase62(rest) {
		return Token{}, false
	}
	body := s[:len(s)-CRCLen]
	if d := crcDigits(body); string(d[:]) != s[len(s)-CRCLen:] {
		return Token{}, false
	}
	return Token{Prefix: prefix, ID: id, Secret: s}, true
}

// crc6 is the CRC32 (IEEE) of s in six base62 digits.
func crc6(s string) string {
	d := crcDigits(s)
	return string(d[:])
}

// crcDigits is crc6 without a string: ParseToken compares it in place on
// every authenticated request. The CRC is computed byte by byte from the
// IEEE table (tokens are short), as crc32.ChecksumIEEE does, without
// copying s to bytes.
func crcDigits(s string) [CRCLen]byte {
	v := ^uint32(0)
	for i := 0; i < len(s); i++ {
		v = crc32.IEEETable[byte(v)^s[i]] ^ v>>8
	}
	v = ^v
	var out [CRCLen]byte
	for i := CRCLen - 1; i >= 0; i-- {
		out[i] = base62[v%62]
		v /= 62
	}
	return out
}

func isBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

package secrets

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// hashOnce caches one hash: argon2id with 64 MiB is slow by design.
var hashOnce = sync.OnceValues(func() (string, error) { return HashPassword("correct horse battery") })

func TestHashPasswordFormat(t *testing.T) {
	h, err := hashOnce()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(h, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		t.Fatalf("hash %q is not a PHC argon2id string", h)
	}
	if parts[2] != "v=19" {
		t.Fatalf("version %q, want v=19", parts[2])
	}
	if want := fmt.Sprintf("m=%d,t=%d,p=%d", argonMemory, argonTime, argonThreads); parts[3] != want {
		t.Fatalf("params %q, want %q", parts[3], want)
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil || len(salt) != 16 {
		t.Fatalf("salt %q: %d bytes, %v", parts[4], len(salt), err)
	}
	sum, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(sum) != argonKeyLen {
		t.Fatalf("hash %q: %d bytes, %v", parts[5], len(sum), err)
	}
	if strings.Contains(h, "correct horse") {
		t.Fatal("hash contains the password")
	}
}

func TestCheckPassword(t *testing.T) {
	h, err := hashOnce()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		password string
		want     bool
	}{
		{"correct horse battery", true},
		{"correct horse batterY", false},
		{"correct horse battery ", false},
		{"correct horse batter", false},
		{"", false},
		{"Correct horse battery", false},
	}
	for _, tt := range tests {
		got, err := CheckPassword(h, tt.password)
		if err != nil {
			t.Fatalf("CheckPassword(%q): %v", tt.password, err)
		}
		if got != tt.want {
			t.Fatalf("CheckPassword(%q) = %v, want %v", tt.password, got, tt.want)
		}
	}
}

func TestHashPasswordSalted(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	a, err := HashPassword("password-one")
	if err != nil {
		t.Fatal(err)
	}
	b, err := HashPassword("password-one")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("two hashes of the same password are equal: no salt")
	}
	for _, h := range []string{a, b} {
		if ok, err := CheckPassword(h, "password-one"); err != nil || !ok {
			t.Fatalf("CheckPassword(%q) = %v, %v", h, ok, err)
		}
	}
}

func TestHashPasswordLength(t *testing.T) {
	tests := []struct {
		name     string
		password string
		ok       bool
	}{
		{"empty", "", false},
		{"seven", "1234567", false},
		{"eight", "12345678", true},
		{"256", strings.Repeat("a", 256), true},
		{"257", strings.Repeat("a", 257), false},
		{"huge", strings.Repeat("a", 100000), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.ok && testing.Short() {
				t.Skip("slow")
			}
			h, err := HashPassword(tt.password)
			if !tt.ok {
				if !errors.Is(err, ErrWeakPassword) || h != "" {
					t.Fatalf("HashPassword(%d chars) = %q, %v; want ErrWeakPassword", len(tt.password), h, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := CheckPassword(h, tt.password); err != nil || !ok {
				t.Fatalf("CheckPassword = %v, %v", ok, err)
			}
		})
	}
}

// Malformed hashes are errors, never panics, and never match.
func TestCheckPasswordMalformed(t *testing.T) {
	good, err := hashOnce()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, "$")
	salt, sum := parts[4], parts[5]
	// Cheap parameters, so that the well-formed variants below run fast.
	cheap := func(params, s, h string) string { return "$argon2id$v=19$" + params + "$" + s + "$" + h }
	tests := []struct {
		name string
		hash string
	}{
		{"empty", ""},
		{"plain text", "correct horse battery"},
		{"bcrypt", "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"},
		{"argon2i", strings.Replace(good, "argon2id", "argon2i", 1)},
		{"too few parts", "$argon2id$v=19$m=65536,t=3,p=2$" + salt},
		{"too many parts", good + "$extra"},
		{"wrong version", strings.Replace(good, "v=19", "v=16", 1)},
		{"non-numeric version", strings.Replace(good, "v=19", "v=x", 1)},
		{"garbage params", strings.Replace(good, parts[3], "garbage", 1)},
		{"negative memory", strings.Replace(good, parts[3], "m=-1,t=3,p=2", 1)},
		{"salt not base64", cheap("m=64,t=1,p=1", "!!!", sum)},
		{"hash not base64", cheap("m=64,t=1,p=1", salt, "!!!")},
		{"zero time", cheap("m=64,t=0,p=1", salt, sum)},
		{"zero threads", cheap("m=64,t=1,p=0", salt, sum)},
		{"empty hash", cheap("m=64,t=1,p=1", salt, "")},
		{"empty salt", cheap("m=64,t=1,p=1", "", sum)},
		{"absurd memory", cheap("m=4294967295,t=1,p=1", salt, sum)},
		{"short salt", cheap("m=64,t=1,p=1", base64.RawStdEncoding.EncodeToString([]byte("1234567")), sum)},
		{"short hash", cheap("m=64,t=1,p=1", salt, base64.RawStdEncoding.EncodeToString([]byte("abc")))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ok bool
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("CheckPassword(%q) panicked: %v", tt.hash, r)
					}
				}()
				ok, err = CheckPassword(tt.hash, "correct horse battery")
			}()
			if ok {
				t.Fatalf("CheckPassword(%q) accepted the password", tt.hash)
			}
			if err == nil {
				t.Fatalf("CheckPassword(%q): want an error", tt.hash)
			}
		})
	}
}

// A hash with other (valid) parameters is still checked with its own parameters.
func TestCheckPasswordOwnParameters(t *testing.T) {
	h, err := hashOnce()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(h, "$")
	// Same salt and sum, other memory: must not match.
	other := strings.Replace(h, parts[3], "m=32768,t=3,p=2", 1)
	ok, err := CheckPassword(other, "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatal("hash matched under other parameters: parameters are ignored")
	}
}

package secrets

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, MasterKeySize) }

func mustKeys(t *testing.T, master []byte) *Keys {
	t.Helper()
	k, err := NewKeys(master)
	if err != nil {
		t.Fatalf("NewKeys: %v", err)
	}
	return k
}

func TestParseMasterKey(t *testing.T) {
	key := make([]byte, MasterKeySize)
	for i := range key {
		key[i] = byte(i*7 + 250) // includes bytes that give '+', '/', '-', '_' in base64
	}
	tests := []struct {
		name string
		in   string
		want []byte // nil: expect ErrBadMasterKey
	}{
		{"hex lower", hex.EncodeToString(key), key},
		{"hex upper", strings.ToUpper(hex.EncodeToString(key)), key},
		{"hex with whitespace", "  " + hex.EncodeToString(key) + "\n", key},
		{"base64 std", base64.StdEncoding.EncodeToString(key), key},
		{"base64 raw std", base64.RawStdEncoding.EncodeToString(key), key},
		{"base64 url", base64.URLEncoding.EncodeToString(key), key},
		{"base64 raw url", base64.RawURLEncoding.EncodeToString(key), key},
		{"base64 with newline", base64.StdEncoding.EncodeToString(key) + "\n", key},
		{"empty", "", nil},
		{"whitespace only", " \n\t", nil},
		{"short hex", hex.EncodeToString(key[:31]), nil},
		{"long hex", hex.EncodeToString(append(append([]byte{}, key...), 1)), nil},
		{"short base64", base64.StdEncoding.EncodeToString(key[:16]), nil},
		{"long base64", base64.StdEncoding.EncodeToString(append(append([]byte{}, key...), 1, 2, 3)), nil},
		{"garbage", "not a key at all!", nil},
		{"64 chars non-hex non-base64", strings.Repeat("!", 64), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMasterKey(tt.in)
			if tt.want == nil {
				if !errors.Is(err, ErrBadMasterKey) {
					t.Fatalf("ParseMasterKey(%q) = %x, %v; want ErrBadMasterKey", tt.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMasterKey(%q): %v", tt.in, err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("ParseMasterKey(%q) = %x, want %x", tt.in, got, tt.want)
			}
		})
	}
}

func TestLoadOrCreateMasterKeyCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "master.key")
	key, err := LoadOrCreateMasterKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != MasterKeySize {
		t.Fatalf("key length %d, want %d", len(key), MasterKeySize)
	}
	if bytes.Equal(key, make([]byte, MasterKeySize)) {
		t.Fatal("key is all zeros")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("key file mode %o, want 600", perm)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseMasterKey(string(b))
	if err != nil || !bytes.Equal(parsed, key) {
		t.Fatalf("file content %q does not parse to the returned key (%v)", b, err)
	}

	// A second call reuses the file.
	again, err := LoadOrCreateMasterKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, key) {
		t.Fatal("second LoadOrCreateMasterKey returned a different key")
	}

	// Two different files get different keys.
	other, err := LoadOrCreateMasterKey(filepath.Join(t.TempDir(), "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other, key) {
		t.Fatal("two fresh master keys are equal")
	}
}

func TestLoadOrCreateMasterKeyExisting(t *testing.T) {
	want := testKey(0x42)
	for _, content := range []string{
		hex.EncodeToString(want),
		hex.EncodeToString(want) + "\n",
		base64.StdEncoding.EncodeToString(want) + "\n",
	} {
		path := filepath.Join(t.TempDir(), "master.key")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadOrCreateMasterKey(path)
		if err != nil {
			t.Fatalf("content %q: %v", content, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("content %q: got %x", content, got)
		}
		b, _ := os.ReadFile(path)
		if string(b) != content {
			t.Fatalf("existing file was rewritten: %q", b)
		}
	}
}

func TestLoadOrCreateMasterKeyBadExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "master.key")
	if err := os.WriteFile(path, []byte("nonsense\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateMasterKey(path); !errors.Is(err, ErrBadMasterKey) {
		t.Fatalf("got %v, want ErrBadMasterKey", err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "nonsense\n" {
		t.Fatal("a bad key file must not be overwritten")
	}
}

func TestLoadOrCreateMasterKeyUnreadable(t *testing.T) {
	// The path is a directory: reading fails with something other than
	// not-exist, which must be reported, not papered over with a new key.
	dir := t.TempDir()
	if _, err := LoadOrCreateMasterKey(dir); err == nil {
		t.Fatal("expected an error for a directory path")
	}
	// The parent is a regular file: the directory cannot be created.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateMasterKey(filepath.Join(file, "master.key")); err == nil {
		t.Fatal("expected an error when the parent is a regular file")
	}
}

// Many concurrent creators must all end up with the one key that is on disk.
func TestLoadOrCreateMasterKeyRace(t *testing.T) {
	for round := 0; round < 20; round++ {
		path := filepath.Join(t.TempDir(), "master.key")
		const n = 16
		keys := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				keys[i], errs[i] = LoadOrCreateMasterKey(path)
			}()
		}
		close(start)
		wg.Wait()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := ParseMasterKey(string(b))
		if err != nil {
			t.Fatalf("key file content %q: %v", b, err)
		}
		for i := 0; i < n; i++ {
			if errs[i] != nil {
				t.Fatalf("round %d: creator %d: %v", round, i, errs[i])
			}
			if !bytes.Equal(keys[i], onDisk) {
				t.Fatalf("round %d: creator %d got a key that is not the one on disk", round, i)
			}
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			names := []string{}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("round %d: directory holds %v, want only the key file", round, names)
		}
	}
}

func TestNewKeysBadLength(t *testing.T) {
	for _, n := range []int{0, 1, 16, 31, 33, 64} {
		if _, err := NewKeys(make([]byte, n)); !errors.Is(err, ErrBadMasterKey) {
			t.Errorf("NewKeys(%d bytes) err = %v, want ErrBadMasterKey", n, err)
		}
	}
}

func TestFingerprint(t *testing.T) {
	a1 := mustKeys(t, testKey(1))
	a2 := mustKeys(t, testKey(1))
	b := mustKeys(t, testKey(2))
	if a1.Fingerprint() != a2.Fingerprint() {
		t.Fatal("fingerprint not stable for the same master key")
	}
	if a1.Fingerprint() == b.Fingerprint() {
		t.Fatal("different master keys have the same fingerprint")
	}
	fp := a1.Fingerprint()
	if len(fp) != 16 {
		t.Fatalf("fingerprint %q: want 16 hex characters", fp)
	}
	if _, err := hex.DecodeString(fp); err != nil {
		t.Fatalf("fingerprint %q is not hex", fp)
	}
	if strings.Contains(hex.EncodeToString(testKey(1)), fp) {
		t.Fatal("fingerprint reveals the master key")
	}
}

func TestMAC(t *testing.T) {
	a := mustKeys(t, testKey(1))
	a2 := mustKeys(t, testKey(1))
	b := mustKeys(t, testKey(2))
	m := a.MAC("secret")
	if len(m) != 32 {
		t.Fatalf("MAC length %d, want 32", len(m))
	}
	if !Equal(m, a.MAC("secret")) || !Equal(m, a2.MAC("secret")) {
		t.Fatal("MAC is not deterministic for the same key and secret")
	}
	if Equal(m, a.MAC("secreT")) {
		t.Fatal("MACs of different secrets are equal")
	}
	if Equal(m, b.MAC("secret")) {
		t.Fatal("MACs under different master keys are equal")
	}
	if Equal(m, m[:31]) {
		t.Fatal("Equal accepted a truncated MAC")
	}
	// The MAC key is derived, not the master key itself.
	if Equal(m, (&Keys{mac: testKey(1)}).MAC("secret")) {
		t.Fatal("MAC uses the master key directly")
	}
}

func TestSealOpen(t *testing.T) {
	k := mustKeys(t, testKey(1))
	other := mustKeys(t, testKey(2))
	tests := []struct {
		name      string
		plaintext []byte
		aad       []byte
	}{
		{"empty", nil, []byte("conn_1")},
		{"short", []byte("sk-abc"), []byte("conn_1")},
		{"long", bytes.Repeat([]byte("x"), 10000), []byte("conn_2")},
		{"no aad", []byte("secret"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sealed := k.Seal(tt.plaintext, tt.aad)
			if len(tt.plaintext) > 3 && bytes.Contains(sealed, tt.plaintext) {
				t.Fatal("sealed value contains the plaintext")
			}
			got, err := k.Open(sealed, tt.aad)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, tt.plaintext) {
				t.Fatalf("Open = %q, want %q", got, tt.plaintext)
			}
			// A second Keys from the same master key opens it too.
			if got, err := mustKeys(t, testKey(1)).Open(sealed, tt.aad); err != nil || !bytes.Equal(got, tt.plaintext) {
				t.Fatalf("Open with re-derived keys: %q, %v", got, err)
			}
			// Another aad fails.
			if _, err := k.Open(sealed, append(append([]byte{}, tt.aad...), 'x')); !errors.Is(err, ErrOpen) {
				t.Fatalf("Open with another aad: err = %v, want ErrOpen", err)
			}
			// Another master key fails.
			if _, err := other.Open(sealed, tt.aad); !errors.Is(err, ErrOpen) {
				t.Fatalf("Open with another master key: err = %v, want ErrOpen", err)
			}
			// Every single-bit flip anywhere is detected.
			for i := 0; i < len(sealed); i += 1 + len(sealed)/64 {
				bad := append([]byte{}, sealed...)
				bad[i] ^= 0x01
				if _, err := k.Open(bad, tt.aad); !errors.Is(err, ErrOpen) {
					t.Fatalf("Open of ciphertext tampered at byte %d: err = %v, want ErrOpen", i, err)
				}
			}
			// Truncated and extended values fail, without panicking.
			for _, n := range []int{0, 1, 11, 12, 27, 28, len(sealed) - 1} {
				if n < 0 || n >= len(sealed) {
					continue
				}
				if _, err := k.Open(sealed[:n], tt.aad); !errors.Is(err, ErrOpen) {
					t.Fatalf("Open of %d-byte prefix: err = %v, want ErrOpen", n, err)
				}
			}
			if _, err := k.Open(append(append([]byte{}, sealed...), 0), tt.aad); !errors.Is(err, ErrOpen) {
				t.Fatalf("Open of extended value: err = %v, want ErrOpen", err)
			}
		})
	}
}

func TestSealNonceIsRandom(t *testing.T) {
	k := mustKeys(t, testKey(1))
	a := k.Seal([]byte("same"), []byte("aad"))
	b := k.Seal([]byte("same"), []byte("aad"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are identical: nonce reuse")
	}
	if bytes.Equal(a[:12], b[:12]) {
		t.Fatal("two seals share a nonce")
	}
}

func TestOpenNil(t *testing.T) {
	k := mustKeys(t, testKey(1))
	if _, err := k.Open(nil, nil); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open(nil) err = %v, want ErrOpen", err)
	}
}

// Cursor MACs are the same for every Keys of one master key (restarts,
// other nodes), differ between master keys, and use a key of their own.
func TestCursorMAC(t *testing.T) {
	a, a2, b := mustKeys(t, testKey(1)), mustKeys(t, testKey(1)), mustKeys(t, testKey(2))
	msg := []byte("usage/wrk_x\x00\x01id")
	if !Equal(a.CursorMAC(msg), a2.CursorMAC(msg)) {
		t.Fatal("one master key gave two cursor MACs")
	}
	if Equal(a.CursorMAC(msg), b.CursorMAC(msg)) {
		t.Fatal("two master keys gave one cursor MAC")
	}
	if Equal(a.CursorMAC(msg), a.MAC(string(msg))) {
		t.Fatal("cursor MACs share the secret MAC key")
	}
}

// MAC reuses its HMAC states: every call, from any goroutine, is the HMAC
// of its own secret alone.
func TestMACReused(t *testing.T) {
	k := mustKeys(t, testKey(7))
	want := func(s string) []byte {
		m := hmac.New(sha256.New, k.mac)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				s := strings.Repeat("s", (g*200+i)%300)
				if got := k.MAC(s); !bytes.Equal(got, want(s)) {
					t.Errorf("MAC(%q) = %x, want %x", s, got, want(s))
					return
				}
			}
		}()
	}
	wg.Wait()
}

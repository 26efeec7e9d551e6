// Package secrets holds the cryptography of agentgate: the master key and the
// keys derived from it, HMACs of key and token secrets, AES-256-GCM sealing of
// provider credentials, and random identifiers.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// MasterKeySize is the length in bytes of the master key.
const MasterKeySize = 32

// Keys are the keys derived from one master key. A Keys value is immutable and
// safe for concurrent use.
type Keys struct {
	mac    []byte      // HMAC key for key and token secrets
	cursor []byte      // HMAC key for list cursors
	aead   cipher.AEAD // AES-256-GCM for provider credentials
	id     string      // a fingerprint of the master key, safe to store

	// macs recycles keyed HMAC states (*macState) for MAC, which every
	// authenticated request computes: a fresh one costs several
	// allocations.
	macs sync.Pool
}

// macState is a keyed HMAC and a buffer for the secret it reads.
type macState struct {
	h   hash.Hash
	buf []byte
}

// ErrBadMasterKey is returned for a master key that cannot be parsed.
var ErrBadMasterKey = errors.New("master key must be 32 bytes, given as 64 hex characters or as base64")

// ParseMasterKey decodes a master key given as hex or base64 (standard or URL
// alphabet, padded or not).
func ParseMasterKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*MasterKeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == MasterKeySize {
			return b, nil
		}
	}
	return nil, ErrBadMasterKey
}

// LoadOrCreateMasterKey reads the master key file at path, or creates it with
// a fresh random key and mode 0600 when it does not exist.
func LoadOrCreateMasterKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return ParseMasterKey(string(b))
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading master key: %w", err)
	}
	key := make([]byte, MasterKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating master key directory: %w", err)
	}
	// Write the key to a temporary file and hard-link it into place: the link
	// fails if the key file exists, so two processes racing to create the key
	// cannot overwrite each other, and a reader never sees a partly written
	// file (as it could with O_EXCL create-then-write).
	f, err := os.CreateTemp(filepath.Dir(path), ".master-key-*")
	if err != nil {
		return nil, fmt.Errorf("creating master key file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("creating master key file: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing master key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return LoadOrCreateMasterKey(path)
		}
		return nil, fmt.Errorf("creating master key file: %w", err)
	}
	return key, nil
}

// NewKeys derives the working keys from a master key.
func NewKeys(master []byte) (*Keys, error) {
	if len(master) != MasterKeySize {
		return nil, ErrBadMasterKey
	}
	block, err := aes.NewCipher(derive(master, "agentgate/v1/credential-seal"))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Keys{
		mac:    derive(master, "agentgate/v1/secret-mac"),
		cursor: derive(master, "agentgate/v1/list-cursor"),
		aead:   aead,
		id:     hex.EncodeToString(derive(master, "agentgate/v1/key-id")[:8]),
	}, nil
}

func derive(master []byte, label string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// Fingerprint identifies the master key without revealing it. The store keeps
// it, so that a data directory opened with another master key is refused.
func (k *Keys) Fingerprint() string { return k.id }

// MAC returns the HMAC-SHA-256 of a secret. Only MACs of key and token secrets
// are ever stored.
func (k *Keys) MAC(secret string) []byte {
	st, _ := k.macs.Get().(*macState)
	if st == nil {
		st = &macState{h: hmac.New(sha256.New, k.mac)}
	}
	st.buf = append(st.buf[:0], secret...)
	st.h.Write(st.buf)
	sum := st.h.Sum(make([]byte, 0, sha256.Size))
	st.h.Reset()
	if cap(st.buf) <= 1024 {
		k.macs.Put(st)
	}
	return sum
}

// CursorMAC returns the HMAC-SHA-256 of a list cursor's contents, under a
// key of its own: cursors issued by one node are honoured by every node
// that shares the master key, and after a restart.
func (k *Keys) CursorMAC(msg []byte) []byte {
	m := hmac.New(sha256.New, k.cursor)
	m.Write(msg)
	return m.Sum(nil)
}

// Equal compares two MACs in constant time.
func Equal(a, b []byte) bool { return hmac.Equal(a, b) }

// Seal encrypts plaintext with AES-256-GCM; aad binds the ciphertext to its
// record (a connection id), so that it cannot be moved to another record.
func (k *Keys) Seal(plaintext, aad []byte) []byte {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return k.aead.Seal(nonce, nonce, plaintext, aad)
}

// ErrOpen is returned when a sealed value cannot be decrypted.
var ErrOpen = errors.New("sealed value cannot be decrypted with this master key")

// Open decrypts a value made by Seal with the same aad.
func (k *Keys) Open(sealed, aad []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n+k.aead.Overhead() {
		return nil, ErrOpen
	}
	out, err := k.aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

package store

import (
	"encoding/json"
	"errors"
)

// kvTxn is the ordered key-value transaction that the record logic (btx)
// is written over. Each backend implements it once; every record, index,
// uniqueness check and list order lives above it, so the backends behave
// the same.
//
// Keys are compared bytewise. Value slices handed to callbacks are valid
// only during the callback.
type kvTxn interface {
	// Get calls fn with the value of key, or returns ErrNotFound. A nil fn
	// only checks that the key exists.
	Get(key string, fn func(value []byte) error) error
	// Set writes key. The transaction keeps value: callers must not change it.
	Set(key string, value []byte) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(key string) error
	// Iterate calls fn for the keys of r in order until fn returns false or
	// an error. fn may call other methods of the same transaction (a backend
	// that cannot interleave reads buffers a page of keys first), but must
	// not write keys inside r.
	Iterate(r kvRange, fn func(key, value []byte) (bool, error)) error
}

// kvInserter is a kvTxn that can write a key that must be new without
// reading it first. The check may be deferred to the commit: a taken key
// then fails the whole transaction with ErrExists.
type kvInserter interface {
	Insert(key string, value []byte) error
}

// kvRange is a range of keys sharing a prefix.
type kvRange struct {
	// Prefix selects the keys that start with it.
	Prefix string
	// Start, when set, positions the iteration like a seek: going forward
	// it starts at the first key ≥ Start, in reverse at the last key ≤
	// Start. Start must begin with Prefix.
	Start string
	// Reverse iterates in descending key order.
	Reverse bool
	// KeysOnly leaves values out (fn gets a nil value).
	KeysOnly bool
}

// prefixEnd is the smallest key greater than every key that starts with
// prefix, or nil when there is none (prefix is empty or all 0xff bytes).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// errReadOnly is returned by a write in a read-only transaction.
var errReadOnly = errors.New("store: write in a read-only transaction")

// decodeInto returns a Get callback that unmarshals the value into v.
func decodeInto(v any) func([]byte) error {
	return func(b []byte) error { return json.Unmarshal(b, v) }
}

// copyInto returns a Get callback that copies the value into *dst.
func copyInto(dst *[]byte) func([]byte) error {
	return func(b []byte) error {
		*dst = append(make([]byte, 0, len(b)), b...)
		return nil
	}
}

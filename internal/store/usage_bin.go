package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/agentgate/agentgate/internal/money"
)

// The stored form of a usage record. Every gateway request writes one, and
// its bytes go through the store's log, memtable, flushes and compactions,
// and make up most of the store's growth: a usage record is written as a
// version byte and its fields as varints and length-prefixed strings, about
// a third of its JSON. The id and the workspace are not in the value: the
// key holds them (u/<ws>/<id>). Records written as JSON by earlier
// versions (a value that starts with '{') are read as they are.
//
// Version 1, in order: the time (Unix seconds, zigzag; nanoseconds; the
// zone's offset in seconds, zigzag, 0 for UTC), the strings member id,
// member kind, key id, token family, connection, format, operation, model,
// upstream model, request id and session, the tokens (input, cache read,
// cache write, output, reasoning: zigzag), the cost in picodollars
// (zigzag), the status (zigzag), a byte of flags (streamed, client
// disconnected, estimated), then the attempts: their count, and each one's
// connection, status (zigzag) and error. Strings are as encoding/json
// would give them back: bytes that are not UTF-8 become U+FFFD.
const usageBinV1 = 1

const (
	usageStreamed = 1 << iota
	usageClientDisconnected
	usageEstimated
)

// appendUsage appends u's stored form (without its id and workspace). A
// time the API could not show (a year outside 0–9999, which encoding/json
// refuses) is refused.
func appendUsage(b []byte, u *UsageRecord) ([]byte, error) {
	if y := u.Time.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("usage record time %v: year outside 0–9999", u.Time)
	}
	b = append(b, usageBinV1)
	b = binary.AppendVarint(b, u.Time.Unix())
	b = binary.AppendUvarint(b, uint64(u.Time.Nanosecond()))
	_, offset := u.Time.Zone() // 0 for UTC
	b = binary.AppendVarint(b, int64(offset))
	for _, s := range [...]string{u.MemberID, u.MemberKind, u.KeyID, u.FamilyID, u.Connection, u.Format,
		u.Operation, u.Model, u.UpstreamModel, u.RequestID, u.Session} {
		b = appendUsageString(b, s)
	}
	for _, n := range [...]int64{u.Tokens.Input, u.Tokens.CacheRead, u.Tokens.CacheWrite, u.Tokens.Output, u.Tokens.Reasoning,
		int64(u.Cost), int64(u.Status)} {
		b = binary.AppendVarint(b, n)
	}
	var flags byte
	if u.Streamed {
		flags |= usageStreamed
	}
	if u.ClientDisconnected {
		flags |= usageClientDisconnected
	}
	if u.Estimated {
		flags |= usageEstimated
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(u.Attempts)))
	for _, a := range u.Attempts {
		b = appendUsageString(b, a.Connection)
		b = binary.AppendVarint(b, int64(a.Status))
		b = appendUsageString(b, a.Error)
	}
	return b, nil
}

// appendUsageString appends s's length and bytes, each byte that is not
// part of UTF-8 replaced by U+FFFD as encoding/json replaces it.
func appendUsageString(b []byte, s string) []byte {
	if utf8.ValidString(s) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	var v []byte
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			v = utf8.AppendRune(v, utf8.RuneError)
		} else {
			v = append(v, s[i:i+size]...)
		}
		i += size
	}
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

var errUsageRecord = errors.New("malformed usage record")

// usageDecoder reads a stored usage record's fields in order; the first
// fault sticks.
type usageDecoder struct {
	b   []byte
	err error
}

// varint reads a zigzag varint (binary.AppendVarint's).
func (d *usageDecoder) varint() int64 {
	u := d.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (d *usageDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errUsageRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *usageDecoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errUsageRecord
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// decodeUsage reads a stored usage record into u (its id and workspace are
// the key's, set by the caller): the binary form, or JSON.
func decodeUsage(v []byte, u *UsageRecord) error {
	if len(v) == 0 {
		return errUsageRecord
	}
	if v[0] == '{' {
		return json.Unmarshal(v, u)
	}
	if v[0] != usageBinV1 {
		return fmt.Errorf("usage record of an unknown version %d", v[0])
	}
	d := usageDecoder{b: v[1:]}
	sec, nsec, offset := d.varint(), d.uvarint(), d.varint()
	if d.err == nil && (nsec >= 1e9 || offset <= -24*3600 || offset >= 24*3600) {
		d.err = errUsageRecord
	}
	u.Time = time.Unix(sec, int64(nsec)).UTC()
	if offset != 0 {
		u.Time = u.Time.In(time.FixedZone("", int(offset)))
	}
	for _, s := range [...]*string{&u.MemberID, &u.MemberKind, &u.KeyID, &u.FamilyID, &u.Connection, &u.Format,
		&u.Operation, &u.Model, &u.UpstreamModel, &u.RequestID, &u.Session} {
		*s = d.str()
	}
	u.Tokens = Tokens{Input: d.varint(), CacheRead: d.varint(), CacheWrite: d.varint(), Output: d.varint(), Reasoning: d.varint()}
	u.Cost = money.Pico(d.varint())
	u.Status = int(d.varint())
	if d.err == nil && len(d.b) == 0 {
		d.err = errUsageRecord
	}
	if d.err != nil {
		return d.err
	}
	flags := d.b[0]
	d.b = d.b[1:]
	u.Streamed, u.ClientDisconnected, u.Estimated = flags&usageStreamed != 0, flags&usageClientDisconnected != 0, flags&usageEstimated != 0
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) { // each attempt takes at least a byte
		d.err = errUsageRecord
	}
	u.Attempts = nil
	for i := uint64(0); i < n && d.err == nil; i++ {
		u.Attempts = append(u.Attempts, Attempt{Connection: d.str(), Status: int(d.varint()), Error: d.str()})
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errUsageRecord
	}
	return d.err
}

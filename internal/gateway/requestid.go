package gateway

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
)

// Request ids. A request's id is in its usage record (request_id) and in
// its access log entry (the agentgate object's request_id). It only has to
// be unique, not unguessable: an id is 16 bytes, 8 drawn at random when the
// process starts and 8 counting its requests, written like a UUID
// (8-4-4-4-12 hex digits). Drawing 16 random bytes per request instead
// (Caddy's {http.request.uuid}) costs a system random read, a value in the
// request's vars and an access log field per request.
var requestIDs struct {
	prefix [8]byte
	n      atomic.Uint64
}

func init() {
	if _, err := rand.Read(requestIDs.prefix[:]); err != nil {
		panic("gateway: no random bytes for request ids: " + err.Error())
	}
}

// NewRequestID returns a request id no other request of any process is
// likely to share (the processes' random prefixes differ) and no other
// request of this process shares.
func NewRequestID() string {
	var raw [16]byte
	copy(raw[:8], requestIDs.prefix[:])
	binary.BigEndian.PutUint64(raw[8:], requestIDs.n.Add(1))
	const hex = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range raw {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hex[c>>4], hex[c&15]
		j += 2
	}
	return string(b[:])
}

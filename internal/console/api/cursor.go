package api

import (
	"crypto/hmac"
	"encoding/base64"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/secrets"
)

// List cursors are opaque: base64url of a version byte, the position (the
// id of the last item of the previous page) and a truncated HMAC of both
// together with the list's scope, keyed from the master key
// (secrets.Keys.CursorMAC). So a cursor survives restarts and is honoured
// by every node sharing the master key, but only by the list that issued
// it: anything else — garbage, a truncated or altered cursor, one of
// another list, workspace or service account — is 400 InvalidCursor
// rather than a silently wrong page.
const (
	cursorVersion = 1
	cursorMACSize = 16
)

// Scopes of the lists: the list's name and whose list it is. Ids never
// hold a slash.
func scopeOf(list string, owners ...string) string {
	s := list
	for _, o := range owners {
		s += "/" + o
	}
	return s
}

var cursorEncoding = base64.RawURLEncoding.Strict()

// encodeCursor issues the cursor of the page after position after.
func encodeCursor(keys *secrets.Keys, scope, after string) string {
	b := make([]byte, 0, 1+len(after)+cursorMACSize)
	b = append(b, cursorVersion)
	b = append(b, after...)
	b = append(b, cursorMAC(keys, scope, b)...)
	return cursorEncoding.EncodeToString(b)
}

// decodeCursor returns the position of a cursor issued by encodeCursor for
// the same scope.
func decodeCursor(keys *secrets.Keys, scope, c string) (string, error) {
	b, err := cursorEncoding.DecodeString(c)
	if err != nil || len(b) < 1+cursorMACSize || b[0] != cursorVersion {
		return "", invalidCursor()
	}
	body, mac := b[:len(b)-cursorMACSize], b[len(b)-cursorMACSize:]
	if !hmac.Equal(mac, cursorMAC(keys, scope, body)) {
		return "", invalidCursor()
	}
	return string(body[1:]), nil
}

func cursorMAC(keys *secrets.Keys, scope string, body []byte) []byte {
	msg := make([]byte, 0, len(scope)+1+len(body))
	msg = append(msg, scope...)
	msg = append(msg, 0)
	msg = append(msg, body...)
	return keys.CursorMAC(msg)[:cursorMACSize]
}

func invalidCursor() error {
	return apierr.New(400, "InvalidCursor", "the cursor was not issued by this list: use next_cursor of the previous page as it is, or start without one")
}

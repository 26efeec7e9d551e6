package formats

import (
	"net/http"
	"slices"
	"strings"
)

// Supports reports whether connections of a kind speak format f.
func Supports(kind string, f Format) bool { return f.Valid() && registry[f].serves(kind) }

// OfKind is the format whose envelope a connection's errors use: f when
// the connection serves it, else the kind's own (Chat for a kind that has
// none registered).
func OfKind(kind string, f Format) Format {
	if Supports(kind, f) {
		return f
	}
	return nativeOf(kind)
}

// nativeOf is the first registered format native to a kind, or Chat.
func nativeOf(kind string) Format {
	for _, f := range All() {
		if registry[f].nativeTo(kind) {
			return f
		}
	}
	return Chat
}

// SetCredential puts the provider credential in the native slot of the
// connection kind (and the headers that slot requires, when missing).
func SetCredential(h http.Header, kind, credential string) {
	registry[nativeOf(kind)].setCredential(h, credential)
}

// CredentialSlot names where SetCredential puts a connection kind's
// provider credential, e.g. "Authorization: Bearer" or "X-Api-Key". Two
// kinds with the same slot send a credential to a provider the same way.
func CredentialSlot(kind string) string {
	const probe = "\x00probe"
	h := http.Header{}
	SetCredential(h, kind, probe)
	var slots []string
	for name, vs := range h {
		for _, v := range vs {
			switch {
			case v == probe:
				slots = append(slots, name)
			case strings.HasSuffix(v, " "+probe):
				slots = append(slots, name+": "+strings.TrimSuffix(v, " "+probe))
			}
		}
	}
	slices.Sort(slots)
	return strings.Join(slots, ", ")
}

// ClientCredentialHeaders are the headers a client may carry its workspace
// key in: Authorization, then each format's own key header in registration
// order. All are removed before forwarding.
var ClientCredentialHeaders = clientCredentialHeaders()

func clientCredentialHeaders() []string {
	hs := []string{"Authorization"}
	for _, f := range All() {
		if h, _ := registry[f].keySlots(); h != "" {
			hs = append(hs, http.CanonicalHeaderKey(h))
		}
	}
	return hs
}

// QueryKey is the query parameter a client may send its key in, for a
// format whose key slots include it.
const QueryKey = "key"

// ClientCredential returns the workspace credential of a request, read
// from every slot a client may carry it in: each Authorization value that
// is a bearer token, each value of the formats' key headers, and each
// ?key= value (queryKeys, as parsed from the query). A blank value is no
// credential. cred is the first credential found in that order; conflict
// reports that two slots, or two values of one slot, carry credentials
// that differ (compared in constant time): the request is ambiguous and
// must be refused whichever of them is valid. The same credential in
// several slots is no conflict (some SDKs send both Authorization and
// their own key header). A request with one credential costs no
// comparison and no allocation.
func ClientCredential(h http.Header, queryKeys []string) (cred string, conflict bool) {
	for _, v := range h["Authorization"] {
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			cred, conflict = addCredential(cred, conflict, strings.TrimSpace(v[7:]))
		}
	}
	for _, name := range ClientCredentialHeaders[1:] {
		for _, v := range h[name] {
			cred, conflict = addCredential(cred, conflict, strings.TrimSpace(v))
		}
	}
	for _, v := range queryKeys {
		cred, conflict = addCredential(cred, conflict, v)
	}
	return cred, conflict
}

// addCredential adds the credential v of one more slot to those found so
// far: the first becomes cred, any later one that differs is a conflict.
func addCredential(cred string, conflict bool, v string) (string, bool) {
	switch {
	case v == "":
	case cred == "":
		cred = v
	case !SameCredential(cred, v):
		conflict = true
	}
	return cred, conflict
}

// SameCredential reports whether a and b are the same credential, in time
// that depends on their lengths only, never on where they first differ.
func SameCredential(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var d byte
	for i := 0; i < len(a); i++ {
		d |= a[i] ^ b[i]
	}
	return d == 0
}

// CredentialFormat is the format whose SDK sends a credential the way this
// request does, for errors answered before the path or the connection
// tells: the format whose key header carries it (?key= is Google's); a
// bearer token, or no credential, is Chat's unless a header marks another
// format's client (anthropic-version: Anthropic clients that authenticate
// with a bearer token). Call it before the credentials are removed.
func CredentialFormat(h http.Header, queryKey string) Format {
	bearer := false
	if v := h.Get("Authorization"); len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		bearer = true
	}
	if !bearer {
		for _, f := range All() {
			if k, _ := registry[f].keySlots(); k != "" && h.Get(k) != "" {
				return f
			}
		}
		for _, f := range All() {
			if _, q := registry[f].keySlots(); q && queryKey != "" {
				return f
			}
		}
	}
	for _, f := range All() {
		if registry[f].claims(h) {
			return f
		}
	}
	return Chat
}

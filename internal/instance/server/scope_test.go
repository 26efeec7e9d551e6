package server

import (
	"strings"
	"testing"
	"time"
)

// TestScopedToken: a location-scoped token names its location, fails once
// expired or altered, and is no instance credential (with or without a
// password).
func TestScopedToken(t *testing.T) {
	tok := ScopedToken("/srv/a", time.Hour)
	if d, ok := scopedDir(tok, time.Now()); !ok || d != "/srv/a" {
		t.Fatalf("%q %v", d, ok)
	}
	if _, ok := scopedDir(tok, time.Now().Add(2*time.Hour)); ok {
		t.Fatal("an expired token passed")
	}
	other := ScopedToken("/srv/b", time.Hour)
	parts := strings.Split(tok, ".")
	forged := strings.Join([]string{parts[0], parts[1], strings.Split(other, ".")[2], parts[3]}, ".")
	if _, ok := scopedDir(forged, time.Now()); ok {
		t.Fatal("a token with another directory passed")
	}
	for _, bad := range []string{"", "loc1.", "loc1.1.2.3.4", "loc1.x.y.z", tok + "x"} {
		if _, ok := scopedDir(bad, time.Now()); ok {
			t.Fatalf("%q passed", bad)
		}
	}
	a := &Auth{Password: "pw"}
	if a.validSecret("opencode", tok) || a.ValidToken(tok) {
		t.Fatal("a scoped token is an instance credential")
	}
}

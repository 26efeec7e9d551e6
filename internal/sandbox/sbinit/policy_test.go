package sbinit

import (
	"reflect"
	"testing"
)

func TestPolicyRoundTrip(t *testing.T) {
	p := &Policy{Argv: []string{"/bin/bash", "-c", "echo 'a b'; ls\n"}, Dir: "/srv/p q", Env: []string{"PATH=/usr/bin", "X=1=2"},
		Writable: []string{"/srv/p q"}, ReadOnly: []string{"/opt/go"}, Protect: []string{"/srv/p q/.git/hooks"},
		MaskFiles: []string{"/srv/p q/.env"}, MaskDirs: []string{"/srv/p q/.ssh"}, Hidden: []string{"/var/lib/agentgate"},
		Network: true, CPU: 600, Files: 4096}
	got, err := Decode(p.Encode())
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, got, p)
	}
	for _, bad := range [][]byte{[]byte("a/bin/true"), []byte("z1\x00"), []byte("c12x\x00a/bin/true\x00"), []byte("\x00"), nil,
		[]byte("c99999999999999999999\x00a/x\x00")} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
	if p, err := Decode((&Policy{Probe: true}).Encode()); err != nil || !p.Probe {
		t.Fatalf("probe: %v %+v", err, p)
	}
}

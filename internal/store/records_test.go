package store

import (
	"testing"
	"time"
)

func TestAPIKeyUsable(t *testing.T) {
	exp := t0.Add(time.Hour)
	tests := []struct {
		name string
		k    APIKey
		now  time.Time
		want bool
	}{
		{"plain", APIKey{}, t0, true},
		{"before expiry", APIKey{ExpiresAt: &exp}, t0, true},
		{"at expiry", APIKey{ExpiresAt: &exp}, exp, false},
		{"after expiry", APIKey{ExpiresAt: &exp}, exp.Add(time.Second), false},
		{"revoked", APIKey{RevokedAt: &t0}, t0, false},
	}
	for _, tt := range tests {
		if got := tt.k.Usable(tt.now); got != tt.want {
			t.Errorf("%s: Usable = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestValidRoleAndKind(t *testing.T) {
	for _, r := range []string{RoleOwner, RoleAdmin, RoleMember} {
		if !ValidRole(r) {
			t.Errorf("ValidRole(%q) = false", r)
		}
	}
	for _, r := range []string{"", "Owner", "root", "members"} {
		if ValidRole(r) {
			t.Errorf("ValidRole(%q) = true", r)
		}
	}
	for _, k := range []string{KindOpenAI, KindAnthropic, KindGoogle, KindOpenAICompatible} {
		if !ValidKind(k) {
			t.Errorf("ValidKind(%q) = false", k)
		}
	}
	for _, k := range []string{"", "OpenAI", "azure", "openai-compat"} {
		if ValidKind(k) {
			t.Errorf("ValidKind(%q) = true", k)
		}
	}
}

func TestFoldEmail(t *testing.T) {
	for in, want := range map[string]string{
		"a@b.c":          "a@b.c",
		" A@B.C\n":       "a@b.c",
		"MiXeD@Case.Org": "mixed@case.org",
		"":               "",
	} {
		if got := FoldEmail(in); got != want {
			t.Errorf("FoldEmail(%q) = %q, want %q", in, got, want)
		}
	}
}

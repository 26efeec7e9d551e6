package api_test

import (
	"strings"
	"testing"
)

// The service account of an instance server shows as the instance's in
// the Console API's views; other accounts have no instance field.
func TestInstanceServiceAccountView(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	im, err := e.svc.EnsureInstanceMember(ctx, f.ws, "default")
	if err != nil {
		t.Fatal(err)
	}
	r := e.do(req{method: "GET", path: "/api/v1/service-accounts/" + im.Account.ID, cred: f.ownTok})
	v, _ := r.json["data"].(map[string]any)
	if r.status != 200 || v["instance"] != "default" || v["name"] != "instance default" || v["created_by"] != "config" {
		t.Fatalf("instance's account: %d %s", r.status, r.raw)
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts/" + f.sa, cred: f.ownTok})
	if r.status != 200 || strings.Contains(r.raw, `"instance"`) {
		t.Fatalf("another account: %d %s", r.status, r.raw)
	}
	r = e.do(req{method: "GET", path: "/api/v1/service-accounts", cred: f.ownTok})
	if r.status != 200 || !strings.Contains(r.raw, `"instance":"default"`) {
		t.Fatalf("list: %d %s", r.status, r.raw)
	}
}

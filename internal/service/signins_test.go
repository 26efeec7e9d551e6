package service_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/service"
)

func TestSignIns(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	e.clk.Advance(time.Minute) // the CLI signs in after the fixture's sign-ins
	laptop, err := e.svc.IssuePersonToken(ctx, f.member, f.ws, "opencode-cli")
	noErr(t, "issue", err)
	me := e.principal(f.memberTok, "")
	list, err := e.svc.SignIns(ctx, me)
	noErr(t, "SignIns", err)
	if len(list) != 2 || list[0].ID != laptop.FamilyID || list[0].ClientID != "opencode-cli" || list[0].Current || !list[1].Current {
		t.Fatalf("sign-ins %+v", list)
	}
	// Another person's sign-in is not there for them: 404, and it stays.
	_, err = e.svc.SignIns(ctx, e.principal(f.adminTok, ""))
	noErr(t, "admin SignIns", err)
	wantErr(t, "revoke another's", e.svc.RevokeSignIn(ctx, e.principal(f.adminTok, ""), laptop.FamilyID), http.StatusNotFound, "SignInNotFound")
	e.principal(laptop.AccessToken, "")
	// Revoking works at once: the very next request with it is refused.
	noErr(t, "revoke", e.svc.RevokeSignIn(ctx, me, laptop.FamilyID))
	if _, err := e.svc.Authenticate(ctx, laptop.AccessToken, ""); err == nil {
		t.Fatal("a revoked sign-in still authenticates")
	}
	noErr(t, "revoke twice", e.svc.RevokeSignIn(ctx, me, laptop.FamilyID))
	wantErr(t, "unknown", e.svc.RevokeSignIn(ctx, me, "tfm_nope"), http.StatusNotFound, "SignInNotFound")
	if list, _ := e.svc.SignIns(ctx, me); len(list) != 1 {
		t.Fatalf("after revoking: %+v", list)
	}
	// Expired sign-ins are not listed.
	e.clk.Advance(48 * time.Hour * 365)
	if list, _ := e.svc.SignIns(ctx, &service.Principal{Kind: service.KindPerson, PersonID: f.member, Workspace: f.ws, Role: "member"}); len(list) != 0 {
		t.Fatalf("expired listed: %+v", list)
	}
	// A key has no sign-ins.
	_, err = e.svc.SignIns(ctx, e.principal(f.all.Key, ""))
	wantErr(t, "key", err, http.StatusForbidden, "Forbidden")
}

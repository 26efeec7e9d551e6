package service_test

import (
	"net/http"
	"sort"
	"sync"
	"testing"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func roles(t *testing.T, e *env, ws string) map[string]string {
	t.Helper()
	ms, err := e.svc.Members(ctx, service.Operator(ws))
	noErr(t, "Members", err)
	out := map[string]string{}
	for _, m := range ms {
		out[m.MemberID] = m.Role
	}
	return out
}

func TestLastOwner(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	owner := e.principal(f.ownTok, "")
	op := service.Operator(f.ws)

	for _, p := range []*service.Principal{owner, op} {
		for _, role := range []string{store.RoleAdmin, store.RoleMember} {
			_, err := e.svc.SetRole(ctx, p, f.owner, role)
			wantErr(t, p.Actor()+" demoting the last owner to "+role, err, 409, "Conflict")
		}
		wantErr(t, p.Actor()+" removing the last owner", e.svc.RemoveMember(ctx, p, f.owner), 409, "Conflict")
	}
	// Setting the last owner to owner again is no demotion.
	_, err := e.svc.SetRole(ctx, owner, f.owner, store.RoleOwner)
	noErr(t, "owner to owner", err)

	// A second owner makes demotion possible, once.
	second := e.person()
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{PersonID: second, Role: store.RoleOwner})
	noErr(t, "owner adds an owner", err)
	secondP := e.principal(e.token(second, f.ws), "")
	mv, err := e.svc.SetRole(ctx, secondP, f.owner, store.RoleAdmin)
	noErr(t, "demote one of two owners", err)
	if mv.Role != store.RoleAdmin || mv.MemberID != f.owner {
		t.Fatalf("SetRole answer %+v", mv)
	}
	_, err = e.svc.SetRole(ctx, secondP, second, store.RoleMember)
	wantErr(t, "the new last owner demoting themself", err, 409, "Conflict")
	wantErr(t, "removing the new last owner", e.svc.RemoveMember(ctx, op, second), 409, "Conflict")
	if r := roles(t, e, f.ws); r[second] != store.RoleOwner || r[f.owner] != store.RoleAdmin {
		t.Fatalf("roles after the changes: %v", r)
	}
}

func TestAdminsCannotTouchOwners(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	owner := e.principal(f.ownTok, "")
	member := e.principal(f.memberTok, "")
	other := e.person()
	// Two owners, so that 409 (last owner) cannot mask a missing 403.
	owner2 := e.person(f.ws, store.RoleOwner)

	for _, role := range []string{store.RoleAdmin, store.RoleMember, store.RoleOwner} {
		_, err := e.svc.SetRole(ctx, admin, owner2, role)
		wantErr(t, "admin changes an owner to "+role, err, 403, "Forbidden")
	}
	wantErr(t, "admin removes an owner", e.svc.RemoveMember(ctx, admin, owner2), 403, "Forbidden")
	_, err := e.svc.SetRole(ctx, admin, f.member, store.RoleOwner)
	wantErr(t, "admin promotes to owner", err, 403, "Forbidden")
	_, err = e.svc.SetRole(ctx, admin, f.admin, store.RoleOwner)
	wantErr(t, "admin promotes themself to owner", err, 403, "Forbidden")
	_, err = e.svc.AddMember(ctx, admin, service.NewMember{PersonID: other, Role: store.RoleOwner})
	wantErr(t, "admin adds an owner", err, 403, "Forbidden")
	if r := roles(t, e, f.ws); r[owner2] != store.RoleOwner || r[f.member] != store.RoleMember || r[f.admin] != store.RoleAdmin {
		t.Fatalf("roles changed by refused calls: %v", r)
	}
	if _, ok := roles(t, e, f.ws)[other]; ok {
		t.Fatal("refused AddMember added the person")
	}

	// Members cannot manage members at all.
	_, err = e.svc.SetRole(ctx, member, f.member, store.RoleAdmin)
	wantErr(t, "member promotes themself", err, 403, "Forbidden")
	_, err = e.svc.AddMember(ctx, member, service.NewMember{PersonID: other, Role: store.RoleMember})
	wantErr(t, "member adds", err, 403, "Forbidden")
	_, err = e.svc.Members(ctx, member)
	wantErr(t, "member lists members", err, 403, "Forbidden")
	// Keys never manage members, even All keys.
	allKey := e.principal(f.all.Key, "")
	_, err = e.svc.AddMember(ctx, allKey, service.NewMember{PersonID: other, Role: store.RoleMember})
	wantErr(t, "All key adds", err, 403, "Forbidden")
	wantErr(t, "All key removes", e.svc.RemoveMember(ctx, allKey, f.member), 403, "Forbidden")

	// Admins manage non-owners.
	_, err = e.svc.AddMember(ctx, admin, service.NewMember{PersonID: other, Role: store.RoleMember})
	noErr(t, "admin adds a member", err)
	_, err = e.svc.SetRole(ctx, admin, other, store.RoleAdmin)
	noErr(t, "admin promotes to admin", err)
	noErr(t, "admin removes an admin", e.svc.RemoveMember(ctx, admin, other))

	// Owners do everything.
	_, err = e.svc.SetRole(ctx, owner, f.member, store.RoleOwner)
	noErr(t, "owner promotes to owner", err)
	_, err = e.svc.SetRole(ctx, owner, owner2, store.RoleMember)
	noErr(t, "owner demotes an owner", err)
	noErr(t, "owner removes an owner", e.svc.RemoveMember(ctx, owner, f.member))
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{PersonID: other, Role: store.RoleOwner})
	noErr(t, "owner adds an owner", err)
	want := map[string]string{f.owner: store.RoleOwner, f.admin: store.RoleAdmin, owner2: store.RoleMember, other: store.RoleOwner}
	if got := roles(t, e, f.ws); len(got) != len(want) {
		t.Fatalf("roles %v, want %v", got, want)
	} else {
		for id, r := range want {
			if got[id] != r {
				t.Fatalf("roles %v, want %v", got, want)
			}
		}
	}
}

func TestAddMember(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	owner := e.principal(f.ownTok, "")
	_, err := e.svc.AddMember(ctx, owner, service.NewMember{PersonID: f.member, Role: store.RoleAdmin})
	wantErr(t, "adding an existing member", err, 409, "Conflict")
	if roles(t, e, f.ws)[f.member] != store.RoleMember {
		t.Fatal("a refused AddMember changed the existing role")
	}
	other := e.person()
	var email string
	e.view(func(tx store.Tx) error { p, err := tx.Person(other); email = p.Email; return err })
	mv, err := e.svc.AddMember(ctx, owner, service.NewMember{Email: email, Role: store.RoleMember})
	noErr(t, "add by email", err)
	if mv.MemberID != other || mv.Role != store.RoleMember || mv.Email != email {
		t.Fatalf("AddMember answer %+v", mv)
	}
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{Email: email, Role: store.RoleMember})
	wantErr(t, "adding again by email", err, 409, "Conflict")
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{PersonID: "usr_nope", Role: store.RoleMember})
	wantErr(t, "unknown person", err, 404, "PersonNotFound")
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{PersonID: other, Email: email, Role: store.RoleMember})
	wantErr(t, "both id and email", err, 400, "InvalidRequest")
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{Role: store.RoleMember})
	wantErr(t, "neither id nor email", err, 400, "InvalidRequest")
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{PersonID: e.person(), Role: "root"})
	wantErr(t, "bad role", err, 400, "InvalidRequest")
	_, err = e.svc.SetRole(ctx, owner, "usr_nope", store.RoleAdmin)
	wantErr(t, "SetRole of a non-member", err, 404, "MemberNotFound")
	wantErr(t, "RemoveMember of a non-member", e.svc.RemoveMember(ctx, owner, "usr_nope"), 404, "MemberNotFound")
}

func TestRemoveMemberRevokesBoundSignIns(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("A")
	b := e.workspace("B")
	owner := e.principal(f.ownTok, "")
	e.update(func(tx store.Tx) error {
		return tx.PutMember(&store.Member{Workspace: b, PersonID: f.member, Role: store.RoleMember, Created: t0})
	})
	boundA := f.memberTok
	boundA2 := e.token(f.member, f.ws)
	boundB := e.token(f.member, b)
	unbound := e.token(f.member, "")
	for _, c := range []struct{ tok, org string }{{boundA, ""}, {boundA2, ""}, {boundB, ""}, {unbound, f.ws}, {unbound, b}} {
		e.principal(c.tok, c.org)
	}

	noErr(t, "RemoveMember", e.svc.RemoveMember(ctx, owner, f.member))

	for _, tok := range []string{boundA, boundA2} {
		_, err := e.svc.Authenticate(ctx, tok, "")
		wantErr(t, "token bound to the workspace left", err, 401, "Unauthorized")
	}
	_, err := e.svc.Authenticate(ctx, unbound, f.ws)
	wantErr(t, "unbound token naming the workspace left", err, 403, "Forbidden")
	// Sign-ins for other workspaces are not touched.
	if p := e.principal(boundB, ""); p.Workspace != b {
		t.Fatalf("token bound to B: %+v", p)
	}
	e.principal(unbound, b)
	// The families are revoked in the store, not just unusable for now.
	e.view(func(tx store.Tx) error {
		fams, err := tx.TokenFamilies(f.member)
		for _, fam := range fams {
			if (fam.Workspace == f.ws) != (fam.RevokedAt != nil) {
				t.Errorf("family bound to %q: revoked_at %v", fam.Workspace, fam.RevokedAt)
			}
		}
		return err
	})
	// Rejoining does not bring old sign-ins back.
	_, err = e.svc.AddMember(ctx, owner, service.NewMember{PersonID: f.member, Role: store.RoleMember})
	noErr(t, "re-add", err)
	_, err = e.svc.Authenticate(ctx, boundA, "")
	wantErr(t, "old bound token after rejoining", err, 401, "Unauthorized")
	e.principal(unbound, f.ws)
}

// TestConcurrentDemotionOfTheLastTwoOwners: each of two owners demotes the
// other at the same time. Exactly one may win; the workspace keeps an owner.
func TestConcurrentDemotionOfTheLastTwoOwners(t *testing.T) {
	e := newEnv(t)
	for round := 0; round < 6; round++ {
		ws := e.workspace("race")
		o1 := e.person(ws, store.RoleOwner)
		o2 := e.person(ws, store.RoleOwner)
		p1 := e.principal(e.token(o1, ws), "")
		p2 := e.principal(e.token(o2, ws), "")
		type call struct {
			by     *service.Principal
			target string
			remove bool
		}
		calls := []call{{p1, o2, false}, {p2, o1, false}}
		if round%2 == 1 { // odd rounds: one demotes, the other removes
			calls[1].remove = true
		}
		start := make(chan struct{})
		errs := make([]error, len(calls))
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if c.remove {
					errs[i] = e.svc.RemoveMember(ctx, c.by, c.target)
				} else {
					_, errs[i] = e.svc.SetRole(ctx, c.by, c.target, store.RoleMember)
				}
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if apierr.As(err).Status != http.StatusConflict {
				t.Fatalf("round %d: %v, want 409", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of 2 concurrent demotions succeeded (errors %v), want exactly 1", round, ok, errs)
		}
		r := roles(t, e, ws)
		var owners []string
		for id, role := range r {
			if role == store.RoleOwner {
				owners = append(owners, id)
			}
		}
		sort.Strings(owners)
		if len(owners) != 1 {
			t.Fatalf("round %d: owners %v, want exactly one", round, owners)
		}
	}
}

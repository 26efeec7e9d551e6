package service_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// malformed returns credentials that ParseToken must refuse: wrong shape,
// unknown prefix, bad characters, bad checksum.
func malformed(valid string) map[string]string {
	flip := func(s string, i int) string {
		c := byte('A')
		if s[i] == 'A' {
			c = 'B'
		}
		return s[:i] + string(c) + s[i+1:]
	}
	return map[string]string{
		"empty":                    "",
		"garbage":                  "garbage",
		"bearer word":              "Bearer " + valid,
		"too short":                valid[:len(valid)-1],
		"too long":                 valid + "A",
		"unknown prefix":           forge("ag_xx_", keyID(valid), keySecret(valid)),
		"no ag prefix":             "zz" + valid[2:],
		"bad separator":            valid[:6+secrets.IDLen] + "-" + valid[6+secrets.IDLen+1:],
		"non-base62 id":            forge("ag_sk_", "abc-def_ghi!", keySecret(valid)),
		"non-base62 secret":        forge("ag_sk_", keyID(valid), "+"+keySecret(valid)[1:]),
		"bad checksum":             flip(valid, len(valid)-1),
		"secret changed":           flip(valid, 6+secrets.IDLen+5),
		"id changed":               flip(valid, 8),
		"whitespace":               " " + valid[1:],
		"lower-cased":              strings.ToLower(valid),
		"access prefix, stale crc": strings.Replace(valid, "ag_sk_", "ag_at_", 1),
		"unicode in the body":      valid[:20] + "é" + valid[22:],
	}
}

func TestAuthenticateMalformedNeverTouchesTheStore(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	bad := malformed(f.all.Key)

	// With the store open: 401.
	for name, cred := range bad {
		if cred == f.all.Key {
			t.Fatalf("%s: the malformed variant equals the valid key", name)
		}
		_, err := e.svc.Authenticate(ctx, cred, f.ws)
		wantErr(t, "open store, "+name, err, http.StatusUnauthorized, "Unauthorized")
	}

	// With the store closed, a well-formed credential cannot be checked (so
	// any answer but success is fine), while every malformed one is still a
	// clean 401: they were rejected before any store read.
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Authenticate(ctx, f.all.Key, ""); err == nil || apierr.As(err).Status == http.StatusUnauthorized {
		t.Fatalf("well-formed key on a closed store: %v; the test needs a store read to fail differently from 401", err)
	}
	for name, cred := range bad {
		_, err := e.svc.Authenticate(ctx, cred, f.ws)
		wantErr(t, "closed store, "+name, err, http.StatusUnauthorized, "Unauthorized")
	}
}

func TestAuthenticateKey(t *testing.T) {
	e := newEnv(t)
	a := e.fixture("A")
	b := e.fixture("B")

	auth := func(cred, org string) error {
		_, err := e.svc.Authenticate(ctx, cred, org)
		return err
	}

	// The valid key, with no x-org-id and with its own.
	for _, org := range []string{"", a.ws} {
		p := e.principal(a.all.Key, org)
		if p.Kind != service.KindServiceKey || p.Workspace != a.ws || p.KeyID != a.all.ID || p.ServiceAccount != a.sa ||
			p.Permission != store.PermissionAll || p.MemberID() != a.sa {
			t.Fatalf("principal with x-org-id %q: %+v", org, p)
		}
	}

	wantErr(t, "unknown id, valid checksum", auth(forge(secrets.PrefixServiceKey, secrets.RandomString(12), secrets.RandomString(32)), ""), 401, "Unauthorized")
	unknown, _ := secrets.NewToken(secrets.PrefixServiceKey)
	wantErr(t, "fresh unknown key", auth(unknown, ""), 401, "Unauthorized")
	wantErr(t, "wrong secret for an existing id", auth(forge(secrets.PrefixServiceKey, a.all.ID, secrets.RandomString(32)), ""), 401, "Unauthorized")
	// The same secret under another key's id.
	wantErr(t, "secret of one key with the id of another", auth(forge(secrets.PrefixServiceKey, a.inference.ID, keySecret(a.all.Key)), ""), 401, "Unauthorized")
	wantErr(t, "key of A with x-org-id of B", auth(a.all.Key, b.ws), 403, "Forbidden")
	wantErr(t, "key of A with an unknown x-org-id", auth(a.all.Key, "wrk_nope"), 403, "Forbidden")
	// A key value re-prefixed as an access token is another credential.
	wantErr(t, "key presented as an access token", auth(forge(secrets.PrefixAccessToken, a.all.ID, keySecret(a.all.Key)), a.ws), 401, "Unauthorized")

	// Refresh tokens are for the token endpoint only, even a valid one.
	rt, rtID := secrets.NewToken(secrets.PrefixRefreshToken)
	at := e.token(a.owner, a.ws)
	var famID string
	e.view(func(tx store.Tx) error {
		fams, err := tx.TokenFamilies(a.owner)
		famID = fams[0].ID
		return err
	})
	e.update(func(tx store.Tx) error {
		return tx.PutToken(&store.Token{ID: rtID, Kind: store.TokenRefresh, FamilyID: famID, MAC: e.svc.Secrets.MAC(rt), Created: t0, ExpiresAt: t0.Add(24 * time.Hour)}, true)
	})
	wantErr(t, "valid refresh token", auth(rt, a.ws), 401, "Unauthorized")
	// A refresh token record presented with the access prefix.
	asAccess := forge(secrets.PrefixAccessToken, rtID, keySecret(rt))
	e.update(func(tx store.Tx) error {
		tok, err := tx.Token(rtID)
		if err != nil {
			return err
		}
		tok.MAC = e.svc.Secrets.MAC(asAccess)
		return tx.PutToken(tok, false)
	})
	wantErr(t, "refresh record with access prefix", auth(asAccess, a.ws), 401, "Unauthorized")
	// An access token is not a key either.
	wantErr(t, "access token re-prefixed as a key", auth(forge(secrets.PrefixServiceKey, keyID(at), keySecret(at)), a.ws), 401, "Unauthorized")

	// Revoked: 401 at once.
	noErr(t, "revoke", e.svc.RevokeKey(ctx, service.Operator(a.ws), a.sa, a.inference.ID))
	wantErr(t, "revoked", auth(a.inference.Key, ""), 401, "Unauthorized")
	noErr(t, "revoke again", e.svc.RevokeKey(ctx, service.Operator(a.ws), a.sa, a.inference.ID))

	// Expired, with the fake clock.
	exp := e.clk.Now().Add(time.Hour)
	ek, err := e.svc.CreateKey(ctx, service.Operator(a.ws), a.sa, service.NewKey{Name: "exp", Permission: store.PermissionInference, ExpiresAt: &exp})
	noErr(t, "CreateKey with expiry", err)
	e.clk.Advance(59 * time.Minute)
	noErr(t, "before expiry", auth(ek.Key, ""))
	e.clk.Advance(time.Minute)
	wantErr(t, "at expires_at", auth(ek.Key, ""), 401, "Unauthorized")
	e.clk.Advance(time.Hour)
	wantErr(t, "after expires_at", auth(ek.Key, ""), 401, "Unauthorized")
	noErr(t, "a key without expiry still works", auth(a.all.Key, ""))

	// Service account gone without its keys being revoked (e.g. deleted by
	// hand): the key still fails.
	sa2 := e.serviceAccount(a.ws)
	k2 := e.key(a.ws, sa2, store.PermissionAll)
	noErr(t, "key of sa2", auth(k2.Key, ""))
	e.update(func(tx store.Tx) error { return tx.DeleteServiceAccount(sa2) })
	wantErr(t, "key of a deleted service account", auth(k2.Key, ""), 401, "Unauthorized")

	// Deleted workspace: 404 WorkspaceNotFound for its keys.
	noErr(t, "B key before deletion", auth(b.all.Key, b.ws))
	bOwner := e.token(b.owner, b.ws) // b.ownTok has expired with the clock moves above
	noErr(t, "DeleteWorkspace", e.svc.DeleteWorkspace(ctx, b.ws))
	wantErr(t, "key of a deleted workspace", auth(b.all.Key, ""), 404, "WorkspaceNotFound")
	wantErr(t, "key of a deleted workspace, own x-org-id", auth(b.all.Key, b.ws), 404, "WorkspaceNotFound")
	wantErr(t, "person of a deleted workspace", auth(bOwner, ""), 404, "WorkspaceNotFound")
	// A's key naming deleted B is still "another workspace".
	wantErr(t, "key of A naming deleted B", auth(a.all.Key, b.ws), 403, "Forbidden")
}

func TestAuthenticateKeyRecordsLastUse(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	last := func() *time.Time {
		keys, err := e.svc.Keys(ctx, service.Operator(f.ws), f.sa)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k.ID == f.all.ID {
				return k.LastUsedAt
			}
		}
		t.Fatal("key not listed")
		return nil
	}
	if last() != nil {
		t.Fatal("last_used_at set before any use")
	}
	e.principal(f.all.Key, "")
	first := last()
	if first == nil || !first.Equal(t0.Truncate(time.Second)) {
		t.Fatalf("last_used_at after first use = %v, want %v", first, t0)
	}
	e.clk.Advance(30 * time.Second)
	e.principal(f.all.Key, "")
	if got := last(); !got.Equal(*first) {
		t.Fatalf("last_used_at rewritten within a minute: %v", got)
	}
	e.clk.Advance(31 * time.Second)
	e.principal(f.all.Key, "")
	if got := last(); !got.Equal(t0.Add(61 * time.Second).Truncate(time.Second)) {
		t.Fatalf("last_used_at after a minute = %v", got)
	}
}

func TestAuthenticatePersonToken(t *testing.T) {
	e := newEnv(t)
	a := e.workspace("A")
	b := e.workspace("B")
	c := e.workspace("C") // the person is not a member
	person := e.person(a, store.RoleAdmin, b, store.RoleMember)
	e.person(c, store.RoleOwner)

	auth := func(cred, org string) (*service.Principal, error) { return e.svc.Authenticate(ctx, cred, org) }

	bound := e.token(person, a)
	for _, org := range []string{"", a} {
		p, err := auth(bound, org)
		noErr(t, "bound token, x-org-id "+org, err)
		if p.Kind != service.KindPerson || p.Workspace != a || p.PersonID != person || p.Role != store.RoleAdmin || p.FamilyID == "" || p.MemberID() != person {
			t.Fatalf("bound token principal: %+v", p)
		}
	}
	_, err := auth(bound, b)
	wantErr(t, "bound token, x-org-id of another workspace the person belongs to", err, 403, "Forbidden")
	_, err = auth(bound, c)
	wantErr(t, "bound token, x-org-id of a foreign workspace", err, 403, "Forbidden")

	unbound := e.token(person, "")
	_, err = auth(unbound, "")
	wantErr(t, "unbound token without x-org-id", err, 400, "OrgRequired")
	for ws, role := range map[string]string{a: store.RoleAdmin, b: store.RoleMember} {
		p, err := auth(unbound, ws)
		noErr(t, "unbound token with x-org-id", err)
		if p.Workspace != ws || p.Role != role {
			t.Fatalf("unbound token in %s: %+v, want role %s", ws, p, role)
		}
	}
	_, err = auth(unbound, c)
	wantErr(t, "unbound token, not a member", err, 403, "Forbidden")
	_, err = auth(unbound, "wrk_doesnotexist")
	wantErr(t, "unbound token, unknown workspace", err, 404, "WorkspaceNotFound")
	noErr(t, "DeleteWorkspace", e.svc.DeleteWorkspace(ctx, b))
	_, err = auth(unbound, b)
	wantErr(t, "unbound token, deleted workspace", err, 404, "WorkspaceNotFound")

	// Wrong secret for an existing token id; refresh prefix on it.
	_, err = auth(forge(secrets.PrefixAccessToken, keyID(bound), secrets.RandomString(32)), "")
	wantErr(t, "wrong secret for a token id", err, 401, "Unauthorized")
	_, err = auth(forge(secrets.PrefixRefreshToken, keyID(bound), keySecret(bound)), "")
	wantErr(t, "access token re-prefixed as refresh", err, 401, "Unauthorized")

	// Expiry with the fake clock: the access token lives AccessTokenTTL.
	e.clk.Advance(e.svc.AccessTokenTTL - time.Second)
	_, err = auth(bound, "")
	noErr(t, "just before expiry", err)
	e.clk.Advance(time.Second)
	_, err = auth(bound, "")
	wantErr(t, "expired access token", err, 401, "Unauthorized")
	_, err = auth(unbound, a)
	wantErr(t, "expired unbound access token", err, 401, "Unauthorized")

	// Revoked family.
	fresh := e.token(person, a)
	var famID string
	e.view(func(tx store.Tx) error {
		tok, err := tx.Token(keyID(fresh))
		famID = tok.FamilyID
		return err
	})
	e.update(func(tx store.Tx) error {
		f, err := tx.TokenFamily(famID)
		if err != nil {
			return err
		}
		now := e.clk.Now()
		f.RevokedAt = &now
		return tx.PutTokenFamily(f)
	})
	_, err = auth(fresh, "")
	wantErr(t, "revoked family", err, 401, "Unauthorized")

	// Disabled person: 401, for bound and unbound tokens alike.
	tokA := e.token(person, a)
	tokU := e.token(person, "")
	_, err = auth(tokA, "")
	noErr(t, "before disabling", err)
	e.update(func(tx store.Tx) error {
		p, err := tx.Person(person)
		if err != nil {
			return err
		}
		p.Disabled = true
		return tx.PutPerson(p)
	})
	_, err = auth(tokA, "")
	wantErr(t, "disabled person, bound token", err, 401, "Unauthorized")
	_, err = auth(tokU, a)
	wantErr(t, "disabled person, unbound token", err, 401, "Unauthorized")
	_, err = e.svc.IssuePersonToken(ctx, person, a, "test")
	wantErr(t, "IssuePersonToken for a disabled person", err, 403, "Forbidden")
}

func TestIssuePersonToken(t *testing.T) {
	e := newEnv(t)
	a := e.workspace("A")
	b := e.workspace("B")
	person := e.person(a, store.RoleMember)
	_, err := e.svc.IssuePersonToken(ctx, person, b, "test")
	wantErr(t, "binding to a workspace the person is not in", err, 404, "MemberNotFound")
	_, err = e.svc.IssuePersonToken(ctx, person, "wrk_nope", "test")
	wantErr(t, "binding to an unknown workspace", err, 404, "WorkspaceNotFound")
	_, err = e.svc.IssuePersonToken(ctx, "usr_nope", "", "test")
	wantErr(t, "unknown person", err, 404, "PersonNotFound")

	tok, err := e.svc.IssuePersonToken(ctx, person, a, "test")
	noErr(t, "IssuePersonToken", err)
	if tok.TokenType != "Bearer" || tok.OrgID == nil || *tok.OrgID != a || tok.ExpiresIn != int(e.svc.AccessTokenTTL/time.Second) ||
		!strings.HasPrefix(tok.AccessToken, secrets.PrefixAccessToken) {
		t.Fatalf("issued token: %+v", tok)
	}
	// Only the MAC is stored.
	var rec *store.Token
	e.view(func(tx store.Tx) (err error) { rec, err = tx.Token(keyID(tok.AccessToken)); return err })
	if !secrets.Equal(rec.MAC, e.svc.Secrets.MAC(tok.AccessToken)) || rec.Kind != store.TokenAccess {
		t.Fatalf("stored token %+v", rec)
	}
	raw := e.rawStore()
	if strings.Contains(string(raw), keySecret(tok.AccessToken)) {
		t.Fatal("the access token's secret is in the store")
	}
}

// TestCreatePerson goes through the real argon2id path once.
func TestCreatePerson(t *testing.T) {
	e := newEnv(t)
	ws := e.workspace("A")
	p, err := e.svc.CreatePerson(ctx, service.NewPerson{Email: " Ann@Example.COM ", Name: "Ann", Password: "correct horse", Workspace: ws, Role: store.RoleOwner})
	noErr(t, "CreatePerson", err)
	if p.Email != "ann@example.com" {
		t.Fatalf("email %q not folded", p.Email)
	}
	tok := e.token(p.ID, "")
	if got := e.principal(tok, ws); got.Role != store.RoleOwner {
		t.Fatalf("role %q", got.Role)
	}
	_, err = e.svc.CreatePerson(ctx, service.NewPerson{Email: "ANN@example.com", Name: "Ann 2", Password: "correct horse"})
	wantErr(t, "duplicate email", err, 409, "Conflict")
	_, err = e.svc.CreatePerson(ctx, service.NewPerson{Email: "bob@example.com", Name: "Bob", Password: "correct horse", Workspace: ws})
	wantErr(t, "workspace without role", err, 400, "InvalidRequest")
	_, err = e.svc.CreatePerson(ctx, service.NewPerson{Email: "bob@example.com", Name: "Bob", Password: "correct horse", Workspace: ws, Role: "root"})
	wantErr(t, "bad role", err, 400, "InvalidRequest")
	_, err = e.svc.CreatePerson(ctx, service.NewPerson{Email: "not-an-email", Name: "Bob", Password: "correct horse"})
	wantErr(t, "bad email", err, 400, "InvalidRequest")
	_, err = e.svc.CreatePerson(ctx, service.NewPerson{Email: "bob@example.com", Name: "Bob", Password: "short"})
	wantErr(t, "weak password", err, 400, "InvalidRequest")
}

// TestRevocationUnderConcurrency: once RevokeKey has returned, no
// Authenticate call started afterwards may succeed, from any goroutine, even
// while last-use writes of the same key race with the revocation.
func TestRevocationUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	const (
		workers   = 8
		warmup    = 10 // successful calls per worker before the revocation
		afterCall = 25 // calls per worker started after RevokeKey returned
	)
	var (
		revoked   atomic.Bool
		wg        sync.WaitGroup
		ready     sync.WaitGroup
		mu        sync.Mutex
		failures  []string
		postCalls atomic.Int64
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, a...))
		}
	}
	ready.Add(workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			calls, after := 0, 0
			for after < afterCall {
				// Move the clock so that last-use writes keep racing the
				// revocation (they are written at most once a minute).
				e.clk.Advance(time.Minute)
				startedAfter := revoked.Load()
				_, err := e.svc.Authenticate(ctx, f.all.Key, "")
				switch {
				case startedAfter && err == nil:
					fail("worker %d: Authenticate started after RevokeKey returned and succeeded", w)
				case startedAfter && apierr.As(err).Status != http.StatusUnauthorized:
					fail("worker %d: after revocation: %v, want 401", w, err)
				case !startedAfter && err != nil && apierr.As(err).Status != http.StatusUnauthorized:
					fail("worker %d: before revocation: %v", w, err)
				}
				if startedAfter {
					after++
					postCalls.Add(1)
				} else {
					calls++
					if calls == warmup {
						ready.Done()
					}
				}
			}
		}(w)
	}
	ready.Wait()
	if err := e.svc.RevokeKey(ctx, service.Operator(f.ws), f.sa, f.all.ID); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	revoked.Store(true)
	wg.Wait()
	for _, s := range failures {
		t.Error(s)
	}
	if n := postCalls.Load(); n != workers*afterCall {
		t.Fatalf("%d calls after revocation, want %d", n, workers*afterCall)
	}
	// The revocation survived the concurrent last-use writes.
	var k *store.APIKey
	e.view(func(tx store.Tx) (err error) { k, err = tx.APIKey(f.all.ID); return err })
	if k.RevokedAt == nil {
		t.Fatal("revoked_at lost: a concurrent last-use write overwrote the revocation")
	}
	if _, err := e.svc.Authenticate(ctx, f.all.Key, ""); apierr.As(err).Status != http.StatusUnauthorized {
		t.Fatalf("after the storm: %v", err)
	}
	// The other key of the same service account is untouched.
	e.principal(f.inference.Key, "")
}

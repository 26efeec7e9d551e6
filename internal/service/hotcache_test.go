package service_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

// cacheEnv is the service over a tracked store, with the raw Badger store
// beside it: a write through the raw store is one the cache cannot see,
// which is how these tests tell a cached answer from a fresh one.
type cacheEnv struct {
	*env
	raw     *store.Badger
	tracked *store.Tracked
}

func newCacheEnv(t *testing.T) *cacheEnv {
	te := testenv.New(t, t0)
	return &cacheEnv{env: &env{t: t, dir: te.Dir, st: te.Store, svc: te.Service, clk: te.Clock}, raw: te.Badger, tracked: te.Store}
}

// rawRevoke revokes a key behind the cache's back.
func (e *cacheEnv) rawRevoke(keyID string) {
	e.t.Helper()
	err := e.raw.Update(ctx, func(tx store.Tx) error {
		k, err := tx.APIKey(keyID)
		if err != nil {
			return err
		}
		now := t0
		k.RevokedAt = &now
		return tx.PutAPIKey(k, false)
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func refused(t *testing.T, what string, err error, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want %d", what, status)
	}
	if got := apierr.As(err).Status; got != status {
		t.Fatalf("%s: %v (status %d), want %d", what, err, got, status)
	}
}

// The verdict of a key is served from the cache while nothing tracked is
// written, and dropped by the next tracked write of any kind.
func TestHotCacheServesVerdictsUntilATrackedWrite(t *testing.T) {
	e := newCacheEnv(t)
	f := e.fixture("A")
	e.principal(f.all.Key, "")

	// An untracked revocation is invisible: the answer came from the cache.
	e.rawRevoke(f.all.ID)
	e.principal(f.all.Key, "")

	// Any tracked write (here: an unrelated service account) drops it.
	before := e.tracked.Generation()
	e.serviceAccount(f.ws)
	if e.tracked.Generation() == before {
		t.Fatal("creating a service account did not raise the generation")
	}
	_, err := e.svc.Authenticate(ctx, f.all.Key, "")
	refused(t, "revoked key after a tracked write", err, http.StatusUnauthorized)

	// Usage and budgets are not tracked: settling requests keeps the cache.
	e.principal(f.inference.Key, "")
	g := e.tracked.Generation()
	if err := e.svc.Ledger.Record(ctx, &store.UsageRecord{ID: "u1", Workspace: f.ws, MemberID: f.sa, Time: t0}); err != nil {
		t.Fatal(err)
	}
	if e.tracked.Generation() != g {
		t.Fatal("a usage record raised the generation")
	}
}

// Every way to withdraw access is seen by the very next request, although
// the verdict was cached just before.
func TestHotCacheRevocationIsImmediate(t *testing.T) {
	cases := []struct {
		name   string
		cred   func(f *fixture) string
		revoke func(e *cacheEnv, f *fixture) error
		status int
	}{
		{"key revoked", func(f *fixture) string { return f.all.Key }, func(e *cacheEnv, f *fixture) error {
			return e.svc.RevokeKey(ctx, service.Operator(f.ws), f.sa, f.all.ID)
		}, 401},
		{"service account deleted", func(f *fixture) string { return f.inference.Key }, func(e *cacheEnv, f *fixture) error {
			return e.svc.DeleteServiceAccount(ctx, service.Operator(f.ws), f.sa)
		}, 401},
		{"workspace deleted (key)", func(f *fixture) string { return f.inference.Key }, func(e *cacheEnv, f *fixture) error {
			return e.svc.DeleteWorkspace(ctx, f.ws)
		}, 404},
		{"workspace deleted (token)", func(f *fixture) string { return f.memberTok }, func(e *cacheEnv, f *fixture) error {
			return e.svc.DeleteWorkspace(ctx, f.ws)
		}, 404},
		{"member removed", func(f *fixture) string { return f.memberTok }, func(e *cacheEnv, f *fixture) error {
			return e.svc.RemoveMember(ctx, service.Operator(f.ws), f.member)
		}, 401},
		{"token family revoked", func(f *fixture) string { return f.memberTok }, func(e *cacheEnv, f *fixture) error {
			p := e.principal(f.memberTok, "")
			return e.st.Update(ctx, func(tx store.Tx) error {
				fam, err := tx.TokenFamily(p.FamilyID)
				if err != nil {
					return err
				}
				now := t0
				fam.RevokedAt = &now
				return tx.PutTokenFamily(fam)
			})
		}, 401},
		{"person disabled", func(f *fixture) string { return f.memberTok }, func(e *cacheEnv, f *fixture) error {
			return e.st.Update(ctx, func(tx store.Tx) error {
				p, err := tx.Person(f.member)
				if err != nil {
					return err
				}
				p.Disabled = true
				return tx.PutPerson(p)
			})
		}, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newCacheEnv(t)
			f := e.fixture("A")
			cred := c.cred(f)
			for range 3 {
				e.principal(cred, "")
			}
			if err := c.revoke(e, f); err != nil {
				t.Fatalf("revoking: %v", err)
			}
			_, err := e.svc.Authenticate(ctx, cred, "")
			refused(t, "next request", err, c.status)
		})
	}
}

// A cached key still expires on time, and a cached id with the wrong secret
// or another workspace's x-org-id is refused.
func TestHotCacheKeepsEveryCheck(t *testing.T) {
	e := newCacheEnv(t)
	f := e.fixture("A")
	other := e.fixture("B")
	exp := t0.Add(time.Hour)
	k, err := e.svc.CreateKey(ctx, service.Operator(f.ws), f.sa, service.NewKey{Name: "short", Permission: store.PermissionInference, ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	e.principal(k.Key, "")
	e.principal(k.Key, f.ws)

	wrong := k.Key[:len(k.Key)-6] + "AAAAAA"
	if wrong == k.Key {
		wrong = k.Key[:len(k.Key)-6] + "BBBBBB"
	}
	_, err = e.svc.Authenticate(ctx, wrong, "")
	refused(t, "cached id, wrong secret", err, http.StatusUnauthorized)
	_, err = e.svc.Authenticate(ctx, k.Key, other.ws)
	refused(t, "cached key, another workspace's x-org-id", err, http.StatusForbidden)

	e.clk.Advance(time.Hour)
	_, err = e.svc.Authenticate(ctx, k.Key, "")
	refused(t, "cached key past its expiry", err, http.StatusUnauthorized)

	// Access tokens expire in the cache too.
	tok := e.token(f.member, f.ws)
	e.principal(tok, "")
	e.clk.Advance(2 * time.Hour)
	_, err = e.svc.Authenticate(ctx, tok, "")
	refused(t, "cached access token past its expiry", err, http.StatusUnauthorized)
}

// Last-use writes bypass the generation (they would drop every cached
// verdict once a minute per key) and are still written once a minute.
func TestHotCacheLastUseDoesNotInvalidate(t *testing.T) {
	e := newCacheEnv(t)
	f := e.fixture("A")
	e.principal(f.inference.Key, "")
	g := e.tracked.Generation()
	for i := range 5 {
		e.clk.Advance(time.Minute)
		e.principal(f.inference.Key, "")
		if e.tracked.Generation() != g {
			t.Fatalf("round %d: a last-use write raised the generation", i)
		}
		keys, err := e.svc.Keys(ctx, service.Operator(f.ws), f.sa)
		if err != nil {
			t.Fatal(err)
		}
		var k *store.APIKey
		for _, kk := range keys {
			if kk.ID == f.inference.ID {
				k = kk
			}
		}
		if k == nil || k.LastUsedAt == nil || !k.LastUsedAt.Equal(e.clk.Now().UTC().Truncate(time.Second)) {
			t.Fatalf("round %d: last_used_at %v, want %v", i, k, e.clk.Now())
		}
	}
}

// A connection is cached for the gateway and dropped when it changes.
func TestHotCacheConnections(t *testing.T) {
	e := newCacheEnv(t)
	f := e.fixture("A")
	op := service.Operator(f.ws)
	c, err := e.svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "oa", Kind: store.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1",
		Credential: "sk-upstream", Models: map[string]service.ModelInput{"m": {}}})
	if err != nil {
		t.Fatal(err)
	}
	p := e.principal(f.inference.Key, "")
	c1, err := e.svc.LookupConnection(ctx, p, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := e.svc.LookupConnection(ctx, p, c.ID)
	if c1 != c2 {
		t.Fatal("the second lookup did not come from the cache")
	}
	for range 2 {
		if cred, err := e.svc.Credential(c1); err != nil || cred != "sk-upstream" {
			t.Fatalf("Credential: %q, %v", cred, err)
		}
	}
	no := false
	if _, err := e.svc.PutModel(ctx, op, c.ID, "m", service.ModelInput{Enabled: &no}); err != nil {
		t.Fatal(err)
	}
	c3, err := e.svc.LookupConnection(ctx, p, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c3.Models["m"].Enabled {
		t.Fatal("a disabled model is still enabled in the looked-up connection")
	}
	if err := e.svc.DeleteConnection(ctx, op, c.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.LookupConnection(ctx, p, c.ID)
	refused(t, "deleted connection", err, http.StatusNotFound)
	// Another workspace's principal never gets the cached connection.
	o := e.fixture("B")
	c4, _ := e.svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "ob", Kind: store.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1", Credential: "x"})
	e.svc.LookupConnection(ctx, p, c4.ID)
	_, err = e.svc.LookupConnection(ctx, e.principal(o.inference.Key, ""), c4.ID)
	refused(t, "another workspace's connection", err, http.StatusNotFound)
}

// Over a store without a generation nothing is cached: a write the service
// did not make is seen at once.
func TestNoCacheWithoutGeneration(t *testing.T) {
	te := testenv.New(t, t0)
	svc := service.New(te.Badger, te.Service.Secrets, te.Clock, nil)
	t.Cleanup(svc.Ledger.Close)
	e := &cacheEnv{env: &env{t: t, dir: te.Dir, st: te.Badger, svc: svc, clk: te.Clock}, raw: te.Badger}
	f := e.fixture("A")
	e.principal(f.all.Key, "")
	e.rawRevoke(f.all.ID)
	_, err := svc.Authenticate(ctx, f.all.Key, "")
	refused(t, "revoked key on an untracked store", err, http.StatusUnauthorized)
}

package service_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func TestDeleteServiceAccountRevokesItsKeys(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	sa, err := e.svc.CreateServiceAccount(ctx, admin, "ci")
	noErr(t, "CreateServiceAccount", err)
	if sa.CreatedBy != f.admin || sa.Workspace != f.ws || !strings.HasPrefix(sa.ID, "sa_") {
		t.Fatalf("service account %+v", sa)
	}
	var keys []*service.CreatedKey
	for _, perm := range []string{store.PermissionInference, store.PermissionAll, store.PermissionInference} {
		k, err := e.svc.CreateKey(ctx, admin, sa.ID, service.NewKey{Name: "k " + perm, Permission: perm})
		noErr(t, "CreateKey", err)
		keys = append(keys, k)
		e.principal(k.Key, "")
	}
	noErr(t, "revoke one first", e.svc.RevokeKey(ctx, admin, sa.ID, keys[2].ID))
	var firstRevocation *time.Time
	e.view(func(tx store.Tx) error {
		k, err := tx.APIKey(keys[2].ID)
		firstRevocation = k.RevokedAt
		return err
	})

	e.clk.Advance(time.Hour)
	noErr(t, "DeleteServiceAccount", e.svc.DeleteServiceAccount(ctx, admin, sa.ID))

	for i, k := range keys {
		_, err := e.svc.Authenticate(ctx, k.Key, "")
		wantErr(t, "key of the deleted service account", err, 401, "Unauthorized")
		e.view(func(tx store.Tx) error {
			rec, err := tx.APIKey(k.ID)
			if err != nil {
				t.Fatalf("key %d record: %v", i, err)
			}
			if rec.RevokedAt == nil {
				t.Fatalf("key %d: revoked_at not set", i)
			}
			if i == 2 && !rec.RevokedAt.Equal(*firstRevocation) {
				t.Fatalf("an earlier revocation time was overwritten: %v, was %v", rec.RevokedAt, firstRevocation)
			}
			return nil
		})
	}
	_, err = e.svc.ServiceAccount(ctx, admin, sa.ID)
	wantErr(t, "deleted service account", err, 404, "ServiceAccountNotFound")
	wantErr(t, "deleting it again", e.svc.DeleteServiceAccount(ctx, admin, sa.ID), 404, "ServiceAccountNotFound")
	_, err = e.svc.CreateKey(ctx, admin, sa.ID, service.NewKey{Name: "late", Permission: store.PermissionAll})
	wantErr(t, "key for a deleted service account", err, 404, "ServiceAccountNotFound")
	// The fixture's own service account is untouched.
	e.principal(f.all.Key, "")
	sas, err := e.svc.ServiceAccounts(ctx, admin)
	noErr(t, "ServiceAccounts", err)
	if len(sas) != 1 || sas[0].ID != f.sa {
		t.Fatalf("service accounts after the deletion: %+v", sas)
	}
}

func TestKeyValueShownOnceStoredAsMACOnly(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	owner := e.principal(f.ownTok, "")
	k, err := e.svc.CreateKey(ctx, owner, f.sa, service.NewKey{Name: " deploy ", Permission: store.PermissionInference})
	noErr(t, "CreateKey", err)
	tok, ok := secrets.ParseToken(k.Key)
	if !ok || tok.Prefix != secrets.PrefixServiceKey || tok.ID != k.ID || len(k.ID) != 12 {
		t.Fatalf("key value %q does not parse as ag_sk_<id12>_…: %+v", k.Key, tok)
	}
	if k.Name != "deploy" || k.CreatedBy != f.owner || k.Workspace != f.ws || k.ServiceAccount != f.sa || !k.Created.Equal(t0) {
		t.Fatalf("key record %+v", k.APIKey)
	}
	secret := keySecret(k.Key)

	var rec *store.APIKey
	e.view(func(tx store.Tx) (err error) { rec, err = tx.APIKey(k.ID); return err })
	if !secrets.Equal(rec.MAC, e.svc.Secrets.MAC(k.Key)) {
		t.Fatal("stored MAC is not the HMAC of the key value")
	}
	b, _ := json.Marshal(rec)
	for _, part := range []string{k.Key, secret, secret[:16], secret[16:]} {
		if strings.Contains(string(b), part) {
			t.Fatalf("stored key record contains %q: %s", part, b)
		}
	}
	// Nor in the listing.
	list, err := e.svc.Keys(ctx, owner, f.sa)
	noErr(t, "Keys", err)
	lb, _ := json.Marshal(list)
	if len(list) != 3 || strings.Contains(string(lb), secret) {
		t.Fatalf("Keys: %d keys, or the listing holds the secret: %s", len(list), lb)
	}
	// Nor anywhere in the store's bytes, while the key id is (positive control).
	raw := e.rawStore()
	if !bytes.Contains(raw, []byte(k.ID)) {
		t.Fatal("the raw scan does not even find the key id: the scan is broken")
	}
	for _, part := range []string{k.Key, secret, secret[:12], secret[20:]} {
		if bytes.Contains(raw, []byte(part)) {
			t.Fatalf("the store holds part of the key secret (%q)", part)
		}
	}
}

func TestCreateKeyValidation(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	other := e.fixture("other")
	owner := e.principal(f.ownTok, "")
	e.clk.Advance(time.Hour)
	now := e.clk.Now()

	for name, in := range map[string]service.NewKey{
		"expires in the past":  {Name: "k", Permission: store.PermissionAll, ExpiresAt: ptr(now.Add(-time.Second))},
		"expires now":          {Name: "k", Permission: store.PermissionAll, ExpiresAt: ptr(now)},
		"expires long ago":     {Name: "k", Permission: store.PermissionAll, ExpiresAt: ptr(t0)},
		"permission admin":     {Name: "k", Permission: "admin"},
		"permission empty":     {Name: "k"},
		"permission All":       {Name: "k", Permission: "All"},
		"permission Inference": {Name: "k", Permission: "Inference"},
		"no name":              {Permission: store.PermissionAll},
		"blank name":           {Name: "  ", Permission: store.PermissionAll},
		"name with newline":    {Name: "a\nb", Permission: store.PermissionAll},
	} {
		_, err := e.svc.CreateKey(ctx, owner, f.sa, in)
		wantErr(t, name, err, 400, "InvalidRequest")
	}
	_, err := e.svc.CreateKey(ctx, owner, other.sa, service.NewKey{Name: "k", Permission: store.PermissionAll})
	wantErr(t, "key for another workspace's service account", err, 404, "ServiceAccountNotFound")
	err = e.svc.RevokeKey(ctx, owner, other.sa, other.all.ID)
	wantErr(t, "revoking another workspace's key", err, 404, "ServiceAccountNotFound")
	err = e.svc.RevokeKey(ctx, owner, f.sa, other.all.ID)
	wantErr(t, "revoking another service account's key through ours", err, 404, "KeyNotFound")
	e.principal(other.all.Key, "")
	err = e.svc.RevokeKey(ctx, owner, f.sa, "nope")
	wantErr(t, "revoking an unknown key", err, 404, "KeyNotFound")

	list, err := e.svc.Keys(ctx, owner, f.sa)
	noErr(t, "Keys", err)
	if len(list) != 2 {
		t.Fatalf("refused CreateKey calls left keys behind: %d keys", len(list))
	}

	// A future expiry is kept, in UTC.
	loc := time.FixedZone("X", 3*3600)
	exp := now.Add(24 * time.Hour).In(loc)
	k, err := e.svc.CreateKey(ctx, owner, f.sa, service.NewKey{Name: "k", Permission: store.PermissionAll, ExpiresAt: &exp})
	noErr(t, "future expiry", err)
	if k.ExpiresAt == nil || !k.ExpiresAt.Equal(exp) || k.ExpiresAt.Location() != time.UTC {
		t.Fatalf("expires_at %v", k.ExpiresAt)
	}
}

func TestServiceAccountsAreWorkspaceScoped(t *testing.T) {
	e := newEnv(t)
	a := e.fixture("A")
	b := e.fixture("B")
	admin := e.principal(a.adminTok, "")
	_, err := e.svc.ServiceAccount(ctx, admin, b.sa)
	wantErr(t, "another workspace's service account", err, 404, "ServiceAccountNotFound")
	_, err = e.svc.Keys(ctx, admin, b.sa)
	wantErr(t, "another workspace's keys", err, 404, "ServiceAccountNotFound")
	wantErr(t, "deleting another workspace's service account", e.svc.DeleteServiceAccount(ctx, admin, b.sa), 404, "ServiceAccountNotFound")
	e.principal(b.all.Key, "")
	for _, c := range []string{a.inference.Key, a.all.Key, a.memberTok} {
		p := e.principal(c, "")
		_, err := e.svc.CreateServiceAccount(ctx, p, "x")
		wantErr(t, "CreateServiceAccount by a non-admin", err, 403, "Forbidden")
		_, err = e.svc.CreateKey(ctx, p, a.sa, service.NewKey{Name: "x", Permission: store.PermissionInference})
		wantErr(t, "CreateKey by a non-admin", err, 403, "Forbidden")
		wantErr(t, "RevokeKey by a non-admin", e.svc.RevokeKey(ctx, p, a.sa, a.all.ID), 403, "Forbidden")
		wantErr(t, "DeleteServiceAccount by a non-admin", e.svc.DeleteServiceAccount(ctx, p, a.sa), 403, "Forbidden")
	}
	e.principal(a.all.Key, "")
}

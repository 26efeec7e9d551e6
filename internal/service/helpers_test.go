package service_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/testenv"
)

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

// env is a real Service over a real Badger store in a temporary directory,
// with a fake clock.
type env struct {
	t   *testing.T
	dir string
	st  store.Store
	svc *service.Service
	clk *clock.Fake
}

func newEnv(t *testing.T) *env {
	t.Helper()
	te := testenv.New(t, t0)
	return &env{t: t, dir: te.Dir, st: te.Store, svc: te.Service, clk: te.Clock}
}

func (e *env) workspace(name string) string {
	e.t.Helper()
	w, err := e.svc.CreateWorkspace(ctx, name)
	if err != nil {
		e.t.Fatalf("CreateWorkspace(%q): %v", name, err)
	}
	return w.ID
}

// person writes a person straight into the store (svc.CreatePerson spends
// ~0.5 s of argon2id under -race per call) and makes it a member of each
// workspace given as ws, role pairs.
func (e *env) person(wsRoles ...string) string {
	e.t.Helper()
	id := secrets.NewID("usr_")
	p := &store.Person{ID: id, Email: strings.ToLower(id) + "@example.com", Name: "Person " + id, PasswordHash: "x", Created: t0}
	e.update(func(tx store.Tx) error {
		if err := tx.PutPerson(p); err != nil {
			return err
		}
		for i := 0; i+1 < len(wsRoles); i += 2 {
			if err := tx.PutMember(&store.Member{Workspace: wsRoles[i], PersonID: id, Role: wsRoles[i+1], Created: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	return id
}

// token issues an access token for a person, bound to ws ("" for none).
func (e *env) token(personID, ws string) string {
	e.t.Helper()
	tok, err := e.svc.IssuePersonToken(ctx, personID, ws, "test")
	if err != nil {
		e.t.Fatalf("IssuePersonToken(%s, %q): %v", personID, ws, err)
	}
	return tok.AccessToken
}

func (e *env) serviceAccount(ws string) string {
	e.t.Helper()
	sa, err := e.svc.CreateServiceAccount(ctx, service.Operator(ws), "robot")
	if err != nil {
		e.t.Fatalf("CreateServiceAccount: %v", err)
	}
	return sa.ID
}

func (e *env) key(ws, sa, perm string) *service.CreatedKey {
	e.t.Helper()
	k, err := e.svc.CreateKey(ctx, service.Operator(ws), sa, service.NewKey{Name: "k", Permission: perm})
	if err != nil {
		e.t.Fatalf("CreateKey(%s): %v", perm, err)
	}
	return k
}

// principal authenticates a credential that must work.
func (e *env) principal(cred, org string) *service.Principal {
	e.t.Helper()
	p, err := e.svc.Authenticate(ctx, cred, org)
	if err != nil {
		e.t.Fatalf("Authenticate: %v", err)
	}
	return p
}

func (e *env) update(fn func(store.Tx) error) {
	e.t.Helper()
	if err := e.st.Update(ctx, fn); err != nil {
		e.t.Fatalf("store Update: %v", err)
	}
}

func (e *env) view(fn func(store.Tx) error) {
	e.t.Helper()
	if err := e.st.View(ctx, fn); err != nil {
		e.t.Fatalf("store View: %v", err)
	}
}

// rawStore closes the store and returns every byte it holds: each key and
// value (all versions) read through Badger directly, plus the raw content of
// every file of the data directory. The env is unusable afterwards.
func (e *env) rawStore() []byte {
	e.t.Helper()
	if err := e.st.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	var all bytes.Buffer
	db, err := badger.Open(badger.DefaultOptions(e.dir).WithLogger(nil))
	if err != nil {
		e.t.Fatalf("badger.Open: %v", err)
	}
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{AllVersions: true, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			all.Write(it.Item().KeyCopy(nil))
			all.WriteByte(0)
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			all.Write(v)
			all.WriteByte(0)
		}
		return nil
	})
	db.Close()
	if err != nil {
		e.t.Fatalf("scanning badger: %v", err)
	}
	err = filepath.WalkDir(e.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		all.Write(b)
		return err
	})
	if err != nil {
		e.t.Fatalf("reading data dir: %v", err)
	}
	return all.Bytes()
}

// wantErr asserts an API error's status and, when tag is not "", its _tag.
func wantErr(t *testing.T, what string, err error, status int, tag string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %d %s", what, status, tag)
	}
	var ae *apierr.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: error %v (%T) is not an *apierr.Error, want %d %s", what, err, err, status, tag)
	}
	if ae.Status != status || (tag != "" && ae.Tag != tag) {
		t.Fatalf("%s: got %d %s (%s), want %d %s", what, ae.Status, ae.Tag, ae.Message, status, tag)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// forge builds a well-formed credential (valid checksum) from its parts.
func forge(prefix, id, secret string) string {
	body := prefix + id + "_" + secret
	v := crc32.ChecksumIEEE([]byte(body))
	const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var crc [secrets.CRCLen]byte
	for i := len(crc) - 1; i >= 0; i-- {
		crc[i] = base62[v%62]
		v /= 62
	}
	return body + string(crc[:])
}

// keyID returns the id part of a credential.
func keyID(cred string) string { return cred[6 : 6+secrets.IDLen] }

// keySecret returns the random secret part of a credential.
func keySecret(cred string) string {
	return cred[6+secrets.IDLen+1 : 6+secrets.IDLen+1+secrets.SecretLen]
}

func ptr[T any](v T) *T { return &v }

// fixture is a workspace with one credential of every kind of the matrix.
type fixture struct {
	ws                          string
	sa                          string
	inference, all              *service.CreatedKey
	member, admin, owner        string // person ids
	memberTok, adminTok, ownTok string
}

func (e *env) fixture(name string) *fixture {
	e.t.Helper()
	f := &fixture{ws: e.workspace(name)}
	f.sa = e.serviceAccount(f.ws)
	f.inference = e.key(f.ws, f.sa, store.PermissionInference)
	f.all = e.key(f.ws, f.sa, store.PermissionAll)
	f.member = e.person(f.ws, store.RoleMember)
	f.admin = e.person(f.ws, store.RoleAdmin)
	f.owner = e.person(f.ws, store.RoleOwner)
	f.memberTok = e.token(f.member, f.ws)
	f.adminTok = e.token(f.admin, f.ws)
	f.ownTok = e.token(f.owner, f.ws)
	return f
}

type credKind struct {
	name string
	cred string
}

// kinds lists the five credential kinds of the matrix, in its column order.
func (f *fixture) kinds() []credKind {
	return []credKind{
		{"inference key", f.inference.Key},
		{"all key", f.all.Key},
		{"person member", f.memberTok},
		{"person admin", f.adminTok},
		{"person owner", f.ownTok},
	}
}

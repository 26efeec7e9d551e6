package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

func openAt(t *testing.T, dir string) *Badger {
	t.Helper()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatalf("OpenBadger(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T) *Badger {
	t.Helper()
	return openAt(t, t.TempDir())
}

func update(t *testing.T, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.Update(ctx, fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t *testing.T, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.View(ctx, fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %#v\n want %#v", what, got, want)
	}
}

func isNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("%s: err = %v, want ErrNotFound", what, err)
	}
}

func ids[T any](list []*T, id func(*T) string) []string {
	out := []string{}
	for _, v := range list {
		out = append(out, id(v))
	}
	return out
}

func TestWorkspaces(t *testing.T) {
	s := newStore(t)
	deleted := t0.Add(time.Hour)
	ws := []*Workspace{
		{ID: "wrk_c", Name: "Charlie", Created: t0},
		{ID: "wrk_a", Name: "Alpha", Created: t0.Add(time.Minute)},
		{ID: "wrk_b", Name: "Bravo", Created: t0, Deleted: &deleted},
	}
	view(t, s, func(tx Tx) error {
		list, err := tx.Workspaces()
		if err != nil || len(list) != 0 {
			t.Fatalf("empty store: Workspaces = %v, %v", list, err)
		}
		_, err = tx.Workspace("wrk_a")
		isNotFound(t, "Workspace missing", err)
		return nil
	})
	update(t, s, func(tx Tx) error {
		for _, w := range ws {
			if err := tx.PutWorkspace(w); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx Tx) error {
		for _, w := range ws {
			got, err := tx.Workspace(w.ID)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "Workspace "+w.ID, got, w)
		}
		list, err := tx.Workspaces()
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Workspaces order", ids(list, func(w *Workspace) string { return w.ID }), []string{"wrk_a", "wrk_b", "wrk_c"})
		equal(t, "Workspaces[1]", list[1], ws[2])
		_, err = tx.Workspace("wrk_")
		isNotFound(t, "Workspace prefix of an id", err)
		return nil
	})
	// Overwrite.
	update(t, s, func(tx Tx) error {
		return tx.PutWorkspace(&Workspace{ID: "wrk_a", Name: "Alpha 2", Created: t0})
	})
	view(t, s, func(tx Tx) error {
		got, err := tx.Workspace("wrk_a")
		if err != nil || got.Name != "Alpha 2" {
			t.Fatalf("after overwrite: %+v, %v", got, err)
		}
		list, _ := tx.Workspaces()
		if len(list) != 3 {
			t.Fatalf("after overwrite: %d workspaces, want 3", len(list))
		}
		return nil
	})
}

func TestPersons(t *testing.T) {
	s := newStore(t)
	alice := &Person{ID: "per_a", Email: "  Alice@Example.COM ", Name: "Alice", PasswordHash: "$argon2id$x", Created: t0}
	bob := &Person{ID: "per_b", Email: "bob@example.com", Name: "Bob", Disabled: true, Created: t0}
	update(t, s, func(tx Tx) error {
		if err := tx.PutPerson(alice); err != nil {
			return err
		}
		return tx.PutPerson(bob)
	})
	if alice.Email != "alice@example.com" {
		t.Fatalf("PutPerson did not fold the email: %q", alice.Email)
	}
	view(t, s, func(tx Tx) error {
		got, err := tx.Person("per_a")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Person", got, alice)
		got, err = tx.Person("per_b")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Person", got, bob)
		for _, e := range []string{"alice@example.com", "ALICE@EXAMPLE.COM", " Alice@example.com\n", "aLiCe@eXaMpLe.CoM"} {
			got, err := tx.PersonByEmail(e)
			if err != nil {
				t.Fatalf("PersonByEmail(%q): %v", e, err)
			}
			if got.ID != "per_a" {
				t.Fatalf("PersonByEmail(%q) = %s", e, got.ID)
			}
		}
		_, err = tx.Person("per_x")
		isNotFound(t, "Person missing", err)
		_, err = tx.PersonByEmail("carol@example.com")
		isNotFound(t, "PersonByEmail missing", err)
		_, err = tx.PersonByEmail("alice@example.co")
		isNotFound(t, "PersonByEmail prefix", err)
		return nil
	})

	// Another person with the same email, in any case, is refused, and the
	// whole transaction is discarded.
	for _, e := range []string{"alice@example.com", "ALICE@example.com", " alice@EXAMPLE.com "} {
		err := s.Update(ctx, func(tx Tx) error {
			if err := tx.PutWorkspace(&Workspace{ID: "wrk_side_effect"}); err != nil {
				return err
			}
			return tx.PutPerson(&Person{ID: "per_c", Email: e, Name: "Carol"})
		})
		if !errors.Is(err, ErrExists) {
			t.Fatalf("duplicate email %q: err = %v, want ErrExists", e, err)
		}
	}
	// Bob taking Alice's email is refused too.
	err := s.Update(ctx, func(tx Tx) error {
		return tx.PutPerson(&Person{ID: "per_b", Email: "Alice@example.com", Name: "Bob"})
	})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("existing person taking another's email: err = %v, want ErrExists", err)
	}
	view(t, s, func(tx Tx) error {
		_, err := tx.Person("per_c")
		isNotFound(t, "refused person", err)
		_, err = tx.Workspace("wrk_side_effect")
		isNotFound(t, "write of a failed transaction", err)
		p, err := tx.PersonByEmail("alice@example.com")
		if err != nil || p.ID != "per_a" {
			t.Fatalf("email index after refusals: %v, %v", p, err)
		}
		p, err = tx.Person("per_b")
		if err != nil || p.Email != "bob@example.com" {
			t.Fatalf("bob after refusal: %+v, %v", p, err)
		}
		return nil
	})

	// Re-putting a person with their own email (other case) is fine.
	update(t, s, func(tx Tx) error {
		return tx.PutPerson(&Person{ID: "per_a", Email: "ALICE@example.com", Name: "Alice A.", Created: t0})
	})
	view(t, s, func(tx Tx) error {
		p, err := tx.PersonByEmail("alice@example.com")
		if err != nil || p.Name != "Alice A." || p.Email != "alice@example.com" {
			t.Fatalf("after re-put: %+v, %v", p, err)
		}
		return nil
	})

	// Changing the email moves the index.
	update(t, s, func(tx Tx) error {
		return tx.PutPerson(&Person{ID: "per_a", Email: "Alice@New.example", Name: "Alice", Created: t0})
	})
	view(t, s, func(tx Tx) error {
		_, err := tx.PersonByEmail("alice@example.com")
		isNotFound(t, "old email after change", err)
		p, err := tx.PersonByEmail("alice@new.example")
		if err != nil || p.ID != "per_a" {
			t.Fatalf("new email: %v, %v", p, err)
		}
		return nil
	})
	// The old email is free for someone else now.
	update(t, s, func(tx Tx) error {
		return tx.PutPerson(&Person{ID: "per_c", Email: "alice@example.com", Name: "Carol"})
	})
	view(t, s, func(tx Tx) error {
		p, err := tx.PersonByEmail("ALICE@example.com")
		if err != nil || p.ID != "per_c" {
			t.Fatalf("reused email: %v, %v", p, err)
		}
		p, err = tx.PersonByEmail("alice@new.example")
		if err != nil || p.ID != "per_a" {
			t.Fatalf("alice after reuse: %v, %v", p, err)
		}
		return nil
	})
}

// Within one transaction, the email index sees the transaction's own writes.
func TestPersonEmailUniqueWithinTx(t *testing.T) {
	s := newStore(t)
	err := s.Update(ctx, func(tx Tx) error {
		if err := tx.PutPerson(&Person{ID: "per_1", Email: "x@example.com"}); err != nil {
			return err
		}
		return tx.PutPerson(&Person{ID: "per_2", Email: "X@example.com"})
	})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("err = %v, want ErrExists", err)
	}
	view(t, s, func(tx Tx) error {
		_, err := tx.Person("per_1")
		isNotFound(t, "first person of a failed transaction", err)
		return nil
	})
}

func TestMembers(t *testing.T) {
	s := newStore(t)
	ms := []*Member{
		{Workspace: "ws1", PersonID: "p2", Role: RoleMember, Created: t0},
		{Workspace: "ws1", PersonID: "p1", Role: RoleOwner, Created: t0},
		{Workspace: "ws10", PersonID: "p1", Role: RoleAdmin, Created: t0},
		{Workspace: "ws2", PersonID: "p1", Role: RoleMember, Created: t0},
		{Workspace: "ws2", PersonID: "p10", Role: RoleMember, Created: t0},
	}
	update(t, s, func(tx Tx) error {
		for _, m := range ms {
			if err := tx.PutMember(m); err != nil {
				return err
			}
		}
		return nil
	})
	key := func(m *Member) string { return m.Workspace + "/" + m.PersonID }
	view(t, s, func(tx Tx) error {
		for _, m := range ms {
			got, err := tx.Member(m.Workspace, m.PersonID)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "Member", got, m)
		}
		_, err := tx.Member("ws1", "p10")
		isNotFound(t, "Member missing", err)
		_, err = tx.Member("ws3", "p1")
		isNotFound(t, "Member of missing workspace", err)

		list, err := tx.Members("ws1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Members(ws1)", ids(list, key), []string{"ws1/p1", "ws1/p2"})
		equal(t, "Members(ws1)[0]", list[0], ms[1])
		list, _ = tx.Members("ws10")
		equal(t, "Members(ws10)", ids(list, key), []string{"ws10/p1"})
		list, _ = tx.Members("ws")
		equal(t, "Members(ws)", ids(list, key), []string{})

		list, err = tx.Memberships("p1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Memberships(p1)", ids(list, key), []string{"ws1/p1", "ws10/p1", "ws2/p1"})
		list, _ = tx.Memberships("p10")
		equal(t, "Memberships(p10)", ids(list, key), []string{"ws2/p10"})
		list, _ = tx.Memberships("p3")
		equal(t, "Memberships(p3)", ids(list, key), []string{})
		return nil
	})

	// Role change overwrites without duplicating.
	update(t, s, func(tx Tx) error {
		return tx.PutMember(&Member{Workspace: "ws1", PersonID: "p2", Role: RoleAdmin, Created: t0})
	})
	update(t, s, func(tx Tx) error { return tx.DeleteMember("ws1", "p1") })
	view(t, s, func(tx Tx) error {
		_, err := tx.Member("ws1", "p1")
		isNotFound(t, "deleted Member", err)
		list, _ := tx.Members("ws1")
		equal(t, "Members(ws1) after delete", ids(list, key), []string{"ws1/p2"})
		if list[0].Role != RoleAdmin {
			t.Fatalf("role after change: %q", list[0].Role)
		}
		list, _ = tx.Memberships("p1")
		equal(t, "Memberships(p1) after delete", ids(list, key), []string{"ws10/p1", "ws2/p1"})
		list, _ = tx.Memberships("p2")
		equal(t, "Memberships(p2)", ids(list, key), []string{"ws1/p2"})
		return nil
	})
	// Deleting a missing member is not an error.
	update(t, s, func(tx Tx) error { return tx.DeleteMember("ws9", "p9") })
}

func TestServiceAccounts(t *testing.T) {
	s := newStore(t)
	sas := []*ServiceAccount{
		{ID: "sa_2", Workspace: "ws1", Name: "ci", CreatedBy: "p1", Created: t0},
		{ID: "sa_1", Workspace: "ws1", Name: "bot", CreatedBy: "p1", Created: t0},
		{ID: "sa_3", Workspace: "ws2", Name: "other", CreatedBy: "p2", Created: t0},
	}
	update(t, s, func(tx Tx) error {
		for _, sa := range sas {
			if err := tx.PutServiceAccount(sa); err != nil {
				return err
			}
		}
		return nil
	})
	id := func(sa *ServiceAccount) string { return sa.ID }
	view(t, s, func(tx Tx) error {
		for _, sa := range sas {
			got, err := tx.ServiceAccount(sa.ID)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "ServiceAccount", got, sa)
		}
		_, err := tx.ServiceAccount("sa_9")
		isNotFound(t, "ServiceAccount missing", err)
		list, err := tx.ServiceAccounts("ws1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ServiceAccounts(ws1)", ids(list, id), []string{"sa_1", "sa_2"})
		equal(t, "ServiceAccounts(ws1)[0]", list[0], sas[1])
		list, _ = tx.ServiceAccounts("ws2")
		equal(t, "ServiceAccounts(ws2)", ids(list, id), []string{"sa_3"})
		list, _ = tx.ServiceAccounts("ws3")
		equal(t, "ServiceAccounts(ws3)", ids(list, id), []string{})
		return nil
	})
	update(t, s, func(tx Tx) error { return tx.DeleteServiceAccount("sa_1") })
	view(t, s, func(tx Tx) error {
		_, err := tx.ServiceAccount("sa_1")
		isNotFound(t, "deleted ServiceAccount", err)
		list, _ := tx.ServiceAccounts("ws1")
		equal(t, "ServiceAccounts(ws1) after delete", ids(list, id), []string{"sa_2"})
		return nil
	})
	err := s.Update(ctx, func(tx Tx) error { return tx.DeleteServiceAccount("sa_1") })
	isNotFound(t, "DeleteServiceAccount missing", err)
}

func TestAPIKeys(t *testing.T) {
	s := newStore(t)
	exp := t0.Add(30 * 24 * time.Hour)
	k1 := &APIKey{ID: "key000000001", Workspace: "ws1", ServiceAccount: "sa_1", Name: "prod",
		Permission: PermissionInference, MAC: []byte{1, 2, 3, 0, 255}, Created: t0, CreatedBy: "p1", ExpiresAt: &exp}
	k2 := &APIKey{ID: "key000000002", Workspace: "ws1", ServiceAccount: "sa_1", Name: "dev",
		Permission: PermissionAll, MAC: []byte{9}, Created: t0, CreatedBy: "p1"}
	k3 := &APIKey{ID: "key000000003", Workspace: "ws1", ServiceAccount: "sa_2", Name: "x",
		Permission: PermissionAll, MAC: []byte{7}, Created: t0}
	update(t, s, func(tx Tx) error {
		for _, k := range []*APIKey{k2, k1, k3} {
			if err := tx.PutAPIKey(k, true); err != nil {
				return err
			}
		}
		return nil
	})
	// Creating an existing id again is refused, and does not overwrite.
	err := s.Update(ctx, func(tx Tx) error {
		return tx.PutAPIKey(&APIKey{ID: k1.ID, ServiceAccount: "sa_9", Name: "impostor"}, true)
	})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("create twice: err = %v, want ErrExists", err)
	}
	id := func(k *APIKey) string { return k.ID }
	view(t, s, func(tx Tx) error {
		for _, k := range []*APIKey{k1, k2, k3} {
			got, err := tx.APIKey(k.ID)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "APIKey", got, k)
		}
		_, err := tx.APIKey("key000000009")
		isNotFound(t, "APIKey missing", err)
		list, err := tx.APIKeys("sa_1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "APIKeys(sa_1)", ids(list, id), []string{k1.ID, k2.ID})
		equal(t, "APIKeys(sa_1)[0]", list[0], k1)
		list, _ = tx.APIKeys("sa_2")
		equal(t, "APIKeys(sa_2)", ids(list, id), []string{k3.ID})
		list, _ = tx.APIKeys("sa_9")
		equal(t, "APIKeys(sa_9)", ids(list, id), []string{})
		return nil
	})
	// Updating (create=false) an existing key, e.g. to revoke it.
	revoked := t0.Add(time.Hour)
	k1.RevokedAt, k1.LastUsedAt = &revoked, &revoked
	update(t, s, func(tx Tx) error { return tx.PutAPIKey(k1, false) })
	view(t, s, func(tx Tx) error {
		got, err := tx.APIKey(k1.ID)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "revoked APIKey", got, k1)
		if got.Usable(t0) {
			t.Fatal("revoked key is usable")
		}
		list, _ := tx.APIKeys("sa_1")
		if len(list) != 2 {
			t.Fatalf("APIKeys(sa_1) after update: %d keys", len(list))
		}
		return nil
	})
}

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

func testConnection(id, ws string) *Connection {
	cr, cw := money.Micros(300_000), money.Micros(3_750_000)
	return &Connection{
		ID: id, Workspace: ws, Name: "OpenAI " + id, Kind: KindOpenAI,
		BaseURL:    "https://api.openai.com/v1",
		Credential: []byte{0, 1, 2, 3, 200},
		Headers:    map[string]string{"OpenAI-Organization": "org-1"},
		Models: map[string]Model{
			"gpt-4o": {Name: "gpt-4o", Enabled: true, Pricing: Pricing{Input: 2_500_000, Output: 10_000_000, CacheRead: &cr, CacheWrite: &cw}},
			"mini":   {Name: "mini", UpstreamID: "gpt-4o-mini", Pricing: Pricing{Input: 150_000, Output: 600_000, Reasoning: ptr(money.Micros(1))}},
		},
		Declared: true,
		Created:  t0,
		Updated:  t0.Add(time.Minute),
	}
}

func TestConnections(t *testing.T) {
	s := newStore(t)
	c1, c2, c3 := testConnection("conn_1", "ws1"), testConnection("conn_2", "ws1"), testConnection("conn_3", "ws2")
	update(t, s, func(tx Tx) error {
		for _, c := range []*Connection{c2, c3, c1} {
			if err := tx.PutConnection(c, true); err != nil {
				return err
			}
		}
		return nil
	})
	err := s.Update(ctx, func(tx Tx) error { return tx.PutConnection(testConnection("conn_1", "ws3"), true) })
	if !errors.Is(err, ErrExists) {
		t.Fatalf("create twice: err = %v, want ErrExists", err)
	}
	id := func(c *Connection) string { return c.ID }
	view(t, s, func(tx Tx) error {
		for _, c := range []*Connection{c1, c2, c3} {
			got, err := tx.Connection(c.ID)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "Connection", got, c)
		}
		_, err := tx.Connection("conn_9")
		isNotFound(t, "Connection missing", err)
		list, err := tx.Connections("ws1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Connections(ws1)", ids(list, id), []string{"conn_1", "conn_2"})
		equal(t, "Connections(ws1)[0]", list[0], c1)
		list, _ = tx.Connections("ws2")
		equal(t, "Connections(ws2)", ids(list, id), []string{"conn_3"})
		list, _ = tx.Connections("ws3")
		equal(t, "Connections(ws3) after refused create", ids(list, id), []string{})
		return nil
	})

	// Moving a connection to another workspace moves its index entry.
	moved := testConnection("conn_1", "ws2")
	moved.Name = "moved"
	update(t, s, func(tx Tx) error { return tx.PutConnection(moved, false) })
	view(t, s, func(tx Tx) error {
		list, _ := tx.Connections("ws1")
		equal(t, "Connections(ws1) after move", ids(list, id), []string{"conn_2"})
		list, _ = tx.Connections("ws2")
		equal(t, "Connections(ws2) after move", ids(list, id), []string{"conn_1", "conn_3"})
		equal(t, "moved connection", list[0], moved)
		return nil
	})
	// A plain update in place keeps it listed once.
	moved.Name = "renamed"
	update(t, s, func(tx Tx) error { return tx.PutConnection(moved, false) })
	// create=false also creates a missing connection.
	update(t, s, func(tx Tx) error { return tx.PutConnection(testConnection("conn_4", "ws1"), false) })
	view(t, s, func(tx Tx) error {
		list, _ := tx.Connections("ws2")
		equal(t, "Connections(ws2) after rename", ids(list, id), []string{"conn_1", "conn_3"})
		if list[0].Name != "renamed" {
			t.Fatalf("name %q", list[0].Name)
		}
		list, _ = tx.Connections("ws1")
		equal(t, "Connections(ws1) after upsert", ids(list, id), []string{"conn_2", "conn_4"})
		return nil
	})

	update(t, s, func(tx Tx) error { return tx.DeleteConnection("conn_1") })
	view(t, s, func(tx Tx) error {
		_, err := tx.Connection("conn_1")
		isNotFound(t, "deleted Connection", err)
		list, _ := tx.Connections("ws2")
		equal(t, "Connections(ws2) after delete", ids(list, id), []string{"conn_3"})
		return nil
	})
	err = s.Update(ctx, func(tx Tx) error { return tx.DeleteConnection("conn_1") })
	isNotFound(t, "DeleteConnection missing", err)
	// A deleted id may be created again.
	update(t, s, func(tx Tx) error { return tx.PutConnection(testConnection("conn_1", "ws1"), true) })
}

func TestTokenFamiliesAndTokens(t *testing.T) {
	s := newStore(t)
	revoked := t0.Add(time.Hour)
	fams := []*TokenFamily{
		{ID: "tf_2", PersonID: "p1", ClientID: "cli", Created: t0, ExpiresAt: t0.Add(24 * time.Hour)},
		{ID: "tf_1", PersonID: "p1", Workspace: "ws1", ClientID: "cli", Created: t0, ExpiresAt: t0.Add(time.Hour), RevokedAt: &revoked},
		{ID: "tf_3", PersonID: "p2", ClientID: "web", Created: t0, ExpiresAt: t0.Add(time.Hour)},
	}
	update(t, s, func(tx Tx) error {
		for _, f := range fams {
			if err := tx.PutTokenFamily(f); err != nil {
				return err
			}
		}
		return nil
	})
	id := func(f *TokenFamily) string { return f.ID }
	view(t, s, func(tx Tx) error {
		for _, f := range fams {
			got, err := tx.TokenFamily(f.ID)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "TokenFamily", got, f)
		}
		_, err := tx.TokenFamily("tf_9")
		isNotFound(t, "TokenFamily missing", err)
		list, err := tx.TokenFamilies("p1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "TokenFamilies(p1)", ids(list, id), []string{"tf_1", "tf_2"})
		equal(t, "TokenFamilies(p1)[0]", list[0], fams[1])
		list, _ = tx.TokenFamilies("p2")
		equal(t, "TokenFamilies(p2)", ids(list, id), []string{"tf_3"})
		list, _ = tx.TokenFamilies("p3")
		equal(t, "TokenFamilies(p3)", ids(list, id), []string{})
		return nil
	})

	access := &Token{ID: "tok000000001", Kind: TokenAccess, FamilyID: "tf_1", MAC: []byte{1, 2}, Created: t0, ExpiresAt: t0.Add(time.Hour)}
	refresh := &Token{ID: "tok000000002", Kind: TokenRefresh, FamilyID: "tf_1", MAC: []byte{3, 4}, Created: t0, ExpiresAt: t0.Add(time.Hour)}
	update(t, s, func(tx Tx) error {
		if err := tx.PutToken(access, true); err != nil {
			return err
		}
		return tx.PutToken(refresh, true)
	})
	err := s.Update(ctx, func(tx Tx) error {
		return tx.PutToken(&Token{ID: access.ID, Kind: TokenRefresh, FamilyID: "tf_evil"}, true)
	})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("token created twice: err = %v, want ErrExists", err)
	}
	used := t0.Add(time.Minute)
	refresh.UsedAt = &used
	update(t, s, func(tx Tx) error { return tx.PutToken(refresh, false) })
	view(t, s, func(tx Tx) error {
		got, err := tx.Token(access.ID)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "access Token", got, access)
		got, err = tx.Token(refresh.ID)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "used refresh Token", got, refresh)
		_, err = tx.Token("tok000000009")
		isNotFound(t, "Token missing", err)
		return nil
	})
}

func TestMeta(t *testing.T) {
	s := newStore(t)
	view(t, s, func(tx Tx) error {
		v, err := tx.Meta("schema_version")
		if err != nil || string(v) != "1" {
			t.Fatalf("schema_version = %q, %v; want \"1\"", v, err)
		}
		_, err = tx.Meta("key_fingerprint")
		isNotFound(t, "Meta missing", err)
		return nil
	})
	update(t, s, func(tx Tx) error { return tx.PutMeta("key_fingerprint", []byte("abcdef0123456789")) })
	update(t, s, func(tx Tx) error { return tx.PutMeta("empty", []byte{}) })
	view(t, s, func(tx Tx) error {
		v, err := tx.Meta("key_fingerprint")
		if err != nil || string(v) != "abcdef0123456789" {
			t.Fatalf("Meta = %q, %v", v, err)
		}
		v, err = tx.Meta("empty")
		if err != nil || len(v) != 0 {
			t.Fatalf("empty Meta = %q, %v", v, err)
		}
		return nil
	})
	// Meta values are copies: they stay valid after the transaction.
	var kept []byte
	view(t, s, func(tx Tx) error {
		var err error
		kept, err = tx.Meta("key_fingerprint")
		return err
	})
	update(t, s, func(tx Tx) error { return tx.PutMeta("key_fingerprint", []byte("XXXXXXXXXXXXXXXX")) })
	if string(kept) != "abcdef0123456789" {
		t.Fatalf("Meta value changed after its transaction: %q", kept)
	}
}

// Record kinds live under distinct prefixes: ids that collide across kinds
// do not see each other.
func TestKindsAreSeparate(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx Tx) error {
		if err := tx.PutWorkspace(&Workspace{ID: "x", Name: "ws"}); err != nil {
			return err
		}
		if err := tx.PutPerson(&Person{ID: "x", Email: "x@x"}); err != nil {
			return err
		}
		if err := tx.PutTokenFamily(&TokenFamily{ID: "x", PersonID: "x"}); err != nil {
			return err
		}
		return tx.PutMeta("x", []byte("meta"))
	})
	view(t, s, func(tx Tx) error {
		list, _ := tx.Workspaces()
		if len(list) != 1 {
			t.Fatalf("Workspaces sees %d records", len(list))
		}
		for name, err := range map[string]error{
			"ServiceAccount": errOf(tx.ServiceAccount("x")),
			"APIKey":         errOf(tx.APIKey("x")),
			"Connection":     errOf(tx.Connection("x")),
			"Token":          errOf(tx.Token("x")),
		} {
			isNotFound(t, name, err)
		}
		if _, err := tx.Member("x", "x"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Member: %v", err)
		}
		return nil
	})
}

func errOf[T any](_ T, err error) error { return err }

func TestPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	conn := testConnection("conn_1", "ws1")
	key := &APIKey{ID: "key000000001", Workspace: "ws1", ServiceAccount: "sa_1", MAC: []byte{1}, Created: t0}
	update(t, s, func(tx Tx) error {
		for _, err := range []error{
			tx.PutWorkspace(&Workspace{ID: "ws1", Name: "One", Created: t0}),
			tx.PutPerson(&Person{ID: "p1", Email: "P1@example.com", Created: t0}),
			tx.PutMember(&Member{Workspace: "ws1", PersonID: "p1", Role: RoleOwner, Created: t0}),
			tx.PutServiceAccount(&ServiceAccount{ID: "sa_1", Workspace: "ws1", Created: t0}),
			tx.PutAPIKey(key, true),
			tx.PutConnection(conn, true),
			tx.PutTokenFamily(&TokenFamily{ID: "tf_1", PersonID: "p1", Created: t0, ExpiresAt: t0}),
			tx.PutToken(&Token{ID: "tok_1", FamilyID: "tf_1", Created: t0, ExpiresAt: t0}, true),
			tx.PutMeta("key_fingerprint", []byte("fp")),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, dir)
	view(t, s, func(tx Tx) error {
		must := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s after reopen: %v", what, err)
			}
		}
		count := func(what string, n int, err error) {
			t.Helper()
			must(what, err)
			if n != 1 {
				t.Fatalf("%s after reopen: %d records, want 1", what, n)
			}
		}
		w, err := tx.Workspace("ws1")
		must("Workspace", err)
		equal(t, "Workspace after reopen", w, &Workspace{ID: "ws1", Name: "One", Created: t0})
		ws, err := tx.Workspaces()
		count("Workspaces", len(ws), err)
		p, err := tx.PersonByEmail("p1@EXAMPLE.com")
		must("PersonByEmail", err)
		equal(t, "Person after reopen", p, &Person{ID: "p1", Email: "p1@example.com", Created: t0})
		ms, err := tx.Members("ws1")
		count("Members", len(ms), err)
		ms, err = tx.Memberships("p1")
		count("Memberships", len(ms), err)
		sas, err := tx.ServiceAccounts("ws1")
		count("ServiceAccounts", len(sas), err)
		keys, err := tx.APIKeys("sa_1")
		count("APIKeys", len(keys), err)
		equal(t, "APIKey after reopen", keys[0], key)
		conns, err := tx.Connections("ws1")
		count("Connections", len(conns), err)
		equal(t, "Connection after reopen", conns[0], conn)
		fams, err := tx.TokenFamilies("p1")
		count("TokenFamilies", len(fams), err)
		_, err = tx.Token("tok_1")
		must("Token", err)
		v, err := tx.Meta("key_fingerprint")
		must("Meta", err)
		if string(v) != "fp" {
			t.Fatalf("Meta after reopen = %q", v)
		}
		v, err = tx.Meta("schema_version")
		if err != nil || string(v) != "1" {
			t.Fatalf("schema_version after reopen = %q, %v", v, err)
		}
		return nil
	})
}

func TestRefusesNewerSchema(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutMeta("schema_version", []byte("99")) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Twice: the refused open must release the directory lock.
	for i := 0; i < 2; i++ {
		s, err := OpenBadger(BadgerOptions{Dir: dir})
		if err == nil {
			s.Close()
			t.Fatal("a store of schema 99 was opened")
		}
		if !strings.Contains(err.Error(), "newer") || !strings.Contains(err.Error(), "99") {
			t.Fatalf("attempt %d: error %q does not say the data is newer", i, err)
		}
	}
}

func TestRefusesBadSchema(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutMeta("schema_version", []byte("one")) })
	s.Close()
	if s, err := OpenBadger(BadgerOptions{Dir: dir}); err == nil {
		s.Close()
		t.Fatal("a store with a garbled schema version was opened")
	} else if !strings.Contains(err.Error(), "schema") {
		t.Fatalf("error %q does not mention the schema", err)
	}
}

func TestOlderOrEqualSchemaAccepted(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutMeta("schema_version", []byte("0")) })
	s.Close()
	s = openAt(t, dir)
	view(t, s, func(tx Tx) error {
		v, _ := tx.Meta("schema_version")
		if string(v) != "0" {
			t.Fatalf("schema_version rewritten to %q", v)
		}
		return nil
	})
}

func TestBadDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "data")
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("opened a store under a regular file")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not name the path %s", err, dir)
	}

	// The data dir itself is a regular file.
	s, err = OpenBadger(BadgerOptions{Dir: file})
	if err == nil {
		s.Close()
		t.Fatal("opened a store on a regular file")
	}
	if !strings.Contains(err.Error(), file) {
		t.Fatalf("error %q does not name the path %s", err, file)
	}

	if s, err := OpenBadger(BadgerOptions{}); err == nil {
		s.Close()
		t.Fatal("opened a store with no directory")
	}
}

func TestReadOnlyDataDir(t *testing.T) {
	if runtime.GOOS == "windows" || os.Geteuid() == 0 {
		t.Skip("permissions are not enforced")
	}
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("opened a store in a read-only directory")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("error %q does not explain the read-only path", err)
	}
}

func TestDataDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	openAt(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() {
		t.Fatal("data dir is not a directory")
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %o, want 700", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, ".agentgate-write-test")); !os.IsNotExist(err) {
		t.Fatalf("write probe left behind: %v", err)
	}
}

func TestSecondOpenOfSameDirFails(t *testing.T) {
	dir := t.TempDir()
	openAt(t, dir)
	s, err := OpenBadger(BadgerOptions{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("the same directory was opened twice")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not name the path", err)
	}
}

func TestClose(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Dir: t.TempDir(), GCInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
	time.Sleep(5 * time.Millisecond) // let the GC loop tick
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	called := false
	if err := s.View(ctx, func(Tx) error { called = true; return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("View after Close: %v, want ErrClosed", err)
	}
	if err := s.Update(ctx, func(Tx) error { called = true; return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Update after Close: %v, want ErrClosed", err)
	}
	if called {
		t.Fatal("fn ran on a closed store")
	}
}

func TestConcurrentClose(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Close()
		}()
	}
	wg.Wait()
	if err := s.View(ctx, func(Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("View after Close: %v", err)
	}
}

func TestUpdateErrorDiscards(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1", Name: "before"}) })
	boom := errors.New("boom")
	calls := 0
	err := s.Update(ctx, func(tx Tx) error {
		calls++
		if err := tx.PutWorkspace(&Workspace{ID: "ws1", Name: "after"}); err != nil {
			return err
		}
		if err := tx.PutWorkspace(&Workspace{ID: "ws2", Name: "new"}); err != nil {
			return err
		}
		if err := tx.PutMeta("m", []byte("v")); err != nil {
			return err
		}
		// The transaction sees its own writes before failing.
		if w, err := tx.Workspace("ws1"); err != nil || w.Name != "after" {
			t.Errorf("own write not visible: %v, %v", w, err)
		}
		return fmt.Errorf("wrapped: %w", boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want the fn's error", err)
	}
	if calls != 1 {
		t.Fatalf("fn called %d times; a non-conflict error must not be retried", calls)
	}
	view(t, s, func(tx Tx) error {
		w, err := tx.Workspace("ws1")
		if err != nil || w.Name != "before" {
			t.Fatalf("ws1 = %+v, %v; want unchanged", w, err)
		}
		_, err = tx.Workspace("ws2")
		isNotFound(t, "ws2 of a failed Update", err)
		_, err = tx.Meta("m")
		isNotFound(t, "meta of a failed Update", err)
		return nil
	})
}

func TestViewErrorAndReadOnly(t *testing.T) {
	s := newStore(t)
	boom := errors.New("boom")
	if err := s.View(ctx, func(Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("View returned %v, want the fn's error", err)
	}
	err := s.View(ctx, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
	if err == nil {
		t.Fatal("a write in View succeeded")
	}
	view(t, s, func(tx Tx) error {
		_, err := tx.Workspace("ws1")
		isNotFound(t, "write in View", err)
		return nil
	})
}

// Update retries on conflict: concurrent read-modify-write loses nothing.
func TestConcurrentUpdateLosesNothing(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Update(ctx, func(tx Tx) error {
				w, err := tx.Workspace("ws1")
				if err != nil {
					return err
				}
				w.Name += string(rune('A' + i%26))
				return tx.PutWorkspace(w)
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Update: %v", err)
		}
	}
	view(t, s, func(tx Tx) error {
		w, err := tx.Workspace("ws1")
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Name) != n {
			t.Fatalf("name has %d characters after %d appends: updates were lost", len(w.Name), n)
		}
		counts := map[rune]int{}
		for _, c := range w.Name {
			counts[c]++
		}
		for i := 0; i < n; i++ {
			counts[rune('A'+i%26)]--
		}
		for c, k := range counts {
			if k != 0 {
				t.Fatalf("character %q off by %d", c, k)
			}
		}
		return nil
	})
}

// Concurrent creators of one email: exactly one wins, the rest get ErrExists.
func TestConcurrentEmailUniqueness(t *testing.T) {
	s := newStore(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(ctx, func(tx Tx) error {
				return tx.PutPerson(&Person{ID: fmt.Sprintf("p%02d", i), Email: "same@example.com"})
			})
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, ErrExists):
		default:
			t.Fatalf("creator %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d creators won the same email, want 1", won)
	}
	view(t, s, func(tx Tx) error {
		p, err := tx.PersonByEmail("same@example.com")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("p%02d", i)
			_, err := tx.Person(id)
			if (id == p.ID) != (err == nil) {
				t.Fatalf("person %s: %v (winner %s)", id, err, p.ID)
			}
		}
		return nil
	})
}

func TestUpdateCanceledContextAfterConflict(t *testing.T) {
	// A canceled context does not stop a first, non-conflicting attempt...
	s := newStore(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Update(cctx, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) }); err != nil {
		t.Fatalf("Update with canceled context and no conflict: %v", err)
	}
}

func TestInMemory(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1", Name: "mem"}) })
	view(t, s, func(tx Tx) error {
		w, err := tx.Workspace("ws1")
		if err != nil || w.Name != "mem" {
			t.Fatalf("in-memory Workspace: %v, %v", w, err)
		}
		v, err := tx.Meta("schema_version")
		if err != nil || string(v) != "1" {
			t.Fatalf("in-memory schema_version: %q, %v", v, err)
		}
		return nil
	})
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

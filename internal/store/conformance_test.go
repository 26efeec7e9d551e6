package store

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

// runConformance runs the behaviour every Store backend shares against
// stores made by open: one fresh, empty store per subtest.
func runConformance(t *testing.T, open func(t *testing.T) Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"Workspaces", testWorkspaces},
		{"Persons", testPersons},
		{"PersonEmailUniqueWithinTx", testPersonEmailUniqueWithinTx},
		{"Members", testMembers},
		{"ServiceAccounts", testServiceAccounts},
		{"APIKeys", testAPIKeys},
		{"Connections", testConnections},
		{"ConnectionChanges", testConnectionChanges},
		{"WorkspaceModels", testWorkspaceModels},
		{"Policies", testPolicies},
		{"ClaudeCodeSettings", testClaudeCodeSettings},
		{"TokenFamiliesAndTokens", testTokenFamiliesAndTokens},
		{"DeviceGrants", testDeviceGrants},
		{"Budgets", testBudgets},
		{"Usage", testUsage},
		{"Holds", testHolds},
		{"ExtremeAmounts", testExtremeAmounts},
		{"Meta", testMeta},
		{"KindsAreSeparate", testKindsAreSeparate},
		{"UpdateErrorDiscards", testUpdateErrorDiscards},
		{"ViewErrorAndReadOnly", testViewErrorAndReadOnly},
		{"ConcurrentUpdateLosesNothing", testConcurrentUpdateLosesNothing},
		{"ConcurrentEmailUniqueness", testConcurrentEmailUniqueness},
		{"ConcurrentCreateOneWins", testConcurrentCreateOneWins},
		{"InstanceSessions", testInstanceSessions},
		{"InstanceSessionPaging", testInstanceSessionPaging},
		{"InstanceSessionTreeDelete", testInstanceSessionTreeDelete},
		{"SessionItems", testSessionItems},
		{"SessionEvents", testSessionEvents},
		{"MoveSessionItem", testMoveSessionItem},
		{"DeleteSessionItem", testDeleteSessionItem},
		{"QueriesInsideIteration", testQueriesInsideIteration},
		{"KVIterate", testKVIterate},
		{"Close", testClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

func testWorkspaces(t *testing.T, s Store) {
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

func testPersons(t *testing.T, s Store) {
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
func testPersonEmailUniqueWithinTx(t *testing.T, s Store) {
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

func testMembers(t *testing.T, s Store) {
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

func testServiceAccounts(t *testing.T, s Store) {
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
	checkGrouped(t, s, grouped[ServiceAccount]{what: "ServiceAccount", recs: sas, id: id, missing: "sa_9",
		get: Tx.ServiceAccount, list: Tx.ServiceAccounts,
		groups: map[string][]string{"ws1": {"sa_1", "sa_2"}, "ws2": {"sa_3"}, "ws3": {}}})
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

func testAPIKeys(t *testing.T, s Store) {
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
	checkGrouped(t, s, grouped[APIKey]{what: "APIKey", recs: []*APIKey{k1, k2, k3}, id: id, missing: "key000000009",
		get: Tx.APIKey, list: Tx.APIKeys,
		groups: map[string][]string{"sa_1": {k1.ID, k2.ID}, "sa_2": {k3.ID}, "sa_9": {}}})
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

func testWorkspaceModels(t *testing.T, s Store) {
	mk := func(ws, id string) *WorkspaceModel {
		return &WorkspaceModel{ID: id, Workspace: ws, Name: id, Created: t0, Updated: t0,
			Targets: []ModelTarget{{Connection: "conn_1", Model: "m-" + id, Order: 1}, {Connection: "conn_2", Model: "x", Weight: 3}}}
	}
	update(t, s, func(tx Tx) error {
		for _, m := range []*WorkspaceModel{mk("ws1", "zeta"), mk("ws1", "alpha"), mk("ws10", "alpha"), mk("ws2", "beta")} {
			if err := tx.PutWorkspaceModel(m, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err := s.Update(ctx, func(tx Tx) error { return tx.PutWorkspaceModel(mk("ws1", "alpha"), true) }); !errors.Is(err, ErrExists) {
		t.Fatalf("create twice: err = %v, want ErrExists", err)
	}
	id := func(m *WorkspaceModel) string { return m.ID }
	view(t, s, func(tx Tx) error {
		list, err := tx.WorkspaceModels("ws1")
		if err != nil {
			t.Fatal(err)
		}
		// ws10 shares a prefix with ws1 and stays out of its list.
		equal(t, "WorkspaceModels(ws1)", ids(list, id), []string{"alpha", "zeta"})
		equal(t, "alpha", list[0], mk("ws1", "alpha"))
		if _, err := tx.WorkspaceModel("ws2", "alpha"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another workspace's id: err = %v, want ErrNotFound", err)
		}
		return nil
	})
	changed := mk("ws1", "alpha")
	changed.Targets = changed.Targets[:1]
	update(t, s, func(tx Tx) error { return tx.PutWorkspaceModel(changed, false) })
	update(t, s, func(tx Tx) error { return tx.DeleteWorkspaceModel("ws1", "zeta") })
	if err := s.Update(ctx, func(tx Tx) error { return tx.DeleteWorkspaceModel("ws1", "zeta") }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: err = %v, want ErrNotFound", err)
	}
	view(t, s, func(tx Tx) error {
		list, _ := tx.WorkspaceModels("ws1")
		equal(t, "WorkspaceModels(ws1) after delete", ids(list, id), []string{"alpha"})
		equal(t, "updated alpha", list[0], changed)
		return nil
	})
}

func testPolicies(t *testing.T, s Store) {
	mk := func(ws, id string) *Policy {
		return &Policy{ID: id, Workspace: ws, PolicyRule: PolicyRule{Name: id, Effect: EffectLimit, Models: []string{"claude-*"}, Roles: []string{RoleMember},
			Per: PerKey, RequestsPerMinute: 5}, Created: t0, Updated: t0}
	}
	update(t, s, func(tx Tx) error {
		for _, p := range []*Policy{mk("ws1", "pol_b"), mk("ws1", "pol_a"), mk("ws10", "pol_c")} {
			if err := tx.PutPolicy(p); err != nil {
				return err
			}
		}
		return nil
	})
	id := func(p *Policy) string { return p.ID }
	view(t, s, func(tx Tx) error {
		list, _ := tx.Policies("ws1")
		equal(t, "Policies(ws1)", ids(list, id), []string{"pol_a", "pol_b"})
		equal(t, "pol_a", list[0], mk("ws1", "pol_a"))
		return nil
	})
	update(t, s, func(tx Tx) error { return tx.DeletePolicy("ws1", "pol_a") })
	if err := s.Update(ctx, func(tx Tx) error { return tx.DeletePolicy("ws1", "pol_a") }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	view(t, s, func(tx Tx) error {
		list, _ := tx.Policies("ws1")
		equal(t, "Policies(ws1) after delete", ids(list, id), []string{"pol_b"})
		return nil
	})
}

func testClaudeCodeSettings(t *testing.T, s Store) {
	view(t, s, func(tx Tx) error {
		_, err := tx.ClaudeCodeSettings("ws1")
		isNotFound(t, "ClaudeCodeSettings of a workspace without any", err)
		return nil
	})
	doc := &ClaudeCodeSettings{Workspace: "ws1", Settings: `{"env":{"A":"<&>"}}`, Checksum: "sha256:ab", Version: 2,
		Declared: true, Updated: t0}
	change := func(ws string, v int) *ClaudeCodeSettingsChange {
		return &ClaudeCodeSettingsChange{Workspace: ws, Version: v, Time: t0.Add(time.Duration(v) * time.Minute), ActorKind: "member",
			ActorID: "usr_1", Checksum: fmt.Sprintf("sha256:%02d", v), Settings: `{}`}
	}
	update(t, s, func(tx Tx) error {
		if err := tx.PutClaudeCodeSettings(doc); err != nil {
			return err
		}
		if err := tx.PutClaudeCodeSettings(&ClaudeCodeSettings{Workspace: "ws10", Settings: `{}`, Version: 1}); err != nil {
			return err
		}
		// Versions sort as numbers: 10 after 9.
		for _, c := range []*ClaudeCodeSettingsChange{change("ws1", 10), change("ws1", 9), change("ws10", 1), change("ws1", 1)} {
			if err := tx.PutClaudeCodeSettingsChange(c); err != nil {
				return err
			}
		}
		return nil
	})
	if err := s.Update(ctx, func(tx Tx) error { return tx.PutClaudeCodeSettingsChange(change("ws1", 9)) }); !errors.Is(err, ErrExists) {
		t.Fatalf("a version appended twice: err = %v, want ErrExists", err)
	}
	view(t, s, func(tx Tx) error {
		got, err := tx.ClaudeCodeSettings("ws1")
		if err != nil {
			return err
		}
		equal(t, "ClaudeCodeSettings(ws1)", got, doc)
		list, err := tx.ClaudeCodeSettingsChanges("ws1")
		if err != nil {
			return err
		}
		equal(t, "ClaudeCodeSettingsChanges(ws1)", ids(list, func(c *ClaudeCodeSettingsChange) string { return c.Checksum }),
			[]string{"sha256:01", "sha256:09", "sha256:10"})
		equal(t, "version 10", list[2], change("ws1", 10))
		list, _ = tx.ClaudeCodeSettingsChanges("ws10")
		equal(t, "ClaudeCodeSettingsChanges(ws10)", len(list), 1)
		return nil
	})
}

func testConnectionChanges(t *testing.T, s Store) {
	mk := func(ws, conn, id string, at time.Time) *ConnectionChange {
		return &ConnectionChange{ID: id, Workspace: ws, Connection: conn, Time: at, ActorKind: "key", ActorID: "key123456789",
			ActorServiceAccount: "sa_1", OldOrigin: "https://api.openai.com", NewOrigin: "https://proxy.example:8443",
			OldKind: KindOpenAI, NewKind: KindOpenAI}
	}
	a, b := mk("ws1", "conn_1", "cch_0002", t0.Add(time.Minute)), mk("ws1", "conn_1", "cch_0001", t0)
	other, longer := mk("ws1", "conn_2", "cch_0003", t0), mk("ws1", "conn_10", "cch_0004", t0)
	elsewhere := mk("ws10", "conn_1", "cch_0005", t0)
	update(t, s, func(tx Tx) error {
		for _, c := range []*ConnectionChange{a, b, other, longer, elsewhere} {
			if err := tx.PutConnectionChange(c); err != nil {
				return err
			}
		}
		return nil
	})
	// The trail is append-only: an id is never written twice.
	if err := s.Update(ctx, func(tx Tx) error { return tx.PutConnectionChange(mk("ws1", "conn_1", "cch_0001", t0)) }); !errors.Is(err, ErrExists) {
		t.Fatalf("append twice: err = %v, want ErrExists", err)
	}
	id := func(c *ConnectionChange) string { return c.ID }
	view(t, s, func(tx Tx) error {
		list, err := tx.ConnectionChanges("ws1", "conn_1")
		if err != nil {
			return err
		}
		equal(t, "ConnectionChanges(ws1, conn_1)", ids(list, id), []string{"cch_0001", "cch_0002"})
		equal(t, "cch_0002", list[1], a)
		list, _ = tx.ConnectionChanges("ws1", "conn_10")
		equal(t, "ConnectionChanges(ws1, conn_10)", ids(list, id), []string{"cch_0004"})
		list, _ = tx.ConnectionChanges("ws10", "conn_1")
		equal(t, "ConnectionChanges(ws10, conn_1)", ids(list, id), []string{"cch_0005"})
		list, err = tx.ConnectionChanges("ws1", "conn_9")
		if err != nil || len(list) != 0 {
			t.Fatalf("ConnectionChanges of a connection without any: %v, %v", list, err)
		}
		return nil
	})
	// The trail outlives its connection.
	update(t, s, func(tx Tx) error { return tx.PutConnection(testConnection("conn_1", "ws1"), true) })
	update(t, s, func(tx Tx) error { return tx.DeleteConnection("conn_1") })
	view(t, s, func(tx Tx) error {
		list, _ := tx.ConnectionChanges("ws1", "conn_1")
		equal(t, "ConnectionChanges after the connection is deleted", ids(list, id), []string{"cch_0001", "cch_0002"})
		return nil
	})
}

func testConnections(t *testing.T, s Store) {
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
	checkGrouped(t, s, grouped[Connection]{what: "Connection", recs: []*Connection{c1, c2, c3}, id: id, missing: "conn_9",
		get: Tx.Connection, list: Tx.Connections,
		groups: map[string][]string{"ws1": {"conn_1", "conn_2"}, "ws2": {"conn_3"}, "ws3": {}}}) // ws3: the refused create left nothing

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

func testTokenFamiliesAndTokens(t *testing.T, s Store) {
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
	checkGrouped(t, s, grouped[TokenFamily]{what: "TokenFamily", recs: fams, id: id, missing: "tf_9",
		get: Tx.TokenFamily, list: Tx.TokenFamilies,
		groups: map[string][]string{"p1": {"tf_1", "tf_2"}, "p2": {"tf_3"}, "p3": {}}})

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

func testMeta(t *testing.T, s Store) {
	view(t, s, func(tx Tx) error {
		v, err := tx.Meta("schema_version")
		if err != nil || string(v) != strconv.Itoa(SchemaVersion) {
			t.Fatalf("schema_version = %q, %v; want %d", v, err, SchemaVersion)
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
func testKindsAreSeparate(t *testing.T, s Store) {
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

func testUpdateErrorDiscards(t *testing.T, s Store) {
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

func testViewErrorAndReadOnly(t *testing.T, s Store) {
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
func testConcurrentUpdateLosesNothing(t *testing.T, s Store) {
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
func testConcurrentEmailUniqueness(t *testing.T, s Store) {
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

func testMoveSessionItem(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		if err := tx.PutInstanceSession(&InstanceSession{Instance: "i", ID: "ses_1", Directory: "/d", ProjectID: "p", Info: []byte(`{}`)}, true); err != nil {
			return err
		}
		for _, it := range []struct {
			kind byte
			id   string
		}{{ItemInbox, "msg_a"}, {ItemMessage, "msg_b"}, {ItemInbox, "msg_c"}} {
			if err := tx.AppendSessionItem("i", "ses_1", it.kind, it.id, []byte(`"`+it.id+`"`)); err != nil {
				return err
			}
		}
		return tx.MoveSessionItem("i", "ses_1", "msg_a", ItemMessage, []byte(`"msg_a2"`))
	})
	view(t, s, func(tx Tx) error {
		var msgs, inbox []string
		tx.SessionItems("i", "ses_1", ItemMessage, func(raw []byte) (bool, error) { msgs = append(msgs, string(raw)); return true, nil })
		tx.SessionItems("i", "ses_1", ItemInbox, func(raw []byte) (bool, error) { inbox = append(inbox, string(raw)); return true, nil })
		equal(t, "messages", msgs, []string{`"msg_b"`, `"msg_a2"`})
		equal(t, "inbox", inbox, []string{`"msg_c"`})
		k, err := tx.SessionItemKind("i", "ses_1", "msg_a")
		equal(t, "kind", k, ItemMessage)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.AppendSessionItem("i", "ses_1", ItemMessage, "msg_a", nil); !errors.Is(err, ErrExists) {
			t.Fatalf("id reuse: %v", err)
		}
		if err := tx.MoveSessionItem("i", "ses_1", "msg_zz", ItemMessage, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
		return nil
	})
}

func testDeleteSessionItem(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		if err := tx.PutInstanceSession(&InstanceSession{Instance: "i", ID: "ses_1", Directory: "/d", ProjectID: "p", Info: []byte(`{}`)}, true); err != nil {
			return err
		}
		for _, id := range []string{"msg_a", "msg_b", "msg_c"} {
			if err := tx.AppendSessionItem("i", "ses_1", ItemMessage, id, []byte(`"`+id+`"`)); err != nil {
				return err
			}
		}
		return tx.DeleteSessionItem("i", "ses_1", "msg_b")
	})
	view(t, s, func(tx Tx) error {
		var msgs []string
		tx.SessionItems("i", "ses_1", ItemMessage, func(raw []byte) (bool, error) { msgs = append(msgs, string(raw)); return true, nil })
		equal(t, "messages", msgs, []string{`"msg_a"`, `"msg_c"`})
		if _, err := tx.SessionItemKind("i", "ses_1", "msg_b"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted item's kind: %v", err)
		}
		if err := tx.DeleteSessionItem("i", "ses_1", "msg_zz"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
		return nil
	})
	// The id is free again.
	update(t, s, func(tx Tx) error { return tx.AppendSessionItem("i", "ses_1", ItemMessage, "msg_b", []byte(`"msg_b2"`)) })
}

func testDeviceGrants(t *testing.T, s Store) {
	g := &DeviceGrant{ID: "dc01", UserCodeMAC: "uc01", ClientID: "cli", OrgScope: true, State: DevicePending,
		Created: t0, ExpiresAt: t0.Add(15 * time.Minute), Interval: 5, LastPoll: t0}
	update(t, s, func(tx Tx) error { return tx.PutDeviceGrant(g, true) })
	for _, dup := range []*DeviceGrant{
		{ID: "dc01", UserCodeMAC: "uc99"}, // same device code
		{ID: "dc99", UserCodeMAC: "uc01"}, // same user code
	} {
		err := s.Update(ctx, func(tx Tx) error { return tx.PutDeviceGrant(dup, true) })
		if !errors.Is(err, ErrExists) {
			t.Fatalf("duplicate grant %+v: err = %v, want ErrExists", dup, err)
		}
	}
	view(t, s, func(tx Tx) error {
		got, err := tx.DeviceGrant("dc01")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "DeviceGrant", got, g)
		got, err = tx.DeviceGrantByUserCode("uc01")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "DeviceGrantByUserCode", got, g)
		_, err = tx.DeviceGrant("dc99")
		isNotFound(t, "refused grant", err)
		_, err = tx.DeviceGrantByUserCode("uc99")
		isNotFound(t, "user code of a refused grant", err)
		_, err = tx.DeviceGrantByUserCode("uc0")
		isNotFound(t, "user code prefix", err)
		return nil
	})
	// Updating (create=false) keeps the user code index.
	g.State, g.PersonID, g.Workspace, g.Interval = DeviceApproved, "p1", "ws1", 10
	update(t, s, func(tx Tx) error { return tx.PutDeviceGrant(g, false) })
	view(t, s, func(tx Tx) error {
		got, err := tx.DeviceGrantByUserCode("uc01")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "approved grant", got, g)
		return nil
	})
}

func testBudgets(t *testing.T, s Store) {
	bs := []*Budget{
		{Workspace: "ws1", MemberID: "sa_2", MemberKind: MemberServiceAccount, Limit: 5_000_000, Period: PeriodDaily, Spent: 1, PeriodStart: t0, Updated: t0},
		{Workspace: "ws1", MemberID: "p1", MemberKind: MemberPerson, Limit: money.Pico(1) << 60, Period: PeriodMonthly, PeriodStart: t0, Updated: t0},
		{Workspace: "ws10", MemberID: "p1", MemberKind: MemberPerson, Limit: 7, Period: PeriodTotal, PeriodStart: t0, Updated: t0},
	}
	update(t, s, func(tx Tx) error {
		for _, b := range bs {
			if err := tx.PutBudget(b); err != nil {
				return err
			}
		}
		return nil
	})
	key := func(b *Budget) string { return b.Workspace + "/" + b.MemberID }
	view(t, s, func(tx Tx) error {
		for _, b := range bs {
			got, err := tx.Budget(b.Workspace, b.MemberID)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "Budget", got, b)
		}
		_, err := tx.Budget("ws1", "p9")
		isNotFound(t, "Budget missing", err)
		list, err := tx.Budgets("ws1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Budgets(ws1)", ids(list, key), []string{"ws1/p1", "ws1/sa_2"})
		list, _ = tx.Budgets("ws")
		equal(t, "Budgets(ws)", ids(list, key), []string{})
		return nil
	})
	bs[0].Spent = 4_000_000
	update(t, s, func(tx Tx) error { return tx.PutBudget(bs[0]) })
	update(t, s, func(tx Tx) error { return tx.DeleteBudget("ws1", "p1") })
	update(t, s, func(tx Tx) error { return tx.DeleteBudget("ws1", "p9") }) // missing: no error
	view(t, s, func(tx Tx) error {
		list, _ := tx.Budgets("ws1")
		equal(t, "Budgets(ws1) after delete", ids(list, key), []string{"ws1/sa_2"})
		equal(t, "updated Budget", list[0], bs[0])
		return nil
	})
}

func usageID(i int) string { return fmt.Sprintf("u%06d", i) }

// usageSession is the agent session of conformance usage record i: none
// for every third record, else one of two sessions of the longest length.
func usageSession(i int) string {
	if i%3 == 0 {
		return ""
	}
	return fmt.Sprintf("ses-%d-%0*d", i%3, MaxSessionLen-6, 0)
}

func testUsage(t *testing.T, s Store) {
	const n = 250 // more than one page of a paged backend
	update(t, s, func(tx Tx) error {
		for i := n - 1; i >= 0; i-- {
			u := &UsageRecord{ID: usageID(i), Time: t0.Add(time.Duration(i) * time.Second), Workspace: "ws1", MemberID: "p1",
				MemberKind: MemberPerson, Connection: "conn_1", Format: "chat", Model: "m", UpstreamModel: "m-1",
				Tokens: Tokens{Input: int64(i), Output: 2}, Cost: money.Pico(i * 1000), Status: 200, Session: usageSession(i)}
			if err := tx.PutUsage(u); err != nil {
				return err
			}
		}
		// A workspace whose id extends ws1 is a different range.
		return tx.PutUsage(&UsageRecord{ID: usageID(0), Workspace: "ws10", MemberID: "p2"})
	})
	err := s.Update(ctx, func(tx Tx) error { return tx.PutUsage(&UsageRecord{ID: usageID(7), Workspace: "ws1"}) })
	if !errors.Is(err, ErrExists) {
		t.Fatalf("usage id reused: err = %v, want ErrExists", err)
	}
	collect := func(tx Tx, ws, after string, limit int) []string {
		var out []string
		err := tx.Usage(ws, after, func(u *UsageRecord) (bool, error) {
			out = append(out, u.ID)
			return limit == 0 || len(out) < limit, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, usageID(i))
		}
		return out
	}
	view(t, s, func(tx Tx) error {
		equal(t, "all usage", collect(tx, "ws1", "", 0), want(0, n))
		equal(t, "after a cursor", collect(tx, "ws1", usageID(99), 0), want(100, n))
		equal(t, "after a cursor that is not an id", collect(tx, "ws1", usageID(99)+"x", 3), want(100, 103))
		equal(t, "after a prefix of ids", collect(tx, "ws1", "u0001", 2), want(100, 102))
		equal(t, "stopped early", collect(tx, "ws1", "", 5), want(0, 5))
		equal(t, "after the last", collect(tx, "ws1", usageID(n-1), 0), []string(nil))
		equal(t, "ws10", collect(tx, "ws10", "", 0), []string{usageID(0)})
		equal(t, "ws", collect(tx, "ws", "", 0), []string(nil))
		var got *UsageRecord
		tx.Usage("ws1", usageID(41), func(u *UsageRecord) (bool, error) { got = u; return false, nil })
		equal(t, "record", got, &UsageRecord{ID: usageID(42), Time: t0.Add(42 * time.Second), Workspace: "ws1", MemberID: "p1",
			MemberKind: MemberPerson, Connection: "conn_1", Format: "chat", Model: "m", UpstreamModel: "m-1",
			Tokens: Tokens{Input: 42, Output: 2}, Cost: 42_000, Status: 200})
		tx.Usage("ws1", usageID(42), func(u *UsageRecord) (bool, error) { got = u; return false, nil })
		equal(t, "record with a session", got, &UsageRecord{ID: usageID(43), Time: t0.Add(43 * time.Second), Workspace: "ws1", MemberID: "p1",
			MemberKind: MemberPerson, Connection: "conn_1", Format: "chat", Model: "m", UpstreamModel: "m-1",
			Tokens: Tokens{Input: 43, Output: 2}, Cost: 43_000, Status: 200, Session: usageSession(43)})
		// Every record keeps its session (or none), across pages.
		i := 0
		tx.Usage("ws1", "", func(u *UsageRecord) (bool, error) {
			if u.Session != usageSession(i) {
				t.Errorf("record %s: session %q, want %q", u.ID, u.Session, usageSession(i))
			}
			i++
			return true, nil
		})
		boom := errors.New("boom")
		if err := tx.Usage("ws1", "", func(*UsageRecord) (bool, error) { return true, boom }); !errors.Is(err, boom) {
			t.Fatalf("callback error: %v", err)
		}
		return nil
	})
	// AppendUsage appends a record of a fresh id as PutUsage does, in the
	// same transaction as other writes.
	fresh := &UsageRecord{ID: usageID(n), Time: t0.Add(n * time.Second), Workspace: "ws1", MemberID: "p1", Cost: 7, Status: 200}
	update(t, s, func(tx Tx) error {
		if err := tx.AppendUsage(fresh); err != nil {
			return err
		}
		return tx.PutWorkspace(&Workspace{ID: "ws-append"})
	})
	view(t, s, func(tx Tx) error {
		equal(t, "after AppendUsage", collect(tx, "ws1", usageID(n-1), 0), []string{usageID(n)})
		var got *UsageRecord
		tx.Usage("ws1", usageID(n-1), func(u *UsageRecord) (bool, error) { got = u; return false, nil })
		equal(t, "appended record", got, fresh)
		return nil
	})
}

// A taken id given to AppendUsage, which its callers never do: PostgreSQL
// refuses it; Badger writes over the record without reading the key
// (testAppendUsageOverwrites).
func testAppendUsageTaken(t *testing.T, s Store) error {
	rec := &UsageRecord{ID: "u-taken", Workspace: "ws1", MemberID: "p1", Cost: 1, Status: 200}
	update(t, s, func(tx Tx) error { return tx.PutUsage(rec) })
	again := *rec
	again.Cost = 2
	return s.Update(ctx, func(tx Tx) error { return tx.AppendUsage(&again) })
}

func testHolds(t *testing.T, s Store) {
	exp := t0.Add(time.Minute)
	hs := []*Hold{
		{ID: "h2", Workspace: "ws1", MemberID: "m1", Amount: 20, Node: "node-a", ExpiresAt: exp},
		{ID: "h1", Workspace: "ws1", MemberID: "m1", Amount: money.Pico(1) << 61, ExpiresAt: exp},
		{ID: "h3", Workspace: "ws1", MemberID: "m10", Amount: 30, ExpiresAt: exp},
		{ID: "h4", Workspace: "ws10", MemberID: "m1", Amount: 40, ExpiresAt: exp},
	}
	view(t, s, func(tx Tx) error {
		list, err := tx.Holds("ws1", "m1")
		if err != nil || len(list) != 0 {
			t.Fatalf("no holds: %v, %v", list, err)
		}
		return nil
	})
	update(t, s, func(tx Tx) error {
		for _, h := range hs {
			if err := tx.PutHold(h); err != nil {
				return err
			}
		}
		return nil
	})
	id := func(h *Hold) string { return h.ID }
	view(t, s, func(tx Tx) error {
		list, err := tx.Holds("ws1", "m1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "Holds(ws1, m1)", ids(list, id), []string{"h1", "h2"})
		equal(t, "hold h1", list[0], hs[1])
		equal(t, "hold h2", list[1], hs[0])
		list, _ = tx.Holds("ws1", "m10")
		equal(t, "Holds(ws1, m10)", ids(list, id), []string{"h3"})
		list, _ = tx.Holds("ws10", "m1")
		equal(t, "Holds(ws10, m1)", ids(list, id), []string{"h4"})
		list, _ = tx.Holds("ws1", "m")
		equal(t, "Holds(ws1, m)", ids(list, id), []string{})
		return nil
	})
	hs[0].Amount = 25
	update(t, s, func(tx Tx) error {
		if err := tx.PutHold(hs[0]); err != nil { // overwrite in place
			return err
		}
		if err := tx.DeleteHold("ws1", "m1", "h1"); err != nil {
			return err
		}
		return tx.DeleteHold("ws1", "m1", "h9") // missing: no error
	})
	view(t, s, func(tx Tx) error {
		list, _ := tx.Holds("ws1", "m1")
		equal(t, "Holds after delete", list, []*Hold{hs[0]})
		return nil
	})
}

// Concurrent creators of one key id: exactly one wins, for every kind that
// refuses a taken id.
func testConcurrentCreateOneWins(t *testing.T, s Store) {
	kinds := map[string]func(tx Tx, i int) error{
		"APIKey": func(tx Tx, i int) error {
			return tx.PutAPIKey(&APIKey{ID: "key000000001", ServiceAccount: fmt.Sprintf("sa_%d", i)}, true)
		},
		"Token": func(tx Tx, i int) error {
			return tx.PutToken(&Token{ID: "tok000000001", FamilyID: fmt.Sprintf("tf_%d", i)}, true)
		},
		"Connection": func(tx Tx, i int) error {
			return tx.PutConnection(testConnection("conn_1", fmt.Sprintf("ws%d", i)), true)
		},
		"Usage": func(tx Tx, i int) error {
			return tx.PutUsage(&UsageRecord{ID: "u1", Workspace: "ws1", MemberID: fmt.Sprintf("p%d", i)})
		},
		"SessionItem": func(tx Tx, i int) error {
			return tx.AppendSessionItem("i", "ses_1", ItemMessage, "msg_1", []byte(fmt.Sprint(i)))
		},
	}
	for name, put := range kinds {
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.Update(ctx, func(tx Tx) error { return put(tx, i) })
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
				t.Fatalf("%s creator %d: %v", name, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: %d creators won, want 1", name, won)
		}
	}
}

func testClose(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error { return tx.PutWorkspace(&Workspace{ID: "ws1"}) })
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
	var u interface{ Unavailable() bool }
	if !errors.As(ErrClosed, &u) || !u.Unavailable() {
		t.Fatal("ErrClosed does not report Unavailable")
	}
}

// The key-value layer under the records: bytewise order, prefixes that end
// in 0xff, seeks and reverse scans.
func testKVIterate(t *testing.T, s Store) {
	keys := []string{"a", "a\x00", "a\x00\x01", "a\x01", "a\xff", "a\xff\x00", "a\xff\xff", "b", "\xff", "\xff\xff"}
	update(t, s, func(tx Tx) error {
		kv := txKV(tx)
		for i := len(keys) - 1; i >= 0; i-- {
			if err := kv.Set(keys[i], []byte{byte(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	scan := func(tx Tx, r kvRange, limit int) []string {
		out := []string{}
		err := txKV(tx).Iterate(r, func(k, v []byte) (bool, error) {
			if !slices.Contains(keys, string(k)) {
				return true, nil // a record of the store itself (schema version)
			}
			if !r.KeysOnly && (len(v) != 1 || keys[v[0]] != string(k)) {
				t.Fatalf("value of %q is %v", k, v)
			}
			if r.KeysOnly && v != nil {
				t.Fatalf("KeysOnly gave a value for %q", k)
			}
			out = append(out, string(k))
			return limit == 0 || len(out) < limit, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	view(t, s, func(tx Tx) error {
		for _, tc := range []struct {
			r     kvRange
			limit int
			want  []string
		}{
			{kvRange{Prefix: "a"}, 0, keys[:7]},
			{kvRange{Prefix: "a", KeysOnly: true}, 0, keys[:7]},
			{kvRange{Prefix: "a", Reverse: true}, 0, []string{"a\xff\xff", "a\xff\x00", "a\xff", "a\x01", "a\x00\x01", "a\x00", "a"}},
			{kvRange{Prefix: "a\xff"}, 0, []string{"a\xff", "a\xff\x00", "a\xff\xff"}},
			{kvRange{Prefix: "a\xff", Reverse: true}, 0, []string{"a\xff\xff", "a\xff\x00", "a\xff"}},
			{kvRange{Prefix: "\xff"}, 0, []string{"\xff", "\xff\xff"}},
			{kvRange{Prefix: "\xff", Reverse: true, KeysOnly: true}, 0, []string{"\xff\xff", "\xff"}},
			{kvRange{Prefix: "a\x00"}, 0, []string{"a\x00", "a\x00\x01"}},
			{kvRange{}, 0, keys},
			{kvRange{Reverse: true}, 2, []string{"\xff\xff", "\xff"}},
			{kvRange{Prefix: "a", Start: "a\x01"}, 0, []string{"a\x01", "a\xff", "a\xff\x00", "a\xff\xff"}},
			{kvRange{Prefix: "a", Start: "a\x02"}, 2, []string{"a\xff", "a\xff\x00"}},
			{kvRange{Prefix: "a", Start: "a\x01", Reverse: true}, 0, []string{"a\x01", "a\x00\x01", "a\x00", "a"}},
			{kvRange{Prefix: "a", Start: "a\x00\x02", Reverse: true}, 0, []string{"a\x00\x01", "a\x00", "a"}},
			{kvRange{Prefix: "a", Start: "a\xff\xff\xff", Reverse: true}, 1, []string{"a\xff\xff"}},
			{kvRange{Prefix: "c"}, 0, []string{}},
			{kvRange{Prefix: "c", Reverse: true}, 0, []string{}},
		} {
			equal(t, fmt.Sprintf("%+q start %+q reverse %v limit %d", tc.r.Prefix, tc.r.Start, tc.r.Reverse, tc.limit), scan(tx, tc.r, tc.limit), tc.want)
		}
		kv := txKV(tx)
		if err := kv.Get("a\x00", nil); err != nil {
			t.Fatalf("Get existing: %v", err)
		}
		if err := kv.Get("a\x02", nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get missing: %v", err)
		}
		return nil
	})
	// Deleting a missing key is not an error; an empty value is a value.
	update(t, s, func(tx Tx) error {
		kv := txKV(tx)
		if err := kv.Delete("nope"); err != nil {
			return err
		}
		if err := kv.Delete("a\x00"); err != nil {
			return err
		}
		return kv.Set("empty", nil)
	})
	view(t, s, func(tx Tx) error {
		kv := txKV(tx)
		isNotFound(t, "deleted key", kv.Get("a\x00", nil))
		var got []byte = []byte("x")
		if err := kv.Get("empty", func(v []byte) error { got = v; return nil }); err != nil || len(got) != 0 {
			t.Fatalf("empty value: %q, %v", got, err)
		}
		return nil
	})
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"a": "b", "a\xff": "b", "a\x00": "a\x01", "\xff\xff": "", "": "", "ab\xff\xff": "ac"} {
		got := prefixEnd([]byte(in))
		if string(got) != want || (want == "" && got != nil) {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

// txKV is the key-value transaction under a record transaction (a
// coherent store's is wrapped to see tracked writes).
func txKV(tx Tx) kvTxn {
	if t, ok := tx.(trackingTx); ok {
		tx = t.Tx
	}
	return tx.(*btx).kv
}

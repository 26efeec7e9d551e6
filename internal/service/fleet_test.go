package service_test

import (
	"crypto/rand"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/pgtest"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// fleetNodes opens n services on coherent PostgreSQL stores of one fresh
// database, as n nodes of a fleet with one master key.
func fleetNodes(t *testing.T, n int) ([]*env, []*store.Postgres, string) {
	t.Helper()
	dsn := pgtest.Shared(t).NewDatabase(t)
	master := make([]byte, secrets.MasterKeySize)
	rand.Read(master)
	keys, err := secrets.NewKeys(master)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	var envs []*env
	var sts []*store.Postgres
	for range n {
		st, err := store.OpenPostgres(ctx, store.PostgresOptions{DSN: dsn, Coherent: true, CacheLease: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		svc := service.New(st, keys, clk, nil)
		t.Cleanup(func() { svc.Ledger.Close(); st.Close() })
		envs = append(envs, &env{t: t, st: st, svc: svc, clk: clk})
		sts = append(sts, st)
	}
	return envs, sts, dsn
}

// cached authenticates on a node and shows that the verdict came from
// its cache: no round trip to the database.
func cached(t *testing.T, e *env, st *store.Postgres, cred string) {
	t.Helper()
	before := st.RoundTrips()
	e.principal(cred, "")
	if n := st.RoundTrips() - before; n != 0 {
		t.Fatalf("a cached verdict took %d round trips", n)
	}
}

// A key revoked on node A is refused by node B on the very next request,
// although B had the verdict cached: 1,000 times in a row.
func TestFleetRevocationReachesEveryNode(t *testing.T) {
	nodes, sts, _ := fleetNodes(t, 2)
	a, b := nodes[0], nodes[1]
	f := a.fixture("A")
	for i := range 1000 {
		k := a.key(f.ws, f.sa, store.PermissionInference)
		b.principal(k.Key, "")
		cached(t, b, sts[1], k.Key)
		if err := a.svc.RevokeKey(ctx, service.Operator(f.ws), f.sa, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.svc.Authenticate(ctx, k.Key, ""); err == nil {
			t.Fatalf("round %d: node B accepted a key node A had revoked", i)
		}
	}
	// A member removed and a sign-in revoked on A: refused on B at once.
	b.principal(f.memberTok, "")
	cached(t, b, sts[1], f.memberTok)
	if err := a.svc.RemoveMember(ctx, service.Operator(f.ws), f.member); err != nil {
		t.Fatal(err)
	}
	_, err := b.svc.Authenticate(ctx, f.memberTok, "")
	refused(t, "removed member on the other node", err, http.StatusUnauthorized)
	p := b.principal(f.adminTok, "")
	b.principal(f.adminTok, "")
	cached(t, b, sts[1], f.adminTok)
	if err := a.svc.RevokeSignIn(ctx, p, p.FamilyID); err != nil {
		t.Fatal(err)
	}
	_, err = b.svc.Authenticate(ctx, f.adminTok, "")
	refused(t, "revoked sign-in on the other node", err, http.StatusUnauthorized)
}

// A node whose listening connection is cut never serves a stale verdict:
// a revocation made on another node right after the cut is refused, and
// once the node has listened and resynced it caches again.
func TestFleetNodeWithoutItsListenerNeverServesStale(t *testing.T) {
	nodes, sts, dsn := fleetNodes(t, 2)
	a, b := nodes[0], nodes[1]
	f := a.fixture("A")
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for i := range 6 {
		k := a.key(f.ws, f.sa, store.PermissionInference)
		b.principal(k.Key, "")
		cached(t, b, sts[1], k.Key)
		pid := sts[1].ListenerPID()
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			time.Sleep(20 * time.Millisecond) // let the node notice first, every other round
		}
		if err := a.svc.RevokeKey(ctx, service.Operator(f.ws), f.sa, k.ID); err != nil {
			t.Fatal(err)
		}
		_, err := b.svc.Authenticate(ctx, k.Key, "")
		refused(t, "revoked key on the node whose listener was cut", err, http.StatusUnauthorized)
		// The node comes back: a new listener, and a cache again.
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, ok := sts[1].CacheGeneration(); ok && sts[1].ListenerPID() != pid {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the node did not resync", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		k2 := a.key(f.ws, f.sa, store.PermissionInference)
		b.principal(k2.Key, "")
		cached(t, b, sts[1], k2.Key)
	}
}

// On a fleet, each live node enforces its share of a policy's per-minute
// limits, rounded down so that the nodes together never admit more than
// the limit (and at least one each); the quota says how many share it.
func TestFleetPolicyLimitsAreShared(t *testing.T) {
	nodes, sts, _ := fleetNodes(t, 2)
	a, b := nodes[0], nodes[1]
	f := a.fixture("A")
	deadline := time.Now().Add(10 * time.Second)
	for sts[1].LiveNodes() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("node B sees %d live nodes, want 2", sts[1].LiveNodes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		rpm, tpm, wantR, wantT int64
	}{{10, 1001, 5, 500}, {3, 0, 1, 0}, {1, 1, 1, 1}} {
		pol, err := a.svc.CreatePolicy(ctx, service.Operator(f.ws), service.PolicyInput{Name: "limit", Effect: "limit",
			Models: []string{"*"}, ServiceAccounts: []string{f.sa}, Per: "key", RequestsPerMinute: c.rpm, TokensPerMinute: c.tpm})
		if err != nil {
			t.Fatal(err)
		}
		p := b.principal(f.inference.Key, "")
		qs, err := b.svc.CheckPolicies(ctx, p, "m")
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || qs[0].Limit.Requests != c.wantR || qs[0].Limit.Tokens != c.wantT || qs[0].Nodes != 2 {
			t.Fatalf("limits %d rpm, %d tpm on 2 nodes: quotas %+v, want %d and %d", c.rpm, c.tpm, qs, c.wantR, c.wantT)
		}
		if err := a.svc.DeletePolicy(ctx, service.Operator(f.ws), pol.ID); err != nil {
			t.Fatal(err)
		}
	}
}

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/pgtest"
)

// The multi-node tests run two real agentgate processes (nodes A and B)
// against one PostgreSQL database, as examples/multi-node does, and talk to
// them over loopback HTTP. They share the test binary's throwaway
// PostgreSQL server (internal/pgtest), one database per test; the restart
// test stops that server, so none of these tests runs in parallel.

// Pricing of the model every multi-node test uses: nothing for input, $2
// per million output tokens. A request that sets max_tokens to the fake
// provider's output count reserves exactly what it costs
// (modules/gateway/metering.go reservation(): input bytes × the input price,
// 0 here, plus max_tokens × the output price), so settlements free no room
// and a budget admits exactly limit / cost requests, whatever the timing.
const (
	mnOutputPrice = 2 // USD per million tokens
	mnMaxTokens   = fakeprovider.OutputTokens
)

// mnCost is what one answered request costs (and reserves): the fake's
// output tokens (reasoning included, priced as output) at mnOutputPrice.
var mnCost = money.Pico(fakeprovider.OutputTokens * mnOutputPrice * money.PicoPerMicro)

// mnBody is a Chat Completions request whose reservation is mnCost.
var mnBody = fmt.Sprintf(`{"model":"gpt-4o","max_tokens":%d,"messages":[{"role":"user","content":"Say hello"}]}`, mnMaxTokens)

// cluster is two agentgate nodes sharing one PostgreSQL database, a
// workspace with an owner (created through node A) and a connection to a
// fake provider.
type cluster struct {
	a, b     *server
	nodes    []*server
	pg       *pgtest.Server
	tn       tenant
	provider *fakeprovider.Provider
	conn     string
	db       string // the database's name

	mu sync.Mutex
	// secrets must appear in neither node's output: the DSN's password,
	// the master key, the provider credential, workspace keys and tokens.
	secrets map[string]string // secret → what it is
}

// instanceSite is a node's agent_instance site (see addInstances).
type instanceSite struct {
	addr, project string
}

const mnInstancePassword = "pw-instance-e2e"

// startCluster starts nodes A and B on a new database of the shared
// PostgreSQL server, concurrently (the schema migration runs under an
// advisory lock), and sets up the workspace through node A.
func startCluster(t *testing.T, ctx context.Context) *cluster {
	t.Helper()
	return startClusterWith(t, ctx, nil)
}

// newClusterDB makes a fresh database for a cluster, a DSN to it carrying
// a password (the test server trusts loopback and ignores it) and a master
// key; both are secrets the nodes' logs must never show.
func newClusterDB(t *testing.T) (c *cluster, dsn, master string) {
	t.Helper()
	pg := pgtest.Shared(t)
	dsn = pg.NewDatabase(t)
	c = &cluster{pg: pg, secrets: map[string]string{}}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		pw, has := u.User.Password()
		if !has {
			pw = "dbpw-" + randomHex(12)
			u.User = url.UserPassword(u.User.Username(), pw)
			dsn = u.String()
		}
		c.secret(pw, "the DSN's password")
	}
	master = randomHex(32)
	c.secret(master, "the master key")
	return c, dsn, master
}

// startClusterWith is startCluster with edit called on each node before it
// starts (to change its Caddyfile or environment).
func startClusterWith(t *testing.T, ctx context.Context, edit func(*server)) *cluster {
	t.Helper()
	bin := caddyBinary(t) // skips under -short
	c, dsn, master := newClusterDB(t)
	cfg := config{Postgres: dsn, MasterKey: master, Debug: true, AccessLog: true}
	if u, err := url.Parse(dsn); err == nil {
		c.db = strings.TrimPrefix(u.Path, "/")
	}

	for i := 0; i < 2; i++ {
		s := newServer(t, bin, cfg)
		if edit != nil {
			edit(s)
		}
		c.nodes = append(c.nodes, s)
	}
	c.a, c.b = c.nodes[0], c.nodes[1]
	for _, s := range c.nodes {
		s.start()
	}
	for _, s := range c.nodes {
		s.waitReady(ctx)
	}
	t.Logf("node A: http %s, admin %s; node B: http %s, admin %s; database %s", c.a.httpAddr, c.a.adminAddr, c.b.httpAddr, c.b.adminAddr, dbName(dsn))

	c.tn = c.a.bootstrap(t, ctx, "Fleet")
	c.secret(c.tn.Token, "the owner's access token")
	c.secret(c.tn.Password, "the owner's password")
	secret := "sk-provider-multinode-" + randomHex(8)
	c.secret(secret, "the provider credential")
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c.provider = p
	var conn idName
	must(t, "create connection", 201, &conn)(c.a.admin(ctx, "POST", "/agentgate/workspaces/"+c.tn.Workspace+"/connections", map[string]any{
		"name": "openai", "kind": "openai", "base_url": p.URL + "/v1", "credential": secret,
		"models": map[string]any{"gpt-4o": map[string]any{"pricing": map[string]any{"input": 0, "output": mnOutputPrice}}},
	}))
	c.conn = conn.ID
	return c
}

// addInstances reloads both nodes (POST /load on their admin API) with a
// second site serving agent_instance under the same name and password,
// whose turns go to the node's own gateway with key; it returns the sites.
// (The provider is a base_url: `connection` means a gateway on the
// instance's own site, and /api/… there belongs to the instance.)
func (c *cluster) addInstances(t *testing.T, ctx context.Context, key string) []instanceSite {
	t.Helper()
	var sites []instanceSite
	for i, s := range c.nodes {
		site := instanceSite{addr: freeAddr(t), project: t.TempDir()}
		keyFile := filepath.Join(s.dir, "instance-key")
		if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
		text := s.caddyfile(s.cfg) + fmt.Sprintf("\nhttp://%s {\n\tbind 127.0.0.1\n\tagent_instance {\n\t\tname fleet\n\t\tpassword %s\n\t\tdirectory %q\n"+
			"\t\tprovider {\n\t\t\tbase_url http://%s/custom/%s\n\t\t\tapi_key {file.%s}\n\t\t\tmodel gpt-4o\n\t\t}\n\t}\n}\n",
			site.addr, mnInstancePassword, site.project, s.httpAddr, c.conn, keyFile)
		st, b, err := call(ctx, freshClient, "POST", "http://"+s.adminAddr+"/load", http.Header{"Content-Type": {"text/caddyfile"}}, text)
		if err != nil || st != 200 {
			t.Fatalf("node %c: loading the config with agent_instance: %d %v %s", 'A'+i, st, err, b)
		}
		waitFor(t, ctx, fmt.Sprintf("node %c's instance answers", 'A'+i), func() bool {
			st, _, err := call(ctx, freshClient, "GET", "http://"+site.addr+"/api/info", nil, nil)
			return err == nil && st == 401
		})
		sites = append(sites, site)
	}
	return sites
}

func dbName(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return strings.TrimPrefix(u.Path, "/")
	}
	return "?"
}

func (c *cluster) secret(value, what string) {
	if value == "" {
		return
	}
	c.mu.Lock()
	c.secrets[value] = what
	c.mu.Unlock()
}

// checkLogs fails the test when a secret appears in a node's output.
func (c *cluster) checkLogs(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		out := s.stdout.String() + s.stderr.String()
		for v, what := range c.secrets {
			if strings.Contains(out, v) {
				t.Errorf("node %c's log carries %s", 'A'+i, what)
			}
		}
	}
}

// key creates a service account and an inference key through a node's
// admin API.
func (c *cluster) key(t *testing.T, ctx context.Context, via *server, name string) (saID, keyID, key string) {
	t.Helper()
	var sa idName
	must(t, "create service account", 201, &sa)(via.admin(ctx, "POST", "/agentgate/workspaces/"+c.tn.Workspace+"/service-accounts", map[string]any{"name": name}))
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	must(t, "create key", 201, &k)(via.admin(ctx, "POST", "/agentgate/workspaces/"+c.tn.Workspace+"/service-accounts/"+sa.ID+"/keys",
		map[string]any{"name": name, "permission": "inference"}))
	c.secret(k.Key, "a workspace key")
	return sa.ID, k.ID, k.Key
}

// gateway sends mnBody to a node's gateway with a credential.
func (c *cluster) gateway(ctx context.Context, client *http.Client, s *server, bearer string) (int, []byte, error) {
	h := http.Header{"Authorization": {"Bearer " + bearer}, "Content-Type": {"application/json"}}
	return call(ctx, client, "POST", "http://"+s.httpAddr+"/custom/"+url.PathEscape(c.conn)+"/chat/completions", h, mnBody)
}

// wantGateway asserts the status of one gateway request (and the
// provider's text in a 200).
func (c *cluster) wantGateway(t *testing.T, ctx context.Context, what string, s *server, bearer string, want int) {
	t.Helper()
	st, body, err := c.gateway(ctx, httpClient, s, bearer)
	if err != nil || st != want {
		t.Fatalf("%s: gateway answered %d (%v), want %d: %s", what, st, err, want, body)
	}
	if want == 200 && !strings.Contains(string(body), fakeprovider.Text) {
		t.Fatalf("%s: the answer lacks the provider's text: %s", what, body)
	}
}

// wantConsole asserts the status of GET /api/v2/config on a node.
func (c *cluster) wantConsole(t *testing.T, ctx context.Context, what string, s *server, bearer string, want int) {
	t.Helper()
	st, body, err := s.console(ctx, "GET", "/api/v2/config", bearer, nil)
	if err != nil || st != want {
		t.Fatalf("%s: GET /api/v2/config answered %d (%v), want %d: %s", what, st, err, want, body)
	}
}

// budget is a member's budget as the admin API shows it.
type budget struct {
	MemberID string      `json:"member_id"`
	Limit    *money.Pico `json:"limit_usd"`
	Spent    money.Pico  `json:"spent_usd"`
	Reserved money.Pico  `json:"reserved_usd"`
}

// budget reads a member's budget through a node's admin API.
func (c *cluster) budget(t *testing.T, ctx context.Context, via *server, member string) budget {
	t.Helper()
	var list []budget
	must(t, "list budgets", 200, &list)(via.admin(ctx, "GET", "/agentgate/workspaces/"+c.tn.Workspace+"/budgets", nil))
	for _, b := range list {
		if b.MemberID == member {
			return b
		}
	}
	t.Fatalf("no budget row for %s in %+v", member, list)
	return budget{}
}

// setBudget sets a member's total budget through a node's admin API.
func (c *cluster) setBudget(t *testing.T, ctx context.Context, via *server, member string, limit money.Pico) {
	t.Helper()
	must(t, "set budget", 200, nil)(via.admin(ctx, "PUT", "/agentgate/workspaces/"+c.tn.Workspace+"/budgets/"+member,
		map[string]any{"limit_usd": json.RawMessage(limit.String()), "period": "total"}))
}

// usageCost sums the cost of a member's usage records through a node's
// Console, following every page, and counts the records of answered
// requests.
func (c *cluster) usageCost(t *testing.T, ctx context.Context, via *server, member string) (sum money.Pico, answered int) {
	t.Helper()
	cursor := ""
	for {
		path := "/api/v1/usage?limit=1000&member=" + url.QueryEscape(member)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		st, body, err := via.console(ctx, "GET", path, c.tn.Token, nil)
		must(t, "list usage", 200, nil)(st, body, err)
		var page struct {
			Data []struct {
				Cost   money.Pico `json:"cost_usd"`
				Status int        `json:"status"`
			} `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("list usage: %v: %s", err, body)
		}
		for _, u := range page.Data {
			sum += u.Cost
			if u.Status == 200 {
				answered++
			}
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return sum, answered
		}
		cursor = *page.NextCursor
	}
}

// waitSettled polls a node's admin API until the member's budget holds no
// reservation and its spend is want, failing when ctx (or 60 s) ends first.
func (c *cluster) waitSettled(t *testing.T, ctx context.Context, via *server, member string, want money.Pico) budget {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var b budget
	for {
		b = c.budget(t, wctx, via, member)
		if b.Reserved == 0 && b.Spent == want {
			return b
		}
		select {
		case <-wctx.Done():
			t.Fatalf("budget of %s never settled: spent %s, reserved %s; want spent %s, reserved 0", member, b.Spent, b.Reserved, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// providerAnswers counts the requests the fake provider received.
func (c *cluster) providerAnswers() int { return len(c.provider.Received()) }

// TestMultiNodeBudgetRace: a service account whose budget has room for
// exactly admit (21) reservations fires 60 concurrent requests, alternating
// between node A and node B (both warmed first, so that both admit some:
// the split is logged). Exactly admit of them reach the provider and
// answer 200, the others answer 402 BudgetExceeded; once settled, the
// budget (read through either node) has spent exactly the provider's
// answers × their cost, within the limit, with nothing reserved, and the
// usage records say the same.
func TestMultiNodeBudgetRace(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := startCluster(t, ctx)
	// The key comes from node B, the budget from node A.
	sa, _, key := c.key(t, ctx, c.b, "racer")
	const admit, total = 21, 60
	limit := money.Pico(admit)*mnCost + mnCost/2 // room for admit, not admit+1
	c.setBudget(t, ctx, c.a, sa, limit)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: total, MaxConnsPerHost: total}}
	// Warm both nodes (their database pools, the client's connections)
	// with a key without a budget, so that neither node starts the race
	// with a head start.
	_, _, warm := c.key(t, ctx, c.a, "warm")
	var wg sync.WaitGroup
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, body, err := c.gateway(ctx, client, c.nodes[i%2], warm); err != nil || st != 200 {
				t.Errorf("warming up: %d %v %s", st, err, body)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.provider.Reset()
	// The answers take a while, so that most admissions overlap with
	// holds of requests still in flight on both nodes.
	c.provider.SetBehavior(fakeprovider.Behavior{Delay: 300 * time.Millisecond})
	type result struct {
		node   int
		status int
		body   []byte
		err    error
	}
	results := make([]result, total)
	start := make(chan struct{})
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			st, body, err := c.gateway(ctx, client, c.nodes[i%2], key)
			results[i] = result{i % 2, st, body, err}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d requests answered in %s", total, time.Since(began).Round(time.Millisecond))

	ok := [2]int{}
	refused := 0
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("request %d (node %c): %v", i, 'A'+r.node, r.err)
		case r.status == 200:
			ok[r.node]++
			if !strings.Contains(string(r.body), fakeprovider.Text) {
				t.Errorf("request %d: 200 without the provider's text: %s", i, r.body)
			}
		case r.status == 402:
			refused++
			if tag := gjson.GetBytes(r.body, "_tag").String(); tag != "BudgetExceeded" {
				t.Errorf("request %d: 402 with _tag %q: %s", i, tag, r.body)
			}
		default:
			t.Errorf("request %d (node %c): HTTP %d: %s", i, 'A'+r.node, r.status, r.body)
		}
	}
	t.Logf("admitted %d on node A, %d on node B; refused %d", ok[0], ok[1], refused)
	if ok[0]+ok[1] != admit || refused != total-admit {
		t.Fatalf("admitted %d, refused %d; want exactly %d admitted and %d refused", ok[0]+ok[1], refused, admit, total-admit)
	}
	if n := c.providerAnswers(); n != admit {
		t.Fatalf("the provider received %d requests, want the %d admitted", n, admit)
	}

	want := money.Pico(c.providerAnswers()) * mnCost
	b := c.waitSettled(t, ctx, c.b, sa, want)
	if b.Limit == nil || *b.Limit != limit || b.Spent > *b.Limit {
		t.Fatalf("budget %+v: limit %s, want spend within it", b, limit)
	}
	if a := c.budget(t, ctx, c.a, sa); a.Spent != b.Spent || a.Reserved != 0 {
		t.Fatalf("node A reads spent %s reserved %s, node B spent %s", a.Spent, a.Reserved, b.Spent)
	}
	sum, answered := c.usageCost(t, ctx, c.a, sa)
	if sum != b.Spent || answered != admit {
		t.Fatalf("usage records: %d answered costing %s; budget spent %s", answered, sum, b.Spent)
	}
	// The budget binds both nodes now: one more request is refused on each.
	for _, s := range c.nodes {
		st, body, err := c.gateway(ctx, httpClient, s, key)
		if err != nil || st != 402 {
			t.Fatalf("after the race: %d %v %s", st, err, body)
		}
	}
	c.checkLogs(t)
}

// TestMultiNodeRevocation: a key that node B has just served, revoked
// through node A, is refused by node B on the very next request; a member
// removed through node A loses the sign-ins bound to the workspace on node
// B at once (Console and gateway); a budget set through node A binds node B
// on its next request.
func TestMultiNodeRevocation(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := startCluster(t, ctx)

	sa, keyID, key := c.key(t, ctx, c.a, "revoked")
	for i := 0; i < 3; i++ { // warm whatever node B might keep
		c.wantGateway(t, ctx, "the key on node B", c.b, key, 200)
	}
	c.wantGateway(t, ctx, "the key on node A", c.a, key, 200)
	st, body, err := c.a.console(ctx, "DELETE", "/api/v1/service-accounts/"+sa+"/keys/"+keyID, c.tn.Token, nil)
	if err != nil || st != 204 {
		t.Fatalf("revoke the key through node A's Console: %d %v %s", st, err, body)
	}
	c.wantGateway(t, ctx, "the revoked key, next request on node B", c.b, key, 401)
	c.wantGateway(t, ctx, "the revoked key on node A", c.a, key, 401)

	// Node B's listening connection cut (every node's, in fact) right
	// before a revocation: B never answers from a stale cache.
	sa3, keyID3, key3 := c.key(t, ctx, c.a, "cut")
	for i := 0; i < 3; i++ {
		c.wantGateway(t, ctx, "a key on node B before the cut", c.b, key3, 200)
	}
	admin, err := pgx.Connect(ctx, c.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var cut int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'agentgate listener' AND datname = $1`, c.db).Scan(&cut); err != nil || cut != 2 {
		t.Fatalf("cutting the nodes' listening connections: %d cut, %v", cut, err)
	}
	st, body, err = c.a.console(ctx, "DELETE", "/api/v1/service-accounts/"+sa3+"/keys/"+keyID3, c.tn.Token, nil)
	if err != nil || st != 204 {
		t.Fatalf("revoke the key through node A's Console: %d %v %s", st, err, body)
	}
	c.wantGateway(t, ctx, "a key revoked right after the cut, next request on node B", c.b, key3, 401)
	// Node B listens again and says so on its metrics: two live nodes, a
	// cache it trusts, and the drops (the revocations, the cut).
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, m, err := c.b.admin(ctx, "GET", "/metrics", nil)
		metrics := string(m)
		if err == nil && strings.Contains(metrics, "\nagentgate_fleet_live_nodes 2\n") && strings.Contains(metrics, "\nagentgate_fleet_cache_trusted 1\n") {
			if strings.Contains(metrics, "\nagentgate_fleet_cache_drops_total 0\n") || !strings.Contains(metrics, "\nagentgate_fleet_cache_drops_total ") {
				t.Fatalf("node B reports no cache drop after two revocations and a cut")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node B's fleet metrics after the cut: %v\n%s", err, grepLines(metrics, "agentgate_fleet_"))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A member with an operator-issued token bound to the workspace.
	var p idName
	must(t, "create person", 201, &p)(c.a.admin(ctx, "POST", "/agentgate/people",
		map[string]any{"email": "member@example.com", "name": "Member", "password": "pw-" + randomHex(8), "workspace": c.tn.Workspace, "role": "member"}))
	tok := c.a.token(t, ctx, p.ID, c.tn.Workspace)
	c.secret(tok, "a member's access token")
	c.wantConsole(t, ctx, "the member's token on node B", c.b, tok, 200)
	c.wantGateway(t, ctx, "the member's token on node B", c.b, tok, 200)
	st, body, err = c.a.console(ctx, "DELETE", "/api/v1/members/"+p.ID, c.tn.Token, nil)
	if err != nil || st != 204 {
		t.Fatalf("remove the member through node A: %d %v %s", st, err, body)
	}
	c.wantConsole(t, ctx, "the removed member's token, next request on node B", c.b, tok, 401)
	c.wantGateway(t, ctx, "the removed member's token on node B", c.b, tok, 401)
	c.wantConsole(t, ctx, "the removed member's token on node A", c.a, tok, 401)

	// A budget set through node A binds node B's next request.
	sa2, _, key2 := c.key(t, ctx, c.b, "budgeted")
	c.wantGateway(t, ctx, "before the budget, node B", c.b, key2, 200)
	c.setBudget(t, ctx, c.a, sa2, 0)
	st, body, err = c.gateway(ctx, httpClient, c.b, key2)
	if err != nil || st != 402 || gjson.GetBytes(body, "_tag").String() != "BudgetExceeded" {
		t.Fatalf("a zero budget set through node A, next request on node B: %d %v %s", st, err, body)
	}
	c.checkLogs(t)
}

// TestMultiNodeRefreshReuse: a device sign-in on node A (its code asked of
// node B); the refresh token rotated on node B; the old refresh token
// replayed on node A is invalid_grant and ends the whole sign-in: the
// newest access token is refused on both nodes and the newest refresh
// token on node B.
func TestMultiNodeRefreshReuse(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := startCluster(t, ctx)
	da := &deviceSite{s: c.a, base: "http://" + c.a.httpAddr, tn: c.tn, conn: c.conn, provider: c.provider}
	db := &deviceSite{s: c.b, base: "http://" + c.b.httpAddr, tn: c.tn, conn: c.conn, provider: c.provider}
	web := da.webApprover(t, ctx) // skips when the Console web pages are not served
	// The approval page asks for a workspace when the person has several.
	var ws idName
	must(t, "create a second workspace", 201, &ws)(c.b.admin(ctx, "POST", "/agentgate/workspaces", map[string]any{"name": "Elsewhere"}))
	must(t, "add the owner to it", 201, nil)(c.b.admin(ctx, "POST", "/agentgate/workspaces/"+ws.ID+"/members",
		map[string]any{"person_id": c.tn.Person, "role": "member"}))

	// The device asks node B for a code, the person approves it on node
	// A's pages, the device redeems it on node A.
	st, start, _ := db.tokenPost(t, ctx, "/auth/device/code", url.Values{"client_id": {deviceClient}, "supports_org_scope": {"true"}}, nil)
	if st != 200 || start["device_code"] == nil || start["user_code"] == nil {
		t.Fatalf("device code on node B: %d %v", st, start)
	}
	web.approve(t, ctx, fmt.Sprint(start["verification_uri_complete"]), fmt.Sprint(start["user_code"]), c.tn.Workspace)
	st, first, _ := da.tokenPost(t, ctx, "/auth/device/token", pollForm(deviceClient, fmt.Sprint(start["device_code"])), nil)
	oldAccess, oldRefresh := fmt.Sprint(first["access_token"]), fmt.Sprint(first["refresh_token"])
	if st != 200 || !strings.HasPrefix(oldAccess, "ag_at_") || !strings.HasPrefix(oldRefresh, "ag_rt_") {
		t.Fatalf("tokens on node A: %d %v", st, first)
	}
	c.secret(oldAccess, "an access token")
	c.secret(oldRefresh, "a refresh token")
	c.wantConsole(t, ctx, "node A's access token on node B", c.b, oldAccess, 200)
	c.wantGateway(t, ctx, "node A's access token on node B", c.b, oldAccess, 200)

	refresh := func(d *deviceSite, rt string) (int, map[string]any) {
		st, out, _ := d.tokenPost(t, ctx, "/auth/device/token",
			url.Values{"grant_type": {"refresh_token"}, "client_id": {deviceClient}, "refresh_token": {rt}}, nil)
		return st, out
	}
	st, fresh := refresh(db, oldRefresh)
	newAccess, newRefresh := fmt.Sprint(fresh["access_token"]), fmt.Sprint(fresh["refresh_token"])
	if st != 200 || newAccess == oldAccess || newRefresh == oldRefresh || !strings.HasPrefix(newRefresh, "ag_rt_") || fresh["org_id"] != c.tn.Workspace {
		t.Fatalf("refresh on node B: %d %v", st, fresh)
	}
	c.secret(newAccess, "an access token")
	c.secret(newRefresh, "a refresh token")
	for i, s := range c.nodes {
		c.wantConsole(t, ctx, fmt.Sprintf("the refreshed token on node %c", 'A'+i), s, newAccess, 200)
		c.wantGateway(t, ctx, fmt.Sprintf("the refreshed token on node %c", 'A'+i), s, newAccess, 200)
	}

	// The rotated-out refresh token, replayed on node A.
	st, reuse := refresh(da, oldRefresh)
	if st != 400 || reuse["error"] != "invalid_grant" {
		t.Fatalf("replaying the old refresh token on node A: %d %v, want 400 invalid_grant", st, reuse)
	}
	for i, s := range c.nodes {
		c.wantConsole(t, ctx, fmt.Sprintf("the newest access token after reuse, node %c", 'A'+i), s, newAccess, 401)
		c.wantGateway(t, ctx, fmt.Sprintf("the newest access token after reuse, node %c", 'A'+i), s, newAccess, 401)
	}
	c.wantConsole(t, ctx, "the first access token after reuse, node B", c.b, oldAccess, 401)
	if st, out := refresh(db, newRefresh); st != 400 || out["error"] != "invalid_grant" {
		t.Fatalf("the newest refresh token after reuse, node B: %d %v, want 400 invalid_grant", st, out)
	}
	c.checkLogs(t)
}

// TestMultiNodeDatabaseRestart stops PostgreSQL while requests admitted on
// both nodes are still being answered. While it is down, both nodes answer
// every gateway, Console and admin request with a clean 503 JSON error
// (no 500, no hang); the requests in flight still answer 200 and their
// settlements wait. Once PostgreSQL is back, both nodes serve again without
// a restart, and the spend is exactly the provider's answers × their cost:
// nothing settled was lost.
func TestMultiNodeDatabaseRestart(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	caddyBinary(t) // skips under -short
	if !pgtest.Shared(t).CanStop() {
		t.Skipf("the PostgreSQL server of %s cannot be stopped", pgtest.EnvDSN)
	}
	c := startCluster(t, ctx)
	sa, _, key := c.key(t, ctx, c.a, "steady")
	c.setBudget(t, ctx, c.b, sa, money.PicoOf(money.Micros(money.Scale))) // $1: ample
	c.wantGateway(t, ctx, "before the stop, node A", c.a, key, 200)
	c.wantGateway(t, ctx, "before the stop, node B", c.b, key, 200)
	c.waitSettled(t, ctx, c.a, sa, 2*mnCost)

	// Requests admitted on both nodes, answered slowly.
	const inflight = 6
	c.provider.SetBehavior(fakeprovider.Behavior{Delay: 3 * time.Second})
	type result struct {
		status int
		body   []byte
		err    error
	}
	results := make(chan result, inflight)
	for i := range inflight {
		go func() {
			st, body, err := c.gateway(ctx, httpClient, c.nodes[i%2], key)
			results <- result{st, body, err}
		}()
	}
	waitFor(t, ctx, "the provider receives the admitted requests", func() bool { return c.providerAnswers() == 2+inflight })
	stopped := time.Now()
	if err := c.pg.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL stopped with %d requests in flight", inflight)
	restarted := false
	defer func() {
		if !restarted {
			c.pg.Start() // leave the shared server running for later tests
		}
	}()

	// While it is down: 503 JSON everywhere, within a bound.
	down := func(what string, s *server, do func(ctx context.Context) (int, []byte, error)) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		began := time.Now()
		st, body, err := do(rctx)
		took := time.Since(began)
		if err != nil {
			t.Fatalf("%s while PostgreSQL is down: no answer after %s: %v", what, took.Round(time.Millisecond), err)
		}
		var v map[string]any
		if st != 503 || json.Unmarshal(body, &v) != nil {
			t.Fatalf("%s while PostgreSQL is down: HTTP %d after %s: %s; want a 503 JSON error", what, st, took.Round(time.Millisecond), body)
		}
		t.Logf("%s while PostgreSQL is down: 503 in %s: %s", what, took.Round(time.Millisecond), tail(string(body), 200))
	}
	for round := 0; round < 2; round++ {
		for i, s := range c.nodes {
			node := fmt.Sprintf("node %c", 'A'+i)
			down("gateway, "+node, s, func(ctx context.Context) (int, []byte, error) { return c.gateway(ctx, httpClient, s, key) })
			down("Console, "+node, s, func(ctx context.Context) (int, []byte, error) {
				return s.console(ctx, "GET", "/api/v1/service-accounts", c.tn.Token, nil)
			})
			down("admin API, "+node, s, func(ctx context.Context) (int, []byte, error) {
				return s.admin(ctx, "GET", "/agentgate/workspaces/"+c.tn.Workspace+"/budgets", nil)
			})
		}
	}
	// The requests in flight still get their answers.
	for range inflight {
		select {
		case r := <-results:
			if r.err != nil || r.status != 200 || !strings.Contains(string(r.body), fakeprovider.Text) {
				t.Fatalf("a request admitted before the stop: %d %v %s", r.status, r.err, r.body)
			}
		case <-ctx.Done():
			t.Fatal("the requests admitted before the stop never answered")
		}
	}
	// Keep the database down a little longer than the slowest answer, so
	// that every settlement meets the outage.
	if d := 4*time.Second - time.Since(stopped); d > 0 {
		time.Sleep(d)
	}
	for i, s := range c.nodes {
		if !s.running() {
			t.Fatalf("node %c exited while PostgreSQL was down", 'A'+i)
		}
	}
	if err := c.pg.Start(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	t.Logf("PostgreSQL started again after %s", time.Since(stopped).Round(time.Millisecond))

	// Both nodes serve again by themselves.
	c.provider.SetBehavior(fakeprovider.Behavior{})
	for i, s := range c.nodes {
		waitFor(t, ctx, fmt.Sprintf("node %c serves the gateway again", 'A'+i), func() bool {
			st, _, err := c.gateway(ctx, httpClient, s, key)
			return err == nil && st == 200
		})
		c.wantConsole(t, ctx, fmt.Sprintf("node %c's Console after the restart", 'A'+i), s, c.tn.Token, 200)
	}
	answered := c.providerAnswers()
	want := money.Pico(answered) * mnCost
	b := c.waitSettled(t, ctx, c.b, sa, want)
	if a := c.budget(t, ctx, c.a, sa); a.Spent != b.Spent {
		t.Fatalf("node A reads spent %s, node B %s", a.Spent, b.Spent)
	}
	if sum, n := c.usageCost(t, ctx, c.a, sa); sum != want || n != answered {
		t.Fatalf("usage records: %d answered costing %s; want %d costing %s", n, sum, answered, want)
	}
	t.Logf("%d provider answers, spend %s: nothing lost", answered, b.Spent)
	for _, s := range c.nodes {
		if strings.Contains(s.stderr.String(), `"status":500`) {
			t.Errorf("a node answered 500: %s", tail(s.stderr.String(), 4000))
		}
	}
	c.checkLogs(t)
}

// TestMultiNodeInstanceSessions: both nodes serve agent_instance under the
// same instance name over the same database, so a session created through
// node A is listed, read, changed and deleted through node B; a prompt
// sent to node B is answered by node B's own drain, through node B's
// gateway.
func TestMultiNodeInstanceSessions(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := startCluster(t, ctx)
	_, _, key := c.key(t, ctx, c.a, "instance")
	sites := c.addInstances(t, ctx, key)
	base := func(i int) string { return "http://" + sites[i].addr }
	auth := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:"+mnInstancePassword))}}

	st, body, err := call(ctx, httpClient, "POST", base(0)+"/api/session", auth, map[string]any{"title": "Shared", "location": map[string]string{"directory": sites[0].project}})
	id := gjson.GetBytes(body, "data.id").String()
	if err != nil || st != 200 || id == "" {
		t.Fatalf("create a session through node A: %d %v %s", st, err, body)
	}
	listed := func(i int) []string {
		t.Helper()
		st, body, err := call(ctx, httpClient, "GET", base(i)+"/api/session?limit=100", auth, nil)
		if err != nil || st != 200 {
			t.Fatalf("list sessions on node %c: %d %v %s", 'A'+i, st, err, body)
		}
		var out []string
		for _, r := range gjson.GetBytes(body, "data.#.id").Array() {
			out = append(out, r.String())
		}
		return out
	}
	if got := listed(1); len(got) != 1 || got[0] != id {
		t.Fatalf("node B lists %v, want the session %s created through node A", got, id)
	}
	st, body, _ = call(ctx, httpClient, "PATCH", base(1)+"/api/session/"+id, auth, map[string]any{"title": "Renamed on B"})
	if st != 200 && st != 204 {
		t.Fatalf("rename through node B: %d %s", st, body)
	}
	st, body, _ = call(ctx, httpClient, "GET", base(0)+"/api/session/"+id, auth, nil)
	if st != 200 || gjson.GetBytes(body, "data.title").String() != "Renamed on B" {
		t.Fatalf("node A after the rename on node B: %d %s", st, body)
	}

	// A prompt through node B: node B's drain answers it, through node B's
	// own gateway (its access log), and node A sees the answer.
	beforeA := strings.Count(c.a.stderr.String(), "/chat/completions")
	st, body, _ = call(ctx, httpClient, "POST", base(1)+"/api/session/"+id+"/prompt", auth, map[string]any{"text": "hello"})
	if st != 200 {
		t.Fatalf("prompt through node B: %d %s", st, body)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var export []byte
	for {
		_, export, _ = call(ctx, httpClient, "GET", base(0)+"/api/experimental/session/"+id+"/export", auth, nil)
		if gjson.GetBytes(export, `data.messages.#(type=="idle")#|#`).Int() >= 1 {
			break
		}
		select {
		case <-tctx.Done():
			t.Fatalf("the turn of the prompt sent to node B never settled; node A exports: %s", export)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if gjson.GetBytes(export, `data.messages.#(type=="assistant").content.0.text`).String() != fakeprovider.Text ||
		gjson.GetBytes(export, "data.info.outcome").String() != "succeeded" {
		t.Fatalf("the turn of the prompt sent to node B, read through node A: %s", export)
	}
	if !strings.Contains(c.b.stderr.String(), "/custom/"+c.conn+"/chat/completions") {
		t.Errorf("node B's gateway did not carry the turn of the prompt sent to node B")
	}
	if n := strings.Count(c.a.stderr.String(), "/chat/completions"); n != beforeA {
		t.Errorf("node A's gateway carried a turn of the prompt sent to node B")
	}

	// Created on B, listed on A; deleted through A, gone on B.
	st, body, _ = call(ctx, httpClient, "POST", base(1)+"/api/session", auth, map[string]any{"title": "From B", "location": map[string]string{"directory": sites[1].project}})
	id2 := gjson.GetBytes(body, "data.id").String()
	if st != 200 || id2 == "" {
		t.Fatalf("create through node B: %d %s", st, body)
	}
	if got := listed(0); len(got) != 2 {
		t.Fatalf("node A lists %v, want both sessions", got)
	}
	st, body, _ = call(ctx, httpClient, "DELETE", base(0)+"/api/session/"+id2, auth, nil)
	if st != 200 && st != 204 {
		t.Fatalf("delete through node A: %d %s", st, body)
	}
	st, _, _ = call(ctx, httpClient, "GET", base(1)+"/api/session/"+id2, auth, nil)
	if st != 404 {
		t.Fatalf("node B still serves the session deleted through node A: %d", st)
	}
	c.checkLogs(t)
}

// TestMultiNodeDeclaredConnection: both nodes start at once with the same
// declared connection (its workspace given by name, its credential from the
// environment): they make one workspace and one connection between them,
// and both serve through it.
func TestMultiNodeDeclaredConnection(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	secret := "sk-declared-" + randomHex(8)
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	declare := fmt.Sprintf("\t\tconnection conn_declared {\n\t\t\tworkspace Declared\n\t\t\tkind openai\n\t\t\tbase_url %s/v1\n"+
		"\t\t\tcredential {env.MULTINODE_PROVIDER_KEY}\n\t\t\tmodel gpt-4o {\n\t\t\t\tpricing input 0 output %d\n\t\t\t}\n\t\t}\n", p.URL, mnOutputPrice)
	c := startClusterWith(t, ctx, func(s *server) {
		const anchor = "\t\tmaster_key {env.AGENTGATE_MASTER_KEY}\n"
		text := strings.Replace(s.caddyfile(s.cfg), anchor, anchor+declare, 1)
		if !strings.Contains(text, "conn_declared") {
			t.Fatal("the declared connection did not make it into the Caddyfile")
		}
		if err := os.WriteFile(s.cfgPath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s.env = append(s.env, "MULTINODE_PROVIDER_KEY="+secret)
	})
	c.secret(secret, "the declared connection's credential")

	var wss []idName
	must(t, "list workspaces", 200, &wss)(c.b.admin(ctx, "GET", "/agentgate/workspaces", nil))
	var declared []string
	for _, w := range wss {
		if w.Name == "Declared" {
			declared = append(declared, w.ID)
		}
	}
	if len(declared) != 1 {
		t.Fatalf("workspaces named Declared: %v, want exactly one (from %v)", declared, wss)
	}
	var conns []idName
	must(t, "list connections", 200, &conns)(c.a.admin(ctx, "GET", "/agentgate/workspaces/"+declared[0]+"/connections", nil))
	if len(conns) != 1 || conns[0].ID != "conn_declared" {
		t.Fatalf("connections of Declared: %+v", conns)
	}
	var sa idName
	must(t, "create service account", 201, &sa)(c.a.admin(ctx, "POST", "/agentgate/workspaces/"+declared[0]+"/service-accounts", map[string]any{"name": "declared"}))
	var k struct {
		Key string `json:"key"`
	}
	must(t, "create key", 201, &k)(c.a.admin(ctx, "POST", "/agentgate/workspaces/"+declared[0]+"/service-accounts/"+sa.ID+"/keys",
		map[string]any{"name": "declared", "permission": "inference"}))
	c.secret(k.Key, "a workspace key")
	for i, s := range c.nodes {
		h := http.Header{"Authorization": {"Bearer " + k.Key}, "Content-Type": {"application/json"}}
		st, body, err := call(ctx, httpClient, "POST", "http://"+s.httpAddr+"/custom/conn_declared/chat/completions", h, mnBody)
		if err != nil || st != 200 || !strings.Contains(string(body), fakeprovider.Text) {
			t.Fatalf("node %c through the declared connection: %d %v %s", 'A'+i, st, err, body)
		}
		if got := p.Last().Header.Get("Authorization"); got != "Bearer "+secret {
			t.Fatalf("node %c: the provider got Authorization %q", 'A'+i, got)
		}
	}
	c.checkLogs(t)
}

// TestMultiNodeExampleBehindLoadBalancer runs examples/multi-node as its
// README says: two nodes on the example's Caddyfile (everything that
// differs from the environment), and a third Caddy on lb.Caddyfile in
// front of them. Through the load balancer: the declared connection serves
// from both nodes (round robin), a key revoked through the Console is
// refused by both at once, and an instance session created through the
// balanced instance port is served by each node.
func TestMultiNodeExampleBehindLoadBalancer(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	bin := caddyBinary(t) // skips under -short
	c, dsn, master := newClusterDB(t)
	secret := "sk-example-" + randomHex(8)
	c.secret(secret, "the provider credential")
	p, err := fakeprovider.Start(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c.provider = p

	example := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "examples", "multi-node", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	port := func(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
	var instAddrs, httpAddrs []string
	for i := 0; i < 2; i++ {
		s := newServer(t, bin, config{})
		if err := os.WriteFile(s.cfgPath, example("Caddyfile"), 0o600); err != nil {
			t.Fatal(err)
		}
		inst := freeAddr(t)
		s.env = append(s.env, "AGENTGATE_ADMIN="+s.adminAddr, "AGENTGATE_BIND=127.0.0.1", "AGENTGATE_PORT="+port(s.httpAddr),
			"AGENT_INSTANCE_PORT="+port(inst), "AGENTGATE_POSTGRES_DSN="+dsn, "AGENTGATE_MASTER_KEY="+master,
			"OPENAI_API_KEY="+secret, "OPENAI_BASE_URL="+p.URL+"/v1",
			"AGENT_INSTANCE_PASSWORD="+mnInstancePassword, "AGENT_INSTANCE_DIRECTORY="+t.TempDir())
		c.nodes = append(c.nodes, s)
		instAddrs, httpAddrs = append(instAddrs, inst), append(httpAddrs, s.httpAddr)
	}
	c.a, c.b = c.nodes[0], c.nodes[1]
	for _, s := range c.nodes {
		s.start()
	}
	for _, s := range c.nodes {
		s.waitReady(ctx)
	}
	lb := newServer(t, bin, config{})
	if err := os.WriteFile(lb.cfgPath, example("lb.Caddyfile"), 0o600); err != nil {
		t.Fatal(err)
	}
	lbInst := freeAddr(t)
	lb.env = append(lb.env, "LB_ADMIN="+lb.adminAddr, "LB_PORT="+port(lb.httpAddr), "LB_INSTANCE_PORT="+port(lbInst),
		"AGENTGATE_NODES="+strings.Join(httpAddrs, " "), "AGENT_INSTANCE_NODES="+strings.Join(instAddrs, " "))
	lb.start()
	front := "http://127.0.0.1:" + port(lb.httpAddr)
	waitFor(t, ctx, "the load balancer passes requests on", func() bool {
		st, _, err := call(ctx, freshClient, "GET", front+"/api/v2/config", nil, nil)
		return err == nil && st == 401
	})

	// The declared connection made the workspace Acme; an owner through
	// node B's admin API, a key through the load balancer's Console.
	var wss []idName
	must(t, "list workspaces", 200, &wss)(c.a.admin(ctx, "GET", "/agentgate/workspaces", nil))
	if len(wss) != 1 || wss[0].Name != "Acme" {
		t.Fatalf("workspaces %+v, want the declared connection's Acme", wss)
	}
	var owner idName
	must(t, "create owner", 201, &owner)(c.b.admin(ctx, "POST", "/agentgate/people",
		map[string]any{"email": "ann@example.com", "name": "Ann", "password": "pw-" + randomHex(8), "workspace": wss[0].ID, "role": "owner"}))
	tok := c.b.token(t, ctx, owner.ID, wss[0].ID)
	c.secret(tok, "the owner's access token")
	bearer := http.Header{"Authorization": {"Bearer " + tok}}
	var sa idName
	st, body, err := call(ctx, httpClient, "POST", front+"/api/v1/service-accounts", bearer, map[string]any{"name": "ci"})
	if err != nil || st != 201 || json.Unmarshal([]byte(gjson.GetBytes(body, "data").Raw), &sa) != nil {
		t.Fatalf("create a service account through the load balancer: %d %v %s", st, err, body)
	}
	st, body, err = call(ctx, httpClient, "POST", front+"/api/v1/service-accounts/"+sa.ID+"/keys", bearer, map[string]any{"name": "ci", "permission": "inference"})
	key, keyID := gjson.GetBytes(body, "data.key").String(), gjson.GetBytes(body, "data.id").String()
	if err != nil || st != 201 || key == "" {
		t.Fatalf("create a key through the load balancer: %d %v %s", st, err, body)
	}
	c.secret(key, "a workspace key")

	served := func() [2]int {
		var n [2]int
		for i, s := range c.nodes {
			n[i] = strings.Count(s.stderr.String(), `"uri":"/custom/conn_openai/chat/completions"`)
		}
		return n
	}
	gw := http.Header{"Authorization": {"Bearer " + key}, "Content-Type": {"application/json"}}
	for i := 0; i < 6; i++ {
		st, body, err := call(ctx, freshClient, "POST", front+"/custom/conn_openai/chat/completions", gw, mnBody)
		if err != nil || st != 200 || !strings.Contains(string(body), fakeprovider.Text) {
			t.Fatalf("request %d through the load balancer: %d %v %s", i, st, err, body)
		}
	}
	if got := p.Last().Header.Get("Authorization"); got != "Bearer "+secret {
		t.Fatalf("the provider got Authorization %q", got)
	}
	before := served()
	if before[0] == 0 || before[1] == 0 {
		t.Fatalf("gateway requests served per node: %v, want both nodes to serve", before)
	}
	st, body, err = call(ctx, httpClient, "DELETE", front+"/api/v1/service-accounts/"+sa.ID+"/keys/"+keyID, bearer, nil)
	if err != nil || st != 204 {
		t.Fatalf("revoke through the load balancer: %d %v %s", st, err, body)
	}
	for i := 0; i < 4; i++ {
		st, body, err := call(ctx, freshClient, "POST", front+"/custom/conn_openai/chat/completions", gw, mnBody)
		if err != nil || st != 401 {
			t.Fatalf("request %d after the revocation: %d %v %s", i, st, err, body)
		}
	}
	if after := served(); after[0] == before[0] || after[1] == before[1] {
		t.Fatalf("refusals per node: %v → %v, want both nodes to refuse", before, after)
	}

	// The instance server: a session made through the balanced port is
	// served by each node.
	auth := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:"+mnInstancePassword))}}
	st, body, err = call(ctx, httpClient, "POST", "http://127.0.0.1:"+port(lbInst)+"/api/session", auth, map[string]any{"title": "Through the balancer"})
	id := gjson.GetBytes(body, "data.id").String()
	if err != nil || st != 200 || id == "" {
		t.Fatalf("create a session through the load balancer: %d %v %s", st, err, body)
	}
	for i, a := range instAddrs {
		st, body, err := call(ctx, httpClient, "GET", "http://"+a+"/api/session/"+id, auth, nil)
		if err != nil || st != 200 || gjson.GetBytes(body, "data.title").String() != "Through the balancer" {
			t.Fatalf("node %c's instance server: %d %v %s", 'A'+i, st, err, body)
		}
	}
	c.checkLogs(t)
	for v, what := range c.secrets {
		if strings.Contains(lb.stderr.String()+lb.stdout.String(), v) {
			t.Errorf("the load balancer's log carries %s", what)
		}
	}
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

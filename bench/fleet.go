package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/pgtest"
)

// fleet is lane (p2): two agentgate nodes on one PostgreSQL database with
// one master key, as examples/multi-node runs them, and a third process of
// the same binary in front of them, a plain reverse_proxy balancing round
// robin. All three run where the other server lanes run (core 1 when
// pinning is on).
type fleet struct {
	nodes   [2]*gwNode
	sites   [2]string // each node's llm_gateway site
	direct  [2]*lane  // each node's site, reached without the balancer
	console string    // node 1's workspace_console site (reads usage records)
	lb      *exec.Cmd
	lbAddr  string
}

// fleetDatabase is the database the fleet's nodes share, on lane (p)'s
// cluster (lane (p) keeps its own database).
const fleetDatabase = "agentgate_fleet"

// createDatabase creates database name on the server behind dsn (a
// superuser's) and returns the DSN of that database.
func createDatabase(ctx context.Context, dsn, name string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(cctx)
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %v", name, err)
	}
	return pgtest.WithDatabase(dsn, name)
}

// startFleet runs lane (p2) on lane (p)'s PostgreSQL cluster: two nodes on
// a database of their own with one master key, bootstrapped once through
// node 1's admin API (the workspace, key, budget and connections are rows
// of the shared database, so node 2 serves them too), and the balancer.
func (r *rig) startFleet(ctx context.Context, logf func(string, ...any)) (*lane, error) {
	logf("starting lane (p2): two nodes on PostgreSQL and a load balancer …")
	dsn, err := createDatabase(ctx, r.pgServer.DSN, fleetDatabase)
	if err != nil {
		return nil, err
	}
	master := make([]byte, 32)
	rand.Read(master)
	f := &fleet{console: freeAddr(), lbAddr: freeAddr()}
	r.fleet = f
	for i := range f.nodes {
		n := &gwNode{adminAddr: freeAddr(), lane: "p2"}
		f.nodes[i], f.sites[i] = n, freeAddr()
		var cf strings.Builder
		fmt.Fprintf(&cf, "{\n\tadmin %s\n\tagentgate {\n\t\tstorage postgres %q\n\t\tmaster_key %s\n\t}\n}\n\nhttp://%s {\n\tbind 127.0.0.1\n\tllm_gateway\n}\n",
			n.adminAddr, dsn, hex.EncodeToString(master), f.sites[i])
		if i == 0 {
			// The Console, on a site of its own so that the gateway's
			// site is the same as lane (p)'s: the budget race reads the
			// usage records through it.
			fmt.Fprintf(&cf, "\nhttp://%s {\n\tbind 127.0.0.1\n\tworkspace_console\n}\n", f.console)
		}
		if n.cmd, err = r.startCaddy(fmt.Sprintf("fleet-node%d", i+1), cf.String()); err != nil {
			return nil, err
		}
	}
	for _, n := range f.nodes {
		if err := r.waitAdmin(ctx, n); err != nil {
			return nil, err
		}
	}
	n1, n2 := f.nodes[0], f.nodes[1]
	if err := n1.bootstrap(ctx, r.providers); err != nil {
		return nil, err
	}
	n2.ws, n2.sa, n2.key, n2.conns, n2.inference = n1.ws, n1.sa, n1.key, n1.conns, n1.inference

	lb := fmt.Sprintf("{\n\tadmin off\n}\n\nhttp://%s {\n\tbind 127.0.0.1\n\treverse_proxy %s %s {\n\t\tlb_policy round_robin\n\t}\n}\n",
		f.lbAddr, f.sites[0], f.sites[1])
	if f.lb, err = r.startCaddy("fleet-lb", lb); err != nil {
		return nil, err
	}

	l := &lane{id: "p2", name: "agentgate fleet: 2 nodes on PostgreSQL behind a round_robin balancer", client: newClient(),
		pid:   func() int { return n1.cmd.Process.Pid },
		nodes: func() []int { return []int{n1.cmd.Process.Pid, n2.cmd.Process.Pid} },
		front: func() int { return f.lb.Process.Pid }}
	for i := range f.nodes {
		f.direct[i] = &lane{id: fmt.Sprintf("p2-node%d", i+1), name: fmt.Sprintf("fleet node %d", i+1), client: newClient()}
	}
	for i := range r.providers {
		path := "/custom/" + n1.conns[i] + "/chat/completions"
		hdr := http.Header{"Authorization": {"Bearer " + n1.key}}
		l.url[i], l.hdr[i] = "http://"+f.lbAddr+path, hdr
		for j, d := range f.direct {
			d.url[i], d.hdr[i] = "http://"+f.sites[j]+path, hdr
		}
	}
	// Node 2 serves what was made through node 1, and the balancer is up.
	body := chatBody(1024, false)
	for _, d := range f.direct {
		if err := ping(ctx, d); err != nil {
			return nil, err
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := do(ctx, l, 0, body)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the balancer did not pass a request on: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return l, nil
}

// The budget race across the fleet's nodes (see budgetRace).
const (
	raceAdmit = 50  // the requests the budget has room for
	raceTotal = 200 // the requests fired at once, alternating node 1 and node 2
	raceLane  = "p2-race"
)

// raceCost is what one race request costs and reserves: its connection
// prices input at 0 and output at priceOut, and the request's max_tokens is
// the fake's output count, so the reservation (input bytes × the input
// price + max_tokens × the output price, modules/gateway's reservation)
// equals the cost, settlements free no room, and the budget admits exactly
// raceAdmit requests whatever the timing (as e2e/multinode_test.go's race).
var raceCost = money.Pico(fakeprovider.OutputTokens * priceOut * money.PicoPerMicro)

// raceBody is a Chat Completions request whose reservation is raceCost.
var raceBody = []byte(fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"Say hello"}]}`, model, fakeprovider.OutputTokens))

// raceResult is the budget race across the fleet's nodes.
type raceResult struct {
	err                       string // why it did not run to the end ("" when it did)
	admit, total              int
	ok                        [2]int // 200 answers per node
	refused                   int    // 402 BudgetExceeded
	other                     int    // anything else
	firstOther                string
	answered                  int // race requests the provider received
	throughputCount           int // the provider's answers to lane (p2) before the race, at costPerAnswer each
	limit                     money.Pico
	spentBefore, spentAfter   money.Pico // the member's spend before and after the race
	reservedAfter             money.Pico
	node2Spent, node2Reserved money.Pico // the same read through node 2
	usageSum                  money.Pico // every usage record of the member
	usageRecords              int
	raceUsage                 money.Pico // the race connection's records
	raceUsageOK               int        // … that answered 200
	usageErr                  string
}

func (rr raceResult) admitted() int { return rr.ok[0] + rr.ok[1] }

// throughputExact is lane (p2)'s usage exactness before the race: the
// spend equals the provider's answers × the price.
func (rr raceResult) throughputExact() bool {
	return rr.spentBefore == costPerAnswer*moneyN(rr.throughputCount)
}

// exact is the race's verdict: exactly admit admitted, the provider
// reached by those only, everything settled, and the spend equal to the
// usage records on both counts.
func (rr raceResult) exact() bool {
	return rr.err == "" && rr.admitted() == rr.admit && rr.answered == rr.admitted() && rr.other == 0 &&
		rr.reservedAfter == 0 && rr.spentAfter-rr.spentBefore == money.Pico(rr.admitted())*raceCost &&
		rr.usageErr == "" && rr.usageSum == rr.spentAfter && rr.raceUsage == rr.spentAfter-rr.spentBefore &&
		rr.node2Spent == rr.spentAfter
}

// settle waits (up to d) until the member's budget holds no reservation
// and returns its spend and reservations, read through n.
func settle(ctx context.Context, n *gwNode, d time.Duration) (spent, reserved money.Pico, err error) {
	deadline := time.Now().Add(d)
	for {
		spent, reserved, err = n.spend(ctx)
		if err != nil || reserved == 0 || time.Now().After(deadline) {
			return spent, reserved, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// budgetRace runs after the other phases: the bench's service account gets
// a budget with room for exactly raceAdmit race requests (its spend so far
// + raceAdmit × raceCost + half of one), raceTotal requests are fired at
// once, alternating node 1 and node 2 (not through the balancer), and it
// reports how many were admitted, and whether the spend once settled
// equals the provider's answers × the cost and the sum of the usage
// records. It never fails the run: it reports what it found.
func (r *rig) budgetRace(ctx context.Context) (rr raceResult) {
	rr.admit, rr.total = raceAdmit, raceTotal
	f := r.fleet
	n1, n2 := f.nodes[0], f.nodes[1]
	fail := func(format string, a ...any) raceResult {
		rr.err = fmt.Sprintf(format, a...)
		return rr
	}

	// A connection of its own, made through node 2, priced so that a
	// request reserves exactly what it costs, on the 20 ms provider (so
	// the admitted requests overlap).
	var conn struct{ ID string }
	if err := n2.adminData(ctx, "create the race connection", 201, "POST", "/agentgate/workspaces/"+n2.ws+"/connections", map[string]any{
		"name": "race", "kind": "openai", "base_url": r.providers[1].URL + "/v1", "credential": providerSecret,
		"headers": map[string]string{laneHeader: raceLane},
		"models":  map[string]any{model: map[string]any{"pricing": map[string]any{"input": 0, "output": priceOut}}},
	}, &conn); err != nil {
		return fail("%v", err)
	}
	var nodes, warm [2]*lane
	for i, d := range f.direct {
		w := *d
		w.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: raceTotal, MaxConnsPerHost: raceTotal}}
		l := w
		l.url[1] = strings.Replace(d.url[1], "/custom/"+n1.conns[1]+"/", "/custom/"+conn.ID+"/", 1)
		warm[i], nodes[i] = &w, &l
	}
	// Warm both nodes (their pools, the client's connections) on the
	// bench's own connection, so that the race connection's records are
	// the race's only, then let everything settle.
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() { defer wg.Done(); do(ctx, warm[i%2], 1, raceBody) }()
	}
	wg.Wait()
	spent, reserved, err := settle(ctx, n1, 20*time.Second)
	if err != nil {
		return fail("%v", err)
	}
	if reserved != 0 {
		return fail("the budget still holds %s USD reserved 20 s after the last request", reserved)
	}
	rr.spentBefore = spent
	// The spend so far is the throughput phases' and the warm-up's
	// answers on the bench's connections, at costPerAnswer each.
	r.resetProviders()
	r.mu.Lock()
	rr.throughputCount = r.answered["p2"]
	r.mu.Unlock()
	rr.limit = spent + money.Pico(raceAdmit)*raceCost + raceCost/2
	if err := n1.adminData(ctx, "set the race budget", 200, "PUT", "/agentgate/workspaces/"+n1.ws+"/budgets/"+n1.sa,
		map[string]any{"limit_usd": json.RawMessage(rr.limit.String()), "period": "monthly"}, nil); err != nil {
		return fail("%v", err)
	}
	if s, _, err := n2.spend(ctx); err != nil || s != spent {
		return fail("after setting the budget, node 2 reads spent %s (%v), want %s", s, err, spent)
	}
	r.mu.Lock()
	answered0 := r.answered[raceLane]
	r.mu.Unlock()

	type answer struct {
		status int
		tag    string
		err    error
	}
	answers := make([]answer, raceTotal)
	gate := make(chan struct{})
	for i := range raceTotal {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			l := nodes[i%2]
			resp, err := l.client.Do(l.request(ctx, 1, raceBody))
			if err != nil {
				answers[i] = answer{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Tag string `json:"_tag"`
			}
			json.Unmarshal(b, &e)
			answers[i] = answer{status: resp.StatusCode, tag: e.Tag}
		}()
	}
	close(gate)
	wg.Wait()
	for i, a := range answers {
		switch {
		case a.err == nil && a.status == 200:
			rr.ok[i%2]++
		case a.err == nil && a.status == http.StatusPaymentRequired && a.tag == "BudgetExceeded":
			rr.refused++
		default:
			rr.other++
			if rr.firstOther == "" {
				rr.firstOther = fmt.Sprintf("node %d: status %d %s %v", i%2+1, a.status, a.tag, a.err)
			}
		}
	}

	if rr.spentAfter, rr.reservedAfter, err = settle(ctx, n1, 20*time.Second); err != nil {
		return fail("%v", err)
	}
	if rr.node2Spent, rr.node2Reserved, err = n2.spend(ctx); err != nil {
		return fail("%v", err)
	}
	r.resetProviders()
	r.mu.Lock()
	rr.answered = r.answered[raceLane] - answered0
	r.mu.Unlock()
	rr.usageSum, rr.usageRecords, rr.raceUsage, rr.raceUsageOK, err = f.usage(ctx, conn.ID)
	if err != nil {
		rr.usageErr = err.Error()
	}
	return rr
}

// usage sums the usage records of the bench's service account through node
// 1's Console (an owner made through node 2's admin API reads them): every
// record, and the records of connection conn.
func (f *fleet) usage(ctx context.Context, conn string) (sum money.Pico, n int, connSum money.Pico, connOK int, err error) {
	n1, n2 := f.nodes[0], f.nodes[1]
	pw := make([]byte, 12)
	rand.Read(pw)
	var p struct{ ID string }
	if err := n2.adminData(ctx, "create the owner", 201, "POST", "/agentgate/people", map[string]any{
		"email": "bench-owner@example.com", "name": "Bench Owner", "password": hex.EncodeToString(pw), "workspace": n2.ws, "role": "owner",
	}, &p); err != nil {
		return 0, 0, 0, 0, err
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := n2.adminData(ctx, "issue a token", 201, "POST", "/agentgate/people/"+url.PathEscape(p.ID)+"/tokens",
		map[string]any{"workspace": n2.ws}, &tok); err != nil {
		return 0, 0, 0, 0, err
	}
	cursor := ""
	for {
		path := "/api/v1/usage?limit=1000&member=" + url.QueryEscape(n1.sa)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+f.console+path, nil)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, 0, 0, fmt.Errorf("list usage: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return 0, 0, 0, 0, fmt.Errorf("list usage: status %d %v: %s", resp.StatusCode, err, tail(string(b), 300))
		}
		var page struct {
			Data []struct {
				Connection string     `json:"connection"`
				Cost       money.Pico `json:"cost_usd"`
				Status     int        `json:"status"`
			} `json:"data"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("list usage: %v", err)
		}
		for _, u := range page.Data {
			sum += u.Cost
			n++
			if u.Connection == conn {
				connSum += u.Cost
				if u.Status == 200 {
					connOK++
				}
			}
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return sum, n, connSum, connOK, nil
		}
		cursor = *page.NextCursor
	}
}

package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// A coherent PostgreSQL store lets each node of a fleet cache what its hot
// path reads (credential verdicts, memberships, connections, routes,
// policies) and still refuse a revoked credential on the very next
// request, on every node:
//
//   - Every transaction that writes a cached record (the ones Tracked
//     tracks) raises the fleet's generation (agentgate_cache) in the same
//     transaction and notifies it (NOTIFY agentgate_cache, delivered at the
//     commit).
//   - Each node listens on a connection of its own. A notification of a
//     generation it has not applied drops its whole cache (the local
//     generation moves on) and is acknowledged in agentgate_nodes.
//   - The node's heartbeat (on the same connection) renews its row's
//     expires_at for a lease and reads the fleet's generation: one it
//     missed is applied before the node trusts its cache again. The cache
//     is trusted only while the listening connection is up and the last
//     heartbeat is younger than the lease (less a margin): the row's
//     expiry, counted by the database from the same heartbeat, is never
//     earlier.
//   - The writing call returns only when every node whose row is live has
//     acknowledged the generation. A node that cannot acknowledge stops
//     trusting its cache before its row expires, so waiting for the row to
//     expire is enough; a node that loses its connection drops its cache
//     and reads the database until it has listened and resynced.
//
// The same connection carries signals between the nodes' ledgers (Signal,
// OnSignal).
type coherence struct {
	s      *Postgres
	cfg    *pgx.ConnConfig
	node   string
	lease  time.Duration
	beat   time.Duration
	logger *zap.Logger
	base   time.Time // trustUntil counts from here (monotonic)

	gen        atomic.Uint64 // local generation: raised by every invalidation applied
	acked      atomic.Int64  // the highest fleet generation applied
	trustUntil atomic.Int64  // nanoseconds after base; the cache is trusted before it
	listening  atomic.Bool
	nodes      atomic.Int32  // live nodes at the last heartbeat, this one included
	drops      atomic.Uint64 // cache drops so far
	pid        atomic.Uint32 // the listening connection's backend (tests cut it)

	mu      sync.Mutex
	nextID  int
	hooks   map[int]func()
	signals map[string]map[int]func(payload string)

	stop chan struct{}
	done chan struct{}
}

const (
	coherenceChannel = "agentgate_cache"
	signalChannel    = "agentgate_signal"
	// coherenceBump raises the fleet's generation and notifies it.
	coherenceBump = `WITH g AS (UPDATE agentgate_cache SET gen = gen + 1 WHERE id = 1 RETURNING gen)
		SELECT gen FROM g, LATERAL (SELECT pg_notify('agentgate_cache', g.gen::text)) AS n`
	// coherenceBeat renews the node's row with the generation it applied,
	// and reads the fleet's generation and the number of other live nodes.
	coherenceBeat = `INSERT INTO agentgate_nodes AS n (node, acked, expires_at)
		VALUES ($1, $2, now() + $3 * interval '1 millisecond')
		ON CONFLICT (node) DO UPDATE SET acked = GREATEST(n.acked, excluded.acked), expires_at = excluded.expires_at
		RETURNING (SELECT gen FROM agentgate_cache WHERE id = 1),
			(SELECT count(*) FROM agentgate_nodes WHERE node <> $1 AND expires_at > now())`
	coherenceWaiting = `SELECT count(*) FROM agentgate_nodes WHERE node <> $1 AND acked < $2 AND expires_at > now()`
)

// Default lease and heartbeat of a coherent node.
const (
	DefaultCacheLease = 5 * time.Second
)

func newCoherence(s *Postgres, cfg *pgx.ConnConfig, lease time.Duration, logger *zap.Logger) *coherence {
	if lease <= 0 {
		lease = DefaultCacheLease
	}
	b := make([]byte, 6)
	rand.Read(b)
	c := &coherence{s: s, cfg: cfg, node: "node_" + hex.EncodeToString(b), lease: lease, beat: lease / 5,
		logger: logger, base: time.Now(), hooks: map[int]func(){}, signals: map[string]map[int]func(string){},
		stop: make(chan struct{}), done: make(chan struct{})}
	c.nodes.Store(1)
	return c
}

// start listens and waits (up to the context, and at most a lease) for the
// first heartbeat, so that a node serves from its cache as soon as it is
// open; a node that cannot listen yet serves without a cache meanwhile.
func (c *coherence) start(ctx context.Context) {
	ready := make(chan struct{})
	go c.run(ready)
	t := time.NewTimer(c.lease)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
	}
}

// close leaves the fleet: the node's row goes, so that no writer waits for it.
func (c *coherence) close() {
	close(c.stop)
	<-c.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.s.pool.Exec(ctx, `DELETE FROM agentgate_nodes WHERE node = $1`, c.node)
}

// current is the local generation and whether the cache may be trusted.
func (c *coherence) current() (uint64, bool) {
	if !c.listening.Load() || int64(time.Since(c.base)) >= c.trustUntil.Load() {
		return 0, false
	}
	return c.gen.Load(), true
}

// drop forgets everything cached.
func (c *coherence) drop() {
	c.gen.Add(1)
	c.drops.Add(1)
	c.mu.Lock()
	hooks := make([]func(), 0, len(c.hooks))
	for _, h := range c.hooks {
		hooks = append(hooks, h)
	}
	c.mu.Unlock()
	for _, h := range hooks {
		h()
	}
}

// apply applies a fleet generation: a new one drops the cache.
func (c *coherence) apply(g int64) bool {
	for {
		a := c.acked.Load()
		if g <= a {
			return false
		}
		if c.acked.CompareAndSwap(a, g) {
			c.drop()
			return true
		}
	}
}

// published applies the generation this node's write raised and waits
// until every other live node has applied it, or its row has expired.
func (c *coherence) published(ctx context.Context, g int64) {
	c.apply(g)
	ctx = context.WithoutCancel(ctx) // the write is done: its announcement must finish
	deadline := time.Now().Add(2*c.lease + time.Second)
	wait := 200 * time.Microsecond
	for {
		var n int64
		err := c.s.pool.QueryRow(ctx, coherenceWaiting, c.node, g).Scan(&n)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			// Only a node that renews its lease without acknowledging can
			// get here, which the heartbeat never does.
			c.logger.Error("cache invalidation not acknowledged by every node", zap.Int64("generation", g), zap.Int64("waiting", n), zap.Error(err))
			return
		}
		time.Sleep(wait)
		wait = min(wait*2, 20*time.Millisecond)
	}
}

// register adds fn to a set of callbacks and returns what removes it.
func register[F any](c *coherence, set map[int]F, fn F) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	id := c.nextID
	set[id] = fn
	return func() {
		c.mu.Lock()
		delete(set, id)
		c.mu.Unlock()
	}
}

// run keeps a listening connection, reconnecting after a loss with a
// doubling delay, until close.
func (c *coherence) run(ready chan struct{}) {
	defer close(c.done)
	retry := 50 * time.Millisecond
	for {
		err := c.listen(ready)
		c.lost()
		select {
		case <-c.stop:
			return
		default:
		}
		if err != nil {
			c.logger.Warn("cache listener lost; the cache is off until it resyncs", zap.Error(err))
		}
		select {
		case <-c.stop:
			return
		case <-time.After(retry):
		}
		retry = min(retry*2, 2*time.Second)
		if err == nil {
			retry = 50 * time.Millisecond
		}
	}
}

// lost stops trusting the cache and, best effort, ends the node's lease at
// once so that writers do not wait for it.
func (c *coherence) lost() {
	c.listening.Store(false)
	c.trustUntil.Store(0)
	c.drop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.s.pool.Exec(ctx, `UPDATE agentgate_nodes SET expires_at = now() WHERE node = $1`, c.node)
}

// listen connects, listens, resyncs, then follows notifications and beats
// until the connection fails or close.
func (c *coherence) listen(ready chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := pgx.ConnectConfig(cctx, c.cfg)
	ccancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		ccancel()
	}()
	c.pid.Store(conn.PgConn().PID())
	for _, ch := range []string{coherenceChannel, signalChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	c.listening.Store(true)
	if err := c.heartbeat(ctx, conn); err != nil {
		return err
	}
	if ready != nil {
		select {
		case <-ready:
		default:
			close(ready)
		}
	}
	next := time.Now().Add(c.beat)
	for {
		wctx, wcancel := context.WithDeadline(ctx, next)
		n, err := conn.WaitForNotification(wctx)
		wcancel()
		switch {
		case err == nil:
			if err := c.notified(ctx, conn, n.Channel, n.Payload); err != nil {
				return err
			}
		case ctx.Err() != nil:
			return nil
		case pgconn.Timeout(err):
			if err := c.heartbeat(ctx, conn); err != nil {
				return err
			}
			next = time.Now().Add(c.beat)
		default:
			return err
		}
	}
}

// notified handles one notification.
func (c *coherence) notified(ctx context.Context, conn *pgx.Conn, channel, payload string) error {
	switch channel {
	case coherenceChannel:
		g, err := strconv.ParseInt(payload, 10, 64)
		if err != nil {
			return nil
		}
		if c.apply(g) {
			return c.ack(ctx, conn)
		}
	case signalChannel:
		topic, rest, ok := strings.Cut(payload, "\x1f")
		if !ok {
			return nil
		}
		c.mu.Lock()
		for _, fn := range c.signals[topic] {
			go fn(rest)
		}
		c.mu.Unlock()
	}
	return nil
}

// ack records the applied generation without renewing the lease.
func (c *coherence) ack(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `UPDATE agentgate_nodes SET acked = GREATEST(acked, $2) WHERE node = $1`, c.node, c.acked.Load())
	return err
}

// heartbeat renews the lease and applies a generation the node missed
// before it trusts its cache for another lease.
func (c *coherence) heartbeat(ctx context.Context, conn *pgx.Conn) error {
	for range 3 {
		sent := time.Since(c.base)
		acked := c.acked.Load()
		var fleet, others int64
		err := conn.QueryRow(ctx, coherenceBeat, c.node, acked, c.lease.Milliseconds()).Scan(&fleet, &others)
		if err != nil {
			return err
		}
		c.nodes.Store(int32(min(others+1, 1<<30)))
		if fleet > acked {
			c.apply(fleet) // then renew again with it acknowledged
			continue
		}
		c.trustUntil.Store(int64(sent + c.lease - c.lease/10))
		return nil
	}
	return errors.New("store: the fleet's cache generation kept moving during the heartbeat")
}

// CacheGeneration reports the generation of what this node may cache, and
// false when it may cache nothing now (a store that is not coherent, or a
// node that is not listening or whose lease has run out).
func (s *Postgres) CacheGeneration() (uint64, bool) {
	if s.coh == nil {
		return 0, false
	}
	return s.coh.current()
}

// OnInvalidate registers fn to run whenever this node drops its cache: a
// write anywhere in the fleet to a cached record, or a lost connection.
// The returned function unregisters it. It does nothing on a store that
// is not coherent.
func (s *Postgres) OnInvalidate(fn func()) (remove func()) {
	if s.coh == nil {
		return func() {}
	}
	return register(s.coh, s.coh.hooks, fn)
}

// CacheDrops is how many times this node has dropped its cache (0 when
// not coherent).
func (s *Postgres) CacheDrops() uint64 {
	if s.coh == nil {
		return 0
	}
	return s.coh.drops.Load()
}

// Coherent reports whether the store keeps a cache coherent across the
// fleet (and carries signals between nodes).
func (s *Postgres) Coherent() bool { return s.coh != nil }

// Node is this node's id in the fleet ("" when not coherent).
func (s *Postgres) Node() string {
	if s.coh == nil {
		return ""
	}
	return s.coh.node
}

// LiveNodes is the number of nodes whose lease was live at this node's
// last heartbeat, this one included (1 when not coherent).
func (s *Postgres) LiveNodes() int {
	if s.coh == nil {
		return 1
	}
	return int(s.coh.nodes.Load())
}

// Signal sends payload on topic to every node listening (this one
// included), best effort: a node that is not listening misses it.
func (s *Postgres) Signal(ctx context.Context, topic, payload string) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, signalChannel, topic+"\x1f"+payload)
	return s.wrap(ctx, err, true)
}

// OnSignal makes fn receive the payloads signalled on topic (one
// goroutine each), beside the topic's other receivers. The returned
// function unregisters it.
func (s *Postgres) OnSignal(topic string, fn func(payload string)) (remove func()) {
	if s.coh == nil {
		return func() {}
	}
	s.coh.mu.Lock()
	set := s.coh.signals[topic]
	if set == nil {
		set = map[int]func(string){}
		s.coh.signals[topic] = set
	}
	s.coh.mu.Unlock()
	return register(s.coh, set, fn)
}

// ListenerPID is the backend process id of the node's listening
// connection (0 when not coherent): a test cuts it to see the node resync.
func (s *Postgres) ListenerPID() uint32 {
	if s.coh == nil {
		return 0
	}
	return s.coh.pid.Load()
}

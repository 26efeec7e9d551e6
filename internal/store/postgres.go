package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// PostgresOptions configure the PostgreSQL store.
type PostgresOptions struct {
	// DSN is a libpq connection string or URL. It may carry a password: it
	// is never logged nor put into errors.
	DSN string
	// Logger receives the store's own messages. Nil means no logging.
	Logger *zap.Logger
	// MaxConns bounds the connection pool. 0 means pool_max_conns from the
	// DSN, else 16.
	MaxConns int32
	// ConnectTimeout bounds one connection attempt. 0 means connect_timeout
	// from the DSN, else 5s.
	ConnectTimeout time.Duration
	// Coherent joins the fleet's cache coherence (coherence.go): the store
	// reports a cache generation that follows every node's writes, and
	// carries signals between nodes.
	Coherent bool
	// CacheLease is how long a heartbeat vouches for a coherent node's
	// cache; a write waits at most about this long for a node that stopped
	// answering. 0 means DefaultCacheLease.
	CacheLease time.Duration
}

// Postgres is the Store on a PostgreSQL database, which several agentgate
// nodes may share. Records are kept in one key-value table (agentgate_kv,
// bytea keys, so ordering is bytewise as in Badger) and written by the same
// record logic as Badger's. It is safe for concurrent use.
//
// Update runs a SERIALIZABLE transaction, retried from the start on a
// serialization failure or deadlock; View runs a read-only REPEATABLE READ
// transaction. Errors caused by an unreachable database report
// Unavailable() true (503 on the wire); the pool reconnects by itself when
// the database is back.
type Postgres struct {
	pool   *pgxpool.Pool
	logger *zap.Logger
	closed atomic.Bool
	once   sync.Once
	trips  *roundTrips
	// coh keeps this node's cache coherent with the fleet's writes (nil:
	// the store offers no cache generation).
	coh *coherence
}

// roundTrips counts the statements and batches sent to the database, each
// one network round trip (BEGIN and COMMIT included).
type roundTrips struct{ n atomic.Uint64 }

func (t *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	return ctx
}
func (*roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (t *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.Add(1)
	return ctx
}
func (*roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// RoundTrips is the number of round trips to the database so far.
func (s *Postgres) RoundTrips() uint64 { return s.trips.n.Load() }

// postgresMigrations are the schema steps, by version (index 0 is unused).
// Each is applied once, in its own transaction, under pgMigrationLock.
var postgresMigrations = []string{
	1: `CREATE TABLE agentgate_kv (k bytea PRIMARY KEY, v bytea NOT NULL)`,
	// The fleet's cache generation (coherence.go): one row.
	2: `CREATE TABLE agentgate_cache (id integer PRIMARY KEY, gen bigint NOT NULL)`,
	3: `INSERT INTO agentgate_cache (id, gen) VALUES (1, 0)`,
	// The nodes: the generation each has applied, and until when its
	// heartbeat vouches for its cache.
	4: `CREATE TABLE agentgate_nodes (node text PRIMARY KEY, acked bigint NOT NULL, expires_at timestamptz NOT NULL)`,
}

// pgMigrationLock is the advisory lock key that serialises migrations
// between nodes starting at once ("agentgat" in ASCII).
const pgMigrationLock int64 = 0x6167656e74676174

// OpenPostgres connects to the database in opts.DSN, applies the schema
// migrations this build knows (refusing a database migrated by a newer
// build) and checks the schema version of the records.
func OpenPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		// The parser's message may quote the DSN, and with it a password.
		return nil, errors.New("store: the PostgreSQL DSN cannot be parsed (it is not shown: it may hold a password)")
	}
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = opts.MaxConns
	case !strings.Contains(opts.DSN, "pool_max_conns"):
		cfg.MaxConns = 16
	}
	switch {
	case opts.ConnectTimeout > 0:
		cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	case cfg.ConnConfig.ConnectTimeout == 0:
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "agentgate"
	}
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL pool: %w", err)
	}
	s := &Postgres{pool: pool, logger: logger, trips: trips}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := checkSchemaVersion(s); err != nil {
		pool.Close()
		return nil, err
	}
	if opts.Coherent {
		lcfg := cfg.ConnConfig.Copy()
		// Operators tell it apart in pg_stat_activity.
		lcfg.RuntimeParams["application_name"] += " listener"
		s.coh = newCoherence(s, lcfg, opts.CacheLease, logger)
		s.coh.start(ctx)
	}
	logger.Info("PostgreSQL store open", zap.String("host", cfg.ConnConfig.Host), zap.Uint16("port", cfg.ConnConfig.Port),
		zap.String("database", cfg.ConnConfig.Database), zap.Int32("max_conns", cfg.MaxConns))
	return s, nil
}

// migrate applies the missing migrations, one transaction each. Every
// transaction first takes the advisory lock (pg_advisory_xact_lock: held
// until that transaction ends, so it cannot outlive a failed migration on
// a pooled connection), then reads the applied version under it: of
// several nodes starting at once, exactly one applies each step.
func (s *Postgres) migrate(ctx context.Context) error {
	latest := len(postgresMigrations) - 1
	for {
		var applied int
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrationLock); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS agentgate_schema_migrations (
				version integer PRIMARY KEY,
				applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			var cur int
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM agentgate_schema_migrations`).Scan(&cur); err != nil {
				return err
			}
			if cur > latest {
				return fmt.Errorf("store: the database was migrated by a newer agentgate (schema migration %d, this build knows up to %d)", cur, latest)
			}
			if cur == latest {
				applied = cur
				return nil
			}
			next := cur + 1
			if _, err := tx.Exec(ctx, postgresMigrations[next]); err != nil {
				return fmt.Errorf("store: schema migration %d: %w", next, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO agentgate_schema_migrations (version) VALUES ($1)`, next); err != nil {
				return err
			}
			s.logger.Info("schema migration applied", zap.Int("version", next))
			applied = -1
			return nil
		})
		if err != nil {
			return s.wrap(ctx, err, true)
		}
		if applied >= 0 {
			return nil
		}
	}
}

// Shared reports whether several processes may share the store: they may.
func (*Postgres) Shared() bool { return true }

// Close closes the pool. It is safe to call more than once; later calls
// of View and Update return ErrClosed.
func (s *Postgres) Close() error {
	s.once.Do(func() {
		if s.coh != nil {
			s.coh.close()
		}
		s.closed.Store(true)
		s.pool.Close()
	})
	return nil
}

// View implements Store.
func (s *Postgres) View(ctx context.Context, fn func(Tx) error) error {
	return s.run(ctx, pgView, nil, fn)
}

// Update implements Store.
func (s *Postgres) Update(ctx context.Context, fn func(Tx) error) error {
	return s.run(ctx, pgUpdate, nil, fn)
}

// UpdateLocked implements Locker: a READ COMMITTED transaction that first
// takes a transaction-scoped advisory lock per name (a 64-bit FNV-1a hash
// of it), in sorted order so that two transactions never wait on each
// other in a cycle. Contending transactions queue on the lock instead of
// failing and retrying as SERIALIZABLE ones do.
func (s *Postgres) UpdateLocked(ctx context.Context, locks []string, fn func(Tx) error) error {
	keys := make([]int64, 0, len(locks))
	for _, l := range locks {
		h := fnv.New64a()
		h.Write([]byte("agentgate:"))
		h.Write([]byte(l))
		keys = append(keys, int64(h.Sum64()))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return s.run(ctx, pgLocked, keys, fn)
}

type pgMode int

const (
	pgView pgMode = iota
	pgUpdate
	pgLocked
)

const (
	pgMaxAttempts    = 100 // serialization failures, like Badger's conflicts
	pgMaxLostRetries = 2   // connections found dead before the commit
)

func (s *Postgres) run(ctx context.Context, mode pgMode, locks []int64, fn func(Tx) error) error {
	lost := 0
	for attempt := 0; ; attempt++ {
		if s.closed.Load() {
			return ErrClosed
		}
		again, err := s.attempt(ctx, mode, locks, fn)
		if !again {
			return err
		}
		var u *unavailableError
		if errors.As(err, &u) {
			// The connection died before the commit: nothing was written,
			// and the pool replaces it. Try a couple of times, then report.
			if lost++; lost > pgMaxLostRetries {
				return err
			}
		} else if attempt >= pgMaxAttempts {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		d := min(500*time.Microsecond<<min(attempt, 6), 20*time.Millisecond)
		t := time.NewTimer(d/2 + rand.N(d/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

var (
	pgSerializable  = pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadWrite}
	pgSnapshot      = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	pgReadCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}
)

// attempt runs fn once in a transaction. again reports whether the whole
// transaction may be tried again: a serialization failure or deadlock, or
// a connection lost before the commit.
func (s *Postgres) attempt(ctx context.Context, mode pgMode, locks []int64, fn func(Tx) error) (again bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, s.wrap(ctx, err, true)
	}
	released := false
	defer func() {
		if !released {
			conn.Release()
		}
	}()
	readOnly := mode == pgView
	opts := pgSerializable
	switch mode {
	case pgView:
		opts = pgSnapshot
	case pgLocked:
		opts = pgReadCommitted
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		return s.failed(ctx, conn, err, true, true)
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		tx.Rollback(rctx)
		cancel()
	}
	if len(locks) > 0 {
		// One statement takes every lock, in the array's (sorted) order.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(l) FROM unnest($1::bigint[]) AS l", locks); err != nil {
			rollback()
			return s.failed(ctx, conn, err, true, false)
		}
	}
	kv := &pgKV{ctx: ctx, tx: tx, readOnly: readOnly}
	var dirty atomic.Bool
	var rtx Tx = &btx{kv: kv}
	if s.coh != nil && !readOnly {
		rtx = trackingTx{Tx: rtx, dirty: &dirty}
	}
	ferr := fn(rtx)
	if ferr == nil {
		kv.flush()
	}
	var gen int64
	if ferr == nil && kv.err == nil && dirty.Load() {
		// The fleet's cache generation is raised in the same transaction as
		// the write it announces, so that no node can miss one without
		// missing the other; NOTIFY is delivered at the commit.
		if err := tx.QueryRow(ctx, coherenceBump).Scan(&gen); err != nil {
			kv.fail(err)
		}
	}
	if kv.err != nil || ferr != nil {
		rollback()
		if kv.err != nil {
			// A statement failed, so the transaction is aborted whatever fn
			// made of the error.
			return s.failed(ctx, conn, kv.err, true, false)
		}
		return false, ferr
	}
	if err := tx.Commit(ctx); err != nil {
		// A serialization failure at commit is retried; a connection lost
		// during the commit is not (the commit may have happened).
		if dirty.Load() {
			s.coh.drop() // whatever happened, nothing cached may outlive it
		}
		return s.failed(ctx, conn, err, false, false)
	}
	if dirty.Load() {
		conn.Release()
		released = true
		s.coh.published(ctx, gen)
	}
	return false, nil
}

// failed classifies an error of a transaction on conn; connecting says it
// happened while beginning the transaction.
func (s *Postgres) failed(ctx context.Context, conn *pgxpool.Conn, err error, beforeCommit, connecting bool) (again bool, _ error) {
	if isRetryable(err) {
		return true, err
	}
	if ctx.Err() != nil {
		// The caller's deadline or cancellation (pgx closes a connection
		// whose query it interrupts): not a sign that the server is gone.
		return false, s.wrap(ctx, err, connecting)
	}
	if conn.Conn().IsClosed() || isConnectionError(err) {
		// The other idle connections most likely went with this one (a
		// restart of the server): replace them all.
		s.pool.Reset()
		return beforeCommit, s.wrap(ctx, err, true)
	}
	return false, s.wrap(ctx, err, false)
}

// wrap turns errors of an unreachable database into unavailableError and
// errors of a closed store into ErrClosed. connecting says the error
// happened while reaching the database, where a deadline means it is
// unreachable.
func (s *Postgres) wrap(ctx context.Context, err error, connecting bool) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return err // the caller went away
	}
	if isConnectionError(err) || (connecting && pgconn.Timeout(err)) {
		return &unavailableError{err: err}
	}
	return err
}

// isRetryable reports a serialization failure or a deadlock: the
// transaction was rolled back and may simply be run again.
func isRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// isConnectionError reports an error that means the database cannot be
// reached or went away.
func isConnectionError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", // admin shutdown, crash shutdown, cannot connect now
			pe.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}

// unavailableError is an error of an unreachable database. It reports
// itself as a temporary unavailability (503 on the wire).
type unavailableError struct{ err error }

func (e *unavailableError) Error() string {
	return "store: PostgreSQL is not available: " + e.err.Error()
}
func (e *unavailableError) Unwrap() error     { return e.err }
func (e *unavailableError) Unavailable() bool { return true }

// pgKV is kvTxn over a PostgreSQL transaction. Writes are queued and sent
// together, in one round trip, before the next read or the commit: a
// transaction that writes many records (a batch of usage records) costs
// a few round trips, not one per record. The first failed statement is
// kept: the transaction is aborted from then on, whatever the record
// logic does with the error.
type pgKV struct {
	ctx      context.Context
	tx       pgx.Tx
	readOnly bool
	err      error
	writes   pgx.Batch
}

func (k *pgKV) fail(err error) error {
	if k.err == nil {
		k.err = err
	}
	return err
}

// flush sends the queued writes. A unique violation (an Insert of a taken
// key) is ErrExists.
func (k *pgKV) flush() error {
	if k.err != nil {
		return k.err
	}
	n := k.writes.Len()
	if n == 0 {
		return nil
	}
	b := k.writes
	k.writes = pgx.Batch{}
	br := k.tx.SendBatch(k.ctx, &b)
	var err error
	for range n {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			err = fmt.Errorf("record %w", ErrExists)
		}
		return k.fail(err)
	}
	return nil
}

func (k *pgKV) Get(key string, fn func([]byte) error) error {
	if err := k.flush(); err != nil {
		return err
	}
	var v []byte
	var err error
	if fn == nil {
		var one int
		err = k.tx.QueryRow(k.ctx, `SELECT 1 FROM agentgate_kv WHERE k = $1`, []byte(key)).Scan(&one)
	} else {
		err = k.tx.QueryRow(k.ctx, `SELECT v FROM agentgate_kv WHERE k = $1`, []byte(key)).Scan(&v)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return k.fail(err)
	}
	if fn == nil {
		return nil
	}
	return fn(v)
}

func (k *pgKV) Set(key string, value []byte) error {
	if k.readOnly {
		return errReadOnly
	}
	if k.err != nil {
		return k.err
	}
	if value == nil {
		value = []byte{} // NOT NULL: an empty value, not SQL NULL
	}
	k.writes.Queue(`INSERT INTO agentgate_kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, []byte(key), value)
	return nil
}

// Insert implements kvInserter: the key must not exist. The check is the
// table's primary key, made when the queued writes are sent: a taken key
// fails the transaction with ErrExists.
func (k *pgKV) Insert(key string, value []byte) error {
	if k.readOnly {
		return errReadOnly
	}
	if k.err != nil {
		return k.err
	}
	k.writes.Queue(`INSERT INTO agentgate_kv (k, v) VALUES ($1, $2)`, []byte(key), value)
	return nil
}

func (k *pgKV) Delete(key string) error {
	if k.readOnly {
		return errReadOnly
	}
	if k.err != nil {
		return k.err
	}
	k.writes.Queue(`DELETE FROM agentgate_kv WHERE k = $1`, []byte(key))
	return nil
}

// Page sizes of Iterate: a first page fits a typical list, later ones grow.
const (
	pgFirstPage = 100
	pgMaxPage   = 1000
)

type pgRow struct{ k, v []byte }

// Iterate reads the range a page at a time (WHERE k ≥ lo AND k < hi ORDER
// BY k LIMIT n, then after the last key) and calls fn for a whole page
// after reading it, so fn may query the same transaction.
func (k *pgKV) Iterate(r kvRange, fn func(key, value []byte) (bool, error)) error {
	if err := k.flush(); err != nil {
		return err
	}
	prefix := []byte(r.Prefix)
	end := prefixEnd(prefix)
	cols := "k, v"
	if r.KeysOnly {
		cols = "k"
	}
	order := "ASC"
	if r.Reverse {
		order = "DESC"
	}
	// The first page starts at Start (inclusive) or at the range's edge;
	// later pages continue strictly after the last key.
	var from []byte
	inclusive := true
	switch {
	case r.Start != "":
		from = []byte(r.Start)
	case !r.Reverse:
		from = prefix
	}
	page := pgFirstPage
	for {
		var conds []string
		var args []any
		arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
		if !r.Reverse {
			op := ">"
			if inclusive {
				op = ">="
			}
			if len(from) > 0 {
				conds = append(conds, "k "+op+" "+arg(from))
			}
			if end != nil {
				conds = append(conds, "k < "+arg(end))
			}
		} else {
			if len(prefix) > 0 {
				conds = append(conds, "k >= "+arg(prefix))
			}
			switch {
			case from != nil && inclusive:
				conds = append(conds, "k <= "+arg(from))
			case from != nil:
				conds = append(conds, "k < "+arg(from))
			case end != nil:
				conds = append(conds, "k < "+arg(end))
			}
		}
		where := ""
		if len(conds) > 0 {
			where = " WHERE " + strings.Join(conds, " AND ")
		}
		sql := "SELECT " + cols + " FROM agentgate_kv" + where + " ORDER BY k " + order + " LIMIT " + arg(page)
		rows, err := k.tx.Query(k.ctx, sql, args...)
		if err != nil {
			return k.fail(err)
		}
		var buf []pgRow
		for rows.Next() {
			var row pgRow
			if r.KeysOnly {
				err = rows.Scan(&row.k)
			} else {
				err = rows.Scan(&row.k, &row.v)
			}
			if err != nil {
				rows.Close()
				return k.fail(err)
			}
			buf = append(buf, row)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return k.fail(err)
		}
		for _, row := range buf {
			more, err := fn(row.k, row.v)
			if err != nil || !more {
				return err
			}
		}
		if len(buf) < page {
			return nil
		}
		from, inclusive = buf[len(buf)-1].k, false
		page = min(page*2, pgMaxPage)
	}
}

// Interface guards
var (
	_ Store      = (*Postgres)(nil)
	_ kvTxn      = (*pgKV)(nil)
	_ kvInserter = (*pgKV)(nil)
)

// PostgresTarget describes the server and database of a DSN for logs:
// "host:port/database", without user or password ("" when unparsable).
func PostgresTarget(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

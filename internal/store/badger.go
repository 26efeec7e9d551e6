package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// BadgerOptions configure the embedded store.
type BadgerOptions struct {
	// Dir is the data directory. It is created with mode 0700.
	Dir string
	// Logger receives Badger's own messages. Nil means no logging.
	Logger *zap.Logger
	// GCInterval is how often value-log garbage collection runs; 0 means 5 minutes.
	GCInterval time.Duration
	// InMemory keeps everything in memory (tests of code above the store only).
	InMemory bool
}

// Badger is the embedded Store. It is safe for concurrent use.
type Badger struct {
	db   *badger.DB
	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
	// active counts the transactions in flight; closing, once set, turns
	// new ones away (ErrClosed), and Close waits for active to reach zero
	// before it closes the database under them (Badger panics on an
	// iterator of a closed database).
	active  atomic.Int64
	closing atomic.Bool
}

// OpenBadger opens (creating if needed) a Badger store in opts.Dir, checks
// the schema version, and starts value-log GC for the store's lifetime.
func OpenBadger(opts BadgerOptions) (*Badger, error) {
	bo := badger.DefaultOptions(opts.Dir).
		WithSyncWrites(true). // credentials and money: durable before acknowledged
		WithLogger(badgerLogger{opts.Logger}).
		WithMemTableSize(16 << 20).
		WithNumMemtables(3).
		WithBlockCacheSize(32 << 20).
		WithValueLogFileSize(128 << 20).
		WithNumCompactors(2).
		WithCompactL0OnClose(false)
	if opts.InMemory {
		bo = bo.WithInMemory(true).WithDir("").WithValueDir("")
	} else {
		if err := checkWritableDir(opts.Dir); err != nil {
			return nil, err
		}
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("opening store in %s: %w", opts.Dir, err)
	}
	s := &Badger{db: db, stop: make(chan struct{})}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, err
	}
	interval := opts.GCInterval
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	if !opts.InMemory {
		s.done.Add(1)
		go s.gcLoop(interval)
	}
	return s, nil
}

// checkWritableDir creates dir with mode 0700 and proves it writable, so that
// a bad data directory is a clear start-up error rather than a failure deep
// inside Badger.
func checkWritableDir(dir string) error {
	if dir == "" {
		return errors.New("store: no data directory given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory %s cannot be created: %w", dir, err)
	}
	probe := filepath.Join(dir, ".agentgate-write-test")
	f, err := os.OpenFile(probe, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("data directory %s is not writable: %w", dir, err)
	}
	f.Close()
	return os.Remove(probe)
}

func (s *Badger) gcLoop(every time.Duration) {
	defer s.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			for s.db.RunValueLogGC(0.5) == nil {
				select {
				case <-s.stop:
					return
				default:
				}
			}
		}
	}
}

// migrate records the schema version of a new store and refuses one written
// by a newer build (checkSchemaVersion). Future layout changes add steps here.
func (s *Badger) migrate() error { return checkSchemaVersion(s) }

// Close stops GC, turns new transactions away, waits for those in flight
// (a transaction begun inside another one's fn is turned away too, so the
// outer one can end), and closes the database. It is safe to call more
// than once, and from several goroutines: each returns once it is closed.
func (s *Badger) Close() error {
	var err error
	s.once.Do(func() {
		s.closing.Store(true)
		close(s.stop)
		s.done.Wait()
		for s.active.Load() != 0 {
			time.Sleep(time.Millisecond)
		}
		err = s.db.Close()
	})
	return err
}

// enter admits a transaction unless the store is closing; an admitted
// one calls leave when it ends.
func (s *Badger) enter() bool {
	s.active.Add(1)
	if s.closing.Load() {
		s.active.Add(-1)
		return false
	}
	return true
}

func (s *Badger) leave() { s.active.Add(-1) }

// View implements Store.
func (s *Badger) View(ctx context.Context, fn func(Tx) error) error {
	if !s.enter() {
		return ErrClosed
	}
	defer s.leave()
	err := s.db.View(func(txn *badger.Txn) error { return fn(&btx{kv: badgerKV{txn}}) })
	if errors.Is(err, badger.ErrDBClosed) {
		return ErrClosed
	}
	return err
}

// Update implements Store.
func (s *Badger) Update(ctx context.Context, fn func(Tx) error) error {
	// Under heavy contention one writer wins each round, so a writer may lose
	// many rounds: retry generously, with jittered exponential backoff
	// (capped at 10ms) so that the contenders spread out.
	const maxAttempts = 200
	for attempt := 0; ; attempt++ {
		if !s.enter() {
			return ErrClosed
		}
		err := s.db.Update(func(txn *badger.Txn) error { return fn(&btx{kv: badgerKV{txn}}) })
		s.leave()
		if !errors.Is(err, badger.ErrConflict) || attempt == maxAttempts {
			if errors.Is(err, badger.ErrDBClosed) {
				return ErrClosed
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		d := min(100*time.Microsecond<<min(attempt, 7), 10*time.Millisecond)
		time.Sleep(d/2 + rand.N(d/2+1))
	}
}

// Shared reports whether several processes share the store: a Badger
// directory belongs to one process.
func (*Badger) Shared() bool { return false }

// badgerKV is kvTxn over a Badger transaction.
type badgerKV struct{ txn *badger.Txn }

func (b badgerKV) Get(key string, fn func([]byte) error) error {
	item, err := b.txn.Get([]byte(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil || fn == nil {
		return err
	}
	return item.Value(fn)
}

func (b badgerKV) Set(key string, value []byte) error { return b.txn.Set([]byte(key), value) }

func (b badgerKV) Delete(key string) error { return b.txn.Delete([]byte(key)) }

func (b badgerKV) Iterate(r kvRange, fn func(key, value []byte) (bool, error)) error {
	prefix := []byte(r.Prefix)
	opts := badger.IteratorOptions{Reverse: r.Reverse, PrefetchValues: !r.KeysOnly, PrefetchSize: 100}
	seek := []byte(r.Start)
	if !r.Reverse {
		// Forward, Badger's prefix option also skips tables without the prefix.
		opts.Prefix = prefix
		if len(seek) == 0 {
			seek = prefix
		}
	} else if len(seek) == 0 {
		// In reverse, Seek finds the last key ≤ the seek key: start at the
		// end of the prefix range and skip that end key itself if it exists.
		seek = prefixEnd(prefix)
	}
	it := b.txn.NewIterator(opts)
	defer it.Close()
	it.Seek(seek)
	if r.Reverse && r.Start == "" && seek != nil && it.Valid() && bytes.Equal(it.Item().Key(), seek) {
		it.Next()
	}
	for ; it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		var more bool
		var err error
		if r.KeysOnly {
			more, err = fn(item.Key(), nil)
		} else {
			err = item.Value(func(v []byte) error {
				more, err = fn(item.Key(), v)
				return err
			})
		}
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// badgerLogger sends Badger's messages to zap; Badger's info chatter goes to debug.
type badgerLogger struct{ l *zap.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	if b.l != nil {
		b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}

func (b badgerLogger) Warningf(f string, a ...any) {
	if b.l != nil {
		b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}

func (b badgerLogger) Infof(f string, a ...any) {
	if b.l != nil {
		b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}

func (b badgerLogger) Debugf(f string, a ...any) {
	if b.l != nil {
		b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}

// Interface guards
var (
	_ Store = (*Badger)(nil)
	_ Tx    = (*btx)(nil)
)

package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
// by a newer build. Future layout changes add steps here.
func (s *Badger) migrate() error {
	return s.Update(context.Background(), func(tx Tx) error {
		v, err := tx.Meta("schema_version")
		if errors.Is(err, ErrNotFound) {
			return tx.PutMeta("schema_version", []byte(strconv.Itoa(SchemaVersion)))
		}
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return fmt.Errorf("store: bad schema version %q", v)
		}
		if n > SchemaVersion {
			return fmt.Errorf("store: data was written by a newer agentgate (schema %d, this build reads up to %d)", n, SchemaVersion)
		}
		// n < SchemaVersion: no older layouts exist yet.
		return nil
	})
}

// Close stops GC and closes the database. It is safe to call more than once.
func (s *Badger) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.done.Wait()
		err = s.db.Close()
	})
	return err
}

// View implements Store.
func (s *Badger) View(ctx context.Context, fn func(Tx) error) error {
	if s.db.IsClosed() {
		return ErrClosed
	}
	err := s.db.View(func(txn *badger.Txn) error { return fn(&btx{txn: txn}) })
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
		if s.db.IsClosed() {
			return ErrClosed
		}
		err := s.db.Update(func(txn *badger.Txn) error { return fn(&btx{txn: txn}) })
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

// Key layout: one prefix per record kind; "i…/" prefixes are secondary
// indexes whose keys end in the indexed record's id and whose values are empty.
const (
	pMeta      = "m/"
	pWorkspace = "w/"
	pPerson    = "p/"
	pEmail     = "ip/email/" // email → person id (value)
	pMember    = "mb/"       // mb/<ws>/<person>
	pPersonWS  = "ipm/"      // ipm/<person>/<ws>
	pSA        = "sa/"
	pWSSA      = "isa/" // isa/<ws>/<sa>
	pKey       = "k/"
	pSAKey     = "ik/" // ik/<sa>/<key>
	pConn      = "c/"
	pWSConn    = "ic/" // ic/<ws>/<conn>
	pFamily    = "tf/"
	pPersonTF  = "itf/" // itf/<person>/<family>
	pToken     = "t/"
	pBudget    = "b/" // b/<ws>/<member>
	pDevice    = "dg/"
	pUserCode  = "idg/" // idg/<user code mac> → device grant id (value)
	pUsage     = "u/"   // u/<ws>/<usage id>
)

type btx struct{ txn *badger.Txn }

func (t *btx) get(key string, v any) error {
	item, err := t.txn.Get([]byte(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return item.Value(func(b []byte) error { return json.Unmarshal(b, v) })
}

func (t *btx) exists(key string) (bool, error) {
	_, err := t.txn.Get([]byte(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (t *btx) put(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return t.txn.Set([]byte(key), b)
}

func (t *btx) setIndex(key string) error { return t.txn.Set([]byte(key), nil) }

func (t *btx) del(key string) error { return t.txn.Delete([]byte(key)) }

// suffixes lists the last path part of every key under prefix.
func (t *btx) suffixes(prefix string) []string {
	it := t.txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
	defer it.Close()
	var out []string
	for it.Rewind(); it.Valid(); it.Next() {
		out = append(out, string(it.Item().Key()[len(prefix):]))
	}
	return out
}

func listBy[T any](t *btx, indexPrefix, recordPrefix string) ([]*T, error) {
	var out []*T
	for _, id := range t.suffixes(indexPrefix) {
		v := new(T)
		if err := t.get(recordPrefix+id, v); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // an index entry whose record is gone: skip
			}
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// scanAll decodes every record stored under prefix, in key order.
func scanAll[T any](t *btx, prefix string) ([]*T, error) {
	var out []*T
	it := t.txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		v := new(T)
		if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, v) }); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func getAs[T any](t *btx, key string) (*T, error) {
	v := new(T)
	if err := t.get(key, v); err != nil {
		return nil, err
	}
	return v, nil
}

func (t *btx) Workspace(id string) (*Workspace, error) { return getAs[Workspace](t, pWorkspace+id) }

func (t *btx) Workspaces() ([]*Workspace, error) { return scanAll[Workspace](t, pWorkspace) }

func (t *btx) PutWorkspace(w *Workspace) error { return t.put(pWorkspace+w.ID, w) }

func (t *btx) Person(id string) (*Person, error) { return getAs[Person](t, pPerson+id) }

// FoldEmail is the canonical form of an email address for uniqueness.
func FoldEmail(e string) string { return strings.ToLower(strings.TrimSpace(e)) }

func (t *btx) PersonByEmail(email string) (*Person, error) {
	item, err := t.txn.Get([]byte(pEmail + FoldEmail(email)))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	id, err := item.ValueCopy(nil)
	if err != nil {
		return nil, err
	}
	return t.Person(string(id))
}

func (t *btx) PutPerson(p *Person) error {
	p.Email = FoldEmail(p.Email)
	if other, err := t.PersonByEmail(p.Email); err == nil && other.ID != p.ID {
		return fmt.Errorf("email %w", ErrExists)
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if old, err := t.Person(p.ID); err == nil && old.Email != p.Email {
		if err := t.del(pEmail + old.Email); err != nil {
			return err
		}
	}
	if err := t.txn.Set([]byte(pEmail+p.Email), []byte(p.ID)); err != nil {
		return err
	}
	return t.put(pPerson+p.ID, p)
}

func (t *btx) Member(ws, person string) (*Member, error) {
	return getAs[Member](t, pMember+ws+"/"+person)
}

func (t *btx) Members(ws string) ([]*Member, error) { return scanAll[Member](t, pMember+ws+"/") }

func (t *btx) Memberships(person string) ([]*Member, error) {
	var out []*Member
	for _, ws := range t.suffixes(pPersonWS + person + "/") {
		m, err := t.Member(ws, person)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (t *btx) PutMember(m *Member) error {
	if err := t.setIndex(pPersonWS + m.PersonID + "/" + m.Workspace); err != nil {
		return err
	}
	return t.put(pMember+m.Workspace+"/"+m.PersonID, m)
}

func (t *btx) DeleteMember(ws, person string) error {
	if err := t.del(pPersonWS + person + "/" + ws); err != nil {
		return err
	}
	return t.del(pMember + ws + "/" + person)
}

func (t *btx) ServiceAccount(id string) (*ServiceAccount, error) {
	return getAs[ServiceAccount](t, pSA+id)
}

func (t *btx) ServiceAccounts(ws string) ([]*ServiceAccount, error) {
	return listBy[ServiceAccount](t, pWSSA+ws+"/", pSA)
}

func (t *btx) PutServiceAccount(sa *ServiceAccount) error {
	if err := t.setIndex(pWSSA + sa.Workspace + "/" + sa.ID); err != nil {
		return err
	}
	return t.put(pSA+sa.ID, sa)
}

func (t *btx) DeleteServiceAccount(id string) error {
	sa, err := t.ServiceAccount(id)
	if err != nil {
		return err
	}
	if err := t.del(pWSSA + sa.Workspace + "/" + id); err != nil {
		return err
	}
	return t.del(pSA + id)
}

func (t *btx) APIKey(id string) (*APIKey, error) { return getAs[APIKey](t, pKey+id) }

func (t *btx) APIKeys(sa string) ([]*APIKey, error) { return listBy[APIKey](t, pSAKey+sa+"/", pKey) }

func (t *btx) PutAPIKey(k *APIKey, create bool) error {
	if create {
		if ok, err := t.exists(pKey + k.ID); err != nil || ok {
			return errors.Join(err, fmt.Errorf("key id %w", ErrExists))
		}
	}
	if err := t.setIndex(pSAKey + k.ServiceAccount + "/" + k.ID); err != nil {
		return err
	}
	return t.put(pKey+k.ID, k)
}

func (t *btx) Connection(id string) (*Connection, error) { return getAs[Connection](t, pConn+id) }

func (t *btx) Connections(ws string) ([]*Connection, error) {
	return listBy[Connection](t, pWSConn+ws+"/", pConn)
}

func (t *btx) PutConnection(c *Connection, create bool) error {
	old, err := t.Connection(c.ID)
	switch {
	case err == nil && create:
		return fmt.Errorf("connection %s %w", c.ID, ErrExists)
	case err == nil && old.Workspace != c.Workspace:
		if err := t.del(pWSConn + old.Workspace + "/" + c.ID); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, ErrNotFound):
		return err
	}
	if err := t.setIndex(pWSConn + c.Workspace + "/" + c.ID); err != nil {
		return err
	}
	return t.put(pConn+c.ID, c)
}

func (t *btx) DeleteConnection(id string) error {
	c, err := t.Connection(id)
	if err != nil {
		return err
	}
	if err := t.del(pWSConn + c.Workspace + "/" + id); err != nil {
		return err
	}
	return t.del(pConn + id)
}

func (t *btx) TokenFamily(id string) (*TokenFamily, error) { return getAs[TokenFamily](t, pFamily+id) }

func (t *btx) TokenFamilies(person string) ([]*TokenFamily, error) {
	return listBy[TokenFamily](t, pPersonTF+person+"/", pFamily)
}

func (t *btx) PutTokenFamily(f *TokenFamily) error {
	if err := t.setIndex(pPersonTF + f.PersonID + "/" + f.ID); err != nil {
		return err
	}
	return t.put(pFamily+f.ID, f)
}

func (t *btx) Token(id string) (*Token, error) { return getAs[Token](t, pToken+id) }

func (t *btx) PutToken(tok *Token, create bool) error {
	if create {
		if ok, err := t.exists(pToken + tok.ID); err != nil || ok {
			return errors.Join(err, fmt.Errorf("token id %w", ErrExists))
		}
	}
	return t.put(pToken+tok.ID, tok)
}

func (t *btx) DeviceGrant(id string) (*DeviceGrant, error) { return getAs[DeviceGrant](t, pDevice+id) }

func (t *btx) DeviceGrantByUserCode(mac string) (*DeviceGrant, error) {
	item, err := t.txn.Get([]byte(pUserCode + mac))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	id, err := item.ValueCopy(nil)
	if err != nil {
		return nil, err
	}
	return t.DeviceGrant(string(id))
}

func (t *btx) PutDeviceGrant(g *DeviceGrant, create bool) error {
	if create {
		for _, k := range []string{pDevice + g.ID, pUserCode + g.UserCodeMAC} {
			if ok, err := t.exists(k); err != nil || ok {
				return errors.Join(err, fmt.Errorf("device grant %w", ErrExists))
			}
		}
		if err := t.txn.Set([]byte(pUserCode+g.UserCodeMAC), []byte(g.ID)); err != nil {
			return err
		}
	}
	return t.put(pDevice+g.ID, g)
}

func (t *btx) Budget(ws, member string) (*Budget, error) {
	return getAs[Budget](t, pBudget+ws+"/"+member)
}

func (t *btx) Budgets(ws string) ([]*Budget, error) { return scanAll[Budget](t, pBudget+ws+"/") }

func (t *btx) PutBudget(b *Budget) error { return t.put(pBudget+b.Workspace+"/"+b.MemberID, b) }

func (t *btx) DeleteBudget(ws, member string) error { return t.del(pBudget + ws + "/" + member) }

func (t *btx) PutUsage(u *UsageRecord) error {
	key := pUsage + u.Workspace + "/" + u.ID
	if ok, err := t.exists(key); err != nil || ok {
		return errors.Join(err, fmt.Errorf("usage record %w", ErrExists))
	}
	return t.put(key, u)
}

func (t *btx) Usage(ws, after string, fn func(*UsageRecord) (bool, error)) error {
	prefix := pUsage + ws + "/"
	it := t.txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true, PrefetchSize: 100})
	defer it.Close()
	start := []byte(prefix + after)
	for it.Seek(start); it.Valid(); it.Next() {
		item := it.Item()
		if after != "" && string(item.Key()) == string(start) {
			continue
		}
		u := new(UsageRecord)
		if err := item.Value(func(v []byte) error { return json.Unmarshal(v, u) }); err != nil {
			return err
		}
		more, err := fn(u)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t *btx) Meta(name string) ([]byte, error) {
	item, err := t.txn.Get([]byte(pMeta + name))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

func (t *btx) PutMeta(name string, value []byte) error { return t.txn.Set([]byte(pMeta+name), value) }

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

package service

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// generational is a store that counts committed writes to the records
// behind authentication and routing: store.Tracked (one process writes
// it), or a coherent PostgreSQL store (every node's writes reach every
// node before the writing call returns). Only such a store lets the hot
// path cache what it reads, and only while it says so.
type generational interface{ CacheGeneration() (uint64, bool) }

// hotCache keeps what the gateway's hot path derives from the store: the
// verdict of a credential and the connection it routes to. An entry is
// trusted only while the store's generation is the one it was read under,
// so any write to a key, token, family, person, member, service account,
// workspace or connection drops every entry before the writing call
// returns: revocation takes effect on the very next request. Failed
// verdicts are never cached, so an unknown credential always goes to the
// store (and costs what it costs without the cache).
//
// A store without a generation, or one that cannot vouch for it now (a
// node of a fleet that lost its listening connection), gets no cache at
// all: every request reads the store.
type hotCache struct {
	creds    sync.Map // credential id (+ "\x00" + x-org-id for tokens) → *credEntry
	conns    sync.Map // connection id → *connEntry
	routes   sync.Map // workspace + "\x00" + workspace model id → *routeEntry
	policies sync.Map // workspace → *policyEntry
}

type policyEntry struct {
	gen  uint64
	list []*store.Policy // shared, read-only
}

type routeEntry struct {
	gen   uint64
	route *Route // shared, read-only
}

// credEntry is a verified credential: the MAC its secret must match, until
// when it may be used, and the principal it resolves to.
type credEntry struct {
	gen      uint64
	mac      []byte
	notAfter time.Time // zero: no expiry
	p        Principal
	lastUsed atomic.Int64 // unix nanos of the key's last_used_at as last written (keys only)
}

type connEntry struct {
	gen  uint64
	ws   string
	conn *store.Connection // shared, read-only
	cred atomic.Pointer[string]
}

// gen returns the store's generation, and false when the store has none.
func (s *Service) gen() (uint64, bool) {
	g, ok := s.Store.(generational)
	if !ok {
		return 0, false
	}
	return g.CacheGeneration()
}

// cachedCred returns the cached verdict of a credential, or nil.
func (s *Service) cachedCred(id string) *credEntry {
	g, ok := s.gen()
	if !ok {
		return nil
	}
	v, ok := s.hot.creds.Load(id)
	if !ok {
		return nil
	}
	e := v.(*credEntry)
	if e.gen != g {
		return nil
	}
	return e
}

func (e *credEntry) valid(mac []byte, now time.Time) bool {
	return secrets.Equal(e.mac, mac) && (e.notAfter.IsZero() || now.Before(e.notAfter))
}

// cachedConn returns a cached connection of the workspace, or nil.
func (s *Service) cachedConn(ws, id string) *connEntry {
	g, ok := s.gen()
	if !ok {
		return nil
	}
	v, ok := s.hot.conns.Load(id)
	if !ok {
		return nil
	}
	e := v.(*connEntry)
	if e.gen != g || e.ws != ws {
		return nil
	}
	return e
}

// cachedRoute returns a cached route of a workspace model, or nil.
func (s *Service) cachedRoute(ws, id string) *Route {
	g, ok := s.gen()
	if !ok {
		return nil
	}
	v, ok := s.hot.routes.Load(ws + "\x00" + id)
	if !ok {
		return nil
	}
	e := v.(*routeEntry)
	if e.gen != g {
		return nil
	}
	return e.route
}

// shareConns makes a route's connections the cached ones, so that their
// decrypted credentials are cached too (Credential), caching those not yet
// cached.
func (s *Service) shareConns(gen uint64, ws string, r *Route) {
	for i := range r.Targets {
		c := r.Targets[i].Conn
		if e := s.cachedConn(ws, c.ID); e != nil {
			r.Targets[i].Conn = e.conn
			continue
		}
		s.hot.conns.Store(c.ID, &connEntry{gen: gen, ws: ws, conn: c})
	}
}

// minTime returns the earlier of two optional instants (zero: none).
func minTime(a time.Time, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case b.Before(a):
		return b
	}
	return a
}

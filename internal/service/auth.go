package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// Kind is the kind of credential behind a principal.
type Kind int

// Principal kinds.
const (
	KindServiceKey Kind = iota + 1 // a service-account API key
	KindPerson                     // a person (access token or web session)
	KindOperator                   // the operator, through Caddy's admin API
)

func (k Kind) String() string {
	switch k {
	case KindServiceKey:
		return "service_key"
	case KindPerson:
		return "person"
	case KindOperator:
		return "operator"
	}
	return "unknown"
}

// Principal is who a request acts as, within one resolved workspace.
type Principal struct {
	Kind      Kind
	Workspace string

	// Service-account keys.
	KeyID          string
	ServiceAccount string
	Permission     string
	// Instance is set (and KeyID empty) when the service account is an
	// instance server's member, calling the gateway in-process.
	Instance string

	// People.
	PersonID string
	FamilyID string
	Role     string
}

// MemberID is the budget member the principal spends as: the person, or the
// service account of a key.
func (p *Principal) MemberID() string {
	if p.Kind == KindServiceKey {
		return p.ServiceAccount
	}
	return p.PersonID
}

// Actor names the principal in created_by fields.
func (p *Principal) Actor() string {
	switch p.Kind {
	case KindServiceKey:
		return "key:" + p.KeyID
	case KindPerson:
		return p.PersonID
	}
	return "operator"
}

// Operator is the principal of the operator's admin API for a workspace.
func Operator(workspace string) *Principal {
	return &Principal{Kind: KindOperator, Workspace: workspace}
}

// BearerToken returns the token of an "Authorization: Bearer" header.
func BearerToken(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// The Console web's session cookie: __Host-ag_session on HTTPS (the prefix
// pins it to the host, path / and Secure), ag_session on plain HTTP.
const (
	SessionCookieTLS   = "__Host-ag_session"
	SessionCookiePlain = "ag_session"
)

// maxSessionCookies bounds the session cookies CheckSessionCookies looks
// up for one request; a request with more is refused.
const maxSessionCookies = 4

// CheckSessionCookies refuses, with 400 AmbiguousCredential, a request
// whose bearer credential resolved to p while a session cookie it also
// carries is the live session of someone else: a person's session agrees
// with a token of that same person only, and with no service-account key.
// A cookie that is no live session (malformed, expired, signed out) names
// nobody and is ignored, as browsers keep stale ones. Without a Cookie
// header it costs nothing. The bearer credential alone still decides who
// the request acts as.
func (s *Service) CheckSessionCookies(ctx context.Context, p *Principal, r *http.Request) error {
	if len(r.Header["Cookie"]) == 0 {
		return nil
	}
	n := 0
	for _, name := range [...]string{SessionCookieTLS, SessionCookiePlain} {
		for _, c := range r.CookiesNamed(name) {
			if c.Value == "" {
				continue
			}
			if n++; n > maxSessionCookies {
				return apierr.AmbiguousCredential("the request carries too many session cookies")
			}
			sess, err := s.LookupSession(ctx, c.Value)
			if err != nil {
				if apierr.As(err).Status == http.StatusUnauthorized {
					continue
				}
				return err
			}
			if p.Kind != KindPerson || p.PersonID != sess.Person.ID {
				return apierr.AmbiguousCredential("the bearer credential and the session cookie belong to different principals; send one")
			}
		}
	}
	return nil
}

// ConsoleBearer returns the bearer token of a Console request, and whether
// its Authorization header is repeated with another bearer token
// (compared in constant time): such a request is ambiguous. A repeated
// header with the same token is one credential.
func ConsoleBearer(h http.Header) (token string, conflict bool) {
	vs := h["Authorization"]
	for _, v := range vs {
		if len(v) <= 7 || !strings.EqualFold(v[:7], "bearer ") {
			continue
		}
		t := strings.TrimSpace(v[7:])
		switch {
		case t == "":
		case token == "":
			token = t
		case !formats.SameCredential(token, t):
			conflict = true
		}
	}
	return token, conflict
}

// lastUsedEvery bounds how often a key's last_used_at is written.
const lastUsedEvery = time.Minute

// Authenticate resolves a credential and the x-org-id header to a principal
// in one workspace. Errors: 401 Unauthorized (missing, malformed, unknown,
// expired or revoked credential), 400 OrgRequired, 403 Forbidden (another
// workspace, not a member), 404 WorkspaceNotFound. A malformed credential is
// rejected without touching the store. Revocation and expiry take effect on
// the very next request: a verdict is cached only over a store that drops
// it on every write to the records behind it (see hotCache).
func (s *Service) Authenticate(ctx context.Context, credential, orgID string) (*Principal, error) {
	tok, ok := secrets.ParseToken(credential)
	if !ok {
		return nil, apierr.Unauthorized()
	}
	switch tok.Prefix {
	case secrets.PrefixServiceKey:
		return s.authKey(ctx, tok, orgID)
	case secrets.PrefixAccessToken:
		return s.authAccessToken(ctx, tok, orgID)
	}
	return nil, apierr.Unauthorized() // refresh tokens are for the token endpoint only
}

func (s *Service) authKey(ctx context.Context, tok secrets.Token, orgID string) (*Principal, error) {
	mac := s.Secrets.MAC(tok.Secret)
	now := s.Clock.Now()
	if e := s.cachedCred(tok.ID); e != nil {
		if !e.valid(mac, now) {
			return nil, apierr.Unauthorized()
		}
		if orgID != "" && orgID != e.p.Workspace {
			return nil, apierr.Forbidden("this key belongs to another workspace than x-org-id names")
		}
		if last := e.lastUsed.Load(); last == 0 || now.Sub(time.Unix(0, last)) >= lastUsedEvery {
			s.touchKey(ctx, tok.ID, now, e)
		}
		p := e.p
		return &p, nil
	}
	gen, cacheable := s.gen()
	var p *Principal
	var key *store.APIKey
	err := s.Store.View(ctx, func(tx store.Tx) error {
		k, err := tx.APIKey(tok.ID)
		if errors.Is(err, store.ErrNotFound) {
			return apierr.Unauthorized()
		}
		if err != nil {
			return err
		}
		if !secrets.Equal(k.MAC, mac) || !k.Usable(now) {
			return apierr.Unauthorized()
		}
		if _, err := tx.ServiceAccount(k.ServiceAccount); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return apierr.Unauthorized()
			}
			return err
		}
		if orgID != "" && orgID != k.Workspace {
			return apierr.Forbidden("this key belongs to another workspace than x-org-id names")
		}
		if _, err := workspace(tx, k.Workspace); err != nil {
			return err
		}
		if err := withLastUse(tx, k); err != nil {
			return err
		}
		key = k
		p = &Principal{Kind: KindServiceKey, Workspace: k.Workspace, KeyID: k.ID, ServiceAccount: k.ServiceAccount, Permission: k.Permission}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var e *credEntry
	if cacheable {
		e = &credEntry{gen: gen, mac: key.MAC, p: *p}
		if key.ExpiresAt != nil {
			e.notAfter = *key.ExpiresAt
		}
		if key.LastUsedAt != nil {
			e.lastUsed.Store(key.LastUsedAt.UnixNano())
		}
		s.hot.creds.Store(tok.ID, e)
	}
	if key.LastUsedAt == nil || now.Sub(*key.LastUsedAt) >= lastUsedEvery {
		s.touchKey(ctx, tok.ID, now, e)
	}
	return p, nil
}

// touchKey records when a key was last used. It is approximate by design
// (at most once a minute per key) and never fails a request. The time is a
// record of its own (lastUsedMeta), not a field of the key, so that these
// writes never conflict with a revocation of the key, and a record the
// tracked generation does not count (it decides nothing about access), so
// they do not drop every cached verdict once a minute per key: the key's
// own cached entry learns the new time instead.
func (s *Service) touchKey(ctx context.Context, id string, now time.Time, e *credEntry) {
	var written time.Time
	err := s.Store.Update(context.WithoutCancel(ctx), func(tx store.Tx) error {
		last, err := keyLastUsed(tx, id)
		if err != nil {
			return err
		}
		if last != nil && now.Sub(*last) < lastUsedEvery {
			written = *last
			return nil
		}
		written = now.UTC().Truncate(time.Second)
		return tx.PutMeta(lastUsedMeta(id), []byte(written.Format(time.RFC3339)))
	})
	if err != nil {
		s.Logger.Debug("recording key use failed", zapKeyID(id), zapErr(err))
		return
	}
	if e != nil {
		e.lastUsed.Store(written.UnixNano())
	}
}

// lastUsedMeta names the record of a key's last use.
func lastUsedMeta(keyID string) string { return "key_last_used/" + keyID }

// keyLastUsed reads when a key was last used (nil: never).
func keyLastUsed(tx store.Tx, keyID string) (*time.Time, error) {
	raw, err := tx.Meta(lastUsedMeta(keyID))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339, string(raw))
	if err != nil {
		return nil, nil // unreadable: as if never used
	}
	return &t, nil
}

// withLastUse fills a key's LastUsedAt from its last-use record.
func withLastUse(tx store.Tx, k *store.APIKey) error {
	last, err := keyLastUsed(tx, k.ID)
	if err != nil {
		return err
	}
	if last != nil && (k.LastUsedAt == nil || last.After(*k.LastUsedAt)) {
		k.LastUsedAt = last
	}
	return nil
}

func (s *Service) authAccessToken(ctx context.Context, tok secrets.Token, orgID string) (*Principal, error) {
	mac := s.Secrets.MAC(tok.Secret)
	now := s.Clock.Now()
	cacheID := tok.ID + "\x00" + orgID
	if e := s.cachedCred(cacheID); e != nil {
		if !e.valid(mac, now) {
			return nil, apierr.Unauthorized()
		}
		p := e.p
		return &p, nil
	}
	gen, cacheable := s.gen()
	var p *Principal
	var notAfter time.Time
	var tokenMAC []byte
	err := s.Store.View(ctx, func(tx store.Tx) error {
		t, f, person, err := liveAccess(tx, tok, mac, now)
		if err != nil {
			return err
		}
		ws := f.Workspace
		switch {
		case ws != "" && orgID != "" && orgID != ws:
			return apierr.Forbidden("this token is bound to another workspace than x-org-id names")
		case ws == "" && orgID == "":
			return apierr.OrgRequired()
		case ws == "":
			ws = orgID
		}
		if _, err := workspace(tx, ws); err != nil {
			return err
		}
		m, err := tx.Member(ws, person.ID)
		if errors.Is(err, store.ErrNotFound) {
			return apierr.Forbidden("you are not a member of this workspace")
		}
		if err != nil {
			return err
		}
		tokenMAC, notAfter = t.MAC, minTime(t.ExpiresAt, f.ExpiresAt)
		p = &Principal{Kind: KindPerson, Workspace: ws, PersonID: person.ID, FamilyID: f.ID, Role: m.Role}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cacheable {
		s.hot.creds.Store(cacheID, &credEntry{gen: gen, mac: tokenMAC, notAfter: notAfter, p: *p})
	}
	return p, nil
}

// liveAccess finds the access token tok, with its sign-in and its person,
// all live at now: 401 otherwise.
func liveAccess(tx store.Tx, tok secrets.Token, mac []byte, now time.Time) (*store.Token, *store.TokenFamily, *store.Person, error) {
	t, err := tx.Token(tok.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, apierr.Unauthorized()
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if t.Kind != store.TokenAccess || !secrets.Equal(t.MAC, mac) || !now.Before(t.ExpiresAt) {
		return nil, nil, nil, apierr.Unauthorized()
	}
	f, err := tx.TokenFamily(t.FamilyID)
	if err != nil || f.RevokedAt != nil || !now.Before(f.ExpiresAt) {
		return nil, nil, nil, apierr.Unauthorized()
	}
	person, err := tx.Person(f.PersonID)
	if err != nil || person.Disabled {
		return nil, nil, nil, apierr.Unauthorized()
	}
	return t, f, person, nil
}

// AuthenticateAccount resolves a credential for the routes about the
// caller's own account, which name no workspace: an access token is its
// person (Workspace is the sign-in's bound workspace, or ""), whatever
// x-org-id says; a key is its service account's principal (which the
// account routes refuse).
func (s *Service) AuthenticateAccount(ctx context.Context, credential string) (*Principal, error) {
	tok, ok := secrets.ParseToken(credential)
	if !ok || tok.Prefix != secrets.PrefixAccessToken {
		return s.Authenticate(ctx, credential, "")
	}
	mac := s.Secrets.MAC(tok.Secret)
	var p *Principal
	err := s.Store.View(ctx, func(tx store.Tx) error {
		_, f, person, err := liveAccess(tx, tok, mac, s.Clock.Now())
		if err == nil {
			p = &Principal{Kind: KindPerson, Workspace: f.Workspace, PersonID: person.ID, FamilyID: f.ID}
		}
		return err
	})
	return p, err
}

// Account is the signed-in person, as the account routes show it.
type Account struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Name  string `json:"name"`
}

// OrgView is a workspace the person may use, as the account routes show it.
type OrgView struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// AccountOf answers who the principal is (a person).
func (s *Service) AccountOf(ctx context.Context, p *Principal) (*Account, error) {
	if err := Require(p, OpOwnAccount); err != nil {
		return nil, err
	}
	var a *Account
	err := s.Store.View(ctx, func(tx store.Tx) error {
		person, err := tx.Person(p.PersonID)
		if err != nil {
			return storeErr(err, "PersonNotFound", "person")
		}
		a = &Account{ID: person.ID, Email: person.Email, Name: person.Name}
		return nil
	})
	return a, err
}

// OrgsOf lists the workspaces the principal may use with its credential:
// the person's workspaces, or only the one a bound sign-in is bound to.
func (s *Service) OrgsOf(ctx context.Context, p *Principal) ([]OrgView, error) {
	if err := Require(p, OpOwnAccount); err != nil {
		return nil, err
	}
	wss, err := s.WorkspacesOf(ctx, p.PersonID)
	out := []OrgView{}
	for _, w := range wss {
		if p.Workspace == "" || w.ID == p.Workspace {
			out = append(out, OrgView{ID: w.ID, Name: w.Name})
		}
	}
	return out, err
}

// IssuedToken is a newly issued access token, shown once.
type IssuedToken struct {
	AccessToken string    `json:"access_token"`
	TokenType   string    `json:"token_type"`
	ExpiresIn   int       `json:"expires_in"`
	ExpiresAt   time.Time `json:"expires_at"`
	OrgID       *string   `json:"org_id"`
	FamilyID    string    `json:"family_id"`
}

// IssuePersonToken starts a token family for a person and issues its first
// access token. workspace binds the family ("" for none); the person must be
// a member of it. The operator uses this to hand a person a Console
// credential before any web sign-in exists.
func (s *Service) IssuePersonToken(ctx context.Context, personID, workspaceID, clientID string) (*IssuedToken, error) {
	now := s.now()
	ttl := s.AccessTokenTTL
	fam := &store.TokenFamily{ID: secrets.NewID("tfm_"), PersonID: personID, Workspace: workspaceID, ClientID: clientID, Created: now, ExpiresAt: now.Add(ttl)}
	var out *IssuedToken
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		person, err := tx.Person(personID)
		if err != nil {
			return storeErr(err, "PersonNotFound", "person")
		}
		if person.Disabled {
			return apierr.Forbidden("this person is disabled")
		}
		if workspaceID != "" {
			if _, err := workspace(tx, workspaceID); err != nil {
				return err
			}
			if _, err := tx.Member(workspaceID, personID); err != nil {
				return storeErr(err, "MemberNotFound", "membership of this person in the workspace")
			}
		}
		if err := tx.PutTokenFamily(fam); err != nil {
			return err
		}
		tokStr, id := secrets.NewToken(secrets.PrefixAccessToken)
		t := &store.Token{ID: id, Kind: store.TokenAccess, FamilyID: fam.ID, MAC: s.Secrets.MAC(tokStr), Created: now, ExpiresAt: now.Add(ttl)}
		if err := tx.PutToken(t, true); err != nil {
			return err
		}
		out = &IssuedToken{AccessToken: tokStr, TokenType: "Bearer", ExpiresIn: int(ttl / time.Second), ExpiresAt: t.ExpiresAt, FamilyID: fam.ID}
		if workspaceID != "" {
			out.OrgID = &workspaceID
		}
		return nil
	})
	return out, err
}

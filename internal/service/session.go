package service

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// SessionTTL is the lifetime of a Console web session.
const SessionTTL = 12 * time.Hour

// WebClientID is the client id of Console web sign-ins.
const WebClientID = "console-web"

// Session is a signed-in person on the Console web.
type Session struct {
	Person   *store.Person
	FamilyID string
	Token    string
}

// SignIn checks an email and password and starts a web session (a token
// family of its own, revoked by SignOut).
func (s *Service) SignIn(ctx context.Context, email, password string) (*Session, error) {
	p, err := s.CheckPassword(ctx, store.FoldEmail(email), password)
	if err != nil {
		return nil, err
	}
	now := s.now()
	fam := &store.TokenFamily{ID: secrets.NewID("tfm_"), PersonID: p.ID, ClientID: WebClientID, Created: now, ExpiresAt: now.Add(SessionTTL)}
	tok, id := secrets.NewToken(secrets.PrefixWebSession)
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutTokenFamily(fam); err != nil {
			return err
		}
		return tx.PutToken(&store.Token{ID: id, Kind: store.TokenSession, FamilyID: fam.ID, MAC: s.Secrets.MAC(tok), Created: now, ExpiresAt: fam.ExpiresAt}, true)
	})
	if err != nil {
		return nil, err
	}
	return &Session{Person: p, FamilyID: fam.ID, Token: tok}, nil
}

// LookupSession resolves a session cookie; 401 when it is not a live session.
func (s *Service) LookupSession(ctx context.Context, token string) (*Session, error) {
	tok, ok := secrets.ParseToken(token)
	if !ok || tok.Prefix != secrets.PrefixWebSession {
		return nil, apierr.Unauthorized()
	}
	mac := s.Secrets.MAC(tok.Secret)
	now := s.Clock.Now()
	var out *Session
	err := s.Store.View(ctx, func(tx store.Tx) error {
		t, err := tx.Token(tok.ID)
		if err != nil || t.Kind != store.TokenSession || !secrets.Equal(t.MAC, mac) || !now.Before(t.ExpiresAt) {
			return apierr.Unauthorized()
		}
		f, err := tx.TokenFamily(t.FamilyID)
		if err != nil || f.RevokedAt != nil || !now.Before(f.ExpiresAt) {
			return apierr.Unauthorized()
		}
		p, err := tx.Person(f.PersonID)
		if err != nil || p.Disabled {
			return apierr.Unauthorized()
		}
		out = &Session{Person: p, FamilyID: f.ID, Token: token}
		return nil
	})
	return out, err
}

// SignOut revokes a web session at once.
func (s *Service) SignOut(ctx context.Context, sess *Session) error {
	now := s.now()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		f, err := tx.TokenFamily(sess.FamilyID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		f.RevokedAt = &now
		return tx.PutTokenFamily(f)
	})
}

// WebPrincipal is the signed-in person acting in a workspace they belong
// to (403 otherwise, 404 for an unknown or deleted workspace).
func (s *Service) WebPrincipal(ctx context.Context, sess *Session, workspaceID string) (*Principal, error) {
	var p *Principal
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, workspaceID); err != nil {
			return err
		}
		m, err := tx.Member(workspaceID, sess.Person.ID)
		if errors.Is(err, store.ErrNotFound) {
			return apierr.Forbidden("you are not a member of this workspace")
		}
		if err != nil {
			return err
		}
		p = &Principal{Kind: KindPerson, Workspace: workspaceID, PersonID: sess.Person.ID, FamilyID: sess.FamilyID, Role: m.Role}
		return nil
	})
	return p, err
}

// CSRFToken is the anti-forgery token of a session: an HMAC of the session
// token, so it needs no storage and dies with the session.
func (s *Service) CSRFToken(sess *Session) string {
	return hex.EncodeToString(s.Secrets.MAC("csrf:" + sess.Token))[:40]
}

// CheckCSRF compares a submitted token with the session's in constant time.
func (s *Service) CheckCSRF(sess *Session, token string) bool {
	return hmac.Equal([]byte(s.CSRFToken(sess)), []byte(token))
}

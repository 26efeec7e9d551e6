package service

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/store"
)

// SignInView is one of a person's live sign-ins (a token family): the
// client it was made for, the workspace it is bound to, and whether it is
// the one the request came with.
type SignInView struct {
	ID        string    `json:"id"`
	ClientID  string    `json:"client_id"`
	Workspace string    `json:"workspace,omitempty"`
	Created   time.Time `json:"created"`
	ExpiresAt time.Time `json:"expires_at"`
	Current   bool      `json:"current"`
}

// SignIns lists the principal's own live sign-ins, newest first: device
// sign-ins of CLIs, web sessions and operator-issued tokens alike.
func (s *Service) SignIns(ctx context.Context, p *Principal) ([]SignInView, error) {
	if err := Require(p, OpOwnAccount); err != nil {
		return nil, err
	}
	if p.PersonID == "" {
		return []SignInView{}, nil
	}
	now := s.Clock.Now()
	out := []SignInView{}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		fams, err := tx.TokenFamilies(p.PersonID)
		for _, f := range fams {
			if f.RevokedAt == nil && now.Before(f.ExpiresAt) {
				out = append(out, SignInView{ID: f.ID, ClientID: f.ClientID, Workspace: f.Workspace, Created: f.Created,
					ExpiresAt: f.ExpiresAt, Current: f.ID == p.FamilyID})
			}
		}
		return err
	})
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, err
}

// RevokeSignIn revokes one of the principal's own sign-ins: every access
// and refresh token of it stops working on the very next request. Another
// person's sign-in is 404, as an unknown one.
func (s *Service) RevokeSignIn(ctx context.Context, p *Principal, id string) error {
	if err := Require(p, OpOwnAccount); err != nil {
		return err
	}
	now := s.now()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		f, err := tx.TokenFamily(id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (f.PersonID != p.PersonID || p.PersonID == "")) {
			return apierr.NotFound("SignInNotFound", "sign-in %s not found", id)
		}
		if err != nil {
			return err
		}
		if f.RevokedAt != nil {
			return nil
		}
		f.RevokedAt = &now
		return tx.PutTokenFamily(f)
	})
}

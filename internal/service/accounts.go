package service

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// ServiceAccounts lists the workspace's service accounts.
func (s *Service) ServiceAccounts(ctx context.Context, p *Principal) ([]*store.ServiceAccount, error) {
	if err := Require(p, OpManageServiceAccounts); err != nil {
		return nil, err
	}
	var out []*store.ServiceAccount
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		out, err = tx.ServiceAccounts(p.Workspace)
		return err
	})
	return out, err
}

// ServiceAccount returns one service account of the workspace.
func (s *Service) ServiceAccount(ctx context.Context, p *Principal, id string) (*store.ServiceAccount, error) {
	if err := Require(p, OpManageServiceAccounts); err != nil {
		return nil, err
	}
	var sa *store.ServiceAccount
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		sa, err = serviceAccount(tx, p.Workspace, id)
		return err
	})
	return sa, err
}

func serviceAccount(tx store.Tx, ws, id string) (*store.ServiceAccount, error) {
	if _, err := workspace(tx, ws); err != nil {
		return nil, err
	}
	sa, err := tx.ServiceAccount(id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sa.Workspace != ws) {
		return nil, apierr.NotFound("ServiceAccountNotFound", "service account %s not found in this workspace", id)
	}
	return sa, err
}

// CreateServiceAccount adds a service account to the workspace.
func (s *Service) CreateServiceAccount(ctx context.Context, p *Principal, name string) (*store.ServiceAccount, error) {
	if err := Require(p, OpManageServiceAccounts); err != nil {
		return nil, err
	}
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	sa := &store.ServiceAccount{ID: secrets.NewID("sa_"), Workspace: p.Workspace, Name: strings.TrimSpace(name), CreatedBy: p.Actor(), Created: s.now()}
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		return tx.PutServiceAccount(sa)
	})
	if err != nil {
		return nil, err
	}
	return sa, nil
}

// DeleteServiceAccount removes a service account and revokes all its keys,
// in one transaction.
func (s *Service) DeleteServiceAccount(ctx context.Context, p *Principal, id string) error {
	if err := Require(p, OpManageServiceAccounts); err != nil {
		return err
	}
	now := s.now()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := serviceAccount(tx, p.Workspace, id); err != nil {
			return err
		}
		keys, err := tx.APIKeys(id)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if k.RevokedAt == nil {
				k.RevokedAt = &now
				if err := tx.PutAPIKey(k, false); err != nil {
					return err
				}
			}
		}
		return tx.DeleteServiceAccount(id)
	})
}

// NewKey is the input of CreateKey.
type NewKey struct {
	Name       string     `json:"name"`
	Permission string     `json:"permission"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
}

// CreatedKey is a new key with its value: the only time the value is shown.
type CreatedKey struct {
	*store.APIKey
	Key string
}

// CreateKey issues a key for a service account. The returned value is never
// stored and cannot be shown again.
func (s *Service) CreateKey(ctx context.Context, p *Principal, saID string, in NewKey) (*CreatedKey, error) {
	if err := Require(p, OpManageServiceAccounts); err != nil {
		return nil, err
	}
	if err := checkName("name", in.Name); err != nil {
		return nil, err
	}
	if in.Permission != store.PermissionInference && in.Permission != store.PermissionAll {
		return nil, apierr.BadRequest(`permission must be "inference" (Inference only) or "all"`)
	}
	now := s.now()
	if in.ExpiresAt != nil {
		t := in.ExpiresAt.UTC()
		if !t.After(now) {
			return nil, apierr.BadRequest("expires_at must be in the future")
		}
		in.ExpiresAt = &t
	}
	var out *CreatedKey
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := serviceAccount(tx, p.Workspace, saID); err != nil {
			return err
		}
		value, id := secrets.NewToken(secrets.PrefixServiceKey)
		k := &store.APIKey{ID: id, Workspace: p.Workspace, ServiceAccount: saID, Name: strings.TrimSpace(in.Name),
			Permission: in.Permission, MAC: s.Secrets.MAC(value), Created: now, CreatedBy: p.Actor(), ExpiresAt: in.ExpiresAt}
		if err := tx.PutAPIKey(k, true); err != nil {
			return err
		}
		out = &CreatedKey{APIKey: k, Key: value}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Keys lists a service account's keys, revoked ones included.
func (s *Service) Keys(ctx context.Context, p *Principal, saID string) ([]*store.APIKey, error) {
	if err := Require(p, OpManageServiceAccounts); err != nil {
		return nil, err
	}
	var out []*store.APIKey
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if _, err := serviceAccount(tx, p.Workspace, saID); err != nil {
			return err
		}
		if out, err = tx.APIKeys(saID); err != nil {
			return err
		}
		for _, k := range out {
			if err := withLastUse(tx, k); err != nil {
				return err
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// RevokeKey revokes a key at once: the next request with it gets 401.
// Revoking an already revoked key succeeds and keeps the first revocation time.
func (s *Service) RevokeKey(ctx context.Context, p *Principal, saID, keyID string) error {
	if err := Require(p, OpManageServiceAccounts); err != nil {
		return err
	}
	now := s.now()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := serviceAccount(tx, p.Workspace, saID); err != nil {
			return err
		}
		k, err := tx.APIKey(keyID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && k.ServiceAccount != saID) {
			return apierr.NotFound("KeyNotFound", "key %s not found on this service account", keyID)
		}
		if err != nil {
			return err
		}
		if k.RevokedAt != nil {
			return nil
		}
		k.RevokedAt = &now
		return tx.PutAPIKey(k, false)
	})
}

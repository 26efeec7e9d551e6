package service

import (
	"context"
	"errors"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/store"
)

// MemberView is a member with the person's name and email.
type MemberView struct {
	MemberID string `json:"member_id"`
	Email    string `json:"email"`
	Name     string `json:"name"`
	Role     string `json:"role"`
}

// Members lists the people of the workspace with their roles.
func (s *Service) Members(ctx context.Context, p *Principal) ([]MemberView, error) {
	if err := Require(p, OpManageMembers); err != nil {
		return nil, err
	}
	var out []MemberView
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		ms, err := tx.Members(p.Workspace)
		if err != nil {
			return err
		}
		for _, m := range ms {
			person, err := tx.Person(m.PersonID)
			if err != nil {
				continue
			}
			out = append(out, MemberView{MemberID: m.PersonID, Email: person.Email, Name: person.Name, Role: m.Role})
		}
		return nil
	})
	return out, err
}

// NewMember is the input of AddMember: an existing person, by id or email.
type NewMember struct {
	PersonID string `json:"person_id,omitempty"`
	Email    string `json:"email,omitempty"`
	Role     string `json:"role"`
}

// AddMember makes an existing person a member of the workspace.
func (s *Service) AddMember(ctx context.Context, p *Principal, in NewMember) (*MemberView, error) {
	if err := Require(p, OpManageMembers); err != nil {
		return nil, err
	}
	if !store.ValidRole(in.Role) {
		return nil, apierr.BadRequest("role must be owner, admin or member")
	}
	if (in.PersonID == "") == (in.Email == "") {
		return nil, apierr.BadRequest("give exactly one of person_id and email")
	}
	if err := canGrant(p, "", in.Role); err != nil {
		return nil, err
	}
	var out *MemberView
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		var person *store.Person
		var err error
		if in.PersonID != "" {
			person, err = tx.Person(in.PersonID)
		} else {
			person, err = tx.PersonByEmail(in.Email)
		}
		if err != nil {
			return storeErr(err, "PersonNotFound", "person")
		}
		if _, err := tx.Member(p.Workspace, person.ID); err == nil {
			return apierr.Conflict("this person is already a member of the workspace")
		}
		if err := tx.PutMember(&store.Member{Workspace: p.Workspace, PersonID: person.ID, Role: in.Role, Created: s.now()}); err != nil {
			return err
		}
		out = &MemberView{MemberID: person.ID, Email: person.Email, Name: person.Name, Role: in.Role}
		return nil
	})
	return out, err
}

// canGrant applies "admins manage members, but not owners": only an owner
// (or the operator) may touch an owner or make someone an owner.
func canGrant(p *Principal, oldRole, newRole string) error {
	if p.Kind == KindOperator || p.Role == store.RoleOwner {
		return nil
	}
	if oldRole == store.RoleOwner || newRole == store.RoleOwner {
		return apierr.Forbidden("only an owner can add, change or remove an owner")
	}
	return nil
}

// SetRole changes a member's role. The last owner cannot be demoted (409).
func (s *Service) SetRole(ctx context.Context, p *Principal, personID, role string) (*MemberView, error) {
	if err := Require(p, OpManageMembers); err != nil {
		return nil, err
	}
	if !store.ValidRole(role) {
		return nil, apierr.BadRequest("role must be owner, admin or member")
	}
	var out *MemberView
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		m, err := member(tx, p.Workspace, personID)
		if err != nil {
			return err
		}
		if err := canGrant(p, m.Role, role); err != nil {
			return err
		}
		if m.Role == store.RoleOwner && role != store.RoleOwner {
			if err := keepAnOwner(tx, p.Workspace, personID); err != nil {
				return err
			}
		}
		m.Role = role
		if err := tx.PutMember(m); err != nil {
			return err
		}
		person, err := tx.Person(personID)
		if err != nil {
			return err
		}
		out = &MemberView{MemberID: personID, Email: person.Email, Name: person.Name, Role: role}
		return nil
	})
	return out, err
}

// RemoveMember removes a person from the workspace and revokes their sign-ins
// bound to it. The last owner cannot be removed (409).
func (s *Service) RemoveMember(ctx context.Context, p *Principal, personID string) error {
	if err := Require(p, OpManageMembers); err != nil {
		return err
	}
	now := s.now()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		m, err := member(tx, p.Workspace, personID)
		if err != nil {
			return err
		}
		if err := canGrant(p, m.Role, ""); err != nil {
			return err
		}
		if m.Role == store.RoleOwner {
			if err := keepAnOwner(tx, p.Workspace, personID); err != nil {
				return err
			}
		}
		fams, err := tx.TokenFamilies(personID)
		if err != nil {
			return err
		}
		for _, f := range fams {
			if f.Workspace == p.Workspace && f.RevokedAt == nil {
				f.RevokedAt = &now
				if err := tx.PutTokenFamily(f); err != nil {
					return err
				}
			}
		}
		return tx.DeleteMember(p.Workspace, personID)
	})
}

func member(tx store.Tx, ws, personID string) (*store.Member, error) {
	if _, err := workspace(tx, ws); err != nil {
		return nil, err
	}
	m, err := tx.Member(ws, personID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("MemberNotFound", "%s is not a member of this workspace", personID)
	}
	return m, err
}

// keepAnOwner fails with 409 unless someone other than personID owns ws.
// It runs inside the same transaction as the change, so two concurrent
// demotions of the last two owners cannot both succeed.
func keepAnOwner(tx store.Tx, ws, personID string) error {
	ms, err := tx.Members(ws)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Role == store.RoleOwner && m.PersonID != personID {
			return nil
		}
	}
	return apierr.Conflict("a workspace must keep at least one owner")
}

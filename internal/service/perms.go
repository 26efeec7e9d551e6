package service

import (
	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/store"
)

// Op is a row of the permission matrix: which credential may do what.
type Op int

// The rows of the permission matrix.
const (
	OpInference             Op = iota + 1 // gateway and inference routes
	OpReadConfig                          // GET /api/v2/config
	OpReadSpend                           // read budgets and usage of the workspace
	OpManageConnections                   // set budgets, manage connections and pricing
	OpManageModels                        // enable/disable models, upstream ids
	OpManageServiceAccounts               // manage service accounts; create and revoke keys
	OpManageMembers                       // invite and remove members, change roles
	OpOwnAccount                          // read one's own account, list and revoke one's own sign-ins (a person's)
	OpReadAudit                           // read a connection's audit trail (owners)
	OpManageClaudeCode                    // edit the workspace's Claude Code settings and read their history (owners)
)

// Ops lists every row, in the order of the matrix.
var Ops = []Op{OpInference, OpReadConfig, OpReadSpend, OpManageConnections, OpManageModels, OpManageServiceAccounts, OpManageMembers, OpOwnAccount, OpReadAudit, OpManageClaudeCode}

func (o Op) String() string {
	switch o {
	case OpInference:
		return "inference"
	case OpReadConfig:
		return "read config"
	case OpReadSpend:
		return "read budgets and usage"
	case OpManageConnections:
		return "set budgets, manage connections and pricing"
	case OpManageModels:
		return "manage models"
	case OpManageServiceAccounts:
		return "manage service accounts and keys"
	case OpManageMembers:
		return "manage members and roles"
	case OpOwnAccount:
		return "read your account and manage your own sign-ins"
	case OpReadAudit:
		return "read a connection's audit trail"
	case OpManageClaudeCode:
		return "edit the Claude Code settings"
	}
	return "unknown"
}

// Access is the answer of the matrix for one principal and row.
type Access int

// Answers of the matrix.
const (
	Deny    Access = iota // 403
	Allow                 // ✓
	OwnOnly               // a member reading budgets and usage: their own only
)

// Check is the whole permission matrix, in one place. Every route of every
// surface asks it; nothing else decides who may do what.
func Check(p *Principal, op Op) Access {
	switch p.Kind {
	case KindOperator:
		return Allow
	case KindServiceKey:
		switch op {
		case OpInference, OpReadConfig:
			return Allow
		case OpReadSpend, OpManageConnections:
			if p.Permission == store.PermissionAll {
				return Allow
			}
		}
		// Managing models, service accounts, keys and members always needs a
		// person, even with an All key.
		return Deny
	case KindPerson:
		switch op {
		case OpInference, OpReadConfig, OpOwnAccount:
			return Allow
		case OpReadSpend:
			switch p.Role {
			case store.RoleMember:
				return OwnOnly
			case store.RoleOwner, store.RoleAdmin:
				return Allow
			}
		case OpReadAudit, OpManageClaudeCode:
			// The audit trail records what admins and All keys did with
			// connections: only owners read it. The Claude Code settings
			// reach every member's machine: only owners write them.
			if p.Role == store.RoleOwner {
				return Allow
			}
		default:
			if p.Role == store.RoleOwner || p.Role == store.RoleAdmin {
				return Allow
			}
		}
	}
	return Deny
}

// Require answers 403 unless the principal may perform op (OwnOnly counts as
// allowed: the caller narrows the result).
func Require(p *Principal, op Op) error {
	if Check(p, op) == Deny {
		return forbidden(p, op)
	}
	return nil
}

func forbidden(p *Principal, op Op) error {
	switch {
	case p.Kind == KindServiceKey && p.Permission == store.PermissionInference:
		return apierr.Forbidden("an Inference only key cannot %s", op)
	case p.Kind == KindServiceKey:
		return apierr.Forbidden("only a person signed in to the Console can %s, even with an All key", op)
	}
	return apierr.Forbidden("your role (%s) cannot %s", p.Role, op)
}

package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// An instance server (agent_instance) that names a workspace is a member
// of it: a service account marked with the instance's name, created when
// the config loads, as which the instance calls the gateway in-process. It
// has no key: the gateway takes the member from the request's context
// (never from a client) and resolves it here per request, so that deleting
// the account in the Console stops the instance's very next step. Budgets
// and policies apply to it like to any service account.

// InstanceMember is the member an instance acts as.
type InstanceMember struct {
	Workspace string
	// WorkspaceCreated is set when the workspace was created by this call
	// (the config named a workspace no one had).
	WorkspaceCreated bool
	Account          *store.ServiceAccount
	// AccountCreated is set when the account was created by this call.
	AccountCreated bool
}

// InstanceAccountName is the name given to the service account of an
// instance when it is created.
func InstanceAccountName(instance string) string { return "instance " + instance }

// EnsureInstanceMember resolves an instance's workspace (an id, wrk_…,
// which must exist, or a name, created when no live workspace has it) and
// finds its service account there (the oldest account marked with the
// instance's name), creating one when there is none. It is idempotent:
// a restart or a reload finds what an earlier start created.
func (s *Service) EnsureInstanceMember(ctx context.Context, workspaceRef, instance string) (*InstanceMember, error) {
	if strings.TrimSpace(instance) == "" {
		return nil, apierr.BadRequest("an instance needs a name")
	}
	now := s.now()
	var out *InstanceMember
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		out = &InstanceMember{} // the transaction may run again after a conflict
		ws, created, err := s.resolveWorkspace(tx, workspaceRef, now)
		if err != nil {
			return err
		}
		out.Workspace, out.WorkspaceCreated = ws, created
		sas, err := tx.ServiceAccounts(ws)
		if err != nil {
			return err
		}
		sort.Slice(sas, func(i, j int) bool { return sas[i].Created.Before(sas[j].Created) })
		for _, sa := range sas {
			if sa.Instance == instance {
				out.Account = sa
				return nil
			}
		}
		sa := &store.ServiceAccount{ID: secrets.NewID("sa_"), Workspace: ws, Name: InstanceAccountName(instance),
			CreatedBy: "config", Created: now, Instance: instance}
		out.Account, out.AccountCreated = sa, true
		return tx.PutServiceAccount(sa)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InstancePrincipal is the principal of an instance's in-process gateway
// requests, read from the store on every call: 401 when its service
// account is gone from the workspace (deleted in the Console) or the
// workspace is deleted.
func (s *Service) InstancePrincipal(ctx context.Context, workspaceID, serviceAccount, instance string) (*Principal, error) {
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, workspaceID); err != nil {
			if apierr.As(err).Status == http.StatusNotFound {
				return apierr.New(http.StatusUnauthorized, "Unauthorized", "workspace %s of instance %q was deleted", workspaceID, instance)
			}
			return err
		}
		sa, err := tx.ServiceAccount(serviceAccount)
		if errors.Is(err, store.ErrNotFound) || (err == nil && sa.Workspace != workspaceID) {
			return apierr.New(http.StatusUnauthorized, "Unauthorized", "service account %s of instance %q was deleted from the workspace",
				serviceAccount, instance)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return instancePrincipal(workspaceID, serviceAccount, instance), nil
}

func instancePrincipal(ws, sa, instance string) *Principal {
	return &Principal{Kind: KindServiceKey, Workspace: ws, ServiceAccount: sa, Permission: store.PermissionInference, Instance: instance}
}

// MemberModel is a workspace model as an instance's agent sees it: what
// its first enabled target says of it (limits, prices, capabilities), the
// wire format the agent speaks to it on the Inference API, and, when a
// workspace policy refuses it to the member, why.
type MemberModel struct {
	ID string
	ModelSpec
	// Format is the format of the first enabled target's connection kind
	// (chat for openai and openai-compatible, anthropic, google).
	Format string
	// Pricing is the first target's, exactly (what the gateway charges
	// when that target answers).
	Pricing store.Pricing
	// Denied is the policy's refusal when the member may not use the
	// model; such a model is not offered, but a session that names it is
	// refused by the gateway with the same words.
	Denied string
}

// InstanceModels lists, by id, the workspace's models that have an
// enabled target, for the instance's member: with its policies applied
// (a denied model carries Denied). It reads the store once (the policies
// through their cache), so callers may ask on every use.
func (s *Service) InstanceModels(ctx context.Context, workspaceID, serviceAccount, instance string) ([]MemberModel, error) {
	p := instancePrincipal(workspaceID, serviceAccount, instance)
	routes, err := s.InferenceModels(ctx, p)
	if err != nil {
		return nil, err
	}
	out := make([]MemberModel, 0, len(routes))
	for _, r := range routes {
		first := r.Targets[0]
		spec := providerModel(first.Model).ModelSpec
		spec.Name = r.Model.Name
		m := MemberModel{ID: r.Model.ID, ModelSpec: spec, Format: formats.OfKind(first.Conn.Kind, 0).String(), Pricing: first.Model.Pricing}
		if _, err := s.CheckPolicies(ctx, p, m.ID); err != nil {
			e := apierr.As(err)
			if e.Status != http.StatusForbidden {
				return nil, err
			}
			m.Denied = e.Message
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// resolveWorkspace finds a workspace by id (wrk_…, must exist) or by name
// (the oldest live workspace with it; created when there is none) and
// reports whether it created it.
func (s *Service) resolveWorkspace(tx store.Tx, ref string, now time.Time) (id string, created bool, err error) {
	if strings.HasPrefix(ref, "wrk_") {
		if _, err := workspace(tx, ref); err != nil {
			return "", false, fmt.Errorf("workspace %s: %w", ref, err)
		}
		return ref, false, nil
	}
	all, err := tx.Workspaces()
	if err != nil {
		return "", false, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Created.Before(all[j].Created) })
	for _, w := range all {
		if w.Deleted == nil && w.Name == ref {
			return w.ID, false, nil
		}
	}
	if err := checkName("workspace name", ref); err != nil {
		return "", false, err
	}
	w := &store.Workspace{ID: secrets.NewID("wrk_"), Name: ref, Created: now}
	return w.ID, true, tx.PutWorkspace(w)
}

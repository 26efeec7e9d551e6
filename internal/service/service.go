// Package service is the Console's domain logic: authentication of keys and
// tokens, the permission matrix, and every operation on workspaces, people,
// members, service accounts, keys and connections. HTTP layers (the Console
// API and the operator admin API) are thin clients of it.
package service

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// Service is safe for concurrent use.
type Service struct {
	Store   store.Store
	Secrets *secrets.Keys
	Clock   clock.Clock
	Logger  *zap.Logger

	// Ledger enforces budgets and records usage.
	Ledger *ledger.Ledger

	// AccessTokenTTL is the lifetime of access tokens (default 1 h).
	AccessTokenTTL time.Duration

	hot hotCache
}

// New returns a Service with defaults filled in.
func New(st store.Store, keys *secrets.Keys, clk clock.Clock, logger *zap.Logger) *Service {
	if clk == nil {
		clk = clock.Real{}
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Service{Store: st, Secrets: keys, Clock: clk, Logger: logger, AccessTokenTTL: time.Hour, Ledger: ledger.New(st, clk)}
}

func (s *Service) now() time.Time { return s.Clock.Now().UTC().Truncate(time.Millisecond) }

// storeErr maps store errors to API errors for the given record kind.
func storeErr(err error, notFoundTag, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return apierr.NotFound(notFoundTag, "%s not found", what)
	case errors.Is(err, store.ErrExists):
		return apierr.Conflict("%s already exists", what)
	case errors.Is(err, store.ErrClosed):
		return apierr.Unavailable("the store is closed")
	}
	return err
}

// checkName validates a display name.
func checkName(field, v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return apierr.BadRequest("%s is required", field)
	}
	if utf8.RuneCountInString(v) > 200 || strings.ContainsAny(v, "\x00\r\n") {
		return apierr.BadRequest("%s must be at most 200 characters on one line", field)
	}
	return nil
}

// workspace loads a live workspace: 404 WorkspaceNotFound when unknown or deleted.
func workspace(tx store.Tx, id string) (*store.Workspace, error) {
	w, err := tx.Workspace(id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && w.Deleted != nil) {
		return nil, apierr.WorkspaceNotFound()
	}
	return w, err
}

// CreateWorkspace creates a workspace (operator only).
func (s *Service) CreateWorkspace(ctx context.Context, name string) (*store.Workspace, error) {
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	w := &store.Workspace{ID: secrets.NewID("wrk_"), Name: strings.TrimSpace(name), Created: s.now()}
	return w, s.Store.Update(ctx, func(tx store.Tx) error { return tx.PutWorkspace(w) })
}

// Workspaces lists the live workspaces (operator only).
func (s *Service) Workspaces(ctx context.Context) ([]*store.Workspace, error) {
	var out []*store.Workspace
	err := s.Store.View(ctx, func(tx store.Tx) error {
		all, err := tx.Workspaces()
		for _, w := range all {
			if w.Deleted == nil {
				out = append(out, w)
			}
		}
		return err
	})
	return out, err
}

// DeleteWorkspace marks a workspace deleted: every credential of it stops
// working at once (operator only).
func (s *Service) DeleteWorkspace(ctx context.Context, id string) error {
	return s.Store.Update(ctx, func(tx store.Tx) error {
		w, err := workspace(tx, id)
		if err != nil {
			return err
		}
		now := s.now()
		w.Deleted = &now
		return tx.PutWorkspace(w)
	})
}

// Workspace returns the principal's workspace.
func (s *Service) Workspace(ctx context.Context, p *Principal) (*store.Workspace, error) {
	var w *store.Workspace
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		w, err = workspace(tx, p.Workspace)
		return err
	})
	return w, err
}

// NewPerson is the input of CreatePerson.
type NewPerson struct {
	Email     string `json:"email"`
	Name      string `json:"name"`
	Password  string `json:"password"`
	Workspace string `json:"workspace,omitempty"`
	Role      string `json:"role,omitempty"`
}

// CreatePerson creates a person, optionally as a member of a workspace
// (operator only).
func (s *Service) CreatePerson(ctx context.Context, in NewPerson) (*store.Person, error) {
	email := store.FoldEmail(in.Email)
	if !validEmail(email) {
		return nil, apierr.BadRequest("email must be an address like name@example.com")
	}
	if err := checkName("name", in.Name); err != nil {
		return nil, err
	}
	if (in.Workspace == "") != (in.Role == "") {
		return nil, apierr.BadRequest("workspace and role go together")
	}
	if in.Role != "" && !store.ValidRole(in.Role) {
		return nil, apierr.BadRequest("role must be owner, admin or member")
	}
	hash, err := secrets.HashPassword(in.Password)
	if err != nil {
		return nil, apierr.BadRequest("%v", err)
	}
	p := &store.Person{ID: secrets.NewID("usr_"), Email: email, Name: strings.TrimSpace(in.Name), PasswordHash: hash, Created: s.now()}
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.PersonByEmail(email); err == nil {
			return apierr.Conflict("a person with this email already exists")
		}
		if err := tx.PutPerson(p); err != nil {
			return storeErr(err, "PersonNotFound", "person")
		}
		if in.Workspace == "" {
			return nil
		}
		if _, err := workspace(tx, in.Workspace); err != nil {
			return err
		}
		return tx.PutMember(&store.Member{Workspace: in.Workspace, PersonID: p.ID, Role: in.Role, Created: p.Created})
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// CheckPassword returns the person with this email and password, or 401.
func (s *Service) CheckPassword(ctx context.Context, email, password string) (*store.Person, error) {
	var p *store.Person
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		p, err = tx.PersonByEmail(email)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		// Spend the same time as a real check, so that timing does not tell
		// which emails exist.
		secrets.CheckPassword(dummyHash(), password)
		return nil, apierr.Unauthorized()
	}
	if err != nil {
		return nil, err
	}
	ok, err := secrets.CheckPassword(p.PasswordHash, password)
	if err != nil || !ok || p.Disabled {
		return nil, apierr.Unauthorized()
	}
	return p, nil
}

var dummyHash = sync.OnceValue(func() string {
	h, _ := secrets.HashPassword("agentgate-dummy-password")
	return h
})

func validEmail(e string) bool {
	at := strings.LastIndexByte(e, '@')
	return at > 0 && at < len(e)-1 && len(e) <= 254 && !strings.ContainsAny(e, " \t\r\n<>\x00") &&
		strings.Contains(e[at+1:], ".")
}

// badPath rejects identifiers that could be path tricks.
func badID(id string) bool {
	return id == "" || len(id) > 64 || strings.ContainsAny(id, "/\\?#%. \x00")
}

// Package store is agentgate's storage: the records of the Console and the
// gateway, the Store and Tx interfaces that handlers use, and the embedded
// Badger implementation. It imports nothing of Caddy, so that a second
// backend can serve several gateway nodes without touching the handlers.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// SchemaVersion is the version of the record layout this build writes.
// A store written by a newer build is refused rather than misread.
//
//  1. Records as JSON.
//  2. Usage records in their binary form (usage_bin.go); JSON ones of
//     version 1 still read.
const SchemaVersion = 2

// Errors returned by stores.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrClosed is returned after Close. It reports itself as a temporary
	// unavailability (503 on the wire), not an internal error.
	ErrClosed error = closedError{}
)

type closedError struct{}

func (closedError) Error() string     { return "store is closed" }
func (closedError) Unavailable() bool { return true }

// Store is a transactional store of agentgate's records.
type Store interface {
	// View runs fn in a read-only transaction with a consistent snapshot.
	View(ctx context.Context, fn func(Tx) error) error
	// Update runs fn in a read-write transaction. It retries fn from the
	// start when the transaction conflicts with a concurrent one, so fn must
	// have no side effects outside tx. The commit is durable on disk before
	// Update returns nil.
	Update(ctx context.Context, fn func(Tx) error) error
	// Close releases the store. Calls after Close return ErrClosed.
	Close() error
}

// Locker is a store shared by several processes that can order
// transactions on named resources without aborting them: the budget
// ledger's hot path, where every request of a member touches the same
// records and optimistic (serializable) transactions would mostly retry.
type Locker interface {
	// UpdateLocked runs fn like Update while holding exclusive locks on the
	// named resources in every process sharing the store (taken in sorted
	// order, released at commit). Each read inside fn sees everything
	// committed before it started, so every transaction that changes the
	// records a lock guards must go through UpdateLocked with that name.
	UpdateLocked(ctx context.Context, locks []string, fn func(Tx) error) error
}

// Tx is one transaction. Getters return ErrNotFound for a missing record.
// Lists return records in id order.
type Tx interface {
	Workspace(id string) (*Workspace, error)
	Workspaces() ([]*Workspace, error)
	PutWorkspace(*Workspace) error

	Person(id string) (*Person, error)
	// PersonByEmail looks a person up by case-folded email.
	PersonByEmail(email string) (*Person, error)
	// PutPerson writes a person; ErrExists when another person has the email.
	PutPerson(*Person) error

	Member(workspace, personID string) (*Member, error)
	Members(workspace string) ([]*Member, error)
	// Memberships lists the workspaces a person belongs to.
	Memberships(personID string) ([]*Member, error)
	PutMember(*Member) error
	DeleteMember(workspace, personID string) error

	ServiceAccount(id string) (*ServiceAccount, error)
	ServiceAccounts(workspace string) ([]*ServiceAccount, error)
	PutServiceAccount(*ServiceAccount) error
	DeleteServiceAccount(id string) error

	APIKey(id string) (*APIKey, error)
	APIKeys(serviceAccount string) ([]*APIKey, error)
	// PutAPIKey writes a key; ErrExists when a new key's id is taken.
	PutAPIKey(k *APIKey, create bool) error

	Connection(id string) (*Connection, error)
	Connections(workspace string) ([]*Connection, error)
	// PutConnection writes a connection; ErrExists when create is set and the id is taken.
	PutConnection(c *Connection, create bool) error
	DeleteConnection(id string) error
	// PutConnectionChange appends an entry to a connection's audit trail;
	// ErrExists if its id is taken. Entries outlive their connection.
	PutConnectionChange(*ConnectionChange) error
	// ConnectionChanges lists a connection's audit trail in id (time) order.
	ConnectionChanges(workspace, connection string) ([]*ConnectionChange, error)

	WorkspaceModel(workspace, id string) (*WorkspaceModel, error)
	// WorkspaceModels lists the workspace's models in id order.
	WorkspaceModels(workspace string) ([]*WorkspaceModel, error)
	// PutWorkspaceModel writes a workspace model; ErrExists when create is
	// set and the id is taken in its workspace.
	PutWorkspaceModel(m *WorkspaceModel, create bool) error
	// DeleteWorkspaceModel removes a workspace model; ErrNotFound when
	// there is none.
	DeleteWorkspaceModel(workspace, id string) error

	// Policies lists the workspace's policy statements in id order.
	Policies(workspace string) ([]*Policy, error)
	PutPolicy(*Policy) error
	// DeletePolicy removes a policy; ErrNotFound when there is none.
	DeletePolicy(workspace, id string) error

	// ClaudeCodeSettings is the workspace's Claude Code settings document;
	// ErrNotFound when it never had one.
	ClaudeCodeSettings(workspace string) (*ClaudeCodeSettings, error)
	PutClaudeCodeSettings(*ClaudeCodeSettings) error
	// PutClaudeCodeSettingsChange appends to the history of a workspace's
	// Claude Code settings; ErrExists when its version is taken.
	PutClaudeCodeSettingsChange(*ClaudeCodeSettingsChange) error
	// ClaudeCodeSettingsChanges lists the history in version order.
	ClaudeCodeSettingsChanges(workspace string) ([]*ClaudeCodeSettingsChange, error)

	TokenFamily(id string) (*TokenFamily, error)
	TokenFamilies(personID string) ([]*TokenFamily, error)
	PutTokenFamily(*TokenFamily) error

	Token(id string) (*Token, error)
	// PutToken writes a token; ErrExists when create is set and the id is taken.
	PutToken(t *Token, create bool) error

	DeviceGrant(id string) (*DeviceGrant, error)
	// DeviceGrantByUserCode finds a grant by the HMAC of its user code.
	DeviceGrantByUserCode(userCodeMAC string) (*DeviceGrant, error)
	// PutDeviceGrant writes a grant; ErrExists when create is set and its id
	// or user code is taken.
	PutDeviceGrant(g *DeviceGrant, create bool) error

	Budget(workspace, memberID string) (*Budget, error)
	Budgets(workspace string) ([]*Budget, error)
	PutBudget(*Budget) error
	DeleteBudget(workspace, memberID string) error

	// Holds lists a member's budget holds in id order. It reads the
	// member's whole range: on a shared store, a hold inserted concurrently
	// by another transaction makes one of the two retry.
	Holds(workspace, memberID string) ([]*Hold, error)
	PutHold(*Hold) error
	// DeleteHold removes a hold; a missing one is not an error.
	DeleteHold(workspace, memberID, id string) error

	// PutUsage appends a usage record; ErrExists if its id is taken.
	PutUsage(*UsageRecord) error
	// AppendUsage appends a usage record whose id its caller has just
	// made and never written before (the ledger's UsageID, which does not
	// repeat one). PostgreSQL still refuses a taken id (ErrExists: records
	// of several nodes meet there); Badger, whose directory one process
	// holds, writes it without reading the key first. A write that may be
	// a repeat (the retry of a transaction whose outcome is unknown) uses
	// PutUsage.
	AppendUsage(*UsageRecord) error
	// Usage calls fn for the workspace's usage records with ids greater than
	// after, in id (time) order, until fn returns false or an error.
	Usage(workspace, after string, fn func(*UsageRecord) (bool, error)) error

	// Instance sessions (instance_sessions.go), scoped per instance name.
	InstanceSession(instance, id string) (*InstanceSession, error)
	// PutInstanceSession writes a session and its list indexes; ErrExists
	// when create is set and the id is taken.
	PutInstanceSession(s *InstanceSession, create bool) error
	// DeleteInstanceSessionTree deletes a session, its descendants and all
	// their items; it returns the deleted ids, the session first.
	DeleteInstanceSessionTree(instance, id string) ([]string, error)
	// ListInstanceSessions calls fn for the sessions matching q in (updated,
	// id) order (reversed when q.Desc), strictly after q.After when set,
	// until fn returns false or an error.
	ListInstanceSessions(instance string, q SessionScan, fn func(*InstanceSession) (bool, error)) error
	// AppendSessionItem appends a message (kind ItemMessage) or inbox item
	// (ItemInbox) to a session; ErrExists when its id is already used in
	// the session by either kind.
	AppendSessionItem(instance, sessionID string, kind byte, id string, raw []byte) error
	// SessionItems calls fn for a session's items of one kind in append order.
	SessionItems(instance, sessionID string, kind byte, fn func(raw []byte) (bool, error)) error
	// SessionItemsFrom calls fn for a session's items of one kind after the
	// item from (from the first, or the last when reverse, when from is
	// empty), in append order or, with reverse, newest first, until fn
	// returns false; ErrNotFound when from is not an item of that kind.
	SessionItemsFrom(instance, sessionID string, kind byte, from string, reverse bool, fn func(raw []byte) (bool, error)) error
	// SessionItemKind reports the kind of the item with that id, or ErrNotFound.
	SessionItemKind(instance, sessionID, id string) (byte, error)
	// MoveSessionItem replaces an existing item (either kind) by a new
	// value of the given kind, placed at the end of the append order; it
	// keeps the id reserved. ErrNotFound when there is no such item.
	MoveSessionItem(instance, sessionID, id string, kind byte, raw []byte) error
	// DeleteSessionItem removes an item (either kind) and frees its id;
	// ErrNotFound when there is no such item.
	DeleteSessionItem(instance, sessionID, id string) error
	// AppendSessionEvent appends a durable event to the session's journal:
	// it takes the session's next event sequence number (from 1), gets the
	// event's bytes from frame and writes them to the session's log and,
	// under id (ids ascend), to the instance's log.
	AppendSessionEvent(instance, sessionID, id string, frame func(seq uint64) ([]byte, error)) (uint64, error)
	// SessionEvents calls fn for the session's durable events after the
	// sequence number, in order, until fn returns false.
	SessionEvents(instance, sessionID string, after uint64, fn func(seq uint64, raw []byte) (bool, error)) error
	// InstanceEventsAfter calls fn for the instance log's events whose id
	// sorts after afterID, in id order, until fn returns false.
	InstanceEventsAfter(instance, afterID string, fn func(id string, raw []byte) (bool, error)) error
	// PruneInstanceEvents deletes up to limit instance-log events with ids
	// before beforeID (session logs are kept) and reports how many.
	PruneInstanceEvents(instance, beforeID string, limit int) (int, error)

	// Meta reads a small named value of the store itself (schema version,
	// master-key fingerprint).
	Meta(name string) ([]byte, error)
	PutMeta(name string, value []byte) error
}

// checkSchemaVersion records SchemaVersion in the meta "schema_version" of a
// new store, raises an older store's to it (this build writes what older
// builds cannot read: from now on they refuse the store rather than misread
// it) and refuses a store written by a newer build. Every backend runs it
// when it opens.
func checkSchemaVersion(st Store) error {
	return st.Update(context.Background(), func(tx Tx) error {
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
		if n < SchemaVersion {
			// Every older layout reads as it is: nothing is rewritten.
			return tx.PutMeta("schema_version", []byte(strconv.Itoa(SchemaVersion)))
		}
		return nil
	})
}

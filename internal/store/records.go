package store

import (
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

// Workspace is a tenant: its people, service accounts, keys and connections.
type Workspace struct {
	ID      string     `json:"id"`
	Name    string     `json:"name"`
	Created time.Time  `json:"created"`
	Deleted *time.Time `json:"deleted,omitempty"`
	// Websearch is the workspace's hosted web search, nil when off.
	Websearch *Websearch `json:"websearch,omitempty"`
}

// Websearch names the search connection (kind search) the workspace's
// hosted web search uses and what one query costs a member.
type Websearch struct {
	Connection    string       `json:"connection"`
	PricePerQuery money.Micros `json:"price_per_query_usd"`
}

// Person is a human who signs in to the Console.
type Person struct {
	ID           string    `json:"id"`
	Email        string    `json:"email"` // case-folded, unique
	Name         string    `json:"name"`
	PasswordHash string    `json:"password_hash"`
	Disabled     bool      `json:"disabled"`
	Created      time.Time `json:"created"`
}

// Roles of a workspace member.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// ValidRole reports whether r is a member role.
func ValidRole(r string) bool { return r == RoleOwner || r == RoleAdmin || r == RoleMember }

// Member gives a person a role in a workspace.
type Member struct {
	Workspace string    `json:"workspace"`
	PersonID  string    `json:"person_id"`
	Role      string    `json:"role"`
	Created   time.Time `json:"created"`
}

// ServiceAccount is a non-human workspace member with its own keys.
type ServiceAccount struct {
	ID        string    `json:"id"`
	Workspace string    `json:"workspace"`
	Name      string    `json:"name"`
	CreatedBy string    `json:"created_by"`
	Created   time.Time `json:"created"`
	// Instance, when set, is the name of the agent_instance this account
	// is the member of: the instance calls the gateway in-process as it.
	Instance string `json:"instance,omitempty"`
}

// Key permissions.
const (
	PermissionInference = "inference" // "Inference only"
	PermissionAll       = "all"       // "All"
)

// APIKey is a service-account key. Only the HMAC of the key is stored.
type APIKey struct {
	ID             string     `json:"id"` // the 12-character key id, part of the key
	Workspace      string     `json:"workspace"`
	ServiceAccount string     `json:"service_account"`
	Name           string     `json:"name"`
	Permission     string     `json:"permission"`
	MAC            []byte     `json:"mac"`
	Created        time.Time  `json:"created"`
	CreatedBy      string     `json:"created_by"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	RevokedAt      *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt     *time.Time `json:"last_used_at,omitempty"`
}

// Usable reports whether the key is neither revoked nor expired at now.
func (k *APIKey) Usable(now time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || now.Before(*k.ExpiresAt))
}

// Connection kinds.
const (
	KindOpenAI           = "openai"
	KindAnthropic        = "anthropic"
	KindGoogle           = "google"
	KindOpenAICompatible = "openai-compatible"
	// KindSearch is a web search API: POST {base_url}/search with
	// {query, max_results}, answering {results: [{title, url, content}]}.
	KindSearch = "search"
)

// ValidKind reports whether k is a connection kind.
func ValidKind(k string) bool {
	switch k {
	case KindOpenAI, KindAnthropic, KindGoogle, KindOpenAICompatible, KindSearch:
		return true
	}
	return false
}

// Pricing is in USD per one million tokens.
type Pricing struct {
	Input      money.Micros  `json:"input"`
	Output     money.Micros  `json:"output"`
	CacheRead  *money.Micros `json:"cache_read,omitempty"`
	CacheWrite *money.Micros `json:"cache_write,omitempty"`
	Reasoning  *money.Micros `json:"reasoning,omitempty"` // defaults to Output
}

// Model is a model offered by a connection.
type Model struct {
	Name       string  `json:"name"`
	UpstreamID string  `json:"upstream_id,omitempty"`
	Enabled    bool    `json:"enabled"`
	Pricing    Pricing `json:"pricing"`
	// MaxOutputTokens is the model's output limit: it bounds the output of
	// a request that sets no limit of its own, for budget reservations, and
	// is the limit.output clients are configured with. 0 means the
	// defaults (the gateway's for reservations, DefaultOutputLimit for
	// clients).
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	// ContextWindow is the model's context window in tokens, for clients'
	// configuration. 0 means DefaultContextWindow.
	ContextWindow int64 `json:"context_window,omitempty"`
	// Capabilities say what the model accepts, for clients' configuration.
	// nil means DefaultCapabilities.
	Capabilities *Capabilities `json:"capabilities,omitempty"`
}

// The limits a client is configured with for a model that states none.
const (
	DefaultContextWindow = 128_000
	DefaultOutputLimit   = 8_192
)

// Capabilities are what a model accepts and produces.
type Capabilities struct {
	ToolCall    bool `json:"tool_call"`
	Reasoning   bool `json:"reasoning"`
	Attachment  bool `json:"attachment"`
	Temperature bool `json:"temperature"`
	// Input and Output are modalities: text, image, audio, video, pdf.
	Input  []string `json:"input"`
	Output []string `json:"output"`
}

// DefaultCapabilities are a text model's: tool calls and temperature, no
// reasoning, no attachments, text in and out.
func DefaultCapabilities() Capabilities {
	return Capabilities{ToolCall: true, Temperature: true, Input: []string{"text"}, Output: []string{"text"}}
}

// Modalities are the input and output modalities a model may state.
var Modalities = []string{"text", "image", "audio", "video", "pdf"}

// Caps returns the model's capabilities, or the defaults.
func (m Model) Caps() Capabilities {
	if m.Capabilities == nil {
		return DefaultCapabilities()
	}
	return *m.Capabilities
}

// Limits returns the model's context window and output limit for clients,
// defaults filled in.
func (m Model) Limits() (context, output int64) {
	context, output = m.ContextWindow, m.MaxOutputTokens
	if context == 0 {
		context = DefaultContextWindow
	}
	if output == 0 {
		output = min(DefaultOutputLimit, context)
	}
	return context, output
}

// WorkspaceModel is a model of the workspace's Inference API: the id a
// client sends as its model, served by one or more targets (a model of a
// connection of the same workspace). Ids are chosen by the workspace and
// unique in it.
type WorkspaceModel struct {
	ID        string        `json:"id"`
	Workspace string        `json:"workspace"`
	Name      string        `json:"name"`
	Targets   []ModelTarget `json:"targets"`
	Created   time.Time     `json:"created"`
	Updated   time.Time     `json:"updated"`
}

// Policy is a workspace policy statement, stored.
type Policy struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	PolicyRule
	Declared bool      `json:"declared,omitempty"` // declared in the Caddyfile: read-only in the Console
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

// PolicyRule is what a policy says. Effect "allow" and "deny" decide
// which models (globs over the model a request names) its subjects may
// use; "limit" bounds their requests and tokens per minute, counted per
// key, per member or per workspace. Subjects are roles (people),
// service accounts and keys; a statement naming none applies to every
// caller.
type PolicyRule struct {
	Name              string   `json:"name"`
	Effect            string   `json:"effect"`
	Models            []string `json:"models"`
	Roles             []string `json:"roles,omitempty"`
	ServiceAccounts   []string `json:"service_accounts,omitempty"`
	Keys              []string `json:"keys,omitempty"`
	Per               string   `json:"per,omitempty"`
	RequestsPerMinute int64    `json:"requests_per_minute,omitempty"`
	TokensPerMinute   int64    `json:"tokens_per_minute,omitempty"`
}

// Policy effects and limit scopes.
const (
	EffectAllow = "allow"
	EffectDeny  = "deny"
	EffectLimit = "limit"

	PerKey       = "key"
	PerMember    = "member"
	PerWorkspace = "workspace"
)

// ModelTarget is one connection's model serving a workspace model. Targets
// are tried by Order (lowest first; ties keep list order), or, when every
// target has a Weight, the first is drawn by weight and the others follow
// by weight.
type ModelTarget struct {
	Connection string `json:"connection"`
	Model      string `json:"model"`
	Order      int    `json:"order"`
	Weight     int    `json:"weight,omitempty"`
}

// Connection is a provider account connected to a workspace.
type Connection struct {
	ID         string            `json:"id"`
	Workspace  string            `json:"workspace"`
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	BaseURL    string            `json:"base_url"`
	Credential []byte            `json:"credential"` // sealed with AES-256-GCM
	Headers    map[string]string `json:"headers,omitempty"`
	Models     map[string]Model  `json:"models"`
	Declared   bool              `json:"declared,omitempty"` // declared in the Caddyfile: read-only in the Console
	Created    time.Time         `json:"created"`
	Updated    time.Time         `json:"updated"`
}

// ConnectionChange is an entry of a connection's audit trail: a change
// that moved where the connection's credential is sent (the origin of its
// base URL, or the header its kind sends the credential in), accepted
// because the same request supplied a new credential. It never holds the
// credential. Append-only.
type ConnectionChange struct {
	ID         string    `json:"id"` // in append order within the connection
	Workspace  string    `json:"workspace"`
	Connection string    `json:"connection"`
	Time       time.Time `json:"time"`
	// ActorKind is who made the change: member (a person), key (a
	// service-account key; ActorServiceAccount is its account) or operator.
	ActorKind           string `json:"actor_kind"`
	ActorID             string `json:"actor_id,omitempty"`
	ActorServiceAccount string `json:"actor_service_account,omitempty"`
	OldOrigin           string `json:"old_origin"`
	NewOrigin           string `json:"new_origin"`
	OldKind             string `json:"old_kind"`
	NewKind             string `json:"new_kind"`
}

// ClaudeCodeSettings is a workspace's Claude Code settings document: what
// its owner adds to the managed settings its members' Claude Code CLIs
// receive (permission rules, environment variables, switches).
type ClaudeCodeSettings struct {
	Workspace string `json:"workspace"`
	// Settings is the document, a JSON object in canonical form, kept as
	// text: its bytes are what the checksum covers.
	Settings string `json:"settings"`
	// Checksum is the document's, as the CLI computes a checksum.
	Checksum string `json:"checksum"`
	// Version counts the accepted changes: 1 for the first document.
	Version int `json:"version"`
	// Declared is set when the Caddyfile declares the document: it is
	// read-only elsewhere.
	Declared bool      `json:"declared,omitempty"`
	Updated  time.Time `json:"updated"`
}

// ClaudeCodeSettingsChange is one accepted change of a workspace's Claude
// Code settings, with who made it: its history is append-only.
type ClaudeCodeSettingsChange struct {
	Workspace string    `json:"workspace"`
	Version   int       `json:"version"` // the document's version after the change
	Time      time.Time `json:"time"`
	// ActorKind is who made the change: member (a person, ActorID), operator
	// (the admin API) or caddyfile (a declared document, at start).
	ActorKind string `json:"actor_kind"`
	ActorID   string `json:"actor_id,omitempty"`
	Checksum  string `json:"checksum"`
	Settings  string `json:"settings"` // canonical JSON text
	Declared  bool   `json:"declared,omitempty"`
}

// TokenFamily is one sign-in of a person: all access and refresh tokens issued
// from it. Revoking the family revokes every token of it.
type TokenFamily struct {
	ID        string     `json:"id"`
	PersonID  string     `json:"person_id"`
	Workspace string     `json:"workspace,omitempty"` // bound workspace, or "" for none
	ClientID  string     `json:"client_id"`
	Created   time.Time  `json:"created"`
	ExpiresAt time.Time  `json:"expires_at"` // absolute expiry of the sign-in
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Token kinds of a family.
const (
	TokenAccess  = "access"
	TokenRefresh = "refresh"
	TokenSession = "session" // Console web session
)

// Token is an access or refresh token of a family. Only its HMAC is stored.
type Token struct {
	ID        string     `json:"id"` // the 12-character token id
	Kind      string     `json:"kind"`
	FamilyID  string     `json:"family_id"`
	MAC       []byte     `json:"mac"`
	Created   time.Time  `json:"created"`
	ExpiresAt time.Time  `json:"expires_at"`
	UsedAt    *time.Time `json:"used_at,omitempty"` // refresh tokens: single use
}

// Budget periods.
const (
	PeriodDaily   = "daily"
	PeriodWeekly  = "weekly"
	PeriodMonthly = "monthly"
	PeriodTotal   = "total"
)

// ValidPeriod reports whether p is a budget period.
func ValidPeriod(p string) bool {
	return p == PeriodDaily || p == PeriodWeekly || p == PeriodMonthly || p == PeriodTotal
}

// Member kinds of budgets and usage.
const (
	MemberPerson         = "person"
	MemberServiceAccount = "service_account"
)

// Budget caps a member's spend per period. Spent is settled spend of the
// period that starts at PeriodStart; it is durable. On a single node the
// reservations of requests in flight are not stored (a crash releases
// them); on a store shared by several nodes they are Holds.
type Budget struct {
	Workspace   string     `json:"workspace"`
	MemberID    string     `json:"member_id"`
	MemberKind  string     `json:"member_kind"`
	Limit       money.Pico `json:"limit"`
	Period      string     `json:"period"`
	Spent       money.Pico `json:"spent"`
	PeriodStart time.Time  `json:"period_start"`
	Updated     time.Time  `json:"updated"`
}

// Hold is an admitted request's reservation against a member's budget,
// stored when several nodes share the store (a single node keeps its
// reservations in memory). A hold whose node died expires at ExpiresAt.
type Hold struct {
	ID        string     `json:"id"`
	Workspace string     `json:"workspace"`
	MemberID  string     `json:"member_id"`
	Amount    money.Pico `json:"amount"`
	Node      string     `json:"node,omitempty"`
	ExpiresAt time.Time  `json:"expires_at"`
	// Exact marks a node's budget slice that holds exactly what its node
	// has in flight (no idle room to recall).
	Exact bool `json:"exact,omitempty"`
}

// Tokens are the token counts of one request, normalised across formats.
type Tokens struct {
	Input      int64 `json:"input"` // uncached input
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
	Output     int64 `json:"output"` // output that is not reasoning
	Reasoning  int64 `json:"reasoning"`
}

// Total is the sum of all counts; a sum past int64 saturates
// (money.AddSat) instead of wrapping to a small or negative count.
func (t Tokens) Total() int64 {
	return money.AddSat(money.AddSat(money.AddSat(money.AddSat(t.Input, t.CacheRead), t.CacheWrite), t.Output), t.Reasoning)
}

// UsageRecord is one gateway request, append-only. IDs sort by time.
type UsageRecord struct {
	ID                 string     `json:"id"`
	Time               time.Time  `json:"time"`
	Workspace          string     `json:"workspace"`
	MemberID           string     `json:"member_id"`
	MemberKind         string     `json:"member_kind"`
	KeyID              string     `json:"key_id,omitempty"`
	FamilyID           string     `json:"token_family,omitempty"`
	Connection         string     `json:"connection"`
	Format             string     `json:"format"`
	Operation          string     `json:"operation,omitempty"` // "" for a generation; OpCountTokens for a token count (never charged)
	Model              string     `json:"model"`
	UpstreamModel      string     `json:"upstream_model"`
	Tokens             Tokens     `json:"tokens"`
	Cost               money.Pico `json:"cost_usd"`
	Status             int        `json:"status"`
	Streamed           bool       `json:"streamed"`
	ClientDisconnected bool       `json:"client_disconnected"`
	Estimated          bool       `json:"estimated"`
	RequestID          string     `json:"request_id,omitempty"`
	// Session is the coding agent's session id sent with the request (see
	// the gateway's sessionHeaders): printable ASCII, at most
	// MaxSessionLen bytes, "" when the request named none.
	Session string `json:"session,omitempty"`
	// Attempts are the targets an Inference API request tried before the
	// one that answered (Connection), in order; empty when the first
	// answered. Only the answering attempt is metered and charged.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// Attempt is one failed try of an Inference API request: the connection
// tried, the provider's status (0: none, the connection failed or timed
// out) and why it moved on.
type Attempt struct {
	Connection string `json:"connection"`
	Status     int    `json:"status,omitempty"`
	Error      string `json:"error"`
}

// OpWebsearch is the Operation of a usage record of a hosted web search
// query, charged the workspace's price per query.
const OpWebsearch = "websearch"

// OpCountTokens is the Operation of a usage record of a token count
// (Anthropic count_tokens, Google countTokens).
const OpCountTokens = "count_tokens"

// MaxSessionLen bounds the length of UsageRecord.Session.
const MaxSessionLen = 128

// Device grant states.
const (
	DevicePending  = "pending"
	DeviceApproved = "approved"
	DeviceDenied   = "denied"
	DeviceConsumed = "consumed"
)

// DeviceGrant is one RFC 8628 device authorization. Its key is the HMAC of
// the device code; the user code is indexed by its HMAC too, so a store
// read can neither redeem nor approve a live code.
type DeviceGrant struct {
	ID          string    `json:"id"` // hex HMAC of the device code
	UserCodeMAC string    `json:"user_code_mac"`
	ClientID    string    `json:"client_id"`
	OrgScope    bool      `json:"org_scope"` // supports_org_scope=true: bind the tokens to a workspace
	State       string    `json:"state"`
	Created     time.Time `json:"created"`
	ExpiresAt   time.Time `json:"expires_at"`
	Interval    int       `json:"interval"` // seconds; grows by 5 on slow_down
	LastPoll    time.Time `json:"last_poll"`
	PersonID    string    `json:"person_id,omitempty"` // who approved or denied
	Workspace   string    `json:"workspace,omitempty"` // bound at approval
	FamilyID    string    `json:"family_id,omitempty"` // issued on redemption
	// RequestIP is the client address that started the sign-in, shown on
	// the verification page next to the time it started, so that a person
	// can tell a sign-in they did not start.
	RequestIP string `json:"request_ip,omitempty"`
}

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/store"
)

// ModelInput describes a model of a connection. Enabled defaults to true and
// Name to the model id; absent fields keep their value on an update. The
// limits and capabilities are what clients are configured with (the
// config's limit, tool_call, reasoning, attachment, temperature and
// modalities); limit.output is max_output_tokens under another name.
type ModelInput struct {
	Name            string         `json:"name,omitempty"`
	UpstreamID      string         `json:"upstream_id,omitempty"`
	Enabled         *bool          `json:"enabled,omitempty"`
	Pricing         *store.Pricing `json:"pricing,omitempty"`
	MaxOutputTokens *int64         `json:"max_output_tokens,omitempty"`
	Limit           *LimitInput    `json:"limit,omitempty"`
	ToolCall        *bool          `json:"tool_call,omitempty"`
	Reasoning       *bool          `json:"reasoning,omitempty"`
	Attachment      *bool          `json:"attachment,omitempty"`
	Temperature     *bool          `json:"temperature,omitempty"`
	Modalities      *Modalities    `json:"modalities,omitempty"`
}

// LimitInput sets a model's context window and output limit in tokens.
type LimitInput struct {
	Context *int64 `json:"context,omitempty"`
	Output  *int64 `json:"output,omitempty"`
}

// Modalities are a model's input and output modalities.
type Modalities struct {
	Input  []string `json:"input"`
	Output []string `json:"output"`
}

// The bounds of a model's limits.
const (
	maxContextWindow = 100_000_000
	maxOutputLimit   = 10_000_000
)

// ConnectionInput creates a connection.
type ConnectionInput struct {
	// ID is set only for connections declared in the Caddyfile; otherwise a
	// random conn_… id is made.
	ID         string                `json:"-"`
	Name       string                `json:"name"`
	Kind       string                `json:"kind"`
	BaseURL    string                `json:"base_url"`
	Credential string                `json:"credential"`
	Headers    map[string]string     `json:"headers,omitempty"`
	Models     map[string]ModelInput `json:"models,omitempty"`
}

// ConnectionPatch changes some fields of a connection; absent fields stay.
// A change of the base URL's origin or of the kind's credential slot needs
// a new credential in the same patch (see bindCredential).
type ConnectionPatch struct {
	Name       *string            `json:"name,omitempty"`
	Kind       *string            `json:"kind,omitempty"`
	BaseURL    *string            `json:"base_url,omitempty"`
	Credential *string            `json:"credential,omitempty"`
	Headers    *map[string]string `json:"headers,omitempty"`
}

// ConnectionView is a connection as the APIs show it: never the credential.
type ConnectionView struct {
	ID        string                 `json:"id"`
	Name      string                 `json:"name"`
	Kind      string                 `json:"kind"`
	BaseURL   string                 `json:"base_url"`
	Headers   map[string]string      `json:"headers"`
	Models    map[string]store.Model `json:"models"`
	Declared  bool                   `json:"declared"`
	Created   time.Time              `json:"created"`
	Updated   time.Time              `json:"updated"`
	Workspace string                 `json:"workspace"`
}

// View returns the public view of c.
func View(c *store.Connection) *ConnectionView {
	h := c.Headers
	if h == nil {
		h = map[string]string{}
	}
	m := c.Models
	if m == nil {
		m = map[string]store.Model{}
	}
	return &ConnectionView{ID: c.ID, Name: c.Name, Kind: c.Kind, BaseURL: c.BaseURL, Headers: h, Models: m,
		Declared: c.Declared, Created: c.Created, Updated: c.Updated, Workspace: c.Workspace}
}

var declaredIDRe = regexp.MustCompile(`^conn_[A-Za-z0-9_-]{1,48}$`)

// ValidConnectionID reports whether id may name a declared connection.
func ValidConnectionID(id string) bool { return declaredIDRe.MatchString(id) }

// checkBaseURL accepts an absolute http or https URL without credentials,
// query or fragment, and returns it without a trailing slash.
func checkBaseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", apierr.BadRequest("base_url must be an absolute http or https URL")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", apierr.BadRequest("base_url must not carry credentials, a query or a fragment")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Origin is the scheme, host and port of a base URL: where a connection's
// credential is sent. The scheme and host are lower-cased and the scheme's
// default port is left out, so https://API.example.com:443/v1 and
// https://api.example.com/v2 have the same origin, https://api.example.com.
func Origin(base string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", apierr.BadRequest("base_url must be an absolute http or https URL")
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		return scheme + "://" + net.JoinHostPort(host, port), nil
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host, nil
}

// bindCredential enforces that a connection's stored credential follows
// where it is sent: the origin of the base URL and the header (slot) the
// kind sends it in. When a change moves either, the same request must
// bring a new credential; the change is then returned for the audit
// trail. old and c are the connection before and after the change.
func bindCredential(old, c *store.Connection, newCredential bool) (*store.ConnectionChange, error) {
	oldOrigin, errOld := Origin(old.BaseURL)
	newOrigin, err := Origin(c.BaseURL)
	if err != nil {
		return nil, err
	}
	originMoved := errOld != nil || oldOrigin != newOrigin
	oldSlot, newSlot := formats.CredentialSlot(old.Kind), formats.CredentialSlot(c.Kind)
	slotMoved := oldSlot != newSlot
	if !originMoved && !slotMoved && old.Kind == c.Kind {
		return nil, nil
	}
	if !newCredential {
		if originMoved {
			return nil, apierr.BadRequest("changing the base URL's origin needs a new credential: the stored one is bound to %s", oldOrigin)
		}
		if slotMoved {
			return nil, apierr.BadRequest("changing the kind from %s to %s needs a new credential: the stored one is bound to the %s header of %s", old.Kind, c.Kind, oldSlot, oldOrigin)
		}
	}
	return &store.ConnectionChange{Workspace: c.Workspace, Connection: c.ID,
		OldOrigin: oldOrigin, NewOrigin: newOrigin, OldKind: old.Kind, NewKind: c.Kind}, nil
}

// hop-by-hop and framing headers may not be set per connection.
var reservedHeaders = map[string]bool{
	"Connection": true, "Content-Length": true, "Content-Type": true, "Host": true, "Keep-Alive": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Proxy-Connection": true,
}

var headerNameRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func checkHeaders(h map[string]string) (map[string]string, error) {
	if len(h) > 32 {
		return nil, apierr.BadRequest("at most 32 headers")
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if !headerNameRe.MatchString(k) || reservedHeaders[http.CanonicalHeaderKey(k)] {
			return nil, apierr.BadRequest("header %q cannot be set on a connection", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") || len(v) > 4096 {
			return nil, apierr.BadRequest("header %q has an invalid value", k)
		}
		out[http.CanonicalHeaderKey(k)] = v
	}
	return out, nil
}

// CheckModelID rejects model ids that could be path tricks or that cannot
// travel in the connection kind's requests.
func CheckModelID(kind, id string) error {
	if id == "" || len(id) > 256 {
		return apierr.BadRequest("model id must be 1 to 256 characters")
	}
	for _, r := range id {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`"\?#%`, r) {
			return apierr.BadRequest("model id %q contains a character that is not allowed", id)
		}
	}
	if id == "." || id == ".." || strings.Contains(id, "../") || strings.HasPrefix(id, "/") || strings.HasSuffix(id, "/..") {
		return apierr.BadRequest("model id %q is not allowed", id)
	}
	if kind == store.KindGoogle && strings.ContainsAny(id, "/:") {
		return apierr.BadRequest("a Google model id cannot contain / or :")
	}
	return nil
}

// CheckPricing rejects negative and absurd prices.
func CheckPricing(p store.Pricing) error {
	check := func(name string, v *money.Micros) error {
		if v == nil {
			return nil
		}
		if err := money.ValidatePrice(name, *v); err != nil {
			return apierr.BadRequest("%v", err)
		}
		return nil
	}
	return errors.Join(check("input", &p.Input), check("output", &p.Output), check("cache_read", p.CacheRead),
		check("cache_write", p.CacheWrite), check("reasoning", p.Reasoning))
}

func buildModel(kind, id string, in ModelInput, old *store.Model) (store.Model, error) {
	if err := CheckModelID(kind, id); err != nil {
		return store.Model{}, err
	}
	m := store.Model{Name: id, Enabled: true}
	if old != nil {
		m = *old
	}
	if in.Name != "" {
		if err := checkName("model name", in.Name); err != nil {
			return m, err
		}
		m.Name = strings.TrimSpace(in.Name)
	}
	if in.UpstreamID != "" {
		if err := CheckModelID(kind, in.UpstreamID); err != nil {
			return m, apierr.BadRequest("upstream_id: %s", apierr.As(err).Message)
		}
		m.UpstreamID = in.UpstreamID
	}
	if in.Enabled != nil {
		m.Enabled = *in.Enabled
	}
	if in.Pricing != nil {
		if err := CheckPricing(*in.Pricing); err != nil {
			return m, err
		}
		m.Pricing = *in.Pricing
	}
	if err := applyLimits(&m, in); err != nil {
		return m, err
	}
	return m, applyCapabilities(&m, in)
}

// applyLimits sets the output limit (max_output_tokens or limit.output, the
// same field) and the context window, each within its bounds, the output
// no larger than the context.
func applyLimits(m *store.Model, in ModelInput) error {
	out := in.MaxOutputTokens
	var ctx *int64
	if in.Limit != nil {
		if in.Limit.Output != nil {
			if out != nil && *out != *in.Limit.Output {
				return apierr.BadRequest("max_output_tokens and limit.output differ; send one")
			}
			out = in.Limit.Output
		}
		ctx = in.Limit.Context
	}
	if out != nil {
		if *out < 1 || *out > maxOutputLimit {
			return apierr.BadRequest("the output limit (limit.output, max_output_tokens) must be from 1 to %d", maxOutputLimit)
		}
		m.MaxOutputTokens = *out
	}
	if ctx != nil {
		if *ctx < 1 || *ctx > maxContextWindow {
			return apierr.BadRequest("limit.context must be from 1 to %d", maxContextWindow)
		}
		m.ContextWindow = *ctx
	}
	if m.ContextWindow > 0 && m.MaxOutputTokens > m.ContextWindow {
		return apierr.BadRequest("the output limit (%d) cannot exceed the context window (%d)", m.MaxOutputTokens, m.ContextWindow)
	}
	return nil
}

// applyCapabilities sets the capabilities named in the input, starting
// from the model's (or the defaults).
func applyCapabilities(m *store.Model, in ModelInput) error {
	if in.ToolCall == nil && in.Reasoning == nil && in.Attachment == nil && in.Temperature == nil && in.Modalities == nil {
		return nil
	}
	c := m.Caps()
	for _, f := range []struct {
		in  *bool
		out *bool
	}{{in.ToolCall, &c.ToolCall}, {in.Reasoning, &c.Reasoning}, {in.Attachment, &c.Attachment}, {in.Temperature, &c.Temperature}} {
		if f.in != nil {
			*f.out = *f.in
		}
	}
	if mo := in.Modalities; mo != nil {
		var err error
		if c.Input, err = checkModalities("modalities.input", mo.Input); err != nil {
			return err
		}
		if c.Output, err = checkModalities("modalities.output", mo.Output); err != nil {
			return err
		}
	}
	m.Capabilities = &c
	return nil
}

// checkModalities accepts a non-empty list of known modalities without
// repeats.
func checkModalities(field string, list []string) ([]string, error) {
	if len(list) == 0 {
		return nil, apierr.BadRequest("%s must name at least one of %s", field, strings.Join(store.Modalities, ", "))
	}
	seen := map[string]bool{}
	for _, v := range list {
		if !slices.Contains(store.Modalities, v) {
			return nil, apierr.BadRequest("%s: unknown modality %q (one of %s)", field, v, strings.Join(store.Modalities, ", "))
		}
		if seen[v] {
			return nil, apierr.BadRequest("%s: %q is listed twice", field, v)
		}
		seen[v] = true
	}
	return slices.Clone(list), nil
}

// BuildConnection validates input and makes the record, with the credential
// sealed. It does not write it.
func (s *Service) BuildConnection(workspaceID string, in ConnectionInput, now time.Time) (*store.Connection, error) {
	c, err := PrepareConnection(workspaceID, in, now)
	if err != nil {
		return nil, err
	}
	c.Credential = s.Secrets.Seal([]byte(in.Credential), []byte(c.ID))
	return c, nil
}

// PrepareConnection validates input and makes the record without its
// credential; configuration validation uses it before any store is open.
func PrepareConnection(workspaceID string, in ConnectionInput, now time.Time) (*store.Connection, error) {
	if err := checkName("name", in.Name); err != nil {
		return nil, err
	}
	if !store.ValidKind(in.Kind) {
		return nil, apierr.BadRequest("kind must be one of openai, anthropic, google, openai-compatible, search")
	}
	base, err := checkBaseURL(in.BaseURL)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.Credential) == "" {
		return nil, apierr.BadRequest("credential is required")
	}
	headers, err := checkHeaders(in.Headers)
	if err != nil {
		return nil, err
	}
	models := make(map[string]store.Model, len(in.Models))
	for id, mi := range in.Models {
		m, err := buildModel(in.Kind, id, mi, nil)
		if err != nil {
			return nil, err
		}
		models[id] = m
	}
	id := in.ID
	if id == "" {
		id = secrets.NewID("conn_")
	} else if !ValidConnectionID(id) {
		return nil, apierr.BadRequest("connection id must match conn_[A-Za-z0-9_-]{1,48}")
	}
	return &store.Connection{ID: id, Workspace: workspaceID, Name: strings.TrimSpace(in.Name), Kind: in.Kind, BaseURL: base,
		Headers: headers, Models: models,
		Declared: in.ID != "", Created: now, Updated: now}, nil
}

// Credential decrypts a connection's provider credential.
func (s *Service) Credential(c *store.Connection) (string, error) {
	var e *connEntry
	if v, ok := s.hot.conns.Load(c.ID); ok {
		if e = v.(*connEntry); e.conn == c {
			if cred := e.cred.Load(); cred != nil {
				return *cred, nil
			}
		} else {
			e = nil
		}
	}
	b, err := s.Secrets.Open(c.Credential, []byte(c.ID))
	if err != nil {
		return "", fmt.Errorf("connection %s: %w", c.ID, err)
	}
	cred := string(b)
	if e != nil {
		e.cred.Store(&cred)
	}
	return cred, nil
}

// CreateConnection adds a connection. Declaring models with it is managing
// models, so a principal without that right may create it only without models.
func (s *Service) CreateConnection(ctx context.Context, p *Principal, in ConnectionInput) (*ConnectionView, error) {
	if err := Require(p, OpManageConnections); err != nil {
		return nil, err
	}
	if len(in.Models) > 0 {
		if err := Require(p, OpManageModels); err != nil {
			return nil, err
		}
	}
	c, err := s.BuildConnection(p.Workspace, in, s.now())
	if err != nil {
		return nil, err
	}
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		return storeErr(tx.PutConnection(c, true), "ConnectionNotFound", "connection "+c.ID)
	})
	if err != nil {
		return nil, err
	}
	return View(c), nil
}

// Connections lists the workspace's connections.
func (s *Service) Connections(ctx context.Context, p *Principal) ([]*ConnectionView, error) {
	if err := Require(p, OpManageConnections); err != nil {
		return nil, err
	}
	var out []*ConnectionView
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := workspace(tx, p.Workspace); err != nil {
			return err
		}
		cs, err := tx.Connections(p.Workspace)
		for _, c := range cs {
			out = append(out, View(c))
		}
		return err
	})
	return out, err
}

// connection loads a connection of the workspace; 404 ConnectionNotFound for
// unknown ids and for other workspaces' connections alike.
func connection(tx store.Tx, ws, id string) (*store.Connection, error) {
	if _, err := workspace(tx, ws); err != nil {
		return nil, err
	}
	c, err := tx.Connection(id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && c.Workspace != ws) {
		return nil, apierr.NotFound("ConnectionNotFound", "connection %s not found in this workspace", id)
	}
	return c, err
}

// LookupConnection returns a connection of the principal's workspace for the
// gateway (any principal allowed to use inference). The connection may be
// shared with other requests (hotCache): callers must not change it.
func (s *Service) LookupConnection(ctx context.Context, p *Principal, id string) (*store.Connection, error) {
	if err := Require(p, OpInference); err != nil {
		return nil, err
	}
	if e := s.cachedConn(p.Workspace, id); e != nil {
		return e.conn, nil
	}
	gen, cacheable := s.gen()
	var c *store.Connection
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		c, err = connection(tx, p.Workspace, id)
		return err
	})
	if err == nil && cacheable {
		s.hot.conns.Store(id, &connEntry{gen: gen, ws: p.Workspace, conn: c})
	}
	return c, err
}

// Connection returns one connection.
func (s *Service) Connection(ctx context.Context, p *Principal, id string) (*ConnectionView, error) {
	if err := Require(p, OpManageConnections); err != nil {
		return nil, err
	}
	var c *store.Connection
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		c, err = connection(tx, p.Workspace, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return View(c), nil
}

// editConnection loads, checks, changes and writes a connection in one
// transaction. Connections declared in the Caddyfile are read-only here.
func (s *Service) editConnection(ctx context.Context, p *Principal, id string, change func(*store.Connection) error) (*ConnectionView, error) {
	return s.editConnectionTx(ctx, p, id, func(_ store.Tx, c *store.Connection) error { return change(c) })
}

// editConnectionTx is editConnection with the transaction, for changes
// that write other records with the connection.
func (s *Service) editConnectionTx(ctx context.Context, p *Principal, id string, change func(store.Tx, *store.Connection) error) (*ConnectionView, error) {
	var c *store.Connection
	err := s.Store.Update(ctx, func(tx store.Tx) (err error) {
		c, err = connection(tx, p.Workspace, id)
		if err != nil {
			return err
		}
		if c.Declared && p.Kind != KindOperator {
			return apierr.Conflict("connection %s is declared in the Caddyfile; change it there", id)
		}
		if err := change(tx, c); err != nil {
			return err
		}
		c.Updated = s.now()
		return tx.PutConnection(c, false)
	})
	if err != nil {
		return nil, err
	}
	return View(c), nil
}

// UpdateConnection changes a connection's name, kind, base URL, credential
// or headers. A change of the base URL's origin or of the header the kind
// sends the credential in is refused unless the patch brings a new
// credential; when accepted it is recorded in the connection's audit trail.
func (s *Service) UpdateConnection(ctx context.Context, p *Principal, id string, in ConnectionPatch) (*ConnectionView, error) {
	if err := Require(p, OpManageConnections); err != nil {
		return nil, err
	}
	return s.editConnectionTx(ctx, p, id, func(tx store.Tx, c *store.Connection) error {
		old := *c
		if in.Name != nil {
			if err := checkName("name", *in.Name); err != nil {
				return err
			}
			c.Name = strings.TrimSpace(*in.Name)
		}
		if in.Kind != nil && *in.Kind != c.Kind {
			if !store.ValidKind(*in.Kind) {
				return apierr.BadRequest("kind must be one of openai, anthropic, google, openai-compatible, search")
			}
			for mid := range c.Models {
				if err := CheckModelID(*in.Kind, mid); err != nil {
					return apierr.BadRequest("the connection's model %q cannot be served by kind %s: %s", mid, *in.Kind, apierr.As(err).Message)
				}
				if up := c.Models[mid].UpstreamID; up != "" {
					if err := CheckModelID(*in.Kind, up); err != nil {
						return apierr.BadRequest("the upstream id of model %q cannot be served by kind %s: %s", mid, *in.Kind, apierr.As(err).Message)
					}
				}
			}
			c.Kind = *in.Kind
		}
		if in.BaseURL != nil {
			base, err := checkBaseURL(*in.BaseURL)
			if err != nil {
				return err
			}
			c.BaseURL = base
		}
		if in.Credential != nil {
			if strings.TrimSpace(*in.Credential) == "" {
				return apierr.BadRequest("credential cannot be empty")
			}
			c.Credential = s.Secrets.Seal([]byte(*in.Credential), []byte(c.ID))
		}
		if in.Headers != nil {
			h, err := checkHeaders(*in.Headers)
			if err != nil {
				return err
			}
			c.Headers = h
		}
		change, err := bindCredential(&old, c, in.Credential != nil)
		if err != nil || change == nil {
			return err
		}
		trail, err := tx.ConnectionChanges(c.Workspace, c.ID)
		if err != nil {
			return err
		}
		change.ID = changeID(len(trail) + 1)
		change.Time = s.now()
		change.ActorKind, change.ActorID, change.ActorServiceAccount = actorOf(p)
		return tx.PutConnectionChange(change)
	})
}

// changeID is the id of a connection's n-th audit trail entry: ids sort
// in the order the changes were made, whatever the clock says.
func changeID(n int) string {
	return fmt.Sprintf("cch_%08d_%s", n, secrets.RandomString(8))
}

// actorOf names a principal in the audit trail: member (a person), key
// (with its service account) or operator.
func actorOf(p *Principal) (kind, id, serviceAccount string) {
	switch p.Kind {
	case KindPerson:
		return "member", p.PersonID, ""
	case KindServiceKey:
		return "key", p.KeyID, p.ServiceAccount
	case KindOperator:
		return "operator", "", ""
	}
	return "unknown", "", ""
}

// ConnectionChangeView is an audit trail entry as the APIs show it.
type ConnectionChangeView struct {
	ID                  string    `json:"id"`
	Connection          string    `json:"connection"`
	Time                time.Time `json:"time"`
	ActorKind           string    `json:"actor_kind"`
	ActorID             string    `json:"actor_id,omitempty"`
	ActorServiceAccount string    `json:"actor_service_account,omitempty"`
	OldOrigin           string    `json:"old_origin"`
	NewOrigin           string    `json:"new_origin"`
	OldKind             string    `json:"old_kind"`
	NewKind             string    `json:"new_kind"`
}

// ConnectionAudit lists a connection's audit trail, oldest first: the
// accepted changes of its base URL's origin or kind. Owners only.
func (s *Service) ConnectionAudit(ctx context.Context, p *Principal, id string) ([]*ConnectionChangeView, error) {
	if err := Require(p, OpReadAudit); err != nil {
		return nil, err
	}
	out := []*ConnectionChangeView{}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := connection(tx, p.Workspace, id); err != nil {
			return err
		}
		list, err := tx.ConnectionChanges(p.Workspace, id)
		for _, c := range list {
			out = append(out, &ConnectionChangeView{ID: c.ID, Connection: c.Connection, Time: c.Time,
				ActorKind: c.ActorKind, ActorID: c.ActorID, ActorServiceAccount: c.ActorServiceAccount,
				OldOrigin: c.OldOrigin, NewOrigin: c.NewOrigin, OldKind: c.OldKind, NewKind: c.NewKind})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteConnection removes a connection.
func (s *Service) DeleteConnection(ctx context.Context, p *Principal, id string) error {
	if err := Require(p, OpManageConnections); err != nil {
		return err
	}
	return s.Store.Update(ctx, func(tx store.Tx) error {
		c, err := connection(tx, p.Workspace, id)
		if err != nil {
			return err
		}
		if c.Declared && p.Kind != KindOperator {
			return apierr.Conflict("connection %s is declared in the Caddyfile; remove it there", id)
		}
		return tx.DeleteConnection(id)
	})
}

// PutModel adds or changes a model (enablement, upstream id, name, and
// pricing when given): managing models is for admins and owners.
func (s *Service) PutModel(ctx context.Context, p *Principal, connID, modelID string, in ModelInput) (*ConnectionView, error) {
	if err := Require(p, OpManageModels); err != nil {
		return nil, err
	}
	return s.editConnection(ctx, p, connID, func(c *store.Connection) error {
		var old *store.Model
		if m, ok := c.Models[modelID]; ok {
			old = &m
		}
		m, err := buildModel(c.Kind, modelID, in, old)
		if err != nil {
			return err
		}
		if c.Models == nil {
			c.Models = map[string]store.Model{}
		}
		c.Models[modelID] = m
		return nil
	})
}

// DeleteModel removes a model from a connection.
func (s *Service) DeleteModel(ctx context.Context, p *Principal, connID, modelID string) (*ConnectionView, error) {
	if err := Require(p, OpManageModels); err != nil {
		return nil, err
	}
	return s.editConnection(ctx, p, connID, func(c *store.Connection) error {
		if _, ok := c.Models[modelID]; !ok {
			return apierr.NotFound("ModelNotFound", "model %s not found on this connection", modelID)
		}
		delete(c.Models, modelID)
		return nil
	})
}

// SetPricing replaces a model's pricing: part of managing connections and
// pricing, which All keys may do.
func (s *Service) SetPricing(ctx context.Context, p *Principal, connID, modelID string, pr store.Pricing) (*ConnectionView, error) {
	if err := Require(p, OpManageConnections); err != nil {
		return nil, err
	}
	if err := CheckPricing(pr); err != nil {
		return nil, err
	}
	return s.editConnection(ctx, p, connID, func(c *store.Connection) error {
		m, ok := c.Models[modelID]
		if !ok {
			return apierr.NotFound("ModelNotFound", "model %s not found on this connection", modelID)
		}
		m.Pricing = pr
		c.Models[modelID] = m
		return nil
	})
}

// Reconcile writes connections declared in the Caddyfile, idempotently:
// a declared connection is created, or updated in place when it changed;
// the credential is re-sealed only when its value changed.
func (s *Service) Reconcile(ctx context.Context, workspaceRef string, in ConnectionInput) (changed bool, err error) {
	now := s.now()
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		changed = false // the transaction may run again after a conflict
		ws, err := s.resolveWorkspaceRef(tx, workspaceRef, now)
		if err != nil {
			return err
		}
		c, err := s.BuildConnection(ws, in, now)
		if err != nil {
			return err
		}
		old, err := tx.Connection(c.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			changed = true
			return tx.PutConnection(c, true)
		case err != nil:
			return err
		}
		if oldCred, err := s.Credential(old); err == nil && oldCred == in.Credential {
			c.Credential = old.Credential
		}
		c.Created, c.Updated = old.Created, old.Updated
		if sameConnection(old, c) {
			return nil
		}
		changed = true
		c.Updated = now
		return tx.PutConnection(c, false)
	})
	return changed, err
}

func sameConnection(a, b *store.Connection) bool {
	av, _ := json.Marshal(View(a))
	bv, _ := json.Marshal(View(b))
	return string(a.Credential) == string(b.Credential) && string(av) == string(bv)
}

// resolveWorkspaceRef finds a workspace by id (wrk_…, must exist) or by name
// (created when no live workspace has that name).
func (s *Service) resolveWorkspaceRef(tx store.Tx, ref string, now time.Time) (string, error) {
	id, _, err := s.resolveWorkspace(tx, ref, now)
	return id, err
}

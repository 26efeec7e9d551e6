// Package mcp is the Console's MCP server: a Streamable HTTP endpoint at
// /mcp that answers JSON-RPC with single JSON responses, authenticated with
// the Console's bearer credentials (a workspace key, or a person's access
// token with x-org-id), and its OAuth protected-resource metadata, so that
// a client without a token finds the device flow. Its tools read the
// caller's usage and budget and the workspace's models, each under the
// permission matrix: a credential that may not is answered with a tool
// error. It has no Caddy import; the workspace_console handler mounts it.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/jsonio"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/secrets"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// The paths it serves.
const (
	Path         = "/mcp"
	MetadataPath = "/.well-known/oauth-protected-resource"
)

// Handles reports whether the server answers path.
func Handles(path string) bool {
	return path == Path || path == MetadataPath || path == MetadataPath+Path
}

// ProtocolVersions are the MCP revisions it speaks, newest first; a client
// asking for another gets the newest.
var ProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// Limits of the server.
const (
	maxBody     = 1 << 20
	maxSessions = 10_000
	sessionIdle = 24 * time.Hour
)

// Options configure the server.
type Options struct {
	// Service returns the Console service once the store is open.
	Service func(ctx context.Context) (*service.Service, error)
	// BaseURL is the Console's public base URL; empty means the scheme and
	// host of the request.
	BaseURL string
	// InferenceURL is the gateway's base URL, for the models tool; empty
	// means the scheme and host of the request.
	InferenceURL string
}

// Server serves the MCP endpoint.
type Server struct {
	opts     Options
	mu       sync.Mutex
	sessions map[string]*session
}

// session is an initialized MCP session, bound to the credential that
// opened it.
type session struct {
	owner    string
	lastUsed time.Time
}

// New builds the server.
func New(opts Options) *Server { return &Server{opts: opts, sessions: map[string]*session{}} }

func base(configured string, r *http.Request) string {
	if configured != "" {
		return strings.TrimRight(configured, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b := base(s.opts.BaseURL, r)
	if r.URL.Path != Path {
		// Protected-resource metadata (RFC 9728), also at the path-suffixed
		// location clients derive from the resource URL.
		jsonio.WriteRaw(w, http.StatusOK, map[string]any{"resource": b + Path, "authorization_servers": []string{b},
			"bearer_methods_supported": []string{"header"}, "resource_name": "agentgate Console"})
		return
	}
	svc, err := s.opts.Service(r.Context())
	if err != nil {
		jsonio.WriteRaw(w, http.StatusServiceUnavailable, map[string]any{"_tag": "ServiceUnavailable", "message": apierr.As(err).Message})
		return
	}
	cred := service.BearerToken(r.Header)
	var p *service.Principal
	if cred != "" {
		p, err = svc.Authenticate(r.Context(), cred, r.Header.Get("x-org-id"))
	}
	if cred == "" || err != nil {
		e := apierr.Unauthorized()
		if err != nil {
			e = apierr.As(err)
		}
		if e.Status == http.StatusUnauthorized {
			challenge := `Bearer resource_metadata="` + b + MetadataPath + `"`
			if cred != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
		}
		jsonio.WriteRaw(w, e.Status, map[string]any{"_tag": e.Tag, "message": e.Message})
		return
	}
	owner := ownerOf(p)
	now := svc.Clock.Now()
	switch r.Method {
	case http.MethodPost:
		s.post(w, r, svc, p, owner, now, b)
	case http.MethodDelete:
		if !s.end(r.Header.Get("Mcp-Session-Id"), owner) {
			jsonio.WriteRaw(w, http.StatusNotFound, rpcError(nil, -32001, "session not found"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		// No server-sent stream is offered: every answer is the response
		// to its request.
		w.Header().Set("Allow", "POST, DELETE")
		jsonio.WriteRaw(w, http.StatusMethodNotAllowed, rpcError(nil, -32000, "use POST (no server stream is offered)"))
	}
}

// ownerOf names the credential a session belongs to.
func ownerOf(p *service.Principal) string {
	if p.KeyID != "" {
		return "key:" + p.KeyID + "/" + p.Workspace
	}
	return "signin:" + p.FamilyID + "/" + p.Workspace
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

func (s *Server) post(w http.ResponseWriter, r *http.Request, svc *service.Service, p *service.Principal, owner string, now time.Time, consoleBase string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			jsonio.WriteRaw(w, http.StatusRequestEntityTooLarge, rpcError(nil, -32600, "the request is larger than 1 MiB"))
			return
		}
		jsonio.WriteRaw(w, http.StatusBadRequest, rpcError(nil, -32700, "the request cannot be read"))
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil || req.JSONRPC != "2.0" || req.Method == "" {
		jsonio.WriteRaw(w, http.StatusBadRequest, rpcError(nil, -32600, "expected one JSON-RPC 2.0 request or notification"))
		return
	}
	if req.Method == "initialize" {
		var in struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(req.Params, &in)
		version := ProtocolVersions[0]
		if slices.Contains(ProtocolVersions, in.ProtocolVersion) {
			version = in.ProtocolVersion
		}
		id := s.open(owner, now)
		w.Header().Set("Mcp-Session-Id", id)
		jsonio.WriteRaw(w, http.StatusOK, rpcResult(req.ID, map[string]any{
			"protocolVersion": version,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": "agentgate", "version": "1"},
			"instructions":    "Your agentgate workspace: your usage and spend, your budget, and the workspace's models with their limits and prices.",
		}))
		return
	}
	sid := r.Header.Get("Mcp-Session-Id")
	if sid == "" {
		jsonio.WriteRaw(w, http.StatusBadRequest, rpcError(req.ID, -32600, "Mcp-Session-Id is required after initialize"))
		return
	}
	if !s.touch(sid, owner, now) {
		jsonio.WriteRaw(w, http.StatusNotFound, rpcError(req.ID, -32001, "session not found: initialize again"))
		return
	}
	if len(req.ID) == 0 {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	switch req.Method {
	case "ping":
		jsonio.WriteRaw(w, http.StatusOK, rpcResult(req.ID, map[string]any{}))
	case "tools/list":
		list := toolList
		if ws, err := svc.WebsearchSetting(r.Context(), p); err == nil && ws.Enabled {
			list = append(slices.Clip(list), websearchTool)
		}
		jsonio.WriteRaw(w, http.StatusOK, rpcResult(req.ID, map[string]any{"tools": list}))
	case "tools/call":
		var call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &call); err != nil {
			jsonio.WriteRaw(w, http.StatusOK, rpcError(req.ID, -32602, "params must be {name, arguments}"))
			return
		}
		t := tools[call.Name]
		if t == nil {
			jsonio.WriteRaw(w, http.StatusOK, rpcError(req.ID, -32602, "unknown tool "+call.Name))
			return
		}
		env := &toolEnv{ctx: r.Context(), svc: svc, p: p, now: now, inferenceURL: base(s.opts.InferenceURL, r)}
		out, err := t(env, call.Arguments)
		jsonio.WriteRaw(w, http.StatusOK, rpcResult(req.ID, toolResult(out, err)))
	default:
		jsonio.WriteRaw(w, http.StatusOK, rpcError(req.ID, -32601, "method not found: "+req.Method))
	}
}

// open starts a session for owner, forgetting idle and, past the cap, the
// least recently used ones.
func (s *Server) open(owner string, now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ss := range s.sessions {
		if now.Sub(ss.lastUsed) > sessionIdle {
			delete(s.sessions, id)
		}
	}
	if len(s.sessions) >= maxSessions {
		ids := make([]string, 0, len(s.sessions))
		for id := range s.sessions {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return s.sessions[ids[i]].lastUsed.Before(s.sessions[ids[j]].lastUsed) })
		for _, id := range ids[:len(ids)-maxSessions+1] {
			delete(s.sessions, id)
		}
	}
	id := secrets.NewID("mcp_")
	s.sessions[id] = &session{owner: owner, lastUsed: now}
	return id
}

// touch reports whether sid is a live session of owner, and keeps it alive.
func (s *Server) touch(sid, owner string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[sid]
	if ss == nil || ss.owner != owner || now.Sub(ss.lastUsed) > sessionIdle {
		return false
	}
	ss.lastUsed = now
	return true
}

// end closes a session of owner.
func (s *Server) end(sid, owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sid]; ss != nil && ss.owner == owner {
		delete(s.sessions, sid)
		return true
	}
	return false
}

func rpcResult(id json.RawMessage, result any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "result": result}
}

func rpcError(id json.RawMessage, code int, msg string) map[string]any {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	return map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}}
}

// toolResult is a tool's answer: its JSON as text and as structured
// content, or the error's message with isError (a refusal of the matrix,
// a bad argument) — never a protocol error.
func toolResult(out any, err error) map[string]any {
	if err != nil {
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": apierr.As(err).Message}}, "isError": true}
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": string(b)}}, "structuredContent": out}
}

// toolEnv is what a tool runs with.
type toolEnv struct {
	ctx          context.Context
	svc          *service.Service
	p            *service.Principal
	now          time.Time
	inferenceURL string
}

type tool func(env *toolEnv, args json.RawMessage) (any, error)

var tools = map[string]tool{"my_usage": myUsage, "my_budget": myBudget, "workspace_models": workspaceModels, "websearch": websearch}

// websearchTool is listed when the workspace has hosted web search on.
var websearchTool = map[string]any{"name": "websearch",
	"description": "Search the web through the workspace's hosted search; each query is charged to your budget.",
	"inputSchema": map[string]any{"type": "object", "required": []string{"query"}, "properties": map[string]any{
		"query":       map[string]any{"type": "string", "description": "what to search for"},
		"max_results": map[string]any{"type": "integer", "minimum": 1, "maximum": 20}}}}

func websearch(env *toolEnv, args json.RawMessage) (any, error) {
	var in service.SearchQuery
	if err := decodeArgs(args, &in); err != nil {
		return nil, err
	}
	return env.svc.WebSearch(env.ctx, env.p, in)
}

var toolList = []map[string]any{
	{"name": "my_usage", "description": "Your gateway usage and spend over the last days (default 30): totals, and by day, by model and by agent session.",
		"inputSchema": map[string]any{"type": "object", "properties": map[string]any{
			"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 90, "description": "how many days back, today included"}}}},
	{"name": "my_budget", "description": "Your budget in this workspace: its limit and period, what you spent, what requests in flight hold, and what remains.",
		"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}}},
	{"name": "workspace_models", "description": "The models you can use in this workspace, by provider entry: limits, prices per million tokens and capabilities.",
		"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}}},
}

// decodeArgs reads a tool's arguments strictly: unknown members are an
// error the caller sees.
func decodeArgs(args json.RawMessage, v any) error {
	if len(args) == 0 || string(args) == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(args)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.BadRequest("arguments: %v", err)
	}
	return nil
}

type spend struct {
	Requests int64      `json:"requests"`
	Tokens   int64      `json:"tokens"`
	CostUSD  money.Pico `json:"cost_usd"`
}

func (s *spend) add(u *store.UsageRecord) {
	s.Requests++
	s.Tokens += u.Tokens.Total()
	s.CostUSD += u.Cost
}

func myUsage(env *toolEnv, args json.RawMessage) (any, error) {
	in := struct {
		Days int `json:"days"`
	}{Days: 30}
	if err := decodeArgs(args, &in); err != nil {
		return nil, err
	}
	if in.Days < 1 || in.Days > 90 {
		return nil, apierr.BadRequest("days must be from 1 to 90")
	}
	from := env.now.UTC().Truncate(24*time.Hour).AddDate(0, 0, 1-in.Days)
	total := spend{}
	byDay, byModel, bySession := map[string]*spend{}, map[string]*spend{}, map[string]*spend{}
	bucket := func(m map[string]*spend, k string) *spend {
		if m[k] == nil {
			m[k] = &spend{}
		}
		return m[k]
	}
	q := service.UsageQuery{Member: env.p.MemberID(), From: from, Limit: 1000}
	for {
		recs, next, err := env.svc.Usage(env.ctx, env.p, q)
		if err != nil {
			return nil, err
		}
		for _, u := range recs {
			total.add(u)
			bucket(byDay, u.Time.UTC().Format(time.DateOnly)).add(u)
			bucket(byModel, u.Model).add(u)
			if u.Session != "" {
				bucket(bySession, u.Session).add(u)
			}
		}
		if next == "" {
			break
		}
		q.Cursor = next
	}
	return map[string]any{"member_id": env.p.MemberID(), "from": from.Format(time.DateOnly), "total": total,
		"by_day": byDay, "by_model": byModel, "by_session": bySession}, nil
}

func myBudget(env *toolEnv, args json.RawMessage) (any, error) {
	if err := decodeArgs(args, &struct{}{}); err != nil {
		return nil, err
	}
	views, err := env.svc.Budgets(env.ctx, env.p)
	if err != nil {
		return nil, err
	}
	for _, v := range views {
		if v.MemberID == env.p.MemberID() {
			return v, nil
		}
	}
	return nil, fmt.Errorf("no budget row for member %s", env.p.MemberID())
}

func workspaceModels(env *toolEnv, args json.RawMessage) (any, error) {
	if err := decodeArgs(args, &struct{}{}); err != nil {
		return nil, err
	}
	cfg, err := env.svc.Config(env.ctx, env.p, env.inferenceURL)
	if err != nil {
		return nil, err
	}
	type entry struct {
		Provider string                           `json:"provider"`
		Name     string                           `json:"name"`
		BaseURL  string                           `json:"base_url"`
		Models   map[string]service.ProviderModel `json:"models"`
	}
	out := []entry{}
	for id, pe := range cfg.Providers {
		out = append(out, entry{Provider: id, Name: pe.Name, BaseURL: pe.Settings.BaseURL, Models: pe.Models})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Provider < out[j].Provider })
	return map[string]any{"providers": out}, nil
}

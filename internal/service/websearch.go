package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/ledger"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// Hosted web search: a workspace names a search connection (kind search,
// its credential sealed like a provider's) and a price per query. Members
// search through the gateway (POST {inference_url}/websearch) and the
// Console's MCP server; each query is reserved against their budgets at
// that price and charged only when the search API answered.

// WebsearchInput turns hosted web search on (a connection of kind search,
// and a price per query in USD) or off (connection "").
type WebsearchInput struct {
	Connection    string        `json:"connection"`
	PricePerQuery *money.Micros `json:"price_per_query_usd"`
}

// WebsearchView is the setting as the APIs show it.
type WebsearchView struct {
	Enabled       bool         `json:"enabled"`
	Connection    string       `json:"connection,omitempty"`
	PricePerQuery money.Micros `json:"price_per_query_usd"`
}

func websearchView(w *store.Workspace) *WebsearchView {
	if w.Websearch == nil {
		return &WebsearchView{}
	}
	return &WebsearchView{Enabled: true, Connection: w.Websearch.Connection, PricePerQuery: w.Websearch.PricePerQuery}
}

// WebsearchSetting reads the workspace's web search setting.
func (s *Service) WebsearchSetting(ctx context.Context, p *Principal) (*WebsearchView, error) {
	if err := Require(p, OpReadConfig); err != nil {
		return nil, err
	}
	var out *WebsearchView
	err := s.Store.View(ctx, func(tx store.Tx) error {
		w, err := workspace(tx, p.Workspace)
		if err == nil {
			out = websearchView(w)
		}
		return err
	})
	return out, err
}

// SetWebsearch turns hosted web search on or off (managing connections and
// pricing).
func (s *Service) SetWebsearch(ctx context.Context, p *Principal, in WebsearchInput) (*WebsearchView, error) {
	if err := Require(p, OpManageConnections); err != nil {
		return nil, err
	}
	var out *WebsearchView
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		w, err := workspace(tx, p.Workspace)
		if err != nil {
			return err
		}
		if in.Connection == "" {
			w.Websearch = nil
		} else {
			c, err := connection(tx, p.Workspace, in.Connection)
			if err != nil {
				return err
			}
			if c.Kind != store.KindSearch {
				return apierr.BadRequest("connection %s is of kind %s; web search needs a connection of kind search", c.ID, c.Kind)
			}
			if in.PricePerQuery == nil {
				return apierr.BadRequest("price_per_query_usd is required")
			}
			if err := money.ValidatePrice("price_per_query_usd", *in.PricePerQuery); err != nil {
				return apierr.BadRequest("%v", err)
			}
			w.Websearch = &store.Websearch{Connection: c.ID, PricePerQuery: *in.PricePerQuery}
		}
		out = websearchView(w)
		return tx.PutWorkspace(w)
	})
	return out, err
}

// SearchQuery is one web search.
type SearchQuery struct {
	Query      string `json:"query"`
	MaxResults int    `json:"max_results,omitempty"`
}

// SearchResult is one hit.
type SearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Content string `json:"content"`
}

// SearchAnswer is what a search returns.
type SearchAnswer struct {
	Results []SearchResult `json:"results"`
	CostUSD money.Pico     `json:"cost_usd"`
}

// searchClient calls search APIs; a var so that nothing else shares it.
var searchClient = &http.Client{Timeout: 20 * time.Second}

// WebSearch runs one query for the principal: 404 WebsearchDisabled when
// the workspace has none, 402 when the budget has no room for the price,
// 502 WebsearchFailed (nothing charged) when the search API is unreachable
// or answers anything but results. Every query leaves a usage record.
func (s *Service) WebSearch(ctx context.Context, p *Principal, q SearchQuery) (*SearchAnswer, error) {
	if err := Require(p, OpInference); err != nil {
		return nil, err
	}
	q.Query = strings.TrimSpace(q.Query)
	if q.Query == "" || utf8.RuneCountInString(q.Query) > 2000 {
		return nil, apierr.BadRequest("query must be 1 to 2000 characters")
	}
	if q.MaxResults == 0 {
		q.MaxResults = 5
	}
	if q.MaxResults < 1 || q.MaxResults > 20 {
		return nil, apierr.BadRequest("max_results must be from 1 to 20")
	}
	var ws *store.Workspace
	var conn *store.Connection
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if ws, err = workspace(tx, p.Workspace); err != nil || ws.Websearch == nil {
			return err
		}
		conn, err = connection(tx, p.Workspace, ws.Websearch.Connection)
		return err
	})
	if err != nil {
		return nil, err
	}
	if ws.Websearch == nil {
		return nil, apierr.NotFound("WebsearchDisabled", "this workspace has no hosted web search")
	}
	price := money.Pico(ws.Websearch.PricePerQuery) * money.PicoPerMicro
	res, err := s.Ledger.Reserve(ctx, p.Workspace, p.MemberID(), price)
	var exceeded *ledger.ExceededError
	if errors.As(err, &exceeded) {
		return nil, apierr.New(http.StatusPaymentRequired, "BudgetExceeded", "budget exceeded: %s USD remaining of %s USD; a web search costs %s USD",
			exceeded.Remaining, exceeded.Limit, exceeded.Needed)
	}
	if err != nil {
		return nil, err
	}
	now := s.now()
	rec := &store.UsageRecord{ID: ledger.UsageID(now), Time: now, Workspace: p.Workspace, MemberID: p.MemberID(), MemberKind: store.MemberPerson,
		KeyID: p.KeyID, FamilyID: p.FamilyID, Connection: conn.ID, Format: "websearch", Operation: store.OpWebsearch, Model: "websearch"}
	if p.Kind == KindServiceKey {
		rec.MemberKind = store.MemberServiceAccount
	}
	results, serr := s.search(ctx, conn, q)
	if serr != nil {
		rec.Status = http.StatusBadGateway
		if err := res.Settle(context.WithoutCancel(ctx), rec); err != nil {
			return nil, err
		}
		return nil, serr
	}
	rec.Status, rec.Cost = http.StatusOK, price
	if err := res.Settle(context.WithoutCancel(ctx), rec); err != nil {
		return nil, err
	}
	return &SearchAnswer{Results: results, CostUSD: price}, nil
}

// search calls the connection's search API.
func (s *Service) search(ctx context.Context, conn *store.Connection, q SearchQuery) ([]SearchResult, error) {
	failed := func(format string, a ...any) error {
		return apierr.New(http.StatusBadGateway, "WebsearchFailed", "web search failed: "+format, a...)
	}
	cred, err := s.Credential(conn)
	if err != nil {
		return nil, failed("the search connection's credential cannot be used")
	}
	body, _ := json.Marshal(q)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(conn.BaseURL, "/")+"/search", bytes.NewReader(body))
	if err != nil {
		return nil, failed("the search connection's base URL is invalid")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+cred)
	for k, v := range conn.Headers {
		req.Header.Set(k, v)
	}
	resp, err := searchClient.Do(req)
	if err != nil {
		return nil, failed("the search API could not be reached")
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 2<<20))
	if err != nil {
		return nil, failed("the search API's answer could not be read")
	}
	if resp.StatusCode != http.StatusOK {
		return nil, failed("the search API answered %d", resp.StatusCode)
	}
	var out struct {
		Results *[]SearchResult `json:"results"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Results == nil {
		return nil, failed("the search API's answer is not {\"results\": [...]}")
	}
	results := *out.Results
	if len(results) > q.MaxResults {
		results = results[:q.MaxResults]
	}
	for _, r := range results {
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, failed("the search API answered a result without an http(s) URL")
		}
	}
	return results, nil
}

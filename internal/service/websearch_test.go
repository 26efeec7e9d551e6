package service_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func TestWebSearch(t *testing.T) {
	e := newEnv(t)
	f := e.fixture("acme")
	admin := e.principal(f.adminTok, "")
	var gotAuth, gotQuery string
	answer := `{"results":[{"title":"Go","url":"https://go.dev","content":"The Go language"},{"title":"Caddy","url":"https://caddyserver.com","content":"A server"}]}`
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		var q map[string]any
		json.NewDecoder(r.Body).Decode(&q)
		gotQuery, _ = q["query"].(string)
		if r.URL.Path != "/v1/search" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(answer))
	}))
	defer api.Close()
	conn, err := e.svc.CreateConnection(ctx, admin, service.ConnectionInput{Name: "Search", Kind: store.KindSearch, BaseURL: api.URL + "/v1", Credential: "search-SECRET"})
	noErr(t, "search connection", err)
	llm, _ := e.svc.CreateConnection(ctx, admin, connInput(store.KindOpenAI, nil))

	key := e.principal(f.inference.Key, "")
	_, err = e.svc.WebSearch(ctx, key, service.SearchQuery{Query: "go"})
	wantErr(t, "disabled", err, http.StatusNotFound, "WebsearchDisabled")
	price := money.Micros(10_000) // $0.01
	_, err = e.svc.SetWebsearch(ctx, admin, service.WebsearchInput{Connection: llm.ID, PricePerQuery: &price})
	wantErr(t, "not a search connection", err, http.StatusBadRequest, "InvalidRequest")
	bad := money.Micros(-1)
	_, err = e.svc.SetWebsearch(ctx, admin, service.WebsearchInput{Connection: conn.ID, PricePerQuery: &bad})
	wantErr(t, "negative price", err, http.StatusBadRequest, "InvalidRequest")
	_, err = e.svc.SetWebsearch(ctx, e.principal(f.memberTok, ""), service.WebsearchInput{Connection: conn.ID, PricePerQuery: &price})
	wantErr(t, "member", err, http.StatusForbidden, "Forbidden")
	v, err := e.svc.SetWebsearch(ctx, admin, service.WebsearchInput{Connection: conn.ID, PricePerQuery: &price})
	noErr(t, "enable", err)
	if !v.Enabled {
		t.Fatal("not enabled")
	}
	cfg, _ := e.svc.Config(ctx, key, "https://gw")
	if !cfg.Websearch.Enabled {
		t.Fatal("the config does not say web search is on")
	}

	ans, err := e.svc.WebSearch(ctx, key, service.SearchQuery{Query: "  golang  ", MaxResults: 1})
	noErr(t, "search", err)
	if len(ans.Results) != 1 || ans.Results[0].URL != "https://go.dev" || ans.CostUSD != 10_000_000_000 || gotAuth != "Bearer search-SECRET" || gotQuery != "golang" {
		t.Fatalf("answer %+v auth %q query %q", ans, gotAuth, gotQuery)
	}
	for _, c := range []struct {
		what, answer string
	}{{"garbage", "<html>nope</html>"}, {"no results", `{"hits":[]}`}, {"a javascript: URL", `{"results":[{"title":"x","url":"javascript:alert(1)","content":""}]}`}} {
		answer = c.answer
		_, err = e.svc.WebSearch(ctx, key, service.SearchQuery{Query: "x"})
		wantErr(t, c.what, err, http.StatusBadGateway, "WebsearchFailed")
	}
	api.Close() // unreachable
	_, err = e.svc.WebSearch(ctx, key, service.SearchQuery{Query: "x"})
	wantErr(t, "unreachable", err, http.StatusBadGateway, "WebsearchFailed")
	for _, q := range []service.SearchQuery{{Query: ""}, {Query: strings.Repeat("x", 2001)}, {Query: "x", MaxResults: 50}} {
		_, err = e.svc.WebSearch(ctx, key, q)
		wantErr(t, "bad query", err, http.StatusBadRequest, "InvalidRequest")
	}
	// Only the answered query was charged; every query left a record.
	e.svc.Ledger.Wait()
	recs, _, err := e.svc.Usage(ctx, e.principal(f.all.Key, ""), service.UsageQuery{Limit: 100})
	noErr(t, "usage", err)
	var total money.Pico
	n := 0
	for _, r := range recs {
		if r.Operation == store.OpWebsearch {
			n++
			total += r.Cost
		}
	}
	if n != 5 || total != 10_000_000_000 {
		t.Fatalf("%d web search records costing %s, want 5 costing 0.01", n, total)
	}
	// Budgets hold: no room, 402.
	limit := money.Micros(5_000)
	_, err = e.svc.SetBudget(ctx, admin, f.sa, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly})
	noErr(t, "budget", err)
	_, err = e.svc.WebSearch(ctx, key, service.SearchQuery{Query: "x"})
	wantErr(t, "over budget", err, http.StatusPaymentRequired, "BudgetExceeded")
	// Off again.
	_, err = e.svc.SetWebsearch(ctx, admin, service.WebsearchInput{})
	noErr(t, "disable", err)
	_, err = e.svc.WebSearch(ctx, key, service.SearchQuery{Query: "x"})
	wantErr(t, "disabled again", err, http.StatusNotFound, "WebsearchDisabled")
}

package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// POST {inference_url}/websearch: the workspace's hosted web search with a
// gateway credential, charged per query; the key never reaches the search
// API (its own credential does).
func TestWebsearchRoute(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	if resp, body := e.post(t, "/websearch", `{"query":"go"}`, "Authorization", "Bearer "+e.key); resp.StatusCode != 404 || errorTag(t, body) != "WebsearchDisabled" {
		t.Fatalf("disabled: %d %s", resp.StatusCode, body)
	}
	var gotAuth string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.Write([]byte(`{"results":[{"title":"Go","url":"https://go.dev","content":"Go"}]}`))
	}))
	defer api.Close()
	sc, err := e.svc.CreateConnection(ctx, op, service.ConnectionInput{Name: "Search", Kind: store.KindSearch, BaseURL: api.URL, Credential: "search-cred"})
	if err != nil {
		t.Fatal(err)
	}
	price := money.Micros(5_000)
	if _, err := e.svc.SetWebsearch(ctx, op, service.WebsearchInput{Connection: sc.ID, PricePerQuery: &price}); err != nil {
		t.Fatal(err)
	}
	defer e.svc.SetWebsearch(ctx, op, service.WebsearchInput{})
	n := e.usageCount()
	resp, body := e.post(t, "/websearch", `{"query":"go","max_results":3}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 || !strings.Contains(body, "https://go.dev") || gotAuth != "Bearer search-cred" {
		t.Fatalf("search: %d %s (auth %q)", resp.StatusCode, body, gotAuth)
	}
	if rec := e.usageSince(t, n, 1)[0]; rec.Operation != store.OpWebsearch || rec.Cost != 5_000_000_000 || rec.Connection != sc.ID {
		t.Fatalf("usage record %+v", rec)
	}
	for _, c := range []struct {
		method, body string
		hdr          []string
		status       int
	}{
		{"POST", `{"query":"go"}`, nil, 401},
		{"GET", "", []string{"Authorization", "Bearer " + e.key}, 405},
		{"POST", `{"query":"go","colour":"red"}`, []string{"Authorization", "Bearer " + e.key}, 400},
		{"POST", `{"query":""}`, []string{"Authorization", "Bearer " + e.key}, 400},
	} {
		if resp, body := e.do(t, c.method, "/websearch", c.body, c.hdr...); resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s", c.method, c.body, resp.StatusCode, body)
		}
	}
}

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

func (e *env) noneReceived(t *testing.T) {
	t.Helper()
	for kind, p := range e.providers {
		if r := p.Received(); len(r) != 0 {
			t.Errorf("%s: %d requests reached the provider; first: %s %s", kind, len(r), r[0].Method, r[0].Path)
		}
	}
}

// Token counts (Anthropic count_tokens, Google countTokens) are forwarded
// like the main route — credential swapped, model checked and rewritten,
// anthropic-beta passed — and recorded at no cost.
func TestCountTokens(t *testing.T) {
	e := setup(t)
	before := e.usageCount()

	body := `{"model":"claude-sonnet","messages":[{"role":"user","content":"hi"}]}`
	resp, got := e.post(t, "/custom/"+e.conns["anthropic"]+"/v1/messages/count_tokens", body,
		"x-api-key", e.key, "anthropic-version", "2023-06-01", "anthropic-beta", "token-counting-2024-11-01")
	if resp.StatusCode != 200 || jsonField(t, got, "input_tokens") != float64(fakeprovider.InputTokens) {
		t.Fatalf("anthropic count_tokens: %d %s", resp.StatusCode, got)
	}
	rec := e.providers["anthropic"].Last()
	if rec.Path != "/v1/messages/count_tokens" || string(rec.Body) != strings.Replace(body, "claude-sonnet", "claude-sonnet-4-5-20250929", 1) {
		t.Fatalf("upstream %s %s", rec.Path, rec.Body)
	}
	if rec.Header.Get("Anthropic-Beta") != "token-counting-2024-11-01" || rec.Header.Get("X-Api-Key") != providerSecret {
		t.Fatalf("upstream headers %v", rec.Header)
	}

	resp, got = e.post(t, "/custom/"+e.conns["google"]+"/v1beta/models/gemini-pro:countTokens",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, "x-goog-api-key", e.key)
	if resp.StatusCode != 200 || jsonField(t, got, "totalTokens") != float64(fakeprovider.InputTokens) {
		t.Fatalf("google countTokens: %d %s", resp.StatusCode, got)
	}
	if rec := e.providers["google"].Last(); rec.Path != "/v1beta/models/gemini-2.5-pro:countTokens" || rec.Header.Get("X-Goog-Api-Key") != providerSecret {
		t.Fatalf("google upstream %s %v", rec.Path, rec.Header)
	}
	// The model a Google count may also name in its body must be the
	// path's, and is rewritten with it.
	resp, got = e.post(t, "/custom/"+e.conns["google"]+"/v1beta/models/gemini-pro:countTokens",
		`{"generateContentRequest":{"model":"models/gemini-pro","contents":[]}}`, "x-goog-api-key", e.key)
	if resp.StatusCode != 200 {
		t.Fatalf("google countTokens with generateContentRequest: %d %s", resp.StatusCode, got)
	}
	if b := string(e.providers["google"].Last().Body); b != `{"generateContentRequest":{"model":"models/gemini-2.5-pro","contents":[]}}` {
		t.Fatalf("google upstream body %s", b)
	}
	const counted = 3 // requests above, each recorded
	e.providers["google"].Reset()
	e.providers["anthropic"].Reset()

	// Refusals: a model that is not enabled, or a body naming another.
	for _, c := range []struct {
		path, body, format string
		hdr                []string
		status             int
		tag                string
	}{
		{"/custom/" + e.conns["anthropic"] + "/v1/messages/count_tokens", `{"model":"claude-off","messages":[]}`, "anthropic", []string{"x-api-key", e.key}, 403, "ModelNotEnabled"},
		{"/custom/" + e.conns["anthropic"] + "/v1/messages/count_tokens", `{"messages":[]}`, "anthropic", []string{"x-api-key", e.key}, 400, "InvalidRequest"},
		{"/custom/" + e.conns["anthropic"] + "/v1/messages/count_tokens", `{"model":"claude-sonnet","messages":[],"model":"claude-off"}`, "anthropic", []string{"x-api-key", e.key}, 400, "InvalidRequest"},
		{"/custom/" + e.conns["google"] + "/v1beta/models/o1:countTokens", `{"contents":[]}`, "google", []string{"x-goog-api-key", e.key}, 403, "ModelNotEnabled"},
		{"/custom/" + e.conns["google"] + "/v1beta/models/gemini-flash:countTokens", `{"generateContentRequest":{"model":"models/gemini-pro","contents":[]}}`, "google", []string{"x-goog-api-key", e.key}, 400, "InvalidRequest"},
		{"/custom/" + e.conns["google"] + "/v1beta/models/gemini-flash:countTokens", `{"generateContentRequest":{"model":"models/gemini-flash","model":"models/gemini-pro"}}`, "google", []string{"x-goog-api-key", e.key}, 400, "InvalidRequest"},
		{"/custom/" + e.conns["google"] + "/v1beta/models/gemini-flash:countTokens", `{"generate_content_request":{"model":"models/gemini-pro"}}`, "google", []string{"x-goog-api-key", e.key}, 400, "InvalidRequest"},
		{"/custom/" + e.conns["google"] + "/v1beta/models/gemini-flash:countTokens", `{"generateContentRequest":{},"generate_content_request":{"model":"models/gemini-pro"}}`, "google", []string{"x-goog-api-key", e.key}, 400, "InvalidRequest"},
		{"/custom/" + e.conns["anthropic"] + "/v1/messages/count_tokens", `{"model":"claude-sonnet","messages":[]}`, "anthropic", []string{"x-api-key", "ag_sk_nope"}, 401, "Unauthorized"},
	} {
		resp, got := e.post(t, c.path, c.body, c.hdr...)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s", c.path, c.body, resp.StatusCode, got)
			continue
		}
		envelopeOf(t, c.format, got, c.status, c.tag)
	}
	e.noneReceived(t)

	// Recorded at no cost, marked as token counts (the refusals too).
	recs := e.usageSince(t, before, counted+8)
	for i, r := range recs {
		if r.Operation != store.OpCountTokens || r.Cost != 0 || r.Tokens != (store.Tokens{}) || r.Streamed {
			t.Errorf("usage record %d: %+v", i, r)
		}
	}
	// A record is written when its answer has gone out, so records of
	// consecutive requests may land in either order: find them by content.
	found := map[string]bool{}
	for _, r := range recs {
		switch {
		case r.Status == 200 && r.Format == "anthropic" && r.Model == "claude-sonnet" && r.UpstreamModel == "claude-sonnet-4-5-20250929":
			found["anthropic"] = true
		case r.Status == 200 && r.Format == "google" && r.Model == "gemini-pro" && r.UpstreamModel == "gemini-2.5-pro":
			found["google"] = true
		case r.Status == 403 && r.Model == "claude-off":
			found["refused"] = true
		}
	}
	if !found["anthropic"] || !found["google"] || !found["refused"] {
		t.Errorf("records found: %v", found)
	}

	// So must a model named at the top of a Google body, on any route.
	resp, got = e.post(t, "/custom/"+e.conns["google"]+"/v1beta/models/gemini-pro:generateContent",
		`{"model":"gemini-pro","contents":[]}`, "x-goog-api-key", e.key)
	if b := string(e.providers["google"].Last().Body); resp.StatusCode != 200 || b != `{"model":"gemini-2.5-pro","contents":[]}` {
		t.Fatalf("google body model: %d %s; upstream body %s", resp.StatusCode, got, b)
	}
	if resp, got = e.post(t, "/custom/"+e.conns["google"]+"/v1beta/models/gemini-pro:generateContent",
		`{"model":"models/o1","contents":[]}`, "x-goog-api-key", e.key); resp.StatusCode != 400 {
		t.Fatalf("google body naming another model: %d %s", resp.StatusCode, got)
	}
}

// A member whose budget is spent can still count tokens: a count is never
// reserved against the budget.
func TestCountTokensOverBudget(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	sa, _ := e.svc.CreateServiceAccount(ctx, op, "broke")
	k, _ := e.svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "k", Permission: store.PermissionInference})
	zero := money.Micros(0)
	if _, err := e.svc.SetBudget(ctx, op, sa.ID, service.BudgetInput{LimitUSD: &zero, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	conn := "/custom/" + e.conns["anthropic"] + "/v1/messages"
	if resp, got := e.post(t, conn, `{"model":"claude-sonnet","max_tokens":10,"messages":[]}`, "x-api-key", k.Key); resp.StatusCode != 402 {
		t.Fatalf("a generation over budget: %d %s", resp.StatusCode, got)
	}
	if resp, got := e.post(t, conn+"/count_tokens", `{"model":"claude-sonnet","messages":[]}`, "x-api-key", k.Key); resp.StatusCode != 200 {
		t.Fatalf("count_tokens over budget: %d %s", resp.StatusCode, got)
	}
	if resp, got := e.post(t, "/custom/"+e.conns["google"]+"/models/gemini-flash:countTokens", `{"contents":[]}`, "x-goog-api-key", k.Key); resp.StatusCode != 200 {
		t.Fatalf("countTokens over budget: %d %s", resp.StatusCode, got)
	}
	recs, _, err := e.svc.Usage(ctx, op, service.UsageQuery{Member: sa.ID, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Status != 402 || recs[1].Status != 200 || recs[1].Operation != store.OpCountTokens ||
		recs[2].Operation != store.OpCountTokens || recs[1].Cost != 0 {
		t.Fatalf("usage of the member: %+v", recs)
	}
}

// GET /models lists the connection's enabled models under the names
// clients send, in the list shape of the connection's kind, from the
// store: no provider call, no usage record.
func TestModelLists(t *testing.T) {
	e := setup(t)
	before := e.usageCount()
	type check func(t *testing.T, body string)
	ids := func(path, idField string, want ...string) check {
		return func(t *testing.T, body string) {
			t.Helper()
			list, _ := jsonField(t, body, path).([]any)
			var got []string
			for _, m := range list {
				got = append(got, m.(map[string]any)[idField].(string))
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("ids %v, want %v: %s", got, want, body)
			}
		}
	}
	openai := "/custom/" + e.conns["openai"]
	anthropic := "/custom/" + e.conns["anthropic"]
	google := "/custom/" + e.conns["google"]
	for _, c := range []struct {
		path  string
		hdr   []string
		check check
		more  map[string]any
	}{
		{openai + "/v1/models", []string{"Authorization", "Bearer " + e.key}, ids("data", "id", "gpt-4o", "gpt-4o-mini"),
			map[string]any{"object": "list", "data.0.object": nil}},
		{openai + "/models", []string{"Authorization", "Bearer " + e.key}, ids("data", "id", "gpt-4o", "gpt-4o-mini"), nil},
		{anthropic + "/v1/models?limit=1000", []string{"x-api-key", e.key, "anthropic-version", "2023-06-01"}, ids("data", "id", "claude-sonnet"),
			map[string]any{"has_more": false, "first_id": "claude-sonnet", "last_id": "claude-sonnet"}},
		{anthropic + "/v1/models", []string{"Authorization", "Bearer " + e.key}, ids("data", "display_name", "claude-sonnet"), nil},
		{google + "/v1beta/models", []string{"x-goog-api-key", e.key}, ids("models", "name", "models/gemini-flash", "models/gemini-pro"), nil},
		{google + "/v1beta/models?key=" + e.key + "&pageSize=50", nil, ids("models", "displayName", "gemini-flash", "gemini-pro"), nil},
		{google + "/v1/models", []string{"x-goog-api-key", e.key}, ids("models", "name", "models/gemini-flash", "models/gemini-pro"), nil},
		{openai + "/v1/models/gpt-4o", []string{"Authorization", "Bearer " + e.key}, nil, map[string]any{"id": "gpt-4o", "object": "model", "owned_by": "openai"}},
		{anthropic + "/v1/models/claude-sonnet", []string{"x-api-key", e.key}, nil, map[string]any{"id": "claude-sonnet", "type": "model"}},
		{google + "/v1beta/models/gemini-pro", []string{"x-goog-api-key", e.key}, nil, map[string]any{"name": "models/gemini-pro", "displayName": "gemini-pro"}},
	} {
		t.Run(c.path, func(t *testing.T) {
			resp, got := e.do(t, "GET", c.path, "", c.hdr...)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %s", resp.StatusCode, got)
			}
			if c.check != nil {
				c.check(t, got)
			}
			for k, v := range c.more {
				if k == "data.0.object" {
					if list := jsonField(t, got, "data").([]any); list[0].(map[string]any)["object"] != "model" {
						t.Fatalf("openai model object %s", got)
					}
					continue
				}
				if jsonField(t, got, k) != v {
					t.Fatalf("%s = %v, want %v: %s", k, jsonField(t, got, k), v, got)
				}
			}
			if strings.Contains(got, "2024-08-06") || strings.Contains(got, "claude-sonnet-4-5") || strings.Contains(got, "2.5-pro") {
				t.Fatalf("an upstream id is listed: %s", got)
			}
		})
	}
	// The list is deterministic.
	_, a := e.do(t, "GET", openai+"/v1/models", "", "Authorization", "Bearer "+e.key)
	_, b := e.do(t, "GET", openai+"/v1/models", "", "Authorization", "Bearer "+e.key)
	if a != b {
		t.Fatalf("two listings differ:\n%s\n%s", a, b)
	}
	// Disabled or unknown models are not found; a listing needs a key and GET.
	for _, c := range []struct {
		method, path, format string
		hdr                  []string
		status               int
		tag                  string
	}{
		{"GET", openai + "/v1/models/o1", "openai", []string{"Authorization", "Bearer " + e.key}, 404, "ModelNotFound"},
		{"GET", anthropic + "/v1/models/claude-off", "anthropic", []string{"x-api-key", e.key}, 404, "ModelNotFound"},
		{"GET", google + "/v1beta/models/nope", "google", []string{"x-goog-api-key", e.key}, 404, "ModelNotFound"},
		{"GET", openai + "/v1/models", "openai", nil, 401, "Unauthorized"},
		{"GET", anthropic + "/v1/models", "anthropic", []string{"x-api-key", "ag_sk_nope"}, 401, "Unauthorized"},
		{"GET", google + "/v1beta/models", "google", nil, 401, "Unauthorized"},
		{"GET", anthropic + "/v1/models", "anthropic", []string{"x-api-key", e.otherKey}, 404, "ConnectionNotFound"},
		{"POST", anthropic + "/v1/models", "anthropic", []string{"x-api-key", e.key}, 405, "MethodNotAllowed"},
	} {
		resp, got := e.do(t, c.method, c.path, "", c.hdr...)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, got)
			continue
		}
		envelopeOf(t, c.format, got, c.status, c.tag)
		if c.status == 405 && resp.Header.Get("Allow") != "GET" {
			t.Errorf("Allow %q", resp.Header.Get("Allow"))
		}
	}
	e.noneReceived(t)
	if n := e.usageCount(); n != before {
		t.Fatalf("listings left %d usage records", n-before)
	}
}

// The credential is checked before the route, and every gateway-made error
// uses the envelope of the connection's format; before the connection is
// known, the path's, then the credential slot's, then OpenAI's.
func TestErrorEnvelopeRules(t *testing.T) {
	e := setup(t)
	openai := "/custom/" + e.conns["openai"]
	anthropic := "/custom/" + e.conns["anthropic"]
	google := "/custom/" + e.conns["google"]
	bad := flipLast(e.key)
	for _, c := range []struct {
		name, method, path, format string
		hdr                        []string
		status                     int
		tag                        string
	}{
		{"unknown route, anthropic connection", "POST", anthropic + "/v1/embeddings", "anthropic", []string{"x-api-key", e.key}, 404, "NotFound"},
		{"unknown route, anthropic connection, bearer key", "POST", anthropic + "/v1/embeddings", "anthropic", []string{"Authorization", "Bearer " + e.key}, 404, "NotFound"},
		{"unknown route, google connection, bearer key", "POST", google + "/v1/embeddings", "google", []string{"Authorization", "Bearer " + e.key}, 404, "NotFound"},
		{"unknown google method", "POST", google + "/v1beta/models/gemini-pro:embedContent", "google", []string{"x-goog-api-key", e.key}, 404, "NotFound"},
		{"unknown route, openai connection", "POST", openai + "/v1/embeddings", "openai", []string{"x-api-key", e.key}, 404, "NotFound"},
		{"chat route on an anthropic connection", "POST", anthropic + "/v1/chat/completions", "anthropic", []string{"Authorization", "Bearer " + e.key}, 404, "NotFound"},
		{"bad key, unknown route, x-api-key", "POST", openai + "/v1/embeddings", "anthropic", []string{"x-api-key", bad}, 401, "Unauthorized"},
		{"bad key, unknown route, x-goog-api-key", "POST", openai + "/v1/embeddings", "google", []string{"x-goog-api-key", bad}, 401, "Unauthorized"},
		{"bad key, unknown route, ?key=", "POST", openai + "/v1/embeddings?key=" + bad, "google", nil, 401, "Unauthorized"},
		{"bad key, unknown route, bearer", "POST", anthropic + "/v1/embeddings", "openai", []string{"Authorization", "Bearer " + bad}, 401, "Unauthorized"},
		{"no key, unknown route", "POST", anthropic + "/v1/embeddings", "openai", nil, 401, "Unauthorized"},
		{"no key, unknown route, anthropic-version", "POST", anthropic + "/v1/embeddings", "anthropic", []string{"anthropic-version", "2023-06-01"}, 401, "Unauthorized"},
		{"bad key on a path of a format", "POST", anthropic + "/v1/messages", "anthropic", []string{"Authorization", "Bearer " + bad}, 401, "Unauthorized"},
		{"bad key on a google path", "POST", google + "/v1beta/models/gemini-pro:generateContent", "google", []string{"x-api-key", bad}, 401, "Unauthorized"},
		{"bad key, unknown connection", "POST", "/custom/conn_nope/v1/messages", "anthropic", []string{"Authorization", "Bearer " + bad}, 401, "Unauthorized"},
		{"unknown connection", "POST", "/custom/conn_nope/v1/messages", "anthropic", []string{"Authorization", "Bearer " + e.key}, 404, "ConnectionNotFound"},
		{"invalid connection id", "POST", "/custom/conn.nope/v1/messages", "openai", []string{"Authorization", "Bearer " + e.key}, 404, "NotFound"},
		{"invalid connection id, bad key", "POST", "/custom/conn.nope/v1/messages", "anthropic", []string{"x-api-key", bad}, 401, "Unauthorized"},
		{"encoded slash, bad key", "POST", anthropic + "/v1/messages%2Fcount_tokens", "anthropic", []string{"x-api-key", bad}, 401, "Unauthorized"},
		{"encoded slash", "POST", anthropic + "/v1/messages%2Fcount_tokens", "anthropic", []string{"x-api-key", e.key}, 400, "InvalidRequest"},
		{"dot segment", "POST", google + "/v1beta/models/./gemini-pro:generateContent", "google", []string{"Authorization", "Bearer " + e.key}, 400, "InvalidRequest"},
		{"GET on messages", "GET", anthropic + "/v1/messages", "anthropic", []string{"x-api-key", e.key}, 405, "MethodNotAllowed"},
		{"GET on messages, bearer", "GET", anthropic + "/v1/messages", "anthropic", []string{"Authorization", "Bearer " + e.key}, 405, "MethodNotAllowed"},
		{"GET on count_tokens", "GET", anthropic + "/v1/messages/count_tokens", "anthropic", []string{"x-api-key", e.key}, 405, "MethodNotAllowed"},
		{"GET on generateContent", "GET", google + "/v1beta/models/gemini-pro:generateContent", "google", []string{"x-goog-api-key", e.key}, 405, "MethodNotAllowed"},
		{"GET on chat, no key", "GET", openai + "/v1/chat/completions", "openai", nil, 401, "Unauthorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, e.base+"/x", strings.NewReader(`{"model":"claude-sonnet","max_tokens":1,"messages":[]}`))
			path, query, _ := strings.Cut(c.path, "?")
			req.URL.Opaque, req.URL.RawQuery = path, query // send the path exactly as written
			for i := 0; i+1 < len(c.hdr); i += 2 {
				req.Header.Set(c.hdr[i], c.hdr[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			envelopeOf(t, c.format, string(b), c.status, c.tag)
			if c.status == 405 && resp.Header.Get("Allow") != "POST" {
				t.Fatalf("Allow %q", resp.Header.Get("Allow"))
			}
		})
	}
	e.noneReceived(t)
}

package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// usageSince waits until the workspace has more than n usage records and
// returns those after the first n.
func (e *env) usageSince(t *testing.T, n, want int) []*store.UsageRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var all []*store.UsageRecord
		e.svc.Store.View(context.Background(), func(tx store.Tx) error {
			return tx.Usage(e.ws, "", func(u *store.UsageRecord) (bool, error) { all = append(all, u); return true, nil })
		})
		if len(all) >= n+want {
			return all[n:]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d usage records, want %d more than %d", len(all), want, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) usageCount() int {
	e.svc.Ledger.Wait() // settlements of earlier requests land first
	n := 0
	e.svc.Store.View(context.Background(), func(tx store.Tx) error {
		return tx.Usage(e.ws, "", func(*store.UsageRecord) (bool, error) { n++; return true, nil })
	})
	return n
}

// Pricing of the harness models: input 2.5, output 10 USD per million;
// cache reads and writes at the input price, reasoning at the output price.
func pico(input, cacheRead, cacheWrite, output, reasoning int64) money.Pico {
	return money.Pico((input+cacheRead+cacheWrite)*2_500_000 + (output+reasoning)*10_000_000)
}

func TestUsageOfEveryFormat(t *testing.T) {
	e := setup(t)
	fp := fakeprovider.InputTokens - fakeprovider.CachedTokens // uncached prompt
	out := fakeprovider.OutputTokens - fakeprovider.ReasoningTokens
	openAITokens := store.Tokens{Input: int64(fp), CacheRead: fakeprovider.CachedTokens, Output: int64(out), Reasoning: fakeprovider.ReasoningTokens}
	anthropicTokens := store.Tokens{Input: fakeprovider.InputTokens, CacheRead: fakeprovider.CachedTokens, CacheWrite: fakeprovider.CacheWriteTokens, Output: fakeprovider.OutputTokens}
	auth := []string{"Authorization", "Bearer " + e.key}
	cases := []struct {
		name, path, body string
		stream           bool
		want             store.Tokens
		model            string
	}{
		{"chat", "/custom/" + e.conns["openai"] + "/chat/completions", `{"model":"gpt-4o","messages":[]}`, false, openAITokens, "gpt-4o"},
		{"chat stream", "/custom/" + e.conns["openai"] + "/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[]}`, true, openAITokens, "gpt-4o"},
		{"chat stream with usage", "/custom/" + e.conns["openai"] + "/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, true, openAITokens, "gpt-4o"},
		{"responses", "/custom/" + e.conns["openai"] + "/responses", `{"model":"gpt-4o-mini","input":"hi"}`, false, openAITokens, "gpt-4o-mini"},
		{"responses stream", "/custom/" + e.conns["openai"] + "/responses", `{"model":"gpt-4o-mini","input":"hi","stream":true}`, true, openAITokens, "gpt-4o-mini"},
		{"anthropic", "/custom/" + e.conns["anthropic"] + "/v1/messages", `{"model":"claude-sonnet","max_tokens":50,"messages":[]}`, false, anthropicTokens, "claude-sonnet"},
		{"anthropic stream", "/custom/" + e.conns["anthropic"] + "/v1/messages", `{"model":"claude-sonnet","max_tokens":50,"stream":true,"messages":[]}`, true, anthropicTokens, "claude-sonnet"},
		{"google", "/custom/" + e.conns["google"] + "/v1beta/models/gemini-pro:generateContent", `{"contents":[]}`, false, openAITokens, "gemini-pro"},
		{"google sse", "/custom/" + e.conns["google"] + "/v1beta/models/gemini-pro:streamGenerateContent?alt=sse", `{"contents":[]}`, true, openAITokens, "gemini-pro"},
		{"google array stream", "/custom/" + e.conns["google"] + "/v1beta/models/gemini-pro:streamGenerateContent", `{"contents":[]}`, true, openAITokens, "gemini-pro"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.usageCount()
			resp, got := e.post(t, c.path, c.body, auth...)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, got)
			}
			rec := e.usageSince(t, before, 1)[0]
			if rec.Tokens != c.want || rec.Estimated || rec.Status != 200 || rec.Streamed != c.stream || rec.Model != c.model {
				t.Fatalf("record %+v, want tokens %+v", rec, c.want)
			}
			if want := pico(c.want.Input, c.want.CacheRead, c.want.CacheWrite, c.want.Output, c.want.Reasoning); rec.Cost != want {
				t.Fatalf("cost %s, want %s", rec.Cost, want)
			}
			if rec.MemberID == "" || rec.MemberKind != store.MemberServiceAccount || rec.KeyID == "" || rec.Connection == "" || rec.RequestID == "" {
				t.Fatalf("record lacks attribution: %+v", rec)
			}
			if c.name == "chat stream" {
				if strings.Contains(got, `"usage"`) {
					t.Fatal("the client saw the usage chunk it did not ask for")
				}
				if !strings.Contains(string(e.providers["openai"].Last().Body), `"stream_options":{"include_usage":true}`) {
					t.Fatalf("include_usage was not asked upstream: %s", e.providers["openai"].Last().Body)
				}
			}
			if c.name == "chat stream with usage" && !strings.Contains(got, `"usage"`) {
				t.Fatal("the client asked for usage and did not get it")
			}
		})
	}
}

func TestFailedRequestsAreRecordedAtNoCost(t *testing.T) {
	e := setup(t)
	before := e.usageCount()
	e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"o1","messages":[]}`, "Authorization", "Bearer "+e.key)
	e.providers["openai"].SetBehavior(fakeprovider.Behavior{Status: 500})
	e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o","messages":[]}`, "Authorization", "Bearer "+e.key)
	recs := e.usageSince(t, before, 2)
	if recs[0].Status != 403 || recs[0].Model != "o1" || recs[0].Cost != 0 || recs[1].Status != 500 || recs[1].Cost != 0 {
		t.Fatalf("%+v\n%+v", recs[0], recs[1])
	}
}

func TestClientDisconnectIsStillCharged(t *testing.T) {
	e := setup(t)
	p := e.providers["anthropic"]
	p.SetBehavior(fakeprovider.Behavior{Delay: 100 * time.Millisecond, Chunks: 30})
	before := e.usageCount()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.base+"/custom/"+e.conns["anthropic"]+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet","max_tokens":100,"stream":true,"messages":[]}`))
	req.Header.Set("x-api-key", e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 12; i++ { // message_start, content_block_start, ping and a few deltas
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	resp.Body.Close()
	rec := e.usageSince(t, before, 1)[0]
	if !rec.ClientDisconnected || !rec.Estimated || rec.Tokens.Input != fakeprovider.InputTokens || rec.Tokens.CacheRead != fakeprovider.CachedTokens || rec.Tokens.Output < 1 || rec.Cost <= 0 {
		t.Fatalf("%+v", rec)
	}
}

// A budget with room for exactly N requests: N are admitted, the next gets
// 402 in the format's envelope with what is left, and spend equals the sum
// of the recorded costs.
func TestBudgetStopsAtTheLimit(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	sa, _ := e.svc.CreateServiceAccount(ctx, op, "budgeted")
	k, _ := e.svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "k", Permission: store.PermissionInference})
	// Reservation per request: the bytes of the body sent upstream (model
	// rewritten) at 2.5 + max_tokens 100 at 10 USD per million.
	body := `{"model":"claude-sonnet","max_tokens":100,"messages":[]}`
	upstreamBody := strings.Replace(body, "claude-sonnet", "claude-sonnet-4-5-20250929", 1)
	perRequest := money.Pico(int64(len(upstreamBody))*2_500_000 + 100*10_000_000)
	const n = 5
	limit := money.Micros(perRequest*n/money.PicoPerMicro + 1) // room for n reservations, not n+1
	if _, err := e.svc.SetBudget(ctx, op, sa.ID, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	// Concurrent requests: exactly n get through while reservations hold.
	e.providers["anthropic"].SetBehavior(fakeprovider.Behavior{Delay: 300 * time.Millisecond})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var lastRefusal string
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.base+"/custom/"+e.conns["anthropic"]+"/v1/messages", strings.NewReader(body))
			req.Header.Set("x-api-key", k.Key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			if resp.StatusCode == 402 {
				lastRefusal = string(b)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[200] != n || statuses[402] != 20-n {
		t.Fatalf("statuses %v, want %d admitted", statuses, n)
	}
	var refusal map[string]any
	json.Unmarshal([]byte(lastRefusal), &refusal)
	if refusal["_tag"] != "BudgetExceeded" || refusal["type"] != "error" || refusal["remaining_usd"] == nil {
		t.Fatalf("refusal %s", lastRefusal)
	}
	if et, _ := refusal["error"].(map[string]any); et["type"] != "billing_error" {
		t.Fatalf("anthropic error type %v", refusal["error"])
	}
	// After settlement: spend is the sum of the admitted requests' costs,
	// below the limit.
	deadline := time.Now().Add(10 * time.Second)
	for {
		bs, err := e.svc.Budgets(ctx, op)
		if err != nil {
			t.Fatal(err)
		}
		var v *service.BudgetView
		for i := range bs {
			if bs[i].MemberID == sa.ID {
				v = &bs[i]
			}
		}
		want := pico(fakeprovider.InputTokens, fakeprovider.CachedTokens, fakeprovider.CacheWriteTokens, fakeprovider.OutputTokens, 0) * n
		if v.ReservedUSD == 0 {
			if v.SpentUSD != want || *v.LimitUSD < v.SpentUSD {
				t.Fatalf("spent %s, want %s (limit %s)", v.SpentUSD, want, *v.LimitUSD)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservations never settled: %+v", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The refused requests are recorded too, at no cost.
	recs, _, err := e.svc.Usage(ctx, op, service.UsageQuery{Member: sa.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, r := range recs {
		if r.Status == 402 {
			refused++
			if r.Cost != 0 {
				t.Fatal("a refused request cost something")
			}
		}
	}
	if refused != 20-n {
		t.Fatalf("%d refusals recorded, want %d", refused, 20-n)
	}
}

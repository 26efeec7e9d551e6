package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// Tokens the fake provider reports, as the gateway records them: OpenAI's
// and Google's prompt counts include the cached tokens and their
// completion counts the reasoning; Anthropic's are disjoint.
var (
	openAIUsage = store.Tokens{Input: fakeprovider.InputTokens - fakeprovider.CachedTokens, CacheRead: fakeprovider.CachedTokens,
		Output: fakeprovider.OutputTokens - fakeprovider.ReasoningTokens, Reasoning: fakeprovider.ReasoningTokens}
	anthropicUsage = store.Tokens{Input: fakeprovider.InputTokens, CacheRead: fakeprovider.CachedTokens,
		CacheWrite: fakeprovider.CacheWriteTokens, Output: fakeprovider.OutputTokens}
)

func costOf(t store.Tokens) money.Pico {
	return pico(t.Input, t.CacheRead, t.CacheWrite, t.Output, t.Reasoning)
}

// budgetedKey is a service account of the test's own with a 10 USD
// budget (so that its spend and reservations can be read) and its key.
func (e *env) budgetedKey(t *testing.T, name string) (sa, key string) {
	t.Helper()
	sa, key = e.ownKey(t, name)
	limit := money.Micros(10 * money.Scale)
	if _, err := e.svc.SetBudget(context.Background(), service.Operator(e.ws), sa, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	return sa, key
}

// settledSpend waits until nothing is reserved on the member and returns
// its spend.
func (e *env) settledSpend(t *testing.T, member string) money.Pico {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.svc.Ledger.Wait()
		bs, err := e.svc.Budgets(context.Background(), service.Operator(e.ws))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range bs {
			if v.MemberID == member && v.ReservedUSD == 0 {
				return v.SpentUSD
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reservation of %s was never settled: %+v", member, bs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sessionRecord waits for the one usage record of an agent session.
func (e *env) sessionRecord(t *testing.T, session string) *store.UsageRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _, err := e.svc.Usage(context.Background(), service.Operator(e.ws), service.UsageQuery{Session: session})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > 1 {
			t.Fatalf("%d usage records of session %s", len(recs), session)
		}
		if len(recs) == 1 {
			return recs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no usage record of session %s", session)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leave sends a request as session, waits until provider p has it, and
// goes away: the client cancels it and its connection closes. leave
// returns once the gateway has seen the client go (its debug log entry for
// the request's session).
func (e *env) leave(t *testing.T, p *fakeprovider.Provider, url, body, session string, hdr ...string) {
	t.Helper()
	logFrom := logSize(t, e.logPath)
	before := len(p.Received())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = errors.New("answered " + resp.Status + ": " + string(b))
		}
		done <- err
	}()
	waitUntil(t, "the provider has the request", func() bool { return len(p.Received()) > before })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client did not leave: %v", err)
	}
	waitUntil(t, "the gateway saw the client leave", func() bool {
		return logHas(t, e.logPath, logFrom, "the client left", `"session":"`+session+`"`)
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func logSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// logHas reports whether a line of the log after offset from holds every
// one of parts.
func logHas(t *testing.T, path string, from int64, parts ...string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
lines:
	for sc.Scan() {
		for _, p := range parts {
			if !strings.Contains(sc.Text(), p) {
				continue lines
			}
		}
		return true
	}
	return false
}

// A client that leaves while the provider is still working on a
// non-stream answer does not take the answer with it: the provider's
// request is not cancelled, its answer is read to the end and metered,
// and the usage record has the provider's exact tokens and cost, the
// provider's status and client_disconnected. The member's spend is that
// cost and nothing stays reserved. An answer of 8 MB, whose writes to the
// gone client fail, is read to its usage at the end all the same.
func TestClientGoneNonStreamIsMetered(t *testing.T) {
	e := setup(t)
	sa, key := e.budgetedKey(t, "gone")
	big := fmt.Sprintf(`{"id":"chatcmpl-big","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[{"index":0,`+
		`"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":%d},"completion_tokens_details":{"reasoning_tokens":%d}}}`,
		strings.Repeat("lorem ipsum ", 700_000), fakeprovider.InputTokens, fakeprovider.OutputTokens, fakeprovider.CachedTokens, fakeprovider.ReasoningTokens)
	cases := []struct {
		name, kind, path, body string
		auth                   []string
		want                   store.Tokens
		answer                 string // the provider's own when ""
	}{
		{"chat", "openai", "/custom/" + e.conns["openai"] + "/chat/completions", `{"model":"gpt-4o","messages":[]}`,
			[]string{"Authorization", "Bearer " + key}, openAIUsage, ""},
		{"anthropic", "anthropic", "/custom/" + e.conns["anthropic"] + "/v1/messages", `{"model":"claude-sonnet","max_tokens":50,"messages":[]}`,
			[]string{"x-api-key", key}, anthropicUsage, ""},
		{"google", "google", "/custom/" + e.conns["google"] + "/v1beta/models/gemini-pro:generateContent", `{"contents":[]}`,
			[]string{"x-goog-api-key", key}, openAIUsage, ""},
		{"chat 8 MB", "openai", "/custom/" + e.conns["openai"] + "/chat/completions", `{"model":"gpt-4o","messages":[]}`,
			[]string{"Authorization", "Bearer " + key}, openAIUsage, big},
	}
	var total money.Pico
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := e.providers[c.kind]
			hold := make(chan struct{})
			b := fakeprovider.Behavior{Hold: hold}
			if c.answer != "" {
				b.Status, b.Body = 200, c.answer
			}
			p.SetBehavior(b)
			session := "gone-" + strings.ReplaceAll(c.name, " ", "-")
			e.leave(t, p, e.base+c.path, c.body, session, c.auth...)
			close(hold) // the provider answers only now, its client gone
			rec := e.sessionRecord(t, session)
			if rec.Tokens != c.want || rec.Estimated || rec.Status != 200 || !rec.ClientDisconnected || rec.Streamed {
				t.Fatalf("record %+v, want tokens %+v", rec, c.want)
			}
			if rec.Cost != costOf(c.want) {
				t.Fatalf("cost %s, want %s", rec.Cost, costOf(c.want))
			}
			if got := p.Last(); got.Canceled {
				t.Fatal("the provider's request was cancelled")
			}
			total += rec.Cost
		})
	}
	if spent := e.settledSpend(t, sa); spent != total {
		t.Fatalf("spent %s, want %s", spent, total)
	}
}

// The grace is bounded: a provider that has not answered disconnect_grace
// after its client left (300 ms on the tight site) has its request
// cancelled. Nothing was answered, so nothing is charged, and the
// reservation is released.
func TestClientGoneProviderCancelledAfterGrace(t *testing.T) {
	e := setup(t)
	sa, key := e.budgetedKey(t, "gone-grace")
	p := e.providers["openai"]
	hold := make(chan struct{}) // never closed while the request lasts
	t.Cleanup(func() { close(hold) })
	p.SetBehavior(fakeprovider.Behavior{Hold: hold})
	e.leave(t, p, e.tight+"/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o","messages":[]}`, "gone-grace",
		"Authorization", "Bearer "+key)
	waitUntil(t, "the provider's request is cancelled", func() bool { return p.Last().Canceled })
	rec := e.sessionRecord(t, "gone-grace")
	if !rec.ClientDisconnected || rec.Cost != 0 || rec.Tokens != (store.Tokens{}) || rec.Status != 499 {
		t.Fatalf("record %+v", rec)
	}
	if spent := e.settledSpend(t, sa); spent != 0 {
		t.Fatalf("spent %s", spent)
	}
}

// On the Inference API, the attempt in flight when the client leaves is
// the last: its answer is metered like any non-stream answer, and no
// other target is started, whether the attempt answers or fails.
func TestClientGoneInference(t *testing.T) {
	e := setup(t)
	sa, key := e.budgetedKey(t, "gone-inference")
	a, b := e.twoTargets(t, "gone-fb")

	hold := make(chan struct{})
	a.SetBehavior(fakeprovider.Behavior{Hold: hold})
	e.leave(t, a, e.patient+"/v1/chat/completions", `{"model":"gone-fb","messages":[]}`, "gone-inference-answers",
		"Authorization", "Bearer "+key)
	close(hold)
	rec := e.sessionRecord(t, "gone-inference-answers")
	if rec.Tokens != openAIUsage || rec.Cost != costOf(openAIUsage) || rec.Status != 200 || !rec.ClientDisconnected || rec.Estimated ||
		rec.Model != "gone-fb" || rec.UpstreamModel != "m-upstream" || len(rec.Attempts) != 0 {
		t.Fatalf("record %+v", rec)
	}
	if a.Last().Canceled || len(b.Received()) != 0 {
		t.Fatalf("first target cancelled %v; the second got %d requests", a.Last().Canceled, len(b.Received()))
	}
	if spent := e.settledSpend(t, sa); spent != costOf(openAIUsage) {
		t.Fatalf("spent %s, want %s", spent, costOf(openAIUsage))
	}

	// A 503 after the client left is the target's failure, listed; the
	// second target is not tried for a client that is gone.
	hold = make(chan struct{})
	a.SetBehavior(fakeprovider.Behavior{Hold: hold, Status: 503})
	e.leave(t, a, e.patient+"/v1/chat/completions", `{"model":"gone-fb","messages":[]}`, "gone-inference-fails",
		"Authorization", "Bearer "+key)
	close(hold)
	rec = e.sessionRecord(t, "gone-inference-fails")
	if rec.Cost != 0 || rec.Status != 502 || !rec.ClientDisconnected || len(rec.Attempts) != 1 || rec.Attempts[0].Status != 503 {
		t.Fatalf("record %+v", rec)
	}
	if len(b.Received()) != 0 {
		t.Fatalf("the second target got %d requests", len(b.Received()))
	}
	if spent := e.settledSpend(t, sa); spent != costOf(openAIUsage) {
		t.Fatalf("spent %s, want %s", spent, costOf(openAIUsage))
	}
}

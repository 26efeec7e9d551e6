package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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

// workspaceModel creates a workspace model of the harness workspace.
func (e *env) workspaceModel(t *testing.T, id string, targets ...store.ModelTarget) {
	t.Helper()
	if _, err := e.svc.CreateWorkspaceModel(context.Background(), service.Operator(e.ws), service.WorkspaceModelInput{ID: id, Targets: targets}); err != nil {
		t.Fatalf("creating model %s: %v", id, err)
	}
}

// ownProvider starts a fake provider of the test's own with an openai
// connection serving model "m" at the harness prices; headers are set on
// the connection.
func (e *env) ownProvider(t *testing.T, headers map[string]string) (*fakeprovider.Provider, string) {
	t.Helper()
	p, err := fakeprovider.Start(providerSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	price := store.Pricing{Input: money.Micros(2_500_000), Output: money.Micros(10_000_000)}
	c, err := e.svc.CreateConnection(context.Background(), service.Operator(e.ws), service.ConnectionInput{Name: "own", Kind: store.KindOpenAI,
		BaseURL: p.URL + "/v1", Credential: providerSecret, Headers: headers, Models: map[string]service.ModelInput{"m": {UpstreamID: "m-upstream", Pricing: &price}}})
	if err != nil {
		t.Fatal(err)
	}
	return p, c.ID
}

// twoTargets makes a workspace model whose targets are two providers of
// the test's own, a first (order 1) and a second (order 2).
func (e *env) twoTargets(t *testing.T, model string) (a, b *fakeprovider.Provider) {
	t.Helper()
	a, ca := e.ownProvider(t, nil)
	b, cb := e.ownProvider(t, nil)
	e.workspaceModel(t, model, store.ModelTarget{Connection: ca, Model: "m", Order: 1}, store.ModelTarget{Connection: cb, Model: "m", Order: 2})
	return a, b
}

// burst sends n copies of a request at once and counts the answers by
// status, keeping one answer and its body of each status.
func (e *env) burst(t *testing.T, n int, path, body string, hdr ...string) (statuses map[int]int, last map[int]*http.Response, bodies map[int]string) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses, last, bodies = map[int]int{}, map[int]*http.Response{}, map[int]string{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.base+path, strings.NewReader(body))
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			last[resp.StatusCode], bodies[resp.StatusCode] = resp, string(b)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return statuses, last, bodies
}

func errorTag(t *testing.T, body string) string {
	t.Helper()
	tag, _ := jsonField(t, body, "_tag").(string)
	return tag
}

// One base URL, three connections: each request goes to the connection of
// its model, in its own format, with the model rewritten and the
// credential swapped; the usage record names the workspace model.
func TestInferenceRoutesByModel(t *testing.T) {
	e := setup(t)
	e.workspaceModel(t, "route-gpt", store.ModelTarget{Connection: e.conns["openai"], Model: "gpt-4o"})
	e.workspaceModel(t, "route-claude", store.ModelTarget{Connection: e.conns["anthropic"], Model: "claude-sonnet"})
	e.workspaceModel(t, "route-gemini", store.ModelTarget{Connection: e.conns["google"], Model: "gemini-pro"})
	e.workspaceModel(t, "route-off", store.ModelTarget{Connection: e.conns["anthropic"], Model: "claude-off"})
	n := e.usageCount()

	resp, body := e.post(t, "/v1/chat/completions", `{"model":"route-gpt","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	got := e.providers["openai"].Last()
	if got.Path != "/v1/chat/completions" || !strings.Contains(string(got.Body), `"model":"gpt-4o-2024-08-06"`) ||
		got.Header.Get("Authorization") != "Bearer "+providerSecret {
		t.Fatalf("openai received %s %s %v", got.Path, got.Body, got.Header)
	}
	resp, body = e.post(t, "/v1/messages", `{"model":"route-claude","max_tokens":10,"messages":[]}`, "x-api-key", e.key, "anthropic-version", "2023-06-01")
	if resp.StatusCode != 200 || e.providers["anthropic"].Last().Header.Get("X-Api-Key") != providerSecret {
		t.Fatalf("messages: %d %s", resp.StatusCode, body)
	}
	for _, path := range []string{"/v1beta/models/route-gemini:generateContent", "/v1/models/route-gemini:streamGenerateContent?alt=sse"} {
		resp, body = e.post(t, path, `{"contents":[{"parts":[{"text":"hi"}]}]}`, "x-goog-api-key", e.key)
		got = e.providers["google"].Last()
		if resp.StatusCode != 200 || !strings.HasPrefix(got.Path, "/v1beta/models/gemini-2.5-pro:") {
			t.Fatalf("%s: %d %s, provider path %s", path, resp.StatusCode, body, got.Path)
		}
	}
	recs := e.usageSince(t, n, 4)
	if r := recs[0]; r.Model != "route-gpt" || r.UpstreamModel != "gpt-4o-2024-08-06" || r.Connection != e.conns["openai"] || r.Cost == 0 || len(r.Attempts) != 0 {
		t.Fatalf("usage record %+v", r)
	}
	if r := recs[1]; r.Model != "route-claude" || r.Connection != e.conns["anthropic"] || r.Format != "anthropic" {
		t.Fatalf("usage record %+v", r)
	}

	// Bad input, each in the format's envelope.
	resp, body = e.post(t, "/v1/messages", `{"model":"nope","max_tokens":10,"messages":[]}`, "x-api-key", e.key)
	if resp.StatusCode != 404 || errorTag(t, body) != "ModelNotFound" || jsonField(t, body, "type") != "error" {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}
	resp, body = e.post(t, "/v1/messages", `{"model":"route-gpt","max_tokens":10,"messages":[]}`, "x-api-key", e.key)
	if resp.StatusCode != 400 || !strings.Contains(body, "chat, responses") {
		t.Fatalf("format mismatch: %d %s", resp.StatusCode, body)
	}
	if fs, _ := jsonField(t, body, "formats").([]any); len(fs) != 2 {
		t.Fatalf("format mismatch names no formats: %s", body)
	}
	resp, body = e.post(t, "/v1/messages", `{"model":"route-off","max_tokens":10,"messages":[]}`, "x-api-key", e.key)
	if resp.StatusCode != 403 || errorTag(t, body) != "ModelNotEnabled" {
		t.Fatalf("all targets disabled: %d %s", resp.StatusCode, body)
	}
	resp, body = e.post(t, "/v1/chat/completions", `{"model":"route-gpt","messages":[]}`, "Authorization", "Bearer "+e.otherKey)
	if resp.StatusCode != 404 || errorTag(t, body) != "ModelNotFound" {
		t.Fatalf("another workspace's key: %d %s", resp.StatusCode, body)
	}
	resp, body = e.post(t, "/v1/chat/completions", `{"model":"route-gpt","messages":[]}`)
	if resp.StatusCode != 401 {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	resp, _ = e.do(t, "GET", "/v1/chat/completions", "", "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET on a POST route: %d", resp.StatusCode)
	}
	resp, body = e.post(t, "/v1/embeddings", `{}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown route: %d %s", resp.StatusCode, body)
	}
}

// GET /v1/models lists the workspace's models that can serve, in OpenAI's
// shape, Anthropic's with anthropic-version, Google's on /v1beta.
func TestInferenceModelList(t *testing.T) {
	e := setup(t)
	e.workspaceModel(t, "list-gpt", store.ModelTarget{Connection: e.conns["openai"], Model: "gpt-4o"})
	e.workspaceModel(t, "list-off", store.ModelTarget{Connection: e.conns["openai"], Model: "o1"})
	_, body := e.do(t, "GET", "/v1/models", "", "Authorization", "Bearer "+e.key)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	json.Unmarshal([]byte(body), &list)
	ids := map[string]bool{}
	for _, m := range list.Data {
		ids[m.ID] = true
	}
	if list.Object != "list" || !ids["list-gpt"] || ids["list-off"] {
		t.Fatalf("openai list %s", body)
	}
	_, body = e.do(t, "GET", "/v1/models", "", "x-api-key", e.key, "anthropic-version", "2023-06-01")
	if !strings.Contains(body, `"type":"model"`) || !strings.Contains(body, `"list-gpt"`) {
		t.Fatalf("anthropic list %s", body)
	}
	_, body = e.do(t, "GET", "/v1beta/models", "", "x-goog-api-key", e.key)
	if !strings.Contains(body, `"name":"models/list-gpt"`) {
		t.Fatalf("google list %s", body)
	}
	resp, body := e.do(t, "GET", "/v1/models/list-gpt", "", "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 || jsonField(t, body, "id") != "list-gpt" {
		t.Fatalf("one model: %d %s", resp.StatusCode, body)
	}
	resp, body = e.do(t, "GET", "/v1/models/list-off", "", "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 404 || errorTag(t, body) != "ModelNotFound" {
		t.Fatalf("a model without enabled targets: %d %s", resp.StatusCode, body)
	}
	resp, _ = e.do(t, "GET", "/v1/models", "")
	if resp.StatusCode != 401 {
		t.Fatalf("list without a key: %d", resp.StatusCode)
	}
}

// A target that answers 5xx or 429, or cannot be reached, before the client
// got anything, is left for the next; the next request tries it last
// (cool-down); no connection's headers reach another; the usage record
// lists the attempts and charges only the answer.
func TestInferenceFallback(t *testing.T) {
	e := setup(t)
	var cb string
	for _, status := range []int{503, 429} {
		a, ca := e.ownProvider(t, map[string]string{"X-Only-A": "a"})
		var b *fakeprovider.Provider
		b, cb = e.ownProvider(t, nil)
		model := fmt.Sprintf("fb-%d", status)
		e.workspaceModel(t, model, store.ModelTarget{Connection: ca, Model: "m", Order: 1}, store.ModelTarget{Connection: cb, Model: "m", Order: 2})
		a.SetBehavior(fakeprovider.Behavior{Status: status})
		n := e.usageCount()
		resp, body := e.post(t, "/v1/chat/completions", `{"model":"`+model+`","messages":[]}`, "Authorization", "Bearer "+e.key)
		if resp.StatusCode != 200 || len(a.Received()) != 1 || len(b.Received()) != 1 {
			t.Fatalf("%d from the first target: %d %s; a %d, b %d requests", status, resp.StatusCode, body, len(a.Received()), len(b.Received()))
		}
		if b.Last().Header.Get("X-Only-A") != "" || !strings.Contains(string(b.Last().Body), `"model":"m-upstream"`) {
			t.Fatalf("second target received %v %s", b.Last().Header, b.Last().Body)
		}
		rec := e.usageSince(t, n, 1)[0]
		if rec.Connection != cb || len(rec.Attempts) != 1 || rec.Attempts[0].Connection != ca || rec.Attempts[0].Status != status || rec.Cost == 0 || rec.Status != 200 {
			t.Fatalf("usage record %+v", rec)
		}
		// The failed target cools down: the next request goes to b first
		// (the cool-down's end is tested in the pipeline's own tests).
		a.SetBehavior(fakeprovider.Behavior{})
		resp, _ = e.post(t, "/v1/chat/completions", `{"model":"`+model+`","messages":[]}`, "Authorization", "Bearer "+e.key)
		if resp.StatusCode != 200 || len(a.Received()) != 1 || len(b.Received()) != 2 {
			t.Fatalf("cool-down: a %d, b %d requests", len(a.Received()), len(b.Received()))
		}
	}

	// An unreachable target: the next answers.
	dead, cd := e.ownProvider(t, nil)
	dead.Close()
	e.workspaceModel(t, "fb-dead", store.ModelTarget{Connection: cd, Model: "m", Order: 1}, store.ModelTarget{Connection: cb, Model: "m", Order: 2})
	n := e.usageCount()
	resp, body := e.post(t, "/v1/chat/completions", `{"model":"fb-dead","messages":[]}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 {
		t.Fatalf("dead first target: %d %s", resp.StatusCode, body)
	}
	if rec := e.usageSince(t, n, 1)[0]; len(rec.Attempts) != 1 || rec.Attempts[0].Error != "UpstreamUnreachable" || rec.Connection != cb {
		t.Fatalf("usage record %+v", rec)
	}
}

// A target that does not answer in time is cancelled and the next tried.
func TestInferenceFallbackFromHangingTarget(t *testing.T) {
	e := setup(t)
	a, b := e.twoTargets(t, "fb-hang")
	a.SetBehavior(fakeprovider.Behavior{Delay: 20 * time.Second})
	n := e.usageCount()
	resp, body := e.post(t, "/v1/chat/completions", `{"model":"fb-hang","messages":[]}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 || len(b.Received()) != 1 {
		t.Fatalf("hanging first target: %d %s", resp.StatusCode, body)
	}
	if rec := e.usageSince(t, n, 1)[0]; len(rec.Attempts) != 1 || rec.Attempts[0].Error != "UpstreamTimeout" {
		t.Fatalf("usage record %+v", rec)
	}
}

// fallback_deadline bounds all attempts together: a first target that
// hangs past it leaves no time for the second, and the request ends with
// 502 listing the one attempt, long before try_timeout (10 s there).
func TestInferenceFallbackDeadline(t *testing.T) {
	e := setup(t)
	a, b := e.twoTargets(t, "fb-deadline")
	a.SetBehavior(fakeprovider.Behavior{Delay: 20 * time.Second})
	req, _ := http.NewRequest("POST", e.tight+"/v1/chat/completions", strings.NewReader(`{"model":"fb-deadline","messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := (&http.Client{Timeout: 8 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("the deadline did not end the request: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || errorTag(t, string(body)) != "AllTargetsFailed" || len(b.Received()) != 0 {
		t.Fatalf("past the deadline: %d %s; the second target got %d requests", resp.StatusCode, body, len(b.Received()))
	}
	if at, _ := jsonField(t, string(body), "attempts").([]any); len(at) != 1 || !strings.Contains(string(body), "UpstreamTimeout") {
		t.Fatalf("attempts: %s", body)
	}
}

// Once the first byte of an answer reached the client, a failing stream is
// the client's: no other target is tried.
func TestInferenceNoFallbackAfterFirstByte(t *testing.T) {
	e := setup(t)
	a, b := e.twoTargets(t, "fb-cut")
	a.SetBehavior(fakeprovider.Behavior{CutAfter: 1, Chunks: 5})
	req, _ := http.NewRequest("POST", e.base+"/v1/chat/completions", strings.NewReader(`{"model":"fb-cut","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data:") {
			events++
		}
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || events == 0 || len(b.Received()) != 0 || len(a.Received()) != 1 {
		t.Fatalf("cut stream: %d, %d events; a %d, b %d requests", resp.StatusCode, events, len(a.Received()), len(b.Received()))
	}
}

// Every target failing: 502 listing the attempts, nothing charged, the
// reservation released.
func TestInferenceAllTargetsFail(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	sa, key := e.ownKey(t, "fails")
	limit := money.Micros(10 * money.Scale)
	if _, err := e.svc.SetBudget(ctx, op, sa, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	a, b := e.twoTargets(t, "fb-none")
	a.SetBehavior(fakeprovider.Behavior{Status: 500})
	b.SetBehavior(fakeprovider.Behavior{Status: 502})
	n := e.usageCount()
	resp, body := e.post(t, "/v1/messages", `{"model":"fb-none","max_tokens":5,"messages":[]}`, "x-api-key", key)
	if resp.StatusCode != 400 {
		t.Fatalf("openai-only model on /v1/messages: %d %s", resp.StatusCode, body)
	}
	resp, body = e.post(t, "/v1/chat/completions", `{"model":"fb-none","messages":[]}`, "Authorization", "Bearer "+key)
	if resp.StatusCode != 502 || errorTag(t, body) != "AllTargetsFailed" {
		t.Fatalf("all fail: %d %s", resp.StatusCode, body)
	}
	if at, _ := jsonField(t, body, "attempts").([]any); len(at) != 2 {
		t.Fatalf("attempts not listed: %s", body)
	}
	recs := e.usageSince(t, n, 2)
	if rec := recs[1]; rec.Status != 502 || rec.Cost != 0 || len(rec.Attempts) != 2 || rec.Connection != "" {
		t.Fatalf("usage record %+v", rec)
	}
	e.svc.Ledger.Wait()
	bs, _ := e.svc.Budgets(ctx, op)
	for _, v := range bs {
		if v.MemberID == sa && (v.SpentUSD != 0 || v.ReservedUSD != 0) {
			t.Fatalf("budget after failures: %+v", v)
		}
	}
}

// The budget is reserved once per request on the Inference API: with room
// for N, exactly N of 40 concurrent requests are admitted.
func TestInferenceBudgetRace(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	sa, key := e.ownKey(t, "race")
	a, _ := e.twoTargets(t, "race")
	body := `{"model":"race","max_tokens":100,"messages":[]}`
	upstreamBody := strings.Replace(body, `"race"`, `"m-upstream"`, 1)
	perRequest := money.Pico(int64(len(upstreamBody))*2_500_000 + 100*10_000_000)
	const n, total = 7, 40
	limit := money.Micros(perRequest*n/money.PicoPerMicro + 1)
	if _, err := e.svc.SetBudget(ctx, op, sa, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	// Answers take 2 s, so every reservation is still held when the last
	// request asks (a settled one would leave room for another).
	a.SetBehavior(fakeprovider.Behavior{Delay: 2 * time.Second})
	statuses, _, _ := e.burst(t, total, "/v1/chat/completions", body, "Authorization", "Bearer "+key)
	if statuses[200] != n || statuses[402] != total-n {
		t.Fatalf("statuses %v, want exactly %d admitted", statuses, n)
	}
}

// A large body (read into a pooled buffer) reaches the second target
// whole after the first refused it.
func TestInferenceFallbackLargeBody(t *testing.T) {
	e := setup(t)
	a, b := e.twoTargets(t, "fb-large")
	a.SetBehavior(fakeprovider.Behavior{Status: 503})
	text := strings.Repeat("lorem ipsum ", 200_000) // 2.4 MB
	resp, body := e.post(t, "/v1/chat/completions", `{"model":"fb-large","messages":[{"role":"user","content":"`+text+`"}]}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 200 || len(b.Received()) != 1 {
		t.Fatalf("large body: %d %.200s", resp.StatusCode, body)
	}
	got := b.Last().Body
	if !strings.Contains(string(got), text) || !strings.Contains(string(got), `"model":"m-upstream"`) || len(got) != len(a.Last().Body) {
		t.Fatalf("the second target got %d bytes (the first %d)", len(got), len(a.Last().Body))
	}
}

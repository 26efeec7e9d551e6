package gateway_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/service"
)

func TestBodies(t *testing.T) {
	e := setup(t)
	path := e.base + "/custom/" + e.conns["openai"] + "/chat/completions"
	do := func(req *http.Request) (*http.Response, string) {
		req.Header.Set("Authorization", "Bearer "+e.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	// Compressed: refused with a clear 415, never forwarded.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"model":"gpt-4o","messages":[]}`))
	zw.Close()
	req, _ := http.NewRequest("POST", path, &gz)
	req.Header.Set("Content-Encoding", "gzip")
	if resp, got := do(req); resp.StatusCode != 415 {
		t.Fatalf("gzip body: %d %s", resp.StatusCode, got)
	}

	// 10 MB body (limit 12 MiB in this config): forwarded byte for byte.
	big := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("x", 10<<20) + `"}]}`
	req, _ = http.NewRequest("POST", path, strings.NewReader(big))
	if resp, got := do(req); resp.StatusCode != 200 {
		t.Fatalf("10 MB body: %d %.200s", resp.StatusCode, got)
	}
	if rec := e.providers["openai"].Last(); len(rec.Body) != len(big) {
		t.Fatalf("upstream got %d bytes, want %d", len(rec.Body), len(big))
	}

	// Over the limit, with and without Content-Length: 413.
	huge := `{"model":"gpt-4o-mini","pad":"` + strings.Repeat("y", 13<<20) + `"}`
	req, _ = http.NewRequest("POST", path, strings.NewReader(huge))
	if resp, got := do(req); resp.StatusCode != 413 || !strings.Contains(got, "PayloadTooLarge") {
		t.Fatalf("over limit: %d %.200s", resp.StatusCode, got)
	}
	req, _ = http.NewRequest("POST", path, io.MultiReader(strings.NewReader(huge)))
	req.ContentLength = -1
	if resp, got := do(req); resp.StatusCode != 413 {
		t.Fatalf("over limit, chunked: %d %.200s", resp.StatusCode, got)
	}
	if n := len(e.providers["openai"].Received()); n != 1 {
		t.Fatalf("%d requests reached the provider, want only the 10 MB one", n)
	}
}

func TestUpstreamDownAndErrors(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	c, err := e.svc.CreateConnection(ctx, service.Operator(e.ws), service.ConnectionInput{Name: "dead", Kind: "anthropic",
		BaseURL: "http://" + dead + "/v1", Credential: "x", Models: map[string]service.ModelInput{"m": {}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, got := e.post(t, "/custom/"+c.ID+"/v1/messages", `{"model":"m","max_tokens":5,"messages":[]}`, "x-api-key", e.key)
	if resp.StatusCode != 502 || jsonField(t, got, "_tag") != "UpstreamUnreachable" || jsonField(t, got, "error.type") != "api_error" {
		t.Fatalf("upstream down: %d %s", resp.StatusCode, got)
	}

	// Provider errors pass through unchanged, status and body.
	p := e.providers["openai"]
	for _, status := range []int{400, 429, 500, 503} {
		custom := `{"error":{"message":"provider says no","type":"x","code":"y"},"extra":1}`
		p.SetBehavior(fakeprovider.Behavior{Status: status, Body: custom})
		resp, got := e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions", `{"model":"gpt-4o","messages":[]}`, "Authorization", "Bearer "+e.key)
		if resp.StatusCode != status || got != custom {
			t.Errorf("provider %d: got %d %s", status, resp.StatusCode, got)
		}
	}
}

func TestStreamCutByUpstreamIsNotASuccess(t *testing.T) {
	e := setup(t)
	e.providers["openai"].SetBehavior(fakeprovider.Behavior{CutAfter: 2, Chunks: 5})
	req, _ := http.NewRequest("POST", e.base+"/custom/"+e.conns["openai"]+"/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("the cut stream ended cleanly: %q", got)
	}
	if strings.Contains(string(got), "[DONE]") {
		t.Fatal("a cut stream carried [DONE]")
	}
}

// A stream is not answered to a client that left: the provider's request
// is cancelled with the client's, and the usage record charges what was
// seen (the input the stream reported, the output estimated), with
// client_disconnected set.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := setup(t)
	p := e.providers["anthropic"]
	p.SetBehavior(fakeprovider.Behavior{Delay: 200 * time.Millisecond, Chunks: 50})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.base+"/custom/"+e.conns["anthropic"]+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet","max_tokens":100,"stream":true,"messages":[]}`))
	req.Header.Set("x-api-key", e.key)
	req.Header.Set("X-Session-Id", "stream-gone")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read the first event, then go away.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event: message_start") {
		t.Fatalf("first line %q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if rs := p.Received(); len(rs) == 1 && rs[0].Canceled {
			rec := e.sessionRecord(t, "stream-gone")
			if !rec.ClientDisconnected || !rec.Streamed || !rec.Estimated || rec.Status != 200 ||
				rec.Tokens.Input != fakeprovider.InputTokens || rec.Cost != costOf(rec.Tokens) {
				t.Fatalf("record %+v", rec)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the upstream request was not cancelled after the client left")
}

func TestPathTricks(t *testing.T) {
	e := setup(t)
	conn := e.conns["openai"]
	for _, path := range []string{
		"/custom/" + conn + "/../" + conn + "/chat/completions",
		"/custom/" + conn + "%2F..%2Fchat/completions",
		"/custom/" + conn + "/chat%2Fcompletions",
		"/custom/..%2F" + conn + "/chat/completions",
		"/custom/" + e.conns["google"] + "/models/..%2Fgemini-pro:generateContent",
		"/custom/" + e.conns["google"] + "/models/gemini-pro%2F..:generateContent",
		"/custom/" + e.conns["google"] + "/models/../models/gemini-pro:generateContent",
		"/custom/" + conn + "//chat/completions",
	} {
		req, _ := http.NewRequest("POST", e.base+"/x", strings.NewReader(`{"model":"gpt-4o","messages":[],"contents":[]}`))
		req.URL.Opaque = path // send the path exactly as written
		req.Header.Set("Authorization", "Bearer "+e.key)
		req.Header.Set("x-goog-api-key", e.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("%s: status %d", path, resp.StatusCode)
		}
	}
	for kind, p := range e.providers {
		if n := len(p.Received()); n != 0 {
			t.Errorf("%s: a path trick reached the provider (%d requests)", kind, n)
		}
	}
}

func TestOtherPathsAndMethods(t *testing.T) {
	e := setup(t)
	// The credential is checked first: a GET without one is 401, with one 405.
	resp, err := http.Get(e.base + "/custom/" + e.conns["openai"] + "/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("GET on a gateway route without a key: %d", resp.StatusCode)
	}
	if resp, got := e.do(t, "GET", "/custom/"+e.conns["openai"]+"/chat/completions", "", "Authorization", "Bearer "+e.key); resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET on a gateway route: %d %s", resp.StatusCode, got)
	}
	// Not a gateway path: the next handler (the Console) answers.
	resp, err = http.Get(e.base + "/api/v2/config")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(b), "Unauthorized") {
		t.Fatalf("console behind the gateway: %d %s", resp.StatusCode, b)
	}
	resp, got := e.post(t, "/custom/"+e.conns["openai"]+"/embeddings", `{}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown gateway route: %d %s", resp.StatusCode, got)
	}
	resp, got = e.post(t, "/custom/"+e.conns["anthropic"]+"/chat/completions", `{"model":"claude-sonnet"}`, "Authorization", "Bearer "+e.key)
	if resp.StatusCode != 404 {
		t.Fatalf("chat format on an anthropic connection: %d %s", resp.StatusCode, got)
	}
}

// TestLogsHoldNoSecret runs last in this file's order of intent: it reads
// the debug-level log of everything the tests above did.
func TestLogsHoldNoSecret(t *testing.T) {
	e := setup(t)
	// One more request of each kind, so the log is not empty of gateway work.
	e.post(t, "/custom/"+e.conns["openai"]+"/chat/completions?key="+e.key, `{"model":"gpt-4o","messages":[]}`)
	e.post(t, "/custom/"+e.conns["google"]+"/models/gemini-pro:generateContent", `{"contents":[]}`, "x-goog-api-key", e.allKey)
	b, err := os.ReadFile(e.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		t.Fatal("empty log")
	}
	for name, secret := range map[string]string{"provider credential": providerSecret, "inference key": e.key, "all key": e.allKey, "other key": e.otherKey} {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the log holds the %s", name)
		}
		if i := strings.LastIndexByte(secret, '_'); i > 0 && bytes.Contains(b, []byte(secret[i+1:])) {
			t.Errorf("the log holds the secret part of the %s", name)
		}
	}
}

// Large bodies are read into pooled buffers: 24 concurrent multi-megabyte
// requests, each with its own content, with and without a model rewrite,
// every one reaches the provider byte for byte (a buffer handed back while
// the transport still sent it would mix bodies). Truncated bodies are 400.
func TestLargeBodiesPooled(t *testing.T) {
	e := setup(t)
	path := e.base + "/custom/" + e.conns["openai"] + "/chat/completions"
	var wg sync.WaitGroup
	sent := make(chan string, 24)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			model := "gpt-4o-mini"
			if i%2 == 1 {
				model = "gpt-4o" // rewritten to gpt-4o-2024-08-06
			}
			fill := strings.Repeat(string(rune('a'+i%26)), (1<<20)+i*(97<<10))
			body := `{"model":"` + model + `","messages":[{"role":"user","content":"` + fmt.Sprint(i) + fill + `"}]}`
			req, _ := http.NewRequest("POST", path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+e.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("request %d: %d", i, resp.StatusCode)
				return
			}
			if i%2 == 1 {
				body = strings.Replace(body, `"gpt-4o"`, `"gpt-4o-2024-08-06"`, 1)
			}
			sent <- body
		}()
	}
	wg.Wait()
	close(sent)
	got := map[string]bool{}
	for _, r := range e.providers["openai"].Received() {
		got[string(r.Body)] = true
	}
	n := 0
	for b := range sent {
		n++
		if !got[b] {
			t.Fatalf("a %d-byte body did not reach the provider unchanged", len(b))
		}
	}
	if n != 24 {
		t.Fatalf("%d of 24 requests succeeded", n)
	}

	// A body shorter than its Content-Length: 400, nothing forwarded.
	e.providers["openai"].Reset()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":\"gpt-4o-mini\",\"x\":\"%s",
		strings.TrimPrefix(path, e.base), e.key, 3<<20, strings.Repeat("z", 1<<20))
	conn.(*net.TCPConn).CloseWrite()
	reply, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.Contains(string(reply), " 400 ") {
		t.Fatalf("truncated body: %.200s", reply)
	}
	if n := len(e.providers["openai"].Received()); n != 0 {
		t.Fatalf("%d truncated requests reached the provider", n)
	}
}

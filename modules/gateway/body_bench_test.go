package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkGatewayChatRewrite is BenchmarkGatewayChat with a model whose
// upstream id differs (gpt-4o → gpt-4o-2024-08-06), so that the body is
// rewritten on its way; stream also asks for a stream without usage, so
// that the gateway adds stream_options.include_usage.
func BenchmarkGatewayChatRewrite(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "plain"
		head := `{"model":"gpt-4o","max_tokens":64,`
		if stream {
			name, head = "stream", head+`"stream":true,`
		}
		body := []byte(head + `"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 78) + `"}]}`)
		b.Run(name, func(b *testing.B) {
			e := setup(b)
			key := budgetedKey(b, e)
			e.providers["openai"].Reset()
			client := &http.Client{}
			url := e.base + "/custom/" + e.conns["openai"] + "/chat/completions"
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			e.svc.Ledger.Wait()
			if last := e.providers["openai"].Last(); !bytes.Contains(last.Body, []byte(`"gpt-4o-2024-08-06"`)) {
				b.Fatalf("upstream body %s", last.Body)
			}
			e.providers["openai"].Reset()
		})
	}
}

// BenchmarkGatewayChatParallel is BenchmarkGatewayChat from 256
// concurrent clients (with two CPUs), the concurrency of the bench's
// c=256 lane: ns/op is the CPU the client, the gateway and the fake
// provider share per request.
func BenchmarkGatewayChatParallel(b *testing.B) {
	e := setup(b)
	key := budgetedKey(b, e)
	e.providers["openai"].Reset()
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 78) + `"}]}`)
	url := e.base + "/custom/" + e.conns["openai"] + "/chat/completions"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.SetParallelism(128)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	e.svc.Ledger.Wait()
	e.providers["openai"].Reset()
}

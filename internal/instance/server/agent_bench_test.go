package server

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/fakeprovider"
	"github.com/agentgate/agentgate/internal/instance/loop"
)

// BenchmarkAgentReadCall runs provider steps on loopback that each make
// one small read call, in sessions of 5 calls. Per op: one provider step
// and one call. Reported:
//   - call-p50-ms: the server's overhead of a call, from the step's
//     message being stored with the call running (session.next.step.ended,
//     finish tool-calls) to the next step starting
//     (session.next.step.started), as the event stream shows them: the
//     call's argument check, confinement, permission evaluation, the read,
//     the durable write of its result and the next step's read;
//   - step-p50-ms: from one provider request to the next, which adds the
//     provider's answer, the step's own durable write and the next
//     request's encoding.
func BenchmarkAgentReadCall(b *testing.B) {
	t := testing.TB(b)
	sc := &script{}
	var arrivals []time.Time
	sc.pick = func(body string, n int) fakeprovider.Step {
		arrivals = append(arrivals, time.Now())
		if strings.Count(body, `"role":"tool"`) >= 5 {
			return fakeprovider.Step{Text: "done"}
		}
		return fakeprovider.Step{Calls: []fakeprovider.Call{call(fmt.Sprintf("c%d", n), "read", map[string]any{"filePath": "main.go"})}}
	}
	h := newAgentHarness(t, "chat", sc)
	defer h.runner.Close()
	os.WriteFile(filepath.Join(h.dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	h.runner.SetTools(loop.ToolConfig{MaxSteps: 100})
	ev := h.subscribe(t)
	ev.next(t)
	var calls []float64
	b.ResetTimer()
	for i := 0; i*5 < b.N; i++ {
		sid := fmt.Sprintf("ses_bench%d", i)
		h.send("POST", "/api/session", map[string]any{"id": sid})
		h.prompt(sid, "read it", nil)
		var started time.Time
		for done := false; !done; {
			e := gjson.Parse(strings.TrimPrefix(strings.TrimSpace(ev.next(t)), "data: "))
			switch e.Get("type").String() {
			case "session.next.step.ended":
				if e.Get("data.finish").String() == "tool-calls" {
					started = time.Now()
				}
			case "session.next.step.started":
				if !started.IsZero() {
					calls = append(calls, float64(time.Since(started).Microseconds())/1000)
					started = time.Time{}
				}
			case "session.idle":
				done = e.Get("data.sessionID").String() == sid
			}
		}
	}
	b.StopTimer()
	var steps []float64
	for i := 1; i < len(arrivals); i++ {
		if d := arrivals[i].Sub(arrivals[i-1]); d < time.Second {
			steps = append(steps, float64(d.Microseconds())/1000)
		}
	}
	b.ReportMetric(median(calls), "call-p50-ms")
	b.ReportMetric(median(steps), "step-p50-ms")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/store"
)

// The series resolved once per format count under the right labels, and a
// second gateway handler in the same config shares them.
func TestMetricsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m2 := NewMetrics(reg)
	m.observe(formats.Anthropic, 200, store.Tokens{Input: 10, Output: 3, CacheRead: 2}, money.Pico(1_500_000_000_000))
	m2.observe(formats.Anthropic, 503, store.Tokens{}, 0)
	m.observe(formats.Google, 429, store.Tokens{Reasoning: 7}, 0)
	m.of(formats.Chat).refused.Inc()
	value := func(name string, labels ...string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "caddy_llm_gateway_"+name {
				continue
			}
		metric:
			for _, mm := range mf.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range mm.GetLabel() {
						if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
							found = true
						}
					}
					if !found {
						continue metric
					}
				}
				return mm.GetCounter().GetValue()
			}
		}
		return -1
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"requests_total", []string{"format", "anthropic", "code", "2xx"}, 1},
		{"requests_total", []string{"format", "anthropic", "code", "5xx"}, 1},
		{"requests_total", []string{"format", "google", "code", "4xx"}, 1},
		{"requests_total", []string{"format", "chat", "code", "2xx"}, 0},
		{"tokens_total", []string{"format", "anthropic", "kind", "input"}, 10},
		{"tokens_total", []string{"format", "anthropic", "kind", "cache_read"}, 2},
		{"tokens_total", []string{"format", "anthropic", "kind", "output"}, 3},
		{"tokens_total", []string{"format", "google", "kind", "reasoning"}, 7},
		{"cost_usd_total", []string{"format", "anthropic"}, 1.5},
		{"budget_refusals_total", []string{"format", "chat"}, 1},
	} {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v: %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

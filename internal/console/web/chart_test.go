package web

import (
	"strings"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/money"
)

func TestUSD(t *testing.T) {
	for p, want := range map[money.Pico]string{
		0:                     "$0.00",
		12_500_000_000_000:    "$12.50",
		1_234_567_000_000_000: "$1,234.57",
		10_000_000_000:        "$0.01",
		172_000_000:           "$0.000172",
		1_000_000:             "$0.000001",
		1:                     "<$0.000001",
		-2_000_000_000_000:    "-$2.00",
	} {
		if got := usd(p); got != want {
			t.Errorf("usd(%d) = %q, want %q", p, got, want)
		}
	}
}

func TestAxis(t *testing.T) {
	for v, want := range map[float64]string{0: "$0", 2.5: "$2.5", 50: "$50", 0.00005: "$0.00005", 0.00015: "$0.00015", 0.25: "$0.25"} {
		if got := axisUSD(v); got != want {
			t.Errorf("axisUSD(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestBuildChart(t *testing.T) {
	from := time.Date(2025, 5, 3, 0, 0, 0, 0, time.UTC)
	days := make([]daySpend, 30)
	for i := range days {
		days[i].Day = from.AddDate(0, 0, i)
	}
	days[29].Cost = 2_000_000_000_000 // $2, the highest
	days[10].Cost = 1_000_000_000_000 // $1
	days[0].Cost = 1_000_000          // tiny, but visible
	c := buildChart(days, false)
	if len(c.Bars) != 30 || c.Total != 3_000_001_000_000 {
		t.Fatalf("%d bars, total %v", len(c.Bars), c.Total)
	}
	plotH := float64(c.Height)
	if h := c.Bars[29].H; h != plotH {
		t.Errorf("the highest bar is %v high, want the plot height %v (top of the axis $2)", h, plotH)
	}
	if h := c.Bars[10].H; h != plotH/2 {
		t.Errorf("the $1 bar is %v high, want %v", h, plotH/2)
	}
	if c.Bars[0].H < 1.5 || c.Bars[1].H != 0 {
		t.Errorf("tiny bar %v, empty bar %v", c.Bars[0].H, c.Bars[1].H)
	}
	for i, b := range c.Bars {
		if b.Y+b.H != plotH || b.X < 0 || b.X+b.W > float64(c.Width)+0.001 {
			t.Errorf("bar %d out of the plot: %+v", i, b)
		}
		// Each bar sits in its own thirtieth of the plot, as the day's
		// slot under the axis does.
		if slot := float64(c.Width) / 30; b.X < float64(i)*slot || b.X+b.W > float64(i+1)*slot+0.001 {
			t.Errorf("bar %d leaves its day's slot: %+v", i, b)
		}
	}
	if len(c.Ticks) != 5 || c.Ticks[4].Label != "$2" || c.Ticks[0].Label != "$0" || c.Ticks[0].Y != plotH || c.Ticks[4].Y != 0 {
		t.Errorf("ticks %+v", c.Ticks)
	}
	var labels, phone []string
	for i, b := range c.Bars {
		if b.Label != "" {
			labels = append(labels, b.Label)
			if !b.Alt {
				phone = append(phone, b.Label)
			}
		}
		if b.End != (i == 29) {
			t.Errorf("bar %d: end %v", i, b.End)
		}
	}
	if got := strings.Join(labels, ","); got != "May 4,May 11,May 18,May 25,Jun 1" {
		t.Errorf("x labels %s", got)
	}
	if got := strings.Join(phone, ","); got != "May 4,May 18,Jun 1" {
		t.Errorf("x labels on phones %s", got)
	}
	// No spend at all: an empty chart with a $1 axis.
	empty := buildChart(make([]daySpend, 30), false)
	if empty.Total != 0 || empty.Ticks[4].Label != "$1" {
		t.Errorf("empty chart: %+v", empty.Ticks)
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"":                            "/",
		"/":                           "/",
		"/device?user_code=BCDF-GHJK": "/device?user_code=BCDF-GHJK",
		"/w/wrk_1/members":            "/w/wrk_1/members",
		"//evil.example":              "/",
		"///evil.example":             "/",
		"/\\evil.example":             "/",
		"https://evil.example/":       "/",
		"http:/evil":                  "/",
		"javascript:alert(1)":         "/",
		"/ok\r\nSet-Cookie: x=1":      "/",
		"relative/path":               "/",
		"/%2F%2Fevil.example":         "/%2F%2Fevil.example",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

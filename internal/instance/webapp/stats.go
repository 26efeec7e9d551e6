package webapp

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/session"
	"github.com/agentgate/agentgate/internal/webpage"
)

// statsDays are the ranges the stats page offers, in days.
var statsDays = []int{7, 30, 90}

// stats is the session stats report as the page reads it.
type stats struct {
	Sessions   int                `json:"sessions"`
	Subagents  int                `json:"subagents"`
	Prompts    int                `json:"prompts"`
	Steps      int                `json:"steps"`
	Cost       float64            `json:"cost"`
	Tokens     session.TokenUsage `json:"tokens"`
	ActiveDays int                `json:"activeDays"`
	Streak     int                `json:"streak"`
	Activity   []struct {
		Date  string `json:"date"`
		Steps int    `json:"steps"`
	} `json:"activity"`
	Tools struct {
		Totals toolRow   `json:"totals"`
		Usage  []toolRow `json:"usage"`
	} `json:"tools"`
	Models []struct {
		Model *agents.ModelRef `json:"model"`
		Steps int              `json:"steps"`
		Cost  float64          `json:"cost"`
	} `json:"models"`
}

type toolRow struct {
	Name        string   `json:"name"`
	Calls       int      `json:"calls"`
	Succeeded   int      `json:"succeeded"`
	Failed      int      `json:"failed"`
	Unfinished  int      `json:"unfinished"`
	DurationP50 *float64 `json:"durationP50"`
}

// Reliability is the share of calls that succeeded, in percent.
func (t toolRow) Reliability() string {
	if t.Calls == 0 {
		return "–"
	}
	return strconv.FormatFloat(100*float64(t.Succeeded)/float64(t.Calls), 'f', 0, 64) + "%"
}

// P50 is the median run time, for display.
func (t toolRow) P50() string {
	if t.DurationP50 == nil {
		return "–"
	}
	d := time.Duration(*t.DurationP50 * float64(time.Millisecond))
	return d.Round(time.Millisecond).String()
}

type statsData struct {
	Days  int
	Range []int
	TZ    string
	Stats stats
	Chart chart
}

// statsPage is the activity of the chosen number of days up to now, by
// day in the chosen time zone (a steps chart), with tool reliability and
// the models used.
func (a *App) statsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	days := 30
	if v := q.Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || !slices.Contains(statsDays, n) {
			a.fail(w, r, errs.InvalidRequest("query", "days must be 7, 30 or 90"))
			return
		}
		days = n
	}
	tzName := q.Get("tz")
	if tzName == "" {
		tzName = "UTC"
	}
	tz, err := time.LoadLocation(tzName)
	if err != nil {
		a.fail(w, r, errs.InvalidRequest("query", "unknown time zone "+strconv.Quote(tzName)))
		return
	}
	now := a.opts.Clock.Now().In(tz)
	y, m, dd := now.Date()
	first := time.Date(y, m, dd, 0, 0, 0, 0, tz).AddDate(0, 0, -(days - 1))
	sess := a.opts.Backend.Sessions()
	raw, err := sess.Stats(ctx(r), session.StatsQuery{From: first.UnixMilli(), To: now.UnixMilli(), TZ: tzName, Tools: "detail"})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	d := statsData{Days: days, Range: statsDays, TZ: tzName}
	b, _ := json.Marshal(raw)
	if err := json.Unmarshal(b, &d.Stats); err != nil {
		a.fail(w, r, err)
		return
	}
	steps := map[string]int{}
	for _, e := range d.Stats.Activity {
		steps[e.Date] = e.Steps
	}
	var series []dayValue
	for t := first; !t.After(now); t = t.AddDate(0, 0, 1) {
		k := t.Format("2006-01-02")
		series = append(series, dayValue{Day: t, Value: steps[k]})
	}
	d.Chart = buildChart(series)
	pd := a.data(r, "Stats", "stats")
	pd.Data = d
	a.render(w, http.StatusOK, "stats", pd)
}

// dayValue is one day's count.
type dayValue struct {
	Day   time.Time
	Value int
}

// chart is a server-rendered bar chart, with no script: an SVG of the
// plot alone (grid lines and bars, stretched to the width of the page)
// and the axis labels as HTML beside and under it, so that the labels
// keep the stylesheet's size however wide the chart is drawn. The
// template lays the labels out with CSS: the y labels spread evenly from
// the plot's bottom to its top, one x slot per day.
type chart struct {
	Width, Height int // the plot's viewBox: bars from y = Height up
	Bars          []bar
	Ticks         []tick // bottom to top: 0 … the top of the axis
	Max           int
}

// bar is one day: its rectangle in the plot, and the day's label under
// the axis ("" for the days between labels).
type bar struct {
	X, Y, W, H float64
	Day        dayValue
	Label      string
	Alt        bool // every other label: hidden on phones, where they would touch
}

type tick struct {
	Y     float64
	Label string
}

func buildChart(days []dayValue) chart {
	c := chart{Width: 700, Height: 200}
	top := 0
	for _, d := range days {
		top = max(top, d.Value)
	}
	c.Max = top
	scale := max(webpage.NiceCeil(float64(top)), 4) // quarter ticks of whole steps
	plotW, plotH := float64(c.Width), float64(c.Height)
	slot := plotW / float64(max(len(days), 1))
	w := math.Max(slot*0.7, 1)
	every := max(1, len(days)/6)
	for i, d := range days {
		h := plotH * float64(d.Value) / scale
		x := slot*float64(i) + (slot-w)/2
		b := bar{X: round1(x), Y: round1(plotH - h), W: round1(w), H: round1(h), Day: d}
		if i%every == 0 {
			b.Label, b.Alt = d.Day.Format("Jan 2"), i/every%2 == 1
		}
		c.Bars = append(c.Bars, b)
	}
	for i := 0; i <= 4; i++ {
		v := scale * float64(i) / 4
		c.Ticks = append(c.Ticks, tick{Y: round1(plotH - plotH*float64(i)/4), Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return c
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

package web

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/webpage"
)

// daySpend is one UTC day of spend.
type daySpend struct {
	Day  time.Time
	Cost money.Pico
}

// chart is a server-rendered bar chart of daily spend, with no script:
// an SVG of the plot alone (grid lines and bars, stretched to the width
// of the page) and the axis labels as HTML beside and under it, so that
// the labels keep the stylesheet's size however wide the chart is drawn.
// The template lays the labels out with CSS: the y labels spread evenly
// from the plot's bottom to its top, one x slot per day.
type chart struct {
	Width, Height int // the plot's viewBox: bars from y = Height up
	Bars          []bar
	Ticks         []tick // bottom to top: $0 … the top of the axis
	Days          []daySpend
	Total         money.Pico
	Truncated     bool // more usage than the chart reads
	From, To      time.Time
}

// bar is one day: its rectangle in the plot, and the day's label under
// the axis ("" for most days).
type bar struct {
	X, Y, W, H float64
	Day        daySpend
	Label      string
	End        bool // the last day's label, which ends at the plot's right edge
	Alt        bool // every other label, counted back from the last: hidden on phones
}

type tick struct {
	Y     float64
	Label string
}

// buildChart lays out the bars of days (oldest first).
func buildChart(days []daySpend, truncated bool) chart {
	c := chart{Width: 600, Height: 200, Days: days, Truncated: truncated}
	if len(days) == 0 {
		return c
	}
	c.From, c.To = days[0].Day, days[len(days)-1].Day
	var max money.Pico
	for _, d := range days {
		c.Total += d.Cost
		if d.Cost > max {
			max = d.Cost
		}
	}
	top := webpage.NiceCeil(float64(max) / 1e12)
	plotH := float64(c.Height)
	slot := float64(c.Width) / float64(len(days))
	for i, d := range days {
		h := 0.0
		if top > 0 {
			h = float64(d.Cost) / 1e12 / top * plotH
		}
		if d.Cost > 0 && h < 1.5 {
			h = 1.5 // a day with any spend stays visible
		}
		b := bar{X: float64(i)*slot + slot*0.15, Y: plotH - h, W: slot * 0.7, H: h, Day: d}
		if back := len(days) - 1 - i; back%7 == 0 { // the last day, and every week back from it
			b.Label, b.End, b.Alt = d.Day.Format("Jan 2"), back == 0, back%14 != 0
		}
		c.Bars = append(c.Bars, b)
	}
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		c.Ticks = append(c.Ticks, tick{Y: plotH - plotH*float64(i)/4, Label: axisUSD(v)})
	}
	return c
}

// axisUSD formats an axis value with as few decimals as it needs.
func axisUSD(v float64) string {
	switch {
	case v == 0:
		return "$0"
	case v >= 1:
		return "$" + strconv.FormatFloat(v, 'f', -1, 64)
	}
	dec := int(-math.Floor(math.Log10(v))) + 2
	if dec > 12 {
		dec = 12
	}
	s := strings.TrimRight(strconv.FormatFloat(v, 'f', dec, 64), "0")
	return "$" + strings.TrimSuffix(s, ".")
}

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

// chart is a server-rendered SVG bar chart of daily spend: plain geometry
// for the template, no script.
type chart struct {
	Width, Height int
	Left, Top     float64 // the plot area's top-left corner
	Right, Bottom float64 // and bottom-right
	TickX, LabelY float64 // where the axis labels go
	Bars          []bar
	Ticks         []tick
	Labels        []xLabel
	Days          []daySpend
	Total         money.Pico
	Truncated     bool // more usage than the chart reads
	From, To      time.Time
}

type bar struct {
	X, Y, W, H float64
	Day        daySpend
}

type tick struct {
	Y     float64
	Label string
}

type xLabel struct {
	X      float64
	Label  string
	Anchor string // text-anchor: middle, or end for the last day
}

// buildChart lays out the bars of days (oldest first).
func buildChart(days []daySpend, truncated bool) chart {
	c := chart{Width: 720, Height: 260, Left: 70, Top: 14, Right: 710, Bottom: 224, Days: days, Truncated: truncated}
	if len(days) == 0 {
		c.TickX, c.LabelY = c.Left-8, c.Bottom+22
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
	widest := 0
	for i := 0; i <= 4; i++ {
		widest = maxInt(widest, len(axisUSD(top*float64(i)/4)))
	}
	// Room for the y labels at the largest font the stylesheet uses in the
	// chart (22 units on phones), about 0.6 em a character.
	c.Left = 16 + 13.5*float64(widest)
	c.TickX, c.LabelY = c.Left-8, c.Bottom+26
	plotH := c.Bottom - c.Top
	slot := (c.Right - c.Left) / float64(len(days))
	for i, d := range days {
		h := 0.0
		if top > 0 {
			h = float64(d.Cost) / 1e12 / top * plotH
		}
		if d.Cost > 0 && h < 1.5 {
			h = 1.5 // a day with any spend stays visible
		}
		x := c.Left + float64(i)*slot
		c.Bars = append(c.Bars, bar{X: x + slot*0.15, Y: c.Bottom - h, W: slot * 0.7, H: h, Day: d})
		if (len(days)-1-i)%7 == 0 { // the last day, and every week back from it
			l := xLabel{X: x + slot/2, Label: d.Day.Format("Jan 2"), Anchor: "middle"}
			if i == len(days)-1 {
				l.X, l.Anchor = c.Right, "end"
			}
			c.Labels = append(c.Labels, l)
		}
	}
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		c.Ticks = append(c.Ticks, tick{Y: c.Bottom - plotH*float64(i)/4, Label: axisUSD(v)})
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

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

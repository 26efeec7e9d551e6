package webapp

import (
	"strings"
	"testing"
	"time"
)

// TestBuildChart: the bars fill the plot's viewBox, one slot a day, the
// highest at the top of the axis; the ticks run from the bottom up; about
// six days carry a label, and every other one of them is marked to be
// hidden on phones.
func TestBuildChart(t *testing.T) {
	from := time.Date(2025, 5, 3, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{7, 30, 90} {
		days := make([]dayValue, n)
		for i := range days {
			days[i] = dayValue{Day: from.AddDate(0, 0, i)}
		}
		days[n-1].Value = 10
		days[0].Value = 5
		c := buildChart(days)
		if len(c.Bars) != n || c.Max != 10 {
			t.Fatalf("%d days: %d bars, max %d", n, len(c.Bars), c.Max)
		}
		w, h := float64(c.Width), float64(c.Height)
		slot := w / float64(n)
		for i, b := range c.Bars {
			if b.X < float64(i)*slot-0.1 || b.X+b.W > float64(i+1)*slot+0.1 || b.Y+b.H < h-0.1 || b.Y+b.H > h+0.1 {
				t.Errorf("%d days: bar %d leaves its slot: %+v", n, i, b)
			}
		}
		if c.Bars[n-1].H != h || c.Bars[0].H != h/2 || c.Bars[1].H != 0 {
			t.Errorf("%d days: bar heights %v, %v, %v in a plot %v high", n, c.Bars[n-1].H, c.Bars[0].H, c.Bars[1].H, h)
		}
		if len(c.Ticks) != 5 || c.Ticks[0].Y != h || c.Ticks[0].Label != "0" || c.Ticks[4].Y != 0 || c.Ticks[4].Label != "10" {
			t.Errorf("%d days: ticks %+v", n, c.Ticks)
		}
		var all, phone []string
		for _, b := range c.Bars {
			if b.Label == "" {
				if b.Alt {
					t.Errorf("%d days: an unlabelled day is marked alt", n)
				}
				continue
			}
			all = append(all, b.Label)
			if !b.Alt {
				phone = append(phone, b.Label)
			}
		}
		if all[0] != "May 3" || len(all) < 6 || len(all) > 7 || len(phone) != (len(all)+1)/2 {
			t.Errorf("%d days: labels %s, on phones %s", n, strings.Join(all, ","), strings.Join(phone, ","))
		}
	}
}

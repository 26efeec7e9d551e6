package web

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
	"github.com/agentgate/agentgate/internal/webpage"
)

// parsePages parses each page template with the shared layout.
func parsePages() map[string]*template.Template {
	return webpage.ParsePages(templateFS, funcs, "templates/layout.html")
}

var funcs = template.FuncMap{
	"usd":       usd,
	"usdPtr":    func(p *money.Pico) string { return usdOr(p, "—") },
	"price":     func(m money.Micros) string { return "$" + m.String() },
	"modelForm": modelForm,
	"when":      when,
	"day":       func(t time.Time) string { return t.UTC().Format("Mon Jan 2") },
	"date":      func(t time.Time) string { return t.UTC().Format(time.DateOnly) },
	"resets": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("Jan 2, 2006")
	},
	"perm": permLabel,
	"kind": kindLabel,
	"f1":   func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"ws":   wsPath,
	"limitInput": func(p *money.Pico) string {
		if p == nil {
			return ""
		}
		return p.String()
	},
	"eq2": func(a string, b *string) bool { return b != nil && *b == a },
	// clientName is what the Console calls a sign-in's client ("" for one
	// it does not know).
	"clientName": service.ClientName,
	// count writes a whole number with thousands separators.
	"count": func(n int64) string { return webpage.Commas(strconv.FormatInt(n, 10)) },
}

// usd formats an amount of dollars for people: cents from a cent up,
// otherwise as many decimals as it takes (up to six).
func usd(p money.Pico) string {
	if p == 0 {
		return "$0.00"
	}
	f := float64(p) / 1e12
	neg := ""
	if f < 0 {
		neg, f = "-", -f
	}
	if f >= 0.01 {
		return neg + "$" + webpage.Commas(strconv.FormatFloat(f, 'f', 2, 64))
	}
	dec := int(-math.Floor(math.Log10(f))) + 2
	if dec > 6 {
		dec = 6
	}
	s := strings.TrimRight(strings.TrimRight(strconv.FormatFloat(f, 'f', dec, 64), "0"), ".")
	if s == "0" {
		return neg + "<$0.000001"
	}
	return neg + "$" + s
}

func usdOr(p *money.Pico, none string) string {
	if p == nil {
		return none
	}
	return usd(*p)
}

// when formats a time or a *time.Time in UTC ("—" for none).
func when(v any) string {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x == nil {
			return "—"
		}
		t = *x
	default:
		return fmt.Sprint(v)
	}
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

func permLabel(p string) string {
	switch p {
	case store.PermissionInference:
		return "Inference only"
	case store.PermissionAll:
		return "All"
	}
	return p
}

func kindLabel(k string) string {
	switch k {
	case store.MemberPerson:
		return "Person"
	case store.MemberServiceAccount:
		return "Service account"
	}
	return k
}

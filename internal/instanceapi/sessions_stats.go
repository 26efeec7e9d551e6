package instanceapi

import (
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/agentgate/agentgate/internal/router"
	"github.com/agentgate/agentgate/internal/store"
)

type toolTotals struct {
	Calls      int `json:"calls"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
}

type statsMessage struct {
	Type    string     `json:"type"`
	Model   *ModelRef  `json:"model"`
	Cost    float64    `json:"cost"`
	Tokens  TokenUsage `json:"tokens"`
	Content []struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		State struct {
			Status string `json:"status"`
		} `json:"state"`
	} `json:"content"`
	Time struct {
		Created float64 `json:"created"`
	} `json:"time"`
}

func addTokens(a *TokenUsage, b TokenUsage) {
	a.Input += b.Input
	a.Output += b.Output
	a.Reasoning += b.Reasoning
	a.Cache.Read += b.Cache.Read
	a.Cache.Write += b.Cache.Write
}

// sessionStats aggregates stored sessions of the instance whose activity
// (messages and admitted prompts) falls in [from, to]. It reads every
// session of the instance: stats are an occasional report, not a list.
func (s *Server) sessionStats(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	q := r.URL.Query()
	now := s.nowMS()
	from, to := int64(0), now
	for name, dst := range map[string]*int64{"from": &from, "to": &to} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return invalidRequest("query", name+" must be epoch milliseconds")
			}
			*dst = n
		}
	}
	if to <= from {
		return invalidRequest("query", "Stats range must end after it starts")
	}
	tzName := q.Get("timezone")
	if tzName == "" {
		tzName = "UTC"
	}
	tz, err := time.LoadLocation(tzName)
	if err != nil {
		return invalidRequest("query", "Invalid time zone: "+tzName)
	}
	mode := q.Get("tools")
	switch mode {
	case "":
		mode = "none"
	case "none", "summary", "detail":
	default:
		return invalidRequest("query", `tools must be "none", "summary" or "detail"`)
	}
	project := q.Get("project")

	var out struct {
		sessions, subagents, prompts, steps int
		tokens                              TokenUsage
		cost                                float64
		totals                              toolTotals
		usage                               map[string]*toolTotals
		days                                map[string]int
		models                              map[string]map[string]any
	}
	out.usage, out.days, out.models = map[string]*toolTotals{}, map[string]int{}, map[string]map[string]any{}
	in := func(ms float64) bool { return ms >= float64(from) && ms <= float64(to) }
	err = s.view(r.Context(), func(tx store.Tx) error {
		inst := s.instanceName()
		scan := store.SessionScan{Project: project}
		return tx.ListInstanceSessions(inst, scan, func(rec *store.InstanceSession) (bool, error) {
			active := false
			err := tx.SessionItems(inst, rec.ID, store.ItemMessage, func(raw []byte) (bool, error) {
				var m statsMessage
				if json.Unmarshal(raw, &m) != nil || !in(m.Time.Created) {
					return true, nil
				}
				active = true
				switch m.Type {
				case "user":
					out.prompts++
				case "assistant":
					out.steps++
					out.cost += m.Cost
					addTokens(&out.tokens, m.Tokens)
					out.days[time.UnixMilli(int64(m.Time.Created)).In(tz).Format("2006-01-02")]++
					if m.Model != nil {
						key := m.Model.ProviderID + "/" + m.Model.ID + "#" + m.Model.Variant
						e := out.models[key]
						if e == nil {
							e = map[string]any{"model": m.Model, "steps": 0, "tokens": &TokenUsage{}, "cost": 0.0}
							out.models[key] = e
						}
						e["steps"] = e["steps"].(int) + 1
						addTokens(e["tokens"].(*TokenUsage), m.Tokens)
						e["cost"] = e["cost"].(float64) + m.Cost
					}
					for _, c := range m.Content {
						if c.Type != "tool" {
							continue
						}
						u := out.usage[c.Name]
						if u == nil {
							u = &toolTotals{}
							out.usage[c.Name] = u
						}
						for _, t := range []*toolTotals{&out.totals, u} {
							t.Calls++
							switch c.State.Status {
							case "completed":
								t.Succeeded++
							case "error":
								t.Failed++
							default:
								t.Unfinished++
							}
						}
					}
				}
				return true, nil
			})
			if err != nil {
				return false, err
			}
			err = tx.SessionItems(inst, rec.ID, store.ItemInbox, func(raw []byte) (bool, error) {
				var m statsMessage
				if json.Unmarshal(raw, &m) == nil && m.Type == "user" && in(m.Time.Created) {
					active = true
					out.prompts++
				}
				return true, nil
			})
			if active {
				if rec.ParentID == "" {
					out.sessions++
				} else {
					out.subagents++
				}
			}
			return true, err
		})
	})
	if err != nil {
		return err
	}
	dates := make([]string, 0, len(out.days))
	for d := range out.days {
		dates = append(dates, d)
	}
	sort.Strings(dates)
	activity := make([]map[string]any, 0, len(dates))
	streak, run := 0, 0
	var prev time.Time
	for _, d := range dates {
		activity = append(activity, map[string]any{"date": d, "steps": out.days[d]})
		t, _ := time.Parse("2006-01-02", d)
		if run > 0 && math.Round(t.Sub(prev).Hours()/24) == 1 {
			run++
		} else {
			run = 1
		}
		prev, streak = t, max(streak, run)
	}
	models := make([]map[string]any, 0, len(out.models))
	for _, m := range out.models {
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool { return models[i]["steps"].(int) > models[j]["steps"].(int) })
	tools := map[string]any{"mode": mode}
	if mode != "none" {
		tools["totals"] = out.totals
	}
	if mode == "detail" {
		usage := make([]map[string]any, 0, len(out.usage))
		for name, u := range out.usage {
			usage = append(usage, map[string]any{"name": name, "calls": u.Calls, "succeeded": u.Succeeded, "failed": u.Failed, "unfinished": u.Unfinished})
		}
		sort.Slice(usage, func(i, j int) bool { return usage[i]["name"].(string) < usage[j]["name"].(string) })
		tools["usage"] = usage
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{
		"range": map[string]int64{"from": from, "to": to}, "sessions": out.sessions, "subagents": out.subagents,
		"prompts": out.prompts, "steps": out.steps, "tokens": out.tokens, "cost": out.cost, "tools": tools,
		"activeDays": len(dates), "streak": streak, "activity": activity, "models": models}})
	return nil
}

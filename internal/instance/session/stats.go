package session

import (
	"context"
	"encoding/json"
	"math"
	"sort"
	"time"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/store"
)

type toolTotals struct {
	Calls      int `json:"calls"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// durations are the settled calls' run times in milliseconds (from
	// the call starting to its result), for the median.
	durations []float64
}

type statsMessage struct {
	Type    string           `json:"type"`
	Model   *agents.ModelRef `json:"model"`
	Cost    float64          `json:"cost"`
	Tokens  TokenUsage       `json:"tokens"`
	Content []struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		State struct {
			Status string `json:"status"`
		} `json:"state"`
		Time struct {
			Ran       *float64 `json:"ran"`
			Completed *float64 `json:"completed"`
		} `json:"time"`
	} `json:"content"`
	Time struct {
		Created float64 `json:"created"`
	} `json:"time"`
}

// StatsQuery selects the activity Stats reports: [From, To] in epoch
// milliseconds, the days counted in TZ (default UTC), the
// tool report ("none", "summary" or "detail"), one project or all.
type StatsQuery struct {
	From, To int64
	TZ       string
	Tools    string
	Project  string
}

// Stats aggregates stored sessions of the instance whose activity
// (messages and admitted prompts) falls in [from, to]. It reads every
// session of the instance: stats are an occasional report, not a list.
func (s *Service) Stats(ctx context.Context, q StatsQuery) (map[string]any, error) {
	from, to := q.From, q.To
	if from < 0 || to <= from {
		return nil, errs.InvalidRequest("query", "Stats range must end after it starts")
	}
	tzName := q.TZ
	if tzName == "" {
		tzName = "UTC"
	}
	tz, err := time.LoadLocation(tzName)
	if err != nil {
		return nil, errs.InvalidRequest("query", "Invalid time zone: "+tzName)
	}
	mode := q.Tools
	switch mode {
	case "":
		mode = "none"
	case "none", "summary", "detail":
	default:
		return nil, errs.InvalidRequest("query", `tools must be "none", "summary" or "detail"`)
	}
	project := q.Project

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
	err = s.ReadTx(ctx, func(tx store.Tx) error {
		inst := s.InstanceName()
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
					out.tokens.Add(m.Tokens)
					out.days[time.UnixMilli(int64(m.Time.Created)).In(tz).Format("2006-01-02")]++
					if m.Model != nil {
						key := m.Model.ProviderID + "/" + m.Model.ID + "#" + m.Model.Variant
						e := out.models[key]
						if e == nil {
							e = map[string]any{"model": m.Model, "steps": 0, "tokens": &TokenUsage{}, "cost": 0.0}
							out.models[key] = e
						}
						e["steps"] = e["steps"].(int) + 1
						e["tokens"].(*TokenUsage).Add(m.Tokens)
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
						if c.Time.Ran != nil && c.Time.Completed != nil && *c.Time.Completed >= *c.Time.Ran {
							u.durations = append(u.durations, *c.Time.Completed-*c.Time.Ran)
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
		return nil, err
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
			e := map[string]any{"name": name, "calls": u.Calls, "succeeded": u.Succeeded, "failed": u.Failed, "unfinished": u.Unfinished}
			if len(u.durations) > 0 {
				e["durationP50"] = median(u.durations)
			}
			usage = append(usage, e)
		}
		sort.Slice(usage, func(i, j int) bool { return usage[i]["name"].(string) < usage[j]["name"].(string) })
		tools["usage"] = usage
	}
	return map[string]any{
		"range": map[string]int64{"from": from, "to": to}, "sessions": out.sessions, "subagents": out.subagents,
		"prompts": out.prompts, "steps": out.steps, "tokens": out.tokens, "cost": out.cost, "tools": tools,
		"activeDays": len(dates), "streak": streak, "activity": activity, "models": models}, nil
}

// median is the middle value of xs (the mean of the middle two for an
// even count).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

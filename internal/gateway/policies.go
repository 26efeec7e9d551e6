package gateway

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/agentgate/agentgate/internal/apierr"
	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/quota"
	"github.com/agentgate/agentgate/internal/service"
)

// checkPolicies applies the workspace's policies to a request for model:
// a deny (or a missing allow) is 403 PolicyDenied; the limits it counts
// against admit it with its upper bound of tokens (its body's bytes plus
// maxOut; none for a token count) reserved, or refuse it with 429
// RateLimited, Retry-After and x-ratelimit-* headers. A workspace without
// policies costs one cached lookup.
func (c *call) checkPolicies(p *service.Principal, model string, maxOut int64) *apierr.Error {
	qs, err := c.svc.CheckPolicies(c.r.Context(), p, model)
	if err != nil {
		return apierr.As(err)
	}
	if len(qs) == 0 {
		return nil
	}
	keys := make([]string, len(qs))
	lims := make([]quota.Limit, len(qs))
	for i, q := range qs {
		keys[i], lims[i] = q.Key, q.Limit
	}
	var reserve int64
	if c.route.Op != formats.CountTokens {
		// Saturates: a bound past int64 is refused by any token limit.
		reserve = money.AddSat(int64(c.out.Len()), maxOut)
	}
	now := c.svc.Clock.Now()
	t, ref := c.p.quotas.Admit(now, keys, lims, reserve)
	if ref == nil {
		c.ticket = t
		return nil
	}
	var q service.Quota
	for _, x := range qs {
		if x.Key == ref.Key {
			q = x
		}
	}
	retry := max(int(math.Ceil(ref.RetryAt.Sub(now).Seconds())), 1)
	h := c.w.Header()
	h.Set("Retry-After", strconv.Itoa(retry))
	reset := strconv.Itoa(retry) + "s"
	if l := ref.Limit.Requests; l > 0 {
		h.Set("X-Ratelimit-Limit-Requests", strconv.FormatInt(l, 10))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.FormatInt(max(l-ref.Requests, 0), 10))
		h.Set("X-Ratelimit-Reset-Requests", reset)
	}
	if l := ref.Limit.Tokens; l > 0 {
		h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(l, 10))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(max(l-ref.Tokens, 0), 10))
		h.Set("X-Ratelimit-Reset-Tokens", reset)
	}
	what := fmt.Sprintf("%d requests", q.Policy.RequestsPerMinute)
	if ref.ByTokens {
		what = fmt.Sprintf("%d tokens (this request may use up to %d)", q.Policy.TokensPerMinute, ref.Requested)
	}
	if q.Nodes > 1 {
		// Each node enforces its share.
		if ref.ByTokens {
			what += fmt.Sprintf(", %d on each of %d gateway nodes", ref.Limit.Tokens, q.Nodes)
		} else {
			what += fmt.Sprintf(", %d on each of %d gateway nodes", ref.Limit.Requests, q.Nodes)
		}
	}
	e := apierr.New(http.StatusTooManyRequests, "RateLimited", "policy %q (%s) allows %s per minute per %s; retry in %s",
		q.Policy.Name, q.Policy.ID, what, q.Policy.Per, time.Duration(retry)*time.Second)
	e.Fields = map[string]any{"policy": q.Policy.ID, "retry_after_seconds": retry}
	return e
}

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/money"
	"github.com/agentgate/agentgate/internal/service"
	"github.com/agentgate/agentgate/internal/store"
)

// After a small spend, a request whose output bound is far past int64's
// worth of money is refused by its budget: its reservation saturates, and
// the ledger never wraps spend + reserved + the reservation into a small
// sum that fits.
func TestHugeOutputBoundRefusedAfterSpend(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := service.Operator(e.ws)
	sa, _ := e.svc.CreateServiceAccount(ctx, op, "budgeted")
	k, _ := e.svc.CreateKey(ctx, op, sa.ID, service.NewKey{Name: "k", Permission: store.PermissionInference})
	limit := money.Micros(100 * money.Scale)
	if _, err := e.svc.SetBudget(ctx, op, sa.ID, service.BudgetInput{LimitUSD: &limit, Period: store.PeriodMonthly}); err != nil {
		t.Fatal(err)
	}
	send := func(maxTokens string) (int, string) {
		body := `{"model":"claude-sonnet","max_tokens":` + maxTokens + `,"messages":[]}`
		req, _ := http.NewRequest("POST", e.base+"/custom/"+e.conns["anthropic"]+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", k.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, b := send("100"); st != 200 {
		t.Fatalf("a small request: %d %s", st, b)
	}
	e.svc.Ledger.Wait()
	for _, mt := range []string{"1000000000000000", "922337203685477580", "9223372036854775807"} {
		st, b := send(mt)
		// 402 is the budget's refusal; 400 would be a bound refused as
		// malformed before any reservation. Never admitted.
		if st != 402 && st != 400 {
			t.Fatalf("max_tokens %s: %d %s, want the budget's refusal", mt, st, b)
		}
		if st == 402 && !strings.Contains(b, "BudgetExceeded") {
			t.Fatalf("max_tokens %s: %s", mt, b)
		}
	}
}

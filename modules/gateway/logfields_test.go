package gateway

import (
	"context"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentgate/agentgate/internal/store"
)

// The metering goes into the access log entry of a server that writes
// one, and is not built for a server that writes none.
func TestLogFieldsOnlyForAccessLogs(t *testing.T) {
	for _, c := range []struct {
		srv  *caddyhttp.Server
		want int
	}{{&caddyhttp.Server{}, 0}, {&caddyhttp.Server{Logs: &caddyhttp.ServerLogConfig{}}, 1}, {nil, 1}} {
		extra := new(caddyhttp.ExtraLogFields)
		ctx := context.WithValue(context.Background(), caddyhttp.ExtraLogFieldsCtxKey, extra)
		if c.srv != nil {
			ctx = context.WithValue(ctx, caddyhttp.ServerCtxKey, c.srv)
		}
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil).WithContext(ctx)
		logFields(r, &store.UsageRecord{ID: "u", Model: "m"})
		if n := reflect.ValueOf(extra).Elem().FieldByName("fields").Len(); n != c.want {
			t.Errorf("server %+v: %d fields, want %d", c.srv, n, c.want)
		}
	}
}

package gateway_test

import (
	"slices"
	"testing"

	"github.com/agentgate/agentgate/internal/formats"
	"github.com/agentgate/agentgate/modules/internal/accesslog"
)

// TestAccessLogCoversEveryKeySlot: every header the gateway reads a
// workspace key from is either redacted by Caddy (Authorization) or kept
// out of the access log by package accesslog (?key= is covered by the
// site test there).
func TestAccessLogCoversEveryKeySlot(t *testing.T) {
	for _, h := range formats.ClientCredentialHeaders {
		if h != "Authorization" && !slices.Contains(accesslog.Headers, h) {
			t.Errorf("%s is read by the gateway but not kept out of the access log", h)
		}
	}
}

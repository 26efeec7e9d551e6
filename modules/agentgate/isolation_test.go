package agentgate

import (
	"testing"

	"github.com/agentgate/agentgate/internal/testenv"
)

// TestAppWritesOnlyTempDirs runs the app's Badger tests (provisioning,
// reloads, a generated master key, declared connections) with an empty
// home and empty XDG and temporary directories: all stay empty.
func TestAppWritesOnlyTempDirs(t *testing.T) {
	testenv.RunIsolated(t, "^(TestReloadSharesTheStore|TestMasterKeyGeneratedOnceAndBound|TestDeclaredConnectionsReconciled|TestRequestsBeforeStartWaitThen503)$")
}

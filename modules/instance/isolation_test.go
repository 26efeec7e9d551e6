package instance

import (
	"testing"

	"github.com/agentgate/agentgate/internal/testenv"
)

// TestInstanceWritesOnlyTempDirs runs the handler's tests (provisioning
// with the app, pairing across a reload, locations and agents, a member
// instance calling the gateway in-process) with an
// empty home and empty XDG and temporary directories: all stay empty.
func TestInstanceWritesOnlyTempDirs(t *testing.T) {
	testenv.RunIsolated(t, "^(TestPairingSurvivesReload|TestServeHTTPRouting|TestDirectoryAndAgents|TestProvisionErrors|TestMemberTurns|TestPluginsArriveWithoutManualSteps)$")
}

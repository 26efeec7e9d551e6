package plugins

import (
	"testing"

	"github.com/agentgate/agentgate/internal/testenv"
)

// TestPluginInstallsWriteOnlyTempDirs runs the tests that install from a
// registry and run Bun with a home and TMPDIR of their own, which must
// stay empty: installs go to the test's data directory only.
func TestPluginInstallsWriteOnlyTempDirs(t *testing.T) {
	testenv.RunIsolated(t, "^(TestProjectPackageRuns|TestInstallBun|TestInstallBunFaults|TestNPMRegistry|TestTreeInstall)$")
}

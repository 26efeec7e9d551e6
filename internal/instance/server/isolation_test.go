package server

import (
	"testing"

	"github.com/agentgate/agentgate/internal/testenv"
)

// TestPluginsWriteOnlyTempDirs runs the tests whose plugins run in Bun
// (in the agent loop, their status, their scoped client) with an empty
// home and empty XDG and temporary directories: all stay empty.
func TestPluginsWriteOnlyTempDirs(t *testing.T) {
	testBun(t)
	testenv.RunIsolated(t, "^(TestPluginToolInTheAgentLoop|TestPluginStatusTellsTheTruth|TestPluginClientIsScopedToItsLocation)$")
}

package pluginhost

import (
	"testing"

	"github.com/agentgate/agentgate/internal/testenv"
)

// TestPluginHostWritesOnlyTempDirs runs the plugin host's tests (Bun with
// and without the sandbox, a real plugin package) with an empty home and
// empty XDG and temporary directories: all stay empty.
func TestPluginHostWritesOnlyTempDirs(t *testing.T) {
	bunPath(t)
	testenv.RunIsolated(t, "^(TestHostLoadsToolsAndHooks|TestHostBadPlugins|TestHostRealPluginPackage|TestHostPluginsSeeNoSecrets|TestHostKillsWhatPluginsStart|TestHostClientOverStdio|TestHostModuleShapes)$")
}

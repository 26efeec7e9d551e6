#!/usr/bin/env bash
# Builds Caddy with the agentgate modules through xcaddy, reproducibly:
#
#   xcaddy/build.sh [output] [extra xcaddy build arguments...]
#
# output defaults to ./caddy (relative to the current directory). Extra
# arguments go to `xcaddy build` as they are (e.g. another --with).
#
# - xcaddy is pinned as a Go tool in its own small module (xcaddy/tools,
#   `go get -tool github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5`), so its
#   version and checksums are in xcaddy/tools/go.sum and the root module's
#   dependencies stay clean.
# - Caddy is pinned to the version in the root go.mod, so this build and
#   `go build ./cmd/caddy` use the same Caddy. CADDY_VERSION overrides it.
# - Our module is given as a local replacement with an explicit version
#   (`--with github.com/agentgate/agentgate@v0.0.0=<repo root>`), so the build
#   never looks it up remotely: GONOPROXY, GONOSUMDB and GOVCS keep the go
#   command from asking the module proxy, the checksum database or a VCS host
#   about it (xcaddy's `go get` would otherwise ask the proxy first).
#
# Environment: the usual Go variables (GOPROXY, GOFLAGS, GOMODCACHE, ...) and
# xcaddy's own (XCADDY_DEBUG, XCADDY_SKIP_CLEANUP, XCADDY_GO_BUILD_FLAGS, ...)
# are honoured.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
tools="$here/tools"
module=github.com/agentgate/agentgate

output=caddy
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
	output=$1
	shift
fi
case $output in
/*) ;;
*) output="$PWD/$output" ;;
esac

# The xcaddy temporary module and our tools module must not be put into a
# workspace that some go.work above them might define.
export GOWORK=off

# The replacement alone is not enough: `go get module@v0.0.0`, which xcaddy
# runs, still asks the module proxy about the module and only then falls back
# to the replacement. Keep the module away from the proxy and the checksum
# database (GONOPROXY, GONOSUMDB) and forbid any version-control look-up of it
# (GOVCS ...:off), so that the go command resolves it from the replacement
# without a single remote request.
prepend() { # prepend <go env variable> <pattern>: the pattern, then the current value
	local cur
	cur=$(go env "$1")
	echo "$2${cur:+,$cur}"
}
GONOPROXY=$(prepend GONOPROXY "$module")
GONOSUMDB=$(prepend GONOSUMDB "$module")
GOVCS=$(prepend GOVCS "$module:off")
export GONOPROXY GONOSUMDB GOVCS

if [ -z "${CADDY_VERSION:-}" ]; then
	CADDY_VERSION=$(cd "$root" && go list -m -f '{{.Version}}' github.com/caddyserver/caddy/v2)
fi
if [ -z "$CADDY_VERSION" ]; then
	echo "build.sh: cannot read the Caddy version from $root/go.mod" >&2
	exit 1
fi
# xcaddy reads CADDY_VERSION itself too; keep it consistent with the argument.
export CADDY_VERSION

echo "build.sh: xcaddy $(cd "$tools" && go list -m -f '{{.Version}}' github.com/caddyserver/xcaddy)," \
	"Caddy $CADDY_VERSION, $module@v0.0.0 => $root, output $output" >&2

cd "$tools"
exec go tool xcaddy build "$CADDY_VERSION" \
	--output "$output" \
	--with "$module@v0.0.0=$root" \
	"$@"

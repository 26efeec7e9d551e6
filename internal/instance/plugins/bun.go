package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/cpu"
)

// BunVersion is the Bun the server installs to run plugins when none is
// configured (plugin_host { bun <path> }) or on PATH: the version
// examples/clients pins.
const BunVersion = "1.4.5"

// pinned are the packages the server installs for itself, by name and
// version, with the sha512 integrity their tarballs must have whatever
// the registry says: Bun's builds for each platform, and the modules the
// plugins' runtime gives every plugin (RuntimeModules).
var pinned = map[string]map[string]string{
	"@oven/bun-linux-x64":               {"1.4.5": "sha512-IWX9BELoGHAUtMonkeSaNaZwXzRk+oDw6Mk+HBFXd3KHYIBNBsIGRupMZPcgNoDbJpLu6gAJjIoIVPZtt1aJ1g=="},
	"@oven/bun-linux-x64-baseline":      {"1.4.5": "sha512-s8yMwYcFnnrA178gji0gZbkE2WVDej/Ti1x770oPfihxyRxSMNhGhiAQNXV53aDeraZxksdvKV/RAdQBCd0qPA=="},
	"@oven/bun-linux-x64-musl":          {"1.4.5": "sha512-10QoW/YfTgnURaGEaHpJCiXjLI2e5iTtfVDaA5JKcyUzaa1cq6cVUY9/Uq5XkYzvtRjHLRe9Oj/lTDIQcxy8HQ=="},
	"@oven/bun-linux-x64-musl-baseline": {"1.4.5": "sha512-cWJhU8h0+MiUgpSt99sQhjxLIIosKEcKYdtKddohokUvAuN6jKOy7g7+QDTZTXtwHxz93wL3BX+L6wXVPDUH3A=="},
	"@oven/bun-linux-aarch64":           {"1.4.5": "sha512-4BXmsSKnjOrlGWqZV4x/oWa7AVoR+B6lCXddMzOAXBIm3t50eslg9wb66gmtW1AamEQ1l1CDvmmruysEhqOWMg=="},
	"@oven/bun-linux-aarch64-musl":      {"1.4.5": "sha512-XCNc+WvvMAdNNb+OWTogpy+N9wm62fkVeEVLb6how0RZhW5LPi6c7BlkeVCuWps7XjEl2saFpHFa20/1E+PAHg=="},
	"@oven/bun-darwin-x64":              {"1.4.5": "sha512-qkLPMGHZM9NI6CeHTWwVezzmlo6cC4Ta7yUAjYIWXS366qQcOlcp75t2uZyiuVRBMPS0h9qE0tCcvCHGaFqjJg=="},
	"@oven/bun-darwin-x64-baseline":     {"1.4.5": "sha512-zqfLA5A4B+hYMh5WYzYSot3uZ06FzhdP0OEwQisEzdirYtXGj5cQFlfy31BGfNsAsk1Gd/w/OxJ/jqqJ3cMclw=="},
	"@oven/bun-darwin-aarch64":          {"1.4.5": "sha512-4MIFXHmctH2EhAxLXm2/qxNtv17dFtLJylvaOCsrgq6KSqHTs6eW5YSrJjRbJxYUJaR901fsN8JfZOa+CsWpWQ=="},
	"@opencode-ai/sdk":                  {"1.18.33": "sha512-Nyurky9+AA2tvZ6my8UtO5pxPoXxrNypqjeEqMshBGiR542glOy+KE1Y+3lwWU+Z6HC/hSmrdXNbX81+qiuTzg=="},
	"zod":                               {"4.1.8": "sha512-5R1P+WwQqmmMIEACyzSvo4JXHY5WiAFHRMg+zBZKgKS+Q1viRa0C1hmUKtHltoIFKtIdki3pRxkmpP74jnNYHQ=="},
}

// testPins are pins tests add (a fake Bun's tarball); nil outside tests.
var testPins map[string]string

// pinnedIntegrity is the integrity this binary pins for name@version, or
// "".
func pinnedIntegrity(name, version string) string {
	if sri := testPins[name+"@"+version]; sri != "" {
		return sri
	}
	return pinned[name][version]
}

// RuntimeModules are the packages the server installs, when the operator
// configures no node_modules for the plugin host, for every plugin to
// share: the released SDK, whose client the plugins get, and zod, which
// turns the plugins' zod schemas into JSON Schema. Pinned (the versions
// OpenCode 1.18.33 ships).
var RuntimeModules = map[string]string{"@opencode-ai/sdk": "1.18.33", "zod": "4.1.8"}

// runtimeModulesID names the install of RuntimeModules (changed with
// them).
const runtimeModulesID = "agentgate-plugin-runtime-1"

// maxRuntimeSize bounds what Bun and the runtime modules unpack to.
const maxRuntimeSize = 512 << 20

// BunPackage is the npm package of Bun's build for a platform: Linux and
// macOS on x86-64 (the -baseline build on CPUs without AVX2) and arm64,
// with musl's builds on a musl Linux.
func BunPackage(goos, goarch string, avx2, musl bool) (string, error) {
	var name string
	switch goos + "/" + goarch {
	case "linux/amd64":
		name = "@oven/bun-linux-x64"
	case "linux/arm64":
		name = "@oven/bun-linux-aarch64"
	case "darwin/amd64":
		name = "@oven/bun-darwin-x64"
	case "darwin/arm64":
		name = "@oven/bun-darwin-aarch64"
	default:
		return "", fmt.Errorf("Bun has no build for %s/%s: set plugin_host { bun <path> }", goos, goarch)
	}
	if goos == "linux" && musl {
		name += "-musl"
	}
	if goarch == "amd64" && !avx2 {
		name += "-baseline"
	}
	return name, nil
}

// hostBunPackage is BunPackage for this host.
func hostBunPackage() (string, error) {
	return BunPackage(runtime.GOOS, runtime.GOARCH, cpu.X86.HasAVX2, hostPlatform().libc == "musl")
}

// InstallBun installs the pinned Bun for this host from the registry into
// dir (dir/<package>/<version>: the package, its executable bin/bun) and
// returns the executable, unless it is installed there already. The
// tarball must match the integrity pinned in this binary. The package is
// unpacked in a temporary directory next to its place and renamed into
// place when complete: a failure leaves nothing behind.
func (m *Manager) InstallBun(ctx context.Context, dir string) (string, error) {
	name, err := hostBunPackage()
	if err != nil {
		return "", err
	}
	return m.installPinned(ctx, dir, name, BunVersion, filepath.Join("bin", "bun"))
}

// installPinned installs a package this binary pins and returns the path
// of its file rel.
func (m *Manager) installPinned(ctx context.Context, dir, name, version, rel string) (string, error) {
	m = m.self()
	if pinnedIntegrity(name, version) == "" {
		return "", fmt.Errorf("%s@%s is not pinned in this binary", name, version)
	}
	dest := filepath.Join(dir, filepath.FromSlash(name), version)
	exe := filepath.Join(dest, rel)
	if _, err := readTreeLock(dest, name, version, false); err == nil {
		return exe, nil
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("installing %s@%s from the registry failed: %w", name, version, err)
	}
	pk, err := m.fetchPackument(ctx, name)
	if err != nil {
		return fail(err)
	}
	meta, err := pk.version(version)
	if err != nil {
		return fail(err)
	}
	// Bun's own packages carry no dependencies; whatever the registry
	// says, none is installed.
	meta.Dependencies, meta.OptionalDependencies, meta.PeerDependencies = nil, nil, nil
	if _, err := m.installTree(ctx, installRoot{name: name, version: version, meta: meta, maxSize: maxRuntimeSize}, dest); err != nil {
		return fail(err)
	}
	if fi, err := os.Stat(exe); err != nil || fi.Mode()&0o111 == 0 {
		return fail(errors.New("the package has no executable " + filepath.ToSlash(rel)))
	}
	return exe, nil
}

// InstallRuntimeModules installs RuntimeModules (with their dependencies,
// each pinned package checked against its pinned integrity) into dir and
// returns their node_modules directory, unless they are installed there
// already.
func (m *Manager) InstallRuntimeModules(ctx context.Context, dir string) (string, error) {
	m = m.self()
	dest := filepath.Join(dir, runtimeModulesID)
	modules := filepath.Join(dest, "node_modules")
	if _, err := readTreeLock(dest, runtimeModulesID, "", true); err == nil {
		return modules, nil
	}
	deps := map[string]string{}
	for k, v := range RuntimeModules {
		deps[k] = v
	}
	root := installRoot{name: runtimeModulesID, virtual: true, meta: &npmVersion{Dependencies: deps}, maxSize: maxRuntimeSize}
	if _, err := m.installTree(ctx, root, dest); err != nil {
		return "", fmt.Errorf("installing the plugins' runtime modules (%s) from the registry failed: %w", describeModules(), err)
	}
	return modules, nil
}

func describeModules() string {
	s := ""
	for _, k := range sortedKeys(RuntimeModules) {
		if s != "" {
			s += ", "
		}
		s += k + "@" + RuntimeModules[k]
	}
	return s
}

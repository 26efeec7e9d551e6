package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
)

// packument is the part of an npm package document the manager reads.
// Versions stay raw until one is chosen: a package's old versions may
// carry fields in shapes this reader would refuse, and most are never
// looked at.
type packument struct {
	Name     string                     `json:"name"`
	DistTags map[string]string          `json:"dist-tags"`
	Versions map[string]json.RawMessage `json:"versions"`
}

type npmDist struct {
	Tarball      string `json:"tarball"`
	Integrity    string `json:"integrity"`
	Shasum       string `json:"shasum"`
	UnpackedSize int64  `json:"unpackedSize"`
}

// npmVersion is one version of a packument: what installing it needs.
type npmVersion struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Dist                 npmDist           `json:"dist"`
	Dependencies         map[string]string `json:"-"`
	OptionalDependencies map[string]string `json:"-"`
	PeerDependencies     map[string]string `json:"-"`
	// OptionalPeers are the peer dependencies peerDependenciesMeta marks
	// optional: used when present, never installed for their own sake.
	OptionalPeers map[string]bool `json:"-"`
	// Bundled are dependencies the tarball carries itself.
	Bundled          map[string]bool `json:"-"`
	OS, CPU, Libc    []string        `json:"-"`
	HasInstallScript bool            `json:"-"`
}

// version decodes one listed version. Fields in an unexpected shape are
// read as absent, as npm reads them.
func (pk *packument) version(v string) (*npmVersion, error) {
	raw, ok := pk.Versions[v]
	if !ok {
		return nil, fmt.Errorf("registry lists no version %s", v)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("registry metadata of version %s is not an object", v)
	}
	out := &npmVersion{Version: v}
	json.Unmarshal(doc["name"], &out.Name)
	if err := json.Unmarshal(doc["dist"], &out.Dist); err != nil {
		return nil, fmt.Errorf("registry metadata of version %s has no usable dist", v)
	}
	out.Dependencies = stringMap(doc["dependencies"])
	out.OptionalDependencies = stringMap(doc["optionalDependencies"])
	out.PeerDependencies = stringMap(doc["peerDependencies"])
	var meta map[string]struct {
		Optional bool `json:"optional"`
	}
	if json.Unmarshal(doc["peerDependenciesMeta"], &meta) == nil {
		for name, m := range meta {
			if m.Optional {
				if out.OptionalPeers == nil {
					out.OptionalPeers = map[string]bool{}
				}
				out.OptionalPeers[name] = true
			}
		}
	}
	for _, key := range []string{"bundleDependencies", "bundledDependencies"} {
		var names []string
		var all bool
		if json.Unmarshal(doc[key], &names) == nil {
			for _, n := range names {
				if out.Bundled == nil {
					out.Bundled = map[string]bool{}
				}
				out.Bundled[n] = true
			}
		} else if json.Unmarshal(doc[key], &all) == nil && all {
			// true bundles every dependency.
			out.Bundled = map[string]bool{}
			for n := range out.Dependencies {
				out.Bundled[n] = true
			}
		}
	}
	out.OS, out.CPU, out.Libc = stringList(doc["os"]), stringList(doc["cpu"]), stringList(doc["libc"])
	json.Unmarshal(doc["hasInstallScript"], &out.HasInstallScript)
	return out, nil
}

// stringMap reads an object of strings, skipping other values.
func stringMap(raw json.RawMessage) map[string]string {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// stringList reads a string or a list of strings.
func stringList(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var list []string
	json.Unmarshal(raw, &list)
	return list
}

// pick is the version an update moves to: the dist-tag the spec names, else
// dist-tags.latest, else the highest release listed.
func (pk *packument) pick(spec string) string {
	v := ""
	if isDistTag(spec) {
		v = pk.DistTags[spec]
	}
	if v == "" {
		v = pk.DistTags["latest"]
	}
	if v == "" {
		var best *semver.Version
		for s := range pk.Versions {
			sv, ok := parseSemver(s)
			if ok && sv.Prerelease() == "" && (v == "" || sv.Compare(best) > 0) {
				v, best = s, sv
			}
		}
	}
	if _, ok := parseSemver(v); !ok {
		return ""
	}
	return v
}

// resolve is the version a dependency spec installs, as npm picks it: a
// dist-tag's version; an exact version; for a range, dist-tags.latest
// when it satisfies the range, else the highest listed version that does
// (prereleases only when the range names one). Specs that are not
// registry versions (git, file:, URLs, npm: aliases) are refused.
func (pk *packument) resolve(spec string) (string, error) {
	spec = strings.TrimSpace(spec)
	switch spec {
	case "", "*", "x", "X":
		spec = "latest"
	}
	if err := registrySpec(spec); err != nil {
		return "", err
	}
	if isDistTag(spec) {
		v := pk.DistTags[spec]
		if _, ok := pk.Versions[v]; !ok || v == "" {
			return "", fmt.Errorf("the registry has no dist-tag %q", spec)
		}
		return v, nil
	}
	if _, ok := pk.Versions[spec]; ok {
		return spec, nil
	}
	c, err := semver.NewConstraint(spec)
	if err != nil {
		return "", fmt.Errorf("%q is not a version range", spec)
	}
	if latest := pk.DistTags["latest"]; latest != "" {
		if v, err := semver.NewVersion(latest); err == nil && c.Check(v) {
			if _, ok := pk.Versions[latest]; ok {
				return latest, nil
			}
		}
	}
	var best string
	var bestV *semver.Version
	for s := range pk.Versions {
		v, err := semver.StrictNewVersion(s)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == "" || v.Compare(bestV) > 0 {
			best, bestV = s, v
		}
	}
	if best == "" {
		return "", fmt.Errorf("no version satisfies %q", spec)
	}
	return best, nil
}

// registrySpec refuses dependency specs that are not registry versions:
// git and GitHub references, file: and link: paths, URLs, npm: aliases.
func registrySpec(spec string) error {
	if strings.Contains(spec, ":") || strings.Contains(spec, "/") {
		return fmt.Errorf("%q is not a registry version (only versions, ranges and dist-tags are installed)", spec)
	}
	return nil
}

// satisfies reports whether version meets a dependency spec (a dist-tag
// or anything unreadable counts as met: the package found is kept, as
// npm keeps it).
func satisfies(version, spec string) bool {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "*" || spec == "latest" || spec == version {
		return true
	}
	c, err := semver.NewConstraint(spec)
	if err != nil {
		return isDistTag(spec)
	}
	v, err := semver.NewVersion(version)
	return err == nil && c.Check(v)
}

// registryError describes a failed registry request without echoing URLs.
func registryError(ctx context.Context, err error, timeout time.Duration) error {
	if ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errStalled):
			return fmt.Errorf("registry request timed out (nothing received for %v)", timeout)
		case errors.Is(cause, context.DeadlineExceeded):
			return errors.New("registry request timed out")
		default:
			return errors.New("registry request was cancelled")
		}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("registry unreachable: %v", err)
}

// errStalled ends a registry request that sent nothing for the request
// timeout.
var errStalled = errors.New("registry request stalled")

// stallGuard cancels a request whose answer does not start, or stops
// coming, within timeout: each read that returns data restarts the clock.
type stallGuard struct {
	r       io.Reader
	timer   *time.Timer
	timeout time.Duration
}

// guarded returns a context that the guard cancels and the guard's stop.
func guarded(ctx context.Context, timeout time.Duration) (context.Context, *stallGuard, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	g := &stallGuard{timeout: timeout}
	g.timer = time.AfterFunc(timeout, func() { cancel(errStalled) })
	return ctx, g, func() { g.timer.Stop(); cancel(nil) }
}

func (g *stallGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if n > 0 {
		g.timer.Reset(g.timeout)
	}
	return n, err
}

// registryBase is the registry to use: the configured one, else npm's
// configured one (asked once); "" with the reason when there is none.
func (m *Manager) registryBase() (string, error) {
	if m.registry != "" {
		return m.registry, nil
	}
	if m.registryFallback == nil {
		return "", errors.New("no plugin registry is configured")
	}
	m.fallbackOnce.Do(func() {
		reg, err := m.registryFallback()
		if err == nil {
			reg, err = checkRegistryURL(reg)
		}
		m.fallbackURL, m.fallbackErr = reg, err
		if err != nil {
			m.fallbackErr = fmt.Errorf("no plugin registry is configured, and npm's configuration names none: %v", err)
		}
	})
	return m.fallbackURL, m.fallbackErr
}

// checkRegistryURL checks a registry base URL and drops its trailing
// slash.
func checkRegistryURL(reg string) (string, error) {
	reg = strings.TrimSpace(reg)
	u, err := url.Parse(reg)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("plugin registry must be an http(s) URL, got %q", reg)
	}
	return strings.TrimRight(reg, "/"), nil
}

// fetchPackument GETs <registry>/<name> (a scoped name as @scope%2Fname).
func (m *Manager) fetchPackument(ctx context.Context, name string) (*packument, error) {
	base, err := m.registryBase()
	if err != nil {
		return nil, err
	}
	ctx, guard, stop := guarded(ctx, m.requestTimeout)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/"+url.PathEscape(name), nil)
	if err != nil {
		return nil, fmt.Errorf("building registry request: %v", err)
	}
	req.Header.Set("Accept", "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, registryError(ctx, err, m.requestTimeout)
	}
	defer resp.Body.Close()
	guard.r = resp.Body
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errors.New("package not found in the registry")
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("registry answered %s%s", resp.Status, registryMessage(guard))
	}
	body, err := io.ReadAll(io.LimitReader(guard, pluginMaxPackument+1))
	if err != nil {
		return nil, registryError(ctx, err, m.requestTimeout)
	}
	if len(body) > pluginMaxPackument {
		return nil, errors.New("registry metadata is too large")
	}
	var pk packument
	if err := json.Unmarshal(body, &pk); err != nil {
		return nil, errors.New("registry metadata is not valid JSON")
	}
	if pk.Name != "" && pk.Name != name {
		return nil, fmt.Errorf("registry answered for package %q", pk.Name)
	}
	return &pk, nil
}

// registryMessage is the "error" of a registry's JSON error answer, as
// ": <message>" (cut at 200 bytes), or "".
func registryMessage(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4096))
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) != nil {
		return ""
	}
	msg := e.Error
	if msg == "" {
		msg = e.Message
	}
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// parsePluginTarget splits name@version (name may be @scope/name); a bare
// name means the latest dist-tag.
func parsePluginTarget(t string) (name, spec string, err error) {
	t = strings.TrimSpace(t)
	name, spec = t, "latest"
	if i := strings.LastIndex(t, "@"); i > 0 {
		name, spec = t[:i], t[i+1:]
	}
	if err := validPackageName(name); err != nil {
		return "", "", fmt.Errorf("plugin %q: %v", t, err)
	}
	if !validVersionSpec(spec) {
		return "", "", fmt.Errorf("plugin %q: version must be an exact version, a range or a dist-tag", t)
	}
	return name, spec, nil
}

// npmNamePart is what encodeURIComponent leaves alone, lowercase, without
// the characters npm refuses in new names (~'!()*).
var npmNamePart = regexp.MustCompile(`^[a-z0-9._-]+$`)

// validPackageName applies npm's rules for new package names.
func validPackageName(name string) error {
	if name == "" {
		return errors.New("package name is empty")
	}
	if len(name) > 214 {
		return errors.New("package name is longer than 214 characters")
	}
	parts := []string{name}
	if strings.HasPrefix(name, "@") {
		scope, pkg, ok := strings.Cut(name[1:], "/")
		if !ok {
			return errors.New("scoped package name must be @scope/name")
		}
		parts = []string{scope, pkg}
	}
	for _, p := range parts {
		switch {
		case p == "":
			return errors.New("package name has an empty part")
		case p[0] == '.' || p[0] == '_':
			return errors.New("package name cannot start with . or _")
		case !npmNamePart.MatchString(p):
			return errors.New("package name must be lowercase and URL-safe")
		}
	}
	if name == "node_modules" || name == "favicon.ico" {
		return fmt.Errorf("package name %q is not allowed", name)
	}
	return nil
}

var (
	versionRangeRE = regexp.MustCompile(`^[0-9A-Za-z.+\-^~<>=|* ]+$`)
	distTagRE      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]*$`)
	vVersionRE     = regexp.MustCompile(`^[vV][0-9]`)
)

func validVersionSpec(s string) bool {
	return s != "" && len(s) <= 256 && strings.TrimSpace(s) == s && versionRangeRE.MatchString(s)
}

// isDistTag tells a dist-tag ("latest", "next") from a range.
func isDistTag(s string) bool {
	return distTagRE.MatchString(s) && s != "x" && s != "X" && !vVersionRE.MatchString(s)
}

// isNewer reports whether version want is above have ("" is below all).
func isNewer(want, have string) bool {
	w, ok := parseSemver(want)
	if !ok {
		return false
	}
	h, ok := parseSemver(have)
	return !ok || w.Compare(h) > 0
}

// npmMaxSafeInteger is the largest major, minor or patch number npm
// accepts (JavaScript's largest exact integer).
const npmMaxSafeInteger = 1<<53 - 1

// parseSemver parses a strict semantic version as npm reads a package
// version: no "v" prefix, no leading zeros, at most 256 characters. The
// semver library accepts major, minor and patch numbers up to 2^64−1; npm
// refuses those above 2^53−1, and so does this, so that the plugin
// directory never holds a version the registry could not publish.
// Versions compare by precedence with Compare; build metadata is ignored.
func parseSemver(s string) (*semver.Version, bool) {
	v, err := semver.StrictNewVersion(s)
	if err != nil || v.Major() > npmMaxSafeInteger || v.Minor() > npmMaxSafeInteger || v.Patch() > npmMaxSafeInteger {
		return nil, false
	}
	return v, true
}

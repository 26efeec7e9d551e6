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

	"github.com/Masterminds/semver/v3"
)

// packument is the part of an npm package document the manager reads.
type packument struct {
	Name     string            `json:"name"`
	DistTags map[string]string `json:"dist-tags"`
	Versions map[string]struct {
		Name    string  `json:"name"`
		Version string  `json:"version"`
		Dist    npmDist `json:"dist"`
	} `json:"versions"`
}

type npmDist struct {
	Tarball   string `json:"tarball"`
	Integrity string `json:"integrity"`
	Shasum    string `json:"shasum"`
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

// registryError describes a failed registry request without echoing URLs.
func registryError(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return errors.New("registry request timed out or was cancelled")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("registry unreachable: %v", err)
}

// fetchPackument GETs <registry>/<name> (a scoped name as @scope%2Fname).
func (m *Manager) fetchPackument(ctx context.Context, name string) (*packument, error) {
	ctx, cancel := context.WithTimeout(ctx, pluginMetaTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.registry+"/"+url.PathEscape(name), nil)
	if err != nil {
		return nil, fmt.Errorf("building registry request: %v", err)
	}
	req.Header.Set("Accept", "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, registryError(ctx, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errors.New("package not found in the registry")
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("registry answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, pluginMaxPackument+1))
	if err != nil {
		return nil, registryError(ctx, err)
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

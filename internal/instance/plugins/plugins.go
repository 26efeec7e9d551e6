// Package plugins keeps the instance's plugins: the built-in ones, a
// project's local ones, and package plugins installed from an npm registry
// (packument and tarball client, sha512 integrity, a confined unpacker).
package plugins

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/errs"
)

// Info is Plugin.Info's wire record.
type Info struct {
	ID       string         `json:"id,omitempty"`
	Source   Source         `json:"source"`
	Features map[string]any `json:"features"`
	State    State          `json:"state"`
}

// Source says where a plugin comes from.
type Source struct {
	Type     string `json:"type"` // builtin | package | local
	Target   string `json:"target,omitempty"`
	Version  string `json:"version,omitempty"`
	Outdated bool   `json:"outdated,omitempty"`
	Updating bool   `json:"updating,omitempty"`
	Path     string `json:"path,omitempty"`
}

// State is active, or failed with an error.
type State struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// Limits and timeouts of the registry client and the unpacker.
const (
	pluginMetaTimeout     = 30 * time.Second
	pluginDownloadTimeout = 5 * time.Minute
	pluginMaxPackument    = 32 << 20
	pluginMaxTarball      = 64 << 20
	pluginMaxUnpacked     = 64 << 20
	pluginMaxEntries      = 20000
	pluginCheckParallel   = 8
	pluginMaxLocal        = 256
)

// builtinPlugins are compiled into the gateway and always active.
var builtinPlugins = []string{"agentgate.gateway-auth"}

// pluginPackage is one package plugin of the inventory.
type pluginPackage struct {
	name string // the npm package name; identifies the target
	spec string // the configured version: an exact version, a range or a dist-tag

	// Guarded by Manager.mu.
	version   string // installed (or pinned) version
	installed bool   // Dir/<name>/<version> holds the package
	err       string // why the plugin is not active
	outdated  bool
	updaters  int

	install sync.Mutex // serialises installs of this package
}

// Manager keeps the plugin inventory: the built-in plugins, the
// package plugins of the configuration (installed under Dir/<name>/<version>
// from an npm registry) and the local plugin files of a project.
type Manager struct {
	registry string // base URL without trailing slash; "" = none
	dir      string
	log      *zap.Logger
	client   *http.Client

	maxTarball  int64
	maxUnpacked int64
	maxEntries  int

	mu     sync.Mutex
	pkgs   []*pluginPackage
	byName map[string]*pluginPackage
}

// Options configure a Manager.
type Options struct {
	// Targets are the package plugins, as name@version.
	Targets []string
	// Registry is the npm registry base URL.
	Registry string
	// Dir is where packages are unpacked.
	Dir    string
	Logger *zap.Logger
}

// New builds the inventory. It reads what is installed under
// Dir but does no network I/O: packages are installed by Update.
func New(opts Options) (*Manager, error) {
	m := &Manager{
		dir:         opts.Dir,
		log:         opts.Logger,
		client:      &http.Client{},
		maxTarball:  pluginMaxTarball,
		maxUnpacked: pluginMaxUnpacked,
		maxEntries:  pluginMaxEntries,
		byName:      map[string]*pluginPackage{},
	}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	if m.dir != "" {
		m.dir = filepath.Clean(m.dir)
	}
	if reg := strings.TrimSpace(opts.Registry); reg != "" {
		u, err := url.Parse(reg)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("plugin registry must be an http(s) URL, got %q", reg)
		}
		m.registry = strings.TrimRight(reg, "/")
	}
	for _, t := range opts.Targets {
		name, spec, err := parsePluginTarget(t)
		if err != nil {
			return nil, err
		}
		if _, dup := m.byName[name]; dup {
			return nil, fmt.Errorf("plugin %q is listed more than once", name)
		}
		p := &pluginPackage{name: name, spec: spec}
		m.resolveInstalled(p)
		m.pkgs = append(m.pkgs, p)
		m.byName[name] = p
	}
	return m, nil
}

// noPlugins stands in for a nil manager.
var noPlugins = &Manager{log: zap.NewNop(), byName: map[string]*pluginPackage{}}

func (m *Manager) self() *Manager {
	if m == nil {
		return noPlugins
	}
	return m
}

// resolveInstalled finds the installed version of a package at start-up:
// the pinned version for an exact pin, else the highest installed one.
func (m *Manager) resolveInstalled(p *pluginPackage) {
	p.err = "not installed"
	if _, ok := parseSemver(p.spec); ok {
		p.version = p.spec
		if m.dir != "" {
			if err := verifyInstalled(m.versionDir(p.name, p.spec), p.name, p.spec); err == nil {
				p.installed, p.err = true, ""
			} else if !errors.Is(err, os.ErrNotExist) {
				p.err = err.Error()
			}
		}
		return
	}
	if m.dir == "" {
		return
	}
	ents, err := os.ReadDir(filepath.Join(m.dir, filepath.FromSlash(p.name)))
	if err != nil {
		return
	}
	var best string
	var bestV *semver.Version
	for _, e := range ents {
		v, ok := parseSemver(e.Name())
		if !ok || !e.IsDir() || (best != "" && v.Compare(bestV) <= 0) {
			continue
		}
		if verifyInstalled(m.versionDir(p.name, e.Name()), p.name, e.Name()) == nil {
			best, bestV = e.Name(), v
		}
	}
	if best != "" {
		p.version, p.installed, p.err = best, true, ""
	}
}

func (m *Manager) versionDir(name, version string) string {
	return filepath.Join(m.dir, filepath.FromSlash(name), version)
}

// List returns the inventory as seen from a project directory.
func (m *Manager) List(projectDir string) []Info {
	m = m.self()
	out := make([]Info, 0, len(builtinPlugins)+len(m.pkgs))
	for _, id := range builtinPlugins {
		out = append(out, Info{
			ID: id, Source: Source{Type: "builtin"},
			Features: map[string]any{"server": true}, State: State{Status: "active"},
		})
	}
	m.mu.Lock()
	for _, p := range m.pkgs {
		info := Info{
			ID: p.name,
			Source: Source{Type: "package", Target: p.name, Version: p.version,
				Outdated: p.outdated, Updating: p.updaters > 0},
			Features: map[string]any{},
			State:    State{Status: "active"},
		}
		if p.installed {
			info.Features["server"] = true
		} else {
			info.State = State{Status: "failed", Error: p.err}
		}
		out = append(out, info)
	}
	m.mu.Unlock()
	return append(out, localPlugins(projectDir)...)
}

// localPlugins lists the plugin files of a project's .opencode/plugin and
// .opencode/plugins directories.
func localPlugins(projectDir string) []Info {
	if projectDir == "" {
		return nil
	}
	var out []Info
	for _, sub := range []string{"plugin", "plugins"} {
		dir := filepath.Join(projectDir, ".opencode", sub)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			ext := filepath.Ext(name)
			if strings.HasPrefix(name, ".") || (ext != ".js" && ext != ".ts" && ext != ".mjs") {
				continue
			}
			full := filepath.Join(dir, name)
			if !e.Type().IsRegular() {
				fi, err := os.Stat(full)
				if e.Type()&os.ModeSymlink == 0 || err != nil || !fi.Mode().IsRegular() {
					continue
				}
			}
			if len(out) >= pluginMaxLocal {
				return out
			}
			out = append(out, Info{
				ID:       strings.TrimSuffix(name, ext),
				Source:   Source{Type: "local", Path: full},
				Features: map[string]any{"server": true},
				State:    State{Status: "active"},
			})
		}
	}
	return out
}

// lookup finds the package of a target given as "name" or "name@version".
func (m *Manager) lookup(target string) *pluginPackage {
	name := target
	if i := strings.LastIndex(target, "@"); i > 0 {
		name = target[:i]
	}
	return m.byName[name]
}

// Check asks the registry for newer versions of one package (or all) and
// returns the full inventory. Registry failures are logged and leave the
// plugins as they were.
func (m *Manager) Check(ctx context.Context, projectDir, target string) ([]Info, error) {
	m = m.self()
	pkgs := m.pkgs
	if target != "" {
		p := m.lookup(target)
		if p == nil {
			return nil, errs.New(400, "InvalidRequestError",
				clip("Plugin package is not in the current server inventory: "+target), "field", "target")
		}
		pkgs = []*pluginPackage{p}
	}
	if m.registry == "" {
		if len(pkgs) > 0 {
			m.log.Warn("plugin check skipped: no registry configured")
		}
		return m.List(projectDir), nil
	}
	sem := make(chan struct{}, pluginCheckParallel)
	var wg sync.WaitGroup
	for _, p := range pkgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pk, err := m.fetchPackument(ctx, p.name)
			if err != nil {
				m.log.Warn("plugin check failed", zap.String("target", p.name), zap.Error(err))
				return
			}
			want := pk.pick(p.spec)
			if want == "" {
				m.log.Warn("plugin check: registry names no usable version", zap.String("target", p.name))
				return
			}
			m.mu.Lock()
			p.outdated = isNewer(want, p.version)
			m.mu.Unlock()
		}()
	}
	wg.Wait()
	return m.List(projectDir), nil
}

// Update installs the newest versions of the named packages concurrently;
// it returns the targets that changed and the joined failures.
func (m *Manager) Update(ctx context.Context, targets []string) ([]string, error) {
	m = m.self()
	var pkgs []*pluginPackage
	var unknown []string
	seen := map[*pluginPackage]bool{}
	for _, t := range targets {
		p := m.lookup(t)
		switch {
		case p == nil:
			unknown = append(unknown, t)
		case !seen[p]:
			seen[p] = true
			pkgs = append(pkgs, p)
		}
	}
	if len(unknown) > 0 {
		return nil, errs.New(400, "InvalidRequestError",
			clip("Plugin packages are not in the current server inventory: "+strings.Join(unknown, ", ")), "field", "targets")
	}
	m.mu.Lock()
	for _, p := range pkgs {
		p.updaters++
	}
	m.mu.Unlock()
	changed := make([]bool, len(pkgs))
	failed := make([]error, len(pkgs))
	var wg sync.WaitGroup
	for i, p := range pkgs {
		wg.Go(func() {
			changed[i], failed[i] = m.updateOne(ctx, p)
			m.mu.Lock()
			p.updaters--
			m.mu.Unlock()
		})
	}
	wg.Wait()
	var updated, failures []string
	for i, p := range pkgs {
		if failed[i] != nil {
			m.log.Error("plugin update failed", zap.String("target", p.name), zap.Error(failed[i]))
			failures = append(failures, p.name+": "+failed[i].Error())
		} else if changed[i] {
			updated = append(updated, p.name)
		}
	}
	if len(failures) > 0 {
		return updated, errs.Unavailable("plugin", clip("Failed to update plugin packages: "+strings.Join(failures, "; ")))
	}
	return updated, nil
}

// clip bounds a message that echoes caller input.
func clip(msg string) string {
	if len(msg) > 1024 {
		return fmt.Sprintf("%s... (%d more chars)", msg[:1024], len(msg)-1024)
	}
	return msg
}

// updateOne brings one package to the registry's newest version. It reports
// whether the inventory changed.
func (m *Manager) updateOne(ctx context.Context, p *pluginPackage) (bool, error) {
	p.install.Lock()
	defer p.install.Unlock()
	if m.registry == "" {
		return false, errors.New("no plugin registry is configured")
	}
	if m.dir == "" {
		return false, errors.New("no plugin directory is configured")
	}
	pk, err := m.fetchPackument(ctx, p.name)
	if err != nil {
		return false, err
	}
	want := pk.pick(p.spec)
	if want == "" {
		return false, errors.New("registry names no usable latest version")
	}
	m.mu.Lock()
	current, installed := p.version, p.installed
	m.mu.Unlock()
	if installed && !isNewer(want, current) {
		m.mu.Lock()
		p.outdated = false
		m.mu.Unlock()
		return false, nil
	}
	meta, ok := pk.Versions[want]
	if !ok {
		return false, fmt.Errorf("registry lists no version %s", want)
	}
	dest := m.versionDir(p.name, want)
	if verifyInstalled(dest, p.name, want) != nil {
		if err := m.install(ctx, p.name, want, meta.Dist, dest); err != nil {
			return false, err
		}
	}
	m.mu.Lock()
	p.version, p.installed, p.err, p.outdated = want, true, "", false
	m.mu.Unlock()
	m.log.Info("plugin updated", zap.String("target", p.name), zap.String("from", current), zap.String("to", want))
	return true, nil
}

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

// install downloads, verifies and unpacks name@version into dest. Nothing is
// unpacked before the tarball matches its sha512 integrity; the package is
// unpacked into a temporary directory next to dest and renamed into place.
func (m *Manager) install(ctx context.Context, name, version string, dist npmDist, dest string) error {
	sums, err := parseIntegrity(dist.Integrity)
	if err != nil {
		return err
	}
	tu, err := url.Parse(dist.Tarball)
	if err != nil || (tu.Scheme != "http" && tu.Scheme != "https") || tu.Host == "" {
		return errors.New("registry gave no usable tarball URL")
	}
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("creating plugin directory: %v", err)
	}
	archive, err := os.CreateTemp(parent, ".download-*.tgz")
	if err != nil {
		return fmt.Errorf("creating download file: %v", err)
	}
	defer func() {
		archive.Close()
		os.Remove(archive.Name())
	}()
	if err := m.download(ctx, tu.String(), archive, sums); err != nil {
		return err
	}
	if _, err := archive.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("reading download: %v", err)
	}
	tmp, err := os.MkdirTemp(parent, ".install-"+version+"-*")
	if err != nil {
		return fmt.Errorf("creating unpack directory: %v", err)
	}
	defer os.RemoveAll(tmp)
	if err := m.unpack(archive, tmp); err != nil {
		return err
	}
	if err := verifyInstalled(tmp, name, version); err != nil {
		return fmt.Errorf("unpacked package: %v", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("unpacked package: %v", err)
	}
	if err := os.RemoveAll(dest); err != nil {
		return fmt.Errorf("removing broken install: %v", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return fmt.Errorf("moving package into place: %v", err)
	}
	return nil
}

// download writes the tarball to f and checks it against the sha512 sums.
func (m *Manager) download(ctx context.Context, tarball string, f *os.File, sums [][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, pluginDownloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tarball, nil)
	if err != nil {
		return fmt.Errorf("building tarball request: %v", err)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return registryError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("tarball download answered %s", resp.Status)
	}
	if resp.ContentLength > m.maxTarball {
		return errors.New("tarball is too large")
	}
	h := sha512.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, m.maxTarball+1))
	if err != nil {
		return fmt.Errorf("downloading tarball: %v", registryError(ctx, err))
	}
	if n > m.maxTarball {
		return errors.New("tarball is too large")
	}
	got := h.Sum(nil)
	for _, want := range sums {
		if subtle.ConstantTimeCompare(got, want) == 1 {
			return nil
		}
	}
	return errors.New("tarball does not match its sha512 integrity")
}

// parseIntegrity returns the sha512 digests of an SRI string.
func parseIntegrity(sri string) ([][]byte, error) {
	var sums [][]byte
	for _, f := range strings.Fields(sri) {
		b64, ok := strings.CutPrefix(f, "sha512-")
		if !ok {
			continue
		}
		if i := strings.IndexByte(b64, '?'); i >= 0 {
			b64 = b64[:i]
		}
		sum, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sum) != sha512.Size {
			return nil, errors.New("registry gave a malformed sha512 integrity")
		}
		sums = append(sums, sum)
	}
	if len(sums) == 0 {
		return nil, errors.New("registry gave no sha512 integrity for the tarball")
	}
	return sums, nil
}

// unpack extracts an npm .tgz into root, dropping the leading directory
// ("package/"). It refuses the whole archive on an entry that would land
// outside root, a link pointing outside, a device or other special file, or
// when the size or entry caps are exceeded. Links that stay inside are
// skipped, as npm does.
func (m *Manager) unpack(r io.Reader, root string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("tarball is not gzip: %v", err)
	}
	defer gz.Close()
	rt, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("opening unpack directory: %v", err)
	}
	defer rt.Close()
	// Headers, padding and PAX records are bounded by the entry cap; this
	// bounds the decompressed stream as a whole.
	tr := tar.NewReader(io.LimitReader(gz, 2*m.maxUnpacked+int64(m.maxEntries)*2048))
	var total int64
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading tarball: %v", err)
		}
		if entries >= m.maxEntries {
			return errors.New("tarball has too many entries")
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		rel, err := tarEntryPath(hdr.Name)
		if err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if rel != "" {
				if err := rt.MkdirAll(rel, 0o755); err != nil {
					return fmt.Errorf("unpacking %q: %v", hdr.Name, err)
				}
			}
		case tar.TypeReg:
			total += hdr.Size
			if total > m.maxUnpacked {
				return errors.New("tarball unpacks to more than the size limit")
			}
			if rel == "" {
				continue
			}
			if err := writeEntry(rt, rel, hdr, tr); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if path.IsAbs(hdr.Linkname) || strings.Contains(hdr.Linkname, `\`) ||
				!filepath.IsLocal(filepath.FromSlash(path.Join(path.Dir(rel), hdr.Linkname))) {
				return fmt.Errorf("tarball entry %q links outside the package", hdr.Name)
			}
		case tar.TypeLink:
			if target, err := tarEntryPath(hdr.Linkname); err != nil || target == "" {
				return fmt.Errorf("tarball entry %q links outside the package", hdr.Name)
			}
		default:
			return fmt.Errorf("tarball entry %q has unsupported type %q", hdr.Name, hdr.Typeflag)
		}
	}
}

func writeEntry(rt *os.Root, rel string, hdr *tar.Header, r io.Reader) error {
	if dir := path.Dir(rel); dir != "." {
		if err := rt.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("unpacking %q: %v", hdr.Name, err)
		}
	}
	mode := os.FileMode(0o644)
	if hdr.Mode&0o111 != 0 {
		mode = 0o755
	}
	f, err := rt.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("unpacking %q: %v", hdr.Name, err)
	}
	_, err = io.CopyN(f, r, hdr.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unpacking %q: %v", hdr.Name, err)
	}
	return nil
}

// tarEntryPath validates an archive path and strips its first component;
// "" means the entry is the top-level directory itself.
func tarEntryPath(name string) (string, error) {
	bad := func() (string, error) { return "", fmt.Errorf("tarball entry %q escapes the package", name) }
	if name == "" || strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") ||
		(len(name) >= 2 && name[1] == ':') {
		return bad()
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "..":
			return bad()
		case "", ".":
		default:
			parts = append(parts, p)
		}
	}
	if len(parts) <= 1 {
		return "", nil
	}
	rel := strings.Join(parts[1:], "/")
	if !filepath.IsLocal(filepath.FromSlash(rel)) {
		return bad()
	}
	return rel, nil
}

// verifyInstalled checks dir/package.json names name@version.
func verifyInstalled(dir, name, version string) error {
	f, err := os.Open(filepath.Join(dir, "package.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("not installed: %w", os.ErrNotExist)
		}
		return fmt.Errorf("reading package.json: %v", err)
	}
	defer f.Close()
	var pj struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	data, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err == nil {
		err = json.Unmarshal(data, &pj)
	}
	if err != nil {
		return errors.New("package.json is not valid JSON")
	}
	if pj.Name != name || pj.Version != version {
		return fmt.Errorf("package.json names %s@%s, want %s@%s", pj.Name, pj.Version, name, version)
	}
	return nil
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

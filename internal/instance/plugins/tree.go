package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dustin/go-humanize"
	"go.uber.org/zap"
)

// An install tree is a package plugin with its whole dependency tree, as
// the registry describes it: the package unpacked at the tree's
// directory, every package it needs under that directory's node_modules
// — as high as no other version of the same name is in the way (npm's
// hoisting), else under the package that needs it — so that Bun resolves
// each import as Node would. Dependencies, the optional ones that run on
// this platform and the peer dependencies that are not marked optional
// are installed (as npm does); install scripts never run (the packages
// are only unpacked); the project's .npmrc is never read (the registry
// is the configured one). Each tarball is checked against its sha512
// integrity before a byte of it is unpacked, and the tree as a whole is
// bounded in unpacked size and files. A tree is built in a temporary
// directory next to its place and renamed into place with its lock file
// (node_modules/.agentgate-lock.json, the versions and integrity of
// every package) once complete: a tree without its lock file is not
// installed.

// lockFile is where a tree keeps its lock, relative to the tree.
const lockFile = "node_modules/.agentgate-lock.json"

// Limits of a tree.
const (
	DefaultMaxTreeSize = 200 << 20 // unpacked bytes
	maxTreeEntries     = 200000
	maxTreePackages    = 3000
	// DefaultDownloads bounds the registry requests and tarball
	// downloads of one install running at once.
	DefaultDownloads = 8
)

// treeLock is a tree's lock file.
type treeLock struct {
	LockfileVersion int    `json:"lockfileVersion"`
	Name            string `json:"name"`
	Version         string `json:"version,omitempty"`
	// Packages are by path in the tree ("" for the root), as in npm's
	// package-lock.json.
	Packages map[string]lockEntry `json:"packages"`
	// Notes say what the install left out or let pass: optional
	// dependencies that do not run here, peer versions out of range,
	// install scripts not run.
	Notes []string `json:"notes,omitempty"`
}

type lockEntry struct {
	Name      string `json:"name,omitempty"`
	Version   string `json:"version"`
	Integrity string `json:"integrity,omitempty"`
	Optional  bool   `json:"optional,omitempty"`
	// InstallScript: the package has one, and it was not run.
	InstallScript bool `json:"hasInstallScript,omitempty"`
}

// installRoot is what a tree installs: a registry package (Meta, from
// its packument), or a virtual root that is only a list of dependencies
// (the runtime's modules).
type installRoot struct {
	name, version string
	meta          *npmVersion
	virtual       bool
	// maxSize, when set, bounds the tree instead of the manager's limit
	// (the runtime's own packages: Bun alone unpacks to 100 MB).
	maxSize int64
}

// treeNode is one package of a tree.
type treeNode struct {
	name, version string
	meta          *npmVersion
	dir           string // slash path in the tree; "" for the root
	parent        *treeNode
	children      map[string]*treeNode
	optional      bool // reached only through optional dependencies
	virtual       bool
}

// edge is one dependency of a node.
type edge struct {
	from           *treeNode
	name, spec     string
	peer, optional bool
}

func (e edge) String() string {
	what := "dependency"
	if e.peer {
		what = "peer dependency"
	}
	if e.from.dir == "" {
		return fmt.Sprintf("%s %s@%s", what, e.name, e.spec)
	}
	return fmt.Sprintf("%s %s@%s of %s@%s", what, e.name, e.spec, e.from.name, e.from.version)
}

// edges are a node's dependencies in install order: regular and optional
// ones by name, then peers by name. Bundled dependencies come with the
// tarball.
func (n *treeNode) edges() []edge {
	meta := n.meta
	deps := map[string]string{}
	optional := map[string]bool{}
	for k, v := range meta.Dependencies {
		if !meta.Bundled[k] {
			deps[k] = v
		}
	}
	for k, v := range meta.OptionalDependencies {
		if !meta.Bundled[k] {
			deps[k], optional[k] = v, true
		}
	}
	var out []edge
	for _, k := range sortedKeys(deps) {
		out = append(out, edge{from: n, name: k, spec: deps[k], optional: optional[k] || n.optional})
	}
	peers := map[string]string{}
	for k, v := range meta.PeerDependencies {
		if _, dep := deps[k]; !dep && !meta.OptionalPeers[k] {
			peers[k] = v
		}
	}
	for _, k := range sortedKeys(peers) {
		out = append(out, edge{from: n, name: k, spec: peers[k], peer: true, optional: n.optional})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// platform is this host as npm's os, cpu and libc fields name it.
type platform struct{ os, cpu, libc string }

var hostPlatform = sync.OnceValue(func() platform {
	p := platform{os: runtime.GOOS, cpu: runtime.GOARCH}
	switch p.os {
	case "windows":
		p.os = "win32"
	}
	switch p.cpu {
	case "amd64":
		p.cpu = "x64"
	case "386":
		p.cpu = "ia32"
	}
	if p.os == "linux" {
		p.libc = "glibc"
		if musl, _ := filepath.Glob("/lib/ld-musl-*.so.1"); len(musl) > 0 {
			p.libc = "musl"
		}
	}
	return p
})

// allows reports whether a version's os, cpu and libc lists admit the
// platform ("!name" excludes; any other entry must match when there is
// one).
func (p platform) allows(v *npmVersion) bool {
	match := func(list []string, have string) bool {
		pos, anyPos := false, false
		for _, e := range list {
			if neg, ok := strings.CutPrefix(e, "!"); ok {
				if neg == have {
					return false
				}
				continue
			}
			anyPos = true
			pos = pos || e == have
		}
		return !anyPos || pos
	}
	return match(v.OS, p.os) && match(v.CPU, p.cpu) && (p.libc == "" || match(v.Libc, p.libc))
}

// resolver resolves one tree: packuments are fetched once each,
// concurrently up to the manager's download bound.
type resolver struct {
	m     *Manager
	ctx   context.Context
	plat  platform
	sem   chan struct{}
	mu    sync.Mutex
	packs map[string]*packFetch
	notes []string
	count int
}

type packFetch struct {
	done chan struct{}
	pk   *packument
	err  error
}

func (r *resolver) start(name string) *packFetch {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.packs[name]; ok {
		return f
	}
	f := &packFetch{done: make(chan struct{})}
	r.packs[name] = f
	go func() {
		defer close(f.done)
		select {
		case r.sem <- struct{}{}:
		case <-r.ctx.Done():
			f.err = errors.New("install cancelled")
			return
		}
		defer func() { <-r.sem }()
		if err := validPackageName(name); err != nil {
			f.err = err
			return
		}
		f.pk, f.err = r.m.fetchPackument(r.ctx, name)
	}()
	return f
}

func (r *resolver) packument(name string) (*packument, error) {
	f := r.start(name)
	<-f.done
	return f.pk, f.err
}

func (r *resolver) note(format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// resolveTree places every package of root's tree, breadth first (a
// package's own dependencies are placed before those of the packages it
// brought), and returns the nodes in that order.
func (m *Manager) resolveTree(ctx context.Context, root installRoot) ([]*treeNode, []string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &resolver{m: m, ctx: ctx, plat: hostPlatform(), sem: make(chan struct{}, m.downloads), packs: map[string]*packFetch{}}
	top := &treeNode{name: root.name, version: root.version, meta: root.meta, virtual: root.virtual, children: map[string]*treeNode{}}
	if top.meta == nil {
		top.meta = &npmVersion{}
	}
	nodes := []*treeNode{top}
	level := []*treeNode{top}
	for len(level) > 0 {
		var edges []edge
		for _, n := range level {
			edges = append(edges, n.edges()...)
		}
		for _, e := range edges {
			r.start(e.name) // fetched concurrently, used in order
		}
		var next []*treeNode
		for _, e := range edges {
			n, err := r.place(top, e)
			if err != nil {
				if e.optional {
					r.note("optional %s left out: %v", e, err)
					continue
				}
				return nil, r.notes, fmt.Errorf("%s: %w", e, err)
			}
			if n != nil {
				nodes = append(nodes, n)
				next = append(next, n)
			}
		}
		level = next
	}
	return nodes, r.notes, nil
}

// place finds the package an edge resolves to, or places a new one: a
// package of that name visible from the dependent (its own node_modules,
// then each parent's) that satisfies the spec is used; with none in the
// way it goes to the top; when another version is in the way, under the
// dependent. A peer dependency resolves from the dependent's parent, as a
// sibling; a peer version out of range is kept (and noted), as the one
// found is what the package would import.
func (r *resolver) place(top *treeNode, e edge) (*treeNode, error) {
	start := e.from
	if e.peer && start.parent != nil {
		start = start.parent
	}
	target := top
	for s := start; s != nil; s = s.parent {
		c := s.children[e.name]
		if c == nil {
			continue
		}
		if satisfies(c.version, e.spec) {
			return nil, nil
		}
		if e.peer {
			r.note("%s: %s@%s is installed instead", e, c.name, c.version)
			return nil, nil
		}
		target = start
		break
	}
	if c := target.children[e.name]; c != nil {
		r.note("%s: %s@%s is installed instead", e, c.name, c.version)
		return nil, nil
	}
	if reason := r.m.policy.denied(e.name); reason != "" {
		return nil, errors.New(reason)
	}
	if err := registrySpec(e.spec); err != nil {
		return nil, err
	}
	pk, err := r.packument(e.name)
	if err != nil {
		return nil, err
	}
	version, err := pk.resolve(e.spec)
	if err != nil {
		return nil, err
	}
	meta, err := pk.version(version)
	if err != nil {
		return nil, err
	}
	if !r.plat.allows(meta) {
		if e.optional {
			return nil, nil // another platform's build, as npm skips it
		}
		return nil, fmt.Errorf("%s@%s does not run on %s/%s", e.name, version, r.plat.os, r.plat.cpu)
	}
	r.count++
	if r.count > maxTreePackages {
		return nil, fmt.Errorf("the tree has more than %d packages", maxTreePackages)
	}
	n := &treeNode{name: e.name, version: version, meta: meta, dir: path.Join(target.dir, "node_modules", e.name),
		parent: target, children: map[string]*treeNode{}, optional: e.optional}
	target.children[e.name] = n
	return n, nil
}

// budget bounds what the packages of one tree unpack to, together.
type budget struct {
	maxSize, maxEntries int64
	maxTarball          int64
	size, entries       atomic.Int64
}

func (b *budget) file(n int64) error {
	if b.size.Add(n) > b.maxSize {
		return fmt.Errorf("the package and its dependencies unpack to more than the size limit of %s", humanize.IBytes(uint64(b.maxSize)))
	}
	return nil
}

func (b *budget) entry() error {
	if b.entries.Add(1) > b.maxEntries {
		return errors.New("tarball has too many entries")
	}
	return nil
}

// destLocks serialises the installs into one directory, across the
// managers of this process (a config reload makes a new one while the
// old one may still be installing).
var destLocks sync.Map // dest → *sync.Mutex

func lockDest(dest string) func() {
	mu, _ := destLocks.LoadOrStore(dest, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// installTree installs root and its dependencies into dest, unless a
// complete tree of it is there already, and returns its lock.
func (m *Manager) installTree(ctx context.Context, root installRoot, dest string) (*treeLock, error) {
	unlock := lockDest(dest)
	defer unlock()
	if lk, err := readTreeLock(dest, root.name, root.version, root.virtual); err == nil {
		return lk, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes, notes, err := m.resolveTree(ctx, root)
	if err != nil {
		return nil, err
	}
	var known int64
	for _, n := range nodes {
		if n.meta.Dist.UnpackedSize > 0 {
			known += n.meta.Dist.UnpackedSize
		}
	}
	limit, maxTarball := m.maxUnpacked, m.maxTarball
	if root.maxSize > 0 {
		limit, maxTarball = root.maxSize, root.maxSize
	}
	if known > limit {
		return nil, fmt.Errorf("the package and its dependencies unpack to %s (%d packages), over the size limit of %s",
			humanize.IBytes(uint64(known)), len(nodes), humanize.IBytes(uint64(limit)))
	}
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("creating plugin directory: %v", err)
	}
	tmp, err := os.MkdirTemp(parent, ".install-"+filepath.Base(dest)+"-*")
	if err != nil {
		return nil, fmt.Errorf("creating unpack directory: %v", err)
	}
	defer os.RemoveAll(tmp)
	b := &budget{maxSize: limit, maxEntries: int64(m.maxEntries), maxTarball: maxTarball}
	lock := &treeLock{LockfileVersion: 1, Name: root.name, Version: root.version, Packages: map[string]lockEntry{}, Notes: notes}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, m.downloads)
	for _, n := range nodes {
		if n.virtual {
			continue
		}
		entry := lockEntry{Version: n.version, Integrity: n.meta.Dist.Integrity, Optional: n.optional, InstallScript: n.meta.HasInstallScript}
		if n.dir != "" && path.Base(n.dir) != n.name {
			entry.Name = n.name
		}
		if n.dir == "" {
			entry.Name = n.name
		}
		lock.Packages[n.dir] = entry
		if n.meta.HasInstallScript {
			lock.Notes = append(lock.Notes, fmt.Sprintf("%s@%s has an install script; it was not run", n.name, n.version))
		}
		// A package this binary pins must have the pinned tarball,
		// whatever the registry says.
		integrity := n.meta.Dist.Integrity
		if pin := pinnedIntegrity(n.name, n.version); pin != "" {
			integrity = pin
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			err := m.fetchInto(ctx, n, integrity, filepath.Join(tmp, filepath.FromSlash(n.dir)), parent, b)
			if err != nil {
				mu.Lock()
				if first == nil {
					if n.dir != "" {
						err = fmt.Errorf("%s@%s (%s): %w", n.name, n.version, n.dir, err)
					}
					first = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.New("install cancelled")
	}
	if !root.virtual {
		if err := verifyInstalled(tmp, root.name, root.version); err != nil {
			return nil, fmt.Errorf("unpacked package: %v", err)
		}
	}
	data, _ := json.MarshalIndent(lock, "", "  ")
	if err := os.MkdirAll(filepath.Join(tmp, "node_modules"), 0o755); err != nil {
		return nil, fmt.Errorf("writing the lock file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, filepath.FromSlash(lockFile)), data, 0o644); err != nil {
		return nil, fmt.Errorf("writing the lock file: %v", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("unpacked package: %v", err)
	}
	if err := os.RemoveAll(dest); err != nil {
		return nil, fmt.Errorf("removing broken install: %v", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return nil, fmt.Errorf("moving package into place: %v", err)
	}
	if len(lock.Notes) > 0 {
		m.logger().Info("plugin installed with notes", zap.String("package", root.name+"@"+root.version), zap.Strings("notes", lock.Notes))
	}
	return lock, nil
}

// readTreeLock reads a complete tree's lock: its package.json names
// name@version (a virtual root has none) and its lock file the same.
func readTreeLock(dir, name, version string, virtual bool) (*treeLock, error) {
	if !virtual {
		if err := verifyInstalled(dir, name, version); err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(lockFile)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("not installed: %w", os.ErrNotExist)
		}
		return nil, fmt.Errorf("reading the lock file: %v", err)
	}
	var lk treeLock
	if json.Unmarshal(data, &lk) != nil || lk.Name != name || lk.Version != version || lk.Packages == nil {
		return nil, errors.New("the lock file does not describe this install")
	}
	return &lk, nil
}

// fetchInto downloads one package (in parent, next to the tree being
// built), checks its integrity and unpacks it into dir.
func (m *Manager) fetchInto(ctx context.Context, n *treeNode, integrity, dir, parent string, b *budget) error {
	sums, err := parseIntegrity(integrity)
	if err != nil {
		return err
	}
	tarball := n.meta.Dist.Tarball
	if !isHTTPURL(tarball) {
		return errors.New("registry gave no usable tarball URL")
	}
	archive, err := os.CreateTemp(parent, ".download-*.tgz")
	if err != nil {
		return fmt.Errorf("creating download file: %v", err)
	}
	defer func() {
		archive.Close()
		os.Remove(archive.Name())
	}()
	if err := m.download(ctx, tarball, archive, sums, b.maxTarball); err != nil {
		return err
	}
	if _, err := archive.Seek(0, 0); err != nil {
		return fmt.Errorf("reading download: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating package directory: %v", err)
	}
	return m.unpack(archive, dir, b)
}

// Package fakeregistry is a fake npm registry on loopback for tests: it
// serves packuments (GET /<name>, a scoped name as @scope%2Fname) and
// tarballs (GET /<name>/-/<file>.tgz) of the packages a test publishes,
// with their dependencies and other metadata, and can be told to fail:
// answer 404, advertise an integrity the tarball does not have, hang
// before answering or in the middle of a tarball.
package fakeregistry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// Package is one published version.
type Package struct {
	Name, Version string
	// Files are the package's files by path (package.json is made from
	// Name, Version and Meta unless Files has one).
	Files map[string]string
	// Meta is merged into the version's packument entry and its
	// package.json: "dependencies", "peerDependencies", "os", "main"…
	Meta map[string]any
	// Tarball, when set, is served instead of one made from Files.
	Tarball []byte
}

// Fault makes the registry misbehave for one package.
type Fault struct {
	// NotFound answers the packument 404.
	NotFound bool
	// WrongIntegrity advertises another tarball's sha512.
	WrongIntegrity bool
	// HangPackument holds the packument request until Release or Close.
	HangPackument bool
	// HangTarball sends the first bytes of the tarball, then holds the
	// rest until Release or Close.
	HangTarball bool
	// TarballStatus, when set, answers tarball requests with it.
	TarballStatus int
}

// Registry is the fake.
type Registry struct {
	URL string

	srv     *http.Server
	ln      net.Listener
	release chan struct{}
	once    sync.Once

	mu      sync.Mutex
	pkgs    map[string]map[string]*published // name → version → package
	tags    map[string]map[string]string
	faults  map[string]Fault
	hits    map[string]int
	waiting int
}

type published struct {
	meta    map[string]any
	tarball []byte
}

// Start runs a registry on a loopback port.
func Start() (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Registry{URL: "http://" + ln.Addr().String(), ln: ln, release: make(chan struct{}),
		pkgs: map[string]map[string]*published{}, tags: map[string]map[string]string{}, faults: map[string]Fault{}, hits: map[string]int{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

// Close releases what hangs and stops the server.
func (r *Registry) Close() error {
	r.Release()
	return r.srv.Close()
}

// Release lets every hanging request go on (failing it: a hung packument
// answers 503, a hung tarball is cut).
func (r *Registry) Release() { r.once.Do(func() { close(r.release) }) }

// Waiting is the number of requests hanging now.
func (r *Registry) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting
}

// Publish adds a version; the highest version published becomes the
// latest dist-tag unless Tag set one.
func (r *Registry) Publish(p Package) {
	meta := map[string]any{"name": p.Name, "version": p.Version}
	for k, v := range p.Meta {
		meta[k] = v
	}
	tgz := p.Tarball
	if tgz == nil {
		files := map[string]string{}
		for k, v := range p.Files {
			files[k] = v
		}
		if _, ok := files["package.json"]; !ok {
			pj, _ := json.Marshal(meta)
			files["package.json"] = string(pj)
		}
		tgz = Tarball(files)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pkgs[p.Name] == nil {
		r.pkgs[p.Name] = map[string]*published{}
		r.tags[p.Name] = map[string]string{}
	}
	r.pkgs[p.Name][p.Version] = &published{meta: meta, tarball: tgz}
	if cur := r.tags[p.Name]["latest"]; cur == "" || versionLess(cur, p.Version) {
		r.tags[p.Name]["latest"] = p.Version
	}
}

// Tag points a dist-tag at a version.
func (r *Registry) Tag(name, tag, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tags[name] == nil {
		r.tags[name] = map[string]string{}
	}
	r.tags[name][tag] = version
}

// SetFault sets (or with a zero Fault clears) a package's fault.
func (r *Registry) SetFault(name string, f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[name] = f
}

// Hits is the number of requests for a path (as escaped on the wire, e.g.
// "/@scope%2Fname" or "/name/-/name-1.0.0.tgz"); "" counts all.
func (r *Registry) Hits(p string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p == "" {
		n := 0
		for _, c := range r.hits {
			n += c
		}
		return n
	}
	return r.hits[p]
}

// Integrity is the sha512 SRI of a published version's tarball.
func (r *Registry) Integrity(name, version string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := r.pkgs[name][version]; v != nil {
		return SRI(v.tarball)
	}
	return ""
}

// TarballFile is the file name a version's tarball is served under.
func TarballFile(name, version string) string { return path.Base(name) + "-" + version + ".tgz" }

// SRI is the sha512 subresource integrity of b.
func SRI(b []byte) string {
	sum := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := req.URL.EscapedPath()
	r.mu.Lock()
	r.hits[p]++
	r.mu.Unlock()
	if req.Method != http.MethodGet {
		http.Error(w, "method", http.StatusMethodNotAllowed)
		return
	}
	if i := strings.Index(p, "/-/"); i >= 0 {
		r.serveTarball(w, req, p[1:i], p[i+3:])
		return
	}
	name, err := url.PathUnescape(p[1:])
	if err != nil {
		http.NotFound(w, req)
		return
	}
	r.mu.Lock()
	fault := r.faults[name]
	versions := r.pkgs[name]
	r.mu.Unlock()
	if fault.HangPackument {
		r.hang(req)
		http.Error(w, `{"error":"released"}`, http.StatusServiceUnavailable)
		return
	}
	if versions == nil || fault.NotFound {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":"Not found"}`))
		return
	}
	r.mu.Lock()
	docs := map[string]any{}
	for v, pub := range versions {
		doc := map[string]any{}
		for k, val := range pub.meta {
			doc[k] = val
		}
		integrity := SRI(pub.tarball)
		if fault.WrongIntegrity {
			integrity = SRI(append([]byte("tampered"), pub.tarball...))
		}
		dist := map[string]any{"tarball": r.URL + "/" + name + "/-/" + TarballFile(name, v), "integrity": integrity}
		if d, ok := pub.meta["dist"].(map[string]any); ok {
			for k, val := range d {
				dist[k] = val
			}
		}
		doc["dist"] = dist
		docs[v] = doc
	}
	tags := map[string]string{}
	for k, v := range r.tags[name] {
		tags[k] = v
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/vnd.npm.install-v1+json")
	json.NewEncoder(w).Encode(map[string]any{"name": name, "dist-tags": tags, "versions": docs})
}

func (r *Registry) serveTarball(w http.ResponseWriter, req *http.Request, escName, file string) {
	name, _ := url.PathUnescape(escName)
	r.mu.Lock()
	fault := r.faults[name]
	var tgz []byte
	for v, pub := range r.pkgs[name] {
		if TarballFile(name, v) == file {
			tgz = pub.tarball
		}
	}
	r.mu.Unlock()
	switch {
	case fault.TarballStatus != 0:
		http.Error(w, `{"error":"tarball refused"}`, fault.TarballStatus)
		return
	case tgz == nil:
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if fault.HangTarball {
		w.Write(tgz[:len(tgz)/2])
		w.(http.Flusher).Flush()
		r.hang(req)
		return
	}
	w.Write(tgz)
}

// hang waits for Release, Close or the client going away.
func (r *Registry) hang(req *http.Request) {
	r.mu.Lock()
	r.waiting++
	r.mu.Unlock()
	select {
	case <-r.release:
	case <-req.Context().Done():
	}
	r.mu.Lock()
	r.waiting--
	r.mu.Unlock()
}

// Tarball makes an npm package tarball (entries under package/) of files
// by path, in name order.
func Tarball(files map[string]string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		mode := int64(0o644)
		if strings.HasPrefix(n, "bin/") {
			mode = 0o755
		}
		tw.WriteHeader(&tar.Header{Name: "package/" + n, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(files[n])),
			ModTime: time.Unix(499162500, 0)})
		tw.Write([]byte(files[n]))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// versionLess compares dotted release versions numerically (enough for
// the latest tag of test packages).
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if len(pa[i]) != len(pb[i]) {
			return len(pa[i]) < len(pb[i])
		}
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return len(pa) < len(pb)
}

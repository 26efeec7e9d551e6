package plugins

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/instance/errs"
)

// tarEntry is one entry of a test tarball.
type tarEntry struct {
	name string
	body string
	typ  byte
	link string
	mode int64
}

func makeTgz(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: mode, ModTime: time.Unix(499162500, 0)}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// npmTgz is a well-formed npm package tarball, plus extra entries.
func npmTgz(t *testing.T, name, version string, extra ...tarEntry) []byte {
	t.Helper()
	pj, _ := json.Marshal(map[string]string{"name": name, "version": version, "main": "index.js"})
	entries := []tarEntry{
		{name: "package/package.json", body: string(pj)},
		{name: "package/index.js", body: "export default async () => ({}) // " + version + "\n"},
		{name: "package/lib/", typ: tar.TypeDir, mode: 0o755},
		{name: "package/lib/util.js", body: "module.exports = 1\n"},
	}
	return makeTgz(t, append(entries, extra...)...)
}

func sri(b []byte) string {
	sum := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

type fakeVersion struct {
	tgz       []byte
	integrity *string // nil = correct
}

type fakePkg struct {
	tags     map[string]string
	versions map[string]*fakeVersion
}

// fakeRegistry is a local npm registry on loopback.
type fakeRegistry struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	pkgs    map[string]*fakePkg
	hits    map[string]int // escaped request path → count
	accepts []string

	holdTarballs chan struct{} // when set, tarball answers wait for it to close
	metaHook     func(name string)
}

func newFakeRegistry(t *testing.T) *fakeRegistry {
	r := &fakeRegistry{t: t, pkgs: map[string]*fakePkg{}, hits: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// add publishes versions of a package; latest becomes the latest dist-tag.
func (r *fakeRegistry) add(name, latest string, versions ...string) *fakePkg {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := &fakePkg{tags: map[string]string{"latest": latest}, versions: map[string]*fakeVersion{}}
	for _, v := range versions {
		p.versions[v] = &fakeVersion{tgz: npmTgz(r.t, name, v)}
	}
	r.pkgs[name] = p
	return p
}

// edit changes the registry's contents under its lock.
func (r *fakeRegistry) edit(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func (r *fakeRegistry) snapshot() (map[string]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hits := map[string]int{}
	for k, v := range r.hits {
		hits[k] = v
	}
	return hits, slices.Clone(r.accepts)
}

func (r *fakeRegistry) count(escapedPath string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[escapedPath]
}

func (r *fakeRegistry) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.hits {
		n += c
	}
	return n
}

func tarballFile(name, version string) string { return path.Base(name) + "-" + version + ".tgz" }

func (r *fakeRegistry) serve(w http.ResponseWriter, req *http.Request) {
	p := req.URL.EscapedPath()
	r.mu.Lock()
	r.hits[p]++
	hold, hook := r.holdTarballs, r.metaHook
	r.mu.Unlock()
	if req.Method != http.MethodGet {
		http.Error(w, "method", http.StatusMethodNotAllowed)
		return
	}
	if i := strings.Index(p, "/-/"); i >= 0 {
		name, file := p[1:i], p[i+3:]
		r.mu.Lock()
		pkg := r.pkgs[name]
		var tgz []byte
		if pkg != nil {
			for v, fv := range pkg.versions {
				if tarballFile(name, v) == file {
					tgz = fv.tgz
				}
			}
		}
		r.mu.Unlock()
		if tgz == nil {
			http.NotFound(w, req)
			return
		}
		if hold != nil {
			<-hold
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(tgz)
		return
	}
	name, err := url.PathUnescape(p[1:])
	if err != nil {
		http.NotFound(w, req)
		return
	}
	if hook != nil {
		hook(name)
	}
	r.mu.Lock()
	r.accepts = append(r.accepts, req.Header.Get("Accept"))
	pkg := r.pkgs[name]
	if pkg == nil {
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":"Not found"}`))
		return
	}
	versions := map[string]any{}
	for v, fv := range pkg.versions {
		integrity := sri(fv.tgz)
		if fv.integrity != nil {
			integrity = *fv.integrity
		}
		sha := sha1.Sum(fv.tgz)
		versions[v] = map[string]any{
			"name": name, "version": v,
			"dist": map[string]any{
				"tarball":   r.srv.URL + "/" + name + "/-/" + tarballFile(name, v),
				"integrity": integrity,
				"shasum":    hex.EncodeToString(sha[:]),
			},
		}
	}
	doc := map[string]any{"name": name, "dist-tags": pkg.tags, "versions": versions, "modified": "2026-01-01T00:00:00.000Z"}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/vnd.npm.install-v1+json")
	json.NewEncoder(w).Encode(doc)
}

func newTestManager(t *testing.T, registry, dir string, targets ...string) *Manager {
	t.Helper()
	m, err := New(Options{Targets: targets, Registry: registry, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func findPlugin(t *testing.T, list []Info, id string) Info {
	t.Helper()
	for _, p := range list {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("plugin %q not in %+v", id, list)
	return Info{}
}

func wantTagged(t *testing.T, err error, status int, tag string, fields map[string]any) *errs.Error {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v, want a tagged %s", err, tag)
	}
	if e.Status != status || e.Tag != tag {
		t.Fatalf("error = %d %s, want %d %s", e.Status, e.Tag, status, tag)
	}
	for k, v := range fields {
		if e.Fields[k] != v {
			t.Fatalf("error field %s = %v, want %v", k, e.Fields[k], v)
		}
	}
	return e
}

// listTree lists every path under root, relative, slash-separated.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}

func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestPluginNewValidation(t *testing.T) {
	for _, good := range []string{"alpha@1.2.3", "@scope/name@1.2.3", "plain", "a-b.c_d@^1.0.0", "x@latest", "y@>=1.0.0 <2.0.0", "z@1.0.0-beta.1+build.5"} {
		if _, err := New(Options{Targets: []string{good}}); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	bad := []string{
		"Upper@1.0.0", ".dot@1.0.0", "_under@1.0.0", "sp ace@1.0.0", "@scope@1.0.0", "@/x@1.0.0", "@scope/@1.0.0",
		"a@", "a@file:../x", "a@git+ssh://x", "a/b@1.0.0", "node_modules", "ex!cl@1.0.0", "../up@1.0.0",
		"@scope/.hidden@1.0.0", strings.Repeat("a", 215) + "@1.0.0", "",
	}
	for _, b := range bad {
		if _, err := New(Options{Targets: []string{b}}); err == nil {
			t.Errorf("%q accepted", b)
		}
	}
	if _, err := New(Options{Targets: []string{"a@1.0.0", "a@2.0.0"}}); err == nil {
		t.Error("duplicate name accepted")
	}
	if _, err := New(Options{Registry: "ftp://x"}); err == nil {
		t.Error("non-http registry accepted")
	}
}

func TestPluginList(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.add("alpha", "1.0.0", "1.0.0")
	dir := t.TempDir()
	m := newTestManager(t, reg.srv.URL, filepath.Join(dir, "plugins"), "alpha@1.0.0", "@scope/beta@^2.0.0")

	project := filepath.Join(dir, "project")
	for _, f := range []string{".opencode/plugin/a.js", ".opencode/plugin/notes.txt", ".opencode/plugins/b.ts", ".opencode/plugins/c.mjs", ".opencode/plugins/.hidden.js"} {
		p := filepath.Join(project, filepath.FromSlash(f))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("export default {}"), 0o644)
	}
	os.Mkdir(filepath.Join(project, ".opencode/plugins/dir.js"), 0o755)

	list := m.List(project)
	if got := reg.total(); got != 0 {
		t.Fatalf("registry hit %d times by New/List", got)
	}
	b := findPlugin(t, list, "agentgate.gateway-auth")
	if b.Source.Type != "builtin" || b.State.Status != "active" {
		t.Errorf("builtin = %+v", b)
	}
	for _, id := range []string{"alpha", "@scope/beta"} {
		p := findPlugin(t, list, id)
		if p.Source.Type != "package" || p.Source.Target != id || p.State.Status != "failed" || p.State.Error != "not installed" {
			t.Errorf("%s = %+v", id, p)
		}
	}
	if v := findPlugin(t, list, "alpha").Source.Version; v != "1.0.0" {
		t.Errorf("alpha version = %q", v)
	}
	var locals []string
	for _, p := range list {
		if p.Source.Type == "local" {
			if p.State.Status != "active" || !filepath.IsAbs(p.Source.Path) {
				t.Errorf("local = %+v", p)
			}
			rel, _ := filepath.Rel(project, p.Source.Path)
			locals = append(locals, filepath.ToSlash(rel))
		}
	}
	want := []string{".opencode/plugin/a.js", ".opencode/plugins/b.ts", ".opencode/plugins/c.mjs"}
	if !slices.Equal(locals, want) {
		t.Errorf("locals = %v, want %v", locals, want)
	}
	// Without a project only builtins and packages.
	if n := len(m.List("")); n != 3 {
		t.Errorf("List(\"\") has %d plugins", n)
	}
	// JSON shape.
	raw, _ := json.Marshal(findPlugin(t, list, "alpha"))
	if !strings.Contains(string(raw), `"source":{"type":"package","target":"alpha","version":"1.0.0"}`) ||
		!strings.Contains(string(raw), `"features":{}`) || !strings.Contains(string(raw), `"state":{"status":"failed","error":"not installed"}`) {
		t.Errorf("json = %s", raw)
	}
	// A nil manager still lists the builtins.
	var nilM *Manager
	if n := len(nilM.List("")); n != 1 {
		t.Errorf("nil manager lists %d", n)
	}
}

// writeInstalled writes what an install leaves in dir/<name>/<version>:
// the package's package.json (naming pjName@pjVersion) and, with lock,
// the tree's lock file.
func writeInstalled(t *testing.T, dir, name, version, pjName, pjVersion string, lock bool) {
	t.Helper()
	d := filepath.Join(dir, filepath.FromSlash(name), version)
	os.MkdirAll(filepath.Join(d, "node_modules"), 0o755)
	pj, _ := json.Marshal(map[string]string{"name": pjName, "version": pjVersion})
	os.WriteFile(filepath.Join(d, "package.json"), pj, 0o644)
	if lock {
		lk, _ := json.Marshal(treeLock{LockfileVersion: 1, Name: name, Version: version, Packages: map[string]lockEntry{"": {Name: name, Version: version}}})
		os.WriteFile(filepath.Join(d, filepath.FromSlash(lockFile)), lk, 0o644)
	}
}

func TestPluginListInstalledAtStart(t *testing.T) {
	dir := t.TempDir()
	write := func(name, version, pjName, pjVersion string) {
		writeInstalled(t, dir, name, version, pjName, pjVersion, true)
	}
	write("alpha", "1.0.0", "alpha", "1.0.0")
	write("@scope/beta", "1.0.0", "@scope/beta", "1.0.0")
	write("@scope/beta", "1.4.0", "@scope/beta", "1.4.0")
	write("@scope/beta", "1.9.0", "@scope/beta", "9.9.9")                         // broken: ignored
	writeInstalled(t, dir, "@scope/beta", "1.8.0", "@scope/beta", "1.8.0", false) // no lock: an install cut short
	write("gamma", "2.0.0", "other", "2.0.0")
	m := newTestManager(t, "", dir, "alpha@1.0.0", "@scope/beta@^1.0.0", "gamma@2.0.0")
	list := m.List("")
	if p := findPlugin(t, list, "alpha"); p.State.Status != "active" || p.Features["server"] != true {
		t.Errorf("alpha = %+v", p)
	}
	if p := findPlugin(t, list, "@scope/beta"); p.State.Status != "active" || p.Source.Version != "1.4.0" {
		t.Errorf("beta = %+v", p)
	}
	if p := findPlugin(t, list, "gamma"); p.State.Status != "failed" || !strings.Contains(p.State.Error, "other@2.0.0") {
		t.Errorf("gamma = %+v", p)
	}
}

func TestPluginCheck(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.add("alpha", "1.1.0", "1.0.0", "1.1.0")
	reg.add("@scope/beta", "2.0.0", "2.0.0")
	reg.add("gamma", "0.9.0", "0.9.0") // pinned above latest
	delta := reg.add("delta", "1.0.0", "1.0.0", "2.0.0-rc.1")
	reg.edit(func() { delta.tags["next"] = "2.0.0-rc.1" })
	m := newTestManager(t, reg.srv.URL, t.TempDir(), "alpha@1.0.0", "@scope/beta@2.0.0", "gamma@1.0.0", "delta@next")

	// One target only asks for that package.
	list, err := m.Check(context.Background(), "", "@scope/beta@2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	hits, accepts := reg.snapshot()
	if hits["/@scope%2Fbeta"] != 1 || len(hits) != 1 {
		t.Fatalf("hits = %v", hits)
	}
	if findPlugin(t, list, "alpha").Source.Outdated {
		t.Error("alpha checked though not asked")
	}
	if !strings.Contains(accepts[0], "application/vnd.npm.install-v1+json") || !strings.Contains(accepts[0], "application/json") {
		t.Errorf("Accept = %q", accepts[0])
	}

	list, err = m.Check(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 5 {
		t.Errorf("check returned %d plugins", len(list))
	}
	for id, want := range map[string]bool{"alpha": true, "@scope/beta": false, "gamma": false, "delta": true} {
		p := findPlugin(t, list, id)
		if p.Source.Outdated != want {
			t.Errorf("%s outdated = %v, want %v", id, p.Source.Outdated, want)
		}
		if p.State.Status != "failed" {
			t.Errorf("%s state changed: %+v", id, p.State)
		}
	}

	// Unknown target.
	_, err = m.Check(context.Background(), "", "nope")
	e := wantTagged(t, err, 400, "InvalidRequestError", map[string]any{
		"message": "Plugin package is not in the current server inventory: nope", "field": "target"})
	rec := httptest.NewRecorder()
	errs.Write(rec, e)
	var body map[string]any
	json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != 400 || body["_tag"] != "InvalidRequestError" || body["field"] != "target" {
		t.Errorf("wire = %d %v", rec.Code, body)
	}

	// Registry down: nothing changes, no error.
	down := newTestManager(t, closedPortURL(t), t.TempDir(), "alpha@1.0.0")
	list, err = down.Check(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if p := findPlugin(t, list, "alpha"); p.Source.Outdated || p.State.Status != "failed" || p.State.Error != "not installed" {
		t.Errorf("alpha after failed check = %+v", p)
	}
	// 404: same.
	m404 := newTestManager(t, reg.srv.URL, t.TempDir(), "missing@1.0.0")
	if _, err := m404.Check(context.Background(), "", "missing"); err != nil {
		t.Fatal(err)
	}
	// No registry: flags stay.
	none := newTestManager(t, "", t.TempDir(), "alpha@1.0.0")
	if _, err := none.Check(context.Background(), "", ""); err != nil {
		t.Fatal(err)
	}
}

func TestPluginUpdateInstalls(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.add("alpha", "1.1.0", "1.0.0", "1.1.0")
	reg.add("@scope/beta", "1.2.0", "1.0.0", "1.2.0")
	dir := filepath.Join(t.TempDir(), "plugins")
	m := newTestManager(t, reg.srv.URL, dir, "alpha@1.0.0", "@scope/beta@^1.0.0")
	ctx := context.Background()

	if _, err := m.Check(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	updated, err := m.Update(ctx, []string{"alpha@1.0.0", "@scope/beta", "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(updated, []string{"alpha", "@scope/beta"}) {
		t.Errorf("updated = %v", updated)
	}
	for name, version := range map[string]string{"alpha": "1.1.0", "@scope/beta": "1.2.0"} {
		d := filepath.Join(dir, filepath.FromSlash(name), version)
		if err := verifyInstalled(d, name, version); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if b, err := os.ReadFile(filepath.Join(d, "lib", "util.js")); err != nil || string(b) != "module.exports = 1\n" {
			t.Errorf("%s util.js = %q, %v", name, b, err)
		}
		if _, err := os.Stat(filepath.Join(d, "package")); err == nil {
			t.Errorf("%s: package/ prefix not stripped", name)
		}
	}
	if got := listTree(t, filepath.Join(dir, "alpha")); !slices.Equal(got, []string{"1.1.0", "1.1.0/index.js", "1.1.0/lib", "1.1.0/lib/util.js", "1.1.0/node_modules", "1.1.0/node_modules/.agentgate-lock.json", "1.1.0/package.json"}) {
		t.Errorf("alpha tree = %v", got)
	}
	list := m.List("")
	for name, version := range map[string]string{"alpha": "1.1.0", "@scope/beta": "1.2.0"} {
		p := findPlugin(t, list, name)
		if p.Source.Version != version || p.State.Status != "active" || p.Source.Outdated || p.Source.Updating || p.Features["server"] != true {
			t.Errorf("%s = %+v", name, p)
		}
	}

	// Up to date: nothing changes, nothing downloaded.
	before := reg.count("/alpha/-/alpha-1.1.0.tgz")
	updated, err = m.Update(ctx, []string{"alpha"})
	if err != nil || len(updated) != 0 || reg.count("/alpha/-/alpha-1.1.0.tgz") != before {
		t.Errorf("second update = %v, %v", updated, err)
	}
	if list, _ := m.Check(ctx, "", ""); findPlugin(t, list, "alpha").Source.Outdated {
		t.Error("alpha outdated after update")
	}

	// A new manager over the same directory sees the install.
	m2 := newTestManager(t, reg.srv.URL, dir, "alpha@^1.0.0")
	if p := findPlugin(t, m2.List(""), "alpha"); p.Source.Version != "1.1.0" || p.State.Status != "active" {
		t.Errorf("restart = %+v", p)
	}
	// Nothing to update, nothing to do.
	if updated, err := m.Update(ctx, nil); err != nil || updated != nil {
		t.Errorf("empty update = %v, %v", updated, err)
	}
}

func TestPluginUpdateUpdatingFlag(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.add("alpha", "1.1.0", "1.1.0")
	reg.add("beta", "1.0.0", "1.0.0")
	hold := make(chan struct{})
	reg.edit(func() { reg.holdTarballs = hold })
	m := newTestManager(t, reg.srv.URL, t.TempDir(), "alpha@1.0.0", "beta@1.0.0")
	done := make(chan error)
	go func() {
		_, err := m.Update(context.Background(), []string{"alpha"})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !findPlugin(t, m.List(""), "alpha").Source.Updating {
		if time.Now().After(deadline) {
			t.Fatal("updating never set")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if findPlugin(t, m.List(""), "beta").Source.Updating {
		t.Error("beta marked updating")
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := findPlugin(t, m.List(""), "alpha"); p.Source.Updating || p.State.Status != "active" {
		t.Errorf("after = %+v", p)
	}
}

// wantNothingUnpacked checks the package directory holds no version,
// temporary or download entries.
func wantNothingUnpacked(t *testing.T, dir, name string) {
	t.Helper()
	if got := listTree(t, filepath.Join(dir, filepath.FromSlash(name))); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
}

func TestPluginUpdateIntegrity(t *testing.T) {
	wrong := sri([]byte("something else"))
	sha1Only := "sha1-" + base64.StdEncoding.EncodeToString(make([]byte, 20))
	for name, integrity := range map[string]string{"mismatch": wrong, "missing": "", "sha1-only": sha1Only, "garbage": "sha512-!!!"} {
		t.Run(name, func(t *testing.T) {
			reg := newFakeRegistry(t)
			p := reg.add("alpha", "1.1.0", "1.1.0")
			reg.edit(func() { p.versions["1.1.0"].integrity = &integrity })
			dir := t.TempDir()
			m := newTestManager(t, reg.srv.URL, dir, "alpha@1.0.0")
			updated, err := m.Update(context.Background(), []string{"alpha"})
			e := wantTagged(t, err, 503, "ServiceUnavailableError", map[string]any{"service": "plugin"})
			msg := e.Fields["message"].(string)
			if !strings.HasPrefix(msg, "Failed to update plugin packages: alpha: ") || !strings.Contains(msg, "integrity") {
				t.Errorf("message = %q", msg)
			}
			if len(updated) != 0 {
				t.Errorf("updated = %v", updated)
			}
			wantNothingUnpacked(t, dir, "alpha")
			if p := findPlugin(t, m.List(""), "alpha"); p.Source.Version != "1.0.0" || p.State.Status != "failed" || p.Source.Updating {
				t.Errorf("alpha = %+v", p)
			}
		})
	}
	// SRI with several hashes: any matching sha512 passes.
	reg := newFakeRegistry(t)
	p := reg.add("alpha", "1.1.0", "1.1.0")
	multi := "sha1-abc " + sri(p.versions["1.1.0"].tgz) + " " + wrong
	reg.edit(func() { p.versions["1.1.0"].integrity = &multi })
	m := newTestManager(t, reg.srv.URL, t.TempDir(), "alpha@1.0.0")
	if _, err := m.Update(context.Background(), []string{"alpha"}); err != nil {
		t.Fatal(err)
	}
}

func TestPluginUpdateRefusesEvilTarballs(t *testing.T) {
	base := t.TempDir()
	pj := `{"name":"alpha","version":"1.1.0"}`
	ok := []tarEntry{{name: "package/package.json", body: pj}, {name: "package/index.js", body: "x"}}
	abs := filepath.ToSlash(filepath.Join(base, "evil-abs"))
	cases := map[string][]tarEntry{
		"dotdot":           {{name: "../evil", body: "x"}},
		"dotdot-inside":    {{name: "package/../../evil", body: "x"}},
		"dotdot-deep":      {{name: "package/lib/../../../../evil", body: "x"}},
		"absolute":         {{name: abs, body: "x"}},
		"symlink-out":      {{name: "package/link", typ: tar.TypeSymlink, link: "../../../.."}, {name: "package/link/evil", body: "x"}},
		"symlink-absolute": {{name: "package/link", typ: tar.TypeSymlink, link: base}, {name: "package/link/evil", body: "x"}},
		"hardlink-out":     {{name: "package/hl", typ: tar.TypeLink, link: "../../evil-target"}},
		"chardev":          {{name: "package/dev", typ: tar.TypeChar}},
		"blockdev":         {{name: "package/blk", typ: tar.TypeBlock}},
		"fifo":             {{name: "package/fifo", typ: tar.TypeFifo}},
		"backslash":        {{name: `package\..\..\evil`, body: "x"}},
	}
	for name, evil := range cases {
		t.Run(name, func(t *testing.T) {
			reg := newFakeRegistry(t)
			p := reg.add("alpha", "1.1.0")
			tgz := makeTgz(t, append(slices.Clone(ok), evil...)...)
			reg.edit(func() { p.versions["1.1.0"] = &fakeVersion{tgz: tgz} })
			dir := filepath.Join(base, name, "a", "b", "plugins")
			m := newTestManager(t, reg.srv.URL, dir, "alpha@1.0.0")
			_, err := m.Update(context.Background(), []string{"alpha"})
			e := wantTagged(t, err, 503, "ServiceUnavailableError", map[string]any{"service": "plugin"})
			msg := e.Fields["message"].(string)
			if !strings.HasPrefix(msg, "Failed to update plugin packages: alpha: tarball entry ") {
				t.Errorf("message = %q", msg)
			}
			t.Log(msg)
			wantNothingUnpacked(t, dir, "alpha")
			if got := listTree(t, filepath.Join(base, name)); !slices.Equal(got, []string{"a", "a/b", "a/b/plugins", "a/b/plugins/alpha"}) {
				t.Errorf("tree = %v", got)
			}
			if _, err := os.Lstat(filepath.Join(base, "evil-abs")); err == nil {
				t.Error("absolute entry written")
			}
			if p := findPlugin(t, m.List(""), "alpha"); p.State.Status != "failed" || p.Source.Version != "1.0.0" {
				t.Errorf("alpha = %+v", p)
			}
		})
	}
	for _, e := range listTree(t, base) {
		if strings.Contains(path.Base(e), "evil") {
			t.Errorf("written outside: %s", e)
		}
	}
}

func TestPluginUpdateTarballLimits(t *testing.T) {
	for name, tc := range map[string]struct {
		extra []tarEntry
		tune  func(*Manager)
		want  string
	}{
		"size":          {[]tarEntry{{name: "package/big.bin", body: strings.Repeat("x", 4096)}}, func(m *Manager) { m.maxUnpacked = 2048 }, "size limit"},
		"entries":       {[]tarEntry{{name: "package/1"}, {name: "package/2"}, {name: "package/3"}}, func(m *Manager) { m.maxEntries = 6 }, "too many entries"},
		"download":      {nil, func(m *Manager) { m.maxTarball = 64 }, "too large"},
		"wrong-package": {nil, nil, "package.json"},
	} {
		t.Run(name, func(t *testing.T) {
			reg := newFakeRegistry(t)
			p := reg.add("alpha", "1.1.0")
			tgz := npmTgz(t, "alpha", "1.1.0", tc.extra...)
			if name == "wrong-package" {
				tgz = npmTgz(t, "other", "1.1.0")
			}
			reg.edit(func() { p.versions["1.1.0"] = &fakeVersion{tgz: tgz} })
			dir := t.TempDir()
			m := newTestManager(t, reg.srv.URL, dir, "alpha@1.0.0")
			if tc.tune != nil {
				tc.tune(m)
			}
			_, err := m.Update(context.Background(), []string{"alpha"})
			e := wantTagged(t, err, 503, "ServiceUnavailableError", nil)
			if msg := e.Fields["message"].(string); !strings.Contains(msg, tc.want) {
				t.Errorf("message = %q, want %q", msg, tc.want)
			}
			wantNothingUnpacked(t, dir, "alpha")
		})
	}
}

func TestPluginUpdateSkipsInsideLinks(t *testing.T) {
	reg := newFakeRegistry(t)
	p := reg.add("alpha", "1.1.0")
	tgz := npmTgz(t, "alpha", "1.1.0",
		tarEntry{name: "package/alias.js", typ: tar.TypeSymlink, link: "index.js"},
		tarEntry{name: "package/lib/hl.js", typ: tar.TypeLink, link: "package/lib/util.js"},
		tarEntry{name: "package/bin/run", body: "#!/bin/sh\n", mode: 0o755},
	)
	reg.edit(func() { p.versions["1.1.0"] = &fakeVersion{tgz: tgz} })
	dir := t.TempDir()
	m := newTestManager(t, reg.srv.URL, dir, "alpha@1.0.0")
	if _, err := m.Update(context.Background(), []string{"alpha"}); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(dir, "alpha", "1.1.0")
	for _, f := range []string{"alias.js", "lib/hl.js"} {
		if _, err := os.Lstat(filepath.Join(d, f)); err == nil {
			t.Errorf("%s created", f)
		}
	}
	if fi, err := os.Stat(filepath.Join(d, "bin", "run")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("bin/run = %v, %v", fi, err)
	}
	if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("version dir mode = %v, %v", fi, err)
	}
}

func TestPluginUpdateRegistryFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("down", func(t *testing.T) {
		dir := t.TempDir()
		m := newTestManager(t, closedPortURL(t), dir, "alpha@1.0.0")
		_, err := m.Update(ctx, []string{"alpha"})
		e := wantTagged(t, err, 503, "ServiceUnavailableError", map[string]any{"service": "plugin"})
		if msg := e.Fields["message"].(string); !strings.HasPrefix(msg, "Failed to update plugin packages: alpha: registry unreachable") {
			t.Errorf("message = %q", msg)
		}
		wantNothingUnpacked(t, dir, "alpha")
	})
	t.Run("404", func(t *testing.T) {
		reg := newFakeRegistry(t)
		m := newTestManager(t, reg.srv.URL, t.TempDir(), "@scope/alpha@1.0.0")
		_, err := m.Update(ctx, []string{"@scope/alpha"})
		wantTagged(t, err, 503, "ServiceUnavailableError", map[string]any{
			"service": "plugin", "message": "Failed to update plugin packages: @scope/alpha: package not found in the registry"})
		if hits, _ := reg.snapshot(); hits["/@scope%2Falpha"] != 1 {
			t.Errorf("hits = %v", hits)
		}
	})
	t.Run("tarball-404", func(t *testing.T) {
		reg := newFakeRegistry(t)
		p := reg.add("alpha", "1.1.0", "1.1.0")
		reg.edit(func() { p.versions["1.1.0"].tgz = nil })
		dir := t.TempDir()
		m := newTestManager(t, reg.srv.URL, dir, "alpha@1.0.0")
		_, err := m.Update(ctx, []string{"alpha"})
		wantTagged(t, err, 503, "ServiceUnavailableError", nil)
		wantNothingUnpacked(t, dir, "alpha")
	})
	t.Run("no-registry", func(t *testing.T) {
		m := newTestManager(t, "", t.TempDir(), "alpha@1.0.0")
		_, err := m.Update(ctx, []string{"alpha"})
		wantTagged(t, err, 503, "ServiceUnavailableError", map[string]any{
			"message": "Failed to update plugin packages: alpha: no plugin registry is configured"})
	})
	t.Run("unknown", func(t *testing.T) {
		reg := newFakeRegistry(t)
		reg.add("alpha", "1.1.0", "1.1.0")
		m := newTestManager(t, reg.srv.URL, t.TempDir(), "alpha@1.0.0")
		updated, err := m.Update(ctx, []string{"nope", "alpha", "other@1.0.0"})
		wantTagged(t, err, 400, "InvalidRequestError", map[string]any{
			"message": "Plugin packages are not in the current server inventory: nope, other@1.0.0", "field": "targets"})
		if updated != nil || reg.total() != 0 {
			t.Errorf("work done: %v, %d requests", updated, reg.total())
		}
		var nilM *Manager
		_, err = nilM.Update(ctx, []string{"alpha"})
		wantTagged(t, err, 400, "InvalidRequestError", map[string]any{"field": "targets"})
	})
}

func TestPluginUpdateConcurrent(t *testing.T) {
	reg := newFakeRegistry(t)
	const n = 5
	var targets []string
	for i := range n {
		name := fmt.Sprintf("pkg-%d", i)
		reg.add(name, "2.0.0", "1.0.0", "2.0.0")
		targets = append(targets, name+"@1.0.0")
	}
	// Every packument request waits until all have arrived: serial updates
	// would stall here.
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	var serial bool
	hook := func(string) {
		mu.Lock()
		arrived++
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			mu.Lock()
			serial = true
			mu.Unlock()
		}
	}
	reg.edit(func() { reg.metaHook = hook })
	dir := t.TempDir()
	m := newTestManager(t, reg.srv.URL, dir, targets...)
	updated, err := m.Update(context.Background(), []string{"pkg-4", "pkg-0", "pkg-3", "pkg-1", "pkg-2"})
	if err != nil {
		t.Fatal(err)
	}
	if serial {
		t.Error("updates did not run concurrently")
	}
	if !slices.Equal(updated, []string{"pkg-4", "pkg-0", "pkg-3", "pkg-1", "pkg-2"}) {
		t.Errorf("updated = %v", updated)
	}
	for i := range n {
		name := fmt.Sprintf("pkg-%d", i)
		if err := verifyInstalled(filepath.Join(dir, name, "2.0.0"), name, "2.0.0"); err != nil {
			t.Error(err)
		}
		if p := findPlugin(t, m.List(""), name); p.Source.Version != "2.0.0" || p.State.Status != "active" {
			t.Errorf("%s = %+v", name, p)
		}
	}
}

func TestPluginUpdateOneFailing(t *testing.T) {
	reg := newFakeRegistry(t)
	reg.add("good-a", "2.0.0", "2.0.0")
	reg.add("good-b", "3.1.0", "3.1.0")
	bad := reg.add("bad", "1.1.0", "1.1.0")
	wrong := sri([]byte("tampered"))
	reg.edit(func() { bad.versions["1.1.0"].integrity = &wrong })
	dir := t.TempDir()
	m := newTestManager(t, reg.srv.URL, dir, "good-a@1.0.0", "bad@1.0.0", "good-b@3.0.0", "gone@1.0.0")
	updated, err := m.Update(context.Background(), []string{"good-a", "bad", "good-b", "gone"})
	e := wantTagged(t, err, 503, "ServiceUnavailableError", map[string]any{"service": "plugin"})
	msg := e.Fields["message"].(string)
	if !strings.HasPrefix(msg, "Failed to update plugin packages: bad: tarball does not match its sha512 integrity; gone: package not found in the registry") {
		t.Errorf("message = %q", msg)
	}
	if strings.Contains(msg, "good-") {
		t.Errorf("message names a good package: %q", msg)
	}
	if !slices.Equal(updated, []string{"good-a", "good-b"}) {
		t.Errorf("updated = %v", updated)
	}
	list := m.List("")
	for name, version := range map[string]string{"good-a": "2.0.0", "good-b": "3.1.0"} {
		if p := findPlugin(t, list, name); p.Source.Version != version || p.State.Status != "active" {
			t.Errorf("%s = %+v", name, p)
		}
	}
	if p := findPlugin(t, list, "bad"); p.Source.Version != "1.0.0" || p.State.Status != "failed" {
		t.Errorf("bad = %+v", p)
	}
	wantNothingUnpacked(t, dir, "bad")
}

func TestPluginSemver(t *testing.T) {
	order := []string{"0.0.1", "0.9.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
		"1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.2.0", "1.10.0", "2.0.0", "10.0.0", "9007199254740991.0.0"}
	for i := range order {
		for j := range order {
			a, okA := parseSemver(order[i])
			b, okB := parseSemver(order[j])
			if !okA || !okB {
				t.Fatalf("parse %q/%q", order[i], order[j])
			}
			if got, want := a.Compare(b), cmpIdx(i, j); got != want {
				t.Errorf("cmp(%s, %s) = %d, want %d", order[i], order[j], got, want)
			}
		}
	}
	for _, bad := range []string{"", "1", "1.2", "01.2.3", "1.2.3-", "v1.2.3", "1.2.3/../x", "../1.2.3", "latest", "^1.2.3",
		// npm refuses numbers above 2^53-1 (and these could not come from a registry).
		"9007199254740992.0.0", "1.9007199254740992.0", "99999999999999999999.0.0",
		"1.2.3-01", "1.2.3-a..b", "1.2.3+", "1.2.3+a..b", "=1.2.3", " 1.2.3", "1.2.3 ", "1.2.3-a/b", "1.2.3." + strings.Repeat("0", 260)} {
		if _, ok := parseSemver(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if !isNewer("1.1.0", "1.0.0") || isNewer("1.0.0", "1.0.0") || isNewer("0.9.0", "1.0.0") || !isNewer("1.0.0", "") {
		t.Error("isNewer")
	}
	// Build metadata does not count; prereleases are below their release.
	if isNewer("1.0.0+build.2", "1.0.0+build.1") || isNewer("1.0.0-rc.1", "1.0.0") || !isNewer("1.0.0", "1.0.0-rc.1") ||
		isNewer("latest", "1.0.0") || !isNewer("1.0.0", "not-a-version") {
		t.Error("isNewer with metadata, prereleases or non-versions")
	}
	if v, ok := parseSemver("1.0.0-beta.11+exp.sha.5114f85"); !ok || v.Prerelease() != "beta.11" || v.Metadata() != "exp.sha.5114f85" ||
		v.Original() != "1.0.0-beta.11+exp.sha.5114f85" {
		t.Errorf("parseSemver kept %+v", v)
	}
}

// TestPluginVersionSpecs pins how a configured version is read: an exact
// version pins the plugin; a dist-tag follows that tag; any other spec (an
// npm range) is accepted and follows dist-tags.latest.
func TestPluginVersionSpecs(t *testing.T) {
	ranges := []string{"^1.2.3", "~1.2", "~1.2.3", "1.x", "1.2.x", "1.X", "x", "X", "*", ">=1 <2", ">=1.0.0 <2.0.0",
		"1.2.3 - 2.3.4", "1.0.0 || ^2.0.0", "<1.0.0 || >=2.0.0-rc.1", "^1.0.0-beta.1", "=1.2.3", "v1.2.3", "1", "1.2"}
	for _, r := range ranges {
		name, spec, err := parsePluginTarget("p@" + r)
		if err != nil || name != "p" || spec != r {
			t.Errorf("target p@%s = %q %q %v", r, name, spec, err)
		}
		if isDistTag(r) {
			t.Errorf("%q taken for a dist-tag", r)
		}
		if _, ok := parseSemver(r); ok {
			t.Errorf("%q taken for an exact version", r)
		}
	}
	for _, tag := range []string{"latest", "next", "beta", "canary-2", "rc.1"} {
		if _, spec, err := parsePluginTarget("p@" + tag); err != nil || spec != tag || !isDistTag(tag) {
			t.Errorf("dist-tag %q: spec %q, %v", tag, spec, err)
		}
	}
	for _, bad := range []string{"p@ ^1.0.0", "p@1.0.0,2.0.0", "p@1.0.0;rm", "p@1.0.0/x", "p@" + strings.Repeat("1", 257)} {
		if _, _, err := parsePluginTarget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, spec, _ := parsePluginTarget("@scope/p"); spec != "latest" {
		t.Errorf("a bare name follows %q, want latest", spec)
	}

	var pk packument
	if err := json.Unmarshal([]byte(`{"dist-tags":{"latest":"1.9.0","next":"2.0.0-rc.1","bad":"nope"},
		"versions":{"1.0.0":{},"1.9.0":{},"1.10.0":{},"2.0.0-rc.1":{},"3.0.0":{}}}`), &pk); err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]string{
		"latest": "1.9.0", "next": "2.0.0-rc.1", "missing": "1.9.0", "bad": "",
		"^1.0.0": "1.9.0", "~2.0": "1.9.0", "1.x": "1.9.0", "*": "1.9.0", "1.2.3 - 2.3.4": "1.9.0", "1.0.0 || 3.x": "1.9.0",
		"1.0.0": "1.9.0", // an exact pin is installed as listed; updates still offer latest
	} {
		if got := pk.pick(spec); got != want {
			t.Errorf("pick(%q) = %q, want %q", spec, got, want)
		}
	}
	// Without a latest tag: the highest release by precedence, not by text.
	delete(pk.DistTags, "latest")
	if got := pk.pick("^1.0.0"); got != "3.0.0" {
		t.Errorf("pick without latest = %q, want 3.0.0", got)
	}
	delete(pk.Versions, "3.0.0")
	if got := pk.pick("latest"); got != "1.10.0" {
		t.Errorf("pick without latest = %q, want 1.10.0 (prereleases skipped)", got)
	}
	pk.DistTags["latest"] = "not-a-version"
	if got := pk.pick("latest"); got != "" {
		t.Errorf("pick with a malformed latest = %q, want none", got)
	}
}

func cmpIdx(i, j int) int {
	switch {
	case i < j:
		return -1
	case i > j:
		return 1
	}
	return 0
}

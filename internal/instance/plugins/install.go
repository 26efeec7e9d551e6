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
	"strings"
)

// download writes a tarball to f and checks it against the sha512 sums.
// Each read has the request timeout (a registry that stops sending fails
// the download), the whole download pluginDownloadTimeout.
func (m *Manager) download(ctx context.Context, tarball string, f *os.File, sums [][]byte, max int64) error {
	ctx, cancel := context.WithTimeout(ctx, pluginDownloadTimeout)
	defer cancel()
	ctx, guard, stop := guarded(ctx, m.requestTimeout)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tarball, nil)
	if err != nil {
		return fmt.Errorf("building tarball request: %v", err)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return registryError(ctx, err, m.requestTimeout)
	}
	defer resp.Body.Close()
	guard.r = resp.Body
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("tarball download answered %s%s", resp.Status, registryMessage(guard))
	}
	if resp.ContentLength > max {
		return errors.New("tarball is too large")
	}
	h := sha512.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(guard, max+1))
	if err != nil {
		return fmt.Errorf("downloading tarball: %v", registryError(ctx, err, m.requestTimeout))
	}
	if n > max {
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

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
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
// when the tree's size or entry caps (b) are exceeded. Links that stay
// inside are skipped, as npm does.
func (m *Manager) unpack(r io.Reader, root string, b *budget) error {
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
	tr := tar.NewReader(io.LimitReader(gz, 2*b.maxSize+b.maxEntries*2048))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading tarball: %v", err)
		}
		if err := b.entry(); err != nil {
			return err
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
			if err := b.file(hdr.Size); err != nil {
				return err
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

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/sensitive"
)

// within reports whether path is dir or under it (both clean, absolute).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// CheckRoot refuses a directory no sandbox can give a command: the root
// of the file system, a home directory (its dotfiles hold the user's
// credentials), or one holding a hidden path (the server's data directory
// or configuration).
func CheckRoot(dir string, hidden []string) error {
	d := realOrClean(dir)
	if d == "/" {
		return fmt.Errorf("%w: a project at / would give commands the whole file system", ErrRefusedRoot)
	}
	homes := []string{"/root", "/home"}
	if h, err := os.UserHomeDir(); err == nil {
		homes = append(homes, realOrClean(h))
	}
	if filepath.Dir(d) == "/home" {
		homes = append(homes, d)
	}
	for _, h := range homes {
		if d == h {
			return fmt.Errorf("%w: %s is a home directory, whose dotfiles hold the user's credentials; use a project directory inside it", ErrRefusedRoot, d)
		}
	}
	for _, h := range hidden {
		if within(d, h) {
			return fmt.Errorf("%w: %s holds the server's own files (%s)", ErrRefusedRoot, d, h)
		}
	}
	return nil
}

// ErrRefusedRoot is a project directory a sandbox refuses.
var ErrRefusedRoot = errors.New("refused as a project directory")

// Scanned are the paths of a project that a sandbox protects.
type Scanned struct {
	Protect, MaskFiles, MaskDirs []string
	// Partial is set when the walk stopped at its bound.
	Partial bool
}

// skipDirs are not walked for protected and sensitive paths: dependency
// trees and build outputs.
var skipDirs = map[string]bool{"node_modules": true, ".venv": true, "venv": true, "__pycache__": true, ".cache": true,
	".zig-cache": true, "target": true}

// maxScan bounds the entries a scan visits.
const maxScan = 100000

// Scan finds, under a writable root, what stays read-only (every
// repository's .git/hooks and .git/config, opencode.json, opencode.jsonc
// and .opencode/) and what is masked (sensitive files and directories).
// A missing .git/hooks of a repository is created, so that it is
// protected too. Links are neither followed nor covered.
func Scan(root string) Scanned {
	var out Scanned
	n := 0
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > maxScan {
			out.Partial = true
			return filepath.SkipAll
		}
		name := d.Name()
		if d.Type()&os.ModeSymlink != 0 {
			return nil
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			switch {
			case name == ".git":
				hooks := filepath.Join(p, "hooks")
				if _, err := os.Lstat(hooks); errors.Is(err, os.ErrNotExist) {
					os.Mkdir(hooks, 0o755)
				}
				for _, q := range []string{hooks, filepath.Join(p, "config")} {
					if fi, err := os.Lstat(q); err == nil && fi.Mode()&os.ModeSymlink == 0 {
						out.Protect = append(out.Protect, q)
					}
				}
				return filepath.SkipDir
			case name == ".opencode":
				out.Protect = append(out.Protect, p)
				return filepath.SkipDir
			case sensitive.Dir(name):
				out.MaskDirs = append(out.MaskDirs, p)
				return filepath.SkipDir
			case skipDirs[name]:
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case name == "opencode.json" || name == "opencode.jsonc":
			out.Protect = append(out.Protect, p)
		case sensitive.Name(name) && d.Type().IsRegular():
			out.MaskFiles = append(out.MaskFiles, p)
		}
		return nil
	})
	sort.Strings(out.Protect)
	return out
}

package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideRoots is a path that leaves the instance's allowed roots.
var ErrOutsideRoots = errors.New("outside the allowed roots")

// within reports whether path is dir or under it (both clean, absolute).
func within(dir, path string) bool {
	if dir == path {
		return true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(path, dir)
}

// resolve makes a path the model gave absolute (relative ones are under
// the project directory), resolves its symlinks (for a path that does not
// exist yet: those of its deepest existing ancestor) and checks it stays
// in the roots. It never follows a link out: the resolved path is the one
// checked and the one used.
func (env *Env) resolve(p string) (string, error) {
	if p == "" {
		return env.Dir, nil
	}
	if strings.HasPrefix(p, "~/") || p == "~" {
		return "", fmt.Errorf("path %s: ~ is not expanded; give a path in the project", p)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(env.Dir, p)
	}
	p = filepath.Clean(p)
	real, err := realPath(p)
	if err != nil {
		return "", err
	}
	roots := env.Roots
	if len(roots) == 0 {
		roots = []string{env.project()}
	}
	for _, r := range roots {
		if within(r, real) {
			return real, nil
		}
	}
	return "", fmt.Errorf("path %s is %w of this instance", p, ErrOutsideRoots)
}

// realPath resolves the symlinks of p, or of its deepest existing
// ancestor followed by the rest of p.
func realPath(p string) (string, error) {
	rest := ""
	cur := p
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("path %s: %v", p, err)
		}
		// A dangling link is not followed anywhere: refuse it.
		if fi, lerr := os.Lstat(cur); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("path %s is a link to nowhere", cur)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// external reports whether a resolved path is outside the project
// directory (inside the roots, but needing external_directory).
func (env *Env) external(real string) bool { return !within(env.project(), real) }

func (env *Env) project() string {
	if env.Project != "" {
		return env.Project
	}
	return env.Dir
}

// rel is a resolved path relative to the project directory (absolute
// when outside it), slash-separated, for permission patterns.
func (env *Env) rel(real string) string {
	if r, err := filepath.Rel(env.project(), real); err == nil && !strings.HasPrefix(r, "..") {
		return filepath.ToSlash(r)
	}
	return filepath.ToSlash(real)
}

// permit asks for a permission (allowed when the Env has no Permit).
func (env *Env) permit(ctx context.Context, a Ask) error {
	if env.Permit == nil {
		return nil
	}
	if a.Metadata == nil {
		a.Metadata = map[string]any{}
	}
	return env.Permit(ctx, a)
}

// path resolves a path argument and, when it is outside the project, asks
// for external_directory on its directory.
func (env *Env) path(ctx context.Context, p string, isDir bool) (string, error) {
	real, err := env.resolve(p)
	if err != nil {
		return "", err
	}
	if env.external(real) {
		dir := real
		if !isDir {
			dir = filepath.Dir(real)
		}
		pat := filepath.ToSlash(dir) + "/*"
		if err := env.permit(ctx, Ask{Permission: "external_directory", Patterns: []string{pat}, Always: []string{pat},
			Metadata: map[string]any{"filepath": real, "parentDir": dir}}); err != nil {
			return "", err
		}
	}
	return real, nil
}

package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/sensitive"
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

// base is the directory a resolved path is used under: the deepest of the
// project directory and the roots that holds it. Operating relative to it
// through an os.Root keeps a link swapped in after resolve from leading
// out of the project (or the roots).
func (env *Env) base(real string) (string, error) {
	best := ""
	cands := append([]string{env.project()}, env.Roots...)
	if len(env.Roots) == 0 {
		cands = append(cands, env.Dir)
	}
	for _, c := range cands {
		if c != "" && within(c, real) && len(c) > len(best) {
			best = c
		}
	}
	if best == "" {
		return "", fmt.Errorf("path %s is %w of this instance", real, ErrOutsideRoots)
	}
	return best, nil
}

// openRoot opens the directory a resolved path is used under as an
// os.Root and returns the path relative to it ("." for the directory
// itself). Every open, stat, write and walk of a tool goes
// through it: the root refuses a name that leaves it by ".." or a link,
// whatever changed on disk since the path was resolved.
func (env *Env) openRoot(real string) (*os.Root, string, error) {
	dir, err := env.base(real)
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	rel, err := filepath.Rel(dir, real)
	if err != nil {
		root.Close()
		return nil, "", err
	}
	return root, rel, nil
}

// inRoot runs fn with the os.Root a resolved path is used under and the
// path relative to it.
func (env *Env) inRoot(real string, fn func(root *os.Root, rel string) error) error {
	root, rel, err := env.openRoot(real)
	if err != nil {
		return err
	}
	defer root.Close()
	return fn(root, rel)
}

// secret reports whether a resolved path is a file that holds secrets (or
// lies in a directory of them): see package sensitive.
func (env *Env) secret(real string) bool { return sensitive.Path(env.rel(real)) }

// askFile asks perm ("read" or "edit") for a resolved path. An ordinary
// path's "always" reply allows every path; a sensitive one's allows that
// path only, and its request also names the path in lower case, since the
// default rules that ask for sensitive paths are written in lower case
// while names are sensitive whatever their case.
func (env *Env) askFile(ctx context.Context, perm, real string, metadata map[string]any) error {
	rel := env.rel(real)
	a := Ask{Permission: perm, Patterns: []string{rel}, Always: []string{"*"}, Metadata: metadata}
	if sensitive.Path(rel) {
		a.Always = []string{rel}
		if low := strings.ToLower(rel); low != rel {
			a.Patterns = append(a.Patterns, low)
		}
	}
	return env.permit(ctx, a)
}

// leftOut is the note a listing or search ends with when it left
// sensitive paths out.
func leftOut(n int, what string) string {
	s := "s"
	if n == 1 {
		s = ""
	}
	return fmt.Sprintf("(%d sensitive path%s %s: .env files, keys and credentials; read one by its path to ask for it)", n, s, what)
}

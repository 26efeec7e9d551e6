package tools

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// errStop ends a walk early without an error.
var errStop = errors.New("stop")

// walk visits the files and directories under dir of fsys (not dir
// itself) in lexical order, with slash-separated paths relative to dir,
// skipping the always-ignored directories and what the .gitignore files
// of dir and the directories below it exclude. Links are not followed.
// fn returns fs.SkipDir to skip a directory, errStop to end the walk.
// The tools walk an os.Root's file system, which refuses to leave the
// root however the tree changes during the walk.
func walk(ctx context.Context, fsys fs.FS, dir string, fn func(rel string, d fs.DirEntry) error) error {
	ig := &gitignore{}
	ig.load(fsys, dir, "")
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // unreadable entries are skipped
		}
		if p == dir {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := p
		if dir != "." {
			rel = strings.TrimPrefix(p, dir+"/")
		}
		if d.IsDir() && ignoredDirs[d.Name()] {
			return fs.SkipDir
		}
		if ig.ignored(rel, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			ig.load(fsys, p, rel)
		}
		return fn(rel, d)
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// walkIn walks the resolved directory real through the os.Root it is
// used under.
func (env *Env) walkIn(ctx context.Context, real string, fn func(rel string, d fs.DirEntry) error) error {
	return env.inRoot(real, func(root *os.Root, dir string) error {
		return walk(ctx, root.FS(), filepath.ToSlash(dir), fn)
	})
}

// hidden reports whether the file rel (relative to the walked directory
// real) is sensitive: listings and searches leave it out.
func (env *Env) hidden(real, rel string) bool {
	return env.secret(filepath.Join(real, filepath.FromSlash(rel)))
}

// gitignore is the patterns of the .gitignore files met so far in a walk.
type gitignore struct{ rules []ignoreRule }

type ignoreRule struct {
	base    string // the directory of its .gitignore, relative to the walk's root ("" for the root)
	pattern string
	negate  bool
	dirOnly bool
	// anchored patterns (with a slash other than a trailing one) match
	// from base; others match a name at any depth below base.
	anchored bool
}

// load reads dir/.gitignore of fsys, whose patterns apply below rel.
func (g *gitignore) load(fsys fs.FS, dir, rel string) {
	f, err := fsys.Open(path.Join(dir, ".gitignore"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{base: rel}
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, line[1:]
		}
		if strings.HasPrefix(line, `\`) {
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimRight(line, "/")
		}
		if strings.Contains(line, "/") {
			r.anchored, line = true, strings.TrimPrefix(line, "/")
		}
		if line == "" {
			continue
		}
		r.pattern = line
		g.rules = append(g.rules, r)
	}
}

// ignored reports whether a path (relative to the walk's root) is
// excluded: the last matching pattern decides, negations re-include.
func (g *gitignore) ignored(rel string, isDir bool) bool {
	out := false
	for _, r := range g.rules {
		if r.dirOnly && !isDir {
			continue
		}
		sub := rel
		if r.base != "" {
			if !strings.HasPrefix(rel, r.base+"/") {
				continue
			}
			sub = rel[len(r.base)+1:]
		}
		var m bool
		if r.anchored {
			m = globMatch(r.pattern, sub)
		} else {
			m = globMatch(r.pattern, path.Base(sub))
		}
		if m {
			out = !r.negate
		}
	}
	return out
}

// globMatch matches a slash-separated path against a glob: "*" and "?"
// within a segment, "[...]" classes, "**" for any number of segments and
// "{a,b}" alternatives.
func globMatch(pattern, name string) bool {
	for _, p := range braces(pattern) {
		if matchSegments(strings.Split(p, "/"), strings.Split(name, "/")) {
			return true
		}
	}
	return false
}

func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegments(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], name[0]); err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// braces expands the first {a,b,…} of a pattern, recursively (at most 64
// alternatives).
func braces(p string) []string {
	i := strings.IndexByte(p, '{')
	if i < 0 {
		return []string{p}
	}
	j := strings.IndexByte(p[i:], '}')
	if j < 0 {
		return []string{p}
	}
	j += i
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		for _, rest := range braces(p[j+1:]) {
			out = append(out, p[:i]+alt+rest)
			if len(out) >= 64 {
				return out
			}
		}
	}
	return out
}

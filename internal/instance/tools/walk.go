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

// walk visits the files and directories under root (not root itself) in
// lexical order, with slash-separated paths relative to root, skipping
// the always-ignored directories and what the .gitignore files of root
// and the directories below it exclude. Links are not followed. fn
// returns fs.SkipDir to skip a directory, errStop to end the walk.
func walk(ctx context.Context, root string, fn func(rel string, d fs.DirEntry) error) error {
	ig := &gitignore{}
	ig.load(root, "")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // unreadable entries are skipped
		}
		if p == root {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
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
			ig.load(p, rel)
		}
		return fn(rel, d)
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
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

// load reads dir/.gitignore, whose patterns apply below rel.
func (g *gitignore) load(dir, rel string) {
	f, err := os.Open(filepath.Join(dir, ".gitignore"))
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

package tools

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Entry is a file or directory of a location, as the file routes list
// them: its path relative to the location, slash-separated.
type Entry struct {
	Path string `json:"path"`
	Type string `json:"type"` // "file" or "directory"
}

// inside resolves rel under root (symlinks included) and refuses what
// leaves root.
func inside(root, rel string) (string, error) {
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "~") {
		return "", fmt.Errorf("path %s: give a path relative to the location", rel)
	}
	real, err := realPath(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return "", err
	}
	if !within(root, real) {
		return "", fmt.Errorf("path %s is %w of this location", rel, ErrOutsideRoots)
	}
	return real, nil
}

// ListDir lists the entries of the directory rel of the location root
// (root itself when rel is empty), directories first, then by name;
// ignored directories (.git, node_modules) are left out.
func ListDir(root, rel string) ([]Entry, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	dir, err := inside(realRoot, rel)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("path %s: not a readable directory", rel)
	}
	out := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() && ignoredDirs[e.Name()] {
			continue
		}
		typ := "file"
		if e.IsDir() {
			typ = "directory"
		}
		out = append(out, Entry{Path: filepath.ToSlash(filepath.Join(rel, e.Name())), Type: typ})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type == "directory"
		}
		return out[i].Path < out[j].Path
	})
	return out, nil
}

// Find finds the location's files (or directories, with typ) whose path
// holds the query's characters in order, case-insensitive: those whose
// name holds the query first, then those whose path does, then the
// rest, each by path length; .gitignore'd paths are left out.
func Find(ctx context.Context, root, query, typ string, limit int) ([]Entry, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	q := strings.ToLower(query)
	type hit struct {
		Entry
		rank int
	}
	var hits []hit
	const maxVisited = 200000
	visited := 0
	r, err := os.OpenRoot(realRoot)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	err = walk(ctx, r.FS(), ".", func(rel string, d fs.DirEntry) error {
		if visited++; visited > maxVisited {
			return errStop
		}
		kind := "file"
		if d.IsDir() {
			kind = "directory"
		}
		if typ != "" && kind != typ {
			return nil
		}
		lower := strings.ToLower(rel)
		rank := -1
		switch {
		case strings.Contains(strings.ToLower(d.Name()), q):
			rank = 0
		case strings.Contains(lower, q):
			rank = 1
		case subsequence(q, lower):
			rank = 2
		}
		if rank >= 0 {
			hits = append(hits, hit{Entry{Path: rel, Type: kind}, rank})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].rank != hits[j].rank {
			return hits[i].rank < hits[j].rank
		}
		return len(hits[i].Path) < len(hits[j].Path)
	})
	out := make([]Entry, 0, min(limit, len(hits)))
	for _, h := range hits {
		if len(out) == limit {
			break
		}
		out = append(out, h.Entry)
	}
	return out, nil
}

func subsequence(q, s string) bool {
	i := 0
	for j := 0; j < len(s) && i < len(q); j++ {
		if s[j] == q[i] {
			i++
		}
	}
	return i == len(q)
}

// OpenFile opens the regular file rel of the location root for reading,
// through an os.Root of the location: a link swapped in after the path
// was checked cannot lead out of it.
func OpenFile(root, rel string) (*os.File, fs.FileInfo, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, nil, err
	}
	p, err := inside(realRoot, rel)
	if err != nil {
		return nil, nil, err
	}
	name, err := filepath.Rel(realRoot, p)
	if err != nil {
		return nil, nil, fmt.Errorf("path %s: not a readable file", rel)
	}
	r, err := os.OpenRoot(realRoot)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("path %s: not a readable file", rel)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("path %s: not a regular file", rel)
	}
	return f, fi, nil
}

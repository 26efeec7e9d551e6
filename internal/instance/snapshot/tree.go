package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/sensitive"
)

// Entry is a file as a snapshot records it: its git mode ("100644",
// "100755" or "120000" for a link) and blob id. The zero Entry is a file
// that does not exist.
type Entry struct {
	Mode string `json:"mode,omitempty"`
	Blob string `json:"blob,omitempty"`
}

// Absent reports whether the entry is a file that does not exist.
func (e Entry) Absent() bool { return e.Blob == "" }

// batch splits a path list for git command lines.
func batch(paths []string, n int, fn func([]string) error) error {
	for len(paths) > 0 {
		k := min(n, len(paths))
		if err := fn(paths[:k]); err != nil {
			return err
		}
		paths = paths[k:]
	}
	return nil
}

// Lookup reads the entries of paths in a snapshot tree; a path missing
// from the map is absent from the tree.
func (m *Manager) Lookup(ctx context.Context, root, tree string, paths []string) (map[string]Entry, error) {
	p, err := m.project(root)
	if err != nil {
		return nil, err
	}
	out := map[string]Entry{}
	err = batch(paths, 500, func(list []string) error {
		b, err := p.git(ctx, nil, append([]string{"ls-tree", "-r", "-z", "--full-tree", tree, "--"}, list...)...)
		if err != nil {
			return err
		}
		for _, rec := range splitZ(b) {
			meta, name, ok := strings.Cut(rec, "\t")
			f := strings.Fields(meta)
			if !ok || len(f) != 3 || f[1] != "blob" {
				continue
			}
			out[name] = Entry{Mode: f[0], Blob: f[2]}
		}
		return nil
	})
	return out, err
}

// Changed lists the files that differ between two snapshot trees.
func (m *Manager) Changed(ctx context.Context, root, from, to string) ([]string, error) {
	if from == to {
		return nil, nil
	}
	p, err := m.project(root)
	if err != nil {
		return nil, err
	}
	b, err := p.git(ctx, nil, "diff-tree", "-r", "-z", "--name-only", "--no-renames", from, to)
	if err != nil {
		return nil, err
	}
	return splitZ(b), nil
}

// Stat is a file's line counts between two trees; Binary when git sees
// no lines in it.
type Stat struct {
	Additions, Deletions int
	Binary               bool
}

// NumStat counts the added and deleted lines of paths between two trees.
func (m *Manager) NumStat(ctx context.Context, root, from, to string, paths []string) (map[string]Stat, error) {
	p, err := m.project(root)
	if err != nil {
		return nil, err
	}
	out := map[string]Stat{}
	err = batch(paths, 500, func(list []string) error {
		b, err := p.git(ctx, nil, append([]string{"diff-tree", "-r", "-z", "--numstat", "--no-renames", from, to, "--"}, list...)...)
		if err != nil {
			return err
		}
		for _, rec := range splitZ(b) {
			f := strings.SplitN(rec, "\t", 3)
			if len(f) != 3 {
				continue
			}
			if f[0] == "-" {
				out[f[2]] = Stat{Binary: true}
				continue
			}
			a, _ := strconv.Atoi(f[0])
			d, _ := strconv.Atoi(f[1])
			out[f[2]] = Stat{Additions: a, Deletions: d}
		}
		return nil
	})
	return out, err
}

// Patch is the unified diff of paths between two trees.
func (m *Manager) Patch(ctx context.Context, root, from, to string, paths []string) (string, error) {
	p, err := m.project(root)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	err = batch(paths, 500, func(list []string) error {
		b, err := p.git(ctx, nil, append([]string{"diff-tree", "-r", "-p", "--no-ext-diff", "--no-color", "--no-renames",
			"--no-textconv", from, to, "--"}, list...)...)
		buf.Write(b)
		return err
	})
	return buf.String(), err
}

// Blobs reads blobs by id (those that are gone are missing from the map).
func (m *Manager) Blobs(ctx context.Context, root string, ids []string) (map[string][]byte, error) {
	p, err := m.project(root)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	if len(ids) == 0 {
		return out, nil
	}
	var in bytes.Buffer
	for _, id := range ids {
		in.WriteString(id + "\n")
	}
	b, err := p.git(ctx, in.Bytes(), "cat-file", "--batch")
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(bytes.NewReader(b))
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			continue // "<id> missing"
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			break
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			break
		}
		r.ReadByte()
		if f[1] == "blob" {
			out[f[0]] = data
		}
	}
	return out, nil
}

// Disk is a file of the project as it is now: its entry (what a snapshot
// would record), its size, and, when a snapshot could not record it, why
// (SkipTooLarge, SkipSensitive, SkipSpecial).
type Disk struct {
	Entry
	Size   int64
	Reason string
}

// Disk reads paths of the project now, through the root (no link leads
// out of it).
func (m *Manager) Disk(root string, paths []string) (map[string]Disk, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := map[string]Disk{}
	for _, p := range paths {
		var d Disk
		fi, err := r.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) || isNotDir(err):
		case err != nil:
			return nil, err
		case sensitive.Path(p):
			d.Reason, d.Size = SkipSensitive, fi.Size()
			d.Mode = "?"
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := r.Readlink(p)
			if err != nil {
				return nil, err
			}
			d.Entry = Entry{Mode: "120000", Blob: blobID([]byte(target))}
		case !fi.Mode().IsRegular():
			d.Reason, d.Mode = SkipSpecial, "?"
		case fi.Size() > m.cfg.MaxFileSize:
			d.Reason, d.Size, d.Mode = SkipTooLarge, fi.Size(), "?"
		default:
			b, err := r.ReadFile(p)
			if err != nil {
				return nil, err
			}
			mode := "100644"
			if fi.Mode().Perm()&0o100 != 0 {
				mode = "100755"
			}
			d.Entry, d.Size = Entry{Mode: mode, Blob: blobID(b)}, int64(len(b))
		}
		if d.Reason != "" {
			d.Blob = "?" // present, but not what any snapshot holds
		}
		out[p] = d
	}
	return out, nil
}

func isNotDir(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not a directory")
}

// blobID is git's id of a blob of these bytes.
func blobID(b []byte) string {
	h := sha1sumParts([]byte("blob "+strconv.Itoa(len(b))+"\x00"), b)
	return fmt.Sprintf("%x", h)
}

// Change sets a file of the project to an entry of a snapshot tree, or
// removes it when the entry is absent.
type Change struct {
	File  string
	Tree  string
	Entry Entry
}

// Apply makes the changes to the project's files: each file present in
// its tree is written from it (its mode and content; a link as a link),
// each absent one is removed. The caller has checked that the files are
// as it expects.
func (m *Manager) Apply(ctx context.Context, root string, changes []Change) error {
	p, err := m.project(root)
	if err != nil {
		return err
	}
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := p.init(ctx); err != nil {
		return err
	}
	byTree := map[string][]string{}
	var remove []string
	for _, c := range changes {
		if c.Entry.Absent() {
			remove = append(remove, c.File)
			continue
		}
		byTree[c.Tree] = append(byTree[c.Tree], c.File)
	}
	trees := make([]string, 0, len(byTree))
	for t := range byTree {
		trees = append(trees, t)
	}
	sort.Strings(trees)
	for _, t := range trees {
		if _, err := p.git(ctx, joinZ(byTree[t]), "checkout", t, "--pathspec-from-file=-", "--pathspec-file-nul"); err != nil {
			return err
		}
	}
	if len(remove) > 0 {
		r, err := os.OpenRoot(p.root)
		if err != nil {
			return err
		}
		defer r.Close()
		for _, f := range remove {
			if err := r.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	p.dirty = true
	p.index = indexStat(p.dir)
	return nil
}

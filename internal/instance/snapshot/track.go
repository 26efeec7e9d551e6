package snapshot

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/sensitive"
)

// Reasons a file is left out of a snapshot.
const (
	SkipTooLarge  = "too-large"
	SkipSensitive = "sensitive"
	SkipNested    = "nested-repository"
	SkipSpecial   = "not-a-file"
	SkipFileCap   = "file-cap"
	SkipQuota     = "quota"
)

// Skip is a file a snapshot left out: its path (relative to the project
// root, slash-separated), why, and its size and modification time then
// (to tell whether it changed between two snapshots).
type Skip struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
	Size   int64  `json:"size,omitempty"`
	MTime  int64  `json:"mtime,omitempty"`
}

// Tree is a snapshot: the hash of the git tree of the project's files,
// what was left out, and why it is incomplete ("" when every file but
// the ignored, sensitive and too large ones is in it).
type Tree struct {
	Hash       string
	Skipped    []Skip
	Incomplete string
}

func sha1sum(b []byte) [20]byte { return sha1.Sum(b) }

func sha1sumParts(parts ...[]byte) []byte {
	h := sha1.New()
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// Track records the project's files now and returns the snapshot. Only
// what changed since the last snapshot is read: git's index in the
// snapshot directory keeps every file's stat data.
func (m *Manager) Track(ctx context.Context, root string) (Tree, error) {
	p, err := m.project(root)
	if err != nil {
		return Tree{}, err
	}
	unlock, err := p.lock()
	if err != nil {
		return Tree{}, fmt.Errorf("snapshot: %w", err)
	}
	t, err := p.track(ctx)
	if err != nil {
		// The index may be ahead of HEAD: the next snapshot writes its tree,
		// and reads every file (the changed paths taken are lost).
		p.tree, p.dirty = "", true
		if p.watch != nil {
			p.watch.invalidate()
		}
	}
	p.tracks++
	unlock()
	if err == nil {
		m.maybeGC(p)
	}
	return t, err
}

// init makes the snapshot directory (first use) and writes its own
// configuration, attributes and the project's exclude rules (when these
// change, the next snapshot reads every file).
func (p *project) init(ctx context.Context) error {
	changed, err := p.initDir(ctx)
	if changed {
		p.excludeChanged = true
	}
	return err
}

func (p *project) initDir(ctx context.Context) (bool, error) {
	if !p.ready {
		fresh := false
		if _, err := os.Stat(filepath.Join(p.dir, "HEAD")); err != nil {
			if _, err := p.git(ctx, nil, "init", "--quiet"); err != nil {
				return false, err
			}
			fresh = true
		}
		if _, err := writeIfChanged(filepath.Join(p.dir, "config"), config); err != nil {
			return false, err
		}
		if err := os.MkdirAll(filepath.Join(p.dir, "info"), 0o700); err != nil {
			return false, err
		}
		if _, err := writeIfChanged(filepath.Join(p.dir, "info", "attributes"), attributes); err != nil {
			return false, err
		}
		if _, err := writeIfChanged(filepath.Join(p.dir, "agentgate-root"), p.root+"\n"); err != nil {
			return false, err
		}
		if fresh {
			p.seed(ctx)
		}
		p.ready = true
	}
	// The repository's info/exclude applies to the project's files as it
	// does in the user's repository.
	exclude := ""
	if _, common := userGitDirs(p.root); common != "" {
		exclude = readSmall(filepath.Join(common, "info", "exclude"), 1<<20)
	}
	// Snapshot directories inside the project (a data directory under
	// it) are never part of its snapshots.
	if rel, err := filepath.Rel(p.root, p.m.cfg.Dir); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
		exclude += "\n/" + filepath.ToSlash(rel) + "/\n"
	}
	return writeIfChanged(filepath.Join(p.dir, "info", "exclude"), exclude)
}

// seed starts a new snapshot directory of a git project from the commit
// checked out, so that the first snapshot reads only the files that
// differ from it: the commit's tree is read through
// objects/info/alternates, its objects are copied into a pack of the
// snapshot directory (git reuses the repository's compressed objects),
// and the alternates are dropped before anything is written, so that
// git never writes to (or refreshes) an object of the user's
// repository. Any failure leaves the directory unseeded: the first
// snapshot then reads every file.
func (p *project) seed(ctx context.Context) {
	gitdir, common := userGitDirs(p.root)
	if gitdir == "" {
		return
	}
	objects := filepath.Join(common, "objects")
	commit := resolveHead(gitdir, common)
	if fi, err := os.Stat(objects); err != nil || !fi.IsDir() || commit == "" {
		return
	}
	alt := filepath.Join(p.dir, "objects", "info", "alternates")
	done := false
	defer func() {
		os.Remove(alt)
		if !done {
			os.Remove(filepath.Join(p.dir, "index"))
			for _, f := range []string{"pack", "idx"} {
				if list, err := filepath.Glob(filepath.Join(p.dir, "objects", "pack", "*."+f)); err == nil {
					for _, g := range list {
						os.Remove(g)
					}
				}
			}
		}
	}()
	if err := os.MkdirAll(filepath.Dir(alt), 0o700); err != nil {
		return
	}
	if err := writeFile(alt, objects+"\n"); err != nil {
		return
	}
	fail := func(what string, err error) {
		p.m.cfg.Logger.Debug("snapshot: cannot start from the project's commit", zap.String("step", what), zap.Error(err))
	}
	if _, err := p.git(ctx, nil, "read-tree", commit); err != nil {
		fail("read-tree", err)
		return
	}
	out, err := p.git(ctx, nil, "ls-tree", "-r", "-t", "-z", "--full-tree", commit)
	if err != nil {
		fail("ls-tree", err)
		return
	}
	root, err := p.git(ctx, nil, "rev-parse", commit+"^{tree}")
	if err != nil {
		fail("rev-parse", err)
		return
	}
	ids := strings.TrimSpace(string(root)) + "\n"
	var drop []string
	for _, rec := range splitZ(out) {
		meta, name, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 || (f[1] != "blob" && f[1] != "tree") {
			continue
		}
		if sensitive.Path(name) {
			// Sensitive files committed to the repository stay out.
			if f[1] == "blob" {
				drop = append(drop, name)
			}
			continue
		}
		ids += f[2] + "\n"
	}
	// No delta search: a packed repository's objects are copied as they
	// are, a loose one's only compressed.
	if _, err := p.git(ctx, []byte(ids), "pack-objects", "-q", "--window=0", "--depth=0", filepath.Join(p.dir, "objects", "pack", "pack")); err != nil {
		fail("pack-objects", err)
		return
	}
	if err := os.Remove(alt); err != nil {
		return
	}
	if len(drop) > 0 {
		if _, err := p.git(ctx, joinZ(drop), "update-index", "--force-remove", "-z", "--stdin"); err != nil {
			fail("update-index", err)
			return
		}
	}
	// Stat data for the files that match the commit (an error only says
	// that some files differ: the first snapshot reads them).
	p.git(ctx, nil, "update-index", "-q", "--refresh", "--ignore-missing")
	done = true
	p.tree, p.dirty = "", true
}

// track takes a snapshot (the project is locked).
func (p *project) track(ctx context.Context) (Tree, error) {
	if err := p.init(ctx); err != nil {
		return Tree{}, err
	}
	// Only the paths changed since the last snapshot are asked about when
	// a watcher follows the project; the first snapshot with it, and one
	// after the exclude rules changed, ask about every file.
	full := true
	var paths []string
	if p.watch != nil {
		paths, full = p.watch.take(func(dirs []string) (map[string]bool, error) { return p.ignoredDirs(ctx, dirs) })
		if full {
			// Directories may have moved, or what git ignores changed:
			// the watcher starts again, before this snapshot reads all.
			p.watch.close()
			p.watch = nil
			p.m.releaseWatchSlot()
		}
	}
	if p.watch == nil && p.noWatch == "" {
		p.startWatch(ctx)
	}
	full = full || p.excludeChanged
	p.excludeChanged = false
	// Another manager of the directory (a reloaded config, another
	// process) may have changed the index since this one's last snapshot:
	// its cached tree and the changed paths it knows are then not enough.
	if st := indexStat(p.dir); st != p.index || p.tree == "" {
		p.tree, p.dirty, full = "", true, true
	}
	if full && p.tree != "" && p.headTree != p.tree {
		// HEAD follows the index before a status of every file, so that it
		// compares the work tree with the index only.
		if err := p.commitHead(ctx, p.tree); err != nil {
			return Tree{}, err
		}
	}
	if !full && len(paths) == 0 && p.tree != "" && !p.dirty {
		return Tree{Hash: p.tree}, nil // nothing changed since the last snapshot
	}
	args := []string{"status", "--porcelain=v2", "-z", "--untracked-files=normal", "--no-renames", "--ignore-submodules=all"}
	if !full {
		args = append(append(args, "--"), paths...)
	}
	out, err := p.git(ctx, nil, args...)
	if err != nil {
		return Tree{}, err
	}
	var adds, dels, dirs []string
	tracked := map[string]bool{}
	recs := splitZ(out)
	for i := 0; i < len(recs); i++ {
		r := recs[i]
		if len(r) < 2 {
			continue
		}
		switch r[0] {
		case '1', 'u':
			n := 9
			if r[0] == 'u' {
				n = 11
			}
			f := strings.SplitN(r, " ", n)
			if len(f) < n {
				continue
			}
			xy, path := f[1], f[n-1]
			if xy[0] != '.' {
				p.dirty = true
			}
			switch {
			case r[0] == 'u':
				adds, tracked[path] = append(adds, path), true
			case xy[1] == 'D':
				dels = append(dels, path)
			case xy[1] != '.':
				adds, tracked[path] = append(adds, path), true
			}
		case '2':
			f := strings.SplitN(r, " ", 10)
			if len(f) == 10 {
				adds, tracked[f[9]] = append(adds, f[9]), true
			}
			if i+1 < len(recs) {
				dels = append(dels, recs[i+1])
				i++
			}
		case '?':
			path := r[2:]
			if strings.HasSuffix(path, "/") {
				dirs = append(dirs, path)
			} else {
				adds = append(adds, path)
			}
		}
	}
	var t Tree
	skip := func(path, reason string, fi fs.FileInfo) {
		s := Skip{File: path, Reason: reason}
		if fi != nil {
			s.Size, s.MTime = fi.Size(), fi.ModTime().UnixNano()
		}
		t.Skipped = append(t.Skipped, s)
		if tracked[path] {
			dels = append(dels, path) // no stale content of it stays in the tree
		}
	}
	// Untracked directories are listed whole (git shows them as "dir/"):
	// their files are read here, but not those of a directory of secrets
	// or of a nested repository.
	var list []string
	for _, d := range dirs {
		if sensitive.Path(d) {
			skip(strings.TrimSuffix(d, "/"), SkipSensitive, nil)
			continue
		}
		list = append(list, d)
	}
	if len(list) > 0 {
		args := []string{"ls-files", "-z", "--others", "--exclude-standard"}
		if len(list) <= 200 {
			args = append(append(args, "--"), list...)
		}
		out, err := p.git(ctx, nil, args...)
		if err != nil {
			return Tree{}, err
		}
		for _, f := range splitZ(out) {
			if strings.HasSuffix(f, "/") {
				skip(strings.TrimSuffix(f, "/"), SkipNested, nil)
				continue
			}
			adds = append(adds, f)
		}
	}
	cfg := p.m.cfg
	entries := p.indexEntries()
	if p.usage < 0 {
		p.usage = dirSize(filepath.Join(p.dir, "objects"))
	}
	var keep, typeDirs []string
	classify := func(list []string) {
		sort.Strings(list)
		for _, path := range list {
			fi, err := os.Lstat(filepath.Join(p.root, filepath.FromSlash(path)))
			switch {
			case sensitive.Path(path):
				if err != nil {
					fi = nil
				}
				skip(path, SkipSensitive, fi)
				continue
			case err != nil:
				dels = append(dels, path) // gone since git looked
				continue
			case fi.IsDir():
				// A file that became a directory: git lists the files in it
				// once the file's entry is gone.
				dels, typeDirs = append(dels, path), append(typeDirs, path+"/")
				continue
			case fi.Mode()&fs.ModeSymlink == 0 && !fi.Mode().IsRegular():
				skip(path, SkipSpecial, fi)
				continue
			case fi.Size() > cfg.MaxFileSize:
				skip(path, SkipTooLarge, fi)
				continue
			case !tracked[path] && entries >= cfg.MaxFiles:
				skip(path, SkipFileCap, fi)
				t.Incomplete = fmt.Sprintf("the project's snapshot holds %d files, its limit: new files are not recorded", cfg.MaxFiles)
				continue
			case p.usage+fi.Size() > cfg.Quota:
				skip(path, SkipQuota, fi)
				t.Incomplete = fmt.Sprintf("the project's snapshots use their quota of %d bytes: changed files are not recorded", cfg.Quota)
				continue
			}
			if !tracked[path] {
				entries++
			}
			p.usage += fi.Size()
			keep = append(keep, path)
		}
	}
	for _, d := range dels {
		if fi, err := os.Lstat(filepath.Join(p.root, filepath.FromSlash(d))); err == nil && fi.IsDir() {
			typeDirs = append(typeDirs, d+"/")
		}
	}
	classify(adds)
	if len(dels) > 0 {
		p.dirty = true
		if _, err := p.git(ctx, joinZ(dels), "update-index", "--force-remove", "-z", "--stdin"); err != nil {
			return Tree{}, err
		}
	}
	if len(typeDirs) > 0 {
		out, err := p.git(ctx, nil, append([]string{"ls-files", "-z", "--others", "--exclude-standard", "--"}, typeDirs...)...)
		if err != nil {
			return Tree{}, err
		}
		var more []string
		for _, f := range splitZ(out) {
			if d, ok := strings.CutSuffix(f, "/"); ok {
				skip(d, SkipNested, nil)
				continue
			}
			more = append(more, f)
		}
		dels = dels[:0]
		classify(more)
		if len(dels) > 0 {
			if _, err := p.git(ctx, joinZ(dels), "update-index", "--force-remove", "-z", "--stdin"); err != nil {
				return Tree{}, err
			}
		}
	}
	if len(keep) > 0 {
		p.dirty = true
		if _, err := p.git(ctx, joinZ(keep), "update-index", "--add", "--replace", "-z", "--stdin"); err != nil {
			return Tree{}, err
		}
	}
	if p.dirty || p.tree == "" {
		out, err := p.git(ctx, nil, "write-tree")
		if err != nil {
			return Tree{}, err
		}
		tree := strings.TrimSpace(string(out))
		if full && tree != p.headTree {
			if err := p.commitHead(ctx, tree); err != nil {
				return Tree{}, err
			}
		}
		p.tree, p.dirty = tree, false
	}
	p.index = indexStat(p.dir)
	t.Hash = p.tree
	return t, nil
}

// commitHead points HEAD at a commit of the tree.
func (p *project) commitHead(ctx context.Context, tree string) error {
	out, err := p.git(ctx, []byte("snapshot\n"), "commit-tree", tree)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(p.dir, "HEAD"), strings.TrimSpace(string(out))+"\n"); err != nil {
		return err
	}
	p.headTree = tree
	return nil
}

// indexStat identifies the snapshot index's current version (its size,
// time and inode; each write replaces the file).
type indexVersion struct {
	size, mtime int64
	ino         uint64
}

func indexStat(dir string) indexVersion {
	fi, err := os.Stat(filepath.Join(dir, "index"))
	if err != nil {
		return indexVersion{}
	}
	v := indexVersion{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.ino = st.Ino
	}
	return v
}

// indexEntries is about the entry count of the snapshot index: the
// count in its header and, as the index is split, in its newest shared
// index's (replaced entries count twice: the file cap errs on the safe
// side).
func (p *project) indexEntries() int {
	n := headerCount(filepath.Join(p.dir, "index"))
	shared, _ := filepath.Glob(filepath.Join(p.dir, "sharedindex.*"))
	newest, at := "", time.Time{}
	for _, f := range shared {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(at) {
			newest, at = f, fi.ModTime()
		}
	}
	if newest != "" {
		n += headerCount(newest)
	}
	return n
}

func headerCount(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var h [12]byte
	if _, err := f.Read(h[:]); err != nil || string(h[:4]) != "DIRC" {
		return 0
	}
	return int(binary.BigEndian.Uint32(h[8:]))
}

// userGitDirs finds the git directory of a project root (a .git
// directory, or a .git file naming one) and its common directory (where
// objects, refs and info/exclude live); "" when the root is not a
// repository's work tree.
func userGitDirs(root string) (gitdir, common string) {
	dot := filepath.Join(root, ".git")
	fi, err := os.Lstat(dot)
	switch {
	case err != nil:
		return "", ""
	case fi.IsDir():
		gitdir = dot
	case fi.Mode().IsRegular():
		line := strings.TrimSpace(readSmall(dot, 4096))
		rest, ok := strings.CutPrefix(line, "gitdir:")
		if !ok {
			return "", ""
		}
		gitdir = strings.TrimSpace(rest)
		if !filepath.IsAbs(gitdir) {
			gitdir = filepath.Join(root, gitdir)
		}
	default:
		return "", ""
	}
	common = gitdir
	if c := strings.TrimSpace(readSmall(filepath.Join(gitdir, "commondir"), 4096)); c != "" {
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitdir, c)
		}
		common = filepath.Clean(c)
	}
	return gitdir, common
}

// resolveHead reads the commit a repository has checked out from its
// files (HEAD, a loose ref or packed-refs): no git runs in the user's
// repository, so nothing of its configuration is read. "" when it cannot
// tell (or the repository uses another object format).
func resolveHead(gitdir, common string) string {
	head := strings.TrimSpace(readSmall(filepath.Join(gitdir, "HEAD"), 4096))
	for depth := 0; depth < 5; depth++ {
		ref, ok := strings.CutPrefix(head, "ref:")
		if !ok {
			break
		}
		ref = strings.TrimSpace(ref)
		if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") {
			return ""
		}
		next := ""
		for _, d := range []string{gitdir, common} {
			if v := strings.TrimSpace(readSmall(filepath.Join(d, filepath.FromSlash(ref)), 4096)); v != "" {
				next = v
				break
			}
		}
		if next == "" {
			for _, line := range strings.Split(readSmall(filepath.Join(common, "packed-refs"), 64<<20), "\n") {
				if id, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok && name == ref {
					next = id
					break
				}
			}
		}
		head = next
	}
	if len(head) != 40 {
		return ""
	}
	if _, err := hex.DecodeString(head); err != nil {
		return ""
	}
	return head
}

func splitZ(b []byte) []string {
	var out []string
	for _, f := range bytes.Split(b, []byte{0}) {
		if len(f) > 0 {
			out = append(out, string(f))
		}
	}
	return out
}

func joinZ(list []string) []byte {
	var b bytes.Buffer
	for _, s := range list {
		b.WriteString(s)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// writeFile replaces a file through a temporary file and a rename.
func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeIfChanged writes a file unless it holds content already; it
// reports whether it wrote.
func writeIfChanged(path, content string) (bool, error) {
	if b, err := os.ReadFile(path); err == nil && string(b) == content {
		return false, nil
	}
	return true, writeFile(path, content)
}

// dirSize sums the sizes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// startWatch starts following the project's directories, but those git
// ignores (the first snapshot with it reads every file). Where it cannot
// (no inotify, too many projects or directories) every snapshot reads
// every file.
func (p *project) startWatch(ctx context.Context) {
	if !watchSupported {
		p.noWatch = "no file watching on this system"
		return
	}
	if !p.m.watchSlot() {
		p.noWatch = "too many projects are watched"
		return
	}
	out, err := p.git(ctx, nil, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	if err != nil {
		p.m.releaseWatchSlot()
		return // tried again at the next snapshot
	}
	skip := map[string]bool{}
	for _, f := range splitZ(out) {
		if d, ok := strings.CutSuffix(f, "/"); ok {
			skip[d] = true
		}
	}
	w, err := newWatcher(p.root, skip, maxWatchedDirs)
	if err != nil {
		p.m.releaseWatchSlot()
		p.noWatch = err.Error()
		p.m.cfg.Logger.Info("snapshot: the project's directories cannot be watched; every snapshot reads every file",
			zap.String("project", p.root), zap.Error(err))
		return
	}
	p.watch = w
}

// ignoredDirs tells which of the directories git ignores.
func (p *project) ignoredDirs(ctx context.Context, dirs []string) (map[string]bool, error) {
	out, err := p.git(ctx, joinZ(dirs), "check-ignore", "-z", "--stdin")
	if err != nil && (len(out) > 0 || !strings.Contains(err.Error(), "exit status 1")) {
		return nil, err
	}
	ign := map[string]bool{}
	for _, d := range splitZ(out) {
		ign[d] = true
	}
	return ign, nil
}

package snapshot

import (
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"syscall"
	"unsafe"
)

// watcher follows a project's directories with inotify, so that a
// snapshot asks git about the paths changed since the last one instead of
// every file of the project. It is read only when a snapshot is taken:
// the kernel queues every event of a change that completed before the
// read, so reading until the queue is empty sees them all. Whenever a
// change may have been missed (the queue overflowed, a directory moved,
// a .gitignore changed, too many paths changed) the next snapshot reads
// every file, as it does without a watcher.
type watcher struct {
	fd   int
	root string
	// skip are the directories not watched: those git ignores.
	skip    map[string]bool
	max     int
	wds     map[int32]string // watch → directory, relative to root ("" the root)
	dirty   map[string]bool
	newDirs map[string]bool // created since the last take, not watched yet
	full    bool
	buf     []byte
	watched int
}

const watchMask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_MOVED_FROM |
	syscall.IN_MOVED_TO | syscall.IN_ATTRIB | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_DONT_FOLLOW | syscall.IN_ONLYDIR |
	syscall.IN_EXCL_UNLINK

// maxDirty is how many changed paths a snapshot asks git about; more
// changes read every file.
const maxDirty = 2000

var errTooManyDirs = errors.New("too many directories to watch")

// watchSupported: this system has inotify.
const watchSupported = true

// newWatcher watches every directory of root but .git directories and
// the skipped ones (at most max); an error when it cannot.
func newWatcher(root string, skip map[string]bool, max int) (*watcher, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w := &watcher{fd: fd, root: root, skip: skip, max: max, wds: map[int32]string{}, dirty: map[string]bool{},
		newDirs: map[string]bool{}, buf: make([]byte, 64<<10)}
	if err := w.addTree(""); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// invalidate makes the next take ask for every file (a snapshot failed
// after taking the changed paths).
func (w *watcher) invalidate() { w.full = true }

func (w *watcher) close() {
	if w.fd >= 0 {
		syscall.Close(w.fd)
		w.fd = -1
	}
}

// addTree watches a directory and the directories under it.
func (w *watcher) addTree(rel string) error {
	return filepath.WalkDir(filepath.Join(w.root, rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == filepath.Join(w.root, rel) {
				return err
			}
			return nil // gone meanwhile: its parent's events say so
		}
		if !d.IsDir() {
			return nil
		}
		r, _ := filepath.Rel(w.root, p)
		r = filepath.ToSlash(r)
		if r == "." {
			r = ""
		}
		if d.Name() == ".git" || (r != "" && w.skip[r]) {
			return filepath.SkipDir
		}
		if w.watched >= w.max {
			return errTooManyDirs
		}
		wd, err := syscall.InotifyAddWatch(w.fd, p, watchMask)
		if err != nil {
			return err
		}
		w.wds[int32(wd)] = r
		w.watched++
		return nil
	})
}

// take reads the events queued now and returns the paths changed since
// the last take (files, or directories whose content is new), or full
// when every file must be read. ignored tells which new directories git
// ignores: they are not watched.
func (w *watcher) take(ignored func([]string) (map[string]bool, error)) (paths []string, full bool) {
	w.read()
	if len(w.newDirs) > 0 && !w.full {
		list := make([]string, 0, len(w.newDirs))
		for d := range w.newDirs {
			list = append(list, d)
		}
		ign, err := ignored(list)
		if err != nil {
			w.full = true
		}
		for _, d := range list {
			switch {
			case ign[d]:
				w.skip[d] = true
				delete(w.dirty, d)
			case w.addTree(d) != nil:
				w.full = true
			default:
				// "d/" too: git lists an untracked directory for its own
				// path only when no file of that name is in the index.
				w.dirty[d+"/"] = true
			}
		}
	}
	w.newDirs = map[string]bool{}
	full = w.full || len(w.dirty) > maxDirty
	if !full {
		for p := range w.dirty {
			paths = append(paths, p)
		}
	}
	w.dirty, w.full = map[string]bool{}, false
	return paths, full
}

// read drains the event queue (a closed watcher asks for every file).
func (w *watcher) read() {
	if w.fd < 0 {
		w.full = true
		return
	}
	for {
		n, err := syscall.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			if err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR) {
				w.full = true
			}
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			name := ""
			if ev.Len > 0 {
				b := w.buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				for i, c := range b {
					if c == 0 {
						b = b[:i]
						break
					}
				}
				name = string(b)
			}
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			w.event(ev.Wd, ev.Mask, name)
		}
	}
}

func (w *watcher) event(wd int32, mask uint32, name string) {
	if mask&syscall.IN_Q_OVERFLOW != 0 {
		w.full = true
		return
	}
	dir, ok := w.wds[wd]
	if !ok {
		return
	}
	if mask&syscall.IN_IGNORED != 0 {
		delete(w.wds, wd)
		w.watched--
		return
	}
	if name == "" {
		if mask&syscall.IN_MOVE_SELF != 0 {
			w.full = true // the paths of the directories under it changed
		}
		return
	}
	if name == ".git" {
		return
	}
	rel := path.Join(dir, name)
	switch {
	case name == ".gitignore":
		w.full = true // what is ignored changed
	case mask&syscall.IN_ISDIR != 0 && mask&syscall.IN_MOVED_FROM != 0:
		w.full = true
	case mask&syscall.IN_ISDIR != 0 && mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0:
		if w.skip[rel] {
			return
		}
		// Watched at the next take, unless git ignores it; its content
		// is read then, whatever was written before the watch.
		w.newDirs[rel] = true
		w.dirty[rel] = true
	default:
		w.dirty[rel] = true
	}
}

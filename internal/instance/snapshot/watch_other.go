//go:build !linux

package snapshot

import "errors"

// watchSupported: without inotify every snapshot reads every file.
const watchSupported = false

type watcher struct{ fd int }

func newWatcher(string, map[string]bool, int) (*watcher, error) {
	return nil, errors.New("no file watching on this system")
}

func (w *watcher) close() {}

func (w *watcher) take(func([]string) (map[string]bool, error)) ([]string, bool) { return nil, true }

func (w *watcher) invalidate() {}

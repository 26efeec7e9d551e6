// Package location resolves the directories an instance works in: each is
// checked against the allowed roots (symlinks resolved), placed in its
// project, and loaded once with its agents.
package location

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
)

// Options configure an instance's locations.
type Options struct {
	// DefaultDirectory is the location used when a request names none
	// (default: the working directory).
	DefaultDirectory string
	// AllowedRoots, when not empty, are the only directories (and their
	// descendants) that may be used as locations, after symlinks resolve.
	AllowedRoots []string
	// Agents are agent definitions from the server config, by id (the same
	// shape as an opencode.json "agent" map entry).
	Agents map[string]json.RawMessage
	// Bus receives location.shutdown and agent.updated on reloads.
	Bus *events.Bus
	// Refuse, when set, refuses a directory (canonical) no sandbox may
	// give the agent: the error says why.
	Refuse func(dir string) error
}

// Locations are the loaded locations of an instance.
type Locations struct {
	opts   Options
	mu     sync.Mutex
	loaded map[string]*Location // canonical directory → loaded location
}

// New returns an instance's locations, none loaded yet.
func New(opts Options) *Locations {
	return &Locations{opts: opts, loaded: map[string]*Location{}}
}

// Location is a loaded project directory context.
type Location struct {
	Directory string // the directory as requested (absolute, clean)
	Canonical string // with symlinks resolved
	Project   Project
	Agents    []agents.Agent
}

// Project is the project a location belongs to.
type Project struct {
	ID        string `json:"id"`
	Directory string `json:"directory"`
	Canonical string `json:"canonical"`
}

// PublicInfo is Location.PublicInfo.
func (l *Location) PublicInfo() map[string]any {
	return map[string]any{"directory": l.Directory, "project": l.Project}
}

// Ref is Location.PublicRef.
func (l *Location) Ref() *events.LocationRef { return &events.LocationRef{Directory: l.Directory} }

// Check validates a requested directory: absolute, no dot-dot segments, an
// existing directory, inside the allowed roots once symlinks are resolved;
// "" is the default location. It returns the clean and the canonical path.
func (s *Locations) Check(dir string) (string, string, error) {
	if dir == "" {
		dir = s.opts.DefaultDirectory
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", "", errs.Unavailable("location", "no default location")
		}
		dir = wd
	}
	if !filepath.IsAbs(dir) {
		return "", "", errs.InvalidRequest("query", "location directory must be an absolute path: "+dir)
	}
	for _, seg := range strings.Split(filepath.ToSlash(dir), "/") {
		if seg == ".." {
			return "", "", errs.InvalidRequest("query", "location directory must not contain '..': "+dir)
		}
	}
	if strings.ContainsRune(dir, 0) {
		return "", "", errs.InvalidRequest("query", "location directory contains a NUL byte")
	}
	clean := filepath.Clean(dir)
	canonical, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return "", "", errs.LocationNotFound(clean, "Location not found: "+clean)
	}
	fi, err := os.Stat(canonical)
	if err != nil || !fi.IsDir() {
		return "", "", errs.LocationNotFound(clean, "Location is not a directory: "+clean)
	}
	if len(s.opts.AllowedRoots) > 0 {
		ok := false
		for _, root := range s.opts.AllowedRoots {
			if within(canonical, root) {
				ok = true
				break
			}
		}
		if !ok {
			return "", "", errs.LocationDenied(clean, "Location is outside the allowed roots: "+clean)
		}
	}
	if s.opts.Refuse != nil {
		if err := s.opts.Refuse(canonical); err != nil {
			return "", "", errs.LocationDenied(clean, "Location refused: "+err.Error())
		}
	}
	return clean, canonical, nil
}

// AllowedRoots are the directories locations must stay in (none: any
// directory).
func (s *Locations) AllowedRoots() []string { return append([]string(nil), s.opts.AllowedRoots...) }

// within reports whether path is root or inside it (both canonical).
func within(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// DetectProject finds the project root above a directory: the nearest
// ancestor holding .git, else the directory itself. The id is stable: a
// hash of the canonical root.
func DetectProject(canonical string) Project {
	root := canonical
	for d := canonical; ; {
		if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
			root = d
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	sum := sha256.Sum256([]byte(root))
	return Project{ID: hex.EncodeToString(sum[:10]), Directory: root, Canonical: root}
}

// Get resolves a directory ("" for the default) and, on first use, loads
// it.
func (s *Locations) Get(dir string) (*Location, error) {
	clean, canonical, err := s.Check(dir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	loc, ok := s.loaded[canonical]
	s.mu.Unlock()
	if ok && loc.Directory == clean {
		return loc, nil
	}
	loc, err = s.build(clean, canonical)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.loaded[canonical] = loc
	s.mu.Unlock()
	return loc, nil
}

// Loaded reports whether the directory (canonical, as Check returns it)
// is loaded.
func (s *Locations) Loaded(canonical string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.loaded[canonical]
	return ok
}

// AgentsOf returns the agents of a session's directory as the location
// stands now (loaded fresh when it is not loaded), or nil when the
// directory is no usable location.
func (s *Locations) AgentsOf(dir string) []agents.Agent {
	clean, canonical, err := s.Check(dir)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	loc, ok := s.loaded[canonical]
	s.mu.Unlock()
	if !ok || loc.Directory != clean {
		if l, err := s.build(clean, canonical); err == nil {
			loc = l
		}
	}
	if loc == nil {
		return nil
	}
	return loc.Agents
}

// Placement resolves a directory to the location fields of a session: the
// clean directory, its project and the path inside the project.
func (s *Locations) Placement(dir string) (clean, projectID, subpath string, err error) {
	clean, canonical, err := s.Check(dir)
	if err != nil {
		return "", "", "", err
	}
	p := DetectProject(canonical)
	rel, rerr := filepath.Rel(p.Directory, canonical)
	if rerr == nil && rel != "." {
		subpath = filepath.ToSlash(rel)
	}
	return clean, p.ID, subpath, nil
}

// build loads a location's services: its project and agents.
func (s *Locations) build(clean, canonical string) (*Location, error) {
	loc := &Location{Directory: clean, Canonical: canonical, Project: DetectProject(canonical)}
	list, err := agents.Load(loc.Project.Directory, canonical, s.opts.Agents)
	if err != nil {
		// A malformed agent config (opencode.json, .opencode/agent/*.md or
		// the server's own) fails the whole location rather than serving a
		// partial agent list: every location-scoped operation, location.get
		// included, answers 503 ServiceUnavailableError {service: "location"}
		// with the parse error until the config is fixed.
		return nil, errs.Unavailable("location", err.Error())
	}
	loc.Agents = list
	return loc, nil
}

// ReloadAll shuts down and rebuilds every loaded location: a
// location.shutdown event for each, then the rebuilds, concurrently. It
// returns once all have settled, with the failures joined.
func (s *Locations) ReloadAll() error {
	s.mu.Lock()
	old := make([]*Location, 0, len(s.loaded))
	for _, l := range s.loaded {
		old = append(old, l)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	failed := make([]error, len(old))
	for i, l := range old {
		s.opts.Bus.Publish("location.shutdown", l.Ref(), nil)
		wg.Add(1)
		go func(i int, l *Location) {
			defer wg.Done()
			nl, err := s.build(l.Directory, l.Canonical)
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil {
				delete(s.loaded, l.Canonical)
				failed[i] = fmt.Errorf("%s: %v", l.Directory, errs.Message(err))
				return
			}
			s.loaded[l.Canonical] = nl
			if !sameAgents(l.Agents, nl.Agents) {
				s.opts.Bus.Publish("agent.updated", nl.Ref(), nil)
			}
		}(i, l)
	}
	wg.Wait()
	return errors.Join(failed...)
}

// sameAgents reports whether two agent lists are the same definitions.
func sameAgents(a, b []agents.Agent) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

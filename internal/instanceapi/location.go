package instanceapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agentgate/agentgate/internal/router"
)

// Location is a loaded project directory context.
type Location struct {
	Directory string // the directory as requested (absolute, clean)
	Canonical string // with symlinks resolved
	Project   Project
	Agents    []AgentInfo
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
func (l *Location) Ref() *LocationRef { return &LocationRef{Directory: l.Directory} }

// checkDirectory validates a requested directory: absolute, no dot-dot
// segments, an existing directory, inside the allowed roots once symlinks
// are resolved. It returns the clean and the canonical path.
func (s *Server) checkDirectory(dir string) (string, string, error) {
	if dir == "" {
		dir = s.opts.DefaultDirectory
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", "", unavailable("location", "no default location")
		}
		dir = wd
	}
	if !filepath.IsAbs(dir) {
		return "", "", invalidRequest("query", "location directory must be an absolute path: "+dir)
	}
	for _, seg := range strings.Split(filepath.ToSlash(dir), "/") {
		if seg == ".." {
			return "", "", invalidRequest("query", "location directory must not contain '..': "+dir)
		}
	}
	if strings.ContainsRune(dir, 0) {
		return "", "", invalidRequest("query", "location directory contains a NUL byte")
	}
	clean := filepath.Clean(dir)
	canonical, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return "", "", locationNotFound(clean, "Location not found: "+clean)
	}
	fi, err := os.Stat(canonical)
	if err != nil || !fi.IsDir() {
		return "", "", locationNotFound(clean, "Location is not a directory: "+clean)
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
			return "", "", locationDenied(clean, "Location is outside the allowed roots: "+clean)
		}
	}
	return clean, canonical, nil
}

// within reports whether path is root or inside it (both canonical).
func within(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// detectProject finds the project root above a directory: the nearest
// ancestor holding .git, else the directory itself. The id is stable: a
// hash of the canonical root.
func detectProject(canonical string) Project {
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

// location resolves and, on first use, loads the request's location.
func (s *Server) location(r *http.Request) (*Location, error) {
	dir, err := locationQuery(r)
	if err != nil {
		return nil, err
	}
	clean, canonical, err := s.checkDirectory(dir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	loc, ok := s.locations[canonical]
	s.mu.Unlock()
	if ok && loc.Directory == clean {
		return loc, nil
	}
	loc, err = s.build(clean, canonical)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.locations[canonical] = loc
	s.mu.Unlock()
	return loc, nil
}

// build loads a location's services: its project and agents.
func (s *Server) build(clean, canonical string) (*Location, error) {
	loc := &Location{Directory: clean, Canonical: canonical, Project: detectProject(canonical)}
	agents, err := LoadAgents(loc.Project.Directory, canonical, s.opts.Agents)
	if err != nil {
		// A malformed agent config (opencode.json, .opencode/agent/*.md or
		// the server's own) fails the whole location rather than serving a
		// partial agent list: every location-scoped operation, location.get
		// included, answers 503 ServiceUnavailableError {service: "location"}
		// with the parse error until the config is fixed.
		return nil, unavailable("location", err.Error())
	}
	loc.Agents = agents
	return loc, nil
}

func (s *Server) getLocation(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, loc.PublicInfo())
	return nil
}

// ReloadAll shuts down and rebuilds every loaded location: a
// location.shutdown event for each, then the rebuilds, concurrently. It
// returns once all have settled, with the failures joined.
func (s *Server) ReloadAll() error {
	s.mu.Lock()
	old := make([]*Location, 0, len(s.locations))
	for _, l := range s.locations {
		old = append(old, l)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(old))
	for i, l := range old {
		s.opts.Bus.Publish("location.shutdown", l.Ref(), nil)
		wg.Add(1)
		go func(i int, l *Location) {
			defer wg.Done()
			nl, err := s.build(l.Directory, l.Canonical)
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil {
				delete(s.locations, l.Canonical)
				errs[i] = fmt.Errorf("%s: %v", l.Directory, errorMessage(err))
				return
			}
			s.locations[l.Canonical] = nl
			if !sameAgents(l.Agents, nl.Agents) {
				s.opts.Bus.Publish("agent.updated", nl.Ref(), nil)
			}
		}(i, l)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sameAgents reports whether two agent lists are the same definitions.
func sameAgents(a, b []AgentInfo) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (s *Server) reloadLocations(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	if err := noBody(r); err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return invalidRequest("query", "location.reload takes no query parameters")
	}
	if err := s.ReloadAll(); err != nil {
		return unavailable("location", err.Error())
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	agents := loc.Agents
	if agents == nil {
		agents = []AgentInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": loc.Ref(), "data": agents})
	return nil
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request, p router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	for _, a := range loc.Agents {
		if a.ID == p["agentID"] {
			writeJSON(w, http.StatusOK, map[string]any{"location": loc.Ref(), "data": a})
			return nil
		}
	}
	return agentNotFound(p["agentID"])
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": loc.Ref(), "data": s.opts.Plugins.List(loc.Project.Directory)})
	return nil
}

func (s *Server) checkPlugins(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	loc, err := s.location(r)
	if err != nil {
		return err
	}
	var in struct {
		Target *string `json:"target"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	target := ""
	if in.Target != nil {
		target = *in.Target
	}
	list, err := s.opts.Plugins.Check(r.Context(), loc.Project.Directory, target)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"location": loc.Ref(), "data": list})
	return nil
}

func (s *Server) updatePlugins(w http.ResponseWriter, r *http.Request, _ router.Params) error {
	if _, err := s.location(r); err != nil {
		return err
	}
	var in struct {
		Targets *[]string `json:"targets"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Targets == nil {
		return invalidRequest("payload", "targets is required")
	}
	updated, err := s.opts.Plugins.Update(ctxNoCancel(r), *in.Targets)
	if len(updated) > 0 {
		for _, t := range updated {
			s.opts.Bus.Publish("plugin.updated", nil, map[string]any{"target": t})
		}
		if rerr := s.ReloadAll(); rerr != nil && err == nil {
			err = unavailable("location", rerr.Error())
		}
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

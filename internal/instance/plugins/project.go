package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentgate/agentgate/internal/instance/agents"
)

// Policy is the operator's say over plugins: whether the plugins a
// project names load at all, and which packages may be installed.
type Policy struct {
	// DenyProjects refuses every plugin a project names: the packages of
	// its opencode.json(c) "plugin" list and its local plugin files
	// (.opencode/plugin(s)/ and paths in the list). For servers shared by
	// people who do not trust each other's repositories: a project's
	// plugins run with the agent's reach (its sandbox) for whoever opens
	// the project.
	DenyProjects bool
	// Allow, when set, lists the package names a project may install as
	// plugins, as path.Match patterns ("@acme/*", "opencode-*"); other
	// packages a project names are refused. The Caddyfile's own plugins
	// and the packages plugins depend on are not restricted by it.
	Allow []string
	// Deny lists package names never installed, as path.Match patterns:
	// as plugins (a project's or the Caddyfile's) or as dependencies of
	// one.
	Deny []string
}

// Validate checks the patterns.
func (p Policy) Validate() error {
	for _, list := range [][]string{p.Allow, p.Deny} {
		for _, pat := range list {
			if _, err := path.Match(pat, ""); err != nil || pat == "" {
				return fmt.Errorf("package pattern %q is not a valid glob", pat)
			}
		}
	}
	return nil
}

func matchAny(patterns []string, name string) string {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, name); ok {
			return pat
		}
	}
	return ""
}

// denied says why a package may never be installed ("" when it may).
func (p Policy) denied(name string) string {
	if pat := matchAny(p.Deny, name); pat != "" {
		return fmt.Sprintf("not allowed: plugin_packages_deny names %s (pattern %q)", name, pat)
	}
	return ""
}

// refusedPackage says why a package a project names does not load ("" when
// it may).
func (p Policy) refusedPackage(name string) string {
	if p.DenyProjects {
		return "not allowed: plugins_from_projects is deny (the operator runs only the Caddyfile's plugins)"
	}
	if why := p.denied(name); why != "" {
		return why
	}
	if len(p.Allow) > 0 && matchAny(p.Allow, name) == "" {
		return fmt.Sprintf("not allowed: plugin_packages does not list %s (allowed: %s)", name, strings.Join(p.Allow, " "))
	}
	return ""
}

// refusedFile says why a project's plugin file does not load.
func (p Policy) refusedFile() string {
	if p.DenyProjects {
		return "not allowed: plugins_from_projects is deny (the operator runs only the Caddyfile's plugins)"
	}
	return ""
}

// projectEntry is one plugin a project's configuration names: a package
// (name and spec) or a file (an absolute path).
type projectEntry struct {
	raw        string // as written
	config     string // the file that names it
	name, spec string
	file       string
	err        string // why the entry is unusable
	// options are the second item of a [spec, options] pair: the second
	// argument of the plugin's functions.
	options map[string]any
}

// key identifies an entry in its list: packages by name, files by path.
func (e projectEntry) key() string {
	if e.file != "" {
		return "file:" + e.file
	}
	if e.name != "" {
		return "package:" + e.name
	}
	return "raw:" + e.raw
}

// projectConfigFiles are the files a project's plugin list comes from,
// lowest precedence first: the project's opencode.jsonc and opencode.json,
// then .opencode/opencode.jsonc and .opencode/opencode.json.
var projectConfigFiles = []string{"opencode.jsonc", "opencode.json", ".opencode/opencode.jsonc", ".opencode/opencode.json"}

// readProjectPlugins reads a project's plugin list: the "plugin" arrays
// of its configuration files in precedence order, an entry naming the
// same package or file as an earlier one replacing it (the later file
// wins). An entry is a package ("name", "name@version", "name@range",
// "name@tag") or a path to a file ("./plugin.ts", relative to the
// file that names it, an absolute path or a file:// URL), as a string or
// as the first item of a [spec, options] pair. A file that cannot be
// read, or a list that is not an array, is one failed entry naming it.
func readProjectPlugins(projectDir string) []projectEntry {
	if projectDir == "" {
		return nil
	}
	var out []projectEntry
	index := map[string]int{}
	add := func(e projectEntry) {
		if i, ok := index[e.key()]; ok {
			out[i] = e
			return
		}
		index[e.key()] = len(out)
		out = append(out, e)
	}
	for _, rel := range projectConfigFiles {
		file := filepath.Join(projectDir, filepath.FromSlash(rel))
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		bad := func(msg string) { add(projectEntry{raw: rel, config: file, err: clip(file + ": " + msg)}) }
		if err != nil {
			bad(err.Error())
			continue
		}
		clean, err := agents.StripJSONC(data)
		if err != nil || !gjson.ValidBytes(clean) {
			bad("not valid JSON(C)")
			continue
		}
		list := gjson.GetBytes(clean, "plugin")
		if !list.Exists() || list.Type == gjson.Null {
			continue
		}
		if !list.IsArray() {
			bad(`"plugin" must be an array of package names or paths`)
			continue
		}
		for _, v := range list.Array() {
			var options map[string]any
			if v.IsArray() {
				if o := v.Get("1"); o.IsObject() {
					json.Unmarshal([]byte(o.Raw), &options)
				}
				v = v.Get("0")
			}
			if v.Type != gjson.String {
				add(projectEntry{raw: v.Raw, config: file, err: clip(file + `: a "plugin" entry must be a string, got ` + v.Raw)})
				continue
			}
			e := parseProjectEntry(v.String(), file, projectDir)
			e.options = options
			add(e)
		}
	}
	return out
}

// parseProjectEntry reads one "plugin" entry of a configuration file.
func parseProjectEntry(raw, config, projectDir string) projectEntry {
	e := projectEntry{raw: raw, config: config}
	s := strings.TrimSpace(raw)
	switch {
	case strings.HasPrefix(s, "file://"):
		u, err := url.Parse(s)
		if err != nil || u.Path == "" {
			e.err = clip(fmt.Sprintf("%s: %q is not a file URL", config, raw))
			return e
		}
		e.file = filepath.Clean(u.Path)
	case strings.HasPrefix(s, ".") || filepath.IsAbs(s):
		p := s
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(config), p)
		}
		e.file = filepath.Clean(p)
	default:
		name, spec, err := parsePluginTarget(s)
		if err != nil {
			e.err = clip(fmt.Sprintf("%s: %v", config, err))
			return e
		}
		e.name, e.spec = name, spec
		return e
	}
	// The sandbox lets plugins read the project, not the rest of the host.
	if !within(projectDir, e.file) {
		e.err = clip(fmt.Sprintf("%s: plugin file %s is outside the project (the plugin host reads only the project)", config, e.file))
	}
	return e
}

func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// projectLock is what a project's plugin list resolved to, kept in the
// data directory (projects/<hash of the project directory>.json): each
// package entry ("name@spec") and its installed version. While the list
// names the same entries the project's plugins load from these versions
// without asking the registry; a changed entry is resolved again.
type projectLock struct {
	Directory string            `json:"directory"`
	Plugins   map[string]string `json:"plugins"`
}

func (m *Manager) projectLockPath(projectDir string) string {
	sum := sha256.Sum256([]byte(projectDir))
	return filepath.Join(m.dir, "projects", hex.EncodeToString(sum[:12])+".json")
}

func (m *Manager) readProjectLock(projectDir string) map[string]string {
	if m.dir == "" {
		return nil
	}
	data, err := os.ReadFile(m.projectLockPath(projectDir))
	if err != nil {
		return nil
	}
	var lk projectLock
	if json.Unmarshal(data, &lk) != nil || lk.Directory != projectDir {
		return nil
	}
	return lk.Plugins
}

// writeProjectLock replaces a project's lock (written to a temporary file
// and renamed).
func (m *Manager) writeProjectLock(projectDir string, plugins map[string]string) error {
	if m.dir == "" {
		return nil
	}
	p := m.projectLockPath(projectDir)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(projectLock{Directory: projectDir, Plugins: plugins}, "", "  ")
	f, err := os.CreateTemp(filepath.Dir(p), ".lock-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

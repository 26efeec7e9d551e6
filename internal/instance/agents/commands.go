package agents

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Command is CommandV2Info: a prompt template a client offers as a slash
// command.
type Command struct {
	Name        string    `json:"name"`
	Template    string    `json:"template"`
	Description string    `json:"description,omitempty"`
	Agent       string    `json:"agent,omitempty"`
	Model       *ModelRef `json:"model,omitempty"`
	Subtask     *bool     `json:"subtask,omitempty"`
}

// Skill is SkillV2Info: instructions an agent can load, from a SKILL.md.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Location    string `json:"location"`
	Content     string `json:"content"`
}

// locationDirs are the directories a location reads its config from: the
// project's, then the location's own when it differs.
func locationDirs(projectDir, directory string) []string {
	dirs := []string{}
	if projectDir != "" {
		dirs = append(dirs, projectDir)
	}
	if directory != "" && (projectDir == "" || filepath.Clean(directory) != filepath.Clean(projectDir)) {
		dirs = append(dirs, directory)
	}
	return dirs
}

// Commands lists a location's commands by name: the "command" map of
// opencode.jsonc and opencode.json, then .opencode/command/*.md and
// .opencode/commands/*.md (front matter description, agent, model,
// subtask; the body is the template), later sources replacing earlier
// ones. A malformed source is an error naming the file.
func Commands(projectDir, directory string) ([]Command, error) {
	byName := map[string]Command{}
	for _, dir := range locationDirs(projectDir, directory) {
		docs, err := configDocs(dir)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			var ferr error
			d.doc.Get("command").ForEach(func(k, v gjson.Result) bool {
				c, err := parseCommand(k.String(), v)
				if err != nil {
					ferr = fmt.Errorf("%s: command %q: %v", d.path, k.String(), err)
					return false
				}
				byName[c.Name] = c
				return true
			})
			if ferr != nil {
				return nil, ferr
			}
		}
		err = eachMarkdown(dir, []string{"command", "commands"}, func(path, name string, def []byte) error {
			v := gjson.ParseBytes(def)
			if t := v.Get("prompt"); t.Exists() {
				def, _ = sjson.SetBytes(def, "template", t.String())
			}
			c, err := parseCommand(name, gjson.ParseBytes(def))
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			byName[c.Name] = c
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]Command, 0, len(byName))
	for _, c := range byName {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func parseCommand(name string, v gjson.Result) (Command, error) {
	c := Command{Name: name}
	if !v.IsObject() {
		return c, errors.New("a command must be an object")
	}
	t := v.Get("template")
	if t.Type != gjson.String || strings.TrimSpace(t.String()) == "" {
		return c, errors.New("template must be a non-empty string")
	}
	c.Template = t.String()
	for _, f := range []struct {
		key string
		dst *string
	}{{"description", &c.Description}, {"agent", &c.Agent}} {
		if x := v.Get(f.key); x.Exists() {
			if x.Type != gjson.String {
				return c, fmt.Errorf("%s must be a string", f.key)
			}
			*f.dst = x.String()
		}
	}
	if m := v.Get("model"); m.Exists() {
		ref, err := parseModel(m)
		if err != nil {
			return c, err
		}
		c.Model = ref
	}
	if st := v.Get("subtask"); st.Exists() {
		if !isBool(st) {
			return c, errors.New("subtask must be true or false")
		}
		b := st.Bool()
		c.Subtask = &b
	}
	return c, nil
}

// Skills lists a location's skills by name: each
// .opencode/skill/<name>/SKILL.md and .opencode/skills/<name>/SKILL.md,
// its front matter's name (default the directory's) and description, its
// body the content.
func Skills(projectDir, directory string) ([]Skill, error) {
	byName := map[string]Skill{}
	for _, dir := range locationDirs(projectDir, directory) {
		for _, sub := range []string{"skill", "skills"} {
			root := filepath.Join(dir, ".opencode", sub)
			entries, err := os.ReadDir(root)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %v", root, err)
			}
			for _, e := range entries {
				path := filepath.Join(root, e.Name(), "SKILL.md")
				data, err := os.ReadFile(path)
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
					continue
				}
				if err != nil {
					return nil, fmt.Errorf("%s: %v", path, err)
				}
				def, err := ParseMarkdown(data)
				if err != nil {
					return nil, fmt.Errorf("%s: %v", path, err)
				}
				v := gjson.ParseBytes(def)
				sk := Skill{Name: e.Name(), Location: path, Content: v.Get("prompt").String()}
				if n := v.Get("name"); n.Type == gjson.String && n.String() != "" {
					sk.Name = n.String()
				}
				if d := v.Get("description"); d.Type == gjson.String {
					sk.Description = d.String()
				}
				byName[sk.Name] = sk
			}
		}
	}
	out := make([]Skill, 0, len(byName))
	for _, sk := range byName {
		out = append(out, sk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// eachMarkdown calls fn for each dir/.opencode/<sub>/*.md file (subs in
// order, files by name) with its name less ".md" and its definition.
func eachMarkdown(dir string, subs []string, fn func(path, name string, def []byte) error) error {
	for _, sub := range subs {
		// Not filepath.Glob: the directory may hold glob metacharacters.
		mdDir := filepath.Join(dir, ".opencode", sub)
		entries, err := os.ReadDir(mdDir) // sorted by name
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %v", mdDir, err)
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".md")
			if !ok || name == "" {
				continue
			}
			path := filepath.Join(mdDir, e.Name())
			if fi, err := os.Stat(path); err != nil || fi.IsDir() {
				continue
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			def, err := ParseMarkdown(data)
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			if err := fn(path, name, def); err != nil {
				return err
			}
		}
	}
	return nil
}

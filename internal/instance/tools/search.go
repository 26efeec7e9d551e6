package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

var _ = register(&Tool{
	Name:        "glob",
	Description: "Find files of the project by glob pattern (\"**/*.go\", \"src/**/*.{ts,tsx}\"); newest first, at most 100. .gitignore'd paths and sensitive files (.env, keys, credentials) are left out.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"The glob pattern to match files against"},` +
		`"path":{"type":"string","description":"The directory to search in (default: the project directory)"}},` +
		`"required":["pattern"]}`),
	Required: []string{"pattern"},
	Run:      runGlob,
})

func runGlob(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
	}
	if err := decode("glob", args, &in); err != nil {
		return Result{}, err
	}
	real, err := env.path(ctx, in.Path, true)
	if err != nil {
		return Result{}, err
	}
	if err := env.permit(ctx, Ask{Permission: "glob", Patterns: []string{in.Pattern}, Always: []string{"*"}}); err != nil {
		return Result{}, err
	}
	pattern := strings.TrimPrefix(in.Pattern, "./")
	if !strings.Contains(pattern, "/") {
		pattern = "**/" + pattern // a bare name pattern matches at any depth
	}
	type hit struct {
		path string
		mod  time.Time
	}
	var hits []hit
	truncated, hidden := false, 0
	err = env.walkIn(ctx, real, func(rel string, d fs.DirEntry) error {
		if d.IsDir() || !globMatch(pattern, rel) {
			return nil
		}
		if env.hidden(real, rel) {
			hidden++
			return nil
		}
		if len(hits) == maxEntries*10 {
			truncated = true
			return errStop
		}
		var mod time.Time
		if fi, err := d.Info(); err == nil {
			mod = fi.ModTime()
		}
		hits = append(hits, hit{filepath.Join(real, filepath.FromSlash(rel)), mod})
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].mod.After(hits[j].mod) })
	if len(hits) > maxEntries {
		hits, truncated = hits[:maxEntries], true
	}
	md := map[string]any{"count": len(hits), "truncated": truncated}
	if hidden > 0 {
		md["sensitive"] = hidden
	}
	if len(hits) == 0 {
		out := "No files found"
		if hidden > 0 {
			out += "\n\n" + leftOut(hidden, "left out")
		}
		return Result{Title: env.rel(real), Output: out, Metadata: md}, nil
	}
	lines := make([]string, len(hits))
	for i, h := range hits {
		lines[i] = h.path
	}
	out := strings.Join(lines, "\n")
	if truncated {
		out += "\n\n(Results are truncated. Consider using a more specific path or pattern.)"
	}
	if hidden > 0 {
		out += "\n\n" + leftOut(hidden, "left out")
	}
	return Result{Title: env.rel(real), Output: out, Metadata: md}, nil
}

var _ = register(&Tool{
	Name: "grep",
	Description: "Search the contents of the project's files with a regular expression (Go syntax); at most 100 " +
		"matching lines, grouped by file. include filters file names (\"*.go\", \"*.{ts,tsx}\"). .gitignore'd, binary and sensitive files (.env, keys, credentials) are skipped.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"The regex pattern to search for in file contents"},` +
		`"path":{"type":"string","description":"The directory to search in. Defaults to the project directory."},` +
		`"include":{"type":"string","description":"File pattern to include in the search (e.g. \"*.js\", \"*.{ts,tsx}\")"}},` +
		`"required":["pattern"]}`),
	Required: []string{"pattern"},
	Run:      runGrep,
})

// maxGrepFile is the largest file grep reads.
const maxGrepFile = 4 << 20

func runGrep(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
		Include string `json:"include"`
	}
	if err := decode("grep", args, &in); err != nil {
		return Result{}, err
	}
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return Result{}, &ArgumentError{Tool: "grep", Reason: "pattern is not a valid regular expression: " + err.Error()}
	}
	real, err := env.path(ctx, in.Path, true)
	if err != nil {
		return Result{}, err
	}
	if err := env.permit(ctx, Ask{Permission: "grep", Patterns: []string{in.Pattern}, Always: []string{"*"},
		Metadata: map[string]any{"pattern": in.Pattern, "path": real, "include": in.Include}}); err != nil {
		return Result{}, err
	}
	type match struct {
		line int
		text string
	}
	var files []string
	byFile := map[string][]match{}
	count, truncated, hidden := 0, false, 0
	err = env.inRoot(real, func(root *os.Root, dir string) error {
		base := root.Name()
		return walk(ctx, root.FS(), filepath.ToSlash(dir), func(rel string, d fs.DirEntry) error {
			if d.IsDir() || (in.Include != "" && !globMatch(in.Include, d.Name()) && !globMatch(in.Include, rel)) {
				return nil
			}
			p := filepath.Join(real, filepath.FromSlash(rel))
			target := p
			if d.Type()&fs.ModeSymlink != 0 {
				// A link is searched only when what it points to is under
				// the same root; what is opened is its target.
				t, err := env.resolve(p)
				if err != nil || !within(base, t) {
					return nil
				}
				target = t
			}
			if env.secret(p) || env.secret(target) {
				hidden++
				return nil
			}
			name, err := filepath.Rel(base, target)
			if err != nil {
				return nil
			}
			f, err := root.Open(name)
			if err != nil {
				return nil
			}
			defer f.Close()
			if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > maxGrepFile {
				return nil
			}
			head := make([]byte, 1024)
			n, _ := f.Read(head)
			if binary(head[:n]) {
				return nil
			}
			if _, err := f.Seek(0, 0); err != nil {
				return nil
			}
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), maxGrepFile)
			for ln := 1; sc.Scan(); ln++ {
				if !re.Match(sc.Bytes()) {
					continue
				}
				if count == maxEntries {
					truncated = true
					return errStop
				}
				text := sc.Text()
				if len(text) > maxLineLength {
					text = text[:maxLineLength] + "..."
				}
				if _, ok := byFile[p]; !ok {
					files = append(files, p)
				}
				byFile[p] = append(byFile[p], match{ln, text})
				count++
			}
			return nil
		})
	})
	if err != nil {
		return Result{}, err
	}
	note := ""
	md := map[string]any{"matches": count, "truncated": truncated}
	if hidden > 0 {
		note = leftOut(hidden, "not searched")
		md["sensitive"] = hidden
	}
	if count == 0 {
		out := "No files found"
		if note != "" {
			out += "\n\n" + note
		}
		return Result{Title: in.Pattern, Output: out, Metadata: md}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d matches", count)
	if truncated {
		b.WriteString(" (more matches available)")
	}
	b.WriteString("\n")
	for _, f := range files {
		fmt.Fprintf(&b, "%s:\n", f)
		for _, m := range byFile[f] {
			fmt.Fprintf(&b, "  Line %d: %s\n", m.line, m.text)
		}
	}
	if truncated {
		b.WriteString("\n(Results truncated. Consider using a more specific path or pattern.)")
	}
	out := strings.TrimRight(b.String(), "\n")
	if note != "" {
		out += "\n\n" + note
	}
	return Result{Title: in.Pattern, Output: out, Metadata: md}, nil
}

package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentgate/agentgate/internal/instance/sensitive"
)

// The read limits.
const (
	readLines     = 2000     // lines a read returns by default
	maxLineLength = 2000     // characters kept of one line
	maxReadBytes  = 50 << 10 // bytes of output a read returns at most
	maxEntries    = 100      // files a list, glob or grep returns at most
)

var _ = register(&Tool{
	Name: "read",
	Description: "Read a file or directory in the project. Returns up to 2000 lines from offset (1-based), " +
		"each line prefixed with its number; lines longer than 2000 characters are cut. Use offset and limit " +
		"to read further in long files. Binary files cannot be read. A directory lists its entries.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"filePath":{"type":"string","description":"The absolute path to the file or directory to read"},` +
		`"offset":{"type":"number","description":"The line number to start reading from (1-indexed)"},` +
		`"limit":{"type":"number","description":"The maximum number of lines to read (defaults to 2000)"}},` +
		`"required":["filePath"]}`),
	Required: []string{"filePath"},
	Run:      runRead,
})

func runRead(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		FilePath string  `json:"filePath"`
		Offset   float64 `json:"offset"`
		Limit    float64 `json:"limit"`
	}
	if err := decode("read", args, &in); err != nil {
		return Result{}, err
	}
	if in.Offset < 0 || in.Limit < 0 {
		return Result{}, &ArgumentError{Tool: "read", Reason: "offset and limit must not be negative"}
	}
	real, err := env.path(ctx, in.FilePath, false)
	if err != nil {
		return Result{}, err
	}
	if err := env.askFile(ctx, "read", real, nil); err != nil {
		return Result{}, err
	}
	root, rel, err := env.openRoot(real)
	if err != nil {
		return Result{}, err
	}
	defer root.Close()
	fi, err := root.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return Result{}, fmt.Errorf("File not found: %s", real)
	} else if err != nil {
		return Result{}, err
	}
	title := env.rel(real)
	if fi.IsDir() {
		return env.readDir(root, rel, real, title)
	}
	if !fi.Mode().IsRegular() {
		return Result{}, fmt.Errorf("Cannot read %s: not a regular file", real)
	}
	f, err := root.Open(rel)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Result{}, fmt.Errorf("Cannot read %s: not a regular file", real)
	}
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	if binary(head[:n]) {
		return Result{}, fmt.Errorf("Cannot read binary file: %s", real)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, err
	}
	offset := max(int(in.Offset), 1)
	limit := int(in.Limit)
	if limit == 0 {
		limit = readLines
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<path>%s</path>\n<type>file</type>\n<content>\n", real)
	sc := bufio.NewReader(f)
	line, shown, last, capped := 0, 0, 0, false
	for {
		text, err := sc.ReadString('\n')
		if text == "" && err != nil {
			break
		}
		line++
		if line < offset || shown >= limit || capped {
			if err != nil {
				break
			}
			continue
		}
		text = strings.TrimRight(text, "\r\n")
		if utf8.RuneCountInString(text) > maxLineLength {
			text = string([]rune(text)[:maxLineLength]) + "... (line truncated to 2000 chars)"
		}
		entry := fmt.Sprintf("%d: %s\n", line, text)
		if b.Len()+len(entry) > maxReadBytes {
			capped = true
			continue
		}
		b.WriteString(entry)
		shown++
		last = line
		if err != nil {
			break
		}
	}
	if line > 0 && offset > line {
		return Result{}, fmt.Errorf("Offset %d is out of range for this file (%d lines)", offset, line)
	}
	switch {
	case capped:
		fmt.Fprintf(&b, "\n(Output capped at 50 KB. Showing lines %d-%d. Use offset=%d to continue.)\n", offset, last, last+1)
	case last < line:
		fmt.Fprintf(&b, "\n(Showing lines %d-%d of %d. Use offset=%d to continue.)\n", offset, last, line, last+1)
	default:
		fmt.Fprintf(&b, "\n(End of file - total %d lines)\n", line)
	}
	b.WriteString("</content>")
	return Result{Title: title, Output: b.String(), Metadata: map[string]any{"truncated": capped || last < line, "lines": shown}}, nil
}

// binary reports whether a file's first bytes look binary: a NUL byte,
// or more than 30% of them non-printable.
func binary(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	odd := 0
	for _, c := range b {
		if c < 9 || (c > 13 && c < 32) {
			odd++
		}
	}
	return odd*10 > len(b)*3
}

// readDir lists the directory rel of root (real is its resolved path),
// leaving out the entries whose names are sensitive (the directory itself
// was asked for by its path).
func (env *Env) readDir(root *os.Root, rel, real, title string) (Result, error) {
	all, err := fs.ReadDir(root.FS(), filepath.ToSlash(rel))
	if err != nil {
		return Result{}, err
	}
	entries := all[:0:0]
	hidden := 0
	for _, e := range all {
		if sensitive.Path(e.Name()) {
			hidden++
			continue
		}
		entries = append(entries, e)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<path>%s</path>\n<type>directory</type>\n<entries>\n", real)
	for i, e := range entries {
		if i == maxEntries*10 {
			fmt.Fprintf(&b, "... (%d more)\n", len(entries)-i)
			break
		}
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		b.WriteString(name + "\n")
	}
	fmt.Fprintf(&b, "(%d entries)\n", len(entries))
	md := map[string]any{"count": len(entries)}
	if hidden > 0 {
		b.WriteString(leftOut(hidden, "left out") + "\n")
		md["sensitive"] = hidden
	}
	b.WriteString("</entries>")
	return Result{Title: title, Output: b.String(), Metadata: md}, nil
}

var _ = register(&Tool{
	Name:        "write",
	Description: "Write a file in the project, creating it (and its directories) or replacing its content.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"content":{"type":"string","description":"The content to write to the file"},` +
		`"filePath":{"type":"string","description":"The absolute path to the file to write (must be absolute, not relative)"}},` +
		`"required":["content","filePath"]}`),
	Required:  []string{"content", "filePath"},
	Exclusive: true,
	Run:       runWrite,
})

func runWrite(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Content  string `json:"content"`
		FilePath string `json:"filePath"`
	}
	if err := decode("write", args, &in); err != nil {
		return Result{}, err
	}
	real, err := env.path(ctx, in.FilePath, false)
	if err != nil {
		return Result{}, err
	}
	if err := env.askFile(ctx, "edit", real, map[string]any{"filepath": real}); err != nil {
		return Result{}, err
	}
	exists := false
	err = env.inRoot(real, func(root *os.Root, rel string) error {
		_, statErr := root.Stat(rel)
		exists = statErr == nil
		return writeFile(root, rel, real, []byte(in.Content))
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Title: env.rel(real), Output: "Wrote file successfully.", Metadata: map[string]any{"filepath": real, "exists": exists}}, nil
}

// writeFile writes the file rel of root (real is its resolved path, for
// messages) through a temporary file in its directory and a rename,
// keeping an existing file's mode; the directories are made, the
// temporary file written and renamed, all through the root.
func writeFile(root *os.Root, rel, real string, data []byte) error {
	if fi, err := root.Stat(rel); err == nil && fi.IsDir() {
		return fmt.Errorf("Path is a directory, not a file: %s", real)
	}
	dir := filepath.Dir(rel)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if fi, err := root.Stat(rel); err == nil {
		mode = fi.Mode().Perm()
	}
	var tmp *os.File
	var name string
	for range 100 {
		name = filepath.Join(dir, ".agentgate-write-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		tmp = f
		break
	}
	if tmp == nil {
		return fmt.Errorf("cannot make a temporary file next to %s", real)
	}
	_, werr := tmp.Write(data)
	merr := tmp.Chmod(mode)
	cerr := tmp.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		root.Remove(name)
		return err
	}
	if err := root.Rename(name, rel); err != nil {
		root.Remove(name)
		return err
	}
	return nil
}

var _ = register(&Tool{
	Name: "edit",
	Description: "Replace text in a file of the project. oldString must match the file exactly (whitespace and " +
		"indentation included) and only once, unless replaceAll is set. An empty oldString writes newString as the whole file.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"filePath":{"type":"string","description":"The absolute path to the file to modify"},` +
		`"oldString":{"type":"string","description":"The text to replace"},` +
		`"newString":{"type":"string","description":"The text to replace it with (must be different from oldString)"},` +
		`"replaceAll":{"type":"boolean","description":"Replace all occurrences of oldString (default false)"}},` +
		`"required":["filePath","oldString","newString"]}`),
	Required:  []string{"filePath", "oldString", "newString"},
	Exclusive: true,
	Run:       runEdit,
})

func runEdit(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		FilePath   string `json:"filePath"`
		OldString  string `json:"oldString"`
		NewString  string `json:"newString"`
		ReplaceAll bool   `json:"replaceAll"`
	}
	if err := decode("edit", args, &in); err != nil {
		return Result{}, err
	}
	if in.OldString == in.NewString {
		return Result{}, errors.New("No changes to apply: oldString and newString are identical.")
	}
	real, err := env.path(ctx, in.FilePath, false)
	if err != nil {
		return Result{}, err
	}
	secret := env.secret(real)
	if secret {
		// A sensitive file is not read before the permission is given: what
		// an edit answers (the text is not there, it is there twice) would
		// tell its content.
		if err := env.askFile(ctx, "edit", real, map[string]any{"filepath": real}); err != nil {
			return Result{}, err
		}
	}
	root, rel, err := env.openRoot(real)
	if err != nil {
		return Result{}, err
	}
	defer root.Close()
	var next []byte
	count := 1
	if in.OldString == "" {
		next = []byte(in.NewString)
	} else {
		cur, err := root.ReadFile(rel)
		if errors.Is(err, fs.ErrNotExist) {
			return Result{}, fmt.Errorf("File %s not found", real)
		} else if err != nil {
			return Result{}, err
		}
		count = bytes.Count(cur, []byte(in.OldString))
		switch {
		case count == 0:
			return Result{}, errors.New("Could not find oldString in the file. It must match exactly, including whitespace, indentation, and line endings.")
		case count > 1 && !in.ReplaceAll:
			return Result{}, errors.New("Found multiple matches for oldString. Provide more surrounding context to make the match unique.")
		case in.ReplaceAll:
			next = bytes.ReplaceAll(cur, []byte(in.OldString), []byte(in.NewString))
		default:
			next = bytes.Replace(cur, []byte(in.OldString), []byte(in.NewString), 1)
		}
	}
	if !secret {
		if err := env.askFile(ctx, "edit", real, map[string]any{"filepath": real}); err != nil {
			return Result{}, err
		}
	}
	if err := writeFile(root, rel, real, next); err != nil {
		return Result{}, err
	}
	return Result{Title: env.rel(real), Output: "Edit applied successfully.", Metadata: map[string]any{"filepath": real, "replacements": count}}, nil
}

// ignoredDirs are never listed, globbed or searched.
var ignoredDirs = map[string]bool{".git": true, "node_modules": true, "__pycache__": true, ".venv": true, "venv": true,
	".idea": true, ".vscode": true, ".cache": true, ".zig-cache": true}

var _ = register(&Tool{
	Name:        "list",
	Description: "List the files and directories under a directory of the project as a tree (at most 100 files); .gitignore'd paths and sensitive files (.env, keys, credentials) are left out.",
	Schema: json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"The absolute path to the directory to list (default: the project directory)"},` +
		`"ignore":{"type":"array","items":{"type":"string"},"description":"List of glob patterns to ignore"}}}`),
	Run: runList,
})

func runList(ctx context.Context, env *Env, args json.RawMessage) (Result, error) {
	var in struct {
		Path   string   `json:"path"`
		Ignore []string `json:"ignore"`
	}
	if err := decode("list", args, &in); err != nil {
		return Result{}, err
	}
	real, err := env.path(ctx, in.Path, true)
	if err != nil {
		return Result{}, err
	}
	if err := env.permit(ctx, Ask{Permission: "list", Patterns: []string{env.rel(real)}, Always: []string{"*"}}); err != nil {
		return Result{}, err
	}
	var files []string
	truncated, hidden := false, 0
	err = env.walkIn(ctx, real, func(rel string, d fs.DirEntry) error {
		for _, g := range in.Ignore {
			if globMatch(g, rel) || globMatch(g, d.Name()) || globMatch(strings.TrimSuffix(g, "/"), d.Name()) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
		}
		if !d.IsDir() {
			if env.hidden(real, rel) {
				hidden++
				return nil
			}
			if len(files) == maxEntries {
				truncated = true
				return errStop
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	out := tree(real, files, truncated)
	md := map[string]any{"count": len(files), "truncated": truncated}
	if hidden > 0 {
		out += leftOut(hidden, "left out") + "\n"
		md["sensitive"] = hidden
	}
	return Result{Title: env.rel(real), Output: out, Metadata: md}, nil
}

// tree renders relative file paths as an indented tree under root.
func tree(root string, files []string, truncated bool) string {
	sort.Strings(files)
	var b strings.Builder
	b.WriteString(root + "/\n")
	shown := map[string]bool{}
	for _, f := range files {
		parts := strings.Split(f, "/")
		for i := 0; i < len(parts)-1; i++ {
			dir := strings.Join(parts[:i+1], "/")
			if !shown[dir] {
				shown[dir] = true
				b.WriteString(strings.Repeat("  ", i+1) + parts[i] + "/\n")
			}
		}
		b.WriteString(strings.Repeat("  ", len(parts)) + parts[len(parts)-1] + "\n")
	}
	if truncated {
		b.WriteString("(Results are truncated. Consider using a more specific path.)\n")
	}
	return b.String()
}

package tools

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/instance/permission"
)

// outsideDir makes a directory outside the test's roots holding
// secret.txt.
func outsideDir(t *testing.T) (dir, secret string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	secret = filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("SECRET outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

// swapForLink replaces the directory dir by a relative link to target,
// as someone racing a tool between its check and its open would.
func swapForLink(t *testing.T, dir, target string) {
	t.Helper()
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Dir(dir), target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel, dir); err != nil {
		t.Fatal(err)
	}
}

func TestLinksOutOfTheRootsAreRefused(t *testing.T) {
	env, _ := project(t, map[string]string{"in.txt": "inside\n"})
	outside, secret := outsideDir(t)
	if err := os.Symlink(secret, filepath.Join(env.Dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read", map[string]any{"filePath": "link"}},
		{"edit", map[string]any{"filePath": "link", "oldString": "SECRET", "newString": "x"}},
		{"write", map[string]any{"filePath": "link", "content": "x"}},
		{"read", map[string]any{"filePath": "../../" + filepath.Base(outside) + "/secret.txt"}},
		{"write", map[string]any{"filePath": "../../" + filepath.Base(outside) + "/new.txt", "content": "x"}},
	} {
		res, err := call(t, env, c.tool, c.args)
		if err == nil || !errors.Is(err, ErrOutsideRoots) || strings.Contains(res.Output, "SECRET") {
			t.Fatalf("%s %v: %v %q, want outside the roots", c.tool, c.args, err, res.Output)
		}
	}
	res := mustCall(t, env, "grep", map[string]any{"pattern": "SECRET"})
	if strings.Contains(res.Output, "SECRET") {
		t.Fatalf("grep followed a link out of the roots: %s", res.Output)
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET outside\n" {
		t.Fatalf("the file outside the roots was changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatal("a file was written outside the roots")
	}

	// A directory swapped for a link to outside after the tool resolved
	// and checked the path (here: while it asks permission) does not lead
	// the open, the write or the edit out of the project: they go through
	// an os.Root of it.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read", map[string]any{"filePath": "sub/secret.txt"}},
		{"write", map[string]any{"filePath": "sub/secret.txt", "content": "overwritten"}},
		{"write", map[string]any{"filePath": "sub/new.txt", "content": "planted"}},
		{"edit", map[string]any{"filePath": "sub/secret.txt", "oldString": "inside", "newString": "overwritten"}},
	} {
		env, _ := project(t, map[string]string{"sub/secret.txt": "inside\n"})
		outside, secret := outsideDir(t)
		swapped := false
		env.Permit = func(_ context.Context, a Ask) error {
			if !swapped {
				swapped = true
				swapForLink(t, filepath.Join(env.Dir, "sub"), outside)
			}
			return nil
		}
		res, err := call(t, env, c.tool, c.args)
		if !swapped {
			t.Fatalf("%s did not ask", c.tool)
		}
		if err == nil || strings.Contains(res.Output, "SECRET") {
			t.Fatalf("%s %v through a swapped link: %v %q", c.tool, c.args, err, res.Output)
		}
		if b, _ := os.ReadFile(secret); string(b) != "SECRET outside\n" {
			t.Fatalf("%s changed the file outside: %q", c.tool, b)
		}
		if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
			t.Fatalf("%s wrote outside the roots", c.tool)
		}
	}
}

func TestOpenRootRefusesAParentLinkOut(t *testing.T) {
	env, _ := project(t, map[string]string{"in.txt": "inside\n"})
	outside, _ := outsideDir(t)
	if err := os.Symlink(outside, filepath.Join(env.Dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(env.Dir, "dirlink", "secret.txt")
	if b, err := os.ReadFile(p); err != nil || !strings.Contains(string(b), "SECRET") {
		t.Fatalf("opening by name follows the link: %q %v", b, err)
	}
	err := env.inRoot(p, func(root *os.Root, rel string) error {
		if rel != filepath.Join("dirlink", "secret.txt") {
			t.Fatalf("rel %q", rel)
		}
		if f, err := root.Open(rel); err == nil {
			f.Close()
			t.Fatal("the root opened a file through a link out of it")
		}
		if err := writeFile(root, filepath.Join("dirlink", "new.txt"), p, []byte("x")); err == nil {
			t.Fatal("the root wrote through a link out of it")
		}
		var seen []string
		if err := walk(context.Background(), root.FS(), ".", func(rel string, d fs.DirEntry) error {
			seen = append(seen, rel)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(seen, "dirlink/secret.txt") {
			t.Fatalf("the walk followed the link: %v", seen)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatal("a file was written outside the roots")
	}
	if _, _, err := env.openRoot("/etc/passwd"); !errors.Is(err, ErrOutsideRoots) {
		t.Fatalf("a root for a path outside the roots: %v", err)
	}
}

// defaultRules is a Permit that applies the default rules: allowed calls
// run, the others are recorded and refused (as a user rejecting them).
func defaultRules(asked *[]Ask) func(context.Context, Ask) error {
	return func(_ context.Context, a Ask) error {
		switch permission.EvaluateAll(a.Permission, a.Patterns, permission.Defaults).Effect {
		case permission.Allow:
			return nil
		case permission.Deny:
			return errors.New("denied by a rule")
		}
		*asked = append(*asked, a)
		return errors.New("the user rejected permission")
	}
}

func TestSensitiveFiles(t *testing.T) {
	env, _ := project(t, map[string]string{
		".env":                "SECRET=xyz\n",
		".env.example":        "SECRET=xyz-example\n",
		"conf/.ENV.local":     "SECRET=xyz-upper\n",
		"deploy/id_rsa":       "KEY xyz\n",
		".ssh/config":         "Host xyz\n",
		"main.go":             "package main // xyz\n",
		"deploy/server.key.x": "not a key xyz\n",
	})
	if err := os.Symlink(".env", filepath.Join(env.Dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	var asked []Ask
	env.Permit = defaultRules(&asked)

	res := mustCall(t, env, "grep", map[string]any{"pattern": "xyz"})
	for _, not := range []string{"SECRET=xyz\n", "xyz-upper", "KEY xyz", "Host xyz", "notes.txt"} {
		if strings.Contains(res.Output+"\n", not) {
			t.Fatalf("grep returned a sensitive file's %q:\n%s", not, res.Output)
		}
	}
	for _, want := range []string{"main.go", ".env.example:\n  Line 1: SECRET=xyz-example", "server.key.x", "(5 sensitive paths not searched"} {
		if !strings.Contains(res.Output, want) {
			t.Fatalf("grep misses %q:\n%s", want, res.Output)
		}
	}
	res = mustCall(t, env, "glob", map[string]any{"pattern": "**/*"})
	lines := strings.Split(res.Output, "\n")
	for _, not := range []string{".env", "conf/.ENV.local", "deploy/id_rsa", ".ssh/config"} {
		if slices.Contains(lines, filepath.Join(env.Dir, not)) {
			t.Fatalf("glob lists %s:\n%s", not, res.Output)
		}
	}
	if !slices.Contains(lines, filepath.Join(env.Dir, ".env.example")) || !strings.Contains(res.Output, "(4 sensitive paths left out") {
		t.Fatalf("glob:\n%s", res.Output)
	}
	res = mustCall(t, env, "list", map[string]any{})
	if strings.Contains(res.Output, "  .env\n") || strings.Contains(res.Output, "id_rsa") || strings.Contains(res.Output, ".ENV.local") ||
		strings.Contains(res.Output, ".ssh") || !strings.Contains(res.Output, "  .env.example\n") || !strings.Contains(res.Output, "(4 sensitive paths left out") {
		t.Fatalf("list:\n%s", res.Output)
	}
	res = mustCall(t, env, "read", map[string]any{"filePath": "."})
	if strings.Contains(res.Output, ".env\n") || strings.Contains(res.Output, ".ssh") || !strings.Contains(res.Output, ".env.example\n") {
		t.Fatalf("read of the directory:\n%s", res.Output)
	}
	if len(asked) != 0 {
		t.Fatalf("listing and searching asked %+v", asked)
	}

	// Reading, editing and writing one asks, and a rejection leaves it be.
	for _, c := range []struct {
		tool, perm, pattern string
		args                map[string]any
	}{
		{"read", "read", ".env", map[string]any{"filePath": ".env"}},
		{"read", "read", ".env", map[string]any{"filePath": "notes.txt"}},
		{"read", "read", "deploy/id_rsa", map[string]any{"filePath": "deploy/id_rsa"}},
		{"read", "read", ".ssh/config", map[string]any{"filePath": ".ssh/config"}},
		{"read", "read", "conf/.ENV.local", map[string]any{"filePath": "conf/.ENV.local"}},
		{"read", "read", ".ssh", map[string]any{"filePath": ".ssh"}},
		{"edit", "edit", ".env", map[string]any{"filePath": ".env", "oldString": "xyz", "newString": "abc"}},
		// Not "Could not find oldString": an edit does not tell what a
		// sensitive file holds before it is allowed.
		{"edit", "edit", ".env", map[string]any{"filePath": ".env", "oldString": "guess", "newString": "abc"}},
		{"write", "edit", ".env", map[string]any{"filePath": ".env", "content": "SECRET=abc\n"}},
		{"write", "edit", "deploy/id_rsa", map[string]any{"filePath": "deploy/id_rsa", "content": "x"}},
	} {
		asked = nil
		res, err := call(t, env, c.tool, c.args)
		if err == nil || !strings.Contains(err.Error(), "rejected") || strings.Contains(res.Output, "xyz") {
			t.Fatalf("%s %v: %v %q, want a rejected ask", c.tool, c.args, err, res.Output)
		}
		if len(asked) != 1 || asked[0].Permission != c.perm || asked[0].Patterns[0] != c.pattern || !slices.Equal(asked[0].Always, []string{c.pattern}) {
			t.Fatalf("%s %v asked %+v", c.tool, c.args, asked)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(env.Dir, ".env")); string(b) != "SECRET=xyz\n" {
		t.Fatalf(".env was changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(env.Dir, "deploy/id_rsa")); string(b) != "KEY xyz\n" {
		t.Fatalf("id_rsa was changed: %q", b)
	}

	// A template is an ordinary file.
	asked = nil
	res = mustCall(t, env, "read", map[string]any{"filePath": ".env.example"})
	if !strings.Contains(res.Output, "1: SECRET=xyz-example") {
		t.Fatalf("read .env.example: %s", res.Output)
	}
	mustCall(t, env, "edit", map[string]any{"filePath": ".env.example", "oldString": "xyz-example", "newString": "abc"})
	if b, _ := os.ReadFile(filepath.Join(env.Dir, ".env.example")); string(b) != "SECRET=abc\n" || len(asked) != 0 {
		t.Fatalf(".env.example: %q, asked %+v", b, asked)
	}

	// Once allowed, an edit of a sensitive file runs, and a directory of
	// secrets lists what it holds.
	env.Permit = nil
	res = mustCall(t, env, "read", map[string]any{"filePath": ".ssh"})
	if !strings.Contains(res.Output, "\nconfig\n") {
		t.Fatalf("allowed read of .ssh: %s", res.Output)
	}
	mustCall(t, env, "edit", map[string]any{"filePath": ".env", "oldString": "xyz", "newString": "abc"})
	if b, _ := os.ReadFile(filepath.Join(env.Dir, ".env")); string(b) != "SECRET=abc\n" {
		t.Fatalf("allowed edit of .env: %q", b)
	}
}

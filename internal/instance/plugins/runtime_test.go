package plugins

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageEntry: a package's entry module comes from package.json's
// exports, module or main, else index.js; one that names nothing that
// exists, or a path out of the package, has no entry point.
func TestPackageEntry(t *testing.T) {
	cases := []struct {
		name, pkg string
		files     []string
		want      string // file name, or "" for an error
	}{
		{"exports string", `{"exports":"./dist/a.mjs","main":"b.js"}`, []string{"dist/a.mjs", "b.js"}, "dist/a.mjs"},
		{"exports import condition", `{"exports":{".":{"types":"./x.d.ts","import":"./esm.js","require":"./cjs.js"}}}`, []string{"esm.js", "cjs.js"}, "esm.js"},
		{"exports conditions without dot", `{"exports":{"default":"./d.js"}}`, []string{"d.js"}, "d.js"},
		{"module before main", `{"module":"m.js","main":"c.js"}`, []string{"m.js", "c.js"}, "m.js"},
		{"main", `{"main":"./lib/index.js"}`, []string{"lib/index.js"}, "lib/index.js"},
		{"index.js fallback", `{}`, []string{"index.js"}, "index.js"},
		{"main missing, index.js there", `{"main":"gone.js"}`, []string{"index.js"}, "index.js"},
		{"no entry point", `{"name":"x"}`, []string{"README.md"}, ""},
		{"main out of the package", `{"main":"../outside.js"}`, nil, ""},
		{"main is a directory", `{"main":"lib"}`, []string{"lib/x.js"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "pkg")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(root, "outside.js"), []byte("x"), 0o644)
			os.WriteFile(filepath.Join(dir, "package.json"), []byte(c.pkg), 0o644)
			for _, f := range c.files {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
				os.WriteFile(filepath.Join(dir, f), []byte("export default async () => ({})"), 0o644)
			}
			got, err := packageEntry(dir)
			if c.want == "" {
				if err == nil || !strings.Contains(err.Error(), "no entry point") {
					t.Fatalf("entry %q, err %v: want no entry point", got, err)
				}
				return
			}
			if err != nil || got != filepath.Join(dir, c.want) {
				t.Fatalf("entry %q, err %v: want %s", got, err, c.want)
			}
		})
	}
	if _, err := packageEntry(t.TempDir()); err == nil {
		t.Fatal("a directory without package.json has an entry")
	}
}

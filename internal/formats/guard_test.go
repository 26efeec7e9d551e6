package formats

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoFormatBranchesOutside: code outside this package never compares a
// value with a registered format or switches on one (a default such as
// "Chat when none is set" is an assignment, not a branch). A new format
// must not need edits anywhere else; the fake provider, which plays the
// remote side of every format, and tests are exempt.
func TestNoFormatBranchesOutside(t *testing.T) {
	names := registeredNames(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := filepath.Abs(".")
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case path == self, d.Name() == "node_modules", d.Name() == "testdata", strings.HasPrefix(d.Name(), "."),
				path == filepath.Join(root, "internal", "fakeprovider"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		isFormat := func(e ast.Expr) bool {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok {
				return false
			}
			pkg, ok := sel.X.(*ast.Ident)
			return ok && pkg.Name == "formats" && names[sel.Sel.Name]
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isFormat(n.X) || isFormat(n.Y)) {
					t.Errorf("%s: compares with a format", fset.Position(n.Pos()))
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if isFormat(e) {
						t.Errorf("%s: switches on a format", fset.Position(e.Pos()))
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d files checked: is the walk rooted at the module?", checked)
	}
}

// registeredNames are the names of the package-level Format variables
// (the registration lines).
func registeredNames(t *testing.T) map[string]bool {
	src, err := os.ReadFile("formats.go")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "formats.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, v := range vs.Values {
				if call, ok := v.(*ast.CallExpr); ok {
					if fn, ok := call.Fun.(*ast.Ident); ok && fn.Name == "register" {
						names[vs.Names[i].Name] = true
					}
				}
			}
		}
	}
	if len(names) != Count() {
		t.Fatalf("found %d registration lines, %d formats registered", len(names), Count())
	}
	return names
}

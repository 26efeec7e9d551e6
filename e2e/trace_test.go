package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/agentgate/agentgate/internal/testenv"
)

// plainPrograms are the programs this package may run with its own
// environment: the go command (with the real caches) and git (reading
// the checkout).
var plainPrograms = map[string]bool{"go": true, "git": true}

// TestToolsGetTheirOwnHome reads this package's sources: every process a
// test starts with exec.Command or exec.CommandContext, but go and git,
// gets an environment of its own (cmd.Env set in the same function), and
// no such environment is os.Environ() extended by hand — it comes from
// testenv.ToolEnv or testenv.ToolVars (opencodeEnv, the server's env,
// tmux's), so that npm, node, Bun, OpenCode, tmux, Chromium and the real
// binary keep their homes, caches and profiles out of the user's home.
// Most tests that run them are too slow to run twice under
// testenv.RunIsolated; TestToolsWriteOnlyTempDirs runs one of each kind.
func TestToolsGetTheirOwnHome(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "*.go"))
	var problems []string
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			problems = append(problems, checkCommands(fset, fn.Body)...)
		}
	}
	if len(problems) > 0 {
		t.Fatalf("processes started without a home of their own (use testenv.ToolEnv or testenv.Command):\n%s", strings.Join(problems, "\n"))
	}
}

// checkCommands checks the exec.Command calls of one function body (the
// function literals inside it included).
func checkCommands(fset *token.FileSet, body *ast.BlockStmt) []string {
	var problems []string
	withEnv := map[string]bool{}       // variables whose Env is assigned
	assigned := map[token.Pos]string{} // an exec.Command call → the variable it is assigned to
	ast.Inspect(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return true
		}
		for i, lhs := range as.Lhs {
			if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "Env" {
				withEnv[exprName(sel.X)] = true
				if callsOSEnviron(as.Rhs[i]) {
					problems = append(problems, fset.Position(as.Pos()).String()+": an Env built from os.Environ()")
				}
			}
			if _, ok := execCommand(as.Rhs[i]); ok {
				assigned[as.Rhs[i].Pos()] = exprName(lhs)
			}
		}
		return true
	})
	ast.Inspect(body, func(n ast.Node) bool {
		e, ok := n.(ast.Expr)
		if !ok {
			return true
		}
		prog, ok := execCommand(e)
		if !ok || plainPrograms[prog] {
			return true
		}
		if name := assigned[e.Pos()]; name == "" || !withEnv[name] {
			problems = append(problems, fset.Position(e.Pos()).String()+": "+prog+" runs with this process's environment")
		}
		return true
	})
	return problems
}

// execCommand reports whether e is a call of exec.Command or
// exec.CommandContext, and the program it names (its literal value, or
// its source for an expression).
func execCommand(e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || exprName(sel.X) != "exec" || (sel.Sel.Name != "Command" && sel.Sel.Name != "CommandContext") {
		return "", false
	}
	i := 0
	if sel.Sel.Name == "CommandContext" {
		i = 1
	}
	if len(call.Args) <= i {
		return "", false
	}
	if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
		v, _ := strconv.Unquote(lit.Value)
		return v, true
	}
	return exprName(call.Args[i]), true
}

// exprName is a variable, field or package name as written (s.cmd,
// login), or "" for another expression.
func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		if x := exprName(e.X); x != "" {
			return x + "." + e.Sel.Name
		}
	case *ast.IndexExpr:
		if x := exprName(e.X); x != "" {
			return x + "[]"
		}
	}
	return ""
}

// callsOSEnviron reports whether e calls os.Environ.
func callsOSEnviron(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && exprName(sel.X) == "os" && sel.Sel.Name == "Environ" {
				found = true
			}
		}
		return !found
	})
	return found
}

// TestToolsWriteOnlyTempDirs runs a test of each kind of tool this
// package starts — node with the official SDKs, Chromium, the OpenCode
// TUI under tmux, Bun in the instance's plugin host — with an empty home
// and empty XDG and temporary directories: all stay empty. (About 15 s
// more; the other tool tests are too slow to run twice, see
// TestToolsGetTheirOwnHome.)
func TestToolsWriteOnlyTempDirs(t *testing.T) {
	bin := caddyBinary(t)
	testenv.RunIsolated(t, "^(TestOfficialSDKsInferenceAPI|TestInstanceBrowserCrossSite|TestOpenCodeTUIJourney|TestInstanceClientJourney)$", envBinary+"="+bin)
}

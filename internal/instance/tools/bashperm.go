package tools

import (
	"context"
	"path"
	"path/filepath"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// A bash call's permissions come from its parsed command text, not from
// the text as a whole: every simple command it runs, at any depth (lists,
// pipelines, subshells, blocks, loops, conditionals, command and process
// substitutions, the code of sh -c, eval and trap), is checked by the
// rules under its own name and arguments, once the wrappers that only
// change how it runs (env, timeout, nice, xargs, sudo, ...) are taken off.
// Its redirections are edit and read asks on their files, and its cds
// move where relative redirections land. What the text cannot show (a
// command whose name is computed when it runs, eval's code, a function
// that may shadow a command, a redirection to a computed path) is an
// unknown pattern: allowed only when the rules allow anything.

// The bounds of a scan.
const (
	maxBashDepth = 8     // nested code (sh -c, eval, trap) parsed
	maxBashSteps = 20000 // statements and commands visited
	maxBashDirs  = 8     // directories a script may be in at one point
)

// bashScan is what a command text does, as far as permissions go.
type bashScan struct {
	// commands are the simple commands it runs, after unwrapping.
	commands []bashCommand
	// unknown are the texts of what it runs that its text does not show.
	unknown []string
	// files are what its redirections and cds touch.
	files []bashFile
}

// bashCommand is one simple command: the bash patterns it is checked
// under (as written, and under its base name when written with a
// directory) and the ones an "always" reply allows.
type bashCommand struct {
	patterns []string
	always   []string
}

// bashFile is a file a redirection reads ("read") or writes ("edit"), or a
// directory a cd enters ("dir"). Path is absolute and clean; it is empty
// when the text does not tell (then Text is the word as written).
type bashFile struct {
	kind string
	path string
	text string
}

// scanBash parses a command text run in dir and lists what it does. It
// reports false when the text does not parse (or is too large to follow):
// then nothing it does is known.
func scanBash(script, dir string) (bashScan, bool) {
	s := &bashScanner{dirs: bashDirs{cur: []string{filepath.Clean(dir)}}}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	if err != nil {
		return bashScan{}, false
	}
	s.stmts(f.Stmts, bashSrc{text: script})
	if s.steps > maxBashSteps {
		return bashScan{}, false
	}
	return s.scan, true
}

type bashScanner struct {
	scan  bashScan
	steps int
	dirs  bashDirs
}

// bashDirs are the directories the script may be in at a point of the
// scan (unknown after a cd to a computed place), and pushd's stack.
type bashDirs struct {
	cur     []string
	unknown bool
	stack   []bashDirs
}

// bashSrc is the text being scanned (the call's, or code nested in it),
// its nesting depth, and the privilege wrapper (sudo) its commands run
// under.
type bashSrc struct {
	text  string
	depth int
	wrap  string
}

// of is a node's text.
func (c bashSrc) of(n syntax.Node) string {
	a, b := n.Pos().Offset(), n.End().Offset()
	if a <= b && b <= uint(len(c.text)) {
		return c.text[a:b]
	}
	return ""
}

func (s *bashScanner) step() bool {
	s.steps++
	return s.steps > maxBashSteps
}

func (s *bashScanner) unknown(text string) {
	s.scan.unknown = append(s.scan.unknown, strings.TrimSpace(text))
}

// scoped runs fn in a subshell: its cds do not outlast it.
func (s *bashScanner) scoped(fn func()) {
	saved := s.dirs
	fn()
	s.dirs = saved
}

// conditional runs fn as code that may or may not run: afterwards the
// script may be where it was or where fn left it.
func (s *bashScanner) conditional(fn func()) {
	before := s.dirs
	fn()
	s.dirs = before.union(s.dirs)
}

// loop runs fn as a loop body: a second pass starts from where the first
// may have left the script, so redirections before a cd in the body are
// seen in both directories.
func (s *bashScanner) loop(fn func()) {
	before := s.dirs
	fn()
	if s.dirs.same(before) {
		return
	}
	s.dirs = before.union(s.dirs)
	fn()
	s.dirs = before.union(s.dirs)
}

func (d bashDirs) union(o bashDirs) bashDirs {
	if d.unknown || o.unknown {
		return bashDirs{unknown: true, stack: d.stack}
	}
	out := bashDirs{cur: append([]string(nil), d.cur...), stack: d.stack}
	for _, p := range o.cur {
		if !contains(out.cur, p) {
			out.cur = append(out.cur, p)
		}
	}
	if len(out.cur) > maxBashDirs {
		return bashDirs{unknown: true, stack: d.stack}
	}
	return out
}

func (d bashDirs) same(o bashDirs) bool {
	if d.unknown != o.unknown || len(d.cur) != len(o.cur) || len(d.stack) != len(o.stack) {
		return false
	}
	for i := range d.cur {
		if d.cur[i] != o.cur[i] {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (s *bashScanner) stmts(list []*syntax.Stmt, c bashSrc) {
	for _, st := range list {
		s.stmt(st, c)
	}
}

func (s *bashScanner) stmt(st *syntax.Stmt, c bashSrc) {
	if st == nil || s.step() {
		return
	}
	if st.Background || st.Coprocess || st.Disown {
		saved := s.dirs
		defer func() { s.dirs = saved }()
	}
	// Redirections are opened before the command runs, where the script
	// is then.
	for _, r := range st.Redirs {
		s.redirect(r, c)
	}
	if st.Cmd != nil {
		s.command(st.Cmd, c)
	}
}

func (s *bashScanner) command(cmd syntax.Command, c bashSrc) {
	switch x := cmd.(type) {
	case *syntax.CallExpr:
		s.call(x, c)
	case *syntax.Subshell:
		s.scoped(func() { s.stmts(x.Stmts, c) })
	case *syntax.Block:
		s.stmts(x.Stmts, c)
	case *syntax.IfClause:
		s.ifClause(x, c)
	case *syntax.WhileClause:
		s.stmts(x.Cond, c)
		s.loop(func() {
			s.stmts(x.Do, c)
			s.stmts(x.Cond, c)
		})
	case *syntax.ForClause:
		s.substs(x.Loop, c)
		s.loop(func() { s.stmts(x.Do, c) })
	case *syntax.CaseClause:
		s.substs(x.Word, c)
		for _, it := range x.Items {
			for _, p := range it.Patterns {
				s.substs(p, c)
			}
			s.conditional(func() { s.stmts(it.Stmts, c) })
		}
	case *syntax.BinaryCmd:
		switch x.Op {
		case syntax.AndStmt, syntax.OrStmt:
			s.stmt(x.X, c)
			s.conditional(func() { s.stmt(x.Y, c) })
		default: // each side of a pipe runs in a subshell
			s.scoped(func() { s.stmt(x.X, c) })
			s.scoped(func() { s.stmt(x.Y, c) })
		}
	case *syntax.FuncDecl:
		// A function may shadow a command the rules allow by name: the
		// script asks. Its body is checked like any code.
		s.unknown(c.of(x))
		s.scoped(func() { s.stmt(x.Body, c) })
	case *syntax.DeclClause:
		s.decl(x, c)
	case *syntax.TimeClause:
		s.stmt(x.Stmt, c)
	case *syntax.CoprocClause:
		s.scoped(func() { s.stmt(x.Stmt, c) })
	default: // (( )), [[ ]], let: no command of their own
		s.substs(cmd, c)
	}
}

func (s *bashScanner) ifClause(x *syntax.IfClause, c bashSrc) {
	s.stmts(x.Cond, c)
	s.conditional(func() { s.stmts(x.Then, c) })
	if x.Else != nil {
		s.conditional(func() { s.ifClause(x.Else, c) })
	}
}

// substs scans the command and process substitutions in a node's words;
// each runs in a subshell.
func (s *bashScanner) substs(n syntax.Node, c bashSrc) {
	syntax.Walk(n, func(n syntax.Node) bool {
		switch x := n.(type) {
		case *syntax.CmdSubst:
			s.scoped(func() { s.stmts(x.Stmts, c) })
			return false
		case *syntax.ProcSubst:
			s.scoped(func() { s.stmts(x.Stmts, c) })
			return false
		}
		return true
	})
}

func (s *bashScanner) call(x *syntax.CallExpr, c bashSrc) {
	s.substs(x, c)
	for _, a := range x.Assigns {
		if s.riskyAssign(a, c) {
			s.unknown(c.of(x))
			break
		}
	}
	if len(x.Args) == 0 {
		return
	}
	words := make([]bashWord, len(x.Args))
	for i, w := range x.Args {
		words[i] = c.word(w)
	}
	s.run(words, c)
}

// riskyAssign reports an assignment that changes what later commands run:
// a variable that names programs, libraries or startup code, or a value
// with code in it (bash evaluates a variable's value as an expression,
// substitutions included, in arithmetic).
func (s *bashScanner) riskyAssign(a *syntax.Assign, c bashSrc) bool {
	if a.Name != nil && dangerousVar(a.Name.Value) {
		return true
	}
	if a.Value != nil && hasCode(c.word(a.Value)) {
		return true
	}
	if a.Array != nil {
		for _, e := range a.Array.Elems {
			if e.Value != nil && hasCode(c.word(e.Value)) {
				return true
			}
		}
	}
	return false
}

func hasCode(w bashWord) bool {
	return w.ok && (strings.Contains(w.lit, "$(") || strings.Contains(w.lit, "`"))
}

// dangerousVar reports a variable whose value decides what a command
// runs: the search path, libraries, shell and interpreter startup code,
// programs that tools start (pager, editor), git's settings, word
// splitting.
func dangerousVar(name string) bool {
	switch name {
	case "PATH", "BASH_ENV", "ENV", "PAGER", "EDITOR", "VISUAL", "NODE_OPTIONS", "NODE_PATH", "PYTHONPATH",
		"PYTHONSTARTUP", "PROMPT_COMMAND", "IFS", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4", "HOME",
		"XDG_CONFIG_HOME", "PERL5OPT", "PERL5LIB", "RUBYOPT", "RUBYLIB", "MANPAGER", "LESSOPEN":
		return true
	}
	for _, p := range []string{"LD_", "GIT_", "DYLD_", "BASH_FUNC_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// decl is export, declare, local, readonly, typeset: a command, and
// assignments that may change what later commands run.
func (s *bashScanner) decl(x *syntax.DeclClause, c bashSrc) {
	s.substs(x, c)
	text := c.of(x)
	words := []bashWord{{lit: x.Variant.Value, ok: true, text: x.Variant.Value}}
	risky := x.Variant.Value == "nameref"
	for _, a := range x.Args {
		words = append(words, bashWord{text: c.of(a)})
		if !a.Naked {
			risky = risky || s.riskyAssign(a, c)
			continue
		}
		switch {
		case a.Name != nil:
			// export NAME: no value given here.
		case a.Value != nil:
			w := c.word(a.Value)
			switch {
			case !w.ok:
				risky = true // a computed name=value
			case strings.HasPrefix(w.lit, "-") || strings.HasPrefix(w.lit, "+"):
				risky = risky || strings.Contains(w.lit, "n") // -n: a name for another variable
			default:
				name, _, _ := strings.Cut(w.lit, "=")
				risky = risky || dangerousVar(name) || hasCode(w)
			}
		}
	}
	if risky {
		s.unknown(text)
	}
	s.plain(words, x.Variant.Value, c)
}

// bashWord is a word of a command: its value when the text shows it, and
// the text as written.
type bashWord struct {
	lit  string
	ok   bool
	text string
	// expands is an unquoted glob, brace expansion or leading ~: the
	// shell turns it into other words.
	expands bool
}

// word is a word's value: unquoted text with its backslashes removed,
// single-quoted text, double-quoted text without expansions. Anything
// expanded when the command runs (parameters, substitutions, arithmetic,
// extended globs, $'...' escapes) leaves the value unknown.
func (c bashSrc) word(w *syntax.Word) bashWord {
	out := bashWord{text: c.of(w), ok: true}
	var val, bare strings.Builder // bare: the unquoted characters, others as x
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if i == 0 && strings.HasPrefix(p.Value, "~") {
				out.expands = true
			}
			unescape(p.Value, false, &val, &bare)
		case *syntax.SglQuoted:
			if p.Dollar && strings.Contains(p.Value, `\`) {
				out.ok = false
			}
			val.WriteString(p.Value)
			bare.WriteString(strings.Repeat("x", len(p.Value)))
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, isLit := q.(*syntax.Lit)
				if !isLit {
					out.ok = false
					break
				}
				unescape(l.Value, true, &val, &bare)
			}
		default:
			out.ok = false
		}
	}
	if !out.ok {
		return bashWord{text: out.text}
	}
	out.lit = val.String()
	out.expands = out.expands || globby(bare.String())
	return out
}

// unescape writes a literal's value, its backslashes removed as the
// shell removes them (in double quotes only before $ ` " \ and newline),
// and its unquoted characters to bare (others as x).
func unescape(v string, quoted bool, val, bare *strings.Builder) {
	for i := 0; i < len(v); i++ {
		ch := v[i]
		if ch == '\\' && i+1 < len(v) {
			n := v[i+1]
			if !quoted || strings.IndexByte("$`\"\\\n", n) >= 0 {
				i++
				if n != '\n' {
					val.WriteByte(n)
					bare.WriteByte('x')
				}
				continue
			}
		}
		val.WriteByte(ch)
		if quoted {
			bare.WriteByte('x')
		} else {
			bare.WriteByte(ch)
		}
	}
}

// globby reports unquoted characters the shell expands into other words:
// * and ?, a [ ] class, a { } with a comma or a range.
func globby(bare string) bool {
	if strings.ContainsAny(bare, "*?") {
		return true
	}
	if i := strings.IndexByte(bare, '['); i >= 0 && strings.IndexByte(bare[i+1:], ']') >= 0 {
		return true
	}
	if i := strings.IndexByte(bare, '{'); i >= 0 {
		if j := strings.LastIndexByte(bare, '}'); j > i && strings.ContainsAny(bare[i:j], ",") || j > i && strings.Contains(bare[i:j], "..") {
			return true
		}
	}
	return false
}

// render is a command's bash pattern: its words' values joined by single
// spaces, a word whose value is unknown as written (so only a rule's *
// matches it).
func render(words []bashWord) string {
	parts := make([]string, len(words))
	for i, w := range words {
		switch {
		case !w.ok:
			parts[i] = w.text
		case w.lit == "":
			parts[i] = "''"
		default:
			parts[i] = w.lit
		}
	}
	return strings.Join(parts, " ")
}

// bashPrefix is what an "always" reply allows of a command: its name, and
// its second word when that is a subcommand ("git status", "go test",
// "npm run"); "" when the name is not a plain word.
func bashPrefix(words []bashWord) string {
	if len(words) == 0 || !words[0].ok || words[0].lit == "" || strings.ContainsAny(words[0].lit, "*? \t\n\\") {
		return ""
	}
	p := words[0].lit
	if len(words) >= 2 {
		w := words[1]
		if w.ok && w.lit != "" && !strings.HasPrefix(w.lit, "-") && !strings.ContainsAny(w.lit, "/.=$|&;<>*? \t\n\\'\"`") {
			p += " " + w.lit
		}
	}
	return p
}

// systemDirs are where a wrapper written with its directory is still the
// wrapper (./env is the project's, not env).
var systemDirs = map[string]bool{"/bin": true, "/usr/bin": true, "/usr/local/bin": true, "/sbin": true, "/usr/sbin": true}

// shells are the ones whose -c code is parsed.
var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "ash": true, "mksh": true}

// run checks a simple command given as words.
func (s *bashScanner) run(words []bashWord, c bashSrc) {
	if len(words) == 0 || s.step() {
		return
	}
	name := words[0]
	if !name.ok || name.expands || name.lit == "" {
		// The command's name is computed when it runs.
		s.unknown(render(words))
		return
	}
	base, known := name.lit, true
	if strings.Contains(base, "/") {
		dir, b := path.Split(base)
		base, known = b, systemDirs[path.Clean(dir)]
		if base == "" {
			s.unknown(render(words))
			return
		}
	}
	args := words[1:]
	if known {
		switch base {
		case "cd", "pushd", "popd":
			s.cd(base, args)
			return
		case "eval":
			// eval's code asks unless anything is allowed; the rules
			// still see its commands when it is written out.
			s.unknown(render(words))
			if lits, ok := literals(args); ok {
				s.nested(strings.Join(lits, " "), c, false)
			}
			return
		case "source", ".":
			if len(args) == 0 || !args[0].ok || args[0].expands {
				s.unknown(render(words))
				return
			}
		case "trap":
			s.plain(words, base, c)
			if len(args) > 0 && !strings.HasPrefix(args[0].lit, "-") {
				if !args[0].ok {
					s.unknown(render(words))
				} else {
					s.nested(args[0].lit, c, true)
				}
			}
			return
		case "alias":
			s.plain(words, base, c)
			for _, a := range args {
				if _, v, ok := strings.Cut(a.lit, "="); a.ok && ok {
					s.nested(v, c, true)
				} else if !a.ok {
					s.unknown(render(words))
				}
			}
			return
		case "find":
			s.plain(words, base, c)
			s.find(args, c)
			return
		case "hash", "enable":
			// hash -p binds a command name to any program, enable -f
			// loads a builtin from a library: later names mean other
			// programs.
			flag := "p"
			if base == "enable" {
				flag = "f"
			}
			for _, a := range args {
				if !a.ok || strings.HasPrefix(a.lit, "-") && strings.Contains(a.lit, flag) {
					s.unknown(render(words))
					break
				}
			}
		}
		if shells[base] {
			s.shell(words, c)
			return
		}
		if rest, wrap, ok, isWrapper := s.unwrap(base, args, c); isWrapper {
			switch {
			case !ok:
				s.unknown(render(words))
			case rest == nil:
				s.plain(words, base, c)
			default:
				if wrap != "" {
					c.wrap = strings.TrimSpace(c.wrap + " " + wrap)
				}
				s.run(rest, c)
			}
			return
		}
	}
	s.plain(words, base, c)
}

// plain records a command checked by its own name and arguments.
func (s *bashScanner) plain(words []bashWord, base string, c bashSrc) {
	forms := [][]bashWord{words}
	if base != words[0].lit {
		// Written with a directory: checked under its base name too, so
		// a rule about rm also covers /bin/rm, and an allow of rm alone
		// does not cover ./rm.
		b := append([]bashWord{{lit: base, ok: true, text: base}}, words[1:]...)
		forms = append(forms, b)
	}
	var cmd bashCommand
	for _, f := range forms {
		p, a := render(f), bashPrefix(f)
		if c.wrap != "" {
			p = c.wrap + " " + p
			if a != "" {
				a = c.wrap + " " + a
			}
		}
		cmd.patterns = append(cmd.patterns, p)
		if a != "" {
			cmd.always = append(cmd.always, a+" *")
		}
	}
	if c.wrap != "" {
		// The command without its privilege wrapper is checked too.
		s.plain(words, base, bashSrc{text: c.text, depth: c.depth})
	}
	s.scan.commands = append(s.scan.commands, cmd)
}

// literals are the words' values, false when one is unknown.
func literals(words []bashWord) ([]string, bool) {
	out := make([]string, len(words))
	for i, w := range words {
		if !w.ok {
			return nil, false
		}
		out[i] = w.lit
	}
	return out, true
}

// nested scans code the command runs (sh -c, eval, trap); inSubshell when
// its cds do not move the script.
func (s *bashScanner) nested(code string, c bashSrc, inSubshell bool) {
	if c.depth >= maxBashDepth {
		s.unknown(code)
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(code), "")
	if err != nil {
		s.unknown(code)
		return
	}
	inner := bashSrc{text: code, depth: c.depth + 1, wrap: c.wrap}
	if inSubshell {
		s.scoped(func() { s.stmts(f.Stmts, inner) })
	} else {
		s.stmts(f.Stmts, inner)
	}
}

// shell is sh, bash, ... : with -c its code is scanned (the shell is
// only how it runs); otherwise it runs a script or its input, a command
// of its own.
func (s *bashScanner) shell(words []bashWord, c bashSrc) {
	args := words[1:]
	code := false
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !a.ok {
			s.unknown(render(words))
			return
		}
		switch {
		case a.lit == "--" || a.lit == "-":
			i++
		case strings.HasPrefix(a.lit, "--"):
			if a.lit == "--rcfile" || a.lit == "--init-file" {
				i++
			}
			continue
		case len(a.lit) > 1 && (a.lit[0] == '-' || a.lit[0] == '+'):
			if strings.ContainsAny(a.lit[1:], "oO") {
				i++ // -o option
			}
			if a.lit[0] == '-' && strings.Contains(a.lit, "c") {
				code = true
			}
			continue
		}
		break
	}
	if !code {
		s.plain(words, path.Base(words[0].lit), c)
		return
	}
	if i >= len(args) {
		s.unknown(render(words))
		return
	}
	if !args[i].ok {
		s.unknown(render(words))
		return
	}
	s.nested(args[i].lit, c, true)
}

// find checks the commands of its -exec, -execdir, -ok and -okdir, and the
// files its -fprint family writes.
func (s *bashScanner) find(args []bashWord, c bashSrc) {
	for i := 0; i < len(args); i++ {
		switch args[i].lit {
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && !(args[j].ok && (args[j].lit == ";" || args[j].lit == "+")) {
				j++
			}
			s.run(args[i+1:j], c)
			i = j
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			if i+1 < len(args) {
				s.file("edit", args[i+1])
				i++
			}
		}
	}
}

// cd moves the script (cd, pushd, popd). A cd needs no bash permission;
// a literal target is where later relative redirections land, and one
// outside the project asks external_directory. A computed one leaves the
// script's directory unknown.
func (s *bashScanner) cd(name string, args []bashWord) {
	if name == "popd" {
		if n := len(s.dirs.stack); n > 0 && len(args) == 0 {
			s.dirs = s.dirs.stack[n-1]
		} else {
			s.dirs = bashDirs{unknown: true, stack: s.dirs.stack}
		}
		return
	}
	for len(args) > 0 && args[0].ok && (args[0].lit == "-L" || args[0].lit == "-P" || args[0].lit == "-e" || args[0].lit == "-@") {
		args = args[1:]
	}
	if len(args) > 0 && args[0].ok && args[0].lit == "--" {
		args = args[1:]
	}
	saved := s.dirs
	if len(args) != 1 || !args[0].ok || args[0].expands || args[0].lit == "" || args[0].lit == "-" ||
		name == "pushd" && (strings.HasPrefix(args[0].lit, "+") || strings.HasPrefix(args[0].lit, "-")) {
		s.dirs = bashDirs{unknown: true, stack: s.dirs.stack}
	} else {
		t := args[0].lit
		switch {
		case path.IsAbs(t):
			s.dirs = bashDirs{cur: []string{path.Clean(t)}, stack: s.dirs.stack}
		case s.dirs.unknown:
		default:
			next := bashDirs{stack: s.dirs.stack}
			for _, d := range s.dirs.cur {
				if p := filepath.Join(d, t); !contains(next.cur, p) {
					next.cur = append(next.cur, p)
				}
			}
			s.dirs = next
		}
		for _, d := range s.dirs.cur {
			if !s.dirs.unknown {
				s.scan.files = append(s.scan.files, bashFile{kind: "dir", path: d, text: t})
			}
		}
	}
	if name == "pushd" {
		s.dirs.stack = append(append([]bashDirs(nil), saved.stack...), saved)
	}
}

// redirect records the file a redirection opens: fd duplications,
// here-documents and the terminal-like devices touch none.
func (s *bashScanner) redirect(r *syntax.Redirect, c bashSrc) {
	if r.Word != nil {
		s.substs(r.Word, c)
	}
	if r.Hdoc != nil {
		s.substs(r.Hdoc, c)
	}
	if r.Word == nil {
		return
	}
	w := c.word(r.Word)
	kind := ""
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob, syntax.RdrAll, syntax.RdrAllClob,
		syntax.AppAll, syntax.AppAllClob, syntax.RdrInOut:
		kind = "edit"
	case syntax.RdrIn:
		kind = "read"
	case syntax.DplOut, syntax.DplIn:
		if w.ok && fdWord(w.lit) {
			return
		}
		kind = "edit"
		if r.Op == syntax.DplIn {
			kind = "read"
		}
	default:
		return
	}
	s.file(kind, w)
}

// fdWord is a >& or <& target naming a file descriptor (2, 3-, -).
func fdWord(s string) bool {
	s = strings.TrimSuffix(s, "-")
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// quietDevices are files a redirection may read or write with no
// permission.
var quietDevices = map[string]string{
	"/dev/null": "", "/dev/tty": "", "/dev/stdout": "edit", "/dev/stderr": "edit", "/dev/stdin": "read",
	"/dev/zero": "read", "/dev/random": "read", "/dev/urandom": "read",
}

func (s *bashScanner) file(kind string, w bashWord) {
	if !w.ok || w.expands || w.lit == "" {
		s.scan.files = append(s.scan.files, bashFile{kind: kind, text: w.text})
		return
	}
	var paths []string
	switch {
	case path.IsAbs(w.lit):
		paths = []string{path.Clean(w.lit)}
	case s.dirs.unknown:
		s.scan.files = append(s.scan.files, bashFile{kind: kind, text: w.text})
		return
	default:
		for _, d := range s.dirs.cur {
			paths = append(paths, filepath.Join(d, w.lit))
		}
	}
	for _, p := range paths {
		if k, ok := quietDevices[p]; ok && (k == "" || k == kind) {
			continue
		}
		if strings.HasPrefix(p, "/dev/fd/") && fdWord(strings.TrimPrefix(p, "/dev/fd/")) {
			continue
		}
		s.scan.files = append(s.scan.files, bashFile{kind: kind, path: p, text: w.text})
	}
}

// unwrap takes a wrapper off a command: the words of the command it runs
// (nil when it runs none), the privilege wrapper to note ("sudo"), and
// ok false when its options are not understood. isWrapper is false for a
// command that is not a wrapper.
func (s *bashScanner) unwrap(name string, args []bashWord, c bashSrc) (rest []bashWord, wrap string, ok, isWrapper bool) {
	var spec optSpec
	switch name {
	case "command":
		spec = optSpec{short: "pvV"}
		i, ok := spec.skip(args)
		if !ok {
			return nil, "", false, true
		}
		for _, a := range args[:i] {
			if strings.ContainsAny(a.lit, "vV") {
				return nil, "", true, true // a lookup: runs nothing
			}
		}
		return orNil(args[i:]), "", true, true
	case "builtin", "nohup":
		spec = optSpec{}
	case "exec":
		spec = optSpec{short: "cl", shortArg: "a"}
	case "nice":
		spec = optSpec{shortArg: "n", longArg: []string{"adjustment"}}
		if len(args) > 0 && args[0].ok && len(args[0].lit) > 1 && args[0].lit[0] == '-' && fdWord(args[0].lit[1:]) {
			args = args[1:] // nice -10
		}
	case "timeout":
		spec = optSpec{short: "v", shortArg: "sk", long: []string{"preserve-status", "foreground", "verbose"},
			longArg: []string{"signal", "kill-after"}}
		i, ok := spec.skip(args)
		if !ok || i >= len(args) {
			return nil, "", ok, true
		}
		return orNil(args[i+1:]), "", true, true // the duration
	case "time":
		spec = optSpec{short: "pvaq", shortArg: "f", long: []string{"portability", "verbose", "append", "quiet"}, longArg: []string{"format"}}
	case "stdbuf":
		spec = optSpec{shortArg: "ioe", longArg: []string{"input", "output", "error"}}
	case "setsid":
		spec = optSpec{short: "cfw", long: []string{"ctty", "fork", "wait"}}
	case "env":
		spec = optSpec{short: "i0v", shortArg: "uC", long: []string{"ignore-environment", "null", "debug"}, longArg: []string{"unset", "chdir"}}
		i, ok := spec.skip(args)
		if !ok {
			return nil, "", false, true
		}
		rest, ok := assignments(args[i:])
		return orNil(rest), "", ok, true
	case "sudo":
		spec = optSpec{short: "AbEHnPSis", shortArg: "ugCDhprtTUR",
			long:    []string{"preserve-env", "login", "shell", "non-interactive", "background", "askpass", "stdin", "set-home", "preserve-groups"},
			longArg: []string{"user", "group", "chdir", "close-from", "host", "prompt", "role", "type", "command-timeout", "other-user", "chroot"}}
		i, ok := spec.skip(args)
		if !ok {
			return nil, "", false, true
		}
		rest, ok := assignments(args[i:])
		return orNil(rest), "sudo", ok, true
	case "busybox":
		if len(args) == 0 || !args[0].ok || strings.HasPrefix(args[0].lit, "-") {
			return nil, "", true, true
		}
		return args, "", true, true
	case "xargs":
		spec = optSpec{short: "0rtpx", shortArg: "aEdILnPs", shortOpt: "eil",
			long: []string{"null", "no-run-if-empty", "verbose", "interactive", "exit", "open-tty", "show-limits"},
			longArg: []string{"arg-file", "delimiter", "eof", "replace", "max-lines", "max-args", "max-procs", "max-chars",
				"process-slot-var"}}
		i, ok := spec.skip(args)
		if !ok {
			return nil, "", false, true
		}
		cmd := append([]bashWord(nil), args[i:]...)
		if len(cmd) == 0 {
			cmd = []bashWord{{lit: "echo", ok: true, text: "echo"}}
		}
		// The arguments xargs adds are not known: only a rule's * covers
		// them.
		return append(cmd, bashWord{text: "…"}), "", true, true
	default:
		return nil, "", false, false
	}
	i, ok := spec.skip(args)
	if !ok {
		return nil, "", false, true
	}
	return orNil(args[i:]), "", true, true
}

func orNil(words []bashWord) []bashWord {
	if len(words) == 0 {
		return nil
	}
	return words
}

// assignments takes the NAME=value words before env's or sudo's command;
// false when one is computed or sets a dangerous variable.
func assignments(words []bashWord) ([]bashWord, bool) {
	for len(words) > 0 {
		w := words[0]
		if !w.ok {
			return nil, false
		}
		name, _, isAssign := strings.Cut(w.lit, "=")
		if !isAssign || name == "" || strings.HasPrefix(name, "-") {
			break
		}
		if dangerousVar(name) || hasCode(w) {
			return nil, false
		}
		words = words[1:]
	}
	return words, true
}

// optSpec is a wrapper's options: letters of short options without a
// value, with one (attached or the next word), with an optional attached
// one, and long options without and with a value.
type optSpec struct {
	short, shortArg, shortOpt string
	long, longArg             []string
}

// skip returns the index of the first word after the options; false when
// an option is not known or a word is computed.
func (o optSpec) skip(args []bashWord) (int, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !a.ok {
			return 0, false
		}
		switch {
		case a.lit == "--":
			return i + 1, true
		case a.lit == "-" || !strings.HasPrefix(a.lit, "-"):
			return i, true
		case strings.HasPrefix(a.lit, "--"):
			name, _, hasValue := strings.Cut(a.lit[2:], "=")
			switch {
			case contains(o.longArg, name):
				if !hasValue {
					i++
				}
			case contains(o.long, name):
			default:
				return 0, false
			}
		default:
			letters := a.lit[1:]
			for j := 0; j < len(letters); j++ {
				l := letters[j]
				switch {
				case strings.IndexByte(o.short, l) >= 0:
				case strings.IndexByte(o.shortOpt, l) >= 0:
					j = len(letters)
				case strings.IndexByte(o.shortArg, l) >= 0:
					if j == len(letters)-1 {
						i++
					}
					j = len(letters)
				default:
					return 0, false
				}
			}
		}
	}
	return len(args), true
}

// permitBash asks the permissions a command text needs (see scanBash),
// run in dir: bash for its commands, then external_directory, read and
// edit for what its redirections and cds touch. A text that does not
// parse asks for itself as a whole, and may touch any file.
func (env *Env) permitBash(ctx context.Context, command, dir, description string) error {
	meta := map[string]any{"command": command, "description": description}
	scan, ok := scanBash(command, dir)
	if !ok {
		scan = bashScan{unknown: []string{command}, files: []bashFile{{kind: "edit", text: command}}}
	}
	var bash bashAsk
	for _, c := range scan.commands {
		bash.add(c.patterns, c.always)
	}
	bash.addUnknown(scan.unknown)
	var ext, read, edit bashAsk
	var firstReal, firstDir string
	for _, f := range scan.files {
		if f.path == "" {
			ext.addUnknown([]string{f.text})
			if f.kind == "read" {
				read.addUnknown([]string{f.text})
			} else {
				edit.addUnknown([]string{f.text})
			}
			continue
		}
		real, err := env.resolve(f.path)
		if err != nil {
			return err
		}
		if env.external(real) {
			d := real
			if f.kind != "dir" {
				d = filepath.Dir(real)
			}
			pat := filepath.ToSlash(d) + "/*"
			ext.add([]string{pat}, []string{pat})
			if firstReal == "" {
				firstReal, firstDir = real, d
			}
		}
		switch f.kind {
		case "read":
			read.add([]string{env.rel(real)}, nil)
		case "edit":
			edit.add([]string{env.rel(real)}, nil)
		}
	}
	if err := bash.permit(ctx, env, "bash", nil, meta); err != nil {
		return err
	}
	extMeta := map[string]any{"filepath": firstReal, "parentDir": firstDir}
	if firstReal == "" && len(ext.unknown) > 0 {
		extMeta = map[string]any{"filepath": ext.unknown[0]}
	}
	if err := ext.permit(ctx, env, "external_directory", nil, extMeta); err != nil {
		return err
	}
	if err := read.permit(ctx, env, "read", []string{"*"}, nil); err != nil {
		return err
	}
	return edit.permit(ctx, env, "edit", []string{"*"}, nil)
}

// bashAsk gathers one permission's patterns, without repeats.
type bashAsk struct {
	patterns, always, unknown []string
}

func (a *bashAsk) add(patterns, always []string) {
	for _, p := range patterns {
		if !contains(a.patterns, p) {
			a.patterns = append(a.patterns, p)
		}
	}
	for _, p := range always {
		if !contains(a.always, p) {
			a.always = append(a.always, p)
		}
	}
}

func (a *bashAsk) addUnknown(texts []string) {
	for _, t := range texts {
		if !contains(a.patterns, t) {
			a.patterns = append(a.patterns, t)
		}
		if !contains(a.unknown, t) {
			a.unknown = append(a.unknown, t)
		}
	}
}

// permit asks for the gathered patterns, if any. anyAlways is what an
// "always" reply allows when nothing unknown is asked (the file tools'
// "*"); with unknown patterns it allows only the known ones.
func (a *bashAsk) permit(ctx context.Context, env *Env, permission string, anyAlways []string, meta map[string]any) error {
	if len(a.patterns) == 0 {
		return nil
	}
	always := a.always
	if anyAlways != nil {
		always = anyAlways
		if len(a.unknown) > 0 {
			always = nil
			for _, p := range a.patterns {
				if !contains(a.unknown, p) {
					always = append(always, p)
				}
			}
		}
	}
	if meta == nil {
		meta = map[string]any{}
	}
	if permission == "read" || permission == "edit" {
		meta["filepath"] = a.patterns[0]
	}
	return env.permit(ctx, Ask{Permission: permission, Patterns: a.patterns, Always: always, Unknown: a.unknown, Metadata: meta})
}

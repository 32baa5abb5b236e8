// Command yaegicheck reports code that the Yaegi v0.16.1 interpreter, which
// Traefik v3.6 runs plugins with, cannot run or runs differently from the Go
// compiler.
//
// Usage, from inside the module:
//
//	go run ./scripts/yaegicheck [-C dir] [-dialect list] packages...
//
// It lists the named packages with everything they and their tests import
// (go list -test -deps -export) and reports, as file:line:col: message,
//
//   - any imported package outside the standard library and the main module;
//   - in every main-module package of that list, test files included: calls of
//     the min, max and clear builtins, range over an integer or a function,
//     generic type and function declarations, atomic.Pointer, sync.OnceValue
//     and sync.OnceValues, imports of unsafe, syscall and embed, //go:embed
//     directives, a loop variable used inside a go or defer closure or a
//     parallel subtest (Yaegi keeps the pre-Go 1.22 single loop variable),
//     and an assignment with = of several values that mixes calls with
//     other values (Yaegi drops the other values).
//
// With -dialect, a comma-separated list of file paths relative to the module
// root (which may be empty, and may be given more than once), it also reports
// two constructs that Go code needs only to work around the interpreter, in
// every non-test file of those main-module packages except the files listed:
//
//   - a scratch parameter, one whose incoming value is never used because on
//     every path through the body its first reference is as a whole
//     left-hand side of a plain assignment (p = ..., or a, p = ...) that does
//     not mention it otherwise; and
//   - a package-level variable initialized to a standard-library function or
//     method value, such as var itoa = strconv.Itoa.
//
// It exits 0 when it finds nothing, 1 when it reports something and 2 when it
// cannot list or type-check the packages (for example when they do not build)
// or when -dialect lists a path that names no file of the module.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// listedPackage holds the fields of `go list -json` output that the checks use.
type listedPackage struct {
	Dir        string
	ImportPath string
	Name       string
	ForTest    string
	Export     string
	Standard   bool
	GoFiles    []string // for a test variant, the test files of its package too
	ImportMap  map[string]string
	Module     *struct {
		Path      string
		Dir       string
		Main      bool
		GoVersion string
	}
	Error *struct{ Err string }
}

// isTestMain reports whether p is the generated main package of a test binary,
// whose only file lives in the build cache.
func (p *listedPackage) isTestMain() bool {
	return p.Name == "main" && p.ForTest == "" && strings.HasSuffix(p.ImportPath, ".test")
}

func main() {
	dir := flag.String("C", "", "run go list in `dir` instead of the current directory")
	var dialect *dialectCheck
	flag.Func("dialect", "also report interpreter dialect outside the files in `list`, comma-separated paths relative to the module root",
		func(list string) error {
			if dialect == nil {
				dialect = new(dialectCheck)
			}
			for _, name := range strings.Split(list, ",") {
				if name = strings.TrimSpace(name); name != "" {
					dialect.Files = append(dialect.Files, name)
				}
			}
			return nil
		})
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: yaegicheck [-C dir] [-dialect list] packages...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	problems, err := check(*dir, flag.Args(), dialect)
	if err != nil {
		fmt.Fprintln(os.Stderr, "yaegicheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("yaegicheck: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
}

// problem is one finding; Pos.Filename is empty for a finding about a whole
// package.
type problem struct {
	Pos token.Position
	Msg string
}

func (p problem) String() string {
	if p.Pos.Filename == "" {
		return p.Msg
	}
	return p.Pos.String() + ": " + p.Msg
}

// dialectCheck asks check to report interpreter dialect too.
type dialectCheck struct {
	// Files lists the files allowed to hold it, as paths relative to the
	// module root.
	Files []string
}

// allowed returns the set of Files, as cleaned slash paths, and an error if
// one of them is no file of any of the module roots.
func (d *dialectCheck) allowed(roots map[string]bool) (map[string]bool, error) {
	allowed := make(map[string]bool, len(d.Files))
	for _, name := range d.Files {
		clean := path.Clean(filepath.ToSlash(name))
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return nil, fmt.Errorf("-dialect %s: not a path relative to the module root", name)
		}
		found := false
		for root := range roots {
			if info, err := os.Stat(filepath.Join(root, filepath.FromSlash(clean))); err == nil && info.Mode().IsRegular() {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-dialect %s: no such file in the module", name)
		}
		allowed[clean] = true
	}
	return allowed, nil
}

// check lists patterns from dir and returns the de-duplicated problems, sorted
// by file, line and column. File names are relative to dir when below it.
// With a non-nil dialect it reports interpreter dialect too.
func check(dir string, patterns []string, dialect *dialectCheck) ([]problem, error) {
	pkgs, err := goList(dir, patterns)
	if err != nil {
		return nil, err
	}
	base, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	exports := make(map[string]string, len(pkgs))
	standard := make(map[string]bool)
	roots := make(map[string]bool)
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
		if p.Standard {
			standard[p.ImportPath] = true
		}
		if p.Module != nil && p.Module.Main {
			roots[p.Module.Dir] = true
		}
	}
	var scope *dialectScope
	if dialect != nil {
		allowed, err := dialect.allowed(roots)
		if err != nil {
			return nil, err
		}
		scope = &dialectScope{standard: standard, allowed: allowed}
	}
	seen := make(map[problem]bool)
	var problems []problem
	report := func(p problem) {
		if !seen[p] {
			seen[p] = true
			problems = append(problems, p)
		}
	}
	for _, p := range pkgs {
		if p.Error != nil {
			return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		if p.Standard || p.isTestMain() {
			continue
		}
		if p.Module == nil || !p.Module.Main {
			report(problem{Msg: p.ImportPath + ": imported, but is neither standard library nor this module"})
			continue
		}
		if err := checkPackage(base, p, exports, scope, report); err != nil {
			return nil, err
		}
	}
	sort.Slice(problems, func(i, j int) bool {
		a, b := problems[i].Pos, problems[j].Pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return problems[i].Msg < problems[j].Msg
	})
	return problems, nil
}

// goList runs go list -e -test -deps -export -json on patterns in dir.
func goList(dir string, patterns []string) ([]*listedPackage, error) {
	args := append([]string{"list", "-e", "-test", "-deps", "-export",
		"-json=Dir,ImportPath,Name,ForTest,Export,Standard,GoFiles,ImportMap,Module,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []*listedPackage
	dec := json.NewDecoder(&stdout)
	for {
		p := new(listedPackage)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// dialectScope tells checkPackage where and how to report interpreter dialect.
type dialectScope struct {
	standard map[string]bool // import paths of the standard-library packages
	allowed  map[string]bool // files exempt, as module-root-relative slash paths
}

// checkPackage parses and type-checks p from source, resolving imports from
// the export data go list produced, and reports what Yaegi cannot run and,
// with a non-nil dialect, interpreter dialect outside its allowed files.
func checkPackage(base string, p *listedPackage, exports map[string]string, dialect *dialectScope, report func(problem)) error {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if mapped, ok := p.ImportMap[path]; ok {
			path = mapped
		}
		file := exports[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	if p.Module.GoVersion != "" {
		conf.GoVersion = "go" + p.Module.GoVersion
	}
	info := &types.Info{
		Types: make(map[ast.Expr]types.TypeAndValue),
		Defs:  make(map[*ast.Ident]types.Object),
		Uses:  make(map[*ast.Ident]types.Object),
	}
	if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
		return fmt.Errorf("type-checking %s: %v", p.ImportPath, err)
	}
	at := func(pos token.Pos, format string, args ...any) {
		position := fset.Position(pos)
		if rel, err := filepath.Rel(base, position.Filename); err == nil && !strings.HasPrefix(rel, "..") {
			position.Filename = rel
		}
		report(problem{Pos: position, Msg: fmt.Sprintf(format, args...)})
	}
	for i, f := range files {
		checkFile(f, info, at)
		if dialect == nil || strings.HasSuffix(p.GoFiles[i], "_test.go") {
			continue
		}
		rel, err := filepath.Rel(p.Module.Dir, filepath.Join(p.Dir, p.GoFiles[i]))
		if err != nil {
			return err
		}
		if !dialect.allowed[filepath.ToSlash(rel)] {
			checkScratchParams(f, info, at)
			checkStdAliases(f, info, dialect.standard, at)
		}
	}
	return nil
}

// forbiddenImports maps the packages Yaegi refuses (without operator opt-in) to
// the reason.
var forbiddenImports = map[string]string{
	"unsafe":  "Yaegi refuses unsafe unless the operator enables it",
	"syscall": "Yaegi refuses syscall unless the operator enables it",
	"embed":   "Yaegi cannot import embed; keep the data in a Go string constant",
}

// missingObjects lists standard-library names Yaegi v0.16.1 leaves undefined,
// keyed by package path and then by name.
var missingObjects = map[string]map[string]bool{
	"sync/atomic": {"Pointer": true},
	"sync":        {"OnceValue": true, "OnceValues": true},
}

// checkTupleAssign reports an assignment of several values with "=" that
// mixes calls with other values, such as "a, b = 3, f()" or
// "a, c = f(), float64(n)": Yaegi v0.16.1 assigns the calls' values and
// leaves the other variables as they were. Conversions, len and cap are
// not calls to it; ":=", var, and assignments of calls only are not
// affected.
func checkTupleAssign(n *ast.AssignStmt, info *types.Info, at func(token.Pos, string, ...any)) {
	if n.Tok != token.ASSIGN || len(n.Lhs) < 2 || len(n.Rhs) != len(n.Lhs) {
		return
	}
	calls := 0
	for _, e := range n.Rhs {
		if isCall(e, info) {
			calls++
		}
	}
	if calls > 0 && calls < len(n.Rhs) {
		at(n.Pos(), "assignment of several values mixing calls and other values: Yaegi v0.16.1 drops the other values; assign one per statement")
	}
}

// isCall reports whether e is a call of a function, not a conversion nor
// the builtin len or cap.
func isCall(e ast.Expr, info *types.Info) bool {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return false
	}
	if tv, ok := info.Types[call.Fun]; ok && tv.IsType() {
		return false
	}
	if id, ok := ast.Unparen(call.Fun).(*ast.Ident); ok {
		if b, ok := info.Uses[id].(*types.Builtin); ok && (b.Name() == "len" || b.Name() == "cap") {
			return false
		}
	}
	return true
}

// checkFile reports the constructs of one type-checked file that Yaegi
// v0.16.1 cannot run.
func checkFile(f *ast.File, info *types.Info, at func(token.Pos, string, ...any)) {
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, "`\"")
		if why, ok := forbiddenImports[path]; ok {
			at(imp.Pos(), "import %q: %s", path, why)
		}
	}
	for _, group := range f.Comments {
		for _, c := range group.List {
			if strings.HasPrefix(c.Text, "//go:embed") {
				at(c.Pos(), "//go:embed: Yaegi cannot import embed; keep the data in a Go string constant")
			}
		}
	}
	loopVars := make(map[types.Object]bool)
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok {
				if b, ok := info.Uses[id].(*types.Builtin); ok && (b.Name() == "min" || b.Name() == "max" || b.Name() == "clear") {
					at(n.Pos(), "builtin %s: undefined in Yaegi; write a small helper", b.Name())
				}
			}
		case *ast.RangeStmt:
			if tv, ok := info.Types[n.X]; ok && tv.Type != nil {
				switch u := tv.Type.Underlying().(type) {
				case *types.Basic:
					if u.Info()&types.IsInteger != 0 {
						at(n.Pos(), "range over an integer: Yaegi panics; use a three-clause for loop")
					}
				case *types.Signature:
					at(n.Pos(), "range over a function: Yaegi cannot run iterators")
				}
			}
			if n.Tok == token.DEFINE {
				addLoopVars(loopVars, info, n.Key, n.Value)
			}
		case *ast.ForStmt:
			if as, ok := n.Init.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
				addLoopVars(loopVars, info, as.Lhs...)
			}
		case *ast.FuncDecl:
			if n.Type.TypeParams != nil {
				at(n.Pos(), "generic function %s: avoid generics in code Yaegi runs", n.Name.Name)
			}
		case *ast.TypeSpec:
			if n.TypeParams != nil {
				at(n.Pos(), "generic type %s: avoid generics in code Yaegi runs", n.Name.Name)
			}
		case *ast.AssignStmt:
			checkTupleAssign(n, info, at)
		case *ast.SelectorExpr:
			if obj := info.Uses[n.Sel]; obj != nil && obj.Pkg() != nil && missingObjects[obj.Pkg().Path()][obj.Name()] {
				at(n.Pos(), "%s.%s: undefined in Yaegi v0.16.1", obj.Pkg().Name(), obj.Name())
			}
		}
		return true
	})
	// A second pass, now that every loop variable of the file is known.
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			checkCapture(n.Call.Fun, "go statement", loopVars, info, at)
		case *ast.DeferStmt:
			checkCapture(n.Call.Fun, "deferred closure", loopVars, info, at)
		case *ast.CallExpr:
			if isSubtestRun(n, info) {
				if lit, ok := n.Args[1].(*ast.FuncLit); ok && callsParallel(lit, info) {
					checkCapture(lit, "parallel subtest", loopVars, info, at)
				}
			}
		}
		return true
	})
}

// addLoopVars records the variables that idents declare.
func addLoopVars(vars map[types.Object]bool, info *types.Info, exprs ...ast.Expr) {
	for _, e := range exprs {
		if id, ok := e.(*ast.Ident); ok {
			if obj := info.Defs[id]; obj != nil {
				vars[obj] = true
			}
		}
	}
}

// checkCapture reports each use, inside the closure fun, of a loop variable
// declared outside it: Yaegi shares one variable across iterations, so the
// closure may see a later iteration's value.
func checkCapture(fun ast.Expr, what string, loopVars map[types.Object]bool, info *types.Info, at func(token.Pos, string, ...any)) {
	lit, ok := ast.Unparen(fun).(*ast.FuncLit)
	if !ok {
		return
	}
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		obj := info.Uses[id]
		if obj != nil && loopVars[obj] && (obj.Pos() < lit.Pos() || obj.Pos() >= lit.End()) {
			at(id.Pos(), "loop variable %s used in a %s: Yaegi shares it across iterations; copy it first (%s := %s)",
				id.Name, what, id.Name, id.Name)
		}
		return true
	})
}

// isSubtestRun reports whether call is t.Run(name, f) on a *testing.T.
func isSubtestRun(call *ast.CallExpr, info *types.Info) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Run" || len(call.Args) != 2 {
		return false
	}
	fn, ok := info.Uses[sel.Sel].(*types.Func)
	return ok && fn.Pkg() != nil && fn.Pkg().Path() == "testing"
}

// callsParallel reports whether the body of lit calls a testing Parallel method.
func callsParallel(lit *ast.FuncLit, info *types.Info) bool {
	found := false
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Parallel" {
			if fn, ok := info.Uses[sel.Sel].(*types.Func); ok && fn.Pkg() != nil && fn.Pkg().Path() == "testing" {
				found = true
			}
		}
		return !found
	})
	return found
}

// checkScratchParams reports the parameters of the functions and function
// literals of f that are referenced but whose incoming value is never used:
// on every path through the body, a plain assignment to the whole parameter
// (p = ..., a, p = ..., or a redeclaring :=) that does not mention it
// otherwise comes before any other reference. Such a parameter is a local
// variable that callers pass only to spare Yaegi a declaration.
func checkScratchParams(f *ast.File, info *types.Info, at func(token.Pos, string, ...any)) {
	for _, decl := range f.Decls {
		lit := "a function literal"
		if fn, ok := decl.(*ast.FuncDecl); ok {
			lit += " in " + funcName(fn)
			if fn.Body != nil {
				checkParams(fn.Type, fn.Body, funcName(fn), info, at)
			}
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			if fn, ok := n.(*ast.FuncLit); ok {
				checkParams(fn.Type, fn.Body, lit, info, at)
			}
			return true
		})
	}
}

// funcName returns the name of fn as Go documentation spells it: F, T.M or
// (*T).M.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	star := false
	if s, ok := recv.(*ast.StarExpr); ok {
		recv, star = s.X, true
	}
	switch r := recv.(type) {
	case *ast.IndexExpr:
		recv = r.X
	case *ast.IndexListExpr:
		recv = r.X
	}
	name := types.ExprString(recv)
	if star {
		name = "(*" + name + ")"
	}
	return name + "." + fn.Name.Name
}

// checkParams reports the scratch parameters of the function fn names, whose
// type is typ and body body.
func checkParams(typ *ast.FuncType, body *ast.BlockStmt, fn string, info *types.Info, at func(token.Pos, string, ...any)) {
	for _, field := range typ.Params.List {
		for _, id := range field.Names {
			if id.Name == "_" {
				continue
			}
			if obj := info.Defs[id]; obj != nil && isScratch(obj, body, info) {
				at(id.Pos(), "scratch parameter %s of %s: its value is overwritten before use; declare it in the body (interpreter dialect belongs in LIST)",
					id.Name, fn)
			}
		}
	}
}

// access is what a statement, or a list of them, does with a variable's value
// on the paths from its start, as far as a simple structural analysis sees.
type access int

const (
	untouched  access = iota // not referenced
	overwrites               // on every path, assigned before it is read
	mayRead                  // perhaps read before it is assigned
)

// merge returns the access of a choice between paths of accesses a and b.
func merge(a, b access) access {
	switch {
	case a == mayRead || b == mayRead:
		return mayRead
	case a == overwrites && b == overwrites:
		return overwrites
	}
	return untouched
}

// flow computes accesses to the variable obj. It is conservative: what it
// does not follow, such as goto, a labeled break or a closure, reads.
type flow struct {
	obj  types.Object
	info *types.Info
}

// isScratch reports whether body references the variable obj but never reads
// the value obj has when body starts.
func isScratch(obj types.Object, body *ast.BlockStmt, info *types.Info) bool {
	fl := flow{obj, info}
	return fl.mentions(body) && fl.list(body.List) != mayRead
}

// mentions reports whether n, if not nil, references the variable.
func (fl flow) mentions(n ast.Node) bool {
	if n == nil {
		return false
	}
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && fl.info.Uses[id] == fl.obj {
			found = true
		}
		return !found
	})
	return found
}

// list returns the access of the statements of list run in order.
func (fl flow) list(list []ast.Stmt) access {
	for _, s := range list {
		if a := fl.stmt(s); a != untouched {
			return a
		}
	}
	return untouched
}

// stmt returns the access of s. A statement that ends the path, such as a
// return or a continue, overwrites: no read follows it.
func (fl flow) stmt(s ast.Stmt) access {
	switch s := s.(type) {
	case nil:
		return untouched
	case *ast.AssignStmt:
		if s.Tok != token.ASSIGN && s.Tok != token.DEFINE {
			break // an operation such as += reads
		}
		whole := false
		for _, lhs := range s.Lhs {
			if id, ok := ast.Unparen(lhs).(*ast.Ident); ok && fl.info.Uses[id] == fl.obj {
				whole = true
			} else if fl.mentions(lhs) {
				return mayRead
			}
		}
		for _, rhs := range s.Rhs {
			if fl.mentions(rhs) {
				return mayRead
			}
		}
		if whole {
			return overwrites
		}
		return untouched
	case *ast.BlockStmt:
		return fl.list(s.List)
	case *ast.LabeledStmt:
		return fl.stmt(s.Stmt)
	case *ast.ReturnStmt:
		if fl.mentions(s) {
			return mayRead
		}
		return overwrites
	case *ast.BranchStmt:
		// An unlabeled break of a switch or select is caught by clause.
		if s.Tok == token.CONTINUE || s.Tok == token.BREAK && s.Label == nil {
			return overwrites
		}
		if s.Tok == token.FALLTHROUGH {
			return untouched
		}
		return mayRead // goto and labeled break
	case *ast.IfStmt:
		if a := fl.stmt(s.Init); a != untouched {
			return a
		}
		if fl.mentions(s.Cond) {
			return mayRead
		}
		return merge(fl.list(s.Body.List), fl.stmt(s.Else))
	case *ast.ForStmt:
		if a := fl.stmt(s.Init); a != untouched {
			return a
		}
		if fl.mentions(s.Cond) || fl.mentions(s.Post) || fl.list(s.Body.List) == mayRead {
			return mayRead
		}
		return untouched // the body may not run
	case *ast.RangeStmt:
		if fl.mentions(s.X) {
			return mayRead
		}
		for _, e := range []ast.Expr{s.Key, s.Value} {
			if fl.mentions(e) {
				if id, ok := e.(*ast.Ident); !ok || s.Tok != token.ASSIGN || fl.info.Uses[id] != fl.obj {
					return mayRead
				}
				return untouched // assigned before the body, which may not run
			}
		}
		if fl.list(s.Body.List) == mayRead {
			return mayRead
		}
		return untouched
	case *ast.SwitchStmt:
		return fl.switchStmt(s.Init, s.Tag, s.Body)
	case *ast.TypeSwitchStmt:
		return fl.switchStmt(s.Init, s.Assign, s.Body)
	case *ast.SelectStmt:
		return fl.clauses(s.Body)
	}
	if fl.mentions(s) {
		return mayRead
	}
	return untouched
}

// switchStmt returns the access of a switch or type switch statement: its
// init statement, its tag (a type switch's assignment), then its clauses.
func (fl flow) switchStmt(init ast.Stmt, tag ast.Node, body *ast.BlockStmt) access {
	if a := fl.stmt(init); a != untouched {
		return a
	}
	if fl.mentions(tag) {
		return mayRead
	}
	return fl.clauses(body)
}

// clauses returns the access of the clauses of a switch or select statement,
// of which one runs, or none in a switch without a default clause.
func (fl flow) clauses(body *ast.BlockStmt) access {
	a, always := overwrites, false
	for _, c := range body.List {
		var ca access
		switch c := c.(type) {
		case *ast.CaseClause:
			for _, e := range c.List {
				if fl.mentions(e) {
					return mayRead
				}
			}
			ca = fl.clause(c.Body)
			always = always || c.List == nil
		case *ast.CommClause:
			if ca = fl.stmt(c.Comm); ca == untouched {
				ca = fl.clause(c.Body)
			}
			always = true
		}
		a = merge(a, ca)
	}
	if !always {
		a = merge(a, untouched)
	}
	return a
}

// clause returns the access of the body of a switch or select clause, which
// does not overwrite if an unlabeled break may leave it first.
func (fl flow) clause(body []ast.Stmt) access {
	a := fl.list(body)
	if a == overwrites && breaks(body) {
		return untouched
	}
	return a
}

// breaks reports whether list holds an unlabeled break of the switch or select
// statement whose clause it is.
func breaks(list []ast.Stmt) bool {
	found := false
	for _, s := range list {
		ast.Inspect(s, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BranchStmt:
				found = found || n.Tok == token.BREAK && n.Label == nil
			case *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt, *ast.FuncLit:
				return false
			}
			return !found
		})
	}
	return found
}

// checkStdAliases reports the package-level variables of f initialized to a
// standard-library function or method value, which code Yaegi runs has no
// need of: the interpreter calls standard-library functions directly.
func checkStdAliases(f *ast.File, info *types.Info, standard map[string]bool, at func(token.Pos, string, ...any)) {
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if len(vs.Values) != len(vs.Names) {
				continue // var a, b = f(): one call, no function value
			}
			for i, value := range vs.Values {
				if fn := stdFunc(value, info, standard); fn != "" && vs.Names[i].Name != "_" {
					at(vs.Names[i].Pos(), "%s aliases the standard library's %s; call it directly (interpreter dialect belongs in LIST)",
						vs.Names[i].Name, fn)
				}
			}
		}
	}
}

// stdFunc returns the name, as pkg.F or (*pkg.T).M, of the standard-library
// function or method that the expression e is the value of, or "" if e is
// not such a function value.
func stdFunc(e ast.Expr, info *types.Info, standard map[string]bool) string {
	var id *ast.Ident
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident: // dot import
		id = e
	case *ast.SelectorExpr:
		id = e.Sel
	default:
		return ""
	}
	fn, ok := info.Uses[id].(*types.Func)
	if !ok || fn.Pkg() == nil || !standard[fn.Pkg().Path()] {
		return ""
	}
	qualifier := func(p *types.Package) string { return p.Name() }
	sig := fn.Type().(*types.Signature)
	if recv := sig.Recv(); recv != nil {
		t := types.TypeString(recv.Type(), qualifier)
		if strings.HasPrefix(t, "*") {
			t = "(" + t + ")"
		}
		return t + "." + fn.Name()
	}
	return fn.Pkg().Name() + "." + fn.Name()
}

// Command yaegicheck reports code that the Yaegi v0.16.1 interpreter, which
// Traefik v3.6 runs plugins with, cannot run or runs differently from the Go
// compiler.
//
// Usage, from inside the module:
//
//	go run ./scripts/yaegicheck [-C dir] packages...
//
// It lists the named packages with everything they and their tests import
// (go list -test -deps -export) and reports, as file:line:col: message,
//
//   - any imported package outside the standard library and the main module;
//   - in every main-module package of that list, test files included: calls of
//     the min, max and clear builtins, range over an integer or a function,
//     generic type and function declarations, atomic.Pointer, sync.OnceValue
//     and sync.OnceValues, imports of unsafe, syscall and embed, //go:embed
//     directives, and a loop variable used inside a go or defer closure or a
//     parallel subtest (Yaegi keeps the pre-Go 1.22 single loop variable).
//
// It exits 0 when it finds nothing, 1 when it reports something and 2 when it
// cannot list or type-check the packages (for example when they do not build).
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
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: yaegicheck [-C dir] packages...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	problems, err := check(*dir, flag.Args())
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

// check lists patterns from dir and returns the de-duplicated problems, sorted
// by file, line and column. File names are relative to dir when below it.
func check(dir string, patterns []string) ([]problem, error) {
	pkgs, err := goList(dir, patterns)
	if err != nil {
		return nil, err
	}
	base, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	exports := make(map[string]string, len(pkgs))
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
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
		if err := checkPackage(base, p, exports, report); err != nil {
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

// checkPackage parses and type-checks p from source, resolving imports from
// the export data go list produced, and reports what Yaegi cannot run.
func checkPackage(base string, p *listedPackage, exports map[string]string, report func(problem)) error {
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
	for _, f := range files {
		checkFile(f, info, at)
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

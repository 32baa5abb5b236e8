package examples

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/model"
)

var update = flag.Bool("update", false, "rewrite the Markdown blocks that quote a file from the file")

// root is the repository's root, from this package's directory.
const root = ".."

// markdownFiles are the documents whose blocks the tests check: the
// repository's Markdown outside testdata and the build trees.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "plugins-local" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// block is one fenced code block of a Markdown file.
type block struct {
	file    string // the file, relative to the repository's root
	line    int    // the line of the opening fence, from 1
	lang    string // the fence's info string: "caddyfile", "yaml", ...
	text    string // the content, the fence's indentation removed, ending in "\n"
	include string // the <!-- include: ... --> directive just above, if any
	skip    string // the reason of a <!-- doctest: skip ... --> just above
	start   int    // byte offsets of the content in the file
	end     int
}

// where names the block in test messages.
func (b block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var (
	includeRe = regexp.MustCompile(`^\s*<!-- include: (\S+)(?: (\w+))? -->\s*$`)
	skipRe    = regexp.MustCompile(`^\s*<!-- doctest: skip (.+) -->\s*$`)
)

// blocks returns the fenced blocks of the Markdown file path.
func blocks(t *testing.T, path string) []block {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, path)
	var out []block
	var cur *block
	var indent, fence string
	var directive, skip string
	offset := 0
	for i, line := range strings.SplitAfter(string(data), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			indent = line[:len(line)-len(trimmed)]
			fence = strings.TrimRight(trimmed, "\n")
			fence = fence[:len(fence)-len(strings.TrimLeft(fence, "`"))]
			cur = &block{file: rel, line: i + 1, lang: strings.TrimSpace(strings.TrimLeft(trimmed, "`")), include: directive, skip: skip, start: offset + len(line)}
		case cur != nil && strings.TrimSpace(line) == fence:
			cur.end = offset
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += strings.TrimPrefix(line, indent)
		}
		if cur == nil {
			directive, skip = "", ""
			if m := includeRe.FindStringSubmatch(line); m != nil {
				directive = strings.TrimSpace(m[1] + " " + m[2])
			}
			if m := skipRe.FindStringSubmatch(line); m != nil {
				skip = m[1]
			}
		}
		offset += len(line)
	}
	if cur != nil {
		t.Errorf("%s: unclosed code block", cur.where())
	}
	return out
}

// allBlocks returns the blocks of every Markdown file whose language is
// one of langs.
func allBlocks(t *testing.T, langs ...string) []block {
	t.Helper()
	var out []block
	for _, f := range markdownFiles(t) {
		for _, b := range blocks(t, f) {
			for _, l := range langs {
				if b.lang == l {
					out = append(out, b)
				}
			}
		}
	}
	return out
}

// quoted returns what an include directive quotes: a whole file, or the
// declaration of one Go function of it (without its doc comment).
func quoted(directive string) (string, error) {
	path, fn, _ := strings.Cut(directive, " ")
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return "", err
	}
	if fn == "" {
		return string(data), nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, data, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn {
			return string(data[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset]) + "\n", nil
		}
	}
	return "", fmt.Errorf("%s has no function %s", path, fn)
}

// TestIncludes: every block under <!-- include: path [func] --> equals
// what it quotes, so that the documentation cannot drift from the files
// the tests load. With -update, the blocks are rewritten.
func TestIncludes(t *testing.T) {
	n := 0
	for _, f := range markdownFiles(t) {
		bs := blocks(t, f)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		last := 0
		for _, b := range bs {
			if b.include == "" {
				continue
			}
			n++
			want, err := quoted(b.include)
			if err != nil {
				t.Errorf("%s: include %s: %v", b.where(), b.include, err)
				continue
			}
			if b.text == want {
				continue
			}
			if !*update {
				t.Errorf("%s: the block differs from %s (go test ./examples -update rewrites it)\n--- block\n%s--- file\n%s", b.where(), b.include, b.text, want)
				continue
			}
			indent := ""
			if i := bytes.LastIndexByte(data[:b.start-1], '\n'); i >= 0 {
				line := string(data[i+1 : b.start])
				indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			}
			out.Write(data[last:b.start])
			for _, l := range strings.SplitAfter(want, "\n") {
				if l != "" && l != "\n" {
					out.WriteString(indent)
				}
				out.WriteString(l)
			}
			last = b.end
		}
		if *update && last > 0 {
			out.Write(data[last:])
			if err := os.WriteFile(f, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no <!-- include: --> blocks found")
	}
}

// TestEveryExampleQuoted: each recipe file is shown in the documentation,
// so that none is tested but never seen, or changed without its page.
func TestEveryExampleQuoted(t *testing.T) {
	quotedFiles := map[string]bool{}
	for _, f := range markdownFiles(t) {
		for _, b := range blocks(t, f) {
			if b.include != "" {
				path, _, _ := strings.Cut(b.include, " ")
				quotedFiles[path] = true
			}
		}
	}
	for _, pattern := range []string{"examples/caddy/*", "examples/traefik/*", "examples/traefik-local/*"} {
		files, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			rel, _ := filepath.Rel(root, f)
			if !quotedFiles[filepath.ToSlash(rel)] {
				t.Errorf("%s is quoted by no Markdown file (<!-- include: %s -->)", rel, filepath.ToSlash(rel))
			}
		}
	}
}

// TestVersion: the version the documentation installs is the latest
// release of CHANGELOG.md, everywhere it is written; v0.0.0, the version
// a go.mod requires of a clone it replaces the module with, is none.
func TestVersion(t *testing.T) {
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(v\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`).FindSubmatch(changelog)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading such as ## [v1.2.3] - 2006-01-02")
	}
	release := string(m[1])
	mentions := regexp.MustCompile(`sluicehq/sluice[\w/]*@(v[\w.-]+)|--branch (v[\w.-]+)|version: "?(v[\w.-]+)`)
	n := 0
	for _, f := range append(markdownFiles(t), filepath.Join(root, "examples/caddy/Dockerfile")) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, sm := range mentions.FindAllSubmatch(data, -1) {
			v := string(bytes.Join(sm[1:], nil))
			if v == "v0.0.0" {
				continue
			}
			n++
			if v != release {
				t.Errorf("%s: version %s, want the latest release of CHANGELOG.md, %s", f, v, release)
			}
		}
	}
	if n == 0 {
		t.Error("no install line names a version")
	}
}

// TestRateUnits: the table of rate units in docs/algorithms.md is what
// the rate parser accepts. Every rate written there parses, but those of
// the line "Not accepted", which fail; and every spelling of a unit the
// parser accepts among those users write is in the table.
func TestRateUnits(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "docs/algorithms.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, region, _ := strings.Cut(string(data), "<!-- rate-units: begin -->")
	region, _, ok := strings.Cut(region, "<!-- rate-units: end -->")
	if !ok {
		t.Fatal("docs/algorithms.md: no <!-- rate-units: begin --> ... end region")
	}
	accepted, refused := region, ""
	if i := strings.Index(region, "Not accepted"); i >= 0 {
		accepted, refused = region[:i], region[i:]
	}
	rateRe := regexp.MustCompile("`([0-9.]+/[^`]+)`")
	for _, m := range rateRe.FindAllStringSubmatch(accepted, -1) {
		if _, err := model.ParseRate(m[1]); err != nil {
			t.Errorf("docs/algorithms.md lists %s, which the parser refuses: %v", m[1], err)
		}
	}
	for _, m := range rateRe.FindAllStringSubmatch(refused, -1) {
		if _, err := model.ParseRate(m[1]); err == nil {
			t.Errorf("docs/algorithms.md says %s is not accepted, but it parses: list it among the units", m[1])
		}
	}
	for _, unit := range []string{"ns", "us", "ms", "msec", "s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute", "minutes",
		"h", "hr", "hrs", "hour", "hours", "d", "day", "days", "1d", "2d", "7d", "w", "week", "weeks", "1w", "mo", "month", "y", "year"} {
		rate := "10/" + unit
		if _, err := model.ParseRate(rate); err == nil && !strings.Contains(accepted, "`"+rate+"`") {
			t.Errorf("the parser accepts %s, which the table of rate units in docs/algorithms.md does not list", rate)
		}
	}
}

// TestGoBlocks: every Go block of the Markdown files quotes a function the
// Go tests compile (an Example), so that none can stop compiling unseen.
func TestGoBlocks(t *testing.T) {
	for _, b := range allBlocks(t, "go") {
		if b.include == "" && b.skip == "" {
			t.Errorf("%s: a Go block that quotes no file: put the code in an Example function and quote it with <!-- include: path ExampleName -->", b.where())
		}
	}
}

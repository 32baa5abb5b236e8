package main

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		want     []string
	}{
		{
			name:     "every construct is reported once, in file order",
			patterns: []string{"./bad"},
			want: []string{
				"example.com/other: imported, but is neither standard library nor this module",
				`bad/bad.go:5:2: import "embed": Yaegi cannot import embed; keep the data in a Go string constant`,
				`bad/bad.go:9:2: import "unsafe": Yaegi refuses unsafe unless the operator enables it`,
				"bad/bad.go:14:1: //go:embed: Yaegi cannot import embed; keep the data in a Go string constant",
				"bad/bad.go:17:9: atomic.Pointer: undefined in Yaegi v0.16.1",
				"bad/bad.go:19:12: sync.OnceValue: undefined in Yaegi v0.16.1",
				"bad/bad.go:22:6: generic type Pair: avoid generics in code Yaegi runs",
				"bad/bad.go:25:1: generic function First: avoid generics in code Yaegi runs",
				"bad/bad.go:32:2: builtin clear: undefined in Yaegi; write a small helper",
				"bad/bad.go:33:9: builtin max: undefined in Yaegi; write a small helper",
				"bad/bad.go:33:16: builtin min: undefined in Yaegi; write a small helper",
				"bad/bad.go:39:2: range over an integer: Yaegi panics; use a three-clause for loop",
				"bad/bad.go:42:2: range over a function: Yaegi cannot run iterators",
				"bad/bad.go:54:2: assignment of several values mixing calls and other values: Yaegi v0.16.1 drops the other values; assign one per statement",
				"bad/bad_test.go:14:8: loop variable i used in a go statement: Yaegi shares it across iterations; copy it first (i := i)",
				"bad/bad_test.go:19:22: loop variable name used in a deferred closure: Yaegi shares it across iterations; copy it first (name := name)",
				"bad/bad_test.go:22:8: loop variable name used in a parallel subtest: Yaegi shares it across iterations; copy it first (name := name)",
			},
		},
		{
			name:     "look-alikes in names, comments, strings and serial subtests pass",
			patterns: []string{"./good"},
			want:     nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkProblems(t, tc.patterns, nil, tc.want) })
	}
}

func TestCheckDialect(t *testing.T) {
	const scratch = ": its value is overwritten before use; declare it in the body (interpreter dialect belongs in LIST)"
	const alias = "; call it directly (interpreter dialect belongs in LIST)"
	unlisted := []string{
		"dialect/dialect.go:12:5: itoa aliases the standard library's strconv.Itoa" + alias,
		"dialect/dialect.go:15:20: scratch parameter b of Format" + scratch,
		"dialect/dialect.go:47:20: scratch parameter n of Pick" + scratch,
		"dialect/dialect.go:58:18: scratch parameter s of Kind" + scratch,
		"dialect/dialect.go:69:20: scratch parameter x of Sum" + scratch,
		"dialect/dialect.go:99:5: writeString aliases the standard library's (*strings.Builder).WriteString" + alias,
		"dialect/dialect.go:104:25: scratch parameter head of (*pair).split" + scratch,
	}
	tests := []struct {
		name     string
		patterns []string
		dialect  *dialectCheck
		want     []string
	}{
		{
			name:     "outside the list and test files, scratch parameters and aliases are reported",
			patterns: []string{"./dialect"},
			dialect:  &dialectCheck{Files: []string{"dialect/listed.go"}},
			want:     unlisted,
		},
		{
			name:     "with an empty list, listed.go is reported too",
			patterns: []string{"./dialect"},
			dialect:  &dialectCheck{},
			want: append(unlisted[:len(unlisted):len(unlisted)],
				"dialect/listed.go:8:5: now aliases the standard library's time.Now"+alias,
				"dialect/listed.go:11:22: scratch parameter b of Quote"+scratch),
		},
		{
			name:     "without -dialect, dialect is not reported",
			patterns: []string{"./dialect"},
			want:     nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkProblems(t, tc.patterns, tc.dialect, tc.want) })
	}
}

func TestCheckDialectUnknownFile(t *testing.T) {
	for _, name := range []string{"dialect/lsited.go", "dialect", "../mod/dialect/listed.go", "/dialect/listed.go"} {
		dialect := &dialectCheck{Files: []string{"dialect/listed.go", name}}
		if _, err := check("testdata/mod", []string{"./dialect"}, dialect); err == nil {
			t.Errorf("check with -dialect listing %q: no error", name)
		}
	}
}

func TestCheckBuildError(t *testing.T) {
	if _, err := check("testdata/mod", []string{"./missing"}, nil); err == nil {
		t.Fatal("check of a package that does not exist: no error")
	}
}

// checkProblems runs check on testdata/mod with patterns and dialect and
// compares the problems it reports with want.
func checkProblems(t *testing.T, patterns []string, dialect *dialectCheck, want []string) {
	t.Helper()
	problems, err := check("testdata/mod", patterns, dialect)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("check(%q, %v) =\n%s\nwant\n%s", patterns, dialect, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

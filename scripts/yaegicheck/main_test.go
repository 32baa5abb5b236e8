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
		t.Run(tc.name, func(t *testing.T) {
			problems, err := check("testdata/mod", tc.patterns)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range problems {
				got = append(got, p.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("check(%q) =\n%s\nwant\n%s", tc.patterns, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestCheckBuildError(t *testing.T) {
	if _, err := check("testdata/mod", []string{"./missing"}); err == nil {
		t.Fatal("check of a package that does not exist: no error")
	}
}

// Package dialect holds interpreter dialect for yaegicheck -dialect: in this
// file, which the tests do not list, scratch parameters and standard-library
// aliases among look-alikes that are neither; in listed.go, which they list,
// one of each; and in dialect_test.go, one of each too.
package dialect

import (
	"strconv"
	"strings"
)

var itoa = strconv.Itoa

// Format fills b, a scratch parameter.
func Format(n int, b []byte) string {
	b = strconv.AppendInt(nil, int64(n), 10)
	return string(b)
}

// Append reads b before it writes it.
func Append(n int, b []byte) []byte {
	b = strconv.AppendInt(b, int64(n), 10)
	return b
}

// Grow reads n through the assignment itself.
func Grow(n int) int {
	n = n + 1
	return n
}

// Store writes through p, which reads it.
func Store(p *int, s []int) {
	*p = 1
	s[0] = *p
}

// Default keeps n when ok is false, so n's value is used.
func Default(n int, ok bool) int {
	if ok {
		n = 2
	}
	return n
}

// Pick assigns n on both branches before its use: a scratch parameter.
func Pick(ok bool, n int) int {
	if ok {
		n = 1
	} else {
		n = 2
	}
	return n
}

// Kind assigns s in every case of a switch with a default: a scratch
// parameter.
func Kind(k int, s string) string {
	switch k {
	case 0:
		s = "zero"
	default:
		s = "other"
	}
	return s
}

// Sum ranges over xs into x, a scratch parameter.
func Sum(xs []int, x int) (s int) {
	for _, x = range xs {
		s += x
	}
	return s
}

// Last keeps n when xs is empty, and m when a break leaves the switch
// before the assignment.
func Last(xs []int, n, m int) (int, int) {
	for _, x := range xs {
		n = x
	}
	switch {
	case len(xs) > 1:
		if xs[0] == 0 {
			break
		}
		m = xs[1]
	default:
		m = 0
	}
	return n, m
}

var (
	upper   = strings.ToUpper("a")
	escaper = strings.NewReplacer("a", "b")
)

var writeString = (*strings.Builder).WriteString

type pair struct{ head, rest string }

// split fills head, a scratch parameter, in an assignment that reads rest.
func (p *pair) split(s, head, rest, _ string) {
	head, rest = s[:1], rest+s[1:]
	p.head, p.rest = head, rest
}

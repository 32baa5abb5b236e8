// Package bad holds one of each construct yaegicheck reports.
package bad

import (
	_ "embed"
	"iter"
	"sync"
	"sync/atomic"
	"unsafe"

	"example.com/other"
)

//go:embed data.txt
var data string

var ptr atomic.Pointer[int]

var once = sync.OnceValue(func() int { return other.One })

// Pair is generic.
type Pair[T any] struct{ A, B T }

// First is generic.
func First[T any](p Pair[T]) T { return p.A }

// Size uses unsafe.
func Size() uintptr { return unsafe.Sizeof(0) }

// Builtins calls min, max and clear.
func Builtins(m map[int]int) int {
	clear(m)
	return max(1, min(2, 3))
}

// Ranges ranges over an int and a function.
func Ranges(n int, seq iter.Seq[int]) int {
	s := 0
	for i := range n {
		s += i
	}
	for v := range seq {
		s += v
	}
	return s
}

func seven() int { return 7 }

// Tuples assigns several values mixing calls and other values.
func Tuples(n int) (int, float64) {
	var a int
	var f float64
	a, f = seven(), float64(n)
	return a, f
}

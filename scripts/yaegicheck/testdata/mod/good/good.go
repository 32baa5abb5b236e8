// Package good holds look-alikes of what yaegicheck reports, none of which
// Yaegi minds: helpers and methods named like builtins, and text such as
// max(a, b) or range 10 in comments and strings.
package good

import "sync"

type bounds struct{ lo, hi int }

func (b bounds) max() int { return b.hi }

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// Use calls the look-alikes.
func Use() (int, string) {
	b := bounds{1, 2}
	var mu sync.Mutex
	mu.Lock()
	defer mu.Unlock()
	return maxInt(b.max(), min(3, 4)), "max(1, 2) and clear(m)"
}

func three() int { return 3 }

// Tuples assigns several values as Yaegi runs them: calls only, no call,
// len and conversions, or with :=.
func Tuples(n int) (int, int, float64) {
	var a, b int
	var f float64
	a, b = three(), three()
	a, f = n, float64(n)
	b, f = len("ab"), float64(b)
	c, d := three(), 4
	return a + b + c + d, 0, f
}

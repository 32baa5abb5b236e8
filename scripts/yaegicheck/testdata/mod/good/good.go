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

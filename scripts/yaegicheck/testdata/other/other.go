// Package other is a module outside the main one.
package other

// One is 1.
const One = 1

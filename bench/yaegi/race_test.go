//go:build race

package yaegibench

// raceDetector reports whether the tests run with -race: see redisCases'
// callers.
const raceDetector = true

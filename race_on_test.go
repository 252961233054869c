//go:build race

package memtrack

// raceDetector reports whether the test binary is built with -race.
const raceDetector = true

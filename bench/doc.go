// Package bench measures memtrack's allocation path against the designs a
// user would otherwise pick, side by side in one go test -bench run.
//
// The package holds no library code. Its benchmarks compare tracker.Counter,
// tracker.Record and the CPU Device layer with the floors (a plain int64
// add/sub pair and a raw sync/atomic add pair) and with the lock-based
// designs memtrack replaces, written here unexported: a global mutex over a
// map from ordinal to current/peak, and PyTorch-style per-device mutexes over
// plain integers. Its tests check that every design compared reports the same
// figures as the memtrack type it stands against, and that the tracker paths
// allocate nothing.
//
// Run the suite with scripts/bench.sh, which repeats it, feeds benchstat and
// prints the ratios; the README's Performance section holds one such run.
package bench

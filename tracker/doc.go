// Package tracker holds the lock-free counters behind memtrack: a
// high-water-mark gauge ([Counter]), the per-device statistics record
// ([Record]) and a table from device ordinal to record ([Table]).
//
// Every type is safe for concurrent use and its zero value is ready to use.
// The allocation paths take no lock and allocate nothing on the heap: a
// [Counter] performs one atomic read-modify-write per Alloc or Free and a
// compare-and-swap only when the peak really rises; a [Record] performs one
// per Alloc and two per Free, all on one cache line, whatever statistics it
// keeps.
//
// The current figure and the peak are exact under any concurrency: the peak
// is the largest value the current figure ever held since the last reset.
// A reader never sees a peak below the current figure.
//
// Peak scopes ([Scope], opened with [Record.OpenScope] or
// [Counter.OpenScope]) keep high-water marks of their own, any number at
// once, each from its opening to its close and independent of the others
// and of ResetPeak. While none is open, the allocation paths pay one atomic
// load for them.
//
// The package's atomics are sync/atomic's, not go.uber.org/atomic's, which
// the rest of the module uses: its 64-bit words must be 8-byte aligned on
// 32-bit platforms, which sync/atomic's types guarantee and
// go.uber.org/atomic's do not (the tests run as a 386 build to prove it),
// and its hot paths work on plain words with sync/atomic's functions so
// that they fit the inliner's budget (TestIntendedInlining).
package tracker

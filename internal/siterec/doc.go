// Package siterec records allocation sites: for each call stack that
// allocates, the live sampled allocations made from it and their scaled
// figures, now and as they stood at the latest peak of the recorded bytes.
//
// A Recorder samples allocations as Go's heap profiler does (Sample): on
// average one sample per rate bytes, each weighted by the inverse of its
// probability, so that the scaled figures are unbiased, and exact at rate 1.
// The figures at the peak are kept lazily, in generations, at a constant
// cost per allocation and free. Past a cap of distinct stacks, allocations
// fold into one entry with no stack.
//
// Package memtrack keeps one Recorder per device whose sites are recorded
// (memtrack.Device.Sites) and renders its Snapshot as memtrack.Site values;
// nothing else uses this package.
package siterec

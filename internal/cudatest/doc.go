// Package cudatest is test equipment for memtrack's CUDA tests, built with
// -tags cuda: the driver calls that only tests make (contexts and streams of
// their own, stream capture, graphs instantiated, uploaded and launched, a
// memory pool set current, a stream held back by a host function, the raw
// calls the benchmarks compare with, those of virtual memory management one
// by one, a program's capture in global mode during which a test makes a
// call), and the fake driver's count of the calls of each entry point
// (DriverCalls, and CountCalls, with which a test asserts exactly which
// calls an operation makes). It calls
// the driver through a table of its own, filled by the loader of
// internal/cudadrv (cudadrv.Fill), so that a test binary, like the library,
// links no libcuda and needs no cuda.h to build. The library never imports
// it.
//
// Every function takes and returns the driver's handles as numbers
// (CUcontext, CUstream, CUevent, CUmemoryPool), as bindings of the driver
// type them, and its CUresult as a cudadrv.Result. Those that say so run in
// the calling thread's current context: call them inside InContext, or on
// a thread the caller has locked.
package cudatest

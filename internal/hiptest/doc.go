// Package hiptest is test equipment for memtrack's HIP tests, built with
// -tags rocm: the runtime calls that only tests make (streams of their own,
// a stream held back by a host callback, stream capture begun and ended,
// events recorded and waited for, synchronizations, the calling thread's
// current device) and the fake runtime's count of the calls of each entry
// point (RuntimeCalls). It calls the runtime through a table of its own,
// filled by the loader of internal/hipdrv (hipdrv.Fill), so that a test
// binary, like the library, links no libamdhip64 and needs no AMD header to
// build. The library never imports it.
//
// Every function takes and returns the runtime's handles as numbers
// (hipStream_t, hipEvent_t), and its hipError_t as a hipdrv.Result. Those
// that take a device make it current on the calling thread for the call
// and put the thread's device back, as the library's calls do.
package hiptest

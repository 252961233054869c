// Package cu is a drop-in for github.com/mumax/3/cuda/cu whose allocation
// calls are counted by memtrack: a program that allocates GPU memory with cu
// changes one import path,
//
//	import "github.com/mumax/3/cuda/cu"
//
// to
//
//	import "github.com/memtrack/memtrack/cu"
//
// and the bytes it allocates appear in memtrack's figures for the device
// of the current context (memory allocated, peaks, live buffers, the
// memory limit, allocation sites, the pprof profiles), beside what
// memtrack's own Device.Alloc allocates. The package is built only with
// -tags cuda, as memtrack's CUDA backend is; without the tag it is empty,
// and a program that uses it stops at "undefined: cu.MemAlloc": rebuild
// with go build -tags cuda (see docs/cuda.md for cuda.h and libcuda.so).
//
// [MemAlloc], [MemFree] and [DevicePtr.Free] are counted. Every other name
// of cu is here too, under the same name and signature, and forwards to
// cu (declarations that go generate writes). The types are cu's own
// (aliases), except DevicePtr: a type of this package, convertible to and
// from cu.DevicePtr, so that p.Free() is counted too; where a pointer is
// passed to code that still imports mumax's cu, convert it explicitly
// (the compiler asks for it, so no free goes uncounted unnoticed).
//
// # In mumax3
//
// scripts/try-mumax3.sh checks each of these on mumax3's own source (the
// version memtrack's go.mod requires) with -tags cuda, a require and a
// replace directive for memtrack in mumax3's go.mod, and go mod tidy:
//
//   - The import changed in only some files does not compile where a
//     DevicePtr of this package reaches code still on mumax's cu. Changed
//     in mumax3's cuda/ but not in its cufft binding (cuda/cufft), the
//     build stops with 4 errors, two in cuda/fft3dc2r.go and two in
//     cuda/fft3dr2c.go: "cannot use cu.DevicePtr(...) (value of uintptr
//     type "github.com/memtrack/memtrack/cu".DevicePtr) as
//     "github.com/mumax/3/cuda/cu".DevicePtr value in argument to
//     p.handle.ExecC2R" (ExecR2C). Convert there, or change cufft too.
//   - Changed in all 86 files that import mumax's cu (test files
//     included), mumax3 and its tests build.
//   - Changed only in the 4 files that allocate and free (cuda/alloc.go,
//     cuda/slice.go, cuda/buffer.go, cuda/bytes.go), they build too.
//     These hold every MemAlloc, MemFree and Free call of mumax3 outside
//     cu itself and the tests (cufft's test allocates with cu), so each
//     allocation mumax3 makes through cu is counted;
//     the work areas cuFFT allocates for its plans are not (count them
//     with memtrack's Device.Track).
//   - The build needs -tags cuda (without it the first error is
//     "undefined: cu.DevicePtr" in cuda/cufft), and memtrack's go line
//     (go 1.26.0, which go mod tidy writes; with mumax3's own, go build
//     stops at "go: updates to go.mod needed").
//   - mumax3's cufft and curand bindings need cufft.h and curand.h to
//     compile, and a program that imports them links libcufft.so and
//     libcurand.so: on Debian without the toolkit, scripts/cuda-dev.sh
//     provides them, with cuda.h and libcuda.so, from the nvidia-cuda-dev
//     package.
//
// Memory that a program's own pool keeps is not freed, so it stays
// counted: after mumax3's cuda.Recycle the buffer pool still holds the
// buffers, and memtrack's figures (Tracked, Buffers, the peaks, the memory
// limit) count them until cuda.FreeBuffers frees them; a buffer handed out
// again from the pool is no new allocation. The script runs this on the
// fake driver (testdata/mumax3pool). To count what a pool holds apart
// from the rest, allocate the pool's buffers through a
// [memtrack.Category]: with Category.Alloc, or, for memory the pool
// allocates with mumax's cu, with Category.Track of the pointer and
// [memtrack.Tracked.FreeWith] to free it, as this package's pool example
// does (package memtrack's Category example shows one over Category.Alloc).
// The drop-in's MemAlloc counts outside every category.
//
// # What each call does
//
// MemAlloc allocates with cuMemAlloc and names the device of the current
// context with cuCtxGetDevice, in one cgo call on one OS thread, then
// counts the bytes with memtrack's Device.TrackAddrSkip on that device (a
// count kept by address, with no handle allocated), attributed to the code
// that called MemAlloc: the allocation site, on the page and in the pprof
// profiles, is the caller's, not the drop-in's. Its panics
// are cu's: the driver's cu.Result, such as cu.ERROR_INVALID_VALUE for 0
// bytes, unchanged. When memtrack's memory limit refuses the bytes,
// MemAlloc frees them again and panics with cu.ERROR_OUT_OF_MEMORY, as cu
// does when the device is full, so that code which recovers cu's
// out-of-memory panic (as mumax3 does) handles it; FailedAllocs and the
// limit in memtrack's figures tell the two apart.
//
// MemFree(p) frees p with cuMemFree through memtrack.Kind.UntrackAddr, which
// finds the count of p (an index sharded by address) and then uncounts it.
// Its answers to bad input:
//
//   - MemFree(0) does nothing, as in cu.
//   - An address that was never allocated, or was freed already (a double
//     free): cuMemFree refuses it and MemFree panics with an [*Error] that
//     names the address and carries the cu.Result; no figure moves.
//   - Memory that cu allocated before the program switched to this package
//     (or that another binding allocated): not tracked, so MemFree frees it
//     with cuMemFree and moves no figure.
//   - A cuMemFree that fails on tracked memory: the memory stays counted,
//     and MemFree panics with an *Error naming the address.
//   - Memory counted here but freed by other means (mumax's own
//     cu.MemFree): it stays counted until the driver hands the address out
//     again, when MemAlloc drops the stale count before counting the new
//     allocation.
package cu

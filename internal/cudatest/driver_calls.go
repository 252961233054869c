//go:build cuda

package cudatest

// The fake driver's count of the calls of each entry point
// (testdata/fakecuda: fakecuda_calls), found in the driver the process
// loaded; a real driver has none.

// #cgo LDFLAGS: -ldl
// #include <dlfcn.h>
// #include <stdlib.h>
//
// typedef unsigned long (*cudatest_calls_fn)(const char *name);
//
// // cudatest_driver_calls returns the fake driver's counter, found in the
// // libcuda.so.1 the process loaded, or NULL for a driver without one.
// static cudatest_calls_fn cudatest_driver_calls(void) {
// 	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
// 	if (!lib) return NULL;
// 	cudatest_calls_fn f = (cudatest_calls_fn)dlsym(lib, "fakecuda_calls");
// 	dlclose(lib); // NOLOAD took a reference; the loader keeps the library
// 	return f;
// }
//
// static unsigned long cudatest_calls(cudatest_calls_fn f, const char *name) { return f(name); }
import "C"

import "unsafe"

// DriverCalls returns how many calls the process has made so far to the
// driver's entry points of base name name (cuMemAlloc for cuMemAlloc_v2),
// as the fake driver counts them; ok is false where the driver loaded does
// not count (a real one), or none is loaded yet (Load). Its own look-up
// calls no entry point of the driver.
func DriverCalls(name string) (n uint64, ok bool) {
	f := C.cudatest_driver_calls()
	if f == nil {
		return 0, false
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return uint64(C.cudatest_calls(f, cs)), true
}

// Counter counts the calls the process makes to some of the driver's entry
// points, as the fake driver counts them, from the moment it is made: a
// test asserts exactly which calls an operation makes with it.
type Counter struct {
	names  []string
	before []uint64
}

// CountCalls starts counting the calls to the entry points of base names
// names; ok is false where the driver loaded does not count (a real one),
// where a test skips.
func CountCalls(names ...string) (c *Counter, ok bool) {
	if _, ok := DriverCalls("cuInit"); !ok {
		return nil, false
	}
	c = &Counter{names: names, before: make([]uint64, len(names))}
	c.Reset()
	return c, true
}

// Reset starts the count again from now.
func (c *Counter) Reset() {
	for i, n := range c.names {
		c.before[i], _ = DriverCalls(n)
	}
}

// Made returns the calls made to each entry point since CountCalls or the
// last Reset, leaving out those with none.
func (c *Counter) Made() map[string]uint64 {
	made := map[string]uint64{}
	for i, n := range c.names {
		if now, _ := DriverCalls(n); now > c.before[i] {
			made[n] = now - c.before[i]
		}
	}
	return made
}

// VMMEntryPoints returns the entry points that a map or an unmap of
// virtual memory may call: those of virtual memory management, and those
// of the context switch and the stream-capture mode around them.
func VMMEntryPoints() []string {
	return []string{
		"cuCtxGetCurrent", "cuCtxSetCurrent", "cuThreadExchangeStreamCaptureMode",
		"cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease",
		"cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemGetAccess", "cuMemGetAllocationGranularity",
	}
}

//go:build rocm

package hiptest

// The fake runtime's count of the calls of each entry point
// (testdata/fakehip: fakehip_calls), found in the runtime the process
// loaded; a real runtime has none.

// #cgo LDFLAGS: -ldl
// #include <dlfcn.h>
// #include <stdlib.h>
//
// typedef unsigned long (*hiptest_calls_fn)(const char *name);
//
// // hiptest_runtime_calls returns the fake runtime's counter, found in the
// // library of name the process loaded, or NULL.
// static hiptest_calls_fn hiptest_runtime_calls(const char *name) {
// 	void *lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
// 	if (!lib) return NULL;
// 	hiptest_calls_fn f = (hiptest_calls_fn)dlsym(lib, "fakehip_calls");
// 	dlclose(lib); // NOLOAD took a reference; the loader keeps the library
// 	return f;
// }
//
// static unsigned long hiptest_calls(hiptest_calls_fn f, const char *name) { return f(name); }
import "C"

import (
	"unsafe"

	"github.com/memtrack/memtrack/internal/hipdrv"
)

// RuntimeCalls returns how many calls the process has made so far to the
// runtime's entry point name, as the fake runtime counts them; ok is false
// where the runtime loaded does not count (a real one), or none is loaded
// yet. Its own look-up calls no entry point of the runtime.
func RuntimeCalls(name string) (n uint64, ok bool) {
	for _, lib := range hipdrv.Libraries {
		cl := C.CString(lib)
		f := C.hiptest_runtime_calls(cl)
		C.free(unsafe.Pointer(cl))
		if f == nil {
			continue
		}
		cs := C.CString(name)
		defer C.free(unsafe.Pointer(cs))
		return uint64(C.hiptest_calls(f, cs)), true
	}
	return 0, false
}

//go:build metal && darwin && !ios && cgo

// The cgo half of the Metal bridge: one Go method per C function of
// metal_bridge.h, converting types and nothing more.
//
// metal_bridge.m and metal_bridge.h carry this file's //go:build line. The go
// command refuses C and Objective-C files in a package built without cgo
// ("C source files not allowed when not using cgo"), so the Objective-C must
// drop out of exactly the builds that drop this file: with the same line, a
// CGO_ENABLED=0 build for darwin compiles the newMetalBackend without a
// bridge in its place, and a build for another system (iOS included, which satisfies
// darwin but lacks MTLCopyAllDevices) sees neither.

package memtrack

/*
// ARC manages the Objective-C objects (metal_bridge.m refuses to compile
// without it). clang applies -fobjc-arc to Objective-C only, and warns that it
// is unused when cgo compiles its own C files with the same flags.
#cgo CFLAGS: -fobjc-arc -Wno-unused-command-line-argument
// Without CoreGraphics a command-line program gets no default Metal device.
#cgo LDFLAGS: -framework Metal -framework Foundation -framework CoreGraphics
#include "metal_bridge.h"
*/
import "C"

import "unsafe"

// cgoMetalBridge is the [metalBridge] of metal_bridge.m.
type cgoMetalBridge struct{}

// newMetalBackend returns the Metal backend over the Objective-C of
// metal_bridge.m.
func newMetalBackend() backend { return newMetalBackendOver(cgoMetalBridge{}) }

func (cgoMetalBridge) copyDevices(devs []uintptr) int {
	if len(devs) == 0 {
		return 0
	}
	return int(C.mtb_copy_devices((*C.uintptr_t)(unsafe.Pointer(&devs[0])), C.int(len(devs))))
}

func (cgoMetalBridge) maxBufferLength(dev uintptr) int64 {
	return int64Of(uint64(C.mtb_max_buffer_length(C.uintptr_t(dev))))
}

func (cgoMetalBridge) newBuffer(dev uintptr, length int64) uintptr {
	return uintptr(C.mtb_new_buffer(C.uintptr_t(dev), C.uint64_t(length)))
}

func (cgoMetalBridge) bufferContents(buf uintptr) unsafe.Pointer {
	return C.mtb_buffer_contents(C.uintptr_t(buf))
}

func (cgoMetalBridge) bufferAllocatedSize(buf uintptr) int64 {
	return int64Of(uint64(C.mtb_buffer_allocated_size(C.uintptr_t(buf))))
}

func (cgoMetalBridge) release(obj uintptr) { C.mtb_release(C.uintptr_t(obj)) }

func (cgoMetalBridge) memInfo(dev uintptr) (workingSet, allocated int64) {
	var ws, used C.uint64_t
	C.mtb_mem_info(C.uintptr_t(dev), &ws, &used)
	return int64Of(uint64(ws)), int64Of(uint64(used))
}

func (cgoMetalBridge) registryID(dev uintptr) uint64 {
	return uint64(C.mtb_registry_id(C.uintptr_t(dev)))
}

func (cgoMetalBridge) name(dev uintptr) string {
	var buf [256]C.char
	C.mtb_device_name(C.uintptr_t(dev), &buf[0], C.int(len(buf)))
	return C.GoString(&buf[0])
}

package memtrack

import (
	"math"
	"unsafe"
)

// metalBridge is the Metal backend's view of Metal: one method per C
// function of metal_bridge.h, and nothing Objective-C. Devices and buffers
// cross it as opaque handles, each a Metal object that the bridge retained
// for Go; only release gives one back. A bridge must be safe for concurrent
// use.
//
// The cgo implementation is in metal_bridge_cgo_darwin.go; tests put an
// in-memory fake behind the same methods, so that everything above the C
// calls is tested on any system.
type metalBridge interface {
	// copyDevices stores a retained handle for each Metal device, in a
	// stable order, in devs (at most len(devs) of them) and returns how many
	// it stored: mtb_copy_devices.
	copyDevices(devs []uintptr) int
	// maxBufferLength returns the largest buffer the device can allocate.
	maxBufferLength(dev uintptr) int64
	// newBuffer allocates a zeroed shared-storage buffer of length > 0
	// bytes and returns its retained handle, or 0 if Metal returned none.
	newBuffer(dev uintptr, length int64) uintptr
	// bufferContents returns the host address of a shared-storage buffer.
	bufferContents(buf uintptr) unsafe.Pointer
	// bufferAllocatedSize returns the bytes Metal set aside for the buffer:
	// its length, rounded up.
	bufferAllocatedSize(buf uintptr) int64
	// release gives back a handle from copyDevices or newBuffer.
	release(obj uintptr)
	// memInfo returns the device's recommendedMaxWorkingSetSize and
	// currentAllocatedSize.
	memInfo(dev uintptr) (workingSet, allocated int64)
}

// int64Of converts a byte count that C reports as unsigned, saturating at
// math.MaxInt64 instead of wrapping to a negative figure.
func int64Of(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

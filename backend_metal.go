//go:build metal && darwin && !ios

package memtrack

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/memtrack/memtrack/internal/bytesize"
)

// metalMaxDevices bounds the Metal devices the backend takes from the bridge:
// a Mac has a handful of GPUs at most.
const metalMaxDevices = 64

// metalDevice is one Metal device as the backend holds it.
type metalDevice struct {
	handle    uintptr // the retained id<MTLDevice>, held for the life of the process
	maxBuffer int64   // its maxBufferLength
}

// metalBackend allocates Metal buffers in shared storage, which the CPU and
// the GPU both address, through a [metalBridge]. Each [memory] it fills
// holds the buffer's handle in ptr, its contents in host and its
// allocatedSize in reserved. It is immutable once made, and so safe for
// concurrent use where its bridge is.
type metalBackend struct {
	bridge metalBridge
	devs   []metalDevice // in ordinal order
	err    error         // why there are no devices, if there are none
}

// newMetalBackendOver takes the devices of br, once; the backend keeps their
// handles for the life of the process, like the device table it belongs to.
func newMetalBackendOver(br metalBridge) *metalBackend {
	handles := make([]uintptr, metalMaxDevices)
	n := min(max(br.copyDevices(handles), 0), len(handles))
	if n == 0 {
		return &metalBackend{err: fmt.Errorf("%w: metal: no Metal device found (MTLCopyAllDevices and MTLCreateSystemDefaultDevice returned none): "+
			"this Mac has no Metal GPU, or the process runs where it cannot reach one, such as a virtual machine", ErrBackendUnavailable)}
	}
	devs := make([]metalDevice, n)
	for i, h := range handles[:n] {
		devs[i] = metalDevice{handle: h, maxBuffer: br.maxBufferLength(h)}
	}
	return &metalBackend{bridge: br, devs: devs}
}

func (m *metalBackend) devices() (int, error) { return len(m.devs), m.err }

// device returns device ordinal, which the device table has checked already.
func (m *metalBackend) device(ordinal int) (metalDevice, error) {
	if m.err != nil {
		return metalDevice{}, m.err
	}
	if ordinal < 0 || ordinal >= len(m.devs) {
		return metalDevice{}, fmt.Errorf("%w: metal:%d, this machine has %d metal device(s)", ErrInvalidOrdinal, ordinal, len(m.devs))
	}
	return m.devs[ordinal], nil
}

// alloc allocates a shared-storage buffer of size bytes. A request past the
// device's maxBufferLength is refused before Metal sees it, and a buffer
// Metal does not return is out of memory (an [*OutOfMemoryError], once the
// device table has made one of it); both are counted as failed
// allocations by the caller.
func (m *metalBackend) alloc(ordinal int, size int64, mem *memory) error {
	d, err := m.device(ordinal)
	if err != nil {
		return err
	}
	if size > d.maxBuffer {
		return &callError{op: "alloc", oom: true, err: errors.New("larger than the largest Metal buffer this device allows (maxBufferLength " + bytesize.Format(d.maxBuffer) + ")")}
	}
	buf := m.bridge.newBuffer(d.handle, size)
	if buf == 0 {
		ws, used := m.bridge.memInfo(d.handle)
		return &callError{op: "alloc", oom: true, err: fmt.Errorf("Metal returned no buffer (the device has %s allocated of a recommended working set of %s)",
			bytesize.Format(used), bytesize.Format(ws))}
	}
	p := m.bridge.bufferContents(buf)
	if p == nil {
		m.bridge.release(buf)
		return &callError{op: "alloc", err: errors.New("metal: shared-storage buffer has no contents")}
	}
	*mem = memory{ptr: buf, host: p, reserved: m.bridge.bufferAllocatedSize(buf)}
	return nil
}

// free releases the buffer behind mem; [Buffer.Free] calls it once per
// buffer, so each handle is released exactly once.
func (m *metalBackend) free(_ int, _ int64, mem *memory) error {
	if mem.ptr == 0 {
		return &callError{op: "free", err: errors.New("metal: no buffer handle to release")}
	}
	m.bridge.release(mem.ptr)
	return nil
}

// memInfo reports the device's recommended working set as its total, and
// that minus the memory the device has allocated, for every resource of this
// process and not only this package's buffers, as free (clamped at 0, since
// the working set is a recommendation that allocations may pass).
func (m *metalBackend) memInfo(ordinal int) (free, total int64, err error) {
	d, err := m.device(ordinal)
	if err != nil {
		return 0, 0, err
	}
	total, used := m.bridge.memInfo(d.handle)
	return max(total-used, 0), total, nil
}

// metalBridge is the Metal backend's view of Metal: one method per C
// function of metal_bridge.h, and nothing Objective-C. Devices and buffers
// cross it as opaque handles, each a Metal object that the bridge retained
// for Go; only release gives one back. A bridge must be safe for concurrent
// use.
//
// The cgo implementation is cgoMetalBridge; the tests put an in-memory
// fake behind the same methods, so that everything above the C calls is
// tested without Metal (on Linux, against a C stand-in for the bridge).
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
	// registryID returns the device's registryID: mtb_registry_id.
	registryID(dev uintptr) uint64
	// name returns the device's name: mtb_device_name.
	name(dev uintptr) string
}

// int64Of converts a byte count that C reports as unsigned, saturating at
// math.MaxInt64 instead of wrapping to a negative figure.
func int64Of(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// info returns the Metal device's name and its registryID in hex, as ioreg
// prints it ("0x1000003f2"): the registry ID names the GPU for as long as
// the system runs, and is how the bridge orders the devices.
func (m *metalBackend) info(ordinal int) (name, uuid string, err error) {
	d, err := m.device(ordinal)
	if err != nil {
		return "", "", err
	}
	return m.bridge.name(d.handle), "0x" + strconv.FormatUint(m.bridge.registryID(d.handle), 16), nil
}

//go:build cuda

package memtrack

// The host function that FreeAsync enqueues after each free calls back into
// Go here (a file of its own: cgo allows no C definitions beside //export).

/*
#include <stdint.h>
*/
import "C"

// memtrackRetired uncounts, from the device-side figure, a buffer whose
// stream has executed its free. The token packs the device ordinal (low 16
// bits) and the buffer's size. It runs on a thread of the driver and must
// not call the driver.
//
//export memtrackRetired
func memtrackRetired(token C.uintptr_t) {
	t := uint64(token)
	if sd := sideOf(int(t & 0xffff)); sd != nil {
		_ = sd.held.Free(int64(t >> 16))
	}
}

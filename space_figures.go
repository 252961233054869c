package memtrack

import "go.uber.org/atomic"

// The figures of a device's reservations and mappings. The reservations
// are elastic memory's (reservation.go), but the unmaps are the release
// path's (deviceTable.release, unmapNow), which every unmap takes,
// Reservation.Unmap's and the leak watch's alike: the core counts each
// there, once, and a ReturnCheck reads what it counted. A mapping that the
// allocation path refuses after the backend mapped it (Device.refuse) is
// unmapped there, and counted in neither figure: it was never mapped for
// the program.

// spaceFigures is what a device counts of its reservations: the address
// space reserved (AddressSpace) and the reservations, and, for a
// ReturnCheck, the cumulative bytes mapped (Reservation.Map) and unmapped
// (every unmap of the release path).
type spaceFigures struct {
	space, reservations atomic.Int64
	mapped, unmapped    atomic.Int64
}

// spacesSlot is the slot of a device's reservations' figures in its state.
const spacesSlot = 7

// spacesOf returns the figures of device ordinal of s, made where make is
// true; nil where they were never made.
func spacesOf(s *deviceTable, ordinal int, make bool) *spaceFigures {
	if s == nil {
		return nil
	}
	var newState func() *spaceFigures
	if make {
		newState = func() *spaceFigures { return new(spaceFigures) }
	}
	return slotOf(s, ordinal, spacesSlot, newState)
}

// Package addrspace keeps the invariants of one reservation of address
// space: its base, its size, the granularity of its mappings, and the
// ranges mapped into it. memtrack's backends call it before and after the
// driver or the operating system, so that a range the driver would refuse,
// or worse accept, never reaches it: a CUDA reservation
// (cuMemAddressReserve, then cuMemCreate, cuMemMap and cuMemSetAccess per
// mapping) and a CPU one (address space reserved with no access, pages
// committed and decommitted) follow the same rules.
//
// # The rules
//
// A [Reservation] is made with [New] from a base, a size and a
// granularity: the size is a positive multiple of the granularity and the
// base is aligned to it. A mapping is a range [offset, offset+size) of it
// whose offset and size are multiples of the granularity, with size above
// 0, inside the reservation, and overlapping no other mapping. An unmap
// names exactly one mapping, by its offset and size: the CUDA driver
// unmaps "the entire contiguous address range that was mapped to", never a
// part of it nor two at once (cuMemUnmap), and the CPU's reservations keep
// the same rule so that both count alike. A reservation is released only
// once nothing is mapped in it; after that it refuses everything.
//
// Every refusal is an error that wraps one of the sentinel errors
// ([ErrUnaligned], [ErrOutOfRange], [ErrOverlap], [ErrNotMapped],
// [ErrBusy], [ErrMapped], [ErrReleased]) in a [*RangeError] that carries
// the details, and changes nothing.
//
// # A map or an unmap in two steps
//
// Between the check and the driver's answer, another goroutine must not
// map the same range, nor unmap a range whose mapping the driver has not
// made yet. So a map is [Reservation.BeginMap], which checks the range and
// claims it, the driver's call, then [Reservation.EndMap] with the
// driver's outcome: a failed map gives the range back. An unmap is
// [Reservation.BeginUnmap], which checks that the range is exactly one
// mapping and marks it as being unmapped, the driver's call, then
// [Reservation.EndUnmap]: a failed unmap leaves the mapping as it was.
// While a map or an unmap of a mapping is under way, the mapping occupies
// its range (a map that overlaps it is refused with [ErrOverlap]), and
// another unmap of it is refused with [ErrBusy], as is a release.
// [Reservation.Map] and [Reservation.Unmap] do both steps at once, for a
// caller with no driver in between.
//
// # Cost
//
// A Reservation is safe for concurrent use: one mutex guards it. The
// mappings are kept sorted by offset in a slice, so that a check is a
// binary search and a map or an unmap one insertion or deletion in the
// slice, which moves the mappings after it; no operation allocates but the
// slice's growth.
package addrspace

// Package hostmem reads and maps the host's memory for memtrack's CPU
// backend: the machine's (or its cgroup's) free and total memory, the
// process's own use of it, the CPU's model name, and anonymous mappings
// that go back to the OS when unmapped, with the bytes of a set of them
// that are not resident yet ([Mappings]), and reservations of address
// space in which ranges of pages are committed and decommitted
// ([Reservation]).
//
// Its invariants: a figure it cannot read is an error, never a guess; a
// cgroup's limit replaces the machine's total only where it is lower; and
// memory from [Map] is zeroed, owned by the caller until [Unmap], and never
// in the Go heap on Unix.
//
// # Reservations
//
// A [Reservation] is address space with no access and no memory behind
// it (mmap with PROT_NONE on Unix, VirtualAlloc with MEM_RESERVE on
// Windows; reserve_unix.go and reserve_windows.go cite the manual pages).
// [Reservation.Commit] makes whole pages of it readable and writable, and
// the OS gives each memory, zeroed, at its first write;
// [Reservation.Decommit] gives their memory back to the OS at once, out of
// the process's resident set, and makes them inaccessible again;
// [Reservation.Release] gives back the whole range. Sizes and offsets are
// multiples of [PageSize], a reservation's size a multiple of
// [ReserveGranularity] (the page size on Unix, the allocation granularity
// on Windows); anything else is refused with [ErrBadRange] before any
// system call. On an OS without such reservations (Plan 9, WebAssembly),
// Reserve returns [ErrNoReservations]. A Reservation checks its own
// bounds, not which ranges are committed: its caller keeps that (package
// addrspace), and commits and decommits whole ranges it committed.
package hostmem

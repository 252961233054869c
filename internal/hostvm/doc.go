// Package hostvm reserves address space of the process with no access and
// no memory behind it, and commits and decommits pages of it: the CPU's
// half of memtrack's elastic memory, beside the CUDA driver's reservations
// (internal/cudadrv). Package addrspace keeps which ranges of a
// reservation are committed; this package makes the system calls.
//
// # The operations
//
// [Reserve] takes address space with no access and no memory (mmap with
// PROT_NONE on Unix, VirtualAlloc with MEM_RESERVE on Windows;
// reserve_unix.go and reserve_windows.go cite the manual pages).
// [Reservation.Commit] makes whole pages of it readable and writable, and
// the OS gives each memory, zeroed, at its first write;
// [Reservation.Decommit] gives their memory back to the OS at once, out of
// the process's resident set, and makes them inaccessible again;
// [Reservation.Release] gives back the whole range, committed pages
// included.
//
// # The invariants
//
// Sizes and offsets are multiples of [PageSize], a reservation's size a
// multiple of [ReserveGranularity] (the page size on Unix, the allocation
// granularity on Windows); anything else, and any range not inside the
// reservation, is refused with [ErrBadRange] before any system call, so
// that no call reaches memory outside the reservation. After Release,
// every call is refused with [ErrReleased]: the range may belong to
// someone else by then. On an OS without such reservations (Plan 9,
// WebAssembly), Reserve returns [ErrNoReservations]. A Reservation checks
// its own bounds, not which ranges are committed: its caller keeps that.
// It is safe for concurrent use; Commit and Decommit of disjoint ranges
// run at once, Release waits for them.
//
// # Dependencies
//
// The package uses golang.org/x/sys (unix, windows) for mmap at a fixed
// address and for VirtualAlloc, which the standard library's syscall
// package lacks; memtrack's root package does not import it until the
// CPU's elastic memory is built on it.
package hostvm

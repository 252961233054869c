//go:build aix || darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris

package hostvm

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Unix (mmap(2), mprotect(2), munmap(2)):
//
//   - Reserve maps anonymous private memory with PROT_NONE: "Pages may not
//     be accessed", so the range is address space alone, which the OS
//     backs with no memory. MAP_NORESERVE (Linux) asks the kernel not to
//     reserve swap space for it ("Do not reserve swap space for this
//     mapping"); in the strict overcommit mode (vm.overcommit_memory=2)
//     the kernel ignores the flag and accounts committed pages, so a
//     commit the machine cannot back fails there with ENOMEM.
//   - Commit is mprotect(PROT_READ|PROT_WRITE) of the range: anonymous
//     memory "is initialized to zero", and the kernel gives a page memory
//     at its first write.
//   - Decommit maps the range again, anonymous and PROT_NONE, with
//     MAP_FIXED: "If the memory region specified by addr and length
//     overlaps pages of any existing mapping(s), then the overlapped part
//     of the existing mapping(s) will be discarded". The old pages go back
//     to the kernel at once, out of the resident set, in one system call;
//     madvise(MADV_DONTNEED) then mprotect(PROT_NONE) would be two, and
//     leave the range accounted as writable until the second.
//   - Release is munmap of the whole reservation.

// osReservation is the mapping that holds the reservation.
type osReservation struct {
	mem []byte
}

func (o *osReservation) reserve(size int64) error {
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|mapNoReserve)
	if err != nil {
		return os.NewSyscallError("mmap", err)
	}
	o.mem = mem
	return nil
}

func (o *osReservation) base() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(o.mem))) }

func (o *osReservation) bytes(offset, size int64) []byte {
	return o.mem[offset : offset+size : offset+size]
}

// supported: Unix reserves address space without memory.
const supported = true

func (o *osReservation) commit(offset, size int64) error {
	return os.NewSyscallError("mprotect", unix.Mprotect(o.mem[offset:offset+size], unix.PROT_READ|unix.PROT_WRITE))
}

func (o *osReservation) decommit(offset, size int64) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&o.mem[offset]), uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_FIXED|mapNoReserve)
	return os.NewSyscallError("mmap", err)
}

func (o *osReservation) release(int64) error {
	return os.NewSyscallError("munmap", unix.Munmap(o.mem))
}

// PageSize returns the granularity of Commit and Decommit: the OS's page
// size.
func PageSize() int64 { return int64(os.Getpagesize()) }

// ReserveGranularity returns the granularity of a reservation's size: the
// page size, on Unix.
func ReserveGranularity() int64 { return PageSize() }

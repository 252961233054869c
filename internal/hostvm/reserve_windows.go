package hostvm

import (
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

// On Windows (VirtualAlloc, VirtualFree):
//
//   - Reserve is VirtualAlloc with MEM_RESERVE and PAGE_NOACCESS:
//     "Reserves a range of the process's virtual address space without
//     allocating any actual physical storage in memory or in the paging
//     file on disk". Its base is rounded to the allocation granularity, so
//     sizes are multiples of it, or the rest of the last unit would be
//     wasted.
//   - Commit is VirtualAlloc with MEM_COMMIT and PAGE_READWRITE of the
//     range, which "guarantees that when the caller later initially
//     accesses the memory, the contents will be zero"; the commit charge
//     is taken at once, so a commit the system cannot back fails.
//   - Decommit is VirtualFree with MEM_DECOMMIT: "Decommits the specified
//     region of committed pages. After the operation, the pages are in the
//     reserved state", their physical storage released.
//   - Release is VirtualFree of the base with size 0 and MEM_RELEASE,
//     which releases the whole reservation, committed pages included.

type osReservation struct {
	addr uintptr
}

func (o *osReservation) reserve(size int64) error {
	a, err := windows.VirtualAlloc(0, uintptr(size), windows.MEM_RESERVE, windows.PAGE_NOACCESS)
	if err != nil {
		return os.NewSyscallError("VirtualAlloc", err)
	}
	o.addr = a
	return nil
}

func (o *osReservation) base() uintptr { return o.addr }

func (o *osReservation) bytes(offset, size int64) []byte {
	// The reservation's memory is outside the Go heap: its address, read
	// as a pointer, is no pointer the collector follows.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&o.addr))
	return unsafe.Slice((*byte)(unsafe.Add(base, offset)), size)
}

// supported: Windows reserves address space without memory.
const supported = true

func (o *osReservation) commit(offset, size int64) error {
	_, err := windows.VirtualAlloc(o.addr+uintptr(offset), uintptr(size), windows.MEM_COMMIT, windows.PAGE_READWRITE)
	return os.NewSyscallError("VirtualAlloc", err)
}

func (o *osReservation) decommit(offset, size int64) error {
	return os.NewSyscallError("VirtualFree", windows.VirtualFree(o.addr+uintptr(offset), uintptr(size), windows.MEM_DECOMMIT))
}

func (o *osReservation) release(int64) error {
	return os.NewSyscallError("VirtualFree", windows.VirtualFree(o.addr, 0, windows.MEM_RELEASE))
}

// PageSize returns the granularity of Commit and Decommit: the system's
// page size.
func PageSize() int64 { return int64(os.Getpagesize()) }

// systemInfo is Windows's SYSTEM_INFO.
type systemInfo struct {
	processorArchitecture     uint16
	reserved                  uint16
	pageSize                  uint32
	minimumApplicationAddress uintptr
	maximumApplicationAddress uintptr
	activeProcessorMask       uintptr
	numberOfProcessors        uint32
	processorType             uint32
	allocationGranularity     uint32
	processorLevel            uint16
	processorRevision         uint16
}

// ReserveGranularity returns the granularity of a reservation's size: the
// system's allocation granularity (GetSystemInfo's
// dwAllocationGranularity, 64 KiB on current systems), to which
// VirtualAlloc rounds a reservation's base.
func ReserveGranularity() int64 {
	var si systemInfo
	proc := windows.NewLazySystemDLL("kernel32.dll").NewProc("GetSystemInfo")
	if proc.Find() != nil {
		return 64 << 10
	}
	proc.Call(uintptr(unsafe.Pointer(&si)))
	if si.allocationGranularity == 0 {
		return 64 << 10
	}
	return int64(si.allocationGranularity)
}

//go:build linux

package hostmem

import (
	"encoding/binary"
	"math/bits"
	"os"
	"syscall"
	"unsafe"
)

// residencyKnown: Linux says which pages are resident (mincore).
const residencyKnown = true

// residentChunk is the most pages one mincore call reads, so that its
// answer (a byte a page) stays 64 KiB: 256 MiB with 4 KiB pages.
const residentChunk = 1 << 16

// notResident returns the bytes of the mapping of size bytes at a whose
// pages are not resident, as mincore(2) reports them; vec is the buffer
// for the answers, grown as needed.
func notResident(a uintptr, size int, vec *[]byte) (int64, error) {
	page := os.Getpagesize()
	var missing int64
	for off := 0; off < size; off += residentChunk * page {
		l := min(size-off, residentChunk*page)
		pages := (l + page - 1) / page
		if cap(*vec) < pages {
			*vec = make([]byte, min(residentChunk, (size+page-1)/page))
		}
		v := (*vec)[:pages]
		if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, a+uintptr(off), uintptr(l), uintptr(unsafe.Pointer(&v[0]))); e != 0 {
			return 0, os.NewSyscallError("mincore", e)
		}
		missing += int64(pages-resident(v)) * int64(page)
		if last := l - (pages-1)*page; v[pages-1]&1 == 0 {
			missing -= int64(page - last) // the mapping's part of its last page only
		}
	}
	return missing, nil
}

// resident counts the bytes of v whose lowest bit is set (the kernel's
// answer for a resident page), eight at a time.
func resident(v []byte) int {
	n, i := 0, 0
	for ; i+8 <= len(v); i += 8 {
		n += bits.OnesCount64(binary.LittleEndian.Uint64(v[i:]) & 0x0101010101010101)
	}
	for ; i < len(v); i++ {
		n += int(v[i] & 1)
	}
	return n
}

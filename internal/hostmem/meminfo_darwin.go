//go:build darwin

package hostmem

import (
	"encoding/binary"
	"syscall"
)

// MemInfo returns the free and total memory of the machine: hw.memsize,
// and the free and speculative pages of the VM system.
func MemInfo() (free, total int64, err error) {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil {
		return 0, 0, err
	}
	b := []byte(s)
	for len(b) < 8 { // Sysctl drops trailing zero bytes
		b = append(b, 0)
	}
	total = int64(binary.LittleEndian.Uint64(b))
	page, err := syscall.SysctlUint32("hw.pagesize")
	if err != nil {
		return 0, 0, err
	}
	freePages, err := syscall.SysctlUint32("vm.page_free_count")
	if err != nil {
		return 0, 0, err
	}
	spec, _ := syscall.SysctlUint32("vm.page_speculative_count")
	return int64(freePages+spec) * int64(page), total, nil
}

// ModelName returns the CPU's brand string (sysctl
// machdep.cpu.brand_string), such as "Apple M2 Max".
func ModelName() (string, error) {
	return syscall.Sysctl("machdep.cpu.brand_string")
}

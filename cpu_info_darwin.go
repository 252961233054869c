//go:build darwin

package memtrack

import "syscall"

// cpuModelName returns the CPU's brand string (sysctl
// machdep.cpu.brand_string), such as "Apple M2 Max".
func cpuModelName() (string, error) {
	return syscall.Sysctl("machdep.cpu.brand_string")
}

package hostvm

import "golang.org/x/sys/unix"

// mapNoReserve is mmap's MAP_NORESERVE, which a reservation asks for on
// Linux (reserve_unix.go).
const mapNoReserve = unix.MAP_NORESERVE

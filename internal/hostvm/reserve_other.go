//go:build !(aix || darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris || windows)

package hostvm

import "os"

// osReservation has no OS reservation behind it here: Reserve returns
// ErrNoReservations.
type osReservation struct{}

func (*osReservation) reserve(int64) error       { return ErrNoReservations }
func (*osReservation) base() uintptr             { return 0 }
func (*osReservation) bytes(int64, int64) []byte { return nil }

// supported: this OS has no reservations.
const supported = false

func (*osReservation) commit(int64, int64) error   { return ErrNoReservations }
func (*osReservation) decommit(int64, int64) error { return ErrNoReservations }
func (*osReservation) release(int64) error         { return ErrNoReservations }

// PageSize returns the OS's page size.
func PageSize() int64 { return int64(os.Getpagesize()) }

// ReserveGranularity returns the page size.
func ReserveGranularity() int64 { return PageSize() }

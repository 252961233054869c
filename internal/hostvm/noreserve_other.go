//go:build aix || darwin || dragonfly || freebsd || netbsd || openbsd || solaris

package hostvm

// mapNoReserve is 0 on the Unixes other than Linux, whose mmap either has
// no MAP_NORESERVE (FreeBSD removed it) or documents it as unimplemented:
// a PROT_NONE private mapping takes no memory there either.
const mapNoReserve = 0

// Package hostmem reads and maps the host's memory for memtrack's CPU
// backend: the machine's (or its cgroup's) free and total memory, the
// process's own use of it, the CPU's model name, and anonymous mappings
// that go back to the OS when unmapped, with the bytes of a set of them
// that are not resident yet ([Mappings]).
//
// Its invariants: a figure it cannot read is an error, never a guess; a
// cgroup's limit replaces the machine's total only where it is lower; and
// memory from [Map] is zeroed, owned by the caller until [Unmap], and never
// in the Go heap on Unix.
package hostmem

//go:build linux

package hostmem

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// ProcessUsed returns the memory the process uses: its cgroup's usage where
// a cgroup limit lower than the machine's memory applies to it (what that
// limit is enforced against), else its resident set size.
func ProcessUsed() (int64, error) {
	if _, total, err := MemInfo(); err == nil {
		if limit, used, ok := cgroupMemory(); ok && limit <= total && used > 0 {
			return used, nil
		}
	}
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	return parseStatm(string(data), os.Getpagesize())
}

// parseStatm returns the resident bytes of a /proc/self/statm line: its
// second field, in pages.
func parseStatm(s string, pageSize int) (int64, error) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0, errors.New("/proc/self/statm has no resident field")
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || pages < 0 {
		return 0, errors.New("/proc/self/statm: resident field " + strconv.Quote(f[1]) + " is not a page count")
	}
	return pages * int64(pageSize), nil
}

// ProcessAnonymous returns the process's anonymous resident memory,
// exactly: the Anonymous line of /proc/self/smaps_rollup, which the kernel
// sums over the process's page tables when it is read. It leaves out the
// pages of files, the program's own code among them, which the kernel
// brings in as code first runs. /proc/self/statm's figure, which
// ProcessUsed reads, is cheaper but approximate: proc(5) says of it that
// "some of these values are inaccurate because of a kernel-internal
// scalability optimization. If accurate values are required, use
// /proc/pid/smaps or /proc/pid/smaps_rollup instead".
func ProcessAnonymous() (int64, error) {
	data, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0, err
	}
	return parseRollup(string(data), "Anonymous:")
}

// parseRollup returns the bytes of the line of smaps_rollup that starts
// with field ("Anonymous:    1234 kB").
func parseRollup(s, field string) (int64, error) {
	for line := range strings.Lines(s) {
		rest, ok := strings.CutPrefix(line, field)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			break
		}
		return kb << 10, nil
	}
	return 0, errors.New("/proc/self/smaps_rollup has no " + field + " line in kB")
}

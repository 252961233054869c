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

// ResidentFiles returns the resident bytes of the process's pages that map
// files (its code, its libraries, files it maps): RssFile of
// /proc/self/status (proc(5)), part of the resident set that ProcessUsed
// reads.
func ResidentFiles() (int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return parseStatusKB(string(data), "RssFile:")
}

// parseStatusKB returns, in bytes, the figure of a /proc/PID/status line
// that starts with key, written in kB.
func parseStatusKB(s, key string) (int64, error) {
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(line, key)
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
	return 0, errors.New("/proc/self/status has no " + strings.TrimSuffix(key, ":") + " figure in kB")
}

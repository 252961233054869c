//go:build linux

package hostmem

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
)

// MemInfo returns the available and total memory of the machine, or of the
// process's cgroup where its limit is lower.
func MemInfo() (free, total int64, err error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	total, free = -1, -1
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kib, perr := strconv.ParseInt(f[1], 10, 64)
		if perr != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = kib << 10
		case "MemAvailable:":
			free = kib << 10
		}
	}
	if total < 0 || free < 0 {
		return 0, 0, errors.New("/proc/meminfo lacks MemTotal or MemAvailable")
	}
	if limit, used, ok := cgroupMemory(); ok && limit < total {
		total = limit
		free = min(free, max(limit-used, 0))
	}
	return free, total, nil
}

// cgroupMemory returns the memory limit and usage of the process's cgroup,
// if a limit is set.
func cgroupMemory() (limit, used int64, ok bool) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0, false
	}
	return cgroupLimit("/sys/fs/cgroup", string(self))
}

// cgroupLimit finds the memory limit of the cgroups listed in self (the
// text of /proc/self/cgroup) under the cgroup file system at root: v2's
// memory.max, or v1's memory.limit_in_bytes (hybrid hosts), the lower if
// both are set. A path that does not resolve (inside a cgroup namespace)
// falls back to the hierarchy's root, which is then the process's own.
func cgroupLimit(root, self string) (limit, used int64, ok bool) {
	for _, line := range strings.Split(strings.TrimSpace(self), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var dir, limitFile, usageFile string
		switch {
		case f[0] == "0" && f[1] == "":
			dir, limitFile, usageFile = root, "memory.max", "memory.current"
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir, limitFile, usageFile = root+"/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
		default:
			continue
		}
		for _, d := range []string{dir + strings.TrimSuffix(f[2], "/"), dir} {
			l, found := readCgroupInt(d + "/" + limitFile)
			if !found {
				continue
			}
			// v1 writes "no limit" as a number near the int64 maximum.
			if l < 1<<62 && (!ok || l < limit) {
				limit, ok = l, true
				used, _ = readCgroupInt(d + "/" + usageFile)
			}
			break
		}
	}
	return limit, used, ok
}

// readCgroupInt reads a cgroup file holding a number; "max" reads as absent.
func readCgroupInt(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return v, err == nil
}

//go:build linux

package memtrack

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
)

// hostMemInfo returns the available and total memory of the machine, or of
// the process's cgroup (v2) where its memory.max is lower.
func hostMemInfo() (free, total int64, err error) {
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
		return 0, 0, errors.New("memtrack: /proc/meminfo lacks MemTotal or MemAvailable")
	}
	if limit, used, ok := cgroupMemory(); ok && limit < total {
		total = limit
		free = min(free, max(limit-used, 0))
	}
	return free, total, nil
}

// cgroupMemory returns the cgroup v2 memory.max and memory.current of the
// process, if a limit is set.
func cgroupMemory() (limit, used int64, ok bool) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		path, found := strings.CutPrefix(line, "0::")
		if !found {
			continue
		}
		dir := "/sys/fs/cgroup" + strings.TrimSuffix(path, "/")
		if limit, ok = readCgroupInt(dir + "/memory.max"); !ok {
			// Inside a cgroup namespace the path may not resolve; the
			// namespace's root holds the process's own files.
			dir = "/sys/fs/cgroup"
			if limit, ok = readCgroupInt(dir + "/memory.max"); !ok {
				return 0, 0, false
			}
		}
		used, _ = readCgroupInt(dir + "/memory.current")
		return limit, used, true
	}
	return 0, 0, false
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

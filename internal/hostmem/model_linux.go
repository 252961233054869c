//go:build linux

package hostmem

import (
	"bufio"
	"io"
	"os"
	"strings"
)

// ModelName returns the CPU's model name from /proc/cpuinfo, or "" where
// the kernel gives none (arm64 kernels list only implementer and part
// numbers).
func ModelName() (string, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return parseCPUInfo(f)
}

// cpuModelKeys are the /proc/cpuinfo fields that name the CPU's model, by
// preference: x86 and others, then Raspberry Pi and other boards, MIPS and
// POWER.
var cpuModelKeys = []string{"model name", "Model", "cpu model", "cpu"}

// parseCPUInfo returns the value of the most preferred of cpuModelKeys in a
// /proc/cpuinfo listing, taken from its first occurrence.
func parseCPUInfo(r io.Reader) (string, error) {
	found := make([]string, len(cpuModelKeys))
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		for i, k := range cpuModelKeys {
			if key == k && found[i] == "" {
				found[i] = value
			}
		}
		if found[0] != "" {
			break // the first key wins; the rest of the file repeats it per CPU
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	for _, v := range found {
		if v != "" {
			return v, nil
		}
	}
	return "", nil
}

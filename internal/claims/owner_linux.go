//go:build linux

package claims

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Self returns this process as a claim names it: the host's name, the PID
// namespace (/proc/self/ns/pid), the PID and its start time
// (/proc/self/stat); a part it cannot read is left empty.
func Self() Owner {
	o := Owner{PID: os.Getpid()}
	o.Host, _ = os.Hostname()
	o.PIDNS, _ = os.Readlink("/proc/self/ns/pid")
	o.Start, _ = startTime("self")
	return o
}

// Alive reports whether owner o still runs, as self sees it: known only
// where o is on self's host and in self's PID namespace, and its start
// time is known; then it runs where /proc has its PID, started at o's
// start time (a PID taken again by another process is another process).
func Alive(o, self Owner) (alive, known bool) {
	if o.Host == "" || o.Host != self.Host || o.PIDNS == "" || o.PIDNS != self.PIDNS || o.Start == 0 {
		return false, false
	}
	start, err := startTime(strconv.Itoa(o.PID))
	if errors.Is(err, fs.ErrNotExist) {
		return false, true
	}
	if err != nil {
		return false, false
	}
	return start == o.Start, true
}

// startTime reads the start time of process pid ("self" for this one):
// the 22nd field of /proc/PID/stat (proc(5)), counted after the command's
// name, which is in parentheses and may hold spaces and parentheses.
func startTime(pid string) (uint64, error) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStart(string(data))
}

// parseStart reads the start time of a /proc/PID/stat line.
func parseStart(s string) (uint64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat has no command name")
	}
	f := strings.Fields(s[i+1:])
	// After the name: state (3), ppid (4), ..., starttime (22).
	const field = 22 - 3
	if len(f) <= field {
		return 0, errors.New("/proc/PID/stat has no start time")
	}
	return strconv.ParseUint(f[field], 10, 64)
}

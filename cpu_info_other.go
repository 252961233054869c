//go:build !linux && !darwin

package memtrack

// cpuModelName gives no model name on this OS: the name is left empty.
func cpuModelName() (string, error) { return "", nil }

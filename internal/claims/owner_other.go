//go:build !linux

package claims

import "os"

// Self returns this process as a claim names it: the host's name and the
// PID; this OS gives no PID namespace or start time that the package reads.
func Self() Owner {
	o := Owner{PID: os.Getpid()}
	o.Host, _ = os.Hostname()
	return o
}

// Alive is never known on this OS: a claim lasts until its expiry.
func Alive(o, self Owner) (alive, known bool) { return false, false }

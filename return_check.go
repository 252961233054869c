package memtrack

import (
	"fmt"
	"strings"

	"github.com/memtrack/memtrack/internal/bytesize"
)

// The return check: whether the driver (or the OS) has the memory back
// that the program unmapped from its reservations. memtrack uncounts a
// mapping when the driver's unmap succeeds; whether the memory is then free
// is the driver's to say. A CUDA driver frees physical memory only once it
// is unmapped everywhere and every handle to it is released: a handle
// retained (cuMemRetainAllocationHandle) or exported to another process
// (cuMemExportToShareableHandle, then imported there) keeps it. The check
// reads the driver's figures before and after, and compares what they gave
// back with the bytes unmapped.

// ReturnCheck reads a device's figures before the program unmaps, to show
// afterwards whether the memory went back to the driver or the OS: make it
// with [Device.StartReturnCheck] before the unmaps, and call
// [ReturnCheck.End] after them.
type ReturnCheck struct {
	dev              Device
	granularity      int64
	before           Usage
	mapped, unmapped int64         // the device's cumulative bytes mapped and unmapped at the start
	process          processFigure // this process's figure at the start
}

// processFigure is this process's own memory on a device at one moment;
// exact says it is the backend's figure of its reservations. used is -1
// where there is none.
type processFigure struct {
	used  int64
	exact bool
}

// processUsed returns this process's figure of u's device: the backend's
// figure of its reservations where it has one (the CPU's), else
// u.ProcessUsed.
func (c *ReturnCheck) processUsed(u Usage) processFigure {
	if s := tableOf(c.dev.kind); s != nil && s.vmm != nil {
		if n, ok := s.vmm.reservedResident(c.dev.ordinal); ok {
			return processFigure{used: n, exact: true}
		}
	}
	if u.PerProcess {
		return processFigure{used: u.ProcessUsed}
	}
	return processFigure{used: -1}
}

// StartReturnCheck reads the device's figures ([Device.Usage]: device-wide,
// and per process through NVML where present) before the program unmaps
// memory from its reservations. It fails as [Device.MapGranularity] does,
// and where the figures cannot be read. A check, like every reading of
// figures, registers nothing ([UsedDevices]).
func (d Device) StartReturnCheck() (*ReturnCheck, error) {
	g, err := d.MapGranularity()
	if err != nil {
		return nil, err
	}
	f := spacesOf(tableOf(d.kind), d.ordinal, true)
	c := &ReturnCheck{dev: d, granularity: g, mapped: f.mapped.Load(), unmapped: f.unmapped.Load()}
	if c.before, err = d.Usage(); err != nil {
		return nil, err
	}
	c.process = c.processUsed(c.before)
	return c, nil
}

// End reads the figures again and compares them with what memtrack
// unmapped (by [Reservation.Unmap] and by the leak watch alike) and mapped
// on the device since [Device.StartReturnCheck].
func (c *ReturnCheck) End() (Return, error) {
	f := spacesOf(tableOf(c.dev.kind), c.dev.ordinal, true)
	p := c.processUsed(Usage{}) // the backend's figure of its reservations, where it has one
	after, err := c.dev.Usage()
	r := Return{
		Device:      c.dev,
		Before:      c.before,
		After:       after,
		Unmapped:    f.unmapped.Load() - c.unmapped,
		Mapped:      f.mapped.Load() - c.mapped,
		Granularity: c.granularity,
	}
	if err != nil {
		return r, err
	}
	r.Expected = r.Unmapped - r.Mapped
	r.DeviceReturned = after.Free - c.before.Free
	if !p.exact {
		p = c.processUsed(after)
	}
	if c.process.used >= 0 && p.used >= 0 && p.exact == c.process.exact {
		r.PerProcess = true
		r.ProcessBefore, r.ProcessAfter, r.ProcessReturned = c.process.used, p.used, c.process.used-p.used
	}
	return r, nil
}

// Return is what a [ReturnCheck] found: the device's figures before and
// after the unmaps, and whether they gave the memory back.
type Return struct {
	Device        Device
	Before, After Usage // the readings at StartReturnCheck and End
	// Unmapped and Mapped are the bytes memtrack unmapped and mapped on
	// the device in between: every unmap, whichever path made it
	// ([Reservation.Unmap], or the leak watch's of a reservation dropped
	// without Release, [LeakWatch].FreeLeaks), and every [Reservation.Map].
	// Expected is Unmapped - Mapped: what the figures should give back.
	Unmapped, Mapped, Expected int64
	// Granularity is the device's [Device.MapGranularity], the margin of
	// the comparison.
	Granularity int64
	// DeviceReturned is After.Free - Before.Free: what the device-wide
	// figure gave back (on the CPU, the process's resident memory, or its
	// cgroup's usage, that went back to the OS). Other processes'
	// allocations and frees move it too.
	DeviceReturned int64
	// PerProcess says whether both readings had a figure of this
	// process's own memory, which no other process moves: on a CUDA GPU
	// the driver's (NVML's, Usage.ProcessUsed); on the CPU the pages of
	// the device's reservations that are resident, as the OS says page by
	// page (mincore(2), on Linux), which nothing else the process does
	// moves, where its resident set moves with the Go runtime's heap.
	// ProcessBefore and ProcessAfter are then that figure at the start and
	// the end, and ProcessReturned what it gave back.
	PerProcess                                   bool
	ProcessBefore, ProcessAfter, ProcessReturned int64
}

// Given returns the bytes the driver's figures gave back: the per-process
// figure's where the readings have it, else the device-wide one's.
func (r Return) Given() int64 {
	if r.PerProcess {
		return r.ProcessReturned
	}
	return r.DeviceReturned
}

// Returned reports whether the figures gave back what was unmapped,
// within the granularity: Given() >= Expected - Granularity. Where they
// gave back more, memory other than the mappings was freed meanwhile.
func (r Return) Returned() bool { return r.Given() >= r.Expected-r.Granularity }

// NotGiven returns the bytes unmapped that the driver's figures did not
// give back, beyond the granularity, or 0.
func (r Return) NotGiven() int64 {
	if r.Returned() {
		return 0
	}
	return r.Expected - r.Given()
}

// String describes the check in a few lines: the figures before and after,
// and whether the memory went back.
func (r Return) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "return check on %v: unmapped %s, mapped %s (expected back: %s, within %s)\n",
		r.Device, bytesize.Format(r.Unmapped), bytesize.Format(r.Mapped), bytesize.Format(r.Expected), bytesize.Format(r.Granularity))
	fmt.Fprintf(&b, "  device-wide: free %s -> %s (%s back)\n",
		bytesize.Format(r.Before.Free), bytesize.Format(r.After.Free), signed(r.DeviceReturned))
	if r.PerProcess {
		what := "this process (the driver's figure)"
		if r.Device.kind == KindCPU {
			what = "the reservations' resident pages"
		}
		fmt.Fprintf(&b, "  %s: %s -> %s (%s back)\n", what,
			bytesize.Format(r.ProcessBefore), bytesize.Format(r.ProcessAfter), signed(r.ProcessReturned))
	}
	switch g := r.Given(); {
	case !r.Returned():
		fmt.Fprintf(&b, "  NOT given back: %s of the %s unmapped; the driver keeps memory while another handle to it is held (retained, or exported to another process)",
			bytesize.Format(r.Expected-g), bytesize.Format(r.Expected))
		if r.Device.kind == KindCPU {
			b.WriteString("; on the CPU a page is memory only from its first write, and pages never written give nothing back")
		}
		if !r.PerProcess {
			b.WriteString("; the device-wide figure also moves with other processes' allocations")
		}
		b.WriteString("\n")
	case g > r.Expected+r.Granularity:
		fmt.Fprintf(&b, "  given back, and %s more: other memory was freed meanwhile\n", bytesize.Format(g-r.Expected))
	default:
		b.WriteString("  given back\n")
	}
	return b.String()
}

// signed formats a number of bytes that may be negative.
func signed(n int64) string {
	if n < 0 {
		return "-" + bytesize.Format(-n)
	}
	return bytesize.Format(n)
}

package memtrack

import (
	"bytes"
	"expvar"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/tracker"
)

// Stats is a snapshot of one device's allocation statistics, the figures
// PyTorch's torch.cuda.memory_stats reports for its allocator (named as in
// docs/glossary.md). Tracked, PeakTracked, Buffers and PeakBuffers are exact; the cumulative figures are exact
// whenever no Free is in progress on the device, and never decrease between
// snapshots except across [Device.ResetAccumulatedMemoryStats].
type Stats struct {
	Device                 Device
	Tracked, PeakTracked   int64 // bytes held by live buffers (requested sizes), and its high-water mark
	AllocBytes, FreedBytes int64 // cumulative
	Buffers, PeakBuffers   int64 // live buffers
	Allocs, Frees          int64 // cumulative counts
	FailedAllocs           int64 // refused by the limit or by the backend
	Limit                  int64 // 0: none
	// Held is the bytes the device holds for live buffers and for buffers
	// freed with [Buffer.FreeAsync] whose stream has not yet executed the
	// free; PeakHeld is its high-water mark, exact like PeakTracked. They
	// equal Tracked and PeakTracked except for stream-ordered frees on CUDA.
	// Held is read after Tracked, not with it: while other goroutines free
	// in stream order, a buffer freed and retired between the two reads
	// is in Tracked and not in Held, which can then read below Tracked.
	Held, PeakHeld int64
	// Leaks is the buffers and tracked handles that the garbage collector
	// found unreachable without a free while the device was watched
	// ([LeakWatcher.Enable]), and LeakedBytes their bytes; cumulative.
	// A leak stays counted in Tracked unless [LeakWatch].FreeLeaks freed
	// it, which counts it in Frees too.
	Leaks, LeakedBytes int64
	// AddressSpace is the bytes of address space that the device's
	// reservations hold ([Device.Reserve]) until released, mapped or not,
	// and Reservations how many they are. A reservation is no memory: the
	// physical memory mapped into it ([Reservation.Map]) is in Tracked.
	AddressSpace, Reservations int64
}

func statsOf(d Device, s tracker.Stats) Stats {
	st := Stats{
		Device:       d,
		Tracked:      s.Tracked,
		PeakTracked:  s.PeakTracked,
		AllocBytes:   s.AllocBytes,
		FreedBytes:   s.FreedBytes,
		Buffers:      s.Buffers,
		PeakBuffers:  s.PeakBuffers,
		Allocs:       s.Allocs,
		Frees:        s.Frees,
		FailedAllocs: s.FailedAllocs,
		Limit:        s.Limit,
	}
	st.Held, st.PeakHeld = deviceHeld(d, s.Tracked, s.PeakTracked)
	l := d.Leaks().Stats()
	st.Leaks, st.LeakedBytes = l.Leaks, l.LeakedBytes
	st.AddressSpace, st.Reservations = d.addressSpace()
	return st
}

// MemorySummary returns a human-readable table of the device's statistics
// and of what its driver reports, in the manner of torch.cuda.memory_summary.
func (d Device) MemorySummary() string {
	s := d.MemoryStats()
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "memtrack memory summary: %v\n", d)
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\tnow\tpeak\tallocs\tfrees\t\n")
	fmt.Fprintf(w, "tracked bytes\t%s\t%s\t%s\t%s\t\n", bytesize.Format(s.Tracked), bytesize.Format(s.PeakTracked), bytesize.Format(s.AllocBytes), bytesize.Format(s.FreedBytes))
	fmt.Fprintf(w, "buffers\t%d\t%d\t%d\t%d\t\n", s.Buffers, s.PeakBuffers, s.Allocs, s.Frees)
	w.Flush()
	writeCategories(&buf, d.CategoryStats())
	if s.Held != s.Tracked || s.PeakHeld != s.PeakTracked {
		fmt.Fprintf(&buf, "held: %s, peak held %s (stream-ordered frees not yet executed: %s)\n",
			bytesize.Format(s.Held), bytesize.Format(s.PeakHeld), bytesize.Format(s.Held-s.Tracked))
	}
	if p, err := d.Pool().Stats(); err == nil {
		fmt.Fprintf(&buf, "memory pool: reserved %s (peak %s), used %s (peak %s)\n",
			bytesize.Format(p.PoolReserved), bytesize.Format(p.PeakPoolReserved), bytesize.Format(p.PoolUsed), bytesize.Format(p.PeakPoolUsed))
	}
	u, uerr := d.Usage()
	if uerr == nil && u.GraphErr == nil && d.kind.pooled() {
		fmt.Fprintf(&buf, "graph memory: reserved %s (peak %s), used %s (peak %s)\n",
			bytesize.Format(u.GraphReserved), bytesize.Format(u.PeakGraphReserved), bytesize.Format(u.GraphUsed), bytesize.Format(u.PeakGraphUsed))
	}
	if s.Reservations > 0 {
		fmt.Fprintf(&buf, "address space: %s in %d reservation(s), their mappings in tracked\n", bytesize.Format(s.AddressSpace), s.Reservations)
	}
	fmt.Fprintf(&buf, "failed allocs: %d\n", s.FailedAllocs)
	if s.Leaks > 0 {
		fmt.Fprintf(&buf, "leaks: %d, %s (unreachable without a free)\n", s.Leaks, bytesize.Format(s.LeakedBytes))
	}
	if s.Limit > 0 {
		fmt.Fprintf(&buf, "memory limit: %s (%d bytes)\n", bytesize.Format(s.Limit), s.Limit)
	} else {
		fmt.Fprintf(&buf, "memory limit: none\n")
	}
	if uerr == nil {
		graphs := ""
		if u.GraphReserved > 0 {
			graphs = fmt.Sprintf(" (of which CUDA graphs %s)", bytesize.Format(u.GraphReserved))
		}
		fmt.Fprintf(&buf, "device (reported): %s used of %s, %s free; tracked %s, untracked %s%s\n",
			bytesize.Format(u.Used), bytesize.Format(u.Total), bytesize.Format(u.Free), bytesize.Format(u.Tracked), bytesize.Format(u.Untracked), graphs)
		if u.NotResident > 0 {
			fmt.Fprintf(&buf, "not resident: %s of the tracked bytes not written yet (not in used)\n", bytesize.Format(u.NotResident))
		}
		buf.WriteString(u.processSummary())
	} else {
		fmt.Fprintf(&buf, "device (reported): unavailable: %v\n", uerr)
	}
	return buf.String()
}

// MemoryAllocated returns the bytes held by the device's live buffers: the
// sizes asked for, as counted by this package (torch.cuda.memory_allocated).
func (d Device) MemoryAllocated() int64 {
	if r := d.peek(); r != nil {
		return r.Tracked()
	}
	return 0
}

// MaxMemoryAllocated returns the high-water mark of [Device.MemoryAllocated]
// since the last [Device.ResetPeakMemoryStats] (torch.cuda.max_memory_allocated).
func (d Device) MaxMemoryAllocated() int64 {
	if r := d.peek(); r != nil {
		return r.PeakTracked()
	}
	return 0
}

// ResetPeakMemoryStats sets the peaks (bytes and live buffers, the
// device's and its categories', the device-side peak, the allocation sites
// at the peak where they are recorded, and a CUDA device's memory pool and
// graph memory high-water marks) to their current figures, so that the
// next peak measures what happens from now on (the driver resets graph
// memory's high-water marks by a set of 0, the one value it accepts: to 0
// or to the current figures, its reference does not say; docs/graphs.md).
// The peaks of open [PeakScope]s, and so of running [Device.Measure] calls,
// are their own: it does not move them.
func (d Device) ResetPeakMemoryStats() {
	s, r, err := d.lookup(use)
	if err != nil {
		return
	}
	r.ResetPeak()
	d.peekCategories().resetPeaks()
	if s.held != nil {
		s.held.resetHeldPeak(d.ordinal)
	}
	d.Sites().resetPeak()
}

// ResetAccumulatedMemoryStats sets the cumulative figures (allocations,
// frees, their bytes, failures, leaks) back to zero, the device's and its
// categories'; current figures and peaks stay.
func (d Device) ResetAccumulatedMemoryStats() {
	if _, r, err := d.lookup(use); err == nil {
		d.peekCategories().resetAccumulated(r) // with the device's record, as one step
		d.Leaks().resetAccumulated()
	}
}

// MemoryStats returns a snapshot of the device's statistics.
func (d Device) MemoryStats() Stats {
	r := d.peek()
	if r == nil {
		return Stats{Device: d}
	}
	return statsOf(d, r.Snapshot())
}

// String describes the statistics on one line, each size in IEC units
// (KiB, MiB, GiB) followed by its exact figure in bytes. The device-side
// figures (Held, PeakHeld) are named where they differ from the tracked
// ones.
func (s Stats) String() string {
	limit := "no limit"
	if s.Limit > 0 {
		limit = "limit " + bytesize.Exact(s.Limit)
	}
	held := ""
	if s.Held != s.Tracked || s.PeakHeld != s.PeakTracked {
		held = fmt.Sprintf("held %s, peak held %s; ", bytesize.Exact(s.Held), bytesize.Exact(s.PeakHeld))
	}
	leaks := ""
	if s.Leaks != 0 {
		leaks = fmt.Sprintf("; %d leaks (%s)", s.Leaks, bytesize.Exact(s.LeakedBytes))
	}
	return fmt.Sprintf("%v: tracked %s, peak tracked %s; %s%d buffers (peak %d); %s in %d allocs, %s freed in %d frees; %d failed allocs%s; %s",
		s.Device, bytesize.Exact(s.Tracked), bytesize.Exact(s.PeakTracked), held, s.Buffers, s.PeakBuffers,
		bytesize.Exact(s.AllocBytes), s.Allocs, bytesize.Exact(s.FreedBytes), s.Frees, s.FailedAllocs, leaks, limit)
}

// LogValue returns the statistics as a group, in bytes and counts, for
// [log/slog]: logger.Info("memory", "stats", dev.MemoryStats()).
func (s Stats) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("device", s.Device.String()),
		slog.Int64("tracked", s.Tracked),
		slog.Int64("peak_tracked", s.PeakTracked),
		slog.Int64("held", s.Held),
		slog.Int64("peak_held", s.PeakHeld),
		slog.Int64("alloc_bytes", s.AllocBytes),
		slog.Int64("freed_bytes", s.FreedBytes),
		slog.Int64("buffers", s.Buffers),
		slog.Int64("peak_buffers", s.PeakBuffers),
		slog.Int64("allocs", s.Allocs),
		slog.Int64("frees", s.Frees),
		slog.Int64("failed_allocs", s.FailedAllocs),
		slog.Int64("leaks", s.Leaks),
		slog.Int64("leaked_bytes", s.LeakedBytes),
		slog.Int64("limit", s.Limit),
	)
}

// Expvar returns an [expvar.Var] whose String is a JSON object that maps each
// used device's name ([Device.String]) to its [Stats], read when the variable
// is read. A device with categories ([Device.Category]) has besides, beside
// the fields of Stats, a field Categories: the rows of
// [Device.CategoryStats], the uncategorised one last. Decode a device's
// object into a Stats, or into
//
//	struct {
//		memtrack.Stats
//		Categories []memtrack.CategoryStats
//	}
//
// for its categories as well. Nothing is published by this package; publish
// it under a name of your choice:
//
//	expvar.Publish("memtrack", memtrack.Expvar())
func Expvar() expvar.Var {
	return expvar.Func(func() any {
		m := make(map[string]expvarDevice)
		rangeUsed(func(d Device, r *tracker.Record) {
			m[d.String()] = expvarDevice{Stats: statsOf(d, r.Snapshot()), Categories: d.peekCategories().rows(d, r)}
		})
		return m
	})
}

// expvarDevice is one device's value in [Expvar]: the fields of its Stats
// and, where it has categories, their rows.
type expvarDevice struct {
	Stats
	Categories []CategoryStats `json:",omitempty"`
}

// SetMemoryLimit caps the bytes the device's live buffers may hold: an Alloc
// that would pass it fails with an [*OutOfMemoryError]. Zero removes the
// limit; a negative limit is an error. Buffers already allocated are kept
// even if they exceed a new limit.
func (d Device) SetMemoryLimit(limit int64) error {
	if limit < 0 {
		return fmt.Errorf("%w: memory limit %d on %v is negative (0 removes the limit)", ErrInvalidSize, limit, d)
	}
	_, r, err := d.lookup(use)
	if err != nil {
		return err
	}
	return r.SetLimit(limit)
}

// MemoryLimit returns the device's memory limit, or 0 if none is set.
func (d Device) MemoryLimit() int64 {
	if r := d.peek(); r != nil {
		return r.Limit()
	}
	return 0
}

package otelmetric

import "github.com/memtrack/memtrack"

// reading is everything one collection reads of one device: memtrack's
// counters, and what the driver or OS reports beside them. A failed query
// leaves its figures out, and the rest of the collection goes on.
type reading struct {
	kind    memtrack.Kind
	ordinal int
	name    string // as memtrack writes the device: "cpu", "cuda:0"

	stats memtrack.Stats

	info    memtrack.DeviceInfo
	infoErr error

	free, total int64
	memErr      error

	pool    memtrack.PoolStats
	poolErr error

	graphs    memtrack.GraphStats
	graphsErr error

	usage    memtrack.Usage // for the driver's per-process figures
	usageErr error

	cats []memtrack.CategoryStats // nil for a device without categories
}

// read reads device d.
func read(d memtrack.Device) reading {
	r := reading{kind: d.Kind(), ordinal: d.Ordinal(), name: d.String(), stats: d.MemoryStats()}
	r.info, r.infoErr = d.Info()
	r.free, r.total, r.memErr = d.MemGetInfo()
	r.pool, r.poolErr = d.Pool().Stats()
	r.graphs, r.graphsErr = d.Graphs().Stats()
	r.usage, r.usageErr = d.Usage()
	r.cats = d.CategoryStats()
	return r
}

// readUsed reads every device the process has used.
func readUsed() []reading {
	devs := memtrack.UsedDevices()
	rs := make([]reading, len(devs))
	for i, d := range devs {
		rs[i] = read(d)
	}
	return rs
}

// vendor returns the vendor of a device of kind k, where the kind alone
// tells it: CUDA runs on NVIDIA's GPUs only. A Metal device may be Apple's,
// AMD's or Intel's, and its name is not a reliable guide, so it has none.
func vendor(k memtrack.Kind) string {
	if k == memtrack.KindCUDA {
		return "NVIDIA"
	}
	return ""
}

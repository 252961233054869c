// Package oomdump keeps the evidence of an out-of-memory: installed on a
// device with [Install], it writes, on the device's first refused
// allocation and then at most once per [Options].MinInterval, a directory
// that holds what a post-mortem needs:
//
//	report.txt     the refusal's full report (%+v of the *memtrack.OutOfMemoryError), its categories' rows among it
//	stats.json     the device's statistics (memtrack.Stats) as JSON, with its categories' rows (Categories)
//	inuse.pb.gz    the live buffers by allocation site, for go tool pprof
//	peak.pb.gz     the buffers live at the peak by allocation site, for go tool pprof
//	trace.json     the allocation history as a Chrome trace (Perfetto UI), its marks and spans among it
//
// stats.json decodes into a memtrack.Stats, or, for the categories too, into
//
//	struct {
//		memtrack.Stats
//		Categories []memtrack.CategoryStats
//	}
//
// The profiles need allocation sites ([memtrack.SiteRecorder.Enable])
// and the trace the memory history ([memtrack.HistoryRecorder.Enable]);
// where a device records neither, report.txt says which files are missing
// and why. The package is an observer of [memtrack.Device.OnOutOfMemory]
// over the plain values of package memtrack, like packages pprof and trace
// whose files it writes.
//
// A dump runs on the goroutine whose allocation was refused, before the
// allocation returns its error, which the dump never changes. A dump that
// cannot be written (a directory that does not exist or is not writable, a
// full disk) is reported once through [log/slog] and otherwise ignored.
package oomdump

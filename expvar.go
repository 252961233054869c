package memtrack

import (
	"expvar"

	"github.com/memtrack/memtrack/tracker"
)

// Expvar returns an [expvar.Var] whose String is a JSON object that maps each
// used device's name ([Device.String]) to its [Stats], read when the variable
// is read. Nothing is published by this package; publish it under a name of
// your choice:
//
//	expvar.Publish("memtrack", memtrack.Expvar())
func Expvar() expvar.Var {
	return expvar.Func(func() any {
		m := make(map[string]Stats)
		rangeUsed(func(d Device, r *tracker.Record) {
			m[d.String()] = statsOf(d, r.Snapshot())
		})
		return m
	})
}

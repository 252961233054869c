package memtrack

import "github.com/memtrack/memtrack/tracker"

// UsedDevices returns every device the process has used, in the order of
// [Devices]: those for which a [Device] was obtained with [CUDA], [Metal] or
// [ParseDevice], or on which any method that reads or changes its figures has
// been called. It only reads the device tables: a kind never used stays
// uninitialised, so listing devices never starts a driver.
func UsedDevices() []Device {
	var ds []Device
	rangeUsed(func(d Device, _ *tracker.Record) {
		ds = append(ds, d)
	})
	return ds
}

// rangeUsed calls f for each used device and its record, in the order of
// [Devices], without creating a device table.
func rangeUsed(f func(Device, *tracker.Record)) {
	for k := range numKinds {
		s := tables[k].p.Load()
		if s == nil {
			continue
		}
		s.records.Range(func(i int, r *tracker.Record) bool {
			f(Device{kind: k, ordinal: i}, r)
			return true
		})
	}
}

package memtrack

import "github.com/memtrack/memtrack/tracker"

// UsedDevices returns every device the process has used, in the order of
// [Devices]: those obtained with [CUDA], [Metal] or [ParseDevice], and those
// on which a method other than Kind, Ordinal and String was called (the CPU
// is listed once it has been used so). It only reads the device tables: a
// kind never used stays uninitialised, so listing never starts a driver.
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

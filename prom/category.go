package prom

import (
	"github.com/memtrack/memtrack"
	"github.com/prometheus/client_golang/prometheus"
)

// categoryDescs are the metrics of a device's categories, with the labels
// backend, ordinal and category.
type categoryDescs struct {
	tracked, peakTracked, buffers, peakBuffers *prometheus.Desc
	allocBytes, freedBytes, allocs, frees      *prometheus.Desc
	failedAllocs, limit                        *prometheus.Desc
}

func newCategoryDescs(constLabels prometheus.Labels) categoryDescs {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("memtrack_category_"+name, help, []string{"backend", "ordinal", "category"}, constLabels)
	}
	return categoryDescs{
		tracked:      desc("tracked_bytes", "Bytes memtrack tracks in the category on the device (category uncategorised: outside every category)."),
		peakTracked:  desc("peak_tracked_bytes", "High-water mark of memtrack_category_tracked_bytes since the last peak reset; absent for uncategorised."),
		buffers:      desc("buffers", "Live buffers and tracked handles in the category on the device."),
		peakBuffers:  desc("peak_buffers", "High-water mark of memtrack_category_buffers since the last peak reset; absent for uncategorised."),
		allocBytes:   desc("alloc_bytes_total", "Bytes allocated in the category (requested sizes) since the last reset of the cumulative figures."),
		freedBytes:   desc("freed_bytes_total", "Bytes freed in the category since the last reset of the cumulative figures."),
		allocs:       desc("allocs_total", "Allocations in the category since the last reset of the cumulative figures."),
		frees:        desc("frees_total", "Frees in the category since the last reset of the cumulative figures."),
		failedAllocs: desc("failed_allocs_total", "Requests in the category refused by a memory limit or failed in the backend since the last reset of the cumulative figures."),
		limit:        desc("limit_bytes", "Memory limit on memtrack_category_tracked_bytes; absent where none is set."),
	}
}

func (c categoryDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{c.tracked, c.peakTracked, c.buffers, c.peakBuffers, c.allocBytes, c.freedBytes,
		c.allocs, c.frees, c.failedAllocs, c.limit}
}

// collect sends the rows of one device, whose labels are device.
func (c categoryDescs) collect(ch chan<- prometheus.Metric, device []string, rows []memtrack.CategoryStats) {
	for _, r := range rows {
		send := sender(ch, append(device[:len(device):len(device)], r.Category))
		send(c.tracked, prometheus.GaugeValue, r.Tracked)
		send(c.buffers, prometheus.GaugeValue, r.Buffers)
		send(c.allocBytes, prometheus.CounterValue, r.AllocBytes)
		send(c.freedBytes, prometheus.CounterValue, r.FreedBytes)
		send(c.allocs, prometheus.CounterValue, r.Allocs)
		send(c.frees, prometheus.CounterValue, r.Frees)
		send(c.failedAllocs, prometheus.CounterValue, r.FailedAllocs)
		if r.Category != memtrack.Uncategorised {
			send(c.peakTracked, prometheus.GaugeValue, r.PeakTracked)
			send(c.peakBuffers, prometheus.GaugeValue, r.PeakBuffers)
		}
		if r.Limit > 0 {
			send(c.limit, prometheus.GaugeValue, r.Limit)
		}
	}
}

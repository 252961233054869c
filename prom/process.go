package prom

import (
	"github.com/memtrack/memtrack"
	"github.com/prometheus/client_golang/prometheus"
)

// processDescs are the driver's per-process figures of a device
// ([memtrack.Usage]), with the labels backend and ordinal.
type processDescs struct {
	processUsed, processUntracked, otherProcessesUsed *prometheus.Desc
}

func newProcessDescs(desc func(name, help string) *prometheus.Desc) processDescs {
	return processDescs{
		processUsed:        desc("process_used_bytes", "This process's device memory as the driver accounts it (NVML, on CUDA GPUs), its context included; absent where the driver gives no per-process figures."),
		processUntracked:   desc("process_untracked_bytes", "memtrack_process_used_bytes - memtrack_tracked_bytes: this process's context, libraries and memory allocated without memtrack; absent where the driver gives no per-process figures."),
		otherProcessesUsed: desc("other_processes_used_bytes", "The other processes' device memory as the driver accounts it (NVML, on CUDA GPUs); absent where the driver gives no per-process figures."),
	}
}

// collect sends the figures of u, where it has them.
func (c processDescs) collect(send func(*prometheus.Desc, prometheus.ValueType, int64), u memtrack.Usage) {
	if !u.PerProcess {
		return
	}
	send(c.processUsed, prometheus.GaugeValue, u.ProcessUsed)
	send(c.processUntracked, prometheus.GaugeValue, u.ProcessUntracked)
	send(c.otherProcessesUsed, prometheus.GaugeValue, u.OtherProcessesUsed)
}

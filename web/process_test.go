package web

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
)

func TestProcesses(t *testing.T) {
	var d Device
	processes(&d, memtrack.Usage{Tracked: 10, PerProcess: true, ProcessUsed: 110, ProcessUntracked: 100, OtherProcessesUsed: 70,
		OtherProcesses: []memtrack.ProcessMemory{{PID: 3, Name: "vllm", Used: 50}, {PID: 4, Used: 20}}})
	assert.Equal(t, Device{PerProcess: true, ProcessUsed: 110, ProcessUntracked: 100, OtherProcessesUsed: 70,
		OtherProcesses: []Process{{PID: 3, Name: "vllm", Used: 50}, {PID: 4, Used: 20}}}, d)

	d = Device{}
	processes(&d, memtrack.Usage{Tracked: 10, PerProcessErr: memtrack.ErrPerProcessUnavailable})
	assert.Equal(t, Device{PerProcessError: "memtrack: no per-process figures"}, d, "why, and no figures")
}

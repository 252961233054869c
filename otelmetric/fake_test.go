package otelmetric

import (
	"errors"

	"github.com/memtrack/memtrack"
)

// gpuUUID is the UUID of the fake GPU, in the form nvidia-smi prints.
const gpuUUID = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"

// fakeGPU is a reading of a CUDA device with every figure distinct, so that
// a figure reported under the wrong name shows.
func fakeGPU() reading {
	return reading{
		kind: memtrack.KindCUDA, ordinal: 1, name: "cuda:1",
		stats: memtrack.Stats{
			Tracked: 1 << 20, PeakTracked: 3 << 20, AllocBytes: 7 << 20, FreedBytes: 6 << 20,
			Buffers: 2, PeakBuffers: 5, Allocs: 11, Frees: 9, FailedAllocs: 3, Limit: 64 << 20,
			Held: 2 << 20, PeakHeld: 4 << 20, Leaks: 13, LeakedBytes: 5 << 20,
		},
		info: memtrack.DeviceInfo{Name: "NVIDIA H100 80GB HBM3", UUID: gpuUUID},
		free: 60 << 30, total: 80 << 30,
		pool:   memtrack.PoolStats{PoolReserved: 32 << 20, PeakPoolReserved: 48 << 20, PoolUsed: 16 << 20, PeakPoolUsed: 24 << 20},
		graphs: memtrack.GraphStats{GraphReserved: 12 << 20, PeakGraphReserved: 14 << 20, GraphUsed: 10 << 20, PeakGraphUsed: 13 << 20},
		usage: memtrack.Usage{Tracked: 1 << 20, PerProcess: true, ProcessUsed: 600 << 20, ProcessUntracked: 599 << 20,
			OtherProcessesUsed: 19 << 30, OtherProcesses: []memtrack.ProcessMemory{{PID: 4242, Name: "python3", Used: 19 << 30}}},
		cats: []memtrack.CategoryStats{
			{Category: "kv_cache", Tracked: 1 << 19, PeakTracked: 1 << 21, Buffers: 1, PeakBuffers: 3,
				AllocBytes: 5 << 19, FreedBytes: 4 << 19, Allocs: 7, Frees: 6, FailedAllocs: 2, Limit: 32 << 20},
			{Category: "weights", Tracked: 1 << 18, PeakTracked: 1 << 20, Buffers: 1, PeakBuffers: 1,
				AllocBytes: 1 << 18, Allocs: 1},
			{Category: memtrack.Uncategorised, Tracked: 1 << 18, Buffers: 0, AllocBytes: 3 << 18, FreedBytes: 2 << 18,
				Allocs: 3, Frees: 3, FailedAllocs: 1},
		},
	}
}

// fakeCPU is a reading of the CPU device, which has no pool, no graph
// memory, no UUID and no categories.
func fakeCPU() reading {
	return reading{
		kind: memtrack.KindCPU, name: "cpu",
		stats: memtrack.Stats{Tracked: 4096, PeakTracked: 8192, AllocBytes: 12288, FreedBytes: 8192,
			Buffers: 1, PeakBuffers: 2, Allocs: 3, Frees: 2, Held: 4096, PeakHeld: 8192},
		info: memtrack.DeviceInfo{Name: "Some CPU"},
		free: 3 << 30, total: 4 << 30,
		poolErr:   errors.New("no pool"),
		graphsErr: errors.New("no CUDA graphs"),
	}
}

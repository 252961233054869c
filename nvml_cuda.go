//go:build cuda

package memtrack

import (
	"fmt"
	"sync"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/nvml"
)

// The CUDA backend's half of the per-process figures (processBackend): the
// processes NVML lists on a GPU, found by the UUID the CUDA driver gives it,
// as CUDA_VISIBLE_DEVICES renumbers CUDA's ordinals but not NVML's. NVML is
// opened on the first reading, never on the allocation path, and kept for
// the life of the process, as the primary contexts are.

// nvmlState is the backend's NVML: opened once, or why it cannot be.
type nvmlState struct {
	once sync.Once
	lib  *nvml.Lib
	err  error
}

func (b *cudaBackend) processes(ordinal int) ([]ProcessMemory, error) {
	_, uuid, err := b.info(ordinal)
	if err != nil {
		return nil, err
	}
	if uuid == "" {
		return nil, fmt.Errorf("NVML finds a GPU by its UUID: %w", cudadrv.UUIDs())
	}
	b.nvml.once.Do(func() { b.nvml.lib, b.nvml.err = nvml.Open() })
	if b.nvml.err != nil {
		return nil, b.nvml.err
	}
	list, err := b.nvml.lib.Processes(uuid)
	if err != nil {
		return nil, fmt.Errorf("NVML on %s: %w", uuid, err)
	}
	out := make([]ProcessMemory, len(list))
	for i, p := range list {
		out[i] = ProcessMemory{PID: p.PID, Name: p.Name, Used: int64(p.Used)}
	}
	return out, nil
}

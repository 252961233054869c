//go:build cuda

package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/cudadrv"
)

// The CUDA backend's half of the per-process figures (processBackend): the
// processes NVML lists on a GPU, found by the UUID the CUDA driver gives it,
// as CUDA_VISIBLE_DEVICES renumbers CUDA's ordinals but not NVML's. NVML is
// opened on the first reading, never on the allocation path, and kept for
// the life of the process, as the primary contexts are.

func (b *cudaBackend) processes(ordinal int) ([]ProcessMemory, error) {
	_, uuid, err := b.info(ordinal)
	if err != nil {
		return nil, err
	}
	if uuid == "" {
		return nil, fmt.Errorf("NVML finds a GPU by its UUID: %w", cudadrv.UUIDs())
	}
	list, err := b.nvml.Processes(uuid)
	if err != nil {
		return nil, err
	}
	out := make([]ProcessMemory, len(list))
	for i, p := range list {
		out[i] = ProcessMemory{PID: p.PID, Name: p.Name, Used: int64(p.Used)}
	}
	return out, nil
}

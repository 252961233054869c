//go:build cuda

package prom

import (
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
)

// TestCollectorCUDAInfo scrapes memtrack_device_info of cuda:0 from the
// driver the process loads (the fake of testdata/fakecuda under
// scripts/test-cuda.sh): its uuid label is the GPU's UUID, in the form
// dcgm-exporter's UUID label has. It runs in a process of its own, since
// using cuda:0 adds it to the used devices that other tests list.
func TestCollectorCUDAInfo(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_PROM_CHILD") {
		return
	}
	d, info := rendertest.CUDA0(t)

	c := of(NewCollector(), nil, d)
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	want := expect(`backend="cuda",name="`+esc.Replace(info.Name)+`",ordinal="0",uuid="`+info.UUID+`"`, infoText)
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "memtrack_device_info"))
}

// TestCollectorCUDAProcesses scrapes the per-process metrics of cuda:0
// where the machine's NVML gives them (the fake of testdata/fakenvml
// under scripts/test-cuda.sh): this process's figure is at least its
// tracked bytes, and the metrics agree with Usage.
func TestCollectorCUDAProcesses(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_PROM_CHILD") {
		return
	}
	d, _ := rendertest.CUDA0(t)
	b, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	u, err := d.Usage()
	if err != nil || !u.PerProcess {
		t.Skipf("no per-process figures here: %v %v", err, u.PerProcessErr)
	}
	c := of(NewCollector(), nil, d)
	assert.Equal(t, 3, testutil.CollectAndCount(c, "memtrack_process_used_bytes", "memtrack_process_untracked_bytes", "memtrack_other_processes_used_bytes"))
	assert.GreaterOrEqual(t, u.ProcessUsed, u.Tracked)
	assert.Equal(t, u.ProcessUsed-u.Tracked, u.ProcessUntracked)
}
